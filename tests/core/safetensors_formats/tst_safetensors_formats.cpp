// safetensors files and Hugging Face sharded indexes (model.safetensors.index.json, pytorch_model.bin.index.json).
//
// The fixtures and their truth come from tests/fixtures/make_safetensors_fixtures.py (hand-written safetensors
// bytes from torch/numpy tensors, torch.save shards): every check below compares StateLens with what the
// generator declares it wrote, including the bytes at each entry's absolute offset. Inputs that must fail to load
// are generated here, in memory or in a temporary folder.

#include "common/handwritten_safetensors.h"
#include "common/qt_text.h"
#include "common/test_files.h"
#include "common/test_paths.h"
#include "formats/hf_index_reader.h"
#include "formats/loader.h"
#include "formats/safetensors_reader.h"
#include "formats/safetensors_scan.h"
#include "formats/torch_zip_reader.h"
#include "io/file_trust.h"
#include "io/input_file.h"
#include "model/dtype.h"
#include "util/name_hash.h"
#include "model/source.h"
#include "report/source_report.h"
#include "values/tensor_stats.h"
#include "util/error.h"
#include "util/load_control.h"

#include <QCryptographicHash>
#include <QDir>
#include <QDirIterator>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <unistd.h>

using namespace sl;

namespace {

using sl::test::requireJson;
using sl::test::readAll;

using sl::test::q;
std::string s(const QString& v) { return v.toStdString(); }

QString stDir() { return test::fixturesDir() + QStringLiteral("/safetensors"); }
QString indexDir() { return test::fixturesDir() + QStringLiteral("/index"); }

// Options that open an index's shards while the index is parsed (ShardPrefetch), whatever its size, and all
// of them there (the index of a test is parsed before the second thread would open any), or never.
OpenOptions prefetching(bool on)
{
    OpenOptions o;
    o.shardPrefetchFrom = on ? 0 : SIZE_MAX;
    o.shardPrefetchFinishes = on;
    return o;
}



bool writeFile(const QString& path, const QByteArray& bytes)
{
    QFile f(path);
    return f.open(QIODevice::WriteOnly | QIODevice::Truncate) && f.write(bytes) == bytes.size();
}

Shape shapeOf(const QJsonArray& a)
{
    Shape out;
    for (const auto& v : a)
        out.push_back(static_cast<int64_t>(v.toDouble()));
    return out;
}

// JSON numbers are doubles: fine for the offsets and sizes of these small files (< 2^53).
uint64_t u64(const QJsonValue& v) { return static_cast<uint64_t>(v.toDouble()); }

QString locationName(TensorLocation::Kind k)
{
    switch (k) {
    case TensorLocation::Kind::None:
        return QStringLiteral("none");
    case TensorLocation::Kind::Mapped:
        return QStringLiteral("mapped");
    case TensorLocation::Kind::Compressed:
        return QStringLiteral("compressed");
    case TensorLocation::Kind::Transformed:
        return QStringLiteral("transformed");
    case TensorLocation::Kind::Inline:
        return QStringLiteral("inline");
    case TensorLocation::Kind::Unavailable:
        return QStringLiteral("unavailable");
    }
    return QStringLiteral("?");
}

QString describeFindings(const Source& src)
{
    QString out;
    for (const auto& f : src.findings)
        out += QStringLiteral("\n  [%1] %2%3")
                   .arg(q(severityName(f.severity)), q(f.message),
                       f.entry.empty() ? QString() : QStringLiteral(" (entry '%1')").arg(q(f.entry)));
    return out.isEmpty() ? QStringLiteral(" (none)") : out;
}

// Each expected finding must match a distinct actual one (severity, entry when given, every substring,
// case-insensitively), and there must be no other findings.
void checkFindings(const Source& src, const QJsonArray& expected)
{
    // The most specific expectations first, so that a short one does not take a finding a longer one needs
    // ("../x" is part of "sub/../../x").
    std::vector<QJsonObject> wanted;
    for (const auto& ev : expected)
        wanted.push_back(ev.toObject());
    auto weight = [](const QJsonObject& e) {
        qsizetype n = e.contains("entry") ? 1000 : 0;
        for (const auto& c : e["contains"].toArray())
            n += c.toString().size();
        return n;
    };
    std::stable_sort(wanted.begin(), wanted.end(), [&](const QJsonObject& a, const QJsonObject& b) { return weight(a) > weight(b); });
    std::vector<bool> used(src.findings.size(), false);
    for (const QJsonObject& e : wanted) {
        bool found = false;
        for (size_t i = 0; i < src.findings.size() && !found; ++i) {
            const Finding& f = src.findings[i];
            if (used[i] || q(severityName(f.severity)) != e["severity"].toString())
                continue;
            if (e.contains("entry") && q(f.entry) != e["entry"].toString())
                continue;
            bool all = true;
            for (const auto& c : e["contains"].toArray())
                all = all && q(f.message).contains(c.toString(), Qt::CaseInsensitive);
            if (all)
                used[i] = found = true;
        }
        QVERIFY2(found,
            qPrintable(QStringLiteral("no finding matches %1; findings:%2")
                           .arg(QString::fromUtf8(QJsonDocument(e).toJson(QJsonDocument::Compact)), describeFindings(src))));
    }
    QVERIFY2(src.findings.size() == static_cast<size_t>(expected.size()),
        qPrintable(QStringLiteral("expected %1 findings, got %2:%3")
                       .arg(expected.size())
                       .arg(src.findings.size())
                       .arg(describeFindings(src))));
}

// The k-th entry named `name` (duplicate names are kept, in header order).
const Entry* nthEntry(const Source& src, const QString& name, int k)
{
    for (const auto& e : src.entries)
        if (q(e.name) == name && k-- == 0)
            return &e;
    return nullptr;
}

// Compares one entry with the generator's truth; `fileBytes` reads files[location.file].
void checkEntry(const Source& src, const Entry& e, const QJsonObject& x, const std::function<QByteArray(int32_t)>& fileBytes,
    bool checkHeaderAttributes)
{
    const QString n = x["name"].toString();
    auto field = [&](const char* what, const QString& v) { return n + QStringLiteral(" | ") + QLatin1String(what) + QStringLiteral("=") + v; };

    QCOMPARE(field("location", locationName(e.location.kind)), field("location", x["location"].toString()));
    if (x.contains("dtype"))
        QCOMPARE(field("dtype", q(dtypeName(e.dtype))), field("dtype", x["dtype"].toString()));
    if (x.contains("shape"))
        QCOMPARE(field("shape", q(shapeToString(e.shape))), field("shape", q(shapeToString(shapeOf(x["shape"].toArray())))));
    if (x.contains("shard")) {
        // The entry's file is its shard; a shard that was never opened (not among the files) is named by the
        // entry's "shard" attribute instead.
        const std::string* attribute = e.attribute("shard");
        const QString shard = e.location.file >= 0 && static_cast<size_t>(e.location.file) < src.files.size()
            ? QFileInfo(q(src.files[static_cast<size_t>(e.location.file)])).fileName()
            : attribute ? q(*attribute)
                        : QStringLiteral("(none)");
        QCOMPARE(field("shard", shard), field("shard", x["shard"].toString()));
    }
    if (checkHeaderAttributes) {
        // Exactly the header_* attributes the generator declares: none for a dtype torch reads as-is.
        QJsonObject attrs = x["attributes"].toObject();
        for (const char* key : { "header_dtype", "header_shape" }) {
            const std::string* got = e.attribute(key);
            QString want = attrs.contains(key) ? attrs[key].toString() : QStringLiteral("(none)");
            QCOMPARE(field(key, got ? q(*got) : QStringLiteral("(none)")), field(key, want));
        }
    }
    if (x.contains("offset")) {
        QCOMPARE(field("offset", QString::number(e.location.offset)), field("offset", QString::number(u64(x["offset"]))));
        QCOMPARE(field("length", QString::number(e.location.length)), field("length", QString::number(u64(x["length"]))));
    }
    if (e.location.kind != TensorLocation::Kind::Mapped || !x.contains("sha256"))
        return;

    // The bytes at the reported location are the ones the generator wrote there.
    QVERIFY2(e.location.file >= 0 && static_cast<size_t>(e.location.file) < src.files.size(), qPrintable(n));
    if (x.contains("shard"))
        QCOMPARE(field("file", QFileInfo(q(src.files[e.location.file])).fileName()), field("file", x["shard"].toString()));
    QByteArray bytes = fileBytes(e.location.file);
    QVERIFY2(e.location.offset + e.location.length <= static_cast<uint64_t>(bytes.size()), qPrintable(n + " runs past its file"));
    QByteArray span = bytes.mid(static_cast<qsizetype>(e.location.offset), static_cast<qsizetype>(e.location.length));
    QCOMPARE(field("sha256", QString::fromLatin1(QCryptographicHash::hash(span, QCryptographicHash::Sha256).toHex())),
        field("sha256", x["sha256"].toString()));
    if (x.contains("hex"))
        QCOMPARE(field("hex", QString::fromLatin1(span.toHex())), field("hex", x["hex"].toString()));
}

// All expected entries, matched by name and occurrence, and no others.
void checkEntries(const Source& src, const QJsonArray& expected, const std::function<QByteArray(int32_t)>& fileBytes,
    bool checkHeaderAttributes)
{
    QStringList names;
    for (const auto& e : src.entries)
        names << q(e.name);
    QCOMPARE(src.entries.size(), static_cast<size_t>(expected.size()));
    std::map<QString, int> seen;
    for (const auto& ev : expected) {
        QJsonObject x = ev.toObject();
        const QString n = x["name"].toString();
        const Entry* e = nthEntry(src, n, seen[n]++);
        QVERIFY2(e, qPrintable(QStringLiteral("no entry '%1' (occurrence %2) among: %3").arg(n).arg(seen[n]).arg(names.join(", "))));
        checkEntry(src, *e, x, fileBytes, checkHeaderAttributes);
        if (QTest::currentTestFailed())
            return;
    }
}

QByteArray u64le(uint64_t v)
{
    QByteArray b(8, '\0');
    for (int i = 0; i < 8; ++i)
        b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    return b;
}

// A safetensors file: the header padded with spaces to a multiple of 8, its true length, then `buffer`.
QByteArray stFile(QByteArray header, const QByteArray& buffer = {})
{
    header.append(QByteArray((8 - header.size() % 8) % 8, ' '));
    return u64le(static_cast<uint64_t>(header.size())) + header + buffer;
}

bool hasFinding(const Source& src, Severity severity, const QString& text)
{
    for (const auto& f : src.findings)
        if (f.severity == severity && q(f.message).contains(text))
            return true;
    return false;
}

bool symlinkTo(const QString& target, const QString& link)
{
    return ::symlink(QFile::encodeName(target).constData(), QFile::encodeName(link).constData()) == 0;
}

bool copyFiles(const QString& from, const QString& to)
{
    if (!QDir().mkpath(to))
        return false;
    for (const QString& name : QDir(from).entryList(QDir::Files))
        if (!QFile::copy(from + "/" + name, to + "/" + name))
            return false;
    return true;
}

std::vector<uint8_t> toVector(const QByteArray& b) { return std::vector<uint8_t>(b.begin(), b.end()); }

// One line naming the file, as the CLI prints it.
void checkLoadErrorText(const LoadError& e, const QString& path, const QString& token)
{
    QCOMPARE(q(e.file()), path);
    QVERIFY2(q(std::string(e.what())).startsWith(path + QStringLiteral(": ")), e.what());
    QVERIFY2(!std::strchr(e.what(), '\n'), e.what());
    QVERIFY2(q(e.problem()).contains(token, Qt::CaseInsensitive),
        qPrintable(QStringLiteral("'%1' does not mention %2").arg(q(e.problem()), token)));
}

void checkCliFails(const QString& path, const QString& token)
{
    test::RunResult r = test::runStatelens({ QStringLiteral("ls"), path });
    QVERIFY2(r.exitCode == 2, qPrintable(QStringLiteral("exit %1, stderr: %2").arg(r.exitCode).arg(QString::fromUtf8(r.err))));
    QVERIFY2(r.out.isEmpty(), r.out.constData());
    QString err = QString::fromUtf8(r.err).trimmed();
    QVERIFY2(!err.contains(QLatin1Char('\n')), qPrintable(err));
    QVERIFY2(err.contains(path), qPrintable(err));
    QVERIFY2(err.contains(token, Qt::CaseInsensitive), qPrintable(err));
}

} // namespace

class TstSafetensorsFormats : public QObject {
    Q_OBJECT

private slots:
    void dtypeStrings_data();
    void dtypeStrings();

    void fixturesPresent();
    void safetensorsFixture_data();
    void safetensorsFixture();
    void headerLoadError_data();
    void headerLoadError();
    void cliFindingsExitCodes_data();
    void cliFindingsExitCodes();
    void manyTensorsHeader();
    void gapFindingsAreCapped();
    void shapesBeyondTheInlineDims();
    void duplicateNamesInALargeHeader();
    void headerReadInChunks_data();
    void headerReadInChunks();
    void headerScanReadsAsJson_data();
    void headerScanReadsAsJson();
    void headerScanStopsWhereTheLayoutEnds();

    void indexFixture_data();
    void indexFixture();
    void indexLoadError_data();
    void indexLoadError();
    void openFolder_data();
    void openFolder();
    void detectFormatIds_data();
    void detectFormatIds();
    void indexRefusesOddShards_data();
    void indexRefusesOddShards();
    void shardsSymlinkedOutOfTheFolder();
    void hubCacheLayout();
    void folderResolvesAsCanonical();
    void indexKeysAcrossDtypeRuns();
    void indexShardsOpenedWhileParsed();
    void indexFp8PairsGroupedEarly_data();
    void indexFp8PairsGroupedEarly();
    void realIndexFp8PairsGroupedEarly();
    void indexRowsListAlike();
    void safetensorsRowsListAlike();
    void binIndexShardsKeepTheirFiles();
    void indexShardWithUnknownDtypes();
    void loadProgressAndCancel();
};

// ---------------------------------------------------------------------------------------------------------------
// dtypes

void TstSafetensorsFormats::dtypeStrings_data()
{
    // docs/on-disk-formats.md, "dtypes" under "safetensors files": every safetensors dtype string, its bits,
    // and torch's name (F6 has none in torch).
    QTest::addColumn<QString>("st");
    QTest::addColumn<QString>("torch");
    QTest::addColumn<int>("bits");
    const struct {
        const char* st;
        const char* torch;
        int bits;
    } rows[] = {
        { "BOOL", "bool", 8 }, { "U8", "uint8", 8 }, { "I8", "int8", 8 }, { "I16", "int16", 16 }, { "U16", "uint16", 16 },
        { "I32", "int32", 32 }, { "U32", "uint32", 32 }, { "I64", "int64", 64 }, { "U64", "uint64", 64 },
        { "F16", "float16", 16 }, { "BF16", "bfloat16", 16 }, { "F32", "float32", 32 }, { "F64", "float64", 64 },
        { "C64", "complex64", 64 }, { "F8_E4M3", "float8_e4m3fn", 8 }, { "F8_E5M2", "float8_e5m2", 8 },
        { "F8_E8M0", "float8_e8m0fnu", 8 }, { "F8_E4M3FNUZ", "float8_e4m3fnuz", 8 },
        { "F8_E5M2FNUZ", "float8_e5m2fnuz", 8 }, { "F6_E2M3", "float6_e2m3fn", 6 }, { "F6_E3M2", "float6_e3m2fn", 6 },
        { "F4", "float4_e2m1fn", 4 },
    };
    for (const auto& r : rows)
        QTest::newRow(r.st) << QString::fromLatin1(r.st) << QString::fromLatin1(r.torch) << r.bits;
}

void TstSafetensorsFormats::dtypeStrings()
{
    QFETCH(QString, st);
    QFETCH(QString, torch);
    QFETCH(int, bits);
    auto dt = dtypeFromSafetensors(s(st));
    QVERIFY(dt.has_value());
    QCOMPARE(q(dtypeName(*dt)), torch);
    QCOMPARE(static_cast<int>(dtypeBits(*dt)), bits);
    QCOMPARE(q(dtypeSafetensorsName(*dt)), st);
    // Case matters, as in the reference's serde enum.
    QVERIFY(!dtypeFromSafetensors(s(st.toLower())).has_value() || st.toLower() == st);
}

// ---------------------------------------------------------------------------------------------------------------
// single safetensors files

void TstSafetensorsFormats::fixturesPresent()
{
    // Every case the generator promises; a missing file means the generator was not rerun.
    for (const char* name : { "all_dtypes", "metadata_rich", "no_metadata", "scalar_and_empty", "leading_whitespace",
             "header_order_shuffled", "odd_names", "escaped_fields", "fp4_shapes", "gap", "first_not_at_zero", "overlap", "size_mismatch",
             "trailing_bytes", "truncated", "duplicate_name", "reversed_offsets", "misaligned_slice",
             "validation_overflow", "unknown_dtype" }) {
        QVERIFY2(QFileInfo::exists(stDir() + "/" + name + ".safetensors"), name);
        QVERIFY2(QFileInfo::exists(stDir() + "/" + name + ".expected.json"), name);
    }
    for (const char* name : { "st_sharded", "bin_sharded", "missing_shard", "shard_lacks_tensor", "unlisted_tensor",
             "wrong_shard", "escaping_name", "lfs_pointer", "total_size_mismatch", "corrupt_index", "no_weight_map",
             "weight_map_not_object" })
        QVERIFY2(QFileInfo::exists(indexDir() + "/" + name + "/expected.json"), name);

    // all_dtypes covers every dtype string of the spec.
    QJsonObject x = requireJson(stDir() + "/all_dtypes.expected.json");
    QSet<QString> strings;
    for (const auto& e : x["entries"].toArray())
        strings.insert(e.toObject()["header_dtype"].toString());
    QCOMPARE(strings.size(), 22);
}

void TstSafetensorsFormats::safetensorsFixture_data()
{
    QTest::addColumn<QString>("name");
    QTest::addColumn<bool>("fromMemory");
    QTest::addColumn<int>("chunk"); // OpenOptions::headerChunk: 0 reads the header in one piece
    QTest::addColumn<bool>("parallel");
    QTest::addColumn<int>("scanBatch"); // OpenOptions::headerScanBatch: 0 reads every member with simdjson
    const QStringList files = QDir(stDir()).entryList({ QStringLiteral("*.expected.json") }, QDir::Files, QDir::Name);
    QVERIFY(!files.isEmpty());
    const int batch = int(OpenOptions().headerScanBatch);
    for (const QString& f : files) {
        QString name = f.chopped(int(std::strlen(".expected.json")));
        QTest::newRow(qPrintable(name + "/disk")) << name << false << int(OpenOptions().headerChunk) << true << batch;
        QTest::newRow(qPrintable(name + "/memory")) << name << true << int(OpenOptions().headerChunk) << true << batch;
        // Each member by simdjson, or the writers' layout a member or two at a time (what is not in it
        // resumes in simdjson after the members read).
        for (int scan : { 0, 1, 2 })
            QTest::newRow(qPrintable(name + "/scan" + QString::number(scan))) << name << false << 0 << false << scan;
        // Headers of a real file are read in 512 KiB chunks: these, in chunks of a few bytes, must read the same.
        for (int chunk : { 1, 7, 40 }) {
            QTest::newRow(qPrintable(name + "/chunks" + QString::number(chunk))) << name << false << chunk << false << batch;
            QTest::newRow(qPrintable(name + "/chunks" + QString::number(chunk) + "-two-threads"))
                << name << false << chunk << true << batch;
        }
    }
}

void TstSafetensorsFormats::safetensorsFixture()
{
    QFETCH(QString, name);
    QFETCH(bool, fromMemory);
    QFETCH(int, chunk);
    QFETCH(bool, parallel);
    QFETCH(int, scanBatch);
    const QString path = stDir() + "/" + name + ".safetensors";
    const QJsonObject x = requireJson(stDir() + "/" + name + ".expected.json");
    const QByteArray bytes = readAll(path);
    QCOMPARE(static_cast<uint64_t>(bytes.size()), u64(x["file_size"]));

    OpenOptions options;
    options.headerChunk = static_cast<size_t>(chunk);
    options.parallelHeader = parallel;
    options.headerScanBatch = static_cast<size_t>(scanBatch);
    Source src;
    try {
        src = fromMemory ? openSourceFromMemory(s(name + ".safetensors"), toVector(bytes), options) : openSource(s(path), options);
    } catch (const LoadError& e) {
        QFAIL(e.what());
    }
    QCOMPARE(q(formatId(src.format)), QStringLiteral("safetensors"));
    QCOMPARE(src.files.size(), size_t(1));
    QCOMPARE(q(src.files[0]), fromMemory ? name + ".safetensors" : path);
    QCOMPARE(q(src.container), QString());
    if (!fromMemory)
        QCOMPARE(q(formatId(detectFormat(s(path)))), QStringLiteral("safetensors"));

    // __metadata__, every pair (order aside).
    std::vector<std::pair<std::string, std::string>> wantMeta;
    for (const auto& p : x["metadata"].toArray())
        wantMeta.emplace_back(s(p.toArray()[0].toString()), s(p.toArray()[1].toString()));
    auto gotMeta = src.metadata;
    std::sort(wantMeta.begin(), wantMeta.end());
    std::sort(gotMeta.begin(), gotMeta.end());
    QVERIFY2(gotMeta == wantMeta, qPrintable(name));

    checkEntries(src, x["entries"].toArray(), [&](int32_t) { return bytes; }, true);
    if (QTest::currentTestFailed())
        return;
    checkFindings(src, x["findings"].toArray());
    if (QTest::currentTestFailed())
        return;

    // In a file the reference accepts, each entry's element bytes are exactly its span.
    if (x["findings"].toArray().isEmpty())
        for (const auto& e : src.entries)
            QVERIFY2(e.nbytes() == e.location.length, qPrintable(q(e.name) + ": nbytes " + QString::number(e.nbytes())));
}

void TstSafetensorsFormats::headerLoadError_data()
{
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<QString>("readerToken"); // what readSafetensors must name (the reference error)
    QTest::addColumn<QString>("openToken"); // what openSource / statelens ls must name

    const QByteArray ok = QByteArrayLiteral(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})");
    const QByteArray four(4, '\x01');
    auto entry = [&](const QByteArray& info) { return stFile("{\"a\":" + info + "}", four); };
    const QString deser = QStringLiteral("InvalidHeaderDeserialization");

    QTest::newRow("empty") << QByteArray() << "HeaderTooSmall" << "empty";
    QTest::newRow("5_bytes") << QByteArray("\x08\0\0\0\0", 5) << "HeaderTooSmall" << "HeaderTooSmall";
    QTest::newRow("7_bytes") << QByteArray("\x02\0\0\0\0\0\0", 7) << "HeaderTooSmall" << "HeaderTooSmall";
    QTest::newRow("header_too_large") << u64le(100'000'001) + stFile(ok, four) << "HeaderTooLarge" << "HeaderTooLarge";
    QTest::newRow("header_len_u64_max") << u64le(UINT64_MAX) + QByteArray("{}      ") << "HeaderTooLarge" << "HeaderTooLarge";
    QTest::newRow("header_past_eof") << u64le(1000) + QByteArray("{}      ") << "InvalidHeaderLength" << "InvalidHeaderLength";
    {
        QByteArray f = stFile(ok, four);
        QByteArray bad = u64le(static_cast<uint64_t>(f.size() - 8 + 1)) + f.mid(8); // one byte more than the file
        QTest::newRow("header_past_eof_by_one") << bad << "InvalidHeaderLength" << "InvalidHeaderLength";
    }
    QTest::newRow("invalid_json") << stFile(R"({"a":{"dtype":"F32",)") << deser << deser;
    QTest::newRow("json_array") << stFile("[1, 2]") << deser << deser;
    QTest::newRow("json_string") << stFile(R"("abcdef")") << deser << deser;
    QTest::newRow("json_after_object") << stFile(R"({} {})") << deser << deser;
    QTest::newRow("invalid_utf8") << stFile("{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", four)
                                  << "InvalidHeader" << "InvalidHeader";
    QTest::newRow("metadata_value_number") << stFile(R"({"__metadata__":{"format":1}})") << "__metadata__" << "__metadata__";
    QTest::newRow("metadata_value_object") << stFile(R"({"__metadata__":{"format":{"pt":"x"}}})") << "__metadata__"
                                           << "__metadata__";
    QTest::newRow("metadata_value_null") << stFile(R"({"__metadata__":{"format":null}})") << "__metadata__" << "__metadata__";
    QTest::newRow("metadata_not_object") << stFile(R"({"__metadata__":"pt"})") << "__metadata__" << "__metadata__";
    QTest::newRow("entry_not_object") << entry("[1]") << deser << deser;
    QTest::newRow("dtype_missing") << entry(R"({"shape":[1],"data_offsets":[0,4]})") << deser << deser;
    QTest::newRow("dtype_not_string") << entry(R"({"dtype":5,"shape":[1],"data_offsets":[0,4]})") << deser << deser;
    QTest::newRow("shape_missing") << entry(R"({"dtype":"F32","data_offsets":[0,4]})") << deser << deser;
    QTest::newRow("shape_negative") << entry(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})") << deser << deser;
    QTest::newRow("shape_fraction") << entry(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})") << deser << deser;
    QTest::newRow("offsets_missing") << entry(R"({"dtype":"F32","shape":[1]})") << deser << deser;
    QTest::newRow("offsets_one_value") << entry(R"({"dtype":"F32","shape":[1],"data_offsets":[4]})") << deser << deser;
    QTest::newRow("offsets_negative") << entry(R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})") << deser << deser;
    // Errors after members in the writers' layout (read by SafetensorsScan, the rest by simdjson).
    const QByteArray two = R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]})";
    const QByteArray eight(8, '\x01');
    QTest::newRow("unclosed_after_members") << stFile("{" + two + R"(,"c":{"dtype":"F32","shape":[1],"data_offsets":[8,12])", eight)
                                            << deser << deser;
    QTest::newRow("content_after_members") << stFile("{" + two + "} x", eight) << deser << deser;
    QTest::newRow("second_object_after_members") << stFile("{" + two + "}{}", eight) << deser << deser;
    QTest::newRow("shape_negative_after_members")
        << stFile("{" + two + R"(,"c":{"dtype":"F32","shape":[-1],"data_offsets":[8,12]}})", eight) << deser << deser;
    QTest::newRow("shape_leading_zero_after_members")
        << stFile("{" + two + R"(,"c":{"dtype":"F32","shape":[01],"data_offsets":[8,12]}})", eight) << deser << deser;
    QTest::newRow("exponent_after_members")
        << stFile("{" + two + R"(,"c":{"dtype":"F32","shape":[1],"data_offsets":[8,12e0]}})", eight) << deser << deser;
    QTest::newRow("offsets_three_after_members")
        << stFile("{" + two + R"(,"c":{"dtype":"F32","shape":[1],"data_offsets":[8,12,16]}})", eight) << deser << deser;
    QTest::newRow("invalid_utf8_after_members")
        << stFile("{" + two + ",\"c\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", eight)
        << "InvalidHeader" << "InvalidHeader";
}

// Unreadable headers: a LoadError (one line naming the file, naming the reference error), and exit code 2.
void TstSafetensorsFormats::headerLoadError()
{
    QFETCH(QByteArray, bytes);
    QFETCH(QString, readerToken);
    QFETCH(QString, openToken);
    const QString tag = QString::fromLatin1(QTest::currentDataTag());

    // The reader on its own, the header in one piece and in chunks of a few bytes (the chunks fail to join,
    // and the header read again in one piece reports the error).
    // Each with the writers' layout read by SafetensorsScan, a member at a time, and by simdjson alone.
    const QString memName = tag + ".safetensors";
    for (size_t chunk : { size_t(0), size_t(1), size_t(5) })
        for (bool parallel : { false, true })
            for (size_t scan : { OpenOptions().headerScanBatch, size_t(1), size_t(0) }) {
                OpenOptions options;
                options.headerChunk = chunk;
                options.parallelHeader = parallel;
                options.headerScanBatch = scan;
                try {
                    readSafetensors(InputFile::fromBuffer(s(memName), toVector(bytes)), options);
                    QFAIL(qPrintable("readSafetensors accepted it, chunks of " + QString::number(chunk)));
                } catch (const LoadError& e) {
                    checkLoadErrorText(e, memName, readerToken);
                    if (QTest::currentTestFailed())
                        return;
                }
            }

    // Through the loader, from disk, as a user opens it.
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString path = dir.filePath(tag + ".safetensors");
    QVERIFY(writeFile(path, bytes));
    try {
        openSource(s(path));
        QFAIL("openSource accepted it");
    } catch (const LoadError& e) {
        checkLoadErrorText(e, path, openToken);
        if (QTest::currentTestFailed())
            return;
    }
    checkCliFails(path, openToken);
}

void TstSafetensorsFormats::cliFindingsExitCodes_data()
{
    QTest::addColumn<QString>("fixture");
    QTest::addColumn<QString>("failOn");
    QTest::addColumn<int>("exitCode");
    QTest::newRow("clean") << "all_dtypes" << "warning" << 0;
    QTest::newRow("danger/none") << "gap" << "" << 0;
    QTest::newRow("danger/danger") << "overlap" << "danger" << 1;
    QTest::newRow("danger/warning") << "trailing_bytes" << "warning" << 1;
    QTest::newRow("warning/danger") << "unknown_dtype" << "danger" << 0;
    QTest::newRow("warning/warning") << "unknown_dtype" << "warning" << 1;
}

// Files the reference refuses still list (exit 0), and --fail-on turns their findings into exit 1.
void TstSafetensorsFormats::cliFindingsExitCodes()
{
    QFETCH(QString, fixture);
    QFETCH(QString, failOn);
    QFETCH(int, exitCode);
    QStringList args { QStringLiteral("ls"), stDir() + "/" + fixture + ".safetensors", QStringLiteral("--format"),
        QStringLiteral("json") };
    if (!failOn.isEmpty())
        args << QStringLiteral("--fail-on") << failOn;
    test::RunResult r = test::runStatelens(args);
    QVERIFY2(r.exitCode == exitCode, qPrintable(QStringLiteral("exit %1: %2").arg(r.exitCode).arg(QString::fromUtf8(r.err))));
    QJsonParseError err;
    QJsonDocument::fromJson(r.out, &err);
    QVERIFY2(err.error == QJsonParseError::NoError, qPrintable(err.errorString()));
    // Every tensor name of the truth is in the listing.
    for (const auto& e : requireJson(stDir() + "/" + fixture + ".expected.json")["entries"].toArray())
        QVERIFY(r.out.contains(e.toObject()["name"].toString().toUtf8()));
}

// 100,000 tensors: the header parses quickly and every offset lands where it should.
void TstSafetensorsFormats::manyTensorsHeader()
{
    constexpr int kCount = 100'000;
    QByteArray header = QByteArrayLiteral(R"({"__metadata__":{"format":"pt"})");
    header.reserve(kCount * 80);
    for (int i = 0; i < kCount; ++i)
        header += QStringLiteral(R"(,"model.layers.%1.weight":{"dtype":"BF16","shape":[2],"data_offsets":[%2,%3]})")
                      .arg(i)
                      .arg(i * 4)
                      .arg(i * 4 + 4)
                      .toLatin1();
    header += '}';
    QByteArray buffer(kCount * 4, '\0');
    for (int i = 0; i < kCount; ++i)
        std::memcpy(buffer.data() + i * 4, &i, 4);
    const QByteArray bytes = stFile(header, buffer);
    const uint64_t start = bytes.size() - buffer.size();

    QElapsedTimer timer;
    timer.start();
    Source src = openSourceFromMemory("many.safetensors", toVector(bytes));
    const qint64 ms = timer.elapsed();
    qInfo("100k-tensor header (%lld KB) read in %lld ms", static_cast<long long>(header.size() / 1024), static_cast<long long>(ms));
    // Generous: the reader takes well under 100 ms here in a release build; sanitizers slow it several-fold.
    QVERIFY2(ms < 10000, qPrintable(QString::number(ms)));
    QCOMPARE(src.entries.size(), size_t(kCount));
    QVERIFY2(src.findings.empty(), qPrintable(describeFindings(src)));
    for (int i : { 0, 1, 4242, kCount - 1 }) {
        const Entry& e = src.entries[i];
        QCOMPARE(q(e.name), QStringLiteral("model.layers.%1.weight").arg(i));
        QCOMPARE(e.location.offset, start + uint64_t(i) * 4);
        int v = -1;
        std::memcpy(&v, bytes.constData() + e.location.offset, 4);
        QCOMPARE(v, i);
    }
}

// A header full of gaps still loads, with a bounded number of findings.
void TstSafetensorsFormats::gapFindingsAreCapped()
{
    constexpr int kCount = 5'000;
    QByteArray header = "{";
    for (int i = 0; i < kCount; ++i)
        header += QStringLiteral(R"(%1"t%2":{"dtype":"U8","shape":[1],"data_offsets":[%3,%4]})")
                      .arg(i ? "," : "")
                      .arg(i)
                      .arg(i * 2)
                      .arg(i * 2 + 1)
                      .toLatin1();
    header += '}';
    Source src = openSourceFromMemory("gaps.safetensors", toVector(stFile(header, QByteArray(kCount * 2 - 1, 'x'))));
    QCOMPARE(src.entries.size(), size_t(kCount));
    QVERIFY(src.countFindings(Severity::Danger) >= 1);
    QVERIFY2(src.findings.size() <= 25, qPrintable(QString::number(src.findings.size())));
    for (const auto& f : src.findings)
        QVERIFY2(q(f.message).contains("InvalidOffset"), f.message.c_str());
}


// Shapes keep four dimensions inline (model/dims.h); five and more live on the heap and must survive the
// entry being copied and moved like any other (a Conv3d weight is five-dimensional).
void TstSafetensorsFormats::shapesBeyondTheInlineDims()
{
    const QList<QList<qint64>> shapes { { 2, 3, 1, 2 }, { 2, 1, 3, 1, 2 }, { 1, 2, 1, 1, 3, 1, 1, 2 } };
    QByteArray header = "{";
    qint64 offset = 0;
    for (int i = 0; i < shapes.size(); ++i) {
        QStringList dims;
        qint64 numel = 1;
        for (qint64 d : shapes[i]) {
            dims << QString::number(d);
            numel *= d;
        }
        header += QStringLiteral(R"(%1"t%2":{"dtype":"U8","shape":[%3],"data_offsets":[%4,%5]})")
                      .arg(i ? "," : "")
                      .arg(i)
                      .arg(dims.join(','))
                      .arg(offset)
                      .arg(offset + numel)
                      .toLatin1();
        offset += numel;
    }
    header += '}';
    const Source read = openSourceFromMemory("dims.safetensors", toVector(stFile(header, QByteArray(offset, 'x'))));
    std::vector<Entry> copies = read.entries; // copied
    std::vector<Entry> moved;
    for (Entry& e : copies)
        moved.push_back(std::move(e)); // and moved, with the vector's growth moving them again
    QCOMPARE(moved.size(), size_t(shapes.size()));
    for (int i = 0; i < shapes.size(); ++i) {
        QList<qint64> got;
        for (int64_t d : moved[i].shape)
            got << d;
        QCOMPARE(got, shapes[i]);
        QCOMPARE(moved[i].shape, read.entries[i].shape);
    }
}


// Duplicate names among thousands (the reader sorts name hashes with a radix sort above 256 names): every
// occurrence after a name's first is reported, in header order, the first 20 by name and then a count.
void TstSafetensorsFormats::duplicateNamesInALargeHeader()
{
    QStringList names;
    for (int i = 0; i < 2000; ++i)
        names << QStringLiteral("model.layers.%1.weight").arg(i);
    names << names[5] << names[5]; // a name three times
    for (int i = 0; i < 29; ++i)
        names << names[(i * 37 + 11) % 2000];
    // Two names whose hashes agree in the 32 bits the check sorts by (the high half of XXH3-64, found by a
    // search over layers.N.weight): told apart by comparing them, neither is a duplicate.
    const QString alike[] = { QStringLiteral("layers.12290.weight"), QStringLiteral("layers.13174.weight") };
    const auto high = [](const QString& n) { return nameHash64(n.toStdString()) >> 32; };
    QCOMPARE(high(alike[0]), high(alike[1]));
    names << alike[0] << alike[1];
    QByteArray header = "{";
    for (int i = 0; i < names.size(); ++i)
        header += QStringLiteral(R"(%1"%2":{"dtype":"U8","shape":[1],"data_offsets":[%3,%4]})")
                      .arg(i ? "," : "")
                      .arg(names[i])
                      .arg(i)
                      .arg(i + 1)
                      .toLatin1();
    header += '}';
    const Source src = openSourceFromMemory("dups.safetensors", toVector(stFile(header, QByteArray(names.size(), 'x'))));
    QCOMPARE(src.entries.size(), size_t(names.size()));
    QStringList reported;
    QString count;
    for (const Finding& f : src.findings) {
        if (q(f.message).contains("duplicate tensor name in the header"))
            reported << q(f.entry);
        else if (q(f.message).contains("duplicate tensor names in all"))
            count = q(f.message);
    }
    // The truth: the names after index 2000, each an earlier name again.
    QCOMPARE(reported, names.mid(2000, 20));
    QCOMPARE(count, QStringLiteral("31 duplicate tensor names in all"));
}

// A large header is read a chunk at a time (streamSafetensorsHeader), cut where a member ends. This one has
// what makes cutting hard: Python's spacing and newlines, escaped names, __metadata__ in the middle, a name
// longer than several chunks, unknown dtypes and a duplicate name in different chunks. Its truth is how it
// was written. With `fakeCuts`, names end in "}," too: cut there, a chunk does not parse, and the header is
// read again in one piece, to the same result.
void TstSafetensorsFormats::headerReadInChunks_data()
{
    QTest::addColumn<bool>("fakeCuts");
    QTest::addColumn<bool>("parallel");
    QTest::newRow("one-thread") << false << false;
    QTest::newRow("two-threads") << false << true;
    QTest::newRow("fake-cuts/one-thread") << true << false;
    QTest::newRow("fake-cuts/two-threads") << true << true;
}

void TstSafetensorsFormats::headerReadInChunks()
{
    QFETCH(bool, fakeCuts);
    QFETCH(bool, parallel);
    struct Tensor {
        QString name; // as read
        QByteArray written; // as written in the JSON
        QByteArray dtype;
        QList<qint64> shape;
        qint64 begin = 0; // in the byte buffer
    };
    QList<Tensor> tensors;
    for (int i = 0; i < 3000; ++i) {
        Tensor t;
        t.name = QStringLiteral("model.layers.%1.mlp.weight").arg(i);
        t.written = t.name.toUtf8();
        t.dtype = "F16";
        t.shape = { 2, i % 5 + 1 };
        if (i % 97 == 3) { // escapes: a quote, a backslash, and é spelled \u00e9
            t.name = QStringLiteral("caf\u00e9 \"%1\"\\x").arg(i);
            t.written = QByteArrayLiteral(R"(caf\u00e9 \")") + QByteArray::number(i) + QByteArrayLiteral(R"(\"\\x)");
        }
        if (i % 120 == 7) { // unknown dtypes, 25 in all
            t.dtype = "X9";
            t.shape = { 1 };
        }
        if (i == 1234) { // longer than several chunks
            t.name = QString(3000, QLatin1Char('n'));
            t.written = t.name.toUtf8();
        }
        if (fakeCuts && i % 500 == 11) { // "}," closes the name: it looks like the end of a member
            t.name += QStringLiteral("},");
            t.written += "},";
        }
        tensors << t;
    }
    for (int i = 0; i < 6; ++i) { // duplicates, far from their first, in chunks read on either thread
        tensors[2900 + i].name = tensors[100 + i].name;
        tensors[2900 + i].written = tensors[100 + i].written;
    }
    QByteArray header = "{";
    QByteArray buffer;
    for (int i = 0; i < tensors.size(); ++i) {
        Tensor& t = tensors[i];
        t.begin = buffer.size();
        qint64 numel = 1;
        QByteArrayList dims;
        for (qint64 d : t.shape) {
            numel *= d;
            dims << QByteArray::number(d);
        }
        const qint64 bytes = t.dtype == "F16" ? 2 * numel : numel;
        // Python's json.dumps spacing in the first half, compact in the rest, newlines here and there.
        const QByteArray sep = i < 1500 ? ", " : i % 7 == 0 ? ",\n  " : ",";
        const QByteArray colon = i < 1500 ? ": " : ":";
        if (i)
            header += sep;
        if (i == 1700)
            header += R"("__metadata__":{"format":"pt","note":"},\"x"},)";
        header += '"' + t.written + '"' + colon + R"({"dtype":")" + t.dtype + R"(","shape":[)" + dims.join(',')
            + R"(],"data_offsets":[)" + QByteArray::number(buffer.size()) + ',' + QByteArray::number(buffer.size() + bytes)
            + "]}";
        buffer += QByteArray(bytes, char(i));
    }
    header += "\n}";
    const QByteArray file = stFile(header, buffer);
    const uint64_t start = file.size() - buffer.size();

    OpenOptions options;
    options.headerChunk = 256; // the header is about 300 KB: over a thousand chunks
    options.parallelHeader = parallel;
    auto input = InputFile::fromBuffer("chunks.safetensors", toVector(file));
    // How it was read: in chunks, unless a fake cut made it read again in one piece.
    SafetensorsHeader h;
    std::vector<std::string> names;
    streamSafetensorsHeader(
        *input, options, h, [&](const SafetensorsTensor& t) { names.emplace_back(t.name); },
        [&](size_t i) -> std::string_view { return names[i]; }, [&] { names.clear(); });
    if (fakeCuts)
        QCOMPARE(h.chunks, size_t(0));
    else
        QVERIFY2(h.chunks > 1000, qPrintable(QString::number(h.chunks)));

    const Source src = readSafetensors(input, options);
    QCOMPARE(src.entries.size(), size_t(tensors.size()));
    for (int i = 0; i < tensors.size(); ++i) {
        const Entry& e = src.entries[size_t(i)];
        QCOMPARE(q(e.name), tensors[i].name);
        QList<qint64> shape;
        for (int64_t d : e.shape)
            shape << d;
        QCOMPARE(shape, tensors[i].shape);
        QCOMPARE(e.dtype == DType::Unknown, tensors[i].dtype == "X9");
        QCOMPARE(e.location.offset, start + uint64_t(tensors[i].begin));
    }
    QCOMPARE(src.metadata.size(), size_t(2));
    QCOMPARE(q(src.metadata[1].second), QStringLiteral("},\"x"));
    QStringList unknown, duplicates, others;
    for (const Finding& f : src.findings) {
        const QString m = q(f.message);
        if (m.startsWith("unknown dtype 'X9'"))
            unknown << q(f.entry);
        else if (m.contains("duplicate tensor name"))
            duplicates << q(f.entry);
        else
            others << m;
    }
    QStringList firstUnknown;
    for (const Tensor& t : tensors)
        if (t.dtype == "X9" && firstUnknown.size() < 20)
            firstUnknown << t.name;
    QCOMPARE(unknown, firstUnknown);
    QStringList duplicated;
    for (int i = 0; i < 6; ++i)
        duplicated << tensors[100 + i].name;
    QCOMPARE(duplicates, duplicated);
    QCOMPARE(others, QStringList { QStringLiteral("25 tensors in all have unknown dtypes") });

    // And exactly as the header read in one piece.
    OpenOptions whole;
    whole.headerChunk = 0;
    QCOMPARE(sourceToJson(readSafetensors(input, whole)), sourceToJson(src));

    // As `ls` reads it: rows (formats/safetensors_rows.h) until the first unknown dtype, then entries, built
    // alike; with int8 in their place (as many bytes), rows to the end, listed and built alike. Through the
    // restarts of fake cuts too.
    OpenOptions listing = options;
    listing.deferEntries = true;
    const Source listed = readSafetensors(input, listing);
    QVERIFY(!listed.entries.deferred());
    QCOMPARE(sourceToJson(listed), sourceToJson(src));
    QByteArray plainHeader = header;
    plainHeader.replace(R"("dtype":"X9")", R"("dtype":"I8")");
    auto plain = InputFile::fromBuffer("chunks.safetensors", toVector(stFile(plainHeader, buffer)));
    const Source rows = readSafetensors(plain, listing), built = readSafetensors(plain, options);
    QVERIFY(rows.entries.deferred());
    QCOMPARE(rows.entries.size(), size_t(tensors.size()));
    QCOMPARE(sourceToTable(rows), sourceToTable(built));
    QCOMPARE(sourceToJson(rows), sourceToJson(built));
}

// ---------------------------------------------------------------------------------------------------------------
// Members in the writers' layout read without simdjson (formats/safetensors_scan.h)

void TstSafetensorsFormats::headerScanReadsAsJson_data()
{
    // Headers that parse, in the writers' layout, near it, or not in it from some member on: each must read
    // exactly as simdjson reads it alone (headerScanBatch 0), findings and metadata included.
    QTest::addColumn<QByteArray>("header");
    QTest::addColumn<int>("tensors"); // -1: refused
    const auto t = [](const char* name, uint64_t begin, const char* layout = nullptr) {
        const QByteArray offsets = "[" + QByteArray::number(qulonglong(begin)) + "," + QByteArray::number(qulonglong(begin + 4)) + "]";
        QByteArray fields = layout ? QByteArray(layout) : QByteArray(R"({"dtype":"F32","shape":[1],"data_offsets":OFF})");
        fields.replace("OFF", offsets);
        return "\"" + QByteArray(name) + "\":" + fields;
    };
    const QByteArray meta = R"("__metadata__":{"format":"pt","note":"x y"})";
    QTest::newRow("writers") << "{" + meta + "," + t("a", 0) + "," + t("b", 4) + "," + t("c", 8) + "}" << 3;
    QTest::newRow("empty") << QByteArray("{}") << 0;
    QTest::newRow("empty_spaced") << QByteArray(" {  }  ") << 0;
    QTest::newRow("metadata_last") << "{" + t("a", 0) + "," + meta + "}" << 1;
    QTest::newRow("metadata_empty") << "{" + QByteArray(R"("__metadata__":{})") + "," + t("a", 0) + "}" << 1;
    QTest::newRow("metadata_twice") << "{" + meta + "," + t("a", 0) + "," + meta + "}" << 1;
    QTest::newRow("spaces") << "{ " + meta + " , " + t("a", 0, R"( { "shape" : [ 1 ] , "data_offsets" : OFF , "dtype" : "F32" } )")
            + " , " + t("b", 4) + " }  "
                            << 2;
    QTest::newRow("fields_reordered") << "{" + t("a", 0, R"({"data_offsets":OFF,"dtype":"F32","shape":[1]})") + "," + t("b", 4) + "}" << 2;
    QTest::newRow("scalar_and_zero_dims")
        << "{" + t("a", 0, R"({"dtype":"F32","shape":[],"data_offsets":OFF})") + "," + t("b", 4, R"({"dtype":"F32","shape":[0,5],"data_offsets":[4,4]})")
            + "," + t("c", 4) + "}"
        << 3;
    QTest::newRow("line_breaks") << "{\n  " + t("a", 0) + ",\n  " + t("b", 4) + "\n}\n" << 2;
    QTest::newRow("escaped_name_later") << "{" + t("a", 0) + "," + t("b", 4) + "," + t("c\\u0041", 8) + "," + t("d", 12) + "}" << 4;
    QTest::newRow("utf8_name_later") << "{" + t("a", 0) + "," + t("b", 4) + "," + t("\xc3\xa9", 8) + "," + t("d", 12) + "}" << 4;
    QTest::newRow("utf8_metadata") << "{" + QByteArray("\"__metadata__\":{\"k\":\"\xe2\x82\xac\"}") + "," + t("a", 0) + "}" << 1;
    QTest::newRow("unknown_field_later")
        << "{" + t("a", 0) + "," + t("b", 4, R"({"dtype":"F32","shape":[1],"data_offsets":OFF,"extra":[1,2]})") + "," + t("c", 8) + "}" << 3;
    QTest::newRow("field_twice_later")
        << "{" + t("a", 0) + "," + t("b", 4, R"({"dtype":"F16","dtype":"F32","shape":[1],"data_offsets":OFF})") + "," + t("c", 8) + "}" << 3;
    QTest::newRow("twenty_digits")
        << "{" + t("a", 0) + "," + t("b", 4, R"({"dtype":"F32","shape":[1],"data_offsets":[4,18446744073709551615]})") + "}" << 2;
    QTest::newRow("dims_past_int64")
        << "{" + t("a", 0) + "," + t("b", 4, R"({"dtype":"F32","shape":[9223372036854775807,2],"data_offsets":OFF})") + "}" << 2;
    QTest::newRow("findings") // an unknown dtype, bytes that do not match the shape, offsets that leave a gap
        << "{" + t("a", 0, R"({"dtype":"Q7","shape":[1],"data_offsets":OFF})") + "," + t("b", 4, R"({"dtype":"F32","shape":[3],"data_offsets":OFF})")
            + "," + t("c", 12) + "," + t("a", 16) + "}"
        << 4;
    QTest::newRow("f4_halved") << "{" + t("a", 0, R"({"dtype":"F4","shape":[2,4],"data_offsets":OFF})") + "}" << 1;
    QByteArray many = "{" + meta;
    for (int i = 0; i < 600; ++i) // over two batches of OpenOptions' default
        many += "," + t(qPrintable("layers." + QString::number(i) + ".weight"), uint64_t(i) * 4);
    QTest::newRow("600_tensors") << many + "}" << 600;
    QTest::newRow("600_tensors_escape_at_end") << many + "," + t("x\\n", 2400) + "}" << 601;
    // Refused (-1), with the same report wherever a batch ends: a stray ',' before a '}' or another ','
    // (fuzz_safetensors found the first: 1-member batches handed over at it and simdjson, resuming at the
    // '}', reported trailing content instead of the superfluous comma).
    QTest::newRow("comma_then_close_mid") << "{" + meta + "," + t("a", 0) + ",} " + t("b", 4) + "," + t("c", 8) + "}" << -1;
    QTest::newRow("comma_twice") << "{" + t("a", 0) + ", ," + t("b", 4) + "," + t("c", 8) + "}" << -1;
    QTest::newRow("comma_at_end") << "{" + t("a", 0) + "," + t("b", 4) + ",}" << -1;
}

void TstSafetensorsFormats::headerScanReadsAsJson()
{
    QFETCH(QByteArray, header);
    QFETCH(int, tensors);
    const QByteArray file = stFile(header, QByteArray(4096, '\x01'));
    const auto input = InputFile::fromBuffer("scan.safetensors", toVector(file));
    const auto reading = [&](size_t chunk, size_t scan) {
        OpenOptions options;
        options.headerChunk = chunk;
        options.parallelHeader = false;
        options.headerScanBatch = scan;
        try {
            return sourceToJson(readSafetensors(input, options));
        } catch (const LoadError& e) {
            return std::string("error: ") + e.what();
        }
    };
    const std::string json = reading(0, 0);
    if (tensors < 0) {
        QVERIFY2(json.starts_with("error: "), json.c_str());
    } else {
        QVERIFY2(!json.starts_with("error"), json.c_str());
        QCOMPARE(int(QJsonDocument::fromJson(QByteArray::fromStdString(json)).object()["entries"].toArray().size()), tensors);
    }
    for (size_t chunk : { size_t(0), size_t(13) })
        for (size_t scan : { size_t(1), size_t(2), size_t(3), OpenOptions().headerScanBatch })
            QVERIFY2(reading(chunk, scan) == json,
                qPrintable(QStringLiteral("chunks of %1, scan batches of %2").arg(chunk).arg(scan)));
}

// Where the scanner hands over to simdjson: at the ',' before the first member it did not return.
void TstSafetensorsFormats::headerScanStopsWhereTheLayoutEnds()
{
    const std::string a = R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})";
    const std::string b = R"("b":{"dtype":"BF16","shape":[],"data_offsets":[24,26]})";
    const std::string meta = R"("__metadata__":{"format":"pt"})";
    {
        const std::string text = "{" + meta + "," + a + "," + b + "}   ";
        SafetensorsScan scan(text.data(), text.size());
        QCOMPARE(scan.next(256), SafetensorsScan::Step::End);
        QCOMPARE(scan.members().size(), size_t(3));
        QVERIFY(scan.members()[0].isMetadata);
        QCOMPARE(scan.metadata().size(), size_t(1));
        QCOMPARE(scan.metadata()[0].second, std::string_view("pt"));
        const SafetensorsScan::Member& m = scan.members()[1];
        QCOMPARE(m.name, std::string_view("a"));
        QCOMPARE(m.dtype, std::string_view("F32"));
        QVERIFY(m.shape == Shape({ 2, 3 }));
        QCOMPARE(m.begin, uint64_t(0));
        QCOMPARE(m.end, uint64_t(24));
        QVERIFY(scan.members()[2].shape.empty());
        QCOMPARE(scan.members()[2].end, uint64_t(26));
    }
    {
        // A batch of one: a, then b; a field the layout lacks stops it at the ',' before that member.
        const std::string text = "{" + a + "," + b + R"(,"c":{"dtype":"F32","shape":[1],"data_offsets":[26,30],"x":0}})";
        SafetensorsScan scan(text.data(), text.size());
        QCOMPARE(scan.next(1), SafetensorsScan::Step::Batch);
        QCOMPARE(scan.members().size(), size_t(1));
        QCOMPARE(scan.members()[0].name, std::string_view("a"));
        QCOMPARE(scan.next(1), SafetensorsScan::Step::Batch);
        QCOMPARE(scan.members()[0].name, std::string_view("b"));
        QCOMPARE(scan.next(1), SafetensorsScan::Step::Other);
        QVERIFY(scan.members().empty());
        QCOMPARE(scan.resumeAt(), text.find(R"(,"c")"));
    }
    {
        // A ',' no member follows is no place to hand over: b's batch is not returned, and simdjson reads
        // from the ',' after a, where it meets the stray comma as it would reading the whole header.
        const std::string text = "{" + a + "," + b + ", }";
        SafetensorsScan scan(text.data(), text.size());
        QCOMPARE(scan.next(1), SafetensorsScan::Step::Batch);
        QCOMPARE(scan.next(1), SafetensorsScan::Step::Other);
        QVERIFY(scan.members().empty());
        QCOMPARE(scan.resumeAt(), text.find(R"(,"b")"));
    }
    {
        // Garbage after a whole batch: the batch is not returned, and nothing was, so simdjson reads it all.
        const std::string text = "{" + a + "," + b + "} x";
        SafetensorsScan scan(text.data(), text.size());
        QCOMPARE(scan.next(256), SafetensorsScan::Step::Other);
        QVERIFY(scan.members().empty());
        QCOMPARE(scan.resumeAt(), SafetensorsScan::npos);
    }
    // Not JSON in the layout from the start; and a text with an escape, a byte outside printable ASCII, or a
    // tab or line break anywhere is left to simdjson whole.
    const std::string escapeLater = "{" + a + "," + b + R"(,"c\u0041":{"dtype":"F32","shape":[1],"data_offsets":[26,30]}})";
    for (const std::string& other : { std::string("[1,2]"), std::string("{\"a\":1}"), std::string("{\"a\xff\":{}}"), std::string("{\t}"),
             escapeLater, "{" + a + ",\n" + b + "}" }) {
        SafetensorsScan scan(other.data(), other.size());
        QCOMPARE(scan.next(256), SafetensorsScan::Step::Other);
        QCOMPARE(scan.resumeAt(), SafetensorsScan::npos);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Hugging Face sharded indexes

namespace {

QStringList indexCases(bool loadErrors)
{
    QStringList out;
    for (const QString& d : QDir(indexDir()).entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name))
        if (QFileInfo::exists(indexDir() + "/" + d + "/expected.json")
            && requireJson(indexDir() + "/" + d + "/expected.json").contains("load_error") == loadErrors)
            out << d;
    return out;
}

} // namespace

void TstSafetensorsFormats::indexFixture_data()
{
    QTest::addColumn<QString>("folder");
    QTest::addColumn<bool>("openFolder"); // open the folder instead of the index file
    QTest::addColumn<bool>("prefetch"); // shards opened while the index is parsed
    QTest::addColumn<bool>("scan"); // shard headers in the writers' layout read by SafetensorsScan
    const QStringList cases = indexCases(false);
    QVERIFY(cases.size() >= 9);
    for (const QString& c : cases) {
        for (const bool prefetch : { false, true }) {
            const QString p = prefetch ? "/prefetch" : "";
            QTest::newRow(qPrintable(c + "/index" + p)) << c << false << prefetch << true;
            QTest::newRow(qPrintable(c + "/folder" + p)) << c << true << prefetch << true;
        }
        QTest::newRow(qPrintable(c + "/index/simdjson-alone")) << c << false << false << false;
    }
}

void TstSafetensorsFormats::indexFixture()
{
    QFETCH(QString, folder);
    QFETCH(bool, openFolder);
    QFETCH(bool, prefetch);
    QFETCH(bool, scan);
    const QString dir = indexDir() + "/" + folder;
    const QJsonObject x = requireJson(dir + "/expected.json");
    const QString indexPath = dir + "/" + x["index"].toString();

    Source src;
    try {
        OpenOptions options = prefetching(prefetch);
        options.headerScanBatch = scan ? options.headerScanBatch : 0;
        src = openSource(s(openFolder ? dir : indexPath), options);
    } catch (const LoadError& e) {
        QFAIL(e.what());
    }
    QCOMPARE(q(formatId(src.format)), x["format"].toString());
    QCOMPARE(QFileInfo(q(src.path)).canonicalFilePath(), QFileInfo(indexPath).canonicalFilePath());
    if (x.contains("total_size")) {
        const std::string* total = nullptr;
        for (const auto& [k, v] : src.metadata)
            if (k == "total_size")
                total = &v;
        QVERIFY(total);
        QCOMPARE(q(*total), QString::number(u64(x["total_size"])));
    }

    std::map<int32_t, QByteArray> cache;
    auto fileBytes = [&](int32_t i) {
        auto it = cache.find(i);
        if (it == cache.end())
            it = cache.emplace(i, readAll(q(src.files[i]))).first;
        return it->second;
    };
    checkEntries(src, x["entries"].toArray(), fileBytes, false);
    if (QTest::currentTestFailed())
        return;
    checkFindings(src, x["findings"].toArray());
    if (QTest::currentTestFailed())
        return;

    // Refused shard names are never opened: no file outside the folder is referred to.
    const QString canonicalDir = QFileInfo(dir).canonicalFilePath();
    for (const auto& f : src.files) {
        QVERIFY2(QFileInfo(q(f)).absolutePath().startsWith(QFileInfo(dir).absoluteFilePath())
                || QFileInfo(q(f)).canonicalPath() == canonicalDir,
            f.c_str());
    }
    for (const auto& n : x["never_opened"].toArray())
        for (const auto& f : src.files)
            QVERIFY2(!q(f).contains(n.toString()), f.c_str());

    // Loaded tensors are the shards' own: all mapped tensors' bytes were checked above; the container is the top.
    QCOMPARE(q(src.container), QString());
}

void TstSafetensorsFormats::indexLoadError_data()
{
    QTest::addColumn<QString>("folder");
    QTest::addColumn<bool>("openFolder");
    QTest::addColumn<bool>("prefetch");
    const QStringList cases = indexCases(true);
    QVERIFY(cases.size() >= 3);
    for (const QString& c : cases) {
        for (const bool prefetch : { false, true }) {
            const QString p = prefetch ? "/prefetch" : "";
            QTest::newRow(qPrintable(c + "/index" + p)) << c << false << prefetch;
            QTest::newRow(qPrintable(c + "/folder" + p)) << c << true << prefetch;
        }
    }
}

// A corrupt index, or one without a weight_map, is a LoadError naming the index (not a partial listing).
void TstSafetensorsFormats::indexLoadError()
{
    QFETCH(QString, folder);
    QFETCH(bool, openFolder);
    QFETCH(bool, prefetch);
    const QString dir = indexDir() + "/" + folder;
    const QJsonObject x = requireJson(dir + "/expected.json");
    const QString indexPath = dir + "/" + x["index"].toString();
    const QString token = x["load_error"].toArray()[0].toString();
    try {
        openSource(s(openFolder ? dir : indexPath), prefetching(prefetch));
        QFAIL("openSource accepted it");
    } catch (const LoadError& e) {
        QVERIFY2(QFileInfo(q(e.file())).canonicalFilePath() == QFileInfo(indexPath).canonicalFilePath(), e.what());
        QVERIFY2(!std::strchr(e.what(), '\n'), e.what());
        QVERIFY2(q(e.problem()).contains(token, Qt::CaseInsensitive), e.what());
    }
    if (!openFolder && !prefetch)
        checkCliFails(indexPath, token);
}

void TstSafetensorsFormats::openFolder_data()
{
    QTest::addColumn<QString>("folder");
    QTest::addColumn<QString>("format");
    QTest::addColumn<int>("entries");
    QTest::newRow("safetensors") << "st_sharded" << "safetensors-index" << 12;
    QTest::newRow("torch-bin") << "bin_sharded" << "torch-bin-index" << 8;
}

// The folder path finds the index, and the CLI lists it from the folder too.
void TstSafetensorsFormats::openFolder()
{
    QFETCH(QString, folder);
    QFETCH(QString, format);
    QFETCH(int, entries);
    const QString dir = indexDir() + "/" + folder;
    QCOMPARE(q(formatId(detectFormat(s(dir)))), format);
    Source src = openSource(s(dir));
    QCOMPARE(q(formatId(src.format)), format);
    QCOMPARE(src.entries.size(), size_t(entries));
    for (const QString& path : { dir, dir + "/" }) {
        test::RunResult r = test::runStatelens({ QStringLiteral("ls"), path, QStringLiteral("--fail-on"), QStringLiteral("warning") });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY(!r.out.isEmpty());
    }
}

void TstSafetensorsFormats::detectFormatIds_data()
{
    QTest::addColumn<QString>("path");
    QTest::addColumn<QString>("format");
    QTest::newRow("safetensors") << stDir() + "/all_dtypes.safetensors" << "safetensors";
    QTest::newRow("leading whitespace") << stDir() + "/leading_whitespace.safetensors" << "safetensors";
    QTest::newRow("st index") << indexDir() + "/st_sharded/model.safetensors.index.json" << "safetensors-index";
    QTest::newRow("bin index") << indexDir() + "/bin_sharded/pytorch_model.bin.index.json" << "torch-bin-index";
    QTest::newRow("st folder") << indexDir() + "/st_sharded" << "safetensors-index";
    QTest::newRow("bin folder") << indexDir() + "/bin_sharded" << "torch-bin-index";
    QTest::newRow("st shard") << indexDir() + "/st_sharded/model-00002-of-00003.safetensors" << "safetensors";
    QTest::newRow("bin shard") << indexDir() + "/bin_sharded/pytorch_model-00001-of-00002.bin" << "torch-zip";
}

void TstSafetensorsFormats::detectFormatIds()
{
    QFETCH(QString, path);
    QFETCH(QString, format);
    QCOMPARE(q(formatId(detectFormat(s(path)))), format);
    // Every id the loader gives is one docs/json-output.md lists, and reads back as the same format.
    const auto known = formatFromId(s(format));
    QVERIFY(known.has_value());
    QCOMPARE(q(formatId(*known)), format);
}

void TstSafetensorsFormats::indexRefusesOddShards_data()
{
    QTest::addColumn<QString>("shardName");
    QTest::addColumn<QString>("severity");
    QTest::addColumn<QString>("token");
    QTest::newRow("absolute") << "/etc/passwd" << "danger" << "outside";
    QTest::newRow("dotdot") << ".." << "danger" << "outside";
    QTest::newRow("backslash") << "..\\x.safetensors" << "danger" << "outside";
    // A shard that is the index itself, the folder, or another index would be read as an index again.
    QTest::newRow("itself") << "model.safetensors.index.json" << "warning" << "index";
    QTest::newRow("folder") << "." << "warning" << "regular file";
    QTest::newRow("subfolder") << "sub" << "warning" << "regular file";
    QTest::newRow("other index") << "sub/model.safetensors.index.json" << "warning" << "index";
}

// Shard names that must not be followed: the index still lists, the tensor is unavailable, nothing recurses.
void TstSafetensorsFormats::indexRefusesOddShards()
{
    QFETCH(QString, shardName);
    QFETCH(QString, severity);
    QFETCH(QString, token);
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    QVERIFY(QDir(dir.path()).mkdir("sub"));
    const QByteArray good = stFile(R"({"model.ok":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", QByteArray("\0\0\x80?", 4));
    QVERIFY(writeFile(dir.filePath("model-00001-of-00001.safetensors"), good));
    QJsonObject map { { "model.ok", "model-00001-of-00001.safetensors" }, { "model.odd", shardName } };
    const QByteArray index = QJsonDocument(QJsonObject { { "metadata", QJsonObject { { "total_size", 4 } } }, { "weight_map", map } }).toJson();
    QVERIFY(writeFile(dir.filePath("model.safetensors.index.json"), index));
    // An index in the subfolder that points back up (and at itself).
    QJsonObject back { { "model.ok", "../model.safetensors.index.json" }, { "model.self", "model.safetensors.index.json" } };
    QVERIFY(writeFile(dir.filePath("sub/model.safetensors.index.json"), QJsonDocument(QJsonObject { { "weight_map", back } }).toJson()));

    for (const bool prefetch : { false, true }) {
        Source src;
        try {
            src = openSource(s(dir.filePath("model.safetensors.index.json")), prefetching(prefetch));
        } catch (const LoadError& e) {
            QFAIL(e.what());
        }
        QCOMPARE(src.entries.size(), size_t(2));
        const Entry* ok = nthEntry(src, "model.ok", 0);
        const Entry* odd = nthEntry(src, "model.odd", 0);
        QVERIFY(ok && odd);
        QCOMPARE(locationName(ok->location.kind), QStringLiteral("mapped"));
        QCOMPARE(locationName(odd->location.kind), QStringLiteral("unavailable"));
        bool found = false;
        for (const auto& f : src.findings)
            found = found || (q(severityName(f.severity)) == severity && q(f.message).contains(token, Qt::CaseInsensitive));
        QVERIFY2(found, qPrintable(describeFindings(src)));
        QCOMPARE(src.countFindings(Severity::Danger), size_t(severity == "danger" ? 1 : 0));
    }
}

// A shard that is a symlink out of the index folder is never opened, though it is a good shard: a danger names
// it and its tensors are unavailable. That it was not opened is read from io/file_trust.h's record of every
// file StateLens opens. Symlinks that stay inside the folder, and the folder named through a symlink, read as
// before; names that reach one file through symlinks are one shard.
void TstSafetensorsFormats::shardsSymlinkedOutOfTheFolder()
{
    QTemporaryDir tmp;
    const QString d = tmp.path();
    const QString ckpt = d + "/ckpt";
    QVERIFY(copyFiles(indexDir() + "/st_sharded", ckpt));
    QVERIFY(QDir().mkpath(d + "/outside") && QDir().mkpath(ckpt + "/sub"));
    const QString outside = d + "/outside/model-00002-of-00003.safetensors";
    QVERIFY(QFile::rename(ckpt + "/model-00002-of-00003.safetensors", outside));
    QVERIFY(QFile::rename(ckpt + "/model-00003-of-00003.safetensors", ckpt + "/sub/three.safetensors"));
    QVERIFY(symlinkTo("sub/three.safetensors", ckpt + "/model-00003-of-00003.safetensors"));
    QVERIFY(symlinkTo(d + "/ckpt", d + "/alias"));
    for (const QString& target : { QStringLiteral("../outside/model-00002-of-00003.safetensors"), outside }) {
        QFile::remove(ckpt + "/model-00002-of-00003.safetensors");
        QVERIFY(symlinkTo(target, ckpt + "/model-00002-of-00003.safetensors"));
        for (const QString& path : { ckpt + "/model.safetensors.index.json", d + "/alias" }) {
            for (const bool prefetch : { false, true }) {
                Source src;
                try {
                    src = openSource(s(path), prefetching(prefetch));
                } catch (const LoadError& e) {
                    QFAIL(e.what());
                }
                QVERIFY2(hasFinding(src, Severity::Danger,
                             "shard model-00002-of-00003.safetensors is a symlink that points outside the index folder (to "
                                 + outside + "); not opened"),
                    qPrintable(describeFindings(src)));
                QCOMPARE(src.countFindings(Severity::Danger), size_t(1));
                QVERIFY2(hasFinding(src, Severity::Warning,
                             "unavailable because shard model-00002-of-00003.safetensors was not opened (it is a symlink "
                             "out of the index folder)"),
                    qPrintable(describeFindings(src)));
                for (const char* name : { "model.layers.1.mlp.weight", "model.layers.2.mlp.weight" })
                    QCOMPARE(locationName(nthEntry(src, name, 0)->location.kind), QStringLiteral("unavailable"));
                for (const char* name : { "model.embed_tokens.weight", "lm_head.weight" }) // shard 1; shard 3 via sub/
                    QCOMPARE(locationName(nthEntry(src, name, 0)->location.kind), QStringLiteral("mapped"));
                QCOMPARE(src.files.size(), size_t(2));
                QVERIFY2(inputReachedBy(s(outside)).empty(), "the shard outside the folder was opened");
            }
        }
    }

    // Two names that are one file (a symlink beside its target) are one shard, opened once.
    const QByteArray two = stFile(
        R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
        QByteArray(8, '\0'));
    QVERIFY(QDir().mkpath(d + "/same") && writeFile(d + "/same/a.safetensors", two));
    QVERIFY(symlinkTo("a.safetensors", d + "/same/b.safetensors"));
    QVERIFY(writeFile(
        d + "/same/model.safetensors.index.json", R"({"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}})"));
    for (const bool prefetch : { false, true }) {
        const Source same = openSource(s(d + "/same/model.safetensors.index.json"), prefetching(prefetch));
        QCOMPARE(same.files.size(), size_t(1));
        QCOMPARE(same.entries.size(), size_t(2));
        QCOMPARE(locationName(nthEntry(same, "y", 0)->location.kind), QStringLiteral("mapped"));
    }

    // A folder whose index is a symlink out of it: nothing to list.
    const QString index = d + "/outside/model.safetensors.index.json";
    QVERIFY(QFile::copy(indexDir() + "/st_sharded/model.safetensors.index.json", index));
    QVERIFY(QDir().mkpath(d + "/linked") && symlinkTo(index, d + "/linked/model.safetensors.index.json"));
    try {
        (void)openSource(s(d + "/linked"));
        QFAIL("a folder whose index lies outside it opened");
    } catch (const LoadError& e) {
        QVERIFY2(
            q(e.problem())
                .startsWith("model.safetensors.index.json is a symlink that points outside the folder (to " + index),
            e.what());
    }
    QVERIFY(inputReachedBy(s(index)).empty());
}

// A Hugging Face hub cache keeps a snapshot's files as symlinks to its repository's blobs
// (models--org--name/snapshots/<rev>/model.safetensors -> ../../blobs/<sha256>): the blobs count as inside the
// snapshot, another repository's blobs do not.
void TstSafetensorsFormats::hubCacheLayout()
{
    QTemporaryDir tmp;
    const QString repo = tmp.path() + "/hub/models--org--name";
    const QString snapshot = repo + "/snapshots/0123abcd";
    QVERIFY(QDir().mkpath(repo + "/blobs") && QDir().mkpath(snapshot));
    const QStringList names = QDir(indexDir() + "/st_sharded").entryList({ "*.safetensors", "*.json" }, QDir::Files);
    QVERIFY(names.contains("model.safetensors.index.json"));
    for (const QString& name : names) {
        if (name == "expected.json")
            continue;
        const QString blob
            = QString::fromLatin1(QCryptographicHash::hash(name.toUtf8(), QCryptographicHash::Sha256).toHex());
        QVERIFY(QFile::copy(indexDir() + "/st_sharded/" + name, repo + "/blobs/" + blob));
        QVERIFY(symlinkTo("../../blobs/" + blob, snapshot + "/" + name));
    }
    for (const QString& path : { snapshot, snapshot + "/model.safetensors.index.json" }) {
        const Source src = openSource(s(path));
        QCOMPARE(src.countFindings(Severity::Danger), size_t(0));
        QCOMPARE(src.files.size(), size_t(3));
        for (const Entry& e : src.entries)
            QCOMPARE(locationName(e.location.kind), QStringLiteral("mapped"));
    }
    // A snapshot file that leads into another repository's blobs is outside.
    const QString other = tmp.path() + "/hub/models--other--repo/blobs";
    QVERIFY(QDir().mkpath(other));
    const QString shard = snapshot + "/model-00001-of-00003.safetensors";
    QVERIFY(QFile::copy(shard, other + "/deadbeef") && QFile::remove(shard));
    QVERIFY(symlinkTo("../../../models--other--repo/blobs/deadbeef", shard));
    const Source src = openSource(s(snapshot));
    QVERIFY2(hasFinding(src, Severity::Danger, "model-00001-of-00003.safetensors is a symlink that points outside"),
        qPrintable(describeFindings(src)));
    QVERIFY(inputReachedBy(s(other + "/deadbeef")).empty());
}

// CheckpointFolder::resolve takes a shortcut for a plain file directly in the folder (one lstat instead of
// canonical()'s readlink per component). Whatever the folder's spelling (relative, "./", a closing '/', the
// current folder, through a symlink) and whatever the file, it must agree with std::filesystem::canonical.
void TstSafetensorsFormats::folderResolvesAsCanonical()
{
    namespace fs = std::filesystem;
    QTemporaryDir tmp;
    const QString d = tmp.path();
    QVERIFY(QDir().mkpath(d + "/ckpt/sub") && QDir().mkpath(d + "/outside"));
    QVERIFY(writeFile(d + "/ckpt/plain.safetensors", "x") && writeFile(d + "/ckpt/sub/deep.safetensors", "x")
        && writeFile(d + "/outside/far.safetensors", "x"));
    QVERIFY(symlinkTo("sub/deep.safetensors", d + "/ckpt/inside-link.safetensors"));
    QVERIFY(symlinkTo("../outside/far.safetensors", d + "/ckpt/outside-link.safetensors"));
    QVERIFY(symlinkTo(d + "/ckpt", d + "/alias"));
    QVERIFY(QDir().mkpath(d + "/ckpt/a-folder"));
    // "link/.." is ckpt (the symlink's target's parent), though it reads as d: d's own plain.safetensors is
    // not ckpt's.
    QVERIFY(symlinkTo(d + "/ckpt/sub", d + "/link") && writeFile(d + "/plain.safetensors", "x"));
    const QString before = QDir::currentPath();
    QVERIFY(QDir::setCurrent(d));
    struct Restore {
        QString to;
        ~Restore() { QDir::setCurrent(to); }
    } restore { before };
    const std::vector<std::string> leaves = { "plain.safetensors", "inside-link.safetensors",
        "outside-link.safetensors", "sub/deep.safetensors", "a-folder", "missing.safetensors", ".", ".." };
    const auto canonical = [](const std::string& path) {
        std::error_code ec;
        const fs::path resolved = fs::canonical(path, ec);
        return ec ? std::string() : resolved.string();
    };
    for (const std::string& folder : { s(d + "/ckpt"), s(d + "/ckpt/"), s(d + "/alias"), std::string("ckpt"),
             std::string("./ckpt"), std::string("ckpt/"), std::string("alias/"), std::string("link/.."),
             s(d + "/link/..") }) {
        const CheckpointFolder f(folder);
        for (const std::string& leaf : leaves) {
            const std::string path = (fs::path(folder) / leaf).lexically_normal().string();
            QVERIFY2(f.resolve(path) == canonical(path), qPrintable(q(folder + " + " + leaf + ": " + f.resolve(path))));
            if (folder.ends_with("link/..")) {
                // Names resolve from d here: d's plain.safetensors is out of ckpt, where the shortcut would
                // have put it.
                if (leaf == "plain.safetensors")
                    QVERIFY2(!f.leadsOutside(path).empty(), qPrintable(q(folder + " + " + leaf)));
                continue;
            }
            const bool outside = leaf == "outside-link.safetensors" || leaf == "..";
            QVERIFY2(f.leadsOutside(path).empty() == !outside, qPrintable(q(folder + " + " + leaf)));
        }
    }
    // The current folder, named as "" or ".".
    QVERIFY(QDir::setCurrent(d + "/ckpt"));
    for (const std::string& folder : { std::string(), std::string(".") }) {
        const CheckpointFolder f(folder);
        for (const std::string& leaf : leaves) {
            const std::string path = fs::path(leaf).lexically_normal().string();
            QCOMPARE(f.resolve(path), canonical(path));
        }
    }
}

// Real shards list their tensors in data order, runs of one dtype each sorted by name, while weight_map is
// sorted by name: each key is found right after an earlier hit in one of the runs, or through the shard's name
// index. Whatever the route, every key gets its own tensor; a name a shard writes twice gets its first copy.
// A shard's tensors wait for the merge as the header read them: an unknown dtype's text must outlive the
// parser that read it (it lived in the parser's string buffer once, freed before the merge read it).
void TstSafetensorsFormats::indexShardWithUnknownDtypes()
{
    QTemporaryDir tmp;
    const QByteArray header = R"({"a":{"dtype":"Q4_K","shape":[1],"data_offsets":[0,1]},)"
                              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[1,5]},)"
                              R"("c":{"dtype":"XYZ_LONGER_THAN_SIXTEEN_BYTES","shape":[1],"data_offsets":[5,6]}})";
    QVERIFY(sl::test::writeSafetensorsFile(tmp.path() + "/s-1.safetensors", header, QByteArray(6, '\0')));
    QFile index(tmp.path() + "/model.safetensors.index.json");
    QVERIFY(index.open(QIODevice::WriteOnly)
        && index.write(R"({"weight_map":{"a":"s-1.safetensors","b":"s-1.safetensors","c":"s-1.safetensors"}})") > 0);
    index.close();
    const Source src = openSource(s(tmp.path() + "/model.safetensors.index.json"));
    QCOMPARE(src.entries.size(), size_t(3));
    const std::string* a = src.entries[0].attribute("header_dtype");
    const std::string* c = src.entries[2].attribute("header_dtype");
    QVERIFY(a && c);
    QCOMPARE(q(*a), QStringLiteral("Q4_K"));
    QCOMPARE(q(*c), QStringLiteral("XYZ_LONGER_THAN_SIXTEEN_BYTES"));
}

// FP8 weights grouped with the block scale after them as an index's entries are built (quant::Fp8PairGrouper)
// give the listing of grouping after the reader: with FP8 alone (the early groups stand), beside what makes
// them split back (an input_scale, GPTQ keys, GPTQ keys under an FP8 weight's module, torchao's colon keys),
// and where they never form (weight_map out of order, a tensor the index does not list). Each case holds
// pairs within a shard and across two, a weight without its scale, a scale without its weight, and a bf16
// weight beside a scale.
void TstSafetensorsFormats::indexFp8PairsGroupedEarly_data()
{
    QTest::addColumn<QStringList>("extra"); // more keys, "name:DTYPE:shape", in the first shard
    QTest::addColumn<bool>("sortedMap");
    QTest::addColumn<bool>("unlisted"); // the second shard holds a tensor the index leaves out
    QTest::addColumn<bool>("early"); // the reader forms early groups
    QTest::addColumn<int>("groups"); // FP8 groups in the listing
    QTest::newRow("fp8 alone") << QStringList() << true << false << true << 3;
    QTest::newRow("input_scale") << QStringList { "m.0.a.input_scale:F32:" } << true << false << true << 3;
    QTest::newRow("gptq") << QStringList { "m.2.g.qweight:I32:16,64", "m.2.g.qzeros:I32:1,8", "m.2.g.scales:F16:1,64" }
                          << true << false << true << 3;
    QTest::newRow("gptq beside an fp8 weight")
        << QStringList { "m.0.a.qweight:I32:32,256", "m.0.a.qzeros:I32:2,32", "m.0.a.scales:F16:2,256" } << true
        << false << true << 3;
    QTest::newRow("torchao colon keys") << QStringList { "m.3.h.weight:qdata:F8_E4M3:4,4" } << true << false << true << 3;
    QTest::newRow("weight_map out of order") << QStringList() << false << false << false << 3;
    QTest::newRow("unlisted tensor") << QStringList() << true << true << false << 3;
}

void TstSafetensorsFormats::indexFp8PairsGroupedEarly()
{
    QFETCH(QStringList, extra);
    QFETCH(bool, sortedMap);
    QFETCH(bool, unlisted);
    QFETCH(bool, early);
    QFETCH(int, groups);
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    struct Key {
        QString name, dtype, shape;
        int shard;
    };
    std::vector<Key> keys = {
        { "m.0.a.weight", "F8_E4M3", "256,256", 1 },
        { "m.0.a.weight_scale_inv", "F32", "2,2", 1 },
        { "m.0.b.weight", "F8_E4M3", "256,128", 1 },
        { "m.0.b.weight_scale_inv", "F32", "2,1", 2 }, // in the next shard
        { "m.0.norm.weight", "BF16", "256", 2 },
        { "m.1.d.weight", "F8_E4M3", "128,128", 2 }, // no scale
        { "m.1.e.weight_scale_inv", "F32", "1,1", 2 }, // no weight
        { "m.1.f.weight", "BF16", "128,128", 2 },
        { "m.1.f.weight_scale_inv", "F32", "1,1", 2 }, // beside a bf16 weight
        { "m.1.g.weight", "F8_E5M2", "128,256", 2 },
        { "m.1.g.weight_scale_inv", "F32", "1,2", 2 },
    };
    for (const QString& e : extra) {
        const qsizetype cut = e.lastIndexOf(':'), dtypeCut = e.lastIndexOf(':', cut - 1);
        keys.push_back({ e.left(dtypeCut), e.mid(dtypeCut + 1, cut - dtypeCut - 1), e.mid(cut + 1), 1 });
    }
    const auto bytesOf = [](const QString& dtype, const QString& shape) {
        qint64 n = dtype == "F32" || dtype == "I32" ? 4 : dtype == "F16" || dtype == "BF16" ? 2 : 1;
        for (const QString& d : shape.split(',', Qt::SkipEmptyParts))
            n *= d.toLongLong();
        return n;
    };
    QString map;
    std::vector<const Key*> order;
    for (const Key& k : keys)
        order.push_back(&k);
    std::sort(order.begin(), order.end(), [](const Key* a, const Key* b) { return a->name < b->name; });
    if (!sortedMap)
        std::swap(order[2], order[order.size() - 1]); // one key out of place; pairs stay side by side otherwise
    for (int shard = 1; shard <= 2; ++shard) {
        QString header;
        qint64 offset = 0;
        for (const Key* k : order) {
            if (k->shard != shard)
                continue;
            const qint64 n = bytesOf(k->dtype, k->shape);
            header += QStringLiteral(R"("%1":{"dtype":"%2","shape":[%3],"data_offsets":[%4,%5]},)")
                          .arg(k->name, k->dtype, k->shape)
                          .arg(offset)
                          .arg(offset + n);
            offset += n;
        }
        if (shard == 2 && unlisted) {
            header += QStringLiteral(R"("z.extra":{"dtype":"F32","shape":[1],"data_offsets":[%1,%2]},)").arg(offset).arg(offset + 4);
            offset += 4;
        }
        header.chop(1);
        QVERIFY(writeFile(dir.filePath(QStringLiteral("model-0000%1-of-00002.safetensors").arg(shard)),
            stFile("{" + header.toLatin1() + "}", QByteArray(offset, '\0'))));
    }
    for (const Key* k : order)
        map += QStringLiteral(R"("%1": "model-0000%2-of-00002.safetensors", )").arg(k->name).arg(k->shard);
    map.chop(2);
    const QString index = dir.filePath("model.safetensors.index.json");
    QVERIFY(writeFile(index, (R"({"metadata": {}, "weight_map": {)" + map + "}}").toLatin1()));

    OpenOptions later;
    later.earlyFp8Groups = false;
    const Source withEarly = openSource(s(index));
    const Source withoutEarly = openSource(s(index), later);
    QCOMPARE(q(sourceToJson(withEarly)), q(sourceToJson(withoutEarly)));
    QVERIFY(!withEarly.provisionalFp8Groups);
    // The reader alone: whether it formed any.
    QCOMPARE(readHfIndex(s(index), {}).provisionalFp8Groups, early);
    QVERIFY(!readHfIndex(s(index), later).provisionalFp8Groups);

    // What the grouping is (tst_quantization checks FP8 grouping against torch's own files): the pairs and
    // their parts' keys, and the findings on the weight without a scale, the scale without a weight and the
    // bf16 weight beside a scale.
    int fp8 = 0;
    for (const Entry& e : withEarly.entries) {
        if (!(e.kind == EntryKind::Group && e.quantization && e.quantization->scheme.starts_with("fp8.")))
            continue;
        ++fp8;
        QVERIFY2(e.parts.size() >= 2, e.name.c_str());
        QCOMPARE(q(e.parts[0].name), QStringLiteral("weight"));
        QCOMPARE(q(*e.parts[0].attribute("key")), q(e.name));
        QCOMPARE(q(*e.parts[1].attribute("key")), q(e.name) + "_scale_inv");
        if (e.name == "m.0.a.weight") {
            QCOMPARE(q(*e.quantization->param("block_size")), QStringLiteral("[128, 128]"));
            QCOMPARE(e.parts.size(), size_t(extra.contains("m.0.a.input_scale:F32:") ? 3 : 2));
        }
    }
    QCOMPARE(fp8, groups);
    // As `ls` reads it: rows (formats/index_rows.h), pairs among them where the reader pairs early, listed and
    // built as the entries.
    OpenOptions listing;
    listing.deferEntries = true;
    const Source read = readHfIndex(s(index), listing);
    QVERIFY(read.entries.deferred());
    QCOMPARE(read.provisionalFp8Groups, early);
    const Source listed = openSource(s(index), listing);
    QCOMPARE(q(sourceToTable(listed)), q(sourceToTable(withEarly)));
    QCOMPARE(q(sourceToJson(listed)), q(sourceToJson(withEarly)));
    QVERIFY(hasFinding(withEarly, Severity::Warning, "m.1.d.weight_scale_inv"));
    QVERIFY(hasFinding(withEarly, Severity::Warning, "weight_scale_inv without its weight 'm.1.e.weight'"));
    QVERIFY(hasFinding(withEarly, Severity::Warning, "a bfloat16 weight beside a block-FP8 scale"));
}

// The same on an index the safetensors library wrote (torch 2.6, tests/fixtures/make_torch2_fixtures.py,
// set fp8_index): DeepSeek-V3's FP8 weights with their 128 x 128 scales in two shards, one pair split across
// them, weight_map sorted as transformers writes it. The truth is safe_open's per shard.
void TstSafetensorsFormats::realIndexFp8PairsGroupedEarly()
{
    const QString dir = test::fixturesDir() + QStringLiteral("/torch2/fp8_index");
    const QJsonObject truth = requireJson(dir + QStringLiteral("/fp8_index.safetensors.truth.json"));
    QVERIFY(truth.value(QStringLiteral("real")).toBool());
    QVERIFY2(truth.value(QStringLiteral("weight_map_sorted")).toBool(), "the early groups need a sorted weight_map");
    const QString index = dir + QStringLiteral("/model.safetensors.index.json");
    QVERIFY(readHfIndex(s(index), {}).provisionalFp8Groups);
    OpenOptions later;
    later.earlyFp8Groups = false;
    QVERIFY(!readHfIndex(s(index), later).provisionalFp8Groups);
    const Source withEarly = openSource(s(index));
    const Source withoutEarly = openSource(s(index), later);
    QCOMPARE(q(sourceToJson(withEarly)), q(sourceToJson(withoutEarly)));

    std::map<QString, QJsonObject> want;
    for (const QJsonValue& v : truth.value(QStringLiteral("entries")).toArray())
        want[v.toObject().value(QStringLiteral("name")).toString()] = v.toObject();
    QCOMPARE(want.size(), size_t(12));
    const auto check = [&](const Entry& part, const QString& key) {
        QVERIFY2(want.count(key), qPrintable(key));
        const QJsonObject& t = want[key];
        QCOMPARE(q(std::string(dtypeName(part.dtype))), t.value(QStringLiteral("dtype")).toString());
        QStringList dims;
        for (int64_t d : part.shape)
            dims << QString::number(d);
        QStringList wantDims;
        for (const QJsonValue& d : t.value(QStringLiteral("shape")).toArray())
            wantDims << QString::number(d.toInteger());
        QCOMPARE(dims, wantDims);
        QVERIFY(part.location.file >= 0 && size_t(part.location.file) < withEarly.files.size());
        const QString file = q(withEarly.files[size_t(part.location.file)]);
        QVERIFY2(file.endsWith(t.value(QStringLiteral("shard")).toString()), qPrintable(key));
    };
    int groups = 0;
    size_t listed = 0;
    for (const Entry& e : withEarly.entries) {
        listed += std::max<size_t>(1, e.parts.size());
        if (e.kind != EntryKind::Group) {
            check(e, q(e.name));
            continue;
        }
        ++groups;
        const QJsonObject& t = want[q(e.name)];
        QVERIFY2(t.contains(QStringLiteral("scale")), e.name.c_str());
        QCOMPARE(q(e.quantization->scheme), QStringLiteral("fp8.block"));
        QCOMPARE(e.parts.size(), size_t(2));
        QCOMPARE(q(e.parts[0].name), QStringLiteral("weight"));
        QCOMPARE(q(*e.parts[0].attribute("key")), q(e.name));
        check(e.parts[0], q(e.name));
        QCOMPARE(q(e.parts[1].name), QStringLiteral("weight_scale_inv"));
        QCOMPARE(q(*e.parts[1].attribute("key")), t.value(QStringLiteral("scale")).toString());
        check(e.parts[1], t.value(QStringLiteral("scale")).toString());
    }
    QCOMPARE(groups, 4);
    QCOMPARE(listed, want.size()); // every stored tensor once, as a part or on its own
    QVERIFY(withEarly.findings.empty());
}

namespace {

// Every file matching `pattern` among the fixtures here and in ../shared/fixtures/real (when there).
QStringList fixturesNamed(const QString& pattern)
{
    QStringList files;
    QStringList roots { test::fixturesDir() };
    if (const QString real = test::realFixturesDir(); !real.isEmpty())
        roots << real;
    for (const QString& root : roots)
        for (QDirIterator it(root, { pattern }, QDir::Files, QDirIterator::Subdirectories); it.hasNext();)
            files << it.next();
    return files;
}

} // namespace

// An index's entries are handed over as rows for a listing where each is a shard's tensor as written or an
// FP8 pair (formats/index_rows.h). On every index among the fixtures and ../shared's real files, and on
// folders that hold one, the table listed from the rows, and the JSON of the entries built from them, are
// those of the entries built as the index is read; rows are handed over for the sharded fixtures, torch's
// FP8 index included, and not where a shard is missing.
void TstSafetensorsFormats::indexRowsListAlike()
{
    const QStringList indexes = fixturesNamed("*.index.json");
    OpenOptions listing, reading;
    listing.deferEntries = true;
    int opened = 0, deferred = 0;
    QStringList rowsFor;
    for (const QString& index : indexes) {
        Source listed, built;
        try {
            listed = openSource(s(index), listing);
            built = openSource(s(index), reading);
        } catch (const LoadError&) {
            continue; // refused either way (indexLoadError checks how)
        }
        ++opened;
        QVERIFY2(!built.entries.deferred(), qPrintable(index));
        if (readHfIndex(s(index), listing).entries.deferred()) {
            ++deferred;
            rowsFor << QFileInfo(index).dir().dirName();
        }
        const bool rows = listed.entries.deferred() != nullptr;
        QCOMPARE(q(sourceToTable(listed)), q(sourceToTable(built)));
        QCOMPARE(q(sourceToJson(listed)), q(sourceToJson(built)));
        // Neither listing builds the entries: JSON builds one at a time (DeferredEntries::forEachBuilt).
        QVERIFY2((listed.entries.deferred() != nullptr) == rows, qPrintable(index));
    }
    qInfo("%d indexes opened, %d handed over as rows: %s", opened, deferred, qPrintable(rowsFor.join(", ")));
    QVERIFY2(rowsFor.contains("st_sharded") && rowsFor.contains("fp8_index"), qPrintable(rowsFor.join(", ")));
    QVERIFY2(!rowsFor.contains("missing_shard") && !rowsFor.contains("bin_sharded"), qPrintable(rowsFor.join(", ")));
}

// A safetensors file's entries are handed over as rows for a listing while each tensor fits one
// (formats/safetensors_rows.h). On every safetensors file among the fixtures and ../shared's real files, the
// table listed from the rows, and the JSON of the entries built from them, are those of the entries built
// as the file is read, and most are handed over as rows.
void TstSafetensorsFormats::safetensorsRowsListAlike()
{
    const QStringList files = fixturesNamed("*.safetensors");
    OpenOptions listing, reading;
    listing.deferEntries = true;
    int opened = 0, deferred = 0;
    for (const QString& file : files) {
        Source listed, built;
        try {
            listed = openSource(s(file), listing);
            built = openSource(s(file), reading);
        } catch (const LoadError&) {
            continue; // refused either way (safetensorsFixture and headerLoadError check how)
        }
        ++opened;
        QVERIFY2(!built.entries.deferred(), qPrintable(file));
        deferred += readSafetensors(InputFile::open(s(file)), listing).entries.deferred() != nullptr;
        const bool rows = listed.entries.deferred() != nullptr;
        QCOMPARE(q(sourceToTable(listed)), q(sourceToTable(built)));
        QCOMPARE(q(sourceToJson(listed)), q(sourceToJson(built)));
        QVERIFY2((listed.entries.deferred() != nullptr) == rows, qPrintable(file)); // JSON built none of them
    }
    qInfo("%d safetensors files opened, %d handed over as rows", opened, deferred);
    QVERIFY2(opened >= 20 && deferred * 2 > opened, qPrintable(QString("%1 of %2").arg(deferred).arg(opened)));
}

// A .bin index whose shards are read as whole sources (torch.save zips): every file index an entry carries,
// its own, its parts' (torchao's qdata and scale) and its pieces' (a DTensor's chunks), names the shard that
// holds it in the merged source. Found by fuzz_hf_index_folder: the parts kept the shard's own numbering
// (file 0, the first shard), so their values were read from another file. Each entry is held to the same
// shard opened alone, in the listing and in the values read.
void TstSafetensorsFormats::binIndexShardsKeepTheirFiles()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QStringList files = { test::fixturesDir() + "/index/bin_sharded/pytorch_model-00001-of-00002.bin",
        test::fixturesDir() + "/torch2/torchao/float8_tensor.pt",
        test::fixturesDir() + "/distributed/dt_2d_rank1.pt" };
    QString map; // in shard order, so the merged source numbers the shards 0, 1, 2 as they are listed
    std::map<QString, QJsonObject> alone; // entry name -> its JSON, from its shard opened alone
    std::vector<Source> shards;
    for (qsizetype i = 0; i < files.size(); ++i) {
        const QString shard = QStringLiteral("pytorch_model-0000%1-of-00003.bin").arg(i + 1);
        QVERIFY(QFile::copy(files[i], dir.filePath(shard)));
        shards.push_back(openSource(s(dir.filePath(shard))));
        const QJsonArray entries = QJsonDocument::fromJson(QByteArray::fromStdString(sourceToJson(shards.back())))
                                       .object()
                                       .value("entries")
                                       .toArray();
        for (const QJsonValue& v : entries) {
            const QString name = v.toObject().value("name").toString();
            QVERIFY2(!alone.count(name), qPrintable(name));
            map += QStringLiteral(R"("%1": "%2", )").arg(name, shard);
            alone[name] = v.toObject();
        }
    }
    const QString index = dir.filePath("pytorch_model.bin.index.json");
    map.chop(2);
    QVERIFY(writeFile(index, ("{\"weight_map\": {" + map + "}}").toUtf8()));
    const Source merged = openSource(s(index));
    QCOMPARE(merged.files.size(), size_t(3));
    QVERIFY(q(merged.files[2]).endsWith("00003-of-00003.bin"));
    const QJsonArray entries
        = QJsonDocument::fromJson(QByteArray::fromStdString(sourceToJson(merged))).object().value("entries").toArray();
    QCOMPARE(size_t(entries.size()), alone.size());
    int parts = 0, chunks = 0;
    for (const QJsonValue& v : entries) {
        const QJsonObject e = v.toObject();
        const QString name = e.value("name").toString();
        QCOMPARE(e, alone[name]); // files by path: the same shard, the same offsets
        parts += e.value("parts").toArray().size();
        chunks += e.value("sharding").toObject().value("chunks").toArray().size();
    }
    QVERIFY2(parts >= 2 && chunks >= 1, qPrintable(QStringLiteral("%1 parts, %2 chunks").arg(parts).arg(chunks)));

    // The values: each part of the torchao shard read through the index, as read from the shard alone.
    const Source& ao = shards[1];
    std::vector<Entry> fromIndex, fromShard;
    for (const Entry& e : ao.entries) {
        const Entry* m = nullptr;
        for (const Entry& c : merged.entries)
            if (c.name == e.name)
                m = &c;
        QVERIFY2(m && m->parts.size() == e.parts.size(), e.name.c_str());
        for (size_t k = 0; k < e.parts.size(); ++k)
            if (e.parts[k].location.kind == TensorLocation::Kind::Mapped) {
                fromShard.push_back(e.parts[k]);
                fromIndex.push_back(m->parts[k]);
            }
    }
    QVERIFY(fromShard.size() >= 2);
    const auto stats = [](Source src, std::vector<Entry> es) {
        std::vector<size_t> at;
        for (Entry& e : es) {
            at.push_back(src.entries.size());
            src.entries.push_back(std::move(e));
        }
        values::StatsOptions o;
        o.bins = 0;
        std::vector<QString> out;
        for (const auto& r : values::computeStats(src, at, o)) {
            if (!r.stats) // a part whose values cannot be read compares nothing
                return std::vector<QString> { QStringLiteral("not read: ") + q(r.skipped) };
            out.push_back(QStringLiteral("%1 %2 %3 %4 %5")
                              .arg(r.stats->numel)
                              .arg(r.stats->min)
                              .arg(r.stats->max)
                              .arg(r.stats->mean)
                              .arg(r.stats->hash));
        }
        return out;
    };
    const std::vector<QString> want = stats(ao, fromShard), have = stats(merged, fromIndex);
    QCOMPARE(want.size(), fromShard.size()); // every part read from the shard alone
    QCOMPARE(have, want);
}

// Shards opened on a second thread while the index is parsed (ShardPrefetch) give the listing of shards opened
// after it: 120 shards, one missing, one named twice (".\/" and plain), one reached through a symlink beside
// it; and an index whose JSON fails after naming shards is the same LoadError. Repeated, to give a race a
// chance to show (and ASan, in CI, a use after free).
void TstSafetensorsFormats::indexShardsOpenedWhileParsed()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    constexpr int kShards = 120;
    QJsonObject map;
    for (int i = 1; i <= kShards; ++i) {
        const QString shard = QStringLiteral("model-%1-of-00120.safetensors").arg(i, 5, 10, QLatin1Char('0'));
        const QString a = QStringLiteral("t.%1.a").arg(i, 5, 10, QLatin1Char('0'));
        const QString b = QStringLiteral("t.%1.b").arg(i, 5, 10, QLatin1Char('0'));
        const QByteArray header = QStringLiteral(R"({"%1":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                                 R"("%2":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})")
                                      .arg(a, b)
                                      .toLatin1();
        if (i != 7) // missing
            QVERIFY(writeFile(dir.filePath(shard), stFile(header, QByteArray(8, '\0'))));
        map[a] = shard;
        map[b] = i == 3 ? "./" + shard : i == 10 ? QStringLiteral("alias.safetensors") : shard;
    }
    QVERIFY(symlinkTo("model-00010-of-00120.safetensors", dir.filePath("alias.safetensors")));
    const QString index = dir.filePath("model.safetensors.index.json");
    QVERIFY(writeFile(index, QJsonDocument(QJsonObject { { "weight_map", map } }).toJson()));

    const Source after = openSource(s(index), prefetching(false));
    QCOMPARE(after.entries.size(), size_t(2 * kShards));
    size_t mapped = 0;
    for (const Entry& e : after.entries)
        mapped += e.location.kind == TensorLocation::Kind::Mapped;
    QCOMPARE(mapped, size_t(2 * kShards - 2)); // shard 7's two are unavailable
    QCOMPARE(after.files.size(), size_t(kShards)); // "./" and the symlink name no shard of their own
    const std::string expected = sourceToJson(after);
    OpenOptions someFirst = prefetching(true); // as a large index is read: the loop opens what is left
    someFirst.shardPrefetchFinishes = false;
    for (int run = 0; run < 10; ++run) {
        QCOMPARE(sourceToJson(openSource(s(index), prefetching(true))), expected);
        QCOMPARE(sourceToJson(openSource(s(index), someFirst)), expected);
    }

    // Shards named, then a value that is not a file name: the same error, whatever was opened meanwhile.
    const QString bad = dir.filePath("bad.safetensors.index.json");
    QVERIFY(writeFile(bad,
        R"({"weight_map": {"t.00001.a": "model-00001-of-00120.safetensors", "t.00002.a": "model-00002-of-00120.safetensors",)"
        R"( "t.00003.a": "model-00003-of-00120.safetensors", "t.00004.a": 5}})"));
    QString message;
    try {
        openSource(s(bad), prefetching(false));
        QFAIL("accepted");
    } catch (const LoadError& e) {
        message = q(e.what());
    }
    QVERIFY2(message.contains("weight_map value for 't.00004.a' is not a file name"), qPrintable(message));
    for (int run = 0; run < 20; ++run) {
        try {
            openSource(s(bad), prefetching(true));
            QFAIL("accepted");
        } catch (const LoadError& e) {
            QCOMPARE(q(e.what()), message);
        }
    }
}

void TstSafetensorsFormats::indexKeysAcrossDtypeRuns()
{
    QTemporaryDir tmp;
    struct T {
        QByteArray name, dtype;
        int bytes;
    };
    // Shard 1: a float32 run, a bfloat16 run and a uint8 run (six runs in all with the repeats below); shard 2
    // repeats "dup" with two dtypes. Each tensor is one element.
    const QList<T> shard1 = { { "k.0.s", "F32", 4 }, { "k.1.s", "F32", 4 }, { "k.2.s", "F32", 4 }, { "k.0.w", "BF16", 2 },
        { "k.1.w", "BF16", 2 }, { "k.2.w", "BF16", 2 }, { "a.b", "U8", 1 }, { "k.0.z", "U8", 1 }, { "k.1.z", "U8", 1 },
        { "k.2.z", "U8", 1 }, { "m.0", "I32", 4 }, { "m.1", "I64", 8 }, { "m.2", "I16", 2 } };
    const QList<T> shard2 = { { "dup", "F64", 8 }, { "q", "F32", 4 }, { "dup", "I8", 1 } };
    QHash<QByteArray, QPair<QByteArray, QByteArray>> want; // name -> (dtype, shard)
    for (const auto& [file, tensors] : { std::pair { QByteArray("s-1.safetensors"), shard1 }, std::pair { QByteArray("s-2.safetensors"), shard2 } }) {
        QByteArray header = "{";
        int offset = 0;
        for (const T& t : tensors) {
            header += (header.size() > 1 ? "," : "") + sl::test::jsonString(t.name) + ":{\"dtype\":\"" + t.dtype
                + "\",\"shape\":[1],\"data_offsets\":[" + QByteArray::number(offset) + "," + QByteArray::number(offset + t.bytes) + "]}";
            offset += t.bytes;
            if (!want.contains(t.name))
                want.insert(t.name, { t.dtype, file });
        }
        QVERIFY(sl::test::writeSafetensorsFile(tmp.path() + "/" + file, header + "}", QByteArray(offset, '\0')));
    }
    QList<QByteArray> keys = want.keys();
    std::sort(keys.begin(), keys.end());
    QByteArray map;
    for (const QByteArray& k : keys)
        map += (map.isEmpty() ? "" : ",") + sl::test::jsonString(k) + ":\"" + want[k].second + "\"";
    QFile index(tmp.path() + "/model.safetensors.index.json");
    QVERIFY(index.open(QIODevice::WriteOnly) && index.write("{\"weight_map\":{" + map + "}}") > 0);
    index.close();

    const Source src = openSource(s(tmp.path() + "/model.safetensors.index.json"));
    // The keys in weight_map order, then the second "dup", which the index cannot name apart from the first.
    QCOMPARE(src.entries.size(), size_t(keys.size()) + 1);
    QCOMPARE(src.entries.back().name, std::string("dup"));
    QCOMPARE(src.entries.back().dtype, DType::Int8);
    QVERIFY2(hasFinding(src, Severity::Warning, "holds this tensor but the index does not list it"), qPrintable(describeFindings(src)));
    static const QHash<QByteArray, QString> torchName = { { "F32", "float32" }, { "BF16", "bfloat16" }, { "U8", "uint8" },
        { "I32", "int32" }, { "I64", "int64" }, { "I16", "int16" }, { "F64", "float64" } };
    for (size_t i = 0; i < size_t(keys.size()); ++i) {
        const Entry& e = src.entries[i];
        QCOMPARE(QByteArray::fromStdString(e.name), keys[qsizetype(i)]); // weight_map order
        QCOMPARE(q(std::string(dtypeName(e.dtype))), torchName.value(want[keys[qsizetype(i)]].first));
        QVERIFY2(QString::fromStdString(src.files.at(static_cast<size_t>(e.location.file))).endsWith(want[keys[qsizetype(i)]].second),
            e.name.c_str());
    }
    QVERIFY2(hasFinding(src, Severity::Danger, "duplicate tensor name"), qPrintable(describeFindings(src)));
}

QTEST_GUILESS_MAIN(TstSafetensorsFormats)
#include "tst_safetensors_formats.moc"

// ---------------------------------------------------------------------------------------------------------------
// Progress and cancellation (util/load_control.h): shards are counted; a cancelled open throws LoadCancelled,
// whether it is caught before the first shard, between shards, or inside a pickle.

void TstSafetensorsFormats::loadProgressAndCancel()
{
    const std::string stIndex = (indexDir() + "/st_sharded/model.safetensors.index.json").toStdString();
    const std::string binIndex = (indexDir() + "/bin_sharded/pytorch_model.bin.index.json").toStdString();
    {
        sl::LoadControl c;
        QCOMPARE(c.fraction(), -1.0); // nothing announced yet
        sl::OpenOptions o;
        o.control = &c;
        const sl::Source s = sl::openSource(stIndex, o);
        QVERIFY(!s.entries.empty());
        QCOMPARE(c.total(), uint64_t(3)); // three shards in the index
        QCOMPARE(c.done(), uint64_t(3));
        QCOMPARE(c.fraction(), 1.0);
    }
    {
        sl::LoadControl c;
        sl::OpenOptions o;
        o.control = &c;
        (void)sl::openSource(binIndex, o);
        QCOMPARE(c.total(), uint64_t(2));
        QCOMPARE(c.done(), uint64_t(2));
    }
    for (const std::string& path : { stIndex, binIndex }) {
        sl::LoadControl c;
        c.cancel();
        sl::OpenOptions o;
        o.control = &c;
        QVERIFY_THROWS_EXCEPTION(sl::LoadCancelled, sl::openSource(path, o));
    }
    // Inside a pickle: the reader itself, past the loader's first check, stops at the VM's checkpoint.
    const std::string shard = (indexDir() + "/bin_sharded/pytorch_model-00001-of-00002.bin").toStdString();
    sl::LoadControl c;
    c.cancel();
    sl::OpenOptions o;
    o.control = &c;
    QVERIFY_THROWS_EXCEPTION(sl::LoadCancelled, sl::readTorchZip(sl::InputFile::open(shard), o));
    // The same file without cancellation opens.
    QVERIFY(!sl::readTorchZip(sl::InputFile::open(shard), {}).entries.empty());
}
