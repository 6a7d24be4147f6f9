// Tensor values against torch: every fixture in tests/fixtures/values (made by make_values_fixtures.py
// with Debian's torch 1.13) carries, per tensor, what torch computes from the loaded tensor: the sha256 of
// its elements in logical order, the first values, min/max/mean/std over the finite values, NaN/Inf/zero
// counts and torch.histc. StateLens reads the same files without torch and must agree: the bytes exactly,
// the statistics to rounding. Float8 tables are checked value by value against an independent decoder.

#include "common/test_files.h"
#include "common/handwritten_safetensors.h"
#include "common/test_paths.h"
#include "formats/loader.h"
#include "formats/rank_files_reader.h"
#include "util/load_control.h"
#include "values/element_decode.h"
#include "values/init_hints.h"
#include "values/tensor_bytes.h"
#include "values/tensor_compare.h"
#include "values/tensor_stats.h"
#include "values/value_reader.h"

#include <QCryptographicHash>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QTest>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

using namespace sl;

namespace {

using sl::test::readJson;

QString valuesDir()
{
    return test::fixturesDir() + QStringLiteral("/values");
}


// "nan", "inf", "-inf" or a number.
double number(const QJsonValue& v)
{
    if (v.isString()) {
        const QString s = v.toString();
        if (s == QStringLiteral("nan"))
            return std::numeric_limits<double>::quiet_NaN();
        return s.startsWith(QLatin1Char('-')) ? -std::numeric_limits<double>::infinity()
                                              : std::numeric_limits<double>::infinity();
    }
    return v.toDouble();
}

bool sameValue(double a, double b)
{
    if (std::isnan(a) || std::isnan(b))
        return std::isnan(a) && std::isnan(b);
    return a == b;
}

bool close(double got, double want, double rel = 1e-9)
{
    return std::fabs(got - want) <= rel * std::max({ 1.0, std::fabs(want), std::fabs(got) });
}

const Entry* findEntry(const Source& s, const QString& name)
{
    for (const Entry& e : s.entries)
        if (QString::fromStdString(e.name) == name)
            return &e;
    return nullptr;
}

// The statistics fields of one expected object against ours.
void compareStats(const QString& what, const values::TensorStats& got, const QJsonObject& want)
{
    const QByteArray label = what.toUtf8();
    QVERIFY2(static_cast<qint64>(got.nan) == want.value(QStringLiteral("nan")).toInteger(), label);
    QVERIFY2(static_cast<qint64>(got.posInf) == want.value(QStringLiteral("posinf")).toInteger(), label);
    QVERIFY2(static_cast<qint64>(got.negInf) == want.value(QStringLiteral("neginf")).toInteger(), label);
    QVERIFY2(static_cast<qint64>(got.zeros) == want.value(QStringLiteral("zeros")).toInteger(), label + " zeros");
    if (want.value(QStringLiteral("min")).isNull()) {
        QVERIFY2(got.finite == 0, label);
    } else {
        QVERIFY2(got.finite > 0, label);
        QVERIFY2(got.min == want.value(QStringLiteral("min")).toDouble(),
            label + " min " + QByteArray::number(got.min, 'g', 17));
        QVERIFY2(got.max == want.value(QStringLiteral("max")).toDouble(),
            label + " max " + QByteArray::number(got.max, 'g', 17));
        QVERIFY2(close(got.mean, want.value(QStringLiteral("mean")).toDouble()),
            label + " mean " + QByteArray::number(got.mean, 'g', 17) + " vs "
                + QByteArray::number(want.value(QStringLiteral("mean")).toDouble(), 'g', 17));
    }
    const auto sd = got.std();
    if (want.value(QStringLiteral("std")).isNull())
        QVERIFY2(!sd, label + " std");
    else
        QVERIFY2(sd && close(*sd, want.value(QStringLiteral("std")).toDouble(), 1e-8),
            label + " std " + QByteArray::number(sd.value_or(-1), 'g', 17) + " vs "
                + QByteArray::number(want.value(QStringLiteral("std")).toDouble(), 'g', 17));
    const QJsonValue h = want.value(QStringLiteral("histogram"));
    if (h.isNull() || h.isUndefined()) {
        QVERIFY2(got.histogram.empty(), label + " histogram");
        return;
    }
    const QJsonArray counts = h.toObject().value(QStringLiteral("counts")).toArray();
    QVERIFY2(got.histogram.size() == static_cast<size_t>(counts.size()), label + " bins");
    // Same arithmetic as torch.histc in double, so the counts should agree exactly; a value sitting on a bin
    // edge may round into its neighbour, so allow one value to move per edge.
    qint64 moved = 0, total = 0, wantTotal = 0;
    for (qsizetype b = 0; b < counts.size(); ++b) {
        moved += std::llabs(static_cast<qint64>(got.histogram[static_cast<size_t>(b)]) - counts[b].toInteger());
        total += static_cast<qint64>(got.histogram[static_cast<size_t>(b)]);
        wantTotal += counts[b].toInteger();
    }
    QVERIFY2(total == wantTotal, label + " histogram total");
    QVERIFY2(moved <= 2 * (counts.size() - 1), label + " histogram counts");
}

} // namespace

namespace {

// A source of one tensor, `bytes` written to `dir` as a raw file: for dtypes torch 1.13 cannot save.
Source rawTensorSource(const QTemporaryDir& dir, const QByteArray& bytes, DType dtype, const Shape& shape)
{
    Source s;
    s.path = dir.filePath(QStringLiteral("tensor.bin")).toStdString();
    QFile f(QString::fromStdString(s.path));
    if (!f.open(QIODevice::WriteOnly) || f.write(bytes) != bytes.size())
        return s; // no entry: the caller's checks fail
    s.files = { s.path };
    Entry e;
    e.name = "t";
    e.dtype = dtype;
    e.shape = shape;
    e.location.kind = TensorLocation::Kind::Mapped;
    e.location.file = 0;
    e.location.length = static_cast<uint64_t>(bytes.size());
    s.entries.push_back(e);
    return s;
}

// Values made by a ValueReader (dequantized groups, complex parts, sparse tensors) against torch: every
// value exactly (`sha256`, of all of them as float64 in logical order), the first ones, and the statistics
// in `stats` (computed without a histogram when `stats` has none).
void checkReaderValues(const QString& name, const Source& s, const Entry& e, const values::TensorStatsResult& r,
    const QJsonObject& stats, const QString& sha256)
{
    const QByteArray label = name.toUtf8();
    QVERIFY2(r.stats, qPrintable(name + QStringLiteral(": ") + QString::fromStdString(r.skipped)));
    values::FileCache files;
    std::string why;
    const auto reader = values::ValueReader::open(s, e, files, why);
    QVERIFY2(reader, qPrintable(name + QStringLiteral(": ") + QString::fromStdString(why)));
    std::vector<double> all(reader->numel());
    // In uneven ranges, so a read that starts mid-row, mid-block or mid-byte is exercised too.
    for (uint64_t first = 0, step = 1; first < all.size(); first += step, step = step * 3 + 7)
        reader->read(first, std::min<uint64_t>(step, all.size() - first), all.data() + first);
    const QByteArray sha = QCryptographicHash::hash(
        QByteArrayView(reinterpret_cast<const char*>(all.data()), static_cast<qsizetype>(all.size() * sizeof(double))),
        QCryptographicHash::Sha256)
                               .toHex();
    const QJsonArray first = stats.value(QStringLiteral("first")).toArray();
    for (qsizetype i = 0; i < first.size(); ++i)
        QVERIFY2(sameValue(all[static_cast<size_t>(i)], number(first[i])),
            qPrintable(name
                + QStringLiteral(" first[%1]: %2 vs %3")
                      .arg(i)
                      .arg(all[static_cast<size_t>(i)], 0, 'g', 17)
                      .arg(number(first[i]), 0, 'g', 17)));
    QVERIFY2(sha == sha256.toLatin1(), label + " values (sha256 of all of them)");
    QCOMPARE(r.stats->numel, static_cast<uint64_t>(all.size()));
    if (stats.contains(QStringLiteral("numel")))
        QCOMPARE(static_cast<qint64>(r.stats->numel), stats.value(QStringLiteral("numel")).toInteger());
    compareStats(name, *r.stats, stats);
}

// A quantized group against its library's dequantization recipe (run with torch by the fixture script).
void checkGroup(
    const QString& name, const Source& s, const Entry& e, const values::TensorStatsResult& r, const QJsonObject& want)
{
    const QByteArray label = name.toUtf8();
    QVERIFY2(e.kind == EntryKind::Group, label + " is not grouped");
    QVERIFY2(e.quantization
            && QString::fromStdString(e.quantization->scheme) == want.value(QStringLiteral("scheme")).toString(),
        label + " scheme");
    QVERIFY2(r.stats, qPrintable(name + QStringLiteral(": ") + QString::fromStdString(r.skipped)));
    QVERIFY2(r.stats->note.rfind("dequantized", 0) == 0, r.stats->note.c_str());
    QCOMPARE(static_cast<qint64>(r.stats->numel), want.value(QStringLiteral("numel")).toInteger());
    checkReaderValues(name + QStringLiteral(" (dequantized_group)"), s, e, r,
        want.value(QStringLiteral("dequantized_group")).toObject(),
        want.value(QStringLiteral("sha256_values_f64")).toString());
}

} // namespace

namespace {

// Files written by torch 2.6 and torchao 0.9 themselves (tests/fixtures/make_torch2_fixtures.py), each with a
// .truth.json: per entry the values the library returns (dequantize(), get_original_weight(), to_dense()).
QString torch2Dir()
{
    return test::fixturesDir() + QStringLiteral("/torch2");
}

// An entry by its state-dict key: a top-level entry, or a part that grouping moved into a quantized group.
const Entry* findKey(const Source& s, const QString& key)
{
    if (const Entry* e = findEntry(s, key))
        return e;
    const std::string k = key.toStdString();
    for (const Entry& e : s.entries)
        for (const Entry& p : e.parts)
            if (const std::string* stored = p.attribute("key"); stored && *stored == k)
                return &p;
    return nullptr;
}

// The classes whose values this suite holds to the truth files; a class not here fails the test, so a new
// fixture class is a decision, not a silent skip.
const QStringList kTruthClasses = {
    QStringLiteral("torch.Tensor"),
    QStringLiteral("torch.nn.parameter.Parameter"),
    QStringLiteral("torchao.float8.float8_tensor.Float8Tensor"),
    QStringLiteral("torchao.dtypes.affine_quantized_tensor.AffineQuantizedTensor"),
    QStringLiteral("torchao.quantization.linear_activation_quantized_tensor.LinearActivationQuantizedTensor"),
    QStringLiteral("torchao.dtypes.nf4tensor.NF4Tensor"),
    QStringLiteral("torchao.prototype.low_bit_optim.subclass_8bit.OptimState8bit"),
    QStringLiteral("torchao.prototype.low_bit_optim.subclass_4bit.OptimState4bit"),
    QStringLiteral("torchao.prototype.low_bit_optim.subclass_fp8.OptimStateFp8"),
};

// Quantized weights left undequantized on purpose, by the truth file's scheme: what the reason says.
// Int4CPULayout's nibble order is whatever the saving CPU's kernel chose (aten weight_to_int4pack_kernel:
// AVX512, AVX2 or neither); the file does not record it, and torchao's own dequantize() of this file is
// wrong on a CPU of another kind.
QString notDequantizedReason(const QJsonObject& truth)
{
    return truth.value(QStringLiteral("scheme")).toString() == QStringLiteral("int4wo_cpu")
        ? QStringLiteral("CPU of the process that saved it")
        : QString();
}

QStringList torch2TruthFiles()
{
    QStringList out;
    for (const char* dir : { "torchao", "torchao_variants", "dtypes", "models", "safetensors", "fp8_index" })
        for (const QString& f :
            QDir(torch2Dir() + QLatin1Char('/') + QLatin1String(dir))
                .entryList({ QStringLiteral("*.pt.truth.json"), QStringLiteral("*.safetensors.truth.json") },
                    QDir::Files, QDir::Name))
            out << QLatin1String(dir) + QLatin1Char('/') + f;
    return out;
}

// A copy of a group with one quantization parameter set (added, replaced, or removed when `value` is null).
Entry withParam(const Entry& g, const std::string& key, const char* value)
{
    Entry e = g;
    auto q = std::make_shared<Quantization>(*g.quantization);
    std::erase_if(q->params, [&](const auto& kv) { return kv.first == key; });
    if (value)
        q->params.emplace_back(key, value);
    e.quantization = std::move(q);
    return e;
}

// A copy of an entry with one part changed by `change` (the part named `role` must exist).
template <typename F> Entry withPart(const Entry& g, const std::string& role, F change)
{
    Entry e = g;
    for (Entry& p : e.parts)
        if (p.name == role)
            change(p);
    return e;
}

// The first piece of a 2-D per-rank tensor as a transposed view: the same bytes in column-major order.
void storeFirstPieceTransposed(Sharding& sh)
{
    sh.chunks[0].strides = { 1, sh.chunks[0].sizes[0] };
}

Entry withPartShape(const Entry& g, const std::string& role, const Shape& shape)
{
    return withPart(g, role, [&](Entry& p) { p.shape = shape; });
}

} // namespace

class TestValues : public QObject {
    Q_OBJECT
private slots:
    void fixture_data()
    {
        QTest::addColumn<QString>("file");
        const QStringList expected
            = QDir(valuesDir()).entryList({ QStringLiteral("*.expected.json") }, QDir::Files, QDir::Name);
        QVERIFY2(expected.size() >= 5, "tests/fixtures/values is missing: run make_values_fixtures.py");
        for (const QString& e : expected) {
            const QString file = e.chopped(int(sizeof(".expected.json")) - 1);
            if (QFileInfo::exists(valuesDir() + QLatin1Char('/') + file)) // compare.expected.json covers a pair
                QTest::newRow(qPrintable(e)) << file;
        }
    }

    // Every tensor of every fixture: the logical bytes (sha256), the first values, the statistics.
    void fixture()
    {
        QFETCH(QString, file);
        const QJsonObject expected = readJson(valuesDir() + QLatin1Char('/') + file + QStringLiteral(".expected.json"));
        const QJsonObject tensors = expected.value(QStringLiteral("tensors")).toObject();
        QVERIFY(!tensors.isEmpty());
        const Source s = openSource((valuesDir() + QLatin1Char('/') + file).toStdString());
        std::vector<size_t> indices;
        for (auto it = tensors.begin(); it != tensors.end(); ++it) {
            const Entry* e = findEntry(s, it.key());
            QVERIFY2(e, qPrintable(it.key()));
            indices.push_back(static_cast<size_t>(e - s.entries.data()));
        }
        const auto results = values::computeStats(s, indices, {});
        values::FileCache files;
        size_t k = 0;
        for (auto it = tensors.begin(); it != tensors.end(); ++it, ++k) {
            const QString name = file + QStringLiteral(":") + it.key();
            const QJsonObject want = it.value().toObject();
            const Entry& e = s.entries[indices[k]];
            const auto& r = results[k];
            if (want.contains(QStringLiteral("dequantized_group"))) {
                checkGroup(name, s, e, r, want);
                continue;
            }
            if (want.contains(QStringLiteral("reader_values"))) { // complex: real and imaginary parts
                const values::TensorBytes tb = values::TensorBytes::open(s, e, files);
                std::vector<uint8_t> scratch;
                const uint8_t* bytes = tb.elements(0, tb.numel(), scratch);
                QCOMPARE(
                    QCryptographicHash::hash(QByteArrayView(bytes, static_cast<qsizetype>(tb.numel() * tb.itemSize())),
                        QCryptographicHash::Sha256)
                        .toHex(),
                    want.value(QStringLiteral("sha256_logical")).toString().toLatin1());
                checkReaderValues(name + QStringLiteral(" (reader_values)"), s, e, r,
                    want.value(QStringLiteral("reader_values")).toObject(),
                    want.value(QStringLiteral("sha256_values_f64")).toString());
                continue;
            }
            if (want.contains(QStringLiteral("dequantized"))) {
                // Quantized: dequantized as torch's dequantize() does, or (asked) the stored integers.
                QVERIFY2(r.stats, qPrintable(name + QStringLiteral(": ") + QString::fromStdString(r.skipped)));
                QVERIFY2(r.stats->note.rfind("dequantized", 0) == 0, r.stats->note.c_str());
                compareStats(name + QStringLiteral(" (dequantized)"), *r.stats,
                    want.value(QStringLiteral("dequantized")).toObject());
                values::StatsOptions raw;
                raw.dequantize = false;
                const auto ints = values::computeStats(s, { indices[k] }, raw);
                compareStats(name + QStringLiteral(" (int_repr)"), *ints[0].stats,
                    want.value(QStringLiteral("int_repr")).toObject());
                QCOMPARE(ints[0].stats->hash, r.stats->hash); // the hash is of the stored bytes either way
                continue;
            }
            QVERIFY2(r.stats, qPrintable(name + QStringLiteral(": ") + QString::fromStdString(r.skipped)));
            QCOMPARE(static_cast<qint64>(r.stats->numel), want.value(QStringLiteral("numel")).toInteger());
            // The bytes, in logical order, exactly as torch lays them out contiguously.
            const values::TensorBytes tb = values::TensorBytes::open(s, e, files);
            std::vector<uint8_t> scratch;
            const uint8_t* bytes = tb.elements(0, tb.numel(), scratch);
            const QByteArray sha = QCryptographicHash::hash(
                QByteArrayView(bytes, static_cast<qsizetype>(tb.numel() * tb.itemSize())), QCryptographicHash::Sha256)
                                       .toHex();
            QVERIFY2(sha == want.value(QStringLiteral("sha256_logical")).toString().toLatin1(),
                qPrintable(name + QStringLiteral(" sha256")));
            const QJsonArray first = want.value(QStringLiteral("first")).toArray();
            std::vector<double> decoded(static_cast<size_t>(first.size()));
            values::decode(tb.dtype(), bytes, decoded.size(), decoded.data());
            for (qsizetype i = 0; i < first.size(); ++i)
                QVERIFY2(sameValue(decoded[static_cast<size_t>(i)], number(first[i])),
                    qPrintable(name + QStringLiteral(" first[%1]").arg(i)));
            compareStats(name, *r.stats, want);
            if (want.contains(QStringLiteral("decoded_table"))) {
                const QJsonArray table = want.value(QStringLiteral("decoded_table")).toArray();
                QCOMPARE(table.size(), 256);
                for (int b = 0; b < 256; ++b)
                    QVERIFY2(sameValue(values::decodeFloat8(e.dtype, static_cast<uint8_t>(b)), number(table[b])),
                        qPrintable(name + QStringLiteral(" byte 0x%1").arg(b, 2, 16, QLatin1Char('0'))));
            }
        }
    }

    // openSequential inflates a deflated record as reads advance: every tensor of deflated.pt (dtypes.pt's
    // records re-compressed by zipfile) reads the same bytes as the whole-record path, in order, backwards
    // (each read starts the stream again) and in uneven pieces.
    void sequentialReadsOfDeflatedRecords()
    {
        const Source s = openSource((valuesDir() + QStringLiteral("/deflated.pt")).toStdString());
        values::FileCache files;
        size_t streamed = 0;
        for (const Entry& e : s.entries) {
            if (e.location.kind != TensorLocation::Kind::Compressed)
                continue;
            const auto whole = values::TensorBytes::open(s, e, files);
            const auto seq = values::TensorBytes::openSequential(s, e, files);
            QCOMPARE(seq.numel(), whole.numel());
            std::vector<uint8_t> a, b;
            const size_t item = whole.itemSize();
            const uint8_t* all = whole.read(0, whole.numel(), a);
            const std::vector<uint8_t> want(all, all + whole.numel() * item);
            std::vector<uint8_t> got(want.size());
            for (uint64_t first = 0, step = 1; first < seq.numel(); first += step, step = step * 2 + 1) {
                const uint64_t n = std::min<uint64_t>(step, seq.numel() - first);
                std::memcpy(got.data() + first * item, seq.read(first, n, b), n * item);
            }
            QVERIFY2(got == want, e.name.c_str());
            std::fill(got.begin(), got.end(), 0);
            for (uint64_t k = seq.numel(); k-- > 0;)
                std::memcpy(got.data() + k * item, seq.read(k, 1, b), item);
            QVERIFY2(got == want, e.name.c_str());
            ++streamed;
        }
        QVERIFY(streamed >= 5);
    }

    // The same tensor stored three ways (zip, legacy, safetensors) hashes the same; a different one does not.
    void contentHashFollowsTheValuesNotTheLayout()
    {
        auto hashes = [](const QString& file) {
            const Source s = openSource((valuesDir() + QLatin1Char('/') + file).toStdString());
            std::vector<size_t> all;
            for (size_t i = 0; i < s.entries.size(); ++i)
                all.push_back(i);
            std::map<std::string, uint64_t> out;
            for (const auto& r : values::computeStats(s, all, {}))
                if (r.stats)
                    out[s.entries[r.entry].name] = r.stats->hash;
            return out;
        };
        const auto zip = hashes(QStringLiteral("dtypes.pt"));
        const auto legacy = hashes(QStringLiteral("dtypes.legacy.pt"));
        const auto st = hashes(QStringLiteral("dtypes.safetensors"));
        QVERIFY(zip.size() >= 8);
        QCOMPARE(legacy, zip);
        QCOMPARE(st, zip);
        std::set<uint64_t> distinct;
        for (const auto& [name, h] : zip)
            distinct.insert(h);
        QCOMPARE(distinct.size(), zip.size());
    }

    // Pieces and threads do not change the answer: one thread and many, one piece per tensor and dozens,
    // give the same statistics (the hash depends on the piece size by design, so it is compared per size).
    void threadsAndPiecesAgree()
    {
        const Source s = openSource((valuesDir() + QStringLiteral("/large.pt")).toStdString());
        std::vector<size_t> all;
        for (size_t i = 0; i < s.entries.size(); ++i)
            all.push_back(i);
        values::StatsOptions one;
        one.threads = 1;
        one.pieceBytes = uint64_t(1) << 30; // every tensor one piece
        values::StatsOptions many;
        many.threads = 4;
        many.pieceBytes = 64 << 10; // dozens of pieces per tensor
        values::StatsOptions manyAgain = many;
        manyAgain.threads = 1;
        const auto a = values::computeStats(s, all, one);
        const auto b = values::computeStats(s, all, many);
        const auto c = values::computeStats(s, all, manyAgain);
        QCOMPARE(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) {
            QVERIFY(a[i].stats && b[i].stats && c[i].stats);
            QCOMPARE(b[i].stats->hash, c[i].stats->hash);
            QCOMPARE(a[i].stats->histogram, b[i].stats->histogram);
            QVERIFY(close(a[i].stats->mean, b[i].stats->mean, 1e-12));
            QVERIFY(close(*a[i].stats->std(), *b[i].stats->std(), 1e-12));
            QCOMPARE(a[i].stats->min, b[i].stats->min);
            QCOMPARE(a[i].stats->max, b[i].stats->max);
            QCOMPARE(a[i].stats->zeros, b[i].stats->zeros);
        }
    }

    // Aligned pairs of compare_a.pt and compare_b.pt against torch's float64 arithmetic.
    void comparePairs()
    {
        const QJsonObject truth = readJson(valuesDir() + QStringLiteral("/compare.expected.json"));
        const Source a = openSource((valuesDir() + QStringLiteral("/compare_a.pt")).toStdString());
        const Source b = openSource((valuesDir() + QStringLiteral("/compare_b.pt")).toStdString());
        const QJsonObject pairs = truth.value(QStringLiteral("pairs")).toObject();
        QVERIFY(pairs.size() >= 10);
        std::vector<std::pair<size_t, size_t>> indices;
        for (auto it = pairs.begin(); it != pairs.end(); ++it) {
            const Entry* ea = findEntry(a, it.key());
            const Entry* eb = findEntry(b, it.key());
            QVERIFY2(ea && eb, qPrintable(it.key()));
            indices.emplace_back(
                static_cast<size_t>(ea - a.entries.data()), static_cast<size_t>(eb - b.entries.data()));
        }
        values::StatsOptions small;
        small.pieceBytes = 256; // many pieces per tensor: the merge must not change the answer
        for (const values::StatsOptions& options : { values::StatsOptions {}, small }) {
            const auto got = values::compareValues(a, b, indices, options);
            size_t k = 0;
            for (auto it = pairs.begin(); it != pairs.end(); ++it, ++k) {
                const QByteArray name = it.key().toUtf8();
                const QJsonObject want = it.value().toObject();
                const values::ValueComparison& c = got[k];
                QVERIFY2(c.compared, name + ": " + QByteArray::fromStdString(c.why));
                QVERIFY2(c.equalBytes == want.value(QStringLiteral("equal_bytes")).toBool(), name + " equal_bytes");
                QVERIFY2(
                    static_cast<qint64>(c.nanMismatch) == want.value(QStringLiteral("nan_mismatch")).toInteger(), name);
                QVERIFY2(
                    static_cast<qint64>(c.finiteCompared) == want.value(QStringLiteral("finite_compared")).toInteger(),
                    name);
                auto check = [&](const char* field, const std::optional<double>& v, double rel) {
                    const QJsonValue w = want.value(QLatin1String(field));
                    if (w.isNull())
                        return !v.has_value();
                    return v.has_value() && close(*v, w.toDouble(), rel);
                };
                QVERIFY2(check("max_abs_diff", c.maxAbsDiff, 1e-15), name + " max_abs_diff");
                QVERIFY2(check("max_rel_diff", c.maxRelDiff, 1e-15), name + " max_rel_diff");
                QVERIFY2(check("cosine", c.cosine, 1e-12),
                    name + " cosine " + QByteArray::number(c.cosine.value_or(-9), 'g', 17));
            }
        }
        // Different shapes are not compared, and say why.
        const Entry* wide = findEntry(a, QStringLiteral("lm_head.weight"));
        const Entry* other = findEntry(b, QStringLiteral("same.weight"));
        const auto mismatch = values::compareValues(
            a, b, { { static_cast<size_t>(wide - a.entries.data()), static_cast<size_t>(other - b.entries.data()) } });
        QVERIFY(!mismatch[0].compared);
        QVERIFY(mismatch[0].why.find("shapes differ") != std::string::npos);
    }

    // Keys on one side only, matched by their bytes; duplicates and tied storages; init hints.
    void contentMatchesDuplicatesAndHints()
    {
        const QJsonObject truth = readJson(valuesDir() + QStringLiteral("/compare.expected.json"));
        const Source a = openSource((valuesDir() + QStringLiteral("/compare_a.pt")).toStdString());
        const Source b = openSource((valuesDir() + QStringLiteral("/compare_b.pt")).toStdString());
        auto indicesOf = [](const Source& s, const QJsonArray& names) {
            std::vector<size_t> out;
            for (const QJsonValue& n : names)
                out.push_back(static_cast<size_t>(findEntry(s, n.toString()) - s.entries.data()));
            return out;
        };
        const auto matches = values::matchByContent(a, indicesOf(a, truth.value(QStringLiteral("a_only")).toArray()), b,
            indicesOf(b, truth.value(QStringLiteral("b_only")).toArray()));
        QJsonArray got;
        for (const auto& m : matches) {
            QStringList bs;
            for (size_t j : m.b)
                bs << QString::fromStdString(b.entries[j].name);
            bs.sort();
            got.append(QJsonObject { { QStringLiteral("a"), QString::fromStdString(a.entries[m.a].name) },
                { QStringLiteral("b"), QJsonArray::fromStringList(bs) } });
        }
        std::vector<QJsonValue> sorted(got.begin(), got.end());
        std::sort(sorted.begin(), sorted.end(), [](const QJsonValue& x, const QJsonValue& y) {
            return x.toObject().value(QStringLiteral("a")).toString()
                < y.toObject().value(QStringLiteral("a")).toString();
        });
        QJsonArray gotSorted;
        for (const auto& v : sorted)
            gotSorted.append(v);
        QCOMPARE(gotSorted, truth.value(QStringLiteral("content_matches")).toArray());

        std::vector<size_t> allA;
        for (size_t i = 0; i < a.entries.size(); ++i)
            allA.push_back(i);
        QJsonArray dups, tied;
        for (const auto& g : values::findDuplicates(a, allA)) {
            QStringList names;
            for (size_t e : g.entries)
                names << QString::fromStdString(a.entries[e].name);
            names.sort();
            dups.append(QJsonArray::fromStringList(names));
            if (g.tied)
                tied.append(QJsonArray::fromStringList(names));
        }
        QCOMPARE(dups, truth.value(QStringLiteral("duplicates_a")).toArray());
        QCOMPARE(tied, truth.value(QStringLiteral("tied_a")).toArray());

        std::vector<size_t> allB;
        for (size_t i = 0; i < b.entries.size(); ++i)
            allB.push_back(i);
        const auto stats = values::computeStats(b, allB);
        const auto hints = values::initHints(b, stats);
        const QJsonObject wantHints = truth.value(QStringLiteral("init_hints")).toObject();
        for (size_t i = 0; i < stats.size(); ++i) {
            const QString name = QString::fromStdString(b.entries[stats[i].entry].name);
            const QString want = wantHints.value(name).toString();
            const QString have = QString::fromStdString(hints[i]);
            if (want.isEmpty())
                QVERIFY2(have.isEmpty(), qPrintable(name + QStringLiteral(": ") + have));
            else if (want.startsWith(QStringLiteral("std far")))
                QVERIFY2(have.startsWith(QStringLiteral("std ")) && have.contains(QStringLiteral("far from its peers")),
                    qPrintable(name + QStringLiteral(": ") + have));
            else
                QCOMPARE(have, want);
        }
    }

    // Storage ids are each file's own: every torch.save shard of a .bin index numbers its storages from "0".
    // Written by torch 1.13 here: two shards holding equal values, each in its storage "0", are copies; a tensor
    // saved under two keys of one shard is tied (torch.save writes its storage once).
    void duplicatesAcrossShardsAreCopies()
    {
        if (!test::haveTorchPython())
            QSKIP("no /usr/bin/python3 with torch");
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const auto r = test::run(test::torchPython(),
            { QStringLiteral("-c"),
                QStringLiteral("import torch, json, os, sys\n"
                               "t = torch.arange(6, dtype=torch.float32)\n"
                               "one, two = 'pytorch_model-00001-of-00002.bin', 'pytorch_model-00002-of-00002.bin'\n"
                               "torch.save({'a.weight': t.clone()}, os.path.join(sys.argv[1], one))\n"
                               "torch.save({'b.weight': t.clone(), 'c.weight': t, 'd.weight': t},\n"
                               "           os.path.join(sys.argv[1], two))\n"
                               "m = {'a.weight': one, 'b.weight': two, 'c.weight': two, 'd.weight': two}\n"
                               "with open(os.path.join(sys.argv[1], 'pytorch_model.bin.index.json'), 'w') as f:\n"
                               "    json.dump({'weight_map': m}, f)\n"),
                dir.path() });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const Source s = openSource((dir.path() + QStringLiteral("/pytorch_model.bin.index.json")).toStdString());
        QCOMPARE(s.entries.size(), size_t(4));
        std::map<std::string, const Entry*> by;
        for (const Entry& e : s.entries)
            by[e.name] = &e;
        // a's and b's storages are both "0", in different files.
        QCOMPARE(std::string(by["a.weight"]->location.storageId.view()),
            std::string(by["b.weight"]->location.storageId.view()));
        QVERIFY(!by["a.weight"]->location.sharesStorageWith(by["b.weight"]->location));
        QVERIFY(by["c.weight"]->location.sharesStorageWith(by["d.weight"]->location));
        QVERIFY(!by["b.weight"]->location.sharesStorageWith(by["c.weight"]->location));
        std::vector<size_t> all(s.entries.size());
        for (size_t i = 0; i < all.size(); ++i)
            all[i] = i;
        std::vector<std::pair<std::set<std::string>, bool>> groups;
        for (const auto& g : values::findDuplicates(s, all)) {
            std::set<std::string> names;
            for (size_t i : g.entries)
                names.insert(s.entries[i].name);
            groups.emplace_back(names, g.tied);
        }
        // Equal values: one group of all four, not tied (a and b are copies in other files).
        QCOMPARE(groups.size(), size_t(1));
        QCOMPARE(groups[0].first, (std::set<std::string> { "a.weight", "b.weight", "c.weight", "d.weight" }));
        QVERIFY(!groups[0].second);
        const auto at = [&](const char* name) { return size_t(by[name] - s.entries.data()); };
        // c and d alone: tied.
        const auto cd = values::findDuplicates(s, { at("c.weight"), at("d.weight") });
        QCOMPARE(cd.size(), size_t(1));
        QVERIFY(cd[0].tied);
        // a and b alone: copies.
        const auto ab = values::findDuplicates(s, { at("a.weight"), at("b.weight") });
        QCOMPARE(ab.size(), size_t(1));
        QVERIFY(!ab[0].tied);
    }

    // DCP tensors assembled from their chunks (split along both dimensions, across two rank files) give the
    // same elements as torch assembling them: FileSystemReader's metadata, torch.load of each item.
    void dcpChunksAssembleAsTorchDoes()
    {
        if (!test::haveTorchPython())
            QSKIP("no /usr/bin/python3 with torch");
        int checked = 0;
        for (const char* name : { "t113_two_ranks", "t113_flat", "t113_per_item" }) {
            const QString dir = test::fixturesDir() + QStringLiteral("/dcp/") + QLatin1String(name);
            const auto r = test::run(
                test::torchPython(), { test::sourceDir() + QStringLiteral("/tests/tools/dcp_values_truth.py"), dir });
            QVERIFY2(r.exitCode == 0, r.err.constData());
            const QJsonObject truth
                = QJsonDocument::fromJson(r.out).object().value(QStringLiteral("tensors")).toObject();
            const Source s = openSource(dir.toStdString());
            values::FileCache files;
            for (auto it = truth.begin(); it != truth.end(); ++it) {
                const Entry* e = findEntry(s, it.key());
                if (!e)
                    continue; // a tensor of another container (the optimizer)
                const values::TensorBytes tb = values::TensorBytes::open(s, *e, files);
                std::vector<uint8_t> scratch;
                const uint8_t* bytes = tb.elements(0, tb.numel(), scratch);
                const QByteArray sha = QCryptographicHash::hash(
                    QByteArrayView(bytes, static_cast<qsizetype>(tb.numel() * tb.itemSize())),
                    QCryptographicHash::Sha256)
                                           .toHex();
                QVERIFY2(sha == it.value().toObject().value(QStringLiteral("sha256")).toString().toLatin1(),
                    qPrintable(QLatin1String(name) + QLatin1Char(':') + it.key()));
                const auto stats = values::computeStats(s, { static_cast<size_t>(e - s.entries.data()) });
                QCOMPARE(stats[0].stats->min, it.value().toObject().value(QStringLiteral("min")).toDouble());
                QCOMPARE(stats[0].stats->max, it.value().toObject().value(QStringLiteral("max")).toDouble());
                ++checked;
            }
        }
        QVERIFY2(checked >= 5, "too few DCP tensors compared");
        // Chunks that leave a gap or overlap are refused, not read.
        const Source bad = openSource((test::fixturesDir() + QStringLiteral("/dcp/t113_bad_tiling")).toStdString());
        values::FileCache files;
        int refused = 0;
        for (const Entry& e : bad.entries) {
            if (!e.sharding || e.sharding->chunks.size() < 2)
                continue;
            try {
                (void)values::TensorBytes::open(bad, e, files);
            } catch (const LoadError&) {
                ++refused;
            }
        }
        QVERIFY(refused >= 1);
    }

    // Found by fuzz_values: products of hostile sizes and strides overflowed (now refused), and a range
    // wider than the largest double made the histogram's arithmetic NaN (now computed on halves).
    void hostileSizesAndExtremeRanges()
    {
        Source s = openSource((valuesDir() + QStringLiteral("/dtypes.safetensors")).toStdString());
        Entry huge = s.entries.front();
        huge.shape = { int64_t(1) << 40, int64_t(1) << 40 };
        huge.location.strides = { int64_t(1) << 40, int64_t(1) << 40 };
        values::FileCache files;
        QVERIFY_THROWS_EXCEPTION(LoadError, values::TensorBytes::open(s, huge, files));
        Entry expanded = s.entries.front();
        expanded.shape = { int64_t(1) << 40, 4 };
        expanded.location.strides = { 0, 1 };
        QVERIFY_THROWS_EXCEPTION(LoadError, values::TensorBytes::open(s, expanded, files));

        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("extremes.safetensors"));
        const double v[] = { -std::numeric_limits<double>::max(), 0.0, 1.0, std::numeric_limits<double>::max() };
        QByteArray header = QByteArrayLiteral("{\"x\":{\"dtype\":\"F64\",\"shape\":[4],\"data_offsets\":[0,32]}}");
        while (header.size() % 8)
            header.append(' ');
        QByteArray file;
        const quint64 n = static_cast<quint64>(header.size());
        file.append(reinterpret_cast<const char*>(&n), 8);
        file.append(header);
        file.append(reinterpret_cast<const char*>(v), sizeof v);
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly) && f.write(file) == file.size());
        f.close();
        const Source e = openSource(path.toStdString());
        const auto r = values::computeStats(e, { 0 });
        QVERIFY(r[0].stats);
        const auto& h = r[0].stats->histogram;
        QCOMPARE(h.size(), size_t(16));
        QCOMPARE(h.front(), uint64_t(1)); // -max
        QCOMPARE(h.back(), uint64_t(1)); // +max
        QCOMPARE(h[8], uint64_t(2)); // 0 and 1, in the middle bin as torch.histc puts them
    }

    // torchao's own file (a Float8Tensor written by torchao's safetensors support) against torchao's
    // dequantization, computed by the fixture script from the bytes of the shared fixture.
    void realTorchaoFloat8Tensor()
    {
        const QString shared = test::sharedDir();
        if (shared.isEmpty())
            QSKIP("../shared is absent");
        const QJsonObject expected = readJson(valuesDir() + QStringLiteral("/real_fp8_weights.shared.json"));
        const QString path = shared + QLatin1Char('/') + expected.value(QStringLiteral("shared_file")).toString();
        QFile f(path);
        QVERIFY2(f.open(QIODevice::ReadOnly), qPrintable(path));
        QCOMPARE(QCryptographicHash::hash(f.readAll(), QCryptographicHash::Sha256).toHex(),
            expected.value(QStringLiteral("sha256_file")).toString().toLatin1());
        const Source s = openSource(path.toStdString());
        const QJsonObject tensors = expected.value(QStringLiteral("tensors")).toObject();
        for (auto it = tensors.begin(); it != tensors.end(); ++it) {
            const Entry* e = findEntry(s, it.key());
            QVERIFY2(e, qPrintable(it.key()));
            const auto r = values::computeStats(s, { static_cast<size_t>(e - s.entries.data()) });
            checkGroup(it.key(), s, *e, r[0], it.value().toObject());
        }
    }

    // A quantized group has no single stored tensor: it compares by its dequantized values, equal to itself
    // and far from a differently quantized weight; content matching and duplicates accept equal values.
    void quantizedGroupsCompareByValues()
    {
        const Source s = openSource((valuesDir() + QStringLiteral("/quantized_groups.safetensors")).toStdString());
        const Entry* q = findEntry(s, QStringLiteral("model.layers.0.self_attn.q_proj.weight"));
        const Entry* awq = findEntry(s, QStringLiteral("model.layers.4.mlp.up_proj.weight"));
        const Entry* gptq = findEntry(s, QStringLiteral("model.layers.3.self_attn.o_proj.weight"));
        QVERIFY(q && gptq && awq);
        const size_t iq = static_cast<size_t>(q - s.entries.data()), ia = static_cast<size_t>(awq - s.entries.data()),
                     ig = static_cast<size_t>(gptq - s.entries.data());
        const auto c = values::compareValues(s, s, { { iq, iq }, { ia, ig } });
        QVERIFY2(c[0].compared, c[0].why.c_str());
        QVERIFY(!c[0].equalBytes && c[0].equalValues);
        QCOMPARE(*c[0].maxAbsDiff, 0.0);
        QVERIFY(std::fabs(*c[0].cosine - 1.0) < 1e-12);
        QVERIFY2(c[0].note.find("A dequantized: float8_e4m3fn") == 0, c[0].note.c_str());
        QVERIFY2(!c[1].compared, "different shapes were compared"); // [64, 128] against [64, 256]
        const auto m = values::matchByContent(s, { iq }, s, { ia, iq });
        QVERIFY(m.size() == 1 && m[0].b == std::vector<size_t> { iq });
    }

    // torch's float4_e2m1fn_x2 packs two OCP E2M1 values per byte, the first in the low nibble. The table
    // is the MX specification's (section 5.3.3): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives.
    void packedFloat4()
    {
        QTemporaryDir dir;
        QByteArray bytes;
        for (int b = 0; b < 256; ++b)
            bytes.append(static_cast<char>(b));
        const Source s = rawTensorSource(dir, bytes, DType::Float4_e2m1fn_x2, { 16, 16 });
        QCOMPARE(s.entries.size(), size_t(1));
        const double spec[16] = { 0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6 };
        values::FileCache files;
        std::string why;
        const auto reader = values::ValueReader::open(s, s.entries[0], files, why);
        QVERIFY2(reader, why.c_str());
        QCOMPARE(reader->numel(), uint64_t(512));
        std::vector<double> v(512);
        reader->read(0, 512, v.data());
        for (int b = 0; b < 256; ++b) {
            QCOMPARE(v[size_t(2 * b)], spec[b & 15]);
            QCOMPARE(v[size_t(2 * b + 1)], spec[b >> 4]);
        }
        const auto r = values::computeStats(s, { 0 });
        QVERIFY(r[0].stats);
        QCOMPARE(r[0].stats->numel, uint64_t(512));
        QCOMPARE(r[0].stats->min, -6.0);
        QCOMPARE(r[0].stats->max, 6.0);
        QCOMPARE(r[0].stats->zeros, uint64_t(2 * 32)); // nibbles 0 and 8 (-0), 32 times each per position
    }

    // GPTQ and AWQ layers wide enough that their values are read in several bands of output rows, against
    // AutoGPTQ's and AutoAWQ's recipes run by tests/tools/packed_values_truth.py: every value (sha256), in
    // ranges that cross band edges, and the statistics over many pieces on every thread.
    void packedLayersAcrossBands()
    {
        if (!test::haveTorchPython())
            QSKIP("no /usr/bin/python3 with torch");
        QTemporaryDir dir;
        const auto r = test::run(test::torchPython(),
            { test::sourceDir() + QStringLiteral("/tests/tools/packed_values_truth.py"), dir.path() });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const QJsonObject truth = QJsonDocument::fromJson(r.out).object().value(QStringLiteral("tensors")).toObject();
        const Source s = openSource(dir.filePath(QStringLiteral("packed.safetensors")).toStdString());
        values::FileCache files;
        int checked = 0;
        for (auto it = truth.begin(); it != truth.end(); ++it) {
            const QJsonObject want = it.value().toObject();
            const Entry* e = findEntry(s, it.key());
            QVERIFY2(e && e->kind == EntryKind::Group, qPrintable(it.key()));
            std::string why;
            const auto reader = values::ValueReader::open(s, *e, files, why);
            QVERIFY2(reader, why.c_str());
            std::vector<double> all(reader->numel());
            // Backwards in ranges of 100,003 values: every band is entered from its end and left mid-row.
            for (uint64_t end = all.size(); end > 0;) {
                const uint64_t first = end > 100003 ? end - 100003 : 0;
                reader->read(first, end - first, all.data() + first);
                end = first;
            }
            const QByteArray sha = QCryptographicHash::hash(QByteArrayView(reinterpret_cast<const char*>(all.data()),
                                                                static_cast<qsizetype>(all.size() * sizeof(double))),
                QCryptographicHash::Sha256)
                                       .toHex();
            QVERIFY2(
                sha == want.value(QStringLiteral("sha256_values_f64")).toString().toLatin1(), qPrintable(it.key()));
            const auto st = values::computeStats(s, { static_cast<size_t>(e - s.entries.data()) });
            QVERIFY(st[0].stats);
            QCOMPARE(st[0].stats->min, want.value(QStringLiteral("min")).toDouble());
            QCOMPARE(st[0].stats->max, want.value(QStringLiteral("max")).toDouble());
            QCOMPARE(static_cast<qint64>(st[0].stats->zeros), want.value(QStringLiteral("zeros")).toInteger());
            QVERIFY(close(st[0].stats->mean, want.value(QStringLiteral("mean")).toDouble(), 1e-9));
            QVERIFY(close(*st[0].stats->std(), want.value(QStringLiteral("std")).toDouble(), 1e-9));
            ++checked;
        }
        QCOMPARE(checked, 2);
    }

    // A quantized group that is not dequantized (here: asked not to) is summarised by the stored values of
    // its main part, with a note saying so, exactly as that tensor alone would be.
    void undequantizedGroupsShowTheirStoredValues()
    {
        Source s = openSource((valuesDir() + QStringLiteral("/quantized_groups.safetensors")).toStdString());
        const Entry* g = findEntry(s, QStringLiteral("model.layers.3.self_attn.o_proj.weight"));
        QVERIFY(g && g->parts.front().name == "qweight");
        const size_t gi = static_cast<size_t>(g - s.entries.data());
        s.entries.push_back(g->parts.front()); // the part alone, as a plain entry
        values::StatsOptions raw;
        raw.dequantize = false;
        const auto r = values::computeStats(s, { gi, s.entries.size() - 1 }, raw);
        QVERIFY(r[0].stats && r[1].stats);
        QVERIFY2(
            r[0].stats->note == "stored values of its qweight part (dequantizing is off)", r[0].stats->note.c_str());
        QCOMPARE(r[0].stats->hash, r[1].stats->hash);
        QCOMPARE(r[0].stats->min, r[1].stats->min);
        QCOMPARE(r[0].stats->numel, uint64_t(32 * 64));
        QVERIFY(r[1].stats->note.empty());
    }

    // complex32 (torch 1.13 cannot save it, so no torch-written fixture): float16 parts, real first.
    void complexHalfParts()
    {
        QTemporaryDir dir;
        const uint16_t halves[] = { 0x3c00, 0xc000, 0x7e00, 0x0001 }; // 1, -2, NaN, 2^-24
        const Source s = rawTensorSource(
            dir, QByteArray(reinterpret_cast<const char*>(halves), sizeof halves), DType::Complex32, { 2 });
        QCOMPARE(s.entries.size(), size_t(1));
        values::FileCache files;
        std::string why;
        const auto reader = values::ValueReader::open(s, s.entries[0], files, why);
        QVERIFY2(reader, why.c_str());
        double v[4];
        reader->read(0, 4, v);
        QCOMPARE(v[0], 1.0);
        QCOMPARE(v[1], -2.0);
        QVERIFY(std::isnan(v[2]));
        QCOMPARE(v[3], std::ldexp(1.0, -24));
        reader->read(1, 2, v); // a range starting on an imaginary part
        QCOMPARE(v[0], -2.0);
        QVERIFY(std::isnan(v[1]));
    }

    // Complex tensors decode through a reader (real and imaginary parts), but two of one dtype still have
    // bytes to compare: complex.pt (torch.save) against complex.safetensors (the same tensors), with torch's
    // sha256 of each tensor's logical bytes saying they are equal; a copy with one flipped byte is not.
    void complexEqualBytes()
    {
        const Source pt = openSource((valuesDir() + QStringLiteral("/complex.pt")).toStdString());
        const Source st = openSource((valuesDir() + QStringLiteral("/complex.safetensors")).toStdString());
        const QJsonObject tp = readJson(valuesDir() + QStringLiteral("/complex.pt.expected.json"))
                                   .value(QStringLiteral("tensors"))
                                   .toObject();
        const QJsonObject ts = readJson(valuesDir() + QStringLiteral("/complex.safetensors.expected.json"))
                                   .value(QStringLiteral("tensors"))
                                   .toObject();
        auto index = [](const Source& s, const char* name) {
            for (size_t i = 0; i < s.entries.size(); ++i)
                if (s.entries[i].name == name)
                    return i;
            return size_t(-1);
        };
        const std::vector<std::pair<const char*, const char*>> names { { "c64", "c64" }, { "base", "base" } };
        std::vector<std::pair<size_t, size_t>> pairs;
        for (const auto& [x, y] : names)
            pairs.emplace_back(index(pt, x), index(st, y));
        const auto got = values::compareValues(pt, st, pairs);
        for (size_t k = 0; k < names.size(); ++k) {
            const bool torchEqual
                = tp.value(QLatin1String(names[k].first)).toObject().value(QStringLiteral("sha256_logical"))
                == ts.value(QLatin1String(names[k].second)).toObject().value(QStringLiteral("sha256_logical"));
            QVERIFY2(got[k].compared, got[k].why.c_str());
            QVERIFY2(got[k].equalBytes == torchEqual, names[k].first);
            if (torchEqual)
                QCOMPARE(got[k].maxAbsDiff.value_or(-1), 0.0);
        }

        // One byte of c64's data flipped in a copy of the safetensors file.
        QTemporaryDir dir;
        const QString copy = dir.filePath(QStringLiteral("complex.safetensors"));
        QVERIFY(QFile::copy(valuesDir() + QStringLiteral("/complex.safetensors"), copy));
        const Entry& c64 = st.entries[index(st, "c64")];
        QFile f(copy);
        QVERIFY(f.open(QIODevice::ReadWrite));
        QVERIFY(f.seek(qint64(c64.location.offset + 3)));
        char byte = 0;
        QVERIFY(f.getChar(&byte));
        QVERIFY(f.seek(qint64(c64.location.offset + 3)));
        QVERIFY(f.putChar(char(byte ^ 0x10)));
        f.close();
        const Source flipped = openSource(copy.toStdString());
        const auto diff = values::compareValues(pt, flipped, { { index(pt, "c64"), index(flipped, "c64") } });
        QVERIFY(diff[0].compared);
        QVERIFY(!diff[0].equalBytes);
    }

    void torch2Values_data()
    {
        QTest::addColumn<QString>("truthFile");
        const QStringList files = torch2TruthFiles();
        QVERIFY2(files.size() >= 10, "tests/fixtures/torch2 is missing");
        for (const QString& f : files)
            QTest::newRow(qPrintable(f)) << f;
    }

    // Every entry of the torch 2.6 / torchao 0.9 files whose values the truth states: plain tensors, sparse
    // tensors as to_dense(), TwoTensor's parts, and torchao's AffineQuantizedTensor (plain and float8),
    // LinearActivationQuantizedTensor, NF4Tensor and low-bit optimizer states as the library dequantizes
    // them: every value bit for bit (sha256), the first ones, count, min, max, mean, std, NaNs and zeros.
    void torch2Values()
    {
        QFETCH(QString, truthFile);
        const QJsonObject truth = readJson(torch2Dir() + QLatin1Char('/') + truthFile);
        Source s = openSource(
            (torch2Dir() + QLatin1Char('/') + truth.value(QStringLiteral("open")).toString()).toStdString());
        const QString notDequantized = notDequantizedReason(truth);
        values::StatsOptions noHistogram;
        noHistogram.bins = 0; // the truth has none
        int checked = 0;
        const QJsonArray entries = truth.value(QStringLiteral("entries")).toArray();
        // Parts are appended to the source as entries of their own, so statistics can be asked of them.
        std::vector<std::pair<QString, Entry>> asEntries;
        for (const QJsonValue& v : entries) {
            const QJsonObject want = v.toObject();
            const QString name = want.value(QStringLiteral("name")).toString();
            const QString cls = want.value(QStringLiteral("class")).toString();
            if (want.contains(QStringLiteral("parts"))) { // TwoTensor: each inner tensor's values
                const Entry* e = findEntry(s, name);
                QVERIFY2(e, qPrintable(name));
                const QJsonObject parts = want.value(QStringLiteral("parts")).toObject();
                for (auto it = parts.begin(); it != parts.end(); ++it) {
                    const Entry* p = e->part(it.key().toStdString());
                    QVERIFY2(p, qPrintable(name + QLatin1Char('.') + it.key()));
                    asEntries.emplace_back(name + QLatin1Char('.') + it.key(), *p);
                }
                continue;
            }
            if (!want.contains(QStringLiteral("values")))
                continue;
            QVERIFY2(kTruthClasses.contains(cls),
                qPrintable(truthFile + QStringLiteral(": a class this suite does not know: ") + cls));
            const Entry* e = findKey(s, name);
            QVERIFY2(e, qPrintable(name));
            asEntries.emplace_back(name, *e);
        }
        const size_t base = s.entries.size();
        for (auto& [name, e] : asEntries)
            s.entries.push_back(e);
        std::vector<size_t> indices;
        for (size_t i = base; i < s.entries.size(); ++i)
            indices.push_back(i);
        const auto results = values::computeStats(s, indices, noHistogram);
        for (size_t k = 0; k < asEntries.size(); ++k) {
            const QString& name = asEntries[k].first;
            const Entry& e = s.entries[base + k];
            const QString label = truthFile + QLatin1Char(':') + name;
            QJsonObject want;
            for (const QJsonValue& v : entries)
                if (v.toObject().value(QStringLiteral("name")).toString() == name)
                    want = v.toObject().value(QStringLiteral("values")).toObject();
            if (want.isEmpty()) { // a TwoTensor part
                const qsizetype dot = name.lastIndexOf(QLatin1Char('.'));
                for (const QJsonValue& v : entries)
                    if (v.toObject().value(QStringLiteral("name")).toString() == name.left(dot))
                        want = v.toObject()
                                   .value(QStringLiteral("parts"))
                                   .toObject()
                                   .value(name.mid(dot + 1))
                                   .toObject();
            }
            if (!notDequantized.isEmpty() && e.kind == EntryKind::Group) {
                const auto& r = results[k];
                QVERIFY2(r.stats, qPrintable(label));
                QVERIFY2(r.stats->note.rfind("stored values of its", 0) == 0
                        && QString::fromStdString(r.stats->note).contains(notDequantized),
                    r.stats->note.c_str());
                ++checked;
                continue;
            }
            checkReaderValues(
                label, s, e, results[k], want, want.value(QStringLiteral("sha256_values_f64")).toString());
            if (QTest::currentTestFailed())
                return;
            ++checked;
        }
        QVERIFY2(checked > 0, qPrintable(truthFile));
    }

    void torchaoAgainstFloat_data()
    {
        QTest::addColumn<QString>("truthFile");
        for (const QString& f : torch2TruthFiles())
            if (readJson(torch2Dir() + QLatin1Char('/') + f).contains(QStringLiteral("scheme")))
                QTest::newRow(qPrintable(f)) << f;
    }

    // What `diff float_bf16.pt X.pt --values` reports for each weight: the bfloat16 weight against torchao's
    // dequantization of its quantized copy, as the generator computed it in float64 (max |a-b| exactly,
    // the cosine to rounding).
    void torchaoAgainstFloat()
    {
        QFETCH(QString, truthFile);
        const QJsonObject truth = readJson(torch2Dir() + QLatin1Char('/') + truthFile);
        const Source a = openSource((torch2Dir() + QStringLiteral("/torchao/float_bf16.pt")).toStdString());
        const Source b = openSource(
            (torch2Dir() + QLatin1Char('/') + truth.value(QStringLiteral("open")).toString()).toStdString());
        const QString notDequantized = notDequantizedReason(truth);
        std::vector<std::pair<size_t, size_t>> pairs;
        std::vector<QJsonObject> wants;
        for (const QJsonValue& v : truth.value(QStringLiteral("entries")).toArray()) {
            const QJsonObject want = v.toObject();
            if (!want.contains(QStringLiteral("against_float")))
                continue;
            const QString name = want.value(QStringLiteral("name")).toString();
            const Entry* ea = findEntry(a, name);
            const Entry* eb = findEntry(b, name);
            QVERIFY2(ea && eb, qPrintable(name));
            pairs.emplace_back(static_cast<size_t>(ea - a.entries.data()), static_cast<size_t>(eb - b.entries.data()));
            wants.push_back(want);
        }
        QVERIFY(pairs.size() >= 4);
        const auto got = values::compareValues(a, b, pairs);
        for (size_t k = 0; k < pairs.size(); ++k) {
            const QByteArray name = wants[k].value(QStringLiteral("name")).toString().toUtf8();
            const QJsonObject want = wants[k].value(QStringLiteral("against_float")).toObject();
            const values::ValueComparison& c = got[k];
            if (!notDequantized.isEmpty() && b.entries[pairs[k].second].kind == EntryKind::Group) {
                QVERIFY2(!c.compared && QString::fromStdString(c.why).contains(notDequantized),
                    name + ": " + QByteArray::fromStdString(c.why));
                continue;
            }
            QVERIFY2(c.compared, name + ": " + QByteArray::fromStdString(c.why));
            QVERIFY2(c.maxAbsDiff && *c.maxAbsDiff == want.value(QStringLiteral("max_abs_diff")).toDouble(),
                name + " max_abs_diff " + QByteArray::number(c.maxAbsDiff.value_or(-1), 'g', 17));
            QVERIFY2(c.cosine && close(*c.cosine, want.value(QStringLiteral("cosine")).toDouble(), 1e-12),
                name + " cosine " + QByteArray::number(c.cosine.value_or(-9), 'g', 17));
            if (b.entries[pairs[k].second].kind == EntryKind::Group)
                QVERIFY2(c.note.rfind("B dequantized: ", 0) == 0, c.note.c_str());
        }
    }

    // torchao groups whose parts or parameters do not fit are refused with the reason, before any read;
    // bytes outside the file end in a LoadError, never a read past it.
    void hostileTorchaoGroupsAreRefused()
    {
        const Source int8 = openSource((torch2Dir() + QStringLiteral("/torchao/int8wo.pt")).toStdString());
        const Source nf4 = openSource((torch2Dir() + QStringLiteral("/torchao/nf4.pt")).toStdString());
        const Source optim = openSource((torch2Dir() + QStringLiteral("/torchao/optim_adamw4bit.pt")).toStdString());
        const Source dtypes = openSource((torch2Dir() + QStringLiteral("/dtypes/dtypes.pt")).toStdString());
        const Entry* aqt = findEntry(int8, QStringLiteral("0.weight"));
        const Entry* n = findEntry(nf4, QStringLiteral("0.weight"));
        const Entry* o = findEntry(optim, QStringLiteral("state.0.exp_avg"));
        const Entry* coo = findEntry(dtypes, QStringLiteral("coo"));
        QVERIFY(aqt && n && o && coo && aqt->part("zero_point"));
        values::FileCache files;
        Entry cooOf2Rows = *coo;
        cooOf2Rows.shape = { 2, 6 };
        auto refused = [&](const Source& s, const Entry& e, const char* reason) {
            std::string why;
            try {
                if (values::ValueReader::open(s, e, files, why))
                    return QStringLiteral("accepted");
            } catch (const LoadError& err) {
                why = err.what();
            }
            return QString::fromStdString(why).contains(QLatin1String(reason)) ? QString()
                                                                               : QString::fromStdString(why);
        };
        const std::vector<std::tuple<const char*, const Source*, Entry, const char*>> cases = {
            { "block_size that does not divide", &int8, withParam(*aqt, "block_size", "(1, 100)"), "does not divide" },
            { "block_size of another rank", &int8, withParam(*aqt, "block_size", "(256,)"), "one size per dimension" },
            { "no block_size", &int8, withParam(*aqt, "block_size", nullptr), "one size per dimension" },
            { "a scale per half row", &int8, withParam(*aqt, "block_size", "(1, 128)"), "one value per block" },
            { "zero points of another count", &int8, withPartShape(*aqt, "zero_point", { 64 }),
                "does not match scale" },
            { "an unknown zero_point_domain", &int8, withParam(*aqt, "zero_point_domain", "ZeroPointDomain(7)"),
                "not one torchao 0.9 knows" },
            { "no zero_point_domain", &int8, withParam(*aqt, "zero_point_domain", nullptr), "absent" },
            { "a zero point in the NONE domain", &int8, withParam(*aqt, "zero_point_domain", "ZeroPointDomain.NONE"),
                "torchao refuses it" },
            { "a transposed impl", &int8, withParam(*aqt, "transposed", "True"), "transposed" },
            { "another tensor impl", &int8, withParam(*aqt, "tensor_impl", "TensorCoreTiledAQTTensorImpl"),
                "is not dequantized" },
            { "quant_min that is not a number", &int8,
                withParam(withParam(*aqt, "zero_point_domain", "ZeroPointDomain(2)"), "quant_min", "lots"),
                "not a number" },
            { "data past the file", &int8,
                withPart(*aqt, "int_data", [](Entry& p) { p.location.offset = uint64_t(1) << 40; }),
                "reach past the end" },
            { "NF4 codes for half the weight", &nf4, withPartShape(*n, "quantized_data", { 8192 }), "do not fit" },
            { "NF4 scaler blocks that do not divide", &nf4, withParam(*n, "scaler_block_size", "100"), "do not fit" },
            { "an odd NF4 block", &nf4, withParam(*n, "block_size", "63"), "even block size" },
            { "an NF4 table in another dtype", &nf4, withPart(*n, "nf4", [](Entry& p) { p.dtype = DType::Float16; }),
                "weight's dtype" },
            { "an NF4 table of 8 codes", &nf4, withPartShape(*n, "nf4", { 8 }), "not 16" },
            { "optimizer codes for part of the state", &optim, withPartShape(*o, "codes", { 1000 }), "do not split" },
            { "optimizer scales that do not split it", &optim, withPartShape(*o, "scale", { 500 }), "do not split" },
            { "an optimizer table of 8 codes", &optim, withPartShape(*o, "qmap", { 8 }), "not 16" },
            { "a sparse index outside the tensor", &dtypes, cooOf2Rows, "outside" },
            { "hybrid sparse values", &dtypes, withPartShape(*coo, "values", { 5, 2 }),
                "not a plain sparse_coo layout" },
        };
        for (const auto& [what, s, e, reason] : cases) {
            const QString got = refused(*s, e, reason);
            QVERIFY2(got.isEmpty(), qPrintable(QLatin1String(what) + QStringLiteral(": ") + got));
        }
        // Through the statistics, a refused group is summarised by its stored part with the reason.
        Source s = int8;
        s.entries.push_back(withParam(*aqt, "block_size", "(1, 100)"));
        const auto r = values::computeStats(s, { s.entries.size() - 1 });
        QVERIFY(r[0].stats);
        QVERIFY2(r[0].stats->note
                == "stored values of its int_data part (block_size 100 does not divide dimension 1 of [128, 256])",
            r[0].stats->note.c_str());
    }

    void perRankValues_data()
    {
        QTest::addColumn<QString>("truthFile");
        for (const char* dir : { "fsdp2", "fsdp2_tp", "float8", "nf4_fsdp2" })
            for (const QString& f :
                QDir(torch2Dir() + QLatin1Char('/') + QLatin1String(dir))
                    .entryList({ QStringLiteral("*.per-rank.truth.json") }, QDir::Files, QDir::Name))
                QTest::newRow(qPrintable(QLatin1String(dir) + QLatin1Char('/') + f))
                    << QLatin1String(dir) + QLatin1Char('/') + f;
    }

    // Per-rank sets (FSDP2, FSDP2 + TP, Float8 under FSDP2) assembled from the ranks' pieces against the
    // full tensors torch gathered (full_tensor()): every value bit for bit. What is not assembled says why:
    // _StridedShard pieces interleave rows, a plain tensor held whole by every file has no known global shape,
    // and NF4 pieces (torchao subclasses inside DTensors) are not kept per rank by the reader.
    void perRankValues()
    {
        QFETCH(QString, truthFile);
        const QJsonObject truth = readJson(torch2Dir() + QLatin1Char('/') + truthFile);
        // "open" names rank 0's file alone for the sets made by one process per rank: the others share its stem.
        const QFileInfo first(
            torch2Dir() + QLatin1Char('/') + truth.value(QStringLiteral("open")).toArray().first().toString());
        std::vector<std::string> paths;
        for (const QString& f :
            first.dir().entryList({ first.fileName().replace(QStringLiteral("rank0"), QStringLiteral("rank*")) },
                QDir::Files, QDir::Name))
            paths.push_back(first.dir().filePath(f).toStdString());
        QVERIFY(paths.size() >= 2);
        Source s = openRankFiles(paths, {});
        values::StatsOptions noHistogram;
        noHistogram.bins = 0;
        int checked = 0, refused = 0;
        for (const QJsonValue& v : truth.value(QStringLiteral("entries")).toArray()) {
            const QJsonObject want = v.toObject();
            if (!want.contains(QStringLiteral("values")))
                continue;
            const QString name = want.value(QStringLiteral("name")).toString();
            const QString label = truthFile + QLatin1Char(':') + name;
            const Entry* e = findEntry(s, name);
            QVERIFY2(e, qPrintable(label));
            const auto r = values::computeStats(s, { static_cast<size_t>(e - s.entries.data()) }, noHistogram);
            const QString placements
                = want.value(QStringLiteral("placements")).toVariant().toStringList().join(QLatin1Char(' '));
            QString reason;
            if (placements.contains(QStringLiteral("_StridedShard")))
                reason = QStringLiteral("_StridedShard");
            else if (!want.contains(QStringLiteral("placements")) && !e->shapeKnown)
                reason = QStringLiteral("shape is not known");
            else if (want.value(QStringLiteral("values_from")).toString().contains(QStringLiteral("dequantized")))
                reason = QStringLiteral("bytes are not located"); // each rank's piece is a torchao subclass
            if (!reason.isEmpty()) {
                QVERIFY2(!r[0].stats && QString::fromStdString(r[0].skipped).contains(reason),
                    qPrintable(label + QStringLiteral(": ") + QString::fromStdString(r[0].skipped)));
                ++refused;
                continue;
            }
            const QJsonObject values = want.value(QStringLiteral("values")).toObject();
            checkReaderValues(label, s, *e, r[0], values, values.value(QStringLiteral("sha256_values_f64")).toString());
            if (QTest::currentTestFailed())
                return;
            ++checked;
        }
        QVERIFY2(checked > 0 || truthFile.startsWith(QStringLiteral("nf4_fsdp2")), qPrintable(truthFile));
        qInfo("%s: %d entries assembled and checked, %d refused with their reason", qPrintable(truthFile), checked,
            refused);
    }

    // Per-rank pieces that cannot be placed in order are refused with the reason, never misread: a piece
    // stored as a strided view, partial sums, overlapping pieces, a piece past its file.
    void hostilePerRankPiecesAreRefused()
    {
        const QString dir = torch2Dir() + QStringLiteral("/fsdp2/");
        const Source s = openRankFiles({ (dir + QStringLiteral("model_rank0.pt")).toStdString(),
                                           (dir + QStringLiteral("model_rank1.pt")).toStdString() },
            {});
        const Entry* good = findEntry(s, QStringLiteral("layers.0.attention.wq.weight"));
        QVERIFY(good && good->sharding && good->sharding->chunks.size() == 2);
        values::FileCache files;
        auto refusal = [&](void (*change)(Sharding&)) {
            Entry e = *good;
            auto sh = std::make_shared<Sharding>(*good->sharding);
            change(*sh);
            e.sharding = sh;
            try {
                (void)values::TensorBytes::open(s, e, files);
            } catch (const LoadError& err) {
                return std::string(err.what());
            }
            return std::string("accepted");
        };
        const std::vector<std::pair<void (*)(Sharding&), const char*>> cases = {
            { storeFirstPieceTransposed, "strided view" },
            { [](Sharding& sh) { sh.placements.assign(1, "Partial(sum)"); }, "not boxes of the tensor" },
            { [](Sharding& sh) { sh.chunks[1].offsets[0] = 8; }, "overlap" },
            { [](Sharding& sh) { sh.chunks[1].byteOffset = uint64_t(1) << 40; }, "past the end" },
            { [](Sharding& sh) { sh.chunks.pop_back(); }, "do not cover" },
        };
        for (const auto& [change, reason] : cases) {
            const std::string why = refusal(change);
            QVERIFY2(why.find(reason) != std::string::npos, why.c_str());
        }
        // A replica (the same box in another file) is read once; the pieces still cover the tensor.
        const std::string replica = refusal([](Sharding& sh) { sh.chunks.push_back(sh.chunks[0]); });
        QVERIFY2(replica == "accepted", replica.c_str());
    }

    // A million chunks (one element each, listed out of order and stored backwards) assemble and are checked
    // for overlaps in n log n time; comparing them pairwise took minutes (10^5 chunks: 48 s).
    void manyChunksStayFast()
    {
        constexpr int64_t n = 1'000'000;
        QTemporaryDir dir;
        QByteArray bytes(static_cast<qsizetype>(n * 4), Qt::Uninitialized);
        for (int64_t j = 0; j < n; ++j) {
            const float v = static_cast<float>(j);
            std::memcpy(bytes.data() + j * 4, &v, 4);
        }
        Source s = rawTensorSource(dir, bytes, DType::Float32, { n });
        QCOMPARE(s.entries.size(), size_t(1));
        Entry& e = s.entries[0];
        e.location = {};
        auto sh = std::make_shared<Sharding>();
        sh->kind = Sharding::Kind::DcpChunks;
        std::vector<int64_t> order(static_cast<size_t>(n));
        for (int64_t k = 0; k < n; ++k)
            order[static_cast<size_t>(k)] = (k * 7919) % n; // a permutation (7919 is prime, n is not its multiple)
        for (int64_t k : order) {
            ShardChunk c;
            c.offsets = { k };
            c.sizes = { 1 };
            c.file = 0;
            c.byteOffset = static_cast<uint64_t>(n - 1 - k) * 4;
            c.byteLength = 4;
            sh->chunks.push_back(std::move(c));
        }
        e.sharding = sh;
        QElapsedTimer timer;
        timer.start();
        values::FileCache files;
        const values::TensorBytes tb = values::TensorBytes::open(s, e, files);
        std::vector<uint8_t> scratch;
        float first[3];
        std::memcpy(first, tb.elements(0, 3, scratch), sizeof first);
        QCOMPARE(first[0], float(n - 1));
        QCOMPARE(first[2], float(n - 3));
        const auto r = values::computeStats(s, { 0 });
        QVERIFY(r[0].stats);
        QCOMPARE(r[0].stats->min, 0.0);
        QCOMPARE(r[0].stats->max, double(n - 1));
        QCOMPARE(r[0].stats->mean, double(n - 1) / 2);

        // Two chunks naming one element: refused (the pair is found without comparing every pair).
        Entry overlapping = e;
        auto bad = std::make_shared<Sharding>(*sh);
        bad->chunks[10].offsets = bad->chunks[11].offsets;
        overlapping.sharding = bad;
        try {
            (void)values::TensorBytes::open(s, overlapping, files);
            QFAIL("overlapping chunks were accepted");
        } catch (const LoadError& err) {
            QVERIFY2(std::string(err.what()).find("overlap") != std::string::npos, err.what());
        }
        // Per-rank pieces saved twice (replicas) are read once.
        Entry replicated = e;
        auto twice = std::make_shared<Sharding>(*sh);
        twice->kind = Sharding::Kind::PerRankFiles;
        twice->chunks.insert(twice->chunks.end(), sh->chunks.begin(), sh->chunks.end());
        replicated.sharding = twice;
        const values::TensorBytes tb2 = values::TensorBytes::open(s, replicated, files);
        std::memcpy(first, tb2.elements(0, 3, scratch), sizeof first);
        QCOMPARE(first[1], float(n - 2));
        // Generous for sanitizer builds on slow machines; the pairwise check would take hours at this size.
        QVERIFY2(timer.elapsed() < 60000, qPrintable(QString::number(timer.elapsed())));
    }

    // Broadcast views (torch's expand(): stride 0) are summarised from their stored elements, each weighed by
    // how often it stands: the statistics are torch's over the whole view, the work is the stored bytes'. A
    // view of 2^32 x 20 elements over 20 stored ones used to be read element by element (past 120 s).
    void broadcastViewsAreWeighed()
    {
        if (!test::haveTorchPython())
            QSKIP("no /usr/bin/python3 with torch");
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("expanded.pt"));
        const QString script = QStringLiteral(R"(
import json, sys, torch
base = torch.arange(20, dtype=torch.float32) * 0.5 - 3.5
sd = {"small": base.expand(8, 20), "big": base.expand(2**21, 20), "huge": base.expand(2**32, 20)}
torch.save(sd, sys.argv[1])
truth = {}
for k in ("small", "big"):
    t = sd[k]
    d = base.double().expand(t.shape)
    lo, hi = t.min().item(), t.max().item()
    truth[k] = {"numel": t.numel(), "min": lo, "max": hi, "mean": d.mean().item(), "std": d.std().item(),
                "hist": [int(c) for c in torch.histc(t, bins=16, min=lo, max=hi).tolist()]}
print(json.dumps(truth))
)");
        const auto r = test::run(test::torchPython(), { QStringLiteral("-c"), script, path });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const QJsonObject truth = QJsonDocument::fromJson(r.out).object();
        const Source s = openSource(path.toStdString());
        QElapsedTimer timer;
        timer.start();
        for (const char* name : { "small", "big" }) {
            const Entry* e = findEntry(s, QLatin1String(name));
            QVERIFY(e);
            const auto st = values::computeStats(s, { static_cast<size_t>(e - s.entries.data()) });
            QVERIFY2(st[0].stats, st[0].skipped.c_str());
            const auto& t = *st[0].stats;
            const QJsonObject want = truth.value(QLatin1String(name)).toObject();
            QCOMPARE(t.numel, uint64_t(want.value(QStringLiteral("numel")).toDouble()));
            QCOMPARE(t.finite, t.numel);
            QCOMPARE(t.min, want.value(QStringLiteral("min")).toDouble());
            QCOMPARE(t.max, want.value(QStringLiteral("max")).toDouble());
            QVERIFY(std::abs(t.mean - want.value(QStringLiteral("mean")).toDouble()) < 1e-12);
            QVERIFY2(std::abs(*t.std() - want.value(QStringLiteral("std")).toDouble()) < 1e-9,
                qPrintable(QString::number(*t.std(), 'g', 17)));
            const QJsonArray hist = want.value(QStringLiteral("hist")).toArray();
            QCOMPARE(t.histogram.size(), size_t(hist.size()));
            for (qsizetype b = 0; b < hist.size(); ++b)
                QCOMPARE(t.histogram[static_cast<size_t>(b)], uint64_t(hist[b].toDouble()));
            // The small view is read element by element (its hash is of the logical order); the big one is weighed.
            QCOMPARE(t.note.find("broadcast") != std::string::npos, std::string(name) == "big");
        }
        // 2^32 x 20 elements over 20: weighed in the same time as the stored elements take.
        const Entry* huge = findEntry(s, QStringLiteral("huge"));
        QVERIFY(huge);
        const auto st = values::computeStats(s, { static_cast<size_t>(huge - s.entries.data()) });
        QVERIFY2(st[0].stats, st[0].skipped.c_str());
        QCOMPARE(st[0].stats->numel, (uint64_t(1) << 32) * 20);
        QCOMPARE(st[0].stats->min, -3.5);
        QCOMPARE(st[0].stats->max, 6.0);
        QVERIFY2(timer.elapsed() < 20000, qPrintable(QString::number(timer.elapsed())));
        // Readers that cannot weigh (value comparison) refuse such a view rather than read it.
        values::FileCache files;
        QVERIFY_THROWS_EXCEPTION(LoadError, values::TensorBytes::open(s, *huge, files));
    }

    // Files are read with pread, never mapped: a file that shrinks after it was listed gives one clear error
    // when its values are read (a mapping would have killed the process with SIGBUS at the vanished page),
    // and a 50 GB file lists under the address-space limit HPC clusters set (ulimit -v).
    void filesAreReadNotMapped()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("shrinks.safetensors"));
        QVERIFY(test::writeSafetensorsFile(path, R"({"w":{"dtype":"F32","shape":[1048576],"data_offsets":[0,4194304]}})", {}, 4194304));
        const Source s = openSource(path.toStdString());
        values::FileCache files;
        const values::TensorBytes tb = values::TensorBytes::open(s, s.entries.front(), files);
        QVERIFY(QFile::resize(path, QFileInfo(path).size() - 4194304 + 1000)); // truncated under the open reader
        std::vector<uint8_t> buffer;
        try {
            (void)tb.read(0, tb.numel(), buffer);
            QFAIL("a read past the file's new end succeeded");
        } catch (const LoadError& e) {
            QVERIFY2(std::string(e.what()).find("changed while reading") != std::string::npos, e.what());
            QVERIFY2(std::string(e.what()).find(path.toStdString()) != std::string::npos, e.what());
        }

        if (test::sanitized())
            QSKIP("sanitizer builds cannot run under an address-space limit");
        const QString big = dir.filePath(QStringLiteral("big.safetensors"));
        QVERIFY(test::writeSafetensorsFile(
            big, R"({"w":{"dtype":"BF16","shape":[25000000000],"data_offsets":[0,50000000000]}})", {}, 50000000000LL));
        const auto r = test::run(QStringLiteral("/bin/sh"),
            { QStringLiteral("-c"), QStringLiteral("ulimit -v 4000000 && exec \"$0\" ls \"$1\""), test::statelensBinary(), big });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.out.contains("25.0B parameters"), r.out.constData());
    }

    // stats over an index of 300 shards holds them all open within one batch: the CLI raises its soft
    // limit on open files to the hard one, so a soft limit of 64 (below the shard count) is no error.
    void manyShardsOpenAtOnce()
    {
        rlimit l {};
        QVERIFY(getrlimit(RLIMIT_NOFILE, &l) == 0);
        if (l.rlim_max != RLIM_INFINITY && l.rlim_max < 400)
            QSKIP("the hard limit on open files is below 400 here");
        QTemporaryDir dir;
        QByteArray weightMap;
        constexpr int kShards = 300;
        for (int i = 0; i < kShards; ++i) {
            const QString name = QStringLiteral("model-%1-of-%2.safetensors").arg(i + 1, 5, 10, QLatin1Char('0')).arg(kShards);
            const QByteArray header = QStringLiteral("{\"w%1\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}").arg(i).toUtf8();
            const float v[2] = { float(i), -float(i) };
            QVERIFY(test::writeSafetensorsFile(dir.filePath(name), header, QByteArray(reinterpret_cast<const char*>(v), sizeof v)));
            weightMap += (i ? "," : "") + QStringLiteral("\"w%1\":\"%2\"").arg(i).arg(name).toUtf8();
        }
        QFile index(dir.filePath(QStringLiteral("model.safetensors.index.json")));
        QVERIFY(index.open(QIODevice::WriteOnly));
        index.write("{\"metadata\":{},\"weight_map\":{" + weightMap + "}}");
        index.close();
        const auto r = test::run(QStringLiteral("/bin/sh"),
            { QStringLiteral("-c"), QStringLiteral("ulimit -Sn 64 && exec \"$0\" stats \"$1\" --format json"), test::statelensBinary(), dir.path() });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const QJsonDocument doc = QJsonDocument::fromJson(r.out);
        const QJsonArray tensors = doc.object().value(QStringLiteral("tensors")).toArray();
        QCOMPARE(tensors.size(), kShards);
        for (const QJsonValue& t : tensors) {
            const QJsonObject o = t.toObject();
            const int i = o.value(QStringLiteral("name")).toString().mid(1).toInt();
            QCOMPARE(o.value(QStringLiteral("max")).toDouble(), double(i));
        }
    }

    // stats of many small tensors streams its output: beyond what listing the file holds, it keeps a compact
    // record per tensor, never rows of text (10^6 tensors peaked at 1.8 GB in JSON where ls took 0.77 GB).
    void statsOfManyTensorsStaysNearListing()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("many.safetensors"));
        constexpr int kTensors = 200000;
        QByteArray header = "{";
        header.reserve(kTensors * 96);
        for (int i = 0; i < kTensors; ++i) {
            header += (i ? ",\"" : "\"") + QByteArray("model.layers.") + QByteArray::number(i / 100) + ".block."
                + QByteArray::number(i % 100) + ".weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":["
                + QByteArray::number(8 * qint64(i)) + "," + QByteArray::number(8 * qint64(i) + 8) + "]}";
        }
        header += '}';
        QVERIFY(test::writeSafetensorsFile(path, header, {}, 8 * qint64(kTensors)));
        // Against the JSON listing, which builds no entry (46 MB peak here) where stats builds every one
        // (sizeof(Entry) and a name on the heap each, counted below).
        const auto ls = test::runMeasured(test::statelensBinary(),
            { QStringLiteral("ls"), path, QStringLiteral("--format"), QStringLiteral("json"), QStringLiteral("-o"),
                dir.filePath(QStringLiteral("ls.json")) });
        QCOMPARE(ls.exitCode, 0);
        for (const char* format : { "table", "json" }) {
            const auto st = test::runMeasured(test::statelensBinary(),
                { QStringLiteral("stats"), path, QStringLiteral("--format"), QString::fromLatin1(format), QStringLiteral("-o"),
                    dir.filePath(QStringLiteral("out.") + QString::fromLatin1(format)) });
            QCOMPARE(st.exitCode, 0);
            QVERIFY(ls.peakKb > 0 && st.peakKb > 0);
            qInfo("%s: ls peak %lld KB, stats peak %lld KB", format, ls.peakKb, st.peakKb);
            // 200,000 tensors: the entries (each name a 48-byte heap block), and a compact record (~200 bytes)
            // and, for JSON, 16 histogram bins per tensor within 100 MB. Stats peaks at 146-149 MB, against 42 +
            // 52 + 100 here. (A sanitizer build's quarantine holds freed memory, so its peaks say nothing about
            // what is kept.)
            const qint64 entriesKb = qint64(kTensors) * qint64(sizeof(Entry) + 48) / 1024;
            if (!test::sanitized())
                QVERIFY2(st.peakKb < ls.peakKb + entriesKb + 100 * 1024,
                    qPrintable(QStringLiteral("%1 KB, entries %2 KB").arg(st.peakKb).arg(entriesKb)));
        }
        QFile json(dir.filePath(QStringLiteral("out.json")));
        QVERIFY(json.open(QIODevice::ReadOnly));
        const QJsonArray tensors = QJsonDocument::fromJson(json.readAll()).object().value(QStringLiteral("tensors")).toArray();
        QCOMPARE(tensors.size(), kTensors);
        QCOMPARE(tensors.last().toObject().value(QStringLiteral("name")).toString(), QStringLiteral("model.layers.1999.block.99.weight"));
    }

    // Parts that do not fit their group are refused when the reader opens, never read past.
    void hostileQuantizedGroupsAreRefused()
    {
        Source s = openSource((valuesDir() + QStringLiteral("/quantized_groups.safetensors")).toStdString());
        values::FileCache files;
        std::string why;
        Entry* nf4 = nullptr;
        Entry* gptq = nullptr;
        for (Entry& e : s.entries) {
            if (e.name == "model.layers.2.mlp.gate_proj.weight")
                nf4 = &e;
            if (e.name == "model.layers.3.self_attn.o_proj.weight")
                gptq = &e;
        }
        QVERIFY(nf4 && gptq);
        Entry big = *nf4;
        big.shape = { int64_t(1) << 40 };
        QVERIFY(!values::ValueReader::open(s, big, files, why));
        QVERIFY2(why.find("fewer than") != std::string::npos, why.c_str());
        Entry bigger = *gptq;
        bigger.shape = { 64, 512 };
        why.clear();
        QVERIFY(!values::ValueReader::open(s, bigger, files, why));
        QVERIFY2(why.find("do not fit") != std::string::npos, why.c_str());
        Entry noScales = *gptq;
        noScales.parts.erase(std::remove_if(noScales.parts.begin(), noScales.parts.end(),
                                 [](const Entry& p) { return p.name == "scales"; }),
            noScales.parts.end());
        why.clear();
        QVERIFY(!values::ValueReader::open(s, noScales, files, why));
        QVERIFY2(why.find("cannot dequantize") != std::string::npos, why.c_str());
    }

    void cancelledStatsStop()
    {
        const Source s = openSource((valuesDir() + QStringLiteral("/large.pt")).toStdString());
        LoadControl c;
        c.cancel();
        values::StatsOptions o;
        o.control = &c;
        QVERIFY_THROWS_EXCEPTION(LoadCancelled, values::computeStats(s, { 0 }, o));
        LoadControl progress;
        o.control = &progress;
        (void)values::computeStats(s, { 0 }, o);
        QCOMPARE(progress.fraction(), 1.0);
    }

    // Hostile locations are refused with the entry named, never read.
    void bytesOutsideTheFileAreRefused()
    {
        Source s = openSource((valuesDir() + QStringLiteral("/dtypes.safetensors")).toStdString());
        Entry& e = s.entries.front();
        e.location.offset = 1ull << 40;
        values::FileCache files;
        try {
            (void)values::TensorBytes::open(s, e, files);
            QFAIL("an offset past the end was accepted");
        } catch (const LoadError& err) {
            QVERIFY2(QString::fromStdString(err.what()).contains(QString::fromStdString(e.name)), err.what());
        }
        Entry strided = s.entries.front();
        strided.location = s.entries[1].location;
        strided.shape = { 1000000, 1000000 };
        strided.location.strides = { 1000000, 1 };
        try {
            (void)values::TensorBytes::open(s, strided, files);
            QFAIL("strides past the end were accepted");
        } catch (const LoadError&) {
        }
    }
};

QTEST_MAIN(TestValues)
#include "tst_values.moc"
