#include "torch_legacy_reader.h"

#include "io/byte_reader.h"
#include "io/tar_archive.h"
#include "pickle/opcode_scan.h"
#include "pickle/unpickler.h"
#include "torch/pickled_checkpoint.h"
#include "util/error.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

namespace sl {

namespace {

// 0x1950a86a20f9469cfc6c as LONG1 payload (little-endian) and as Python's decimal text.
constexpr uint8_t kMagicLE[10] = { 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19 };
constexpr std::string_view kMagicDecimal = "119547037146038801333356";
constexpr int64_t kProtocolVersion = 1001;

bool isMagic(const pickle::Value* v)
{
    if (!v || v->kind != pickle::Kind::BigInt)
        return false;
    auto* b = static_cast<const pickle::BigIntValue*>(v);
    if (b->decimal)
        return b->bytes == kMagicDecimal;
    return b->bytes.size() == sizeof kMagicLE && std::memcmp(b->bytes.data(), kMagicLE, sizeof kMagicLE) == 0;
}

// The pre-0.1.10 layout: a tar of `sys_info`, `storages` (count, then per storage a pickled
// (key, location, storage class) and a u64 element count plus the bytes, then a pickled list of views
// (target, root, offset, numel)), `tensors` (count, then per tensor a pickled (key, storage key, type) and
// int32 ndim, 4 padding bytes, ndim int64 sizes, ndim int64 strides, int64 storage offset), and `pickle`,
// whose persistent ids are those keys.
// The pickle that starts at `pos` (and ends before `end`): read in a window grown until the opcode scan finds
// its STOP (pickles here are small; the raw storage data around them is never read), kept alive in `ck`.
Bytes pickleAt(torch::PickledCheckpoint& ck, const InputFile& file, uint64_t pos, uint64_t end)
{
    if (pos > end)
        throw FormatError("a pickle at " + std::to_string(pos) + " starts past the end of its member");
    uint64_t want = std::min<uint64_t>(end - pos, 64 << 10);
    while (true) {
        auto region = file.region(pos, want);
        const pickle::PickleScan scan = pickle::scanPickle(region->bytes(), pos, 0);
        if (!scan.ranOut || want == end - pos) {
            ck.regions.push_back(region);
            return region->bytes();
        }
        want = std::min(end - pos, want * 4);
    }
}

// Reads little- or big-endian unsigned integers of the file at a moving position.
struct FileCursor {
    const InputFile& file;
    uint64_t pos;
    uint64_t end;
    uint64_t u64(bool littleEndian, const char* what)
    {
        uint8_t b[8];
        if (end - pos < 8)
            throw FormatError(std::string("truncated ") + what + " at byte " + std::to_string(pos));
        file.readInto(pos, b);
        pos += 8;
        return ByteReader(Bytes(b)).u64(littleEndian, what);
    }
    uint32_t u32le(const char* what)
    {
        uint8_t b[4];
        if (end - pos < 4)
            throw FormatError(std::string("truncated ") + what + " at byte " + std::to_string(pos));
        file.readInto(pos, b);
        pos += 4;
        return ByteReader(Bytes(b)).u32le(what);
    }
    void skip(uint64_t n, const char* what)
    {
        if (n > end - pos)
            throw FormatError(std::string("truncated ") + what + " at byte " + std::to_string(pos) + ": needs " + std::to_string(n)
                + " bytes, " + std::to_string(end - pos) + " remain");
        pos += n;
    }
    uint64_t remaining() const { return end - pos; }
};

void readTarLayout(const std::shared_ptr<torch::PickledCheckpoint>& ck, const InputFile& file, Source& out)
{
    auto members = listTarMembers(file);
    auto find = [&](const char* name) -> const TarMember* {
        for (const auto& m : members)
            if (m.name == name)
                return &m;
        return nullptr;
    };
    const TarMember* storages = find("storages");
    const TarMember* main = find("pickle");
    if (!storages || !main)
        throw FormatError("tar archive without 'storages' and 'pickle' members; not a torch.save file");
    pickle::InertSemantics inert;
    bool littleEndian = true;
    if (const TarMember* sys = find("sys_info")) {
        pickle::Unpickler u(pickleAt(*ck, file, sys->offset, sys->offset + sys->size), ck->arena, inert, sys->offset);
        if (auto* d = pickle::asDict(u.load())) {
            int64_t le = 1;
            if (pickle::toInt(d->lookup("little_endian"), le))
                littleEndian = le != 0;
        }
    }
    out.metadata.emplace_back("layout", "tar (torch < 0.1.10)");
    auto& sem = ck->semantics;

    // Each pickle in a member runs over the member's remaining bytes; raw data sits between them.
    auto keyText = [&](pickle::Value* v) {
        if (auto* s = pickle::asStr(v))
            return std::string(s->s);
        int64_t i = 0;
        if (pickle::toInt(v, i))
            return std::to_string(i);
        throw FormatError("tar storage key is neither a string nor an integer");
    };
    // The members 'storages' and 'tensors' are each a count, then that many pickles with raw data between.
    auto nextPickle = [&](FileCursor& r, pickle::Semantics& s) {
        pickle::Unpickler u(pickleAt(*ck, file, r.pos, r.end), ck->arena, s, r.pos);
        pickle::Value* v = u.load();
        r.skip(u.consumed(), "pickle");
        return v;
    };
    auto countAt = [&](FileCursor& r, const char* member, const char* what) {
        int64_t count = 0;
        if (!pickle::toInt(nextPickle(r, inert), count) || count < 0)
            throw FormatError(std::string("tar '") + member + "' does not start with a " + what + " count");
        return count;
    };
    {
        FileCursor r { file, storages->offset, storages->offset + storages->size };
        auto next = [&](pickle::Semantics& s) { return nextPickle(r, s); };
        const int64_t count = countAt(r, "storages", "storage");
        for (int64_t i = 0; i < count; ++i) {
            auto* t = pickle::asSeq(next(sem));
            if (!t || t->items.size() < 3)
                throw FormatError("tar storage header is not (key, location, storage class)");
            std::string key = keyText(t->items[0]);
            auto loc = pickle::asStr(t->items[1]);
            uint64_t n = r.u64(littleEndian, "storage element count");
            pickle::Unpickler dummy(Bytes {}, ck->arena, inert);
            pickle::StorageValue* s = sem.storage(dummy, t->items[2], ck->arena.copy(key), loc ? loc->s : "cpu",
                static_cast<int64_t>(std::min<uint64_t>(n, INT64_MAX)));
            unsigned item = s->untyped ? 1 : std::max(1u, dtypeItemSize(s->dtype));
            if (n > r.remaining() / item)
                throw FormatError("tar storage " + key + " claims more bytes than the member holds (at byte " + std::to_string(r.pos) + ")");
            s->fileOffset = static_cast<int64_t>(r.pos);
            r.skip(n * item, "storage data");
            sem.addPrebuilt(key, s);
        }
        if (r.remaining() > 0) {
            if (auto* views = pickle::asSeq(next(inert))) {
                for (auto* v : views->items) {
                    auto* t = pickle::asSeq(v);
                    int64_t offset = 0;
                    int64_t numel = 0;
                    if (!t || t->items.size() < 4 || !pickle::toInt(t->items[2], offset) || !pickle::toInt(t->items[3], numel)
                        || offset < 0 || numel < 0)
                        throw FormatError("malformed tar storage view");
                    std::string target = keyText(t->items[0]);
                    std::string rootKey = keyText(t->items[1]);
                    auto* root = sem.storagesByKey(rootKey);
                    if (!root)
                        throw FormatError("tar storage view of unknown storage " + rootKey);
                    pickle::Unpickler dummy(Bytes {}, ck->arena, inert);
                    sem.addPrebuilt(target, sem.view(dummy, root, ck->arena.copy(target), offset, numel));
                }
            }
        }
    }
    if (const TarMember* tensors = find("tensors")) {
        FileCursor r { file, tensors->offset, tensors->offset + tensors->size };
        auto next = [&](pickle::Semantics& s) { return nextPickle(r, s); };
        const int64_t count = countAt(r, "tensors", "tensor");
        for (int64_t i = 0; i < count; ++i) {
            auto* t = pickle::asSeq(next(inert));
            if (!t || t->items.size() < 2)
                throw FormatError("tar tensor header is not (key, storage key, type)");
            std::string key = keyText(t->items[0]);
            std::string storageKey = keyText(t->items[1]);
            uint32_t ndim = r.u32le("tensor ndim");
            r.skip(4, "tensor header");
            if (ndim > 64)
                throw FormatError("tensor with " + std::to_string(ndim) + " dimensions (at byte " + std::to_string(r.pos) + ")");
            auto* tv = ck->arena.make<pickle::TensorValue>();
            auto dims = ck->arena.array<int64_t>(2 * ndim); // the sizes, then the strides, as the file has them
            for (size_t i = 0; i < dims.size(); ++i)
                dims[i] = static_cast<int64_t>(r.u64(true, i < ndim ? "tensor size" : "tensor stride"));
            tv->storageOffset = static_cast<int64_t>(r.u64(true, "tensor storage offset"));
            tv->setDims(dims.data(), static_cast<uint8_t>(ndim), true);
            tv->storage = sem.storagesByKey(storageKey);
            if (!tv->storage)
                throw FormatError("tar tensor " + key + " uses unknown storage " + storageKey);
            tv->dtype = tv->storage->dtype;
            for (int64_t d : tv->size())
                if (d < 0)
                    throw FormatError("tar tensor " + key + " has a negative size");
            sem.addPrebuilt(key, tv);
        }
    }
    for (const TarMember* m : { find("sys_info"), main })
        if (m)
            ck->safety.add("the tar's " + m->name + " member", pickle::scanPickle(pickleAt(*ck, file, m->offset, m->offset + m->size), m->offset));
    pickle::Unpickler u(pickleAt(*ck, file, main->offset, main->offset + main->size), ck->arena, sem, main->offset);
    ck->root = u.load();
}

} // namespace

bool looksLikeLegacyTorch(Bytes data)
{
    std::string_view head(reinterpret_cast<const char*>(data.data()), std::min<size_t>(data.size(), 40));
    if (head.substr(0, 1 + kMagicDecimal.size()) == std::string("L") + std::string(kMagicDecimal))
        return true;
    // Protocol >= 2: PROTO n [FRAME len] LONG1 10 <magic>
    if (data.size() < 14 || data[0] != 0x80)
        return false;
    size_t at = 2;
    if (data[2] == 0x95)
        at = 11;
    return data.size() >= at + 12 && data[at] == 0x8a && data[at + 1] == 10
        && std::memcmp(data.data() + at + 2, kMagicLE, sizeof kMagicLE) == 0;
}

Source readTorchLegacy(const std::shared_ptr<const InputFile>& file, const OpenOptions& options)
{
    Source out;
    out.path = file->path();
    out.format = SourceFormat::TorchLegacy;
    out.files.push_back(file->path());
    torch::LoadSafety safety;
    try {
        std::vector<uint8_t> headBuffer;
        if (looksLikeTar(file->prefix(512, headBuffer))) {
            auto ck = std::make_shared<torch::PickledCheckpoint>(torch::TorchSemantics::PersistentIds::Tar);
            ck->fileSize = file->size();
            readTarLayout(ck, *file, out);
            torch::finishSource(ck, out, options.container ? &*options.container : nullptr, options.timings, options.deferEntries);
            return out;
        }
        auto ck = std::make_shared<torch::PickledCheckpoint>(torch::TorchSemantics::PersistentIds::Legacy);
        ck->fileSize = file->size();
        // torch.load runs all five pickles (magic number, protocol, sys_info, the object, storage keys), and
        // the first before it checks anything: each is scanned before any is run. They sit at the start of the
        // file, the storages' bytes after them; only the pickles are read, in a region grown until the scan
        // finds the fifth STOP.
        std::shared_ptr<const Region> pickles;
        {
            static constexpr const char* kPickles[] = { "the magic-number pickle", "the protocol pickle",
                "the sys_info pickle", "the main pickle", "the storage-key pickle" };
            for (uint64_t want = std::min<uint64_t>(file->size(), 1 << 20);; want = std::min(file->size(), want * 4)) {
                pickles = file->region(0, want);
                const Bytes all = pickles->bytes();
                torch::LoadSafety scanned;
                uint64_t at = 0;
                bool complete = true;
                for (const char* what : kPickles) {
                    if (at >= all.size()) {
                        complete = false;
                        break;
                    }
                    pickle::PickleScan scan = pickle::scanPickle(all.subspan(at), at);
                    if (!scan.complete) {
                        // Bytes that end the pickle early may just be the end of the prefix read so far;
                        // anything else (a bad opcode) stops the scan where a longer prefix would too.
                        complete = !scan.ranOut;
                        if (!scan.ranOut || want == file->size())
                            scanned.add(what, scan);
                        break;
                    }
                    scanned.add(what, scan);
                    at += scan.consumed;
                }
                if (complete || want == file->size()) {
                    safety = scanned;
                    break;
                }
            }
            ck->safety = safety;
            ck->regions.push_back(pickles);
        }
        const Bytes all = pickles->bytes();
        size_t pos = 0;
        pickle::InertSemantics inert;
        auto runPickle = [&](pickle::Semantics& sem) {
            pickle::Unpickler u(all.subspan(pos), ck->arena, sem, pos);
            u.setControl(options.control);
            pickle::Value* v = u.load();
            pos += u.consumed();
            return v;
        };
        if (!isMagic(runPickle(inert)))
            throw FormatError("bad magic number; not a legacy torch.save file");
        int64_t protocol = 0;
        if (!pickle::toInt(runPickle(inert), protocol) || protocol != kProtocolVersion)
            throw FormatError("unsupported legacy protocol version (expected 1001)");
        bool littleEndian = true;
        if (auto* sys = pickle::asDict(runPickle(inert))) {
            int64_t le = 1;
            if (pickle::toInt(sys->lookup("little_endian"), le))
                littleEndian = le != 0;
            if (auto* sizes = pickle::asDict(sys->lookup("type_sizes"))) {
                int64_t longSize = 0;
                if (pickle::toInt(sizes->lookup("long"), longSize))
                    out.metadata.emplace_back("type_sizes.long", std::to_string(longSize));
            }
        }
        out.metadata.emplace_back("little_endian", littleEndian ? "true" : "false");
        if (!littleEndian) {
            ck->context.bigEndian = true;
            out.addFinding(Severity::Info, "tensor data is big-endian (sys_info)");
        }

        ck->root = runPickle(ck->semantics);
        auto* keys = pickle::asSeq(runPickle(inert));
        if (!keys)
            throw FormatError("the storage key list is missing");

        // Walk the storage section: for each key, a u64 count then the bytes (only the counts are read).
        std::unordered_map<std::string_view, pickle::StorageValue*> byKey;
        for (auto* s : ck->semantics.storages())
            if (!s->viewOf())
                byKey.emplace(s->key, s);
        FileCursor r { *file, pos, file->size() };
        for (size_t i = 0; i < keys->items.size(); ++i) {
            auto* k = pickle::asStr(keys->items[i]);
            auto it = k ? byKey.find(k->s) : byKey.end();
            if (it == byKey.end()) {
                out.addFinding(Severity::Danger,
                    "storage key list names a storage the pickle never uses; the storages after it cannot be located");
                break;
            }
            pickle::StorageValue* s = it->second;
            uint64_t count = r.u64(littleEndian, "storage element count");
            unsigned item = s->untyped ? 1 : std::max(1u, dtypeItemSize(s->dtype));
            if (count > r.remaining() / item)
                throw FormatError("storage " + std::string(s->key) + " claims " + std::to_string(count) + " elements of "
                    + std::to_string(item) + " bytes, more than the file holds (at byte " + std::to_string(r.pos) + ")");
            if (count != static_cast<uint64_t>(s->numel))
                out.addFinding(Severity::Danger,
                    "storage " + std::string(s->key) + " holds " + std::to_string(count) + " elements but the pickle says "
                        + std::to_string(s->numel) + "; torch.load would fail");
            s->fileOffset = static_cast<int64_t>(r.pos);
            r.skip(count * item, "storage data");
        }
        if (r.remaining() > 0)
            out.addFinding(Severity::Info, std::to_string(r.remaining()) + " bytes follow the last storage");

        const std::string* container = options.container ? &*options.container : nullptr;
        torch::finishSource(ck, out, container, options.timings, options.deferEntries);
    } catch (const FormatError& e) {
        throw LoadError(file->path(), safety.withDangers(e.what()));
    }
    return out;
}

} // namespace sl
