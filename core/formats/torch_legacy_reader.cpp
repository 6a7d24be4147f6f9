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
void readTarLayout(const std::shared_ptr<torch::PickledCheckpoint>& ck, Bytes all, Source& out)
{
    auto members = listTarMembers(all);
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
        pickle::Unpickler u(all.subspan(sys->offset, sys->size), ck->arena, inert, sys->offset);
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
    {
        ByteReader r(all.subspan(storages->offset, storages->size), storages->offset);
        auto next = [&](pickle::Semantics& s) {
            pickle::Unpickler u(all.subspan(r.absolutePosition(), r.remaining()), ck->arena, s, r.absolutePosition());
            pickle::Value* v = u.load();
            r.skip(u.consumed(), "pickle");
            return v;
        };
        int64_t count = 0;
        if (!pickle::toInt(next(inert), count) || count < 0)
            throw FormatError("tar 'storages' does not start with a storage count");
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
                r.fail("tar storage " + key + " claims more bytes than the member holds");
            s->fileOffset = static_cast<int64_t>(r.absolutePosition());
            s->recordSize = n * item;
            r.skip(n * item, "storage data");
            sem.addPrebuilt(key, s);
        }
        if (!r.atEnd()) {
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
        ByteReader r(all.subspan(tensors->offset, tensors->size), tensors->offset);
        auto next = [&](pickle::Semantics& s) {
            pickle::Unpickler u(all.subspan(r.absolutePosition(), r.remaining()), ck->arena, s, r.absolutePosition());
            pickle::Value* v = u.load();
            r.skip(u.consumed(), "pickle");
            return v;
        };
        int64_t count = 0;
        if (!pickle::toInt(next(inert), count) || count < 0)
            throw FormatError("tar 'tensors' does not start with a tensor count");
        for (int64_t i = 0; i < count; ++i) {
            auto* t = pickle::asSeq(next(inert));
            if (!t || t->items.size() < 2)
                throw FormatError("tar tensor header is not (key, storage key, type)");
            std::string key = keyText(t->items[0]);
            std::string storageKey = keyText(t->items[1]);
            uint32_t ndim = r.u32le("tensor ndim");
            r.skip(4, "tensor header");
            if (ndim > 64)
                r.fail("tensor with " + std::to_string(ndim) + " dimensions");
            auto* tv = ck->arena.make<pickle::TensorValue>();
            auto sizes = ck->arena.array<int64_t>(ndim);
            auto strides = ck->arena.array<int64_t>(ndim);
            for (auto& d : sizes)
                d = static_cast<int64_t>(r.u64(true, "tensor size"));
            for (auto& d : strides)
                d = static_cast<int64_t>(r.u64(true, "tensor stride"));
            tv->storageOffset = static_cast<int64_t>(r.u64(true, "tensor storage offset"));
            tv->size = sizes;
            tv->stride = strides;
            tv->storage = sem.storagesByKey(storageKey);
            if (!tv->storage)
                throw FormatError("tar tensor " + key + " uses unknown storage " + storageKey);
            tv->dtype = tv->storage->dtype;
            tv->device = tv->storage->location;
            for (int64_t d : sizes)
                if (d < 0)
                    throw FormatError("tar tensor " + key + " has a negative size");
            sem.addPrebuilt(key, tv);
        }
    }
    for (const TarMember* m : { find("sys_info"), main })
        if (m)
            ck->safety.add("the tar's " + m->name + " member", pickle::scanPickle(all.subspan(m->offset, m->size), m->offset));
    pickle::Unpickler u(all.subspan(main->offset, main->size), ck->arena, sem, main->offset);
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

Source readTorchLegacy(const std::shared_ptr<const MappedFile>& file, const OpenOptions& options)
{
    Source out;
    out.path = file->path();
    out.format = "torch-legacy";
    out.files.push_back(file->path());
    torch::LoadSafety safety;
    try {
        Bytes all = file->bytes();
        if (looksLikeTar(all)) {
            auto ck = std::make_shared<torch::PickledCheckpoint>(torch::TorchSemantics::PersistentIds::Tar);
            ck->file = file;
            readTarLayout(ck, all, out);
            torch::finishSource(ck, out, options.container ? &*options.container : nullptr, options.timings);
            return out;
        }
        auto ck = std::make_shared<torch::PickledCheckpoint>(torch::TorchSemantics::PersistentIds::Legacy);
        ck->file = file;
        // torch.load runs all five pickles (magic number, protocol, sys_info, the object, storage keys), and
        // the first before it checks anything: each is scanned before any is run.
        {
            static constexpr const char* kPickles[] = { "the magic-number pickle", "the protocol pickle",
                "the sys_info pickle", "the main pickle", "the storage-key pickle" };
            uint64_t at = 0;
            for (const char* what : kPickles) {
                if (at >= all.size())
                    break;
                pickle::PickleScan scan = pickle::scanPickle(all.subspan(at), at);
                safety.add(what, scan);
                if (!scan.complete)
                    break;
                at += scan.consumed;
            }
            ck->safety = safety;
        }
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

        // Walk the storage section: for each key, a u64 count then the bytes.
        std::unordered_map<std::string_view, pickle::StorageValue*> byKey;
        for (auto* s : ck->semantics.storages())
            if (!s->viewOf)
                byKey.emplace(s->key, s);
        ByteReader r(all.subspan(pos), pos);
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
                r.fail("storage " + std::string(s->key) + " claims " + std::to_string(count) + " elements of "
                    + std::to_string(item) + " bytes, more than the file holds");
            if (count != static_cast<uint64_t>(s->numel))
                out.addFinding(Severity::Danger,
                    "storage " + std::string(s->key) + " holds " + std::to_string(count) + " elements but the pickle says "
                        + std::to_string(s->numel) + "; torch.load would fail");
            s->fileOffset = static_cast<int64_t>(r.absolutePosition());
            s->recordSize = count * item;
            r.skip(count * item, "storage data");
        }
        if (!r.atEnd())
            out.addFinding(Severity::Info, std::to_string(r.remaining()) + " bytes follow the last storage");

        const std::string* container = options.container ? &*options.container : nullptr;
        torch::finishSource(ck, out, container, options.timings);
    } catch (const FormatError& e) {
        throw LoadError(file->path(), safety.withDangers(e.what()));
    }
    return out;
}

} // namespace sl
