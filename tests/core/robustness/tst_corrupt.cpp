// Corrupt and hostile inputs, generated here (no blobs are committed), in the style of llama.cpp's
// test-gguf handcrafted files: for each format a small valid file is built by a tiny writer below, then
// damaged every way that is cheap to enumerate: every truncation, seeded byte mutations, huge length
// fields, bad magic, offsets outside the file, and pickles with cycles, deep nesting and memo bombs.
//
// The contract checked for every case: the core returns a Source, or throws an sl::LoadError whose what()
// starts with the file name and is one line. Nothing else may escape, and each case must finish quickly
// (a hang or a runaway walk shows up as a case over the time limit). `statelens ls` on corrupt files
// exits with code 2 and prints one line to stderr.

#include "common/test_paths.h"
#include "formats/loader.h"
#include "model/source.h"
#include "report/source_report.h"
#include "util/error.h"
#include "model/compact_dims.h"
#include "model/compact_string.h"
#include "model/compact_vector.h"
#include "io/json_writer.h"
#include "util/name_index.h"

#include <QElapsedTimer>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTest>

#include <zlib.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using Blob = std::vector<uint8_t>;

// Generous for a Debug + ASan build; real cases take milliseconds, a hang takes forever.
// A hang or a runaway walk takes far longer. Sanitized builds run 2-5x slower (inflating the 64 MiB deflate
// bomb took 2.2 s under ASan on a loaded 2-core machine), so their limit is scaled, not their cases dropped.
constexpr qint64 kCaseLimitMs = STATELENS_SANITIZED ? 6000 : 2000;

void append(Blob& b, std::string_view s)
{
    b.insert(b.end(), s.begin(), s.end());
}
void append(Blob& b, const Blob& s)
{
    b.insert(b.end(), s.begin(), s.end());
}
void u8(Blob& b, uint8_t v)
{
    b.push_back(v);
}
void u16(Blob& b, uint16_t v)
{
    for (int i = 0; i < 2; ++i)
        b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void u32(Blob& b, uint32_t v)
{
    for (int i = 0; i < 4; ++i)
        b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void u64(Blob& b, uint64_t v)
{
    for (int i = 0; i < 8; ++i)
        b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void poke32(Blob& b, size_t at, uint32_t v)
{
    for (int i = 0; i < 4; ++i)
        b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
void poke64(Blob& b, size_t at, uint64_t v)
{
    for (int i = 0; i < 8; ++i)
        b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
size_t find(const Blob& b, std::string_view needle, size_t from = 0)
{
    auto it = std::search(b.begin() + static_cast<std::ptrdiff_t>(from), b.end(), needle.begin(), needle.end());
    return it == b.end() ? std::string::npos : static_cast<size_t>(it - b.begin());
}

// ---- a pickle writer: opcodes by name, enough for what torch.save writes ----

class Pickle {
public:
    Blob b;

    Pickle& proto(uint8_t p = 2) { return op(0x80).byte(p); }
    Pickle& op(uint8_t o) { return byte(o); }
    Pickle& byte(uint8_t v)
    {
        u8(b, v);
        return *this;
    }
    Pickle& raw(std::string_view s)
    {
        append(b, s);
        return *this;
    }
    Pickle& str(std::string_view s) // BINUNICODE
    {
        u8(b, 'X');
        u32(b, static_cast<uint32_t>(s.size()));
        append(b, s);
        return *this;
    }
    Pickle& integer(int32_t v) // BININT
    {
        u8(b, 'J');
        u32(b, static_cast<uint32_t>(v));
        return *this;
    }
    Pickle& global(std::string_view module, std::string_view name)
    {
        u8(b, 'c');
        append(b, module);
        u8(b, '\n');
        append(b, name);
        u8(b, '\n');
        return *this;
    }
    Pickle& mark() { return op('('); }
    Pickle& tuple() { return op('t'); }
    Pickle& emptyTuple() { return op(')'); }
    Pickle& emptyDict() { return op('}'); }
    Pickle& emptyList() { return op(']'); }
    Pickle& setItem() { return op('s'); }
    Pickle& setItems() { return op('u'); }
    Pickle& append_() { return op('a'); }
    Pickle& appends() { return op('e'); }
    Pickle& reduce() { return op('R'); }
    Pickle& build() { return op('b'); }
    Pickle& persid() { return op('Q'); }
    Pickle& none() { return op('N'); }
    Pickle& boolean(bool v) { return op(v ? 0x88 : 0x89); }
    Pickle& pop() { return op('0'); }
    Pickle& put(uint32_t i)
    {
        u8(b, 'r');
        u32(b, i);
        return *this;
    }
    Pickle& get(uint32_t i)
    {
        u8(b, 'j');
        u32(b, i);
        return *this;
    }
    Pickle& stop() { return op('.'); }
    Pickle& num(int64_t x) // BININT, or LONG1 of 8 bytes beyond int32
    {
        if (x >= INT32_MIN && x <= INT32_MAX)
            return integer(static_cast<int32_t>(x));
        u8(b, 0x8a);
        u8(b, 8);
        u64(b, static_cast<uint64_t>(x));
        return *this;
    }
    Pickle& ints(const std::vector<int64_t>& v)
    {
        mark();
        for (int64_t x : v)
            num(x);
        return tuple();
    }
    // ('storage', torch.FloatStorage, key, 'cpu', numel[, None]) as a persistent id.
    Pickle& storage(std::string_view key, int64_t numel, bool legacy = false)
    {
        mark().str("storage").global("torch", "FloatStorage").str(key).str("cpu").num(numel);
        if (legacy)
            none();
        return tuple().persid();
    }
    // The arguments of _rebuild_tensor_v2 after the storage: offset, size, stride, False, OrderedDict().
    Pickle& geometry(int64_t offset, const std::vector<int64_t>& size, const std::vector<int64_t>& stride)
    {
        num(offset).ints(size).ints(stride).boolean(false);
        return global("collections", "OrderedDict").emptyTuple().reduce();
    }
    // torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict()).
    Pickle& tensor(std::string_view key, int64_t numel, int64_t offset, const std::vector<int64_t>& size,
        const std::vector<int64_t>& stride, bool legacy = false)
    {
        global("torch._utils", "_rebuild_tensor_v2").mark().storage(key, numel, legacy).geometry(offset, size, stride);
        return tuple().reduce();
    }
    // The 4-tuple of _rebuild_from_type_v2 arguments, whose func is _rebuild_from_type_v2 again `depth` times.
    Pickle& fromTypeArgs(int depth)
    {
        mark();
        if (depth == 0) {
            global("torch._utils", "_rebuild_tensor_v2").global("torch", "Tensor");
            mark().storage("0", 6).geometry(0, { 6 }, { 1 }).tuple();
        } else {
            global("torch._tensor", "_rebuild_from_type_v2").global("torch", "Tensor").fromTypeArgs(depth - 1);
        }
        return emptyDict().tuple();
    }
};

// The state dict every torch writer below uses: two storages, a view sharing the first, an int.
Blob stateDictPickle(bool legacy, uint8_t protocol = 2)
{
    Pickle p;
    p.proto(protocol).emptyDict().mark();
    p.str("layer.weight").tensor("0", 6, 0, { 2, 3 }, { 3, 1 }, legacy);
    p.str("layer.bias").tensor("1", 3, 0, { 3 }, { 1 }, legacy);
    p.str("tied").tensor("0", 6, 2, { 2 }, { 1 }, legacy);
    p.str("step").integer(7);
    p.setItems().stop();
    return p.b;
}

// ---- container writers ----

struct ZipRecord {
    std::string name;
    Blob data;
    bool deflate = false;
};

Blob rawDeflate(const Blob& in)
{
    z_stream zs {};
    deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    Blob out(deflateBound(&zs, static_cast<uLong>(in.size())) + 16);
    zs.next_in = const_cast<Bytef*>(in.data());
    zs.avail_in = static_cast<uInt>(in.size());
    zs.next_out = out.data();
    zs.avail_out = static_cast<uInt>(out.size());
    deflate(&zs, Z_FINISH);
    out.resize(zs.total_out);
    deflateEnd(&zs);
    return out;
}

// A zip as PyTorchStreamWriter lays it out (sizes in the local headers too, for simplicity), with the
// ZIP64 end records torch always writes when `zip64`.
Blob zipArchive(const std::vector<ZipRecord>& records, bool zip64 = true)
{
    Blob out;
    Blob cd;
    for (const auto& r : records) {
        Blob data = r.deflate ? rawDeflate(r.data) : r.data;
        uint32_t crc = static_cast<uint32_t>(crc32(0, r.data.data(), static_cast<uInt>(r.data.size())));
        uint32_t offset = static_cast<uint32_t>(out.size());
        u32(out, 0x04034b50);
        u16(out, 20);
        u16(out, 0);
        u16(out, r.deflate ? 8 : 0);
        u32(out, 0); // time, date
        u32(out, crc);
        u32(out, static_cast<uint32_t>(data.size()));
        u32(out, static_cast<uint32_t>(r.data.size()));
        u16(out, static_cast<uint16_t>(r.name.size()));
        u16(out, 0);
        append(out, r.name);
        append(out, data);

        u32(cd, 0x02014b50);
        u16(cd, 20);
        u16(cd, 20);
        u16(cd, 0);
        u16(cd, r.deflate ? 8 : 0);
        u32(cd, 0);
        u32(cd, crc);
        u32(cd, static_cast<uint32_t>(data.size()));
        u32(cd, static_cast<uint32_t>(r.data.size()));
        u16(cd, static_cast<uint16_t>(r.name.size()));
        u16(cd, 0); // extra
        u16(cd, 0); // comment
        u16(cd, 0); // disk
        u16(cd, 0); // internal attributes
        u32(cd, 0); // external attributes
        u32(cd, offset);
        append(cd, r.name);
    }
    uint64_t cdOffset = out.size();
    append(out, cd);
    if (zip64) {
        uint64_t z64 = out.size();
        u32(out, 0x06064b50);
        u64(out, 44);
        u16(out, 45);
        u16(out, 45);
        u32(out, 0);
        u32(out, 0);
        u64(out, records.size());
        u64(out, records.size());
        u64(out, cd.size());
        u64(out, cdOffset);
        u32(out, 0x07064b50);
        u32(out, 0);
        u64(out, z64);
        u32(out, 1);
    }
    u32(out, 0x06054b50);
    u16(out, 0);
    u16(out, 0);
    u16(out, static_cast<uint16_t>(records.size()));
    u16(out, static_cast<uint16_t>(records.size()));
    u32(out, static_cast<uint32_t>(cd.size()));
    u32(out, static_cast<uint32_t>(cdOffset));
    u16(out, 0);
    return out;
}

Blob floats(size_t n)
{
    Blob b;
    for (size_t i = 0; i < n; ++i) {
        float f = static_cast<float>(i);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        u32(b, bits);
    }
    return b;
}

Blob torchZip(const Blob& pickle, bool zip64 = true, bool deflatePickle = false)
{
    return zipArchive(
        { { "archive/data.pkl", pickle, deflatePickle }, { "archive/byteorder", Blob { 'l', 'i', 't', 't', 'l', 'e' } },
            { "archive/data/0", floats(6) }, { "archive/data/1", floats(3) },
            { "archive/version", Blob { '3', '\n' } } },
        zip64);
}

// Legacy torch.save: magic, protocol 1001, sys_info, the object, the sorted storage keys, then each
// storage as a u64 element count and its bytes.
Blob legacyStream(const Blob& object, const std::vector<std::pair<std::string, uint64_t>>& storages)
{
    Blob out;
    static const uint8_t kMagic[10] = { 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19 };
    Pickle magic;
    magic.proto().byte(0x8a).byte(10).raw(std::string_view(reinterpret_cast<const char*>(kMagic), 10)).stop();
    append(out, magic.b);
    Pickle version;
    version.proto().byte('M');
    u16(version.b, 1001);
    version.stop();
    append(out, version.b);
    Pickle sys;
    sys.proto().emptyDict().mark().str("protocol_version").integer(1001).str("little_endian").boolean(true);
    sys.str("type_sizes").emptyDict().mark().str("short").integer(2).str("int").integer(4).str("long").integer(4);
    sys.setItems().setItems().stop();
    append(out, sys.b);
    append(out, object);
    Pickle keys;
    keys.proto().emptyList().mark();
    for (const auto& [k, n] : storages)
        keys.str(k);
    keys.appends().stop();
    append(out, keys.b);
    for (const auto& [k, n] : storages) {
        u64(out, n);
        append(out, floats(n));
    }
    return out;
}

Blob legacyFile()
{
    return legacyStream(stateDictPickle(true), { { "0", 6 }, { "1", 3 } });
}

void tarMember(Blob& out, std::string_view name, const Blob& data)
{
    Blob h(512, 0);
    std::memcpy(h.data(), name.data(), name.size());
    std::memcpy(h.data() + 100, "0000644", 7);
    std::memcpy(h.data() + 108, "0000000", 7);
    std::memcpy(h.data() + 116, "0000000", 7);
    char size[12];
    std::snprintf(size, sizeof size, "%011llo", static_cast<unsigned long long>(data.size()));
    std::memcpy(h.data() + 124, size, 11);
    std::memcpy(h.data() + 136, "00000000000", 11);
    h[156] = '0';
    std::memcpy(h.data() + 257, "ustar", 6);
    std::memcpy(h.data() + 263, "00", 2);
    std::memset(h.data() + 148, ' ', 8);
    unsigned sum = 0;
    for (uint8_t c : h)
        sum += c;
    char chk[8];
    std::snprintf(chk, sizeof chk, "%06o", sum);
    std::memcpy(h.data() + 148, chk, 7);
    append(out, h);
    append(out, data);
    out.resize((out.size() + 511) / 512 * 512, 0);
}

// The pre-0.1.10 tar layout: sys_info, pickle (persistent ids name tensors and storages by key), tensors,
// storages.
Blob tarFile()
{
    Blob out;
    Pickle sys;
    sys.proto().emptyDict().str("little_endian").boolean(true).setItem().stop();
    tarMember(out, "sys_info", sys.b);
    Pickle main;
    main.proto().emptyDict().mark().str("weight").str("t0").persid().str("view").str("t1").persid().setItems().stop();
    tarMember(out, "pickle", main.b);

    // Per tensor: a pickled (key, storage key, type), int32 ndim, 4 bytes of padding, then int64 sizes,
    // strides and storage offset.
    Blob tensors;
    Pickle two;
    two.proto().integer(2).stop();
    append(tensors, two.b);
    Pickle header;
    header.proto().str("t0").str("s0").str("torch.FloatTensor").op(0x87).stop(); // TUPLE3
    append(tensors, header.b);
    u32(tensors, 2);
    u32(tensors, 0);
    for (uint64_t v : { 2, 2, 2, 1, 0 })
        u64(tensors, v);
    Pickle header1;
    header1.proto().str("t1").str("v0").str("torch.FloatTensor").op(0x87).stop();
    append(tensors, header1.b);
    u32(tensors, 1);
    u32(tensors, 0);
    for (uint64_t v : { 2, 1, 0 })
        u64(tensors, v);
    tarMember(out, "tensors", tensors);

    // A count, then per storage a pickled (key, location, storage class), a u64 element count and the
    // bytes; then a pickled list of views (key, root key, offset, numel).
    Blob storages;
    Pickle count;
    count.proto().integer(1).stop();
    append(storages, count.b);
    Pickle sh;
    sh.proto().str("s0").str("cpu").global("torch", "FloatStorage").op(0x87).stop();
    append(storages, sh.b);
    u64(storages, 4);
    append(storages, floats(4));
    Pickle views;
    views.proto().emptyList().mark().str("v0").str("s0").integer(1).integer(2).tuple().append_().stop();
    append(storages, views.b);
    tarMember(out, "storages", storages);
    out.resize(out.size() + 1024, 0);
    return out;
}

std::string safetensorsHeader(const std::string& body)
{
    std::string h = "{\"__metadata__\":{\"format\":\"pt\"}," + body + "}";
    while (h.size() % 8)
        h += ' ';
    return h;
}

Blob safetensorsFile(const std::string& body, size_t dataBytes)
{
    std::string h = safetensorsHeader(body);
    Blob out;
    u64(out, h.size());
    append(out, h);
    append(out, floats(dataBytes / 4));
    out.resize(8 + h.size() + dataBytes, 0);
    return out;
}

Blob safetensorsBase()
{
    return safetensorsFile(R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                           R"("b":{"dtype":"I64","shape":[2],"data_offsets":[24,40]},)"
                           R"("c":{"dtype":"BF16","shape":[0],"data_offsets":[40,40]})",
        40);
}

// ---- checking outcomes ----

struct Format {
    const char* id;
    std::string name; // what the file is called: the error must start with it
    std::function<Blob()> make;
};

std::vector<Format> formats()
{
    return {
        { "safetensors", "corrupt.safetensors", safetensorsBase },
        { "torch-zip", "corrupt.pt", [] { return torchZip(stateDictPickle(false)); } },
        { "torch-zip-deflated", "corrupt.pt", [] { return torchZip(stateDictPickle(false), true, true); } },
        { "torch-zip-proto4", "corrupt.pt", [] { return torchZip(stateDictPickle(false, 4), false); } },
        { "torch-legacy", "corrupt.pt", legacyFile },
        { "torch-tar", "corrupt.tar", tarFile },
    };
}

// Collects what went wrong over many cases, so one run shows every distinct failure.
class Verdicts {
public:
    QStringList failures;
    int loaded = 0;
    int refused = 0;
    qint64 slowestMs = 0;

    void fail(const QString& what)
    {
        if (failures.size() < 25)
            failures << what;
    }

    // Opens `bytes` from memory as `name`. Returns the source when one loaded.
    std::optional<sl::Source> open(
        const std::string& name, const Blob& bytes, const QString& what, const sl::OpenOptions& options = {})
    {
        QElapsedTimer timer;
        timer.start();
        std::optional<sl::Source> result;
        try {
            sl::Source s = sl::openSourceFromMemory(name, bytes, options);
            exercise(s, name, what);
            result = std::move(s);
            ++loaded;
        } catch (const sl::LoadError& e) {
            checkError(e, name, what);
            ++refused;
        } catch (const std::exception& e) {
            fail(what + ": an exception other than sl::LoadError escaped: " + QString::fromUtf8(e.what()));
        } catch (...) {
            fail(what + ": a non-std exception escaped");
        }
        timed(timer.elapsed(), what);
        return result;
    }

    // Same for a file on disk (indexes, which must be opened next to their shards).
    std::optional<sl::Source> openPath(const std::string& path, const QString& what)
    {
        QElapsedTimer timer;
        timer.start();
        std::optional<sl::Source> result;
        try {
            sl::OpenOptions options;
            options.threads = 2;
            sl::Source s = sl::openSource(path, options);
            exercise(s, path, what);
            result = std::move(s);
            ++loaded;
        } catch (const sl::LoadError& e) {
            checkError(e, path, what);
            ++refused;
        } catch (const std::exception& e) {
            fail(what + ": an exception other than sl::LoadError escaped: " + QString::fromUtf8(e.what()));
        } catch (...) {
            fail(what + ": a non-std exception escaped");
        }
        timed(timer.elapsed(), what);
        return result;
    }

    QString summary() const { return failures.join(QStringLiteral("\n  ")); }

private:
    void timed(qint64 ms, const QString& what)
    {
        slowestMs = std::max(slowestMs, ms);
        if (ms > kCaseLimitMs)
            fail(what + QStringLiteral(": took %1 ms (limit %2)").arg(ms).arg(kCaseLimitMs));
        else if (ms > kCaseLimitMs / 4)
            qInfo("slow case (%lld ms): %s", static_cast<long long>(ms), qPrintable(what));
    }

    void checkError(const sl::LoadError& e, const std::string& name, const QString& what)
    {
        std::string_view w = e.what();
        if (w.substr(0, name.size() + 2) != name + ": ")
            fail(what + ": error does not start with the file name: " + QString::fromUtf8(e.what()));
        if (w.find_first_of("\r\n") != std::string_view::npos)
            fail(what + ": error is not one line: " + QString::fromUtf8(e.what()).left(300));
        if (e.problem().empty())
            fail(what + ": error without a problem");
    }

    // What the CLI and GUI do next: render the source and switch containers.
    void exercise(const sl::Source& s, const std::string& name, const QString& what)
    {
        (void)sl::sourceToJson(s);
        (void)sl::sourceToTable(s);
        (void)s.totalBytes();
        (void)s.totalParameters();
        for (const auto& c : s.containers) {
            try {
                (void)sl::sourceToJson(s.withContainer(c.path));
            } catch (const sl::LoadError& e) {
                checkError(e, name, what + " (container '" + QString::fromStdString(c.path) + "')");
            }
        }
    }
};

const sl::Finding* findingAbout(const sl::Source& s, sl::Severity sev, const std::string& entry)
{
    for (const auto& f : s.findings)
        if (f.severity == sev && f.entry == entry)
            return &f;
    return nullptr;
}

} // namespace

class TstCorrupt : public QObject {
    Q_OBJECT

private slots:
    void basesAreValid_data();
    void basesAreValid();
    void everyTruncation_data();
    void everyTruncation();
    void seededMutations_data();
    void seededMutations();
    void badMagic();
    void safetensorsLengths();
    void zipFields();
    void deflateBombs();
    void pickleLengths();
    void pickleGraphs();
    void countingChargesLongNames();
    void tensorViews();
    void legacyCounts();
    void tarFields();
    void indexFiles();
    void cliExitCodes();
    void hugeTextFilesAreSniffedFromAPrefix();
    void deflatedSizesThatLie();
    void nameIndexAgreesWithAMap();
    void compactStringKeepsText();
    void compactDimsKeepStrides();
    void compactVectorBehavesAsVector();
    void jsonStringsRoundTrip();
    void listingsAreWholeAtEverySize();
    void tableColumnsFitTheirWidestCell();
    void tableRowsShowEveryCell();
};

void TstCorrupt::basesAreValid_data()
{
    QTest::addColumn<int>("index");
    int i = 0;
    for (const auto& f : formats())
        QTest::newRow(f.id) << i++;
}

// The writers above must produce files the readers accept, or the corruptions below prove nothing.
void TstCorrupt::basesAreValid()
{
    QFETCH(int, index);
    const Format f = formats()[static_cast<size_t>(index)];
    Blob base = f.make();
    Verdicts v;
    auto s = v.open(f.name, base, QString::fromLatin1(f.id));
    QVERIFY2(v.failures.isEmpty(), qPrintable(v.summary()));
    QVERIFY2(s.has_value(), "the valid base file did not load");
    QVERIFY2(s->entries.size() >= 2, qPrintable(QStringLiteral("only %1 entries").arg(s->entries.size())));
    for (const auto& finding : s->findings)
        QVERIFY2(finding.severity != sl::Severity::Danger, finding.message.c_str());
}

void TstCorrupt::everyTruncation_data()
{
    basesAreValid_data();
}

void TstCorrupt::everyTruncation()
{
    QFETCH(int, index);
    const Format f = formats()[static_cast<size_t>(index)];
    const Blob base = f.make();
    Verdicts v;
    for (size_t len = 0; len < base.size(); ++len)
        v.open(f.name, Blob(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(len)),
            QStringLiteral("%1 cut to %2 of %3 bytes").arg(f.id).arg(len).arg(base.size()));
    QVERIFY2(v.failures.isEmpty(), qPrintable(v.summary()));
    QVERIFY(v.refused > 0);
}

void TstCorrupt::seededMutations_data()
{
    basesAreValid_data();
}

// Random damage, reproducible from the seed: flipped bits, bytes set to 0x00/0xFF/random, and runs of
// 0xFF that make length fields huge.
void TstCorrupt::seededMutations()
{
    QFETCH(int, index);
    const Format f = formats()[static_cast<size_t>(index)];
    const Blob base = f.make();
    Verdicts v;
    for (uint32_t seed = 1; seed <= 1500; ++seed) {
        std::mt19937 rng(seed);
        Blob b = base;
        auto pos = [&] { return std::uniform_int_distribution<size_t>(0, b.size() - 1)(rng); };
        int edits = 1 + static_cast<int>(rng() % 4);
        for (int i = 0; i < edits; ++i) {
            switch (rng() % 5) {
            case 0:
                b[pos()] ^= static_cast<uint8_t>(1u << (rng() % 8));
                break;
            case 1:
                b[pos()] = 0;
                break;
            case 2:
                b[pos()] = 0xFF;
                break;
            case 3:
                b[pos()] = static_cast<uint8_t>(rng());
                break;
            case 4: {
                size_t at = pos();
                for (size_t k = at; k < b.size() && k < at + 8; ++k)
                    b[k] = 0xFF;
                break;
            }
            }
        }
        v.open(f.name, b, QStringLiteral("%1 mutated with seed %2").arg(f.id).arg(seed));
    }
    QVERIFY2(v.failures.isEmpty(), qPrintable(v.summary()));
}

void TstCorrupt::badMagic()
{
    Verdicts v;
    auto refused = [&](const std::string& name, const Blob& b, const QString& what) {
        int before = v.refused;
        v.open(name, b, what);
        if (v.refused == before)
            v.fail(what + ": loaded, expected an error");
    };
    refused("empty.pt", {}, "empty file");
    refused("one.pt", { 0x80 }, "one byte");
    refused("junk.pt", { 'n', 'o', 't', ' ', 'a', ' ', 'c', 'h', 'e', 'c', 'k', 'p', 'o', 'i', 'n', 't' }, "text");
    Blob zip = torchZip(stateDictPickle(false));
    Blob z = zip;
    z[2] = 'X'; // PK\3\4 broken: no longer a zip, and nothing else either
    refused("corrupt.pt", z, "zip local header magic");
    z = zip;
    size_t end = find(z, std::string_view("PK\x05\x06", 4));
    z[end + 3] = 0x07;
    refused("corrupt.pt", z, "zip end record magic");
    z = zip;
    size_t z64 = find(z, std::string_view("PK\x06\x06", 4));
    z[z64 + 2] = 0;
    refused("corrupt.pt", z, "zip64 end record magic");
    z = zip;
    size_t cd = find(z, std::string_view("PK\x01\x02", 4));
    z[cd + 1] = 'Q';
    refused("corrupt.pt", z, "central directory magic");
    Blob legacy = legacyFile();
    legacy[5] ^= 0x40; // inside the magic number
    refused("corrupt.pt", legacy, "legacy magic number");
    Blob st = safetensorsBase();
    st[8] = '[';
    refused("corrupt.safetensors", st, "safetensors header not an object");
    Blob tar = tarFile();
    std::memcpy(tar.data(), "nothing!", 8); // no member named sys_info/pickle any more... only the first
    size_t pickleHeader = find(tar, "pickle");
    tar[pickleHeader] = 'q';
    refused("corrupt.tar", tar, "tar without a pickle member");
    // A zip that is not a torch archive.
    refused("corrupt.pt", zipArchive({ { "readme.txt", Blob { 'h', 'i' } } }), "zip without data.pkl");
    QVERIFY2(v.failures.isEmpty(), qPrintable(v.summary()));
}

void TstCorrupt::safetensorsLengths()
{
    Verdicts v;
    const Blob base = safetensorsBase();
    auto expectError = [&](Blob b, const char* contains, const QString& what) {
        int before = v.refused;
        try {
            sl::openSourceFromMemory("corrupt.safetensors", b);
        } catch (const sl::LoadError& e) {
            if (!std::string_view(e.what()).starts_with("corrupt.safetensors: ") || !std::strstr(e.what(), contains))
                v.fail(what + ": unexpected error " + QString::fromUtf8(e.what()));
        }
        v.open("corrupt.safetensors", b, what);
        if (v.refused == before)
            v.fail(what + ": loaded, expected an error");
    };
    Blob b = base;
    poke64(b, 0, UINT64_MAX);
    expectError(b, "HeaderTooLarge", "header length 2^64-1");
    poke64(b, 0, 100'000'001);
    expectError(b, "HeaderTooLarge", "header length just over the limit");
    poke64(b, 0, base.size() - 7);
    expectError(b, "InvalidHeaderLength", "header length past the end");
    poke64(b, 0, 0);
    expectError(b, "InvalidHeader", "header length 0");

    // Shapes whose element count overflows, offsets past the end and backwards: findings, not crashes.
    auto expectDanger = [&](const std::string& body, size_t dataBytes, const std::string& entry, const QString& what) {
        auto s = v.open("corrupt.safetensors", safetensorsFile(body, dataBytes), what);
        if (!s)
            v.fail(what + ": did not load");
        else if (!findingAbout(*s, sl::Severity::Danger, entry))
            v.fail(what + ": no danger finding for " + QString::fromStdString(entry));
    };
    expectDanger(R"("x":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,4]})", 4,
        "x", "shape product overflows");
    expectDanger(R"("x":{"dtype":"F32","shape":[9223372036854775807,3],"data_offsets":[0,4]})", 4, "x",
        "shape times item size overflows");
    expectDanger(
        R"("x":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]})", 4, "x", "end offset 2^64-1");
    expectDanger(R"("x":{"dtype":"F32","shape":[1],"data_offsets":[8,4]})", 8, "x", "offsets backwards");
    expectDanger(R"("x":{"dtype":"F32","shape":[1],"data_offsets":[1000000,1000004]})", 4, "x", "offsets past the end");
    // Malformed headers: errors.
    for (const char* body : { R"("x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]})",
             R"("x":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})",
             R"("x":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,4]})",
             R"("x":{"dtype":"F32","shape":[1],"data_offsets":[0]})",
             R"("x":{"dtype":"F32","shape":[1],"data_offsets":[-1,4]})",
             R"("x":{"dtype":7,"shape":[1],"data_offsets":[0,4]})", R"("x":[])", R"("__metadata__":{"k":1})" })
        v.open("corrupt.safetensors", safetensorsFile(body, 4), QStringLiteral("header %1").arg(body));
    // 65 dimensions, deep JSON nesting, a huge number of tensors in a small file.
    std::string dims = "1";
    for (int i = 0; i < 64; ++i)
        dims += ",1";
    v.open("corrupt.safetensors",
        safetensorsFile(R"("x":{"dtype":"F32","shape":[)" + dims + R"(],"data_offsets":[0,4]})", 4), "65 dimensions");
    v.open("corrupt.safetensors", safetensorsFile(R"("x":)" + std::string(5000, '[') + std::string(5000, ']'), 0),
        "deeply nested JSON");
    std::string many;
    for (int i = 0; i < 20000; ++i)
        many += (i ? "," : "") + ("\"t" + std::to_string(i) + R"(":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})");
    v.open("corrupt.safetensors", safetensorsFile(many, 4), "20000 tensors sharing one span");
    QVERIFY2(v.failures.isEmpty(), qPrintable(v.summary()));
}

// Zip fields set to the values that overflow 32-bit arithmetic or point outside the archive.
void TstCorrupt::zipFields()
{
    Verdicts v;
    const Blob base = torchZip(stateDictPickle(false));
    const size_t end = find(base, std::string_view("PK\x05\x06", 4));
    const size_t z64 = find(base, std::string_view("PK\x06\x06", 4));
    const size_t loc = find(base, std::string_view("PK\x06\x07", 4));
    std::vector<size_t> cds;
    for (size_t at = find(base, std::string_view("PK\x01\x02", 4)); at != std::string::npos;
         at = find(base, std::string_view("PK\x01\x02", 4), at + 4))
        cds.push_back(at);
    QCOMPARE(cds.size(), size_t(5));

    auto mutate = [&](const QString& what, const std::function<void(Blob&)>& edit) {
        Blob b = base;
        edit(b);
        v.open("corrupt.pt", b, what);
    };
    for (uint32_t value : { 0xFFFFFFFFu, 0x7FFFFFFFu, 0x80000000u, static_cast<uint32_t>(base.size()), 1u }) {
        const QString n = QString::number(value, 16);
        for (size_t i = 0; i < cds.size(); ++i) {
            size_t cd = cds[i];
            mutate(
                QStringLiteral("cd %1 compressed size %2").arg(i).arg(n), [&](Blob& b) { poke32(b, cd + 20, value); });
            mutate(QStringLiteral("cd %1 size %2").arg(i).arg(n), [&](Blob& b) { poke32(b, cd + 24, value); });
            mutate(QStringLiteral("cd %1 both sizes %2").arg(i).arg(n), [&](Blob& b) {
                poke32(b, cd + 20, value);
                poke32(b, cd + 24, value);
            });
            mutate(QStringLiteral("cd %1 local header offset %2").arg(i).arg(n),
                [&](Blob& b) { poke32(b, cd + 42, value); });
            mutate(QStringLiteral("cd %1 name length %2").arg(i).arg(n), [&](Blob& b) {
                b[cd + 28] = static_cast<uint8_t>(value), b[cd + 29] = static_cast<uint8_t>(value >> 8);
            });
            mutate(QStringLiteral("cd %1 extra length %2").arg(i).arg(n), [&](Blob& b) {
                b[cd + 30] = static_cast<uint8_t>(value), b[cd + 31] = static_cast<uint8_t>(value >> 8);
            });
        }
        mutate("end record cd size " + n, [&](Blob& b) { poke32(b, end + 12, value); });
        mutate("end record cd offset " + n, [&](Blob& b) { poke32(b, end + 16, value); });
        mutate("end record count " + n, [&](Blob& b) { b[end + 10] = b[end + 8] = static_cast<uint8_t>(value); });
    }
    for (uint64_t value : { UINT64_MAX, uint64_t(INT64_MAX), uint64_t(1) << 32, uint64_t(base.size()), uint64_t(0) }) {
        const QString n = QString::number(value, 16);
        mutate("zip64 count " + n, [&](Blob& b) { poke64(b, z64 + 32, value); });
        mutate("zip64 cd size " + n, [&](Blob& b) { poke64(b, z64 + 40, value); });
        mutate("zip64 cd offset " + n, [&](Blob& b) { poke64(b, z64 + 48, value); });
        mutate("zip64 locator offset " + n, [&](Blob& b) { poke64(b, loc + 8, value); });
    }
    // Local headers: name and extra lengths that run past the end, and every record pointing at the first
    // local header (overlapping records).
    for (size_t at = find(base, std::string_view("PK\x03\x04", 4)); at != std::string::npos;
         at = find(base, std::string_view("PK\x03\x04", 4), at + 4)) {
        mutate(QStringLiteral("local header at %1 extra length 0xffff").arg(at),
            [&](Blob& b) { b[at + 28] = b[at + 29] = 0xFF; });
        mutate(QStringLiteral("local header at %1 name length 0xffff").arg(at),
            [&](Blob& b) { b[at + 26] = b[at + 27] = 0xFF; });
    }
    mutate("every record at the same local header", [&](Blob& b) {
        for (size_t cd : cds)
            poke32(b, cd + 42, 0);
    });
    // ZIP64 extended information with huge values: sizes and offset set to 0xFFFFFFFF in the central
    // directory, the real values in an extra field that is appended by rebuilding the archive.
    for (uint64_t value : { UINT64_MAX, uint64_t(1) << 40, uint64_t(base.size()) + 1 }) {
        Blob b(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(cds[0]));
        Blob cd(base.begin() + static_cast<std::ptrdiff_t>(cds[0]), base.begin() + static_cast<std::ptrdiff_t>(z64));
        // First central directory entry: sizes and offset overflow to the extra field.
        uint16_t nameLen = static_cast<uint16_t>(cd[28] | cd[29] << 8);
        Blob extra;
        u16(extra, 1);
        u16(extra, 24);
        u64(extra, value);
        u64(extra, value);
        u64(extra, value);
        poke32(cd, 20, 0xFFFFFFFF);
        poke32(cd, 24, 0xFFFFFFFF);
        poke32(cd, 42, 0xFFFFFFFF);
        cd[30] = static_cast<uint8_t>(extra.size());
        cd.insert(cd.begin() + 46 + nameLen, extra.begin(), extra.end());
        uint64_t cdOffset = b.size();
        append(b, cd);
        uint64_t z64at = b.size();
        u32(b, 0x06064b50);
        u64(b, 44);
        u16(b, 45);
        u16(b, 45);
        u32(b, 0);
        u32(b, 0);
        u64(b, cds.size());
        u64(b, cds.size());
        u64(b, cd.size());
        u64(b, cdOffset);
        u32(b, 0x07064b50);
        u32(b, 0);
        u64(b, z64at);
        u32(b, 1);
        u32(b, 0x06054b50);
        u32(b, 0);
        u16(b, 0xFFFF);
        u16(b, 0xFFFF);
        u32(b, 0xFFFFFFFF);
        u32(b, 0xFFFFFFFF);
        u16(b, 0);
        v.open("corrupt.pt", b, "zip64 extra field values " + QString::number(value, 16));
        // And a zip64 extra field shorter than the fields it must hold.
        Blob shortExtra = b;
        size_t at = find(shortExtra, std::string_view("\x01\x00\x18\x00", 4));
        shortExtra[at + 2] = 4;
        v.open("corrupt.pt", shortExtra, "zip64 extra field too short");
    }
    QVERIFY2(v.failures.isEmpty(), qPrintable(v.summary()));
}

// A deflated data.pkl whose declared size is far beyond what its bytes can inflate to, or smaller than
// what they do inflate to.
void TstCorrupt::deflateBombs()
{
    Verdicts v;
    const Blob pickle = stateDictPickle(false);
    const Blob base = torchZip(pickle, true, true);
    const size_t local = find(base, "archive/data.pkl") - 30;
    const size_t cd = find(base, "archive/data.pkl", local + 40) - 46;
    QVERIFY(base[cd] == 'P' && base[local] == 'P');
    for (uint64_t declared : { uint64_t(0xFFFFFFFE), uint64_t(3) << 30, uint64_t(pickle.size()) * 2000,
             uint64_t(pickle.size() - 1), uint64_t(1), uint64_t(0) }) {
        Blob b = base;
        poke32(b, cd + 24, static_cast<uint32_t>(declared));
        QElapsedTimer t;
        t.start();
        auto s = v.open("corrupt.pt", b, QStringLiteral("deflated data.pkl declared as %1 bytes").arg(declared));
        if (s)
            v.fail(
                QStringLiteral("declared size %1 of a %2-byte pickle was accepted").arg(declared).arg(pickle.size()));
    }
    // A real bomb: 64 MiB of zeros deflates to about 64 KiB; the pickle is refused, quickly.
    Blob zeros(64u << 20, 0);
    Blob bomb = zipArchive({ { "archive/data.pkl", zeros, true }, { "archive/version", Blob { '3' } } });
    v.open("corrupt.pt", bomb, "64 MiB of deflated zeros as data.pkl");
    // Corrupt deflate streams.
    for (uint32_t seed = 1; seed <= 300; ++seed) {
        std::mt19937 rng(seed);
        Blob b = base;
        size_t data = local + 30 + 16;
        size_t csize = b[cd + 20] | b[cd + 21] << 8;
        b[data + rng() % csize] ^= static_cast<uint8_t>(1 + rng() % 255);
        v.open("corrupt.pt", b, QStringLiteral("deflate stream damaged, seed %1").arg(seed));
    }
    QVERIFY2(v.failures.isEmpty(), qPrintable(v.summary()));
}

// Length prefixes in the pickle itself, inside a valid zip.
void TstCorrupt::pickleLengths()
{
    Verdicts v;
    auto run = [&](const Blob& pickle, const QString& what) {
        v.open("corrupt.pt", torchZip(pickle), what + " (zip)");
        v.open("corrupt.pt", legacyStream(pickle, {}), what + " (legacy)");
    };
    auto raw = [](std::initializer_list<uint8_t> ops) {
        Pickle p;
        p.proto();
        for (uint8_t o : ops)
            p.byte(o);
        return p.b;
    };
    run(raw({ 0x8b, 0xFF, 0xFF, 0xFF, 0x7F, '.' }), "LONG4 of 2^31-1 bytes");
    run(raw({ 0x8b, 0xFF, 0xFF, 0xFF, 0xFF, '.' }), "LONG4 negative length");
    run(raw({ 0x8d, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, '.' }), "BINUNICODE8 of 2^64-1 bytes");
    run(raw({ 0x8e, 0, 0, 0, 0, 0, 0, 0, 0x80, '.' }), "BINBYTES8 of 2^63 bytes");
    run(raw({ 0x96, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F, '.' }), "BYTEARRAY8 huge");
    run(raw({ 'X', 0xFF, 0xFF, 0xFF, 0xFF, '.' }), "BINUNICODE of 2^32-1 bytes");
    run(raw({ 'T', 0xFF, 0xFF, 0xFF, 0xFF, '.' }), "BINSTRING negative length");
    run(raw({ 0x95, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 'N', '.' }), "FRAME of 2^64-1 bytes");
    run(raw({ 'N', 'r', 0xFF, 0xFF, 0xFF, 0xFF, 'j', 0xFF, 0xFF, 0xFF, 0xFF, '.' }), "memo index 2^32-1");
    run(raw({ 'j', 0x10, 0, 0, 0, '.' }), "GET of a key never stored");
    run(raw({ 'N', 'p', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9',
            '9', '9', '\n', '.' }),
        "PUT index beyond 2^64");
    run(raw({ 'I', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9',
            '\n', '.' }),
        "INT beyond int64");
    run(raw({ 0x80, 0x09, '.' }), "unsupported protocol");
    run(raw({ 0x82, 0x01, '.' }), "EXT1");
    run(raw({ 0x97, '.' }), "NEXT_BUFFER");
    run(raw({ ')', 't', '.' }), "TUPLE without MARK");
    run(raw({ '(', '.' }), "STOP inside a MARK");
    run(raw({ 'a', '.' }), "APPEND on an empty stack");
    run(raw({ 'N', ')', 'R', '.' }), "REDUCE on None");
    run(raw({ '.' }), "STOP on an empty stack");
    run(raw({}), "no STOP");
    // Many sparse memo keys.
    Pickle sparse;
    sparse.proto().none();
    for (uint32_t i = 0; i < 20000; ++i)
        sparse.put(100000 + i * 70001);
    run(sparse.stop().b, "20000 sparse memo keys");
    QVERIFY2(v.failures.isEmpty(), qPrintable(v.summary()));
}

// Object graphs no honest pickle has: cycles, depth, and shared subtrees that multiply paths.
void TstCorrupt::pickleGraphs()
{
    Verdicts v;
    auto run = [&](Pickle& p, const QString& what) {
        v.open("corrupt.pt", torchZip(p.b), what);
        // The legacy pickle needs view metadata in its persistent ids; the tensor() writer's zip form is
        // refused there, which is fine: it only has to fail cleanly.
        v.open("corrupt.pt", legacyStream(p.b, { { "0", 6 } }), what + " (legacy)");
    };
    {
        Pickle p; // a list that contains itself, and a tensor
        p.proto()
            .emptyDict()
            .str("x")
            .emptyList()
            .put(0)
            .mark()
            .get(0)
            .tensor("0", 6, 0, { 6 }, { 1 })
            .get(0)
            .appends()
            .setItem()
            .stop();
        run(p, "list containing itself");
    }
    {
        Pickle p; // a dict that contains itself
        p.proto().emptyDict().put(0).mark().str("me").get(0).str("t").tensor("0", 6, 0, { 6 }, { 1 }).setItems().stop();
        run(p, "dict containing itself");
    }
    {
        Pickle p; // a tensor whose BUILD state holds the tensor
        p.proto()
            .emptyDict()
            .str("w")
            .tensor("0", 6, 0, { 6 }, { 1 })
            .put(0)
            .emptyDict()
            .str("self")
            .get(0)
            .setItem()
            .build();
        p.setItem().stop();
        run(p, "tensor state containing the tensor");
    }
    {
        Pickle p; // 48 levels of {"a": d, "b": d}: 2^48 paths through 100 nodes
        p.proto().emptyDict().str("t").tensor("0", 6, 0, { 6 }, { 1 }).setItem().put(0);
        for (uint32_t k = 1; k < 48; ++k)
            p.emptyDict().mark().str("a").get(k - 1).str("b").get(k - 1).setItems().put(k);
        run(p.stop(), "dict DAG 2^48 paths");
    }
    {
        Pickle p; // the same with lists, under one key
        p.proto().tensor("0", 6, 0, { 6 }, { 1 }).put(0).pop();
        for (uint32_t k = 1; k < 48; ++k)
            p.emptyList().mark().get(k - 1).get(k - 1).appends().put(k).pop();
        p.emptyDict().str("x").get(47).setItem();
        run(p.stop(), "list DAG 2^48 paths");
    }
    {
        Pickle p; // tensor states nesting 2^40 parts
        p.proto().emptyDict().str("w").tensor("0", 6, 0, { 6 }, { 1 }).put(0);
        for (uint32_t k = 1; k < 40; ++k)
            p.tensor("0", 6, 0, { 6 }, { 1 })
                .emptyDict()
                .mark()
                .str("a")
                .get(k - 1)
                .str("b")
                .get(k - 1)
                .setItems()
                .build()
                .put(k);
        run(p.setItem().stop(), "tensor state DAG");
    }
    {
        Pickle p; // one long key reused at every level, over many tensors
        std::string key(60000, 'k');
        p.proto().str(key).put(1000).pop().emptyDict().mark();
        p.str("t0").tensor("0", 6, 0, { 6 }, { 1 }).put(2000);
        for (int i = 1; i < 2000; ++i)
            p.str("t" + std::to_string(i)).get(2000);
        p.setItems().put(0);
        for (uint32_t k = 1; k < 64; ++k)
            p.emptyDict().get(1000).get(k - 1).setItem().put(k);
        run(p.stop(), "long key at 64 levels");
    }
    {
        Pickle p; // 100000 nested lists, then 50000 nested tuples
        p.proto().emptyDict().str("deep");
        for (int i = 0; i < 100000; ++i)
            p.emptyList();
        for (int i = 0; i < 99999; ++i)
            p.append_();
        p.setItem().str("tuples");
        for (int i = 0; i < 50000; ++i)
            p.mark();
        for (int i = 0; i < 50000; ++i)
            p.tuple();
        p.setItem().str("w").tensor("0", 6, 0, { 6 }, { 1 }).setItem();
        run(p.stop(), "deep nesting");
    }
    {
        Pickle p; // OrderedDict(pairs) and set(list) called again and again on one memoised list
        p.proto().emptyList().mark();
        for (int i = 0; i < 1000; ++i)
            p.integer(i).integer(i).op(0x86);
        p.appends().put(0).pop();
        for (int i = 0; i < 2000; ++i)
            p.global("collections", "OrderedDict").get(0).op(0x85).reduce().pop();
        for (int i = 0; i < 2000; ++i)
            p.global("builtins", "set").get(0).op(0x85).reduce().pop();
        run(p.none().stop(), "memo amplification through OrderedDict and set");
    }
    {
        Pickle p; // a long memoised string made into globals, devices and getattr references again and again
        std::string big(200000, 'm');
        p.proto().str(big).put(0).pop().str("n").put(1).pop();
        for (int i = 0; i < 20000; ++i)
            p.get(0).get(1).op(0x93).pop();
        for (int i = 0; i < 20000; ++i)
            p.global("torch", "device").get(0).op(0x85).reduce().pop();
        p.get(0).get(1).op(0x93).put(2).pop();
        for (int i = 0; i < 20000; ++i)
            p.global("builtins", "getattr").get(2).str("x").op(0x86).reduce().pop();
        run(p.none().stop(), "memo amplification through names");
    }
    for (int depth : { 1, 15, 16, 200 }) {
        Pickle p; // _rebuild_from_type_v2 calling itself through its arguments
        p.proto().emptyDict().str("w").global("torch._tensor", "_rebuild_from_type_v2").fromTypeArgs(depth).reduce();
        run(p.setItem().stop(), QStringLiteral("_rebuild_from_type_v2 nested %1 deep").arg(depth));
    }
    QVERIFY2(v.failures.isEmpty(), qPrintable(v.summary()));
}

// The scan counts each container's tensors without writing their names (Flattener's counting mode), but
// charges the walk's budget for each name's length as writing it would, so that which files load does not
// depend on how the count is made: 2,000 tensors under a long name in an optimizer state are over budget
// even though the listing picks the model beside it.
void TstCorrupt::countingChargesLongNames()
{
    auto pickle = [](size_t keyLength) {
        Pickle p;
        p.proto().str(std::string(keyLength, 'k')).put(1000).pop();
        // The innermost level holds the tensors (one tensor, fetched again), then 8 levels {key: level below}.
        p.emptyDict().mark().str("t0").tensor("0", 6, 0, { 6 }, { 1 }).put(2000);
        for (int i = 1; i < 2000; ++i)
            p.str("t" + std::to_string(i)).get(2000);
        p.setItems().put(0).pop();
        for (uint32_t k = 1; k < 8; ++k)
            p.emptyDict().get(1000).get(k - 1).setItem().put(k).pop();
        p.emptyDict().mark();
        p.str("model").emptyDict().str("w").tensor("1", 6, 0, { 6 }, { 1 }).setItem();
        // {"state": {0: the levels}, "param_groups": [{"params": [0]}]}: one container, its dicts parts of it.
        p.str("optimizer").emptyDict().mark();
        p.str("state").emptyDict().integer(0).get(7).setItem();
        p.str("param_groups").emptyList().emptyDict().str("params").emptyList().integer(0).append_().setItem();
        p.append_();
        p.setItems().setItems();
        return torchZip(p.stop().b);
    };
    auto openAndList = [](const Blob& bytes) -> std::string {
        try {
            sl::Source s = sl::openSourceFromMemory("names.pt", bytes);
            return "listed " + s.container + " of " + std::to_string(s.containers.size());
        } catch (const sl::LoadError& e) {
            return e.what();
        }
    };
    // Short keys: "model" is listed, the optimizer can be selected.
    const std::string shortKeys = openAndList(pickle(8));
    QVERIFY2(shortKeys == "listed model of 2", shortKeys.c_str());
    // 60,000-byte keys: the optimizer's names are over budget.
    const std::string longKeys = openAndList(pickle(60000));
    QVERIFY2(longKeys.find("too large to walk") != std::string::npos, longKeys.c_str());
}

// Views that reach past their storage must load with a danger finding on the entry.
void TstCorrupt::tensorViews()
{
    Verdicts v;
    struct Case {
        const char* what;
        int64_t offset;
        std::vector<int64_t> size, stride;
    };
    const Case cases[] = {
        { "negative stride", 0, { 2, 3 }, { -3, 1 } },
        { "huge stride", 0, { 2, 3 }, { INT64_MAX, 1 } },
        { "stride times size overflows", 0, { 3, 3 }, { INT64_MAX / 2, INT64_MAX / 2 } },
        { "offset past the storage", 6, { 1 }, { 1 } },
        { "huge offset", INT64_MAX, { 2 }, { 1 } },
        { "offset near 2^63 with a stride", INT64_MAX - 1, { 2 }, { 1 } },
        { "size past the storage", 0, { 7 }, { 1 } },
        { "three huge dimensions", 0, { 2147483647, 2147483647, 2147483647 }, { 2147483647, 2147483647, 2147483647 } },
    };
    // As read, and as `ls` reads them (rows for plain tensors, model/entry_list.h): a bad view is never a row.
    sl::OpenOptions asRead, asListed;
    asListed.deferEntries = true;
    for (const auto& c : cases) {
        Pickle p;
        p.proto().emptyDict().str("w").tensor("0", 6, c.offset, c.size, c.stride).setItem().stop();
        for (const sl::OpenOptions* options : { &asRead, &asListed }) {
            const QString what = QStringLiteral("%1%2").arg(c.what, options->deferEntries ? " (as listed)" : "");
            auto s = v.open("corrupt.pt", torchZip(p.b), what, *options);
            if (!s) {
                v.fail(what + ": did not load");
                continue;
            }
            if (!findingAbout(*s, sl::Severity::Danger, "w"))
                v.fail(what + ": no danger finding for the entry");
        }
    }
    // A huge size with stride 0 views one element (an expanded tensor): valid, and must not overflow. Listed,
    // it is a plain tensor: a row.
    {
        Pickle p;
        p.proto().emptyDict().str("w").tensor("0", 6, 0, { INT64_MAX }, { 0 }).setItem().stop();
        if (auto s = v.open("corrupt.pt", torchZip(p.b), "huge size, zero stride");
            s && findingAbout(*s, sl::Severity::Danger, "w"))
            v.fail("huge size, zero stride: a valid expanded view was called dangerous");
        const sl::Source listed = sl::openSourceFromMemory("corrupt.pt", torchZip(p.b), asListed);
        if (!listed.entries.deferred() || findingAbout(listed, sl::Severity::Danger, "w"))
            v.fail("huge size, zero stride (as listed): not listed as a plain row");
    }
    // Negative offsets, sizes and storage sizes are refused by the rebuild itself (a warning), never a crash.
    for (const auto& [offset, size, numel] :
        { std::tuple<int64_t, int64_t, int64_t> { -1, 2, 6 }, { 0, -2, 6 }, { 0, 2, -6 } }) {
        Pickle p;
        p.proto().emptyDict().str("w").tensor("0", numel, offset, { size }, { 1 }).setItem().stop();
        v.open(
            "corrupt.pt", torchZip(p.b), QStringLiteral("offset %1 size %2 numel %3").arg(offset).arg(size).arg(numel));
    }
    // A legacy file whose tensor "w" of 4 elements views elements [offset, offset + 4) of storage "0"
    // (6 elements) through view "5".
    const auto legacyView = [](int64_t offset) {
        Pickle p;
        p.proto().emptyDict().str("w").global("torch._utils", "_rebuild_tensor_v2").mark();
        p.mark().str("storage").global("torch", "FloatStorage").str("0").str("cpu").integer(6);
        p.str("5").integer(offset).integer(4).op(0x87).tuple().persid();
        p.geometry(0, { 4 }, { 1 }).tuple().reduce();
        p.setItem().stop();
        return legacyStream(p.b, { { "0", 6 } });
    };
    // A legacy storage view outside its root storage.
    {
        auto s = v.open("corrupt.pt", legacyView(4), "legacy view past its root");
        if (!s)
            v.fail("legacy view past its root: did not load");
        else if (!findingAbout(*s, sl::Severity::Danger, "w"))
            v.fail("legacy view past its root: no danger finding");
    }
    // A legacy storage view inside its root: a plain tensor, handed over as a row (model/entry_list.h) that
    // lists the root's storage key, as its built entry does.
    {
        const Blob b = legacyView(2);
        sl::OpenOptions deferring, built;
        deferring.deferEntries = true;
        const sl::Source rows = sl::openSourceFromMemory("view.pt", b, deferring);
        QVERIFY(rows.entries.deferred());
        const std::string table = sl::sourceToTable(rows);
        QVERIFY2(table.find("  0\n") != std::string::npos, table.c_str());
        QCOMPARE(table, sl::sourceToTable(sl::openSourceFromMemory("view.pt", b, built)));
    }
    QVERIFY2(v.failures.isEmpty(), qPrintable(v.summary()));
}

void TstCorrupt::legacyCounts()
{
    Verdicts v;
    const Blob object = stateDictPickle(true);
    for (uint64_t count :
        { UINT64_MAX, uint64_t(1) << 62, uint64_t(INT64_MAX), uint64_t(1) << 32, uint64_t(7), uint64_t(0) }) {
        Blob b = legacyStream(object, { { "0", 6 }, { "1", 3 } });
        // The first count sits right after the key list.
        size_t keysEnd = b.size() - (8 + 24) - (8 + 12);
        poke64(b, keysEnd, count);
        v.open("corrupt.pt", b, QStringLiteral("storage count %1").arg(count));
        Blob c = legacyStream(object, { { "0", 6 }, { "1", 3 } });
        poke64(c, c.size() - (8 + 12), count);
        v.open("corrupt.pt", c, QStringLiteral("second storage count %1").arg(count));
    }
    // Keys the pickle never used, keys as integers, and a missing key list.
    Pickle keys;
    keys.proto().emptyList().mark().str("nope").integer(3).appends().stop();
    Blob b = legacyStream(object, {});
    append(b, keys.b);
    v.open("corrupt.pt", b, "unknown storage keys");
    QVERIFY2(v.failures.isEmpty(), qPrintable(v.summary()));
}

void TstCorrupt::tarFields()
{
    Verdicts v;
    const Blob base = tarFile();
    std::vector<size_t> headers;
    for (size_t at = 0; at + 512 <= base.size(); at += 512)
        if (std::memcmp(base.data() + at + 257, "ustar", 5) == 0)
            headers.push_back(at);
    QCOMPARE(headers.size(), size_t(4));
    for (const char* size :
        { "77777777777", "7777777777777", "00000001000", "99999999999", "           ", "00000000000" }) {
        for (size_t h : headers) {
            Blob b = base;
            std::memcpy(b.data() + h + 124, size, std::min<size_t>(12, std::strlen(size)));
            v.open("corrupt.tar", b, QStringLiteral("member at %1 size '%2'").arg(h).arg(size));
        }
    }
    for (size_t h : headers) {
        for (char type : { 'L', 'x', '5', '\0', 'g' }) {
            Blob b = base;
            b[h + 156] = static_cast<uint8_t>(type);
            v.open("corrupt.tar", b, QStringLiteral("member at %1 type '%2'").arg(h).arg(type));
        }
    }
    // Inside the members: tensor ndim, sizes, strides and offsets; storage counts and views.
    const size_t tensors = find(base, "torch.FloatTensor");
    const size_t ndimAt = tensors + std::strlen("torch.FloatTensor") + 2; // after TUPLE3 and STOP
    for (uint32_t ndim : { 0xFFFFFFFFu, 65u, 64u, 0u }) {
        Blob b = base;
        poke32(b, ndimAt, ndim);
        v.open("corrupt.tar", b, QStringLiteral("tensor ndim %1").arg(ndim));
    }
    for (size_t field = 0; field < 5; ++field) {
        for (uint64_t value : { UINT64_MAX, uint64_t(INT64_MAX), uint64_t(1) << 62 }) {
            Blob b = base;
            poke64(b, ndimAt + 8 + 8 * field, value);
            auto s = v.open("corrupt.tar", b, QStringLiteral("tensor field %1 = %2").arg(field).arg(value));
            if (s && !findingAbout(*s, sl::Severity::Danger, "weight"))
                v.fail(QStringLiteral("tensor field %1 = %2: loaded without a danger finding").arg(field).arg(value));
        }
    }
    const size_t storageCount = find(base, "FloatStorage") + std::strlen("FloatStorage") + 3; // '\n', TUPLE3, STOP
    for (uint64_t count : { UINT64_MAX, uint64_t(1) << 62, uint64_t(5) }) {
        Blob b = base;
        poke64(b, storageCount, count);
        v.open("corrupt.tar", b, QStringLiteral("tar storage count %1").arg(count));
    }
    // A view with a negative offset and one past its root.
    for (int32_t offset : { -1, 3, 1000000 }) {
        Blob b = base;
        size_t view = find(b, "v0", storageCount);
        size_t offsetAt = find(b, "s0", view) + 3; // 'J' then the int
        poke32(b, offsetAt, static_cast<uint32_t>(offset));
        auto s = v.open("corrupt.tar", b, QStringLiteral("tar view offset %1").arg(offset));
        if (s && !findingAbout(*s, sl::Severity::Danger, "view"))
            v.fail(QStringLiteral("tar view offset %1: loaded without a danger finding").arg(offset));
    }
    QVERIFY2(v.failures.isEmpty(), qPrintable(v.summary()));
}

// An index must be opened from disk next to its shards: damage the JSON and the shards in a temp folder.
void TstCorrupt::indexFiles()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    auto write = [&](const QString& name, const Blob& b) {
        QFile f(dir.filePath(name));
        QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
        f.write(reinterpret_cast<const char*>(b.data()), static_cast<qint64>(b.size()));
    };
    const std::string json
        = R"({"metadata": {"total_size": 40}, "weight_map": {"a": "model-00001-of-00002.safetensors", )"
          R"("b": "model-00002-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}})";
    write("model-00001-of-00002.safetensors",
        safetensorsFile(
            R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"c":{"dtype":"F32","shape":[1],"data_offsets":[24,28]})",
            28));
    write("model-00002-of-00002.safetensors",
        safetensorsFile(R"("b":{"dtype":"I64","shape":[2],"data_offsets":[0,16]})", 16));
    const std::string index = dir.filePath("model.safetensors.index.json").toStdString();
    Verdicts v;
    auto writeIndex
        = [&](const std::string& text) { write("model.safetensors.index.json", Blob(text.begin(), text.end())); };
    writeIndex(json);
    v.openPath(index, "valid index");
    QCOMPARE(v.loaded, 1);
    for (size_t len = 0; len < json.size(); ++len) {
        writeIndex(json.substr(0, len));
        v.openPath(index, QStringLiteral("index cut to %1 bytes").arg(len));
    }
    for (uint32_t seed = 1; seed <= 300; ++seed) {
        std::mt19937 rng(seed);
        std::string text = json;
        for (int i = 0; i < 3; ++i)
            text[rng() % text.size()] = static_cast<char>(rng());
        writeIndex(text);
        v.openPath(index, QStringLiteral("index mutated with seed %1").arg(seed));
    }
    for (const char* text : { R"({"metadata": {"total_size": 1e999}, "weight_map": {}})",
             R"({"metadata": {"total_size": -5}, "weight_map": {}})",
             R"({"metadata": {"total_size": 1.8446744073709552e19}, "weight_map": {}})",
             R"({"weight_map": {"a": "../../../etc/passwd", "b": "/etc/passwd", "c": "sub/../../x", "d": ""}})",
             R"({"weight_map": {"a": "model.safetensors.index.json"}})", R"({"weight_map": {"a": 5}})",
             R"({"weight_map": []})", R"({"weight_map": {"a": "."}})",
             R"({"weight_map": {"a": "model-00001-of-00002.safetensors\u0000x"}})" }) {
        writeIndex(text);
        v.openPath(index, QStringLiteral("index %1").arg(text));
    }
    // One shard spelled many ways is opened once, not once per spelling.
    {
        std::string many = R"({"weight_map": {"a": "model-00001-of-00002.safetensors")";
        for (int i = 0; i < 3000; ++i)
            many += ", \"x" + std::to_string(i) + "\": \"d" + std::to_string(i)
                + "/../model-00001-of-00002.safetensors\"";
        writeIndex(many + "}}");
        auto s = v.openPath(index, "3000 spellings of one shard");
        if (!s)
            v.fail("3000 spellings of one shard: did not load");
        else if (s->files.size() != 1 || s->entries.size() > 3003)
            v.fail(QStringLiteral("3000 spellings of one shard: %1 files, %2 entries")
                       .arg(s->files.size())
                       .arg(s->entries.size()));
    }
    // Damaged shards under a valid index.
    writeIndex(json);
    const Blob shard = safetensorsBase();
    for (size_t len = 0; len < shard.size(); len += 7) {
        write(
            "model-00002-of-00002.safetensors", Blob(shard.begin(), shard.begin() + static_cast<std::ptrdiff_t>(len)));
        v.openPath(index, QStringLiteral("shard cut to %1 bytes").arg(len));
    }
    QVERIFY2(v.failures.isEmpty(), qPrintable(v.summary()));
}

// The CLI reports a corrupt file as one line on stderr and exit code 2.
void TstCorrupt::cliExitCodes()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    Blob truncatedZip = torchZip(stateDictPickle(false));
    truncatedZip.resize(truncatedZip.size() / 2);
    Blob hugeHeader = safetensorsBase();
    poke64(hugeHeader, 0, UINT64_MAX);
    Blob badCount = legacyStream(stateDictPickle(true), { { "0", 6 }, { "1", 3 } });
    poke64(badCount, badCount.size() - (8 + 24) - (8 + 12), UINT64_MAX);
    Pickle bad;
    bad.proto().byte(0x8d);
    u64(bad.b, UINT64_MAX);
    bad.stop();
    Blob badPickle = torchZip(bad.b);
    // Names with a newline, quoted by the error: still one line.
    Blob zipName = zipArchive({ { std::string("evil\nname"), Blob { 0x80, 2, 'N', '.' } } });
    const std::pair<const char*, Blob*> files[]
        = { { "truncated.pt", &truncatedZip }, { "huge_header.safetensors", &hugeHeader },
              { "bad_count.pt", &badCount }, { "bad_pickle.pt", &badPickle }, { "newline_names.pt", &zipName } };
    for (const auto& [name, blob] : files) {
        const QString path = dir.filePath(QString::fromLatin1(name));
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(reinterpret_cast<const char*>(blob->data()), static_cast<qint64>(blob->size()));
        f.close();
        const auto r = sl::test::runStatelens({ QStringLiteral("ls"), path }, 60000);
        QVERIFY2(r.exitCode == 2,
            qPrintable(QStringLiteral("%1: exit code %2, stderr: %3")
                           .arg(name)
                           .arg(r.exitCode)
                           .arg(QString::fromUtf8(r.err))));
        QByteArray err = r.err;
        QVERIFY2(err.endsWith('\n'),
            qPrintable(QStringLiteral("%1: stderr does not end a line: %2").arg(name, QString::fromUtf8(err))));
        err.chop(1);
        QVERIFY2(!err.isEmpty() && !err.contains('\n') && !err.contains('\r'),
            qPrintable(QStringLiteral("%1: stderr is not one line: %2").arg(name, QString::fromUtf8(r.err))));
        QVERIFY2(err.contains(path.toUtf8()),
            qPrintable(QStringLiteral("%1: stderr does not name the file: %2").arg(name, QString::fromUtf8(err))));
        QVERIFY2(r.out.isEmpty(),
            qPrintable(QStringLiteral("%1: wrote to stdout: %2").arg(name, QString::fromUtf8(r.out.left(200)))));
    }
}

// Telling formats apart reads a bounded prefix: a 3 GB text file (sparse) used to be lower-cased whole,
// peaking at twice its size. A long log whose load_state_dict error is at its end is still recognised.
void TstCorrupt::hugeTextFilesAreSniffedFromAPrefix()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString huge = dir.filePath(QStringLiteral("train.log"));
    {
        QFile f(huge);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(
            QByteArray("epoch 1 step 1 loss 2.5\n").repeated(400)); // past the first kilobyte, where NULs say "binary"
        QVERIFY(f.resize(qint64(3) << 30)); // the rest is a hole: no disk, but every byte readable
    }
    auto r = sl::test::runMeasured(sl::test::statelensBinary(), { QStringLiteral("ls"), huge }, 120000);
    QVERIFY2(r.exitCode == 2 && r.err.contains("unrecognised format"), r.err.constData());
    QVERIFY2(r.peakKb > 0 && r.peakKb < 256 * 1024, qPrintable(QStringLiteral("peak %1 KB").arg(r.peakKb)));

    const QString log = dir.filePath(QStringLiteral("failed_run.log"));
    {
        QFile f(log);
        QVERIFY(f.open(QIODevice::WriteOnly));
        const QByteArray line("epoch 1 step 1 loss 2.5 lr 0.0003 grad_norm 1.25 tokens/s 123456\n");
        for (qint64 written = 0; written < (qint64(40) << 20); written += line.size())
            f.write(line);
        f.write("RuntimeError: Error(s) in loading state_dict for Net:\n\tMissing key(s) in state_dict: \"fc.weight\", "
                "\"fc.bias\". \n\tUnexpected key(s) in state_dict: \"_orig_mod.fc.weight\". \n");
    }
    r = sl::test::runMeasured(
        sl::test::statelensBinary(), { QStringLiteral("ls"), log, QStringLiteral("--format"), QStringLiteral("json") });
    QVERIFY2(r.exitCode == 0, r.err.constData());
    QVERIFY2(r.out.contains("\"load-error-text\"") && r.out.contains("\"fc.bias\""), r.out.left(400).constData());
}

// A deflated storage record whose sizes (the pickle's, the zip's) claim 1 GiB or 4 GiB while its stream
// holds 1 KiB: `stats` refuses the tensor with what the record holds, and its buffer grows only with what
// arrives (it was allocated at the claimed size: 1 GB and 4 GB peaks).
void TstCorrupt::deflatedSizesThatLie()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    for (uint64_t claimed : { uint64_t(1) << 30, (uint64_t(1) << 32) - 4 }) {
        Pickle p;
        const int64_t numel = static_cast<int64_t>(claimed / 4);
        p.proto().emptyDict().str("w").tensor("0", numel, 0, { numel }, { 1 }).setItem().stop();
        Blob b
            = zipArchive({ { "archive/data.pkl", p.b }, { "archive/byteorder", Blob { 'l', 'i', 't', 't', 'l', 'e' } },
                { "archive/data/0", floats(256), true }, { "archive/version", Blob { '3', '\n' } } });
        const size_t local = find(b, "archive/data/0") - 30;
        const size_t cd = find(b, "archive/data/0", local + 40) - 46;
        QVERIFY(b[local] == 'P' && b[cd] == 'P');
        poke32(b, local + 22, static_cast<uint32_t>(claimed));
        poke32(b, cd + 24, static_cast<uint32_t>(claimed));
        const QString path = dir.filePath(QStringLiteral("lies_%1.pt").arg(claimed));
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(reinterpret_cast<const char*>(b.data()), static_cast<qint64>(b.size()));
        f.close();
        const auto r = sl::test::runMeasured(sl::test::statelensBinary(), { QStringLiteral("stats"), path }, 120000);
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.out.contains("not summarised") && r.out.contains("holds 1024 of"), r.out.constData());
        QVERIFY2(r.peakKb > 0 && r.peakKb < 200 * 1024,
            qPrintable(QStringLiteral("%1: peak %2 KB").arg(claimed).arg(r.peakKb)));
    }
}

QTEST_GUILESS_MAIN(TstCorrupt)
// The name index every reader uses to resolve names (zip records, storages, shards, quantized parts): one
// insert at a time and the bulk insertAll must both agree with std::unordered_map::emplace (the first
// position under a name keeps it), for repeated names, the empty name, and names a file chose to collide.
void TstCorrupt::nameIndexAgreesWithAMap()
{
    std::mt19937 rng(7);
    std::vector<std::string> names;
    for (int i = 0; i < 30000; ++i) {
        switch (rng() % 6) {
        case 0: names.push_back(names.empty() ? std::string() : names[rng() % names.size()]); break; // a repeat
        case 1: names.push_back(std::string(rng() % 3, 'a')); break; // "", "a", "aa"
        default: names.push_back("model.layers." + std::to_string(rng() % 5000) + ".w" + std::to_string(i % 7)); break;
        }
    }
    const auto nameOf = [&names](size_t i) -> std::string_view { return names[i]; };
    std::unordered_map<std::string, size_t> truth;
    size_t repeats = 0;
    sl::NameIndex one;
    for (size_t i = 0; i < names.size(); ++i) {
        const auto [it, inserted] = truth.emplace(names[i], i);
        repeats += inserted ? 0 : 1;
        QCOMPARE(one.insert(i, nameOf), it->second);
    }
    sl::NameIndex bulk;
    std::vector<size_t> repeatedAt;
    QCOMPARE(bulk.insertAll(names.size(), nameOf, [&](size_t i) { repeatedAt.push_back(i); }), repeats);
    QCOMPARE(repeatedAt.size(), repeats);
    QVERIFY(std::adjacent_find(repeatedAt.begin(), repeatedAt.end(), std::greater_equal<size_t>()) == repeatedAt.end());
    for (size_t i : repeatedAt)
        QVERIFY(truth.at(names[i]) != i);
    QCOMPARE(bulk.size(), truth.size());
    QCOMPARE(one.size(), truth.size());
    // At most half full, and sized to the names it was reserved for rather than rounded up to a power of
    // two (which took 2.1 MB for 76,800 zip records where 1.2 MB holds them).
    QVERIFY(2 * bulk.size() <= bulk.slotCount() && 2 * one.size() <= one.slotCount());
    QVERIFY2(bulk.slotCount() <= std::max<size_t>(16, 2 * names.size()),
        qPrintable(QStringLiteral("%1 slots for %2 names").arg(bulk.slotCount()).arg(names.size())));
    for (const auto& [name, first] : truth) {
        QCOMPARE(one.find(name, nameOf), first);
        QCOMPARE(bulk.find(name, nameOf), first);
    }
    for (const char* absent : { "model.layers.5000.w0", "aaa", "b" }) {
        QCOMPARE(one.find(absent, nameOf), sl::NameIndex::npos);
        QCOMPARE(bulk.find(absent, nameOf), sl::NameIndex::npos);
    }
}

// Entries keep their device, type, value and storage key in 8-byte strings: text up to 7 bytes inline,
// longer on the heap. Every length across the boundary, copies, moves and assigning a piece of itself.
void TstCorrupt::compactStringKeepsText()
{
    const std::string text("abcdefghijklmnopq\0z", 19); // an embedded NUL kept too
    for (size_t n = 0; n <= text.size(); ++n) {
        const std::string want = text.substr(0, n);
        sl::CompactString a(want);
        QCOMPARE(a.size(), n);
        QCOMPARE(a.empty(), n == 0);
        QVERIFY(a.view() == want);
        sl::CompactString copy = a;
        sl::CompactString moved = std::move(copy);
        QVERIFY(moved == a && moved.view() == want);
        sl::CompactString assigned;
        assigned = std::string_view(want);
        QVERIFY(assigned == std::string_view(want));
        assigned = a; // copy-assign over a value of another length
        QVERIFY(assigned.view() == want);
        // A piece of itself: the new text is made before the old is released.
        assigned = assigned.view().substr(n / 2);
        QVERIFY(assigned.view() == want.substr(n / 2));
        QCOMPARE(std::string("<") + a + ">", "<" + want + ">");
    }
}

// Strides in 8 bytes: lists packed into the word (1 to 3 values under 2^60, 2^30, 2^20) and lists on the
// heap (longer, larger or negative) read back as written, through copies, moves, push_back and ordering.
void TstCorrupt::compactDimsKeepStrides()
{
    const std::vector<std::vector<int64_t>> lists { {}, { 0 }, { 1 }, { (int64_t(1) << 60) - 1 }, { int64_t(1) << 60 },
        { 4096, 1 }, { (int64_t(1) << 30) - 1, 0 }, { int64_t(1) << 30, 1 }, { 28672, 7, 1 }, { (1 << 20) - 1, 3, 1 },
        { 1 << 20, 3, 1 }, { 8, 4, 2, 1 }, { -1, 1 }, { 0, 0, 0 }, { 5, 4, 3, 2, 1, 0 }, { INT64_MAX, INT64_MIN } };
    for (const auto& want : lists) {
        const sl::Dims d(want.begin(), want.end());
        sl::CompactDims c = d;
        QCOMPARE(c.size(), want.size());
        QCOMPARE(c.empty(), want.empty());
        QVERIFY(std::equal(c.begin(), c.end(), want.begin(), want.end()));
        for (size_t i = 0; i < want.size(); ++i)
            QCOMPARE(c[i], want[i]);
        QVERIFY(sl::Dims(c) == d);
        sl::CompactDims copy = c;
        sl::CompactDims moved = std::move(copy);
        QVERIFY(moved == c);
        sl::CompactDims assigned { 9, 9 };
        assigned = moved; // over a value of another shape
        QVERIFY(assigned == c);
        sl::CompactDims grown = c;
        grown.push_back(7);
        std::vector<int64_t> longer = want;
        longer.push_back(7);
        QVERIFY(std::equal(grown.begin(), grown.end(), longer.begin(), longer.end()));
        for (const auto& other : lists) {
            const sl::CompactDims o = sl::Dims(other.begin(), other.end());
            QCOMPARE(c == o, want == other);
            QCOMPARE(c < o, want < other);
        }
    }
}

// An entry's attributes and parts in 8 bytes: the same results as std::vector for every operation the
// model uses, with elements that own heap memory (run under the sanitizers in CI).
void TstCorrupt::compactVectorBehavesAsVector()
{
    sl::CompactVector<std::string> c;
    std::vector<std::string> v;
    const auto same = [&] { return c.size() == v.size() && std::equal(c.begin(), c.end(), v.begin(), v.end()); };
    QVERIFY(c.empty() && same());
    for (int i = 0; i < 40; ++i) {
        const std::string s = "a value long enough to live on the heap, number " + std::to_string(i);
        c.push_back(s);
        v.push_back(s);
        QVERIFY(same());
    }
    // An argument that is itself an element, when the block must grow (the new one is built first).
    while (c.size() < c.capacity()) {
        c.emplace_back("filler");
        v.emplace_back("filler");
    }
    c.emplace_back(c[0]);
    v.emplace_back(v[0]);
    QVERIFY(same());
    c.erase(c.begin() + 3);
    v.erase(v.begin() + 3);
    c.erase(c.begin() + 5, c.begin() + 9);
    v.erase(v.begin() + 5, v.begin() + 9);
    QVERIFY(same());
    const std::vector<std::string> more { "x", "y", "z" };
    c.insert(c.begin() + 2, more.begin(), more.end());
    v.insert(v.begin() + 2, more.begin(), more.end());
    QVERIFY(same());
    QCOMPARE(sl::erase_if(c, [](const std::string& s) { return s.size() == 1; }), size_t(3));
    std::erase_if(v, [](const std::string& s) { return s.size() == 1; });
    QVERIFY(same());
    sl::CompactVector<std::string> copy = c;
    sl::CompactVector<std::string> moved = std::move(copy);
    QVERIFY(copy.empty() && moved == c);
    copy = { "one", "two" };
    QCOMPARE(copy.size(), size_t(2));
    QCOMPARE(copy.back(), std::string("two"));
    copy = moved;
    QVERIFY(copy == c);
    QVERIFY_THROWS_EXCEPTION(std::out_of_range, c.at(c.size()));
    c.pop_back();
    v.pop_back();
    QVERIFY(same());
    c.clear();
    QVERIFY(c.empty());
    // Entries nest: an Entry's parts are Entries.
    sl::Entry g;
    g.name = "group";
    for (int i = 0; i < 5; ++i) {
        sl::Entry& p = g.parts.emplace_back();
        p.name = "part " + std::to_string(i) + " with a long enough name";
        p.attributes.emplace_back("key", "model.layers." + std::to_string(i) + ".weight");
        p.parts.emplace_back().name = "inner";
    }
    const sl::Entry copied = g;
    QCOMPARE(copied.parts.size(), size_t(5));
    QCOMPARE(*copied.parts[4].attribute("key"), std::string("model.layers.4.weight"));
    QCOMPARE(copied.parts[2].parts.front().name, std::string("inner"));
}

// Names and values from checkpoints go into JSON reports: every byte below 0x80 at every position of strings
// that take the writer's eight-bytes-at-a-time check and its tail, as keys and as values, must come back
// unchanged through Qt's JSON parser.
void TstCorrupt::jsonStringsRoundTrip()
{
    for (int length : { 1, 7, 8, 9, 16, 17 }) {
        for (int at = 0; at < length; ++at) {
            sl::JsonWriter w;
            w.beginArray();
            std::vector<std::string> written;
            // Every ASCII byte, a two-byte UTF-8 character and a byte that starts no UTF-8 sequence (written
            // as U+FFFD, as QString reads it), at each place of an eight-byte word and past it.
            std::vector<std::string> inserts;
            for (int b = 0; b < 0x80; ++b)
                inserts.emplace_back(1, static_cast<char>(b));
            inserts.emplace_back("\xC3\xA9");
            inserts.emplace_back("\xFF");
            for (const std::string& insert : inserts) {
                std::string text(static_cast<size_t>(length), 'x');
                text.replace(static_cast<size_t>(at), 1, insert);
                written.push_back(text);
                w.beginObject();
                w.field(text, text);
                w.endObject();
            }
            w.endArray();
            const std::string_view json = w.text();
            QVERIFY2(sl::isValidUtf8(json), "the JSON writer passed an invalid byte through"); // Qt would replace it
            QJsonParseError error {};
            const QJsonDocument doc = QJsonDocument::fromJson(QByteArray(json.data(), qsizetype(json.size())), &error);
            QVERIFY2(error.error == QJsonParseError::NoError, qPrintable(error.errorString()));
            const QJsonArray items = doc.array();
            QCOMPARE(items.size(), qsizetype(written.size()));
            for (size_t i = 0; i < written.size(); ++i) {
                const QString want = QString::fromUtf8(written[i].data(), qsizetype(written[i].size()));
                const QJsonObject o = items[qsizetype(i)].toObject();
                QCOMPARE(o.keys(), QStringList { want });
                QCOMPARE(o.value(want).toString(), want);
            }
        }
    }
}

// ls writes its JSON entries in chunks of 1,024 and its rows in chunks of 4,096, two at a time on two cores
// (report/chunked_output.h), and measures the table's columns over two halves (report/source_report.cpp).
// At sizes around the chunks' edges, the JSON must parse with every entry once and in order, and every
// table row must line up under the header, with the widest name in one half and the widest shape in the
// other.
void TstCorrupt::listingsAreWholeAtEverySize()
{
    for (size_t n : { 0, 1, 1023, 1024, 1025, 2049, 4095, 4096, 4097, 8191, 8192, 8193, 12289 }) {
        sl::Source s;
        s.path = "synthetic";
        for (size_t i = 0; i < n; ++i) {
            sl::Entry e;
            e.name = "layers." + std::to_string(i) + (i == n - 1 ? ".a_much_longer_name_than_the_others" : ".w");
            e.dtype = sl::DType::Float32;
            e.shape = i == 0 ? sl::Shape { 123456789, 2 } : sl::Shape { int64_t(i % 7 + 1) };
            s.entries.push_back(std::move(e));
        }
        const std::string json = sl::sourceToJson(s);
        QJsonParseError error {};
        const QJsonArray entries
            = QJsonDocument::fromJson(QByteArray::fromStdString(json), &error).object().value("entries").toArray();
        QVERIFY2(error.error == QJsonParseError::NoError, qPrintable(error.errorString()));
        QCOMPARE(size_t(entries.size()), n);
        for (size_t i = 0; i < n; ++i)
            QCOMPARE(entries[qsizetype(i)].toObject().value("name").toString().toStdString(), s.entries[i].name);

        const QStringList lines = QString::fromStdString(sl::sourceToTable(s)).split('\n');
        const qsizetype header = lines.indexOf(QRegularExpression("NAME +DTYPE.*")); // matches whole lines
        QVERIFY(header > 0);
        const qsizetype dtypeColumn = lines[header].indexOf("DTYPE"), numelColumn = lines[header].indexOf("NUMEL");
        for (size_t i = 0; i < n; ++i) {
            const QString& row = lines[header + 1 + qsizetype(i)];
            QVERIFY2(row.startsWith(QString::fromStdString(s.entries[i].name) + ' '), qPrintable(row));
            QCOMPARE(row.indexOf("float32"), dtypeColumn);
            // NUMEL is right-aligned: each count ends under the header's last letter.
            QVERIFY2(row[numelColumn + 4].isDigit() && row.mid(numelColumn + 5, 2) == "  ", qPrintable(row));
            QCOMPARE(row.size(), lines[header + 1].size()); // every row as wide as the first
        }
        QVERIFY(lines[header + 1 + qsizetype(n)].isEmpty()); // the footer comes after the last row
    }
}

// The table's columns are as wide as their widest cell, no wider (report/source_report.cpp measures plain
// tensors' cells without writing them). One tensor a table, so its cells alone set the widths: shapes shown
// in full up to 40 characters and cut to 40 past that, negative and 19-digit numbers, the empty shape.
void TstCorrupt::tableColumnsFitTheirWidestCell()
{
    const std::vector<sl::Shape> shapes = {
        {}, { 5 }, { -3, 4 }, { int64_t(1) << 40, int64_t(1) << 20 }, // "[-3, 4]", a 19-digit count
        { 1234, 1234, 1234, 1234, 1234, 1234, 12 }, // 40 characters: shown whole
        { 1234, 1234, 1234, 1234, 1234, 1234, 123 }, // 41: cut to 40
        { 1234, 1234, 1234, 1234, 1234, 1234, 1234 }, // 42: cut to 40
        { 123456789, 123456789, 123456789, 123456789, 123456789, 123456789 }, // 64: cut to 40
    };
    for (const sl::Shape& shape : shapes) {
        sl::Source s;
        s.path = "synthetic";
        sl::Entry e;
        e.name = "w";
        e.dtype = sl::DType::BFloat16;
        e.shape = shape;
        s.entries.push_back(e);
        QStringList dims;
        for (int64_t d : shape)
            dims << QString::number(d);
        const QString shown = "[" + dims.join(", ") + "]";
        const qsizetype shapeWidth = std::max<qsizetype>(5, std::min<qsizetype>(shown.size(), 40));
        const qsizetype countWidth = std::max<qsizetype>(5, QString::number(qulonglong(e.numel())).size());

        const QStringList lines = QString::fromStdString(sl::sourceToTable(s)).split('\n');
        const qsizetype header = lines.indexOf(QRegularExpression("NAME +DTYPE.*"));
        QVERIFY(header > 0);
        const QString& h = lines[header];
        QCOMPARE(h.indexOf("SHAPE") - h.indexOf("DTYPE"), qsizetype(std::string("bfloat16").size()) + 2);
        QCOMPARE(h.indexOf("NUMEL") + 5 - h.indexOf("SHAPE"), shapeWidth + 2 + countWidth);
        const QString& row = lines[header + 1];
        QCOMPARE(row.mid(h.indexOf("SHAPE"), std::min<qsizetype>(shown.size(), 37)), shown.left(37));
    }
    // A group's DTYPE cell is its dtype and its part count, "float8_e4m3fn (2 parts)": measured without being
    // written too. Beside a plain tensor, so the group's cell alone sets the width, and the row's shape starts
    // under SHAPE.
    for (const size_t parts : { size_t(1), size_t(2), size_t(10), size_t(123) }) {
        sl::Source s;
        s.path = "synthetic";
        sl::Entry plain;
        plain.name = "b";
        plain.dtype = sl::DType::Float32;
        plain.shape = { 8 };
        sl::Entry g;
        g.name = "w";
        g.kind = sl::EntryKind::Group;
        g.dtype = sl::DType::Float8_e4m3fn;
        g.shape = { 16, 8 };
        for (size_t i = 0; i < parts; ++i)
            g.parts.push_back(plain);
        s.entries.push_back(plain);
        s.entries.push_back(g);
        const QString cell = QStringLiteral("float8_e4m3fn (%1 parts)").arg(parts);
        const QStringList lines = QString::fromStdString(sl::sourceToTable(s)).split('\n');
        const qsizetype header = lines.indexOf(QRegularExpression("NAME +DTYPE.*"));
        QVERIFY(header > 0);
        const QString& h = lines[header];
        QCOMPARE(h.indexOf("SHAPE") - h.indexOf("DTYPE"), cell.size() + 2);
        const QString& row = lines[header + 2];
        QCOMPARE(row.mid(h.indexOf("DTYPE"), cell.size() + 2), cell + "  ");
        QCOMPARE(row.mid(h.indexOf("SHAPE"), 7), QStringLiteral("[16, 8]"));
    }
}

// Every row shows its name, cells and storage as they are, padded to the columns (the rows are written a
// word at a time, report/source_report.cpp): names of every length up to 40 with every printable character
// at every position, and a name with an escape character at each position, shown as "\x1b" (the expected
// rows are written here by hand, not by the report's helpers).
void TstCorrupt::tableRowsShowEveryCell()
{
    std::string printable;
    for (char c = 0x20; c < 0x7F; ++c)
        printable += c;
    struct Row {
        std::string shown, dtype, shape, count, storage;
    };
    std::vector<Row> expected;
    sl::Source s;
    s.path = "synthetic";
    const sl::DType dtypes[] = { sl::DType::Float32, sl::DType::BFloat16, sl::DType::Float8_e4m3fn, sl::DType::Int64 };
    auto add = [&](const std::string& name, const std::string& shown) {
        const size_t i = expected.size();
        sl::Entry e;
        e.name = name;
        e.dtype = dtypes[i % 4];
        e.shape = i % 3 == 0 ? sl::Shape {} : i % 3 == 1 ? sl::Shape { int64_t(i) } : sl::Shape { int64_t(i), 7, 1 };
        e.location.storageId = "s" + std::to_string(i);
        const std::string shape = i % 3 == 0 ? "[]"
            : i % 3 == 1                     ? "[" + std::to_string(i) + "]"
                                             : "[" + std::to_string(i) + ", 7, 1]";
        const std::string count = std::to_string(i % 3 == 0 ? 1 : i % 3 == 1 ? i : i * 7);
        expected.push_back(
            { shown, std::string(sl::dtypeName(e.dtype)), shape, count, std::string(e.location.storageId) });
        s.entries.push_back(std::move(e));
    };
    for (size_t length = 1; length <= 40; ++length) // every printable character at every position
        for (size_t start = 0; start < printable.size(); ++start) {
            std::string name;
            for (size_t k = 0; k < length; ++k)
                name += printable[(start + k) % printable.size()];
            add(name, name);
        }
    const std::string base = "model.layers.0.w.bias"; // 21 characters: two words and a tail
    for (size_t at = 0; at < base.size(); ++at) {
        std::string name = base;
        name[at] = '\x1b';
        std::string shown = base;
        shown.replace(at, 1, "\\x1b");
        add(name, shown);
    }

    const std::string table = sl::sourceToTable(s);
    std::vector<std::string> lines;
    for (size_t from = 0, to; from < table.size(); from = to + 1) {
        to = table.find('\n', from);
        lines.push_back(table.substr(from, to - from));
    }
    size_t header = 0;
    while (header < lines.size() && lines[header].rfind("NAME ", 0) != 0)
        ++header;
    QVERIFY(header + expected.size() < lines.size());
    const std::string& h = lines[header];
    const size_t dtypeAt = h.find("DTYPE"), shapeAt = h.find("SHAPE"), storageAt = h.find("STORAGE");
    const size_t countEnd = h.find("NUMEL") + 5;
    for (size_t i = 0; i < expected.size(); ++i) {
        const Row& r = expected[i];
        const std::string& line = lines[header + 1 + i];
        auto padded
            = [](const std::string& text, size_t width) { return text + std::string(width - text.size(), ' '); };
        const std::string want = padded(r.shown, dtypeAt - 2) + "  " + padded(r.dtype, shapeAt - dtypeAt - 2) + "  "
            + padded(r.shape, countEnd - r.count.size() - shapeAt) + r.count + "  " + r.storage;
        QVERIFY2(
            line == want, qPrintable(QString::fromStdString("row " + std::to_string(i) + ":\n" + line + "\n" + want)));
        QCOMPARE(line.find(r.storage, storageAt), storageAt); // under the header's STORAGE, which `want` does not use
    }
}

#include "tst_corrupt.moc"
