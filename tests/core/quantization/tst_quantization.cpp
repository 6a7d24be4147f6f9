// Quantized state dicts: one logical parameter shown as one Group with its parts, logical shape and dtype,
// and Entry::quantization, plus the warnings for weights stored without their scales.
//
// Truth comes from outside StateLens:
//   - tests/fixtures/quant/*.expected.json, declared by tests/fixtures/make_quant_fixtures.py from what it
//     built each file to hold (bitsandbytes / GPTQ / AWQ / FP8 / torchao layouts; torchao_subclasses.pt is a
//     reconstruction, marked so in its expected file);
//   - real third-party files in ../shared/fixtures/real (pytorch/ao, the Molmo bnb-NF4 index, torch.ao eager
//     files), with the facts below read from their pickles and headers by hand (SOURCES.md, pickletools);
//     those tests skip when ../shared is absent.
// Also: float state dicts (100,000 entries) come out unchanged and fast, grouping is idempotent, and a
// container switch groups again.

#include "common/qt_text.h"
#include "common/test_paths.h"
#include "formats/loader.h"
#include "model/dtype.h"
#include "model/source.h"
#include "quant/quantized_tensors.h"
#include "report/source_report.h"
#include "util/error.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSet>
#include <QTest>

#include <ctime>

using namespace sl;

namespace {

using sl::test::q;
QString quantDir() { return test::fixturesDir() + QStringLiteral("/quant"); }

QStringList expectedFixtures()
{
    QStringList out;
    for (const QString& f : QDir(quantDir()).entryList({ QStringLiteral("*.expected.json") }, QDir::Files, QDir::Name))
        out << f.chopped(int(sizeof(".expected.json") - 1));
    return out;
}

QJsonObject readExpected(const QString& fixture)
{
    QFile f(quantDir() + "/" + fixture + ".expected.json");
    return f.open(QIODevice::ReadOnly) ? QJsonDocument::fromJson(f.readAll()).object() : QJsonObject();
}

QString shapeText(const Shape& s) { return q(shapeToString(s)); }
QString shapeText(const QJsonValue& v)
{
    QStringList parts;
    for (const auto& d : v.toArray())
        parts << QString::number(d.toInteger());
    return "[" + parts.join(", ") + "]";
}

template <typename Entries> const Entry* findEntry(const Entries& entries, const QString& name)
{
    for (const Entry& e : entries)
        if (q(e.name) == name)
            return &e;
    return nullptr;
}

QString param(const Entry& e, const QString& key)
{
    if (!e.quantization)
        return {};
    for (const auto& [k, v] : e.quantization->params)
        if (q(k) == key)
            return q(v);
    return QStringLiteral("<absent>");
}

QString attribute(const Entry& e, const char* key)
{
    const std::string* v = e.attribute(key);
    return v ? q(*v) : QString();
}

// Collects every mismatch so that one failure shows them all.
struct Checker {
    QStringList problems;
    void expect(bool ok, const QString& what)
    {
        if (!ok && problems.size() < 80)
            problems << what;
    }
    void equal(const QString& actual, const QString& expected, const QString& what)
    {
        expect(actual == expected, what + ": StateLens '" + actual + "', expected '" + expected + "'");
    }
};

void checkGroup(Checker& c, const Entry& e, const QJsonObject& g)
{
    const QString where = e.name.empty() ? QStringLiteral("?") : q(e.name);
    c.expect(e.kind == EntryKind::Group, where + ": not a group");
    const QString scheme = g.value("scheme").toString();
    c.expect(bool(e.quantization) == !scheme.isEmpty(), where + ": quantization set or not as expected");
    if (e.quantization && !scheme.isEmpty()) {
        c.equal(q(e.quantization->scheme), scheme, where + " scheme");
        c.equal(q(dtypeName(e.quantization->storageDType)), g.value("storage_dtype").toString(), where + " storage dtype");
        c.expect(e.quantization->logicalShapeKnown == g.value("logical_shape_known").toBool(),
            where + ": logical_shape_known differs");
        const QJsonObject params = g.value("params").toObject();
        for (auto it = params.begin(); it != params.end(); ++it)
            c.equal(param(e, it.key()), it.value().toString(), where + " param " + it.key());
    }
    c.equal(q(dtypeName(e.dtype)), g.value("dtype").toString(), where + " logical dtype");
    if (g.value("shape").isNull()) {
        c.expect(!e.shapeKnown, where + ": the logical shape should be unknown");
    } else {
        c.expect(e.shapeKnown, where + ": the logical shape should be known");
        c.equal(shapeText(e.shape), shapeText(g.value("shape")), where + " logical shape");
    }
    if (!g.value("type_name").toString().isEmpty())
        c.equal(q(e.typeName), g.value("type_name").toString(), where + " type");
    const QJsonArray parts = g.value("parts").toArray();
    if (e.parts.size() != size_t(parts.size())) {
        QStringList roles;
        for (const Entry& p : e.parts)
            roles << q(p.name);
        c.expect(false, where + QStringLiteral(": %1 parts (%2), expected %3").arg(e.parts.size()).arg(roles.join(", ")).arg(parts.size()));
        return;
    }
    for (qsizetype i = 0; i < parts.size(); ++i) {
        const QJsonObject p = parts[i].toObject();
        const Entry& a = e.parts[size_t(i)];
        const QString pw = where + " part " + QString::number(i);
        c.equal(q(a.name), p.value("role").toString(), pw + " role");
        if (p.contains("key"))
            c.equal(attribute(a, quant::kPartKeyAttribute), p.value("key").toString(), pw + " key");
        c.equal(q(dtypeName(a.dtype)), p.value("dtype").toString(), pw + " dtype");
        c.equal(shapeText(a.shape), shapeText(p.value("shape")), pw + " shape");
        if (p.contains("file"))
            c.expect(a.location.file >= 0, pw + ": no file");
        c.expect(a.location.kind != TensorLocation::Kind::None || p.value("key").isUndefined(),
            pw + ": a grouped part lost its location");
    }
}

// Expected warnings are present; every warning about an entry is expected (file-level ones, such as the
// weights-only allowlist, are not this suite's business).
void checkFindings(Checker& c, const Source& s, const QJsonArray& warnings, const QJsonArray& infos)
{
    QSet<int> matched;
    auto match = [&](const QJsonArray& want, Severity sev) {
        for (const auto& w : want) {
            const QJsonObject o = w.toObject();
            bool found = false;
            for (size_t i = 0; i < s.findings.size() && !found; ++i) {
                const Finding& f = s.findings[i];
                if (f.severity == sev && q(f.entry) == o.value("entry").toString()
                    && q(f.message).contains(o.value("contains").toString())) {
                    found = true;
                    matched.insert(int(i));
                }
            }
            c.expect(found, QStringLiteral("no %1 on '%2' containing '%3'")
                                .arg(q(severityName(sev)), o.value("entry").toString(), o.value("contains").toString()));
        }
    };
    match(warnings, Severity::Warning);
    match(infos, Severity::Info);
    for (size_t i = 0; i < s.findings.size(); ++i) {
        const Finding& f = s.findings[i];
        if (f.severity != Severity::Info && !f.entry.empty() && !matched.contains(int(i)))
            c.expect(false, "unexpected " + q(severityName(f.severity)) + " on '" + q(f.entry) + "': " + q(f.message));
    }
}

std::string json(const Source& s) { return sourceToJson(s); }

// CPU time of this thread: the bound must hold on a loaded CI machine, where wall time says little.
qint64 threadCpuMs()
{
    timespec ts {};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return qint64(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

Entry tensor(std::string name, DType dtype, Shape shape)
{
    Entry e;
    e.name = std::move(name);
    e.dtype = dtype;
    e.shape = std::move(shape);
    return e;
}

QString realPath(const QString& rel)
{
    const QString dir = test::realFixturesDir();
    return dir.isEmpty() ? QString() : dir + "/" + rel;
}

#define SKIP_WITHOUT_REAL(rel)                                                                                         \
    const QString path = realPath(QStringLiteral(rel));                                                               \
    if (path.isEmpty() || !QFile::exists(path))                                                                       \
        QSKIP("../shared/fixtures/real is not available");

} // namespace

class TstQuantization : public QObject {
    Q_OBJECT

private slots:
    void fixturesArePresent();
    void fixture_data();
    void fixture();
    void idempotent_data();
    void idempotent();
    void containerSwitchGroupsAgain();
    void floatSourceUnchanged();
    void floatLookalikesUnchanged();
    void rowsScannedForPatterns();
    void largeQuantizedSource();
    void fp8ScalesBesideOrApart();
    void oneNameTwoSchemes();
    void quantStateReadIsBounded();
    void realTorchaoAwq();
    void realTorchaoPrototypeInt4();
    void realTorchaoSafetensors();
    void realBnbIndex();
    void realTorchAoEager();
};

void TstQuantization::fixturesArePresent()
{
    const QStringList have = expectedFixtures();
    QStringList missing;
    for (const char* f : { "bnb_nf4.safetensors", "bnb_nf4_broken.safetensors", "bnb_int8.pt", "bnb_nf4_bf16_storage.pt",
             "gptq.safetensors", "awq.safetensors", "fp8.safetensors", "fp8_unscaled.safetensors",
             "torchao_flat.safetensors", "torchao_sharded", "torchao_subclasses.pt" })
        if (!have.contains(QLatin1String(f)))
            missing << QLatin1String(f);
    QVERIFY2(missing.isEmpty(), qPrintable("missing (run tests/fixtures/make_quant_fixtures.py): " + missing.join(", ")));
    QVERIFY(QFile::exists(quantDir() + "/bnb_int8_ckpt.pt"));
}

void TstQuantization::fixture_data()
{
    QTest::addColumn<QString>("fixture");
    for (const QString& f : expectedFixtures())
        QTest::newRow(qPrintable(f)) << f;
}

void TstQuantization::fixture()
{
    QFETCH(QString, fixture);
    const QJsonObject exp = readExpected(fixture);
    QVERIFY(!exp.isEmpty());
    Source s;
    try {
        s = openSource((quantDir() + "/" + exp.value("open").toString()).toStdString());
    } catch (const std::exception& e) {
        QFAIL(e.what());
    }
    Checker c;
    c.equal(q(formatId(s.format)), exp.value("format").toString(), "format");
    QStringList names;
    for (const Entry& e : s.entries)
        names << q(e.name);
    QStringList want;
    for (const auto& n : exp.value("entries").toArray())
        want << n.toString();
    c.expect(names == want, "entries\n    StateLens: " + names.join(" | ") + "\n    expected:  " + want.join(" | "));
    for (const auto& gv : exp.value("groups").toArray()) {
        const QJsonObject g = gv.toObject();
        const Entry* e = findEntry(s.entries, g.value("name").toString());
        c.expect(e, "no entry '" + g.value("name").toString() + "'");
        if (e)
            checkGroup(c, *e, g);
    }
    for (const auto& pv : exp.value("plain").toArray()) {
        const Entry* e = findEntry(s.entries, pv.toString());
        c.expect(e && e->kind == EntryKind::Tensor && !e->quantization && e->parts.empty(),
            "'" + pv.toString() + "' should be a plain tensor, untouched");
    }
    checkFindings(c, s, exp.value("warnings").toArray(), exp.value("infos").toArray());
    if (!c.problems.isEmpty())
        QFAIL(qPrintable(QString(exp.value("reconstruction").toBool() ? "(reconstruction) " : "") + "\n  "
            + c.problems.join("\n  ")));
}

void TstQuantization::idempotent_data()
{
    QTest::addColumn<QString>("path");
    for (const QString& f : expectedFixtures())
        QTest::newRow(qPrintable(f)) << quantDir() + "/" + readExpected(f).value("open").toString();
    for (const char* rel : { "pytorch__ao/awq_model.pth", "pytorch__ao/model.pt", "pytorch__ao/fp8_weights.safetensors",
             "pytorch__ao/fp8_weights_multi.safetensors", "reubzdubz__Molmo7B_D_NF4Quant/index_only_bnb_nf4/model.safetensors.index.json",
             "5usu__quantization/quantized_model.pth", "suPisanu__fp32toint8QuantizationCNN/model__model_quantized_state_dict.pth" })
        if (const QString p = realPath(QLatin1String(rel)); !p.isEmpty())
            QTest::newRow(rel) << p;
}

void TstQuantization::idempotent()
{
    QFETCH(QString, path);
    Source s = openSource(path.toStdString());
    const std::string once = json(s);
    quant::groupQuantizedEntries(s);
    QCOMPARE(json(s), once);
    quant::groupQuantizedEntries(s);
    QCOMPARE(json(s), once);
}

void TstQuantization::containerSwitchGroupsAgain()
{
    const Source s = openSource((quantDir() + "/bnb_int8_ckpt.pt").toStdString());
    QCOMPARE(q(s.container), QStringLiteral("state_dict"));
    auto check = [](const Source& src) {
        const Entry* g = findEntry(src.entries, QStringLiteral("fc1.weight"));
        QVERIFY(g && g->kind == EntryKind::Group && g->quantization);
        QCOMPARE(q(g->quantization->scheme), QStringLiteral("bitsandbytes.int8"));
        QCOMPARE(g->parts.size(), size_t(3));
        QVERIFY(!findEntry(src.entries, QStringLiteral("fc1.SCB")));
        size_t orphans = 0;
        for (const Finding& f : src.findings)
            orphans += f.entry == "fc3.SCB" && f.severity == Severity::Warning;
        QCOMPARE(orphans, size_t(1)); // once: the old container's finding went with it
    };
    check(s);
    const Source ema = s.withContainer("ema_state_dict");
    QCOMPARE(q(ema.container), QStringLiteral("ema_state_dict"));
    check(ema);
    check(ema.withContainer("state_dict"));
}

void TstQuantization::floatSourceUnchanged()
{
    // 100,000 float entries, among them names a quantized file would use in other dtypes: LayerNorm-like
    // `scale` buffers beside float weights, `weight_scale` beside a float weight, int8 buffers.
    Source s;
    s.format = SourceFormat::Safetensors;
    s.entries.reserve(100'000);
    for (int i = 0; s.entries.size() < 100'000; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        s.entries.push_back(tensor(p + "attn.weight", DType::BFloat16, { 64, 64 }));
        s.entries.push_back(tensor(p + "attn.bias", DType::BFloat16, { 64 }));
        s.entries.push_back(tensor(p + "norm.weight", DType::Float32, { 64 }));
        s.entries.push_back(tensor(p + "norm.scale", DType::Float32, { 64 }));
        s.entries.push_back(tensor(p + "mlp.weight", DType::Float16, { 128, 64 }));
        s.entries.push_back(tensor(p + "mlp.weight_scale", DType::Float32, { 1 }));
        s.entries.push_back(tensor(p + "mask", DType::UInt8, { 64, 1 }));
        s.entries.push_back(tensor(p + "scales", DType::Float16, { 4, 64 }));
    }
    s.entries.resize(100'000);
    const std::string before = json(s);
    QElapsedTimer timer;
    timer.start();
    const qint64 cpu0 = threadCpuMs();
    quant::groupQuantizedEntries(s);
    const qint64 ms = threadCpuMs() - cpu0;
    qInfo("grouping pass over 100,000 float entries: %lld ms CPU, %lld ms wall", ms, timer.elapsed());
    QCOMPARE(s.entries.size(), size_t(100'000));
    QVERIFY(s.findings.empty());
    QVERIFY(json(s) == before);
    // Generous: tens of ms in a release build on a 2-core VM; sanitizer builds are ~10x slower.
    QVERIFY2(ms < 3000, qPrintable(QString::number(ms) + " ms CPU"));
}

namespace {

// Rows as a reader hands them over (model/entry_list.h): plain tensors named layers.<i>.weight, with the
// tensors of `extra` in place of the rows from `at` on.
class Rows final : public DeferredEntries {
public:
    Rows(size_t n, size_t at, std::vector<Entry> extra)
        : m_extra(std::move(extra))
        , m_at(at)
    {
        for (size_t i = 0; i < n; ++i)
            m_entries.push_back(i >= at && i - at < m_extra.size() ? m_extra[i - at]
                                                                   : tensor("layers." + std::to_string(i) + ".weight",
                                                                       DType::Float32, { 4, 4 }));
    }
    size_t size() const override { return m_entries.size(); }
    EntryRow row(size_t i) const override
    {
        const Entry& e = m_entries[i];
        return { e.name, e.dtype, std::span<const int64_t>(e.shape.data(), e.shape.size()), {} };
    }
    void build(std::vector<Entry>& out) const override { out.insert(out.end(), m_entries.begin(), m_entries.end()); }
    void forEachBuilt(size_t from, size_t to, const std::function<void(const Entry&)>& visit) const override
    {
        for (size_t i = from; i < to; ++i)
            visit(m_entries[i]);
    }

private:
    std::vector<Entry> m_extra;
    size_t m_at;
    std::vector<Entry> m_entries;
};

} // namespace

// A listing's rows are scanned for the names and dtypes of every scheme before anything is built, in two
// halves when there are many: a pattern in either half, or anywhere in a short list, is found and grouped;
// rows with none are left unbuilt.
void TstQuantization::rowsScannedForPatterns()
{
    const std::vector<Entry> bnb8 = { tensor("fc.weight", DType::Int8, { 8, 16 }), tensor("fc.SCB", DType::Float32, { 8 }) };
    const std::vector<Entry> fp8 = { tensor("fc.weight", DType::Float8_e4m3fn, { 8, 16 }) };
    for (const size_t n : { size_t(40), size_t(20000) }) {
        for (const size_t at : { size_t(3), n / 2 - 1, n / 2 + 7, n - 2 }) {
            const QString where = QStringLiteral("%1 rows, at %2").arg(n).arg(at);
            Source s;
            s.format = SourceFormat::TorchZip;
            s.entries.defer(std::make_shared<Rows>(n, at, bnb8));
            quant::groupQuantizedEntries(s);
            QVERIFY2(!s.entries.deferred(), qPrintable(where));
            QCOMPARE(s.entries.size(), n - 1);
            const Entry& g = s.entries[at];
            QVERIFY2(g.name == "fc.weight" && g.kind == EntryKind::Group && g.parts.size() == 2, qPrintable(where));
            // A dtype alone (FP8, no scale beside it) is a pattern too: the grouper runs, and builds the entries.
            Source f;
            f.format = SourceFormat::TorchZip;
            f.entries.defer(std::make_shared<Rows>(n, at, fp8));
            quant::groupQuantizedEntries(f);
            QVERIFY2(!f.entries.deferred(), qPrintable(where));
        }
        Source plain;
        plain.format = SourceFormat::TorchZip;
        plain.entries.defer(std::make_shared<Rows>(n, n, std::vector<Entry>()));
        quant::groupQuantizedEntries(plain);
        QVERIFY(plain.entries.deferred());
        QCOMPARE(plain.entries.size(), n);
    }
}

void TstQuantization::floatLookalikesUnchanged()
{
    Source s;
    s.format = SourceFormat::Safetensors;
    s.entries.push_back(tensor("ln.weight", DType::Float32, { 8 }));
    s.entries.push_back(tensor("ln.scale", DType::Float32, { 8 }));
    s.entries.push_back(tensor("ln.zero_point", DType::Int64, {})); // no quantized module in the file
    s.entries.push_back(tensor("emb.weight", DType::UInt8, { 16, 1 })); // uint8 [n, 1], but no bnb layer
    s.entries.push_back(tensor("proj.weight", DType::Int8, { 4, 4 }));
    s.entries.push_back(tensor("proj.weight_scale", DType::Float32, { 4, 1 }));
    s.entries.push_back(tensor("dense.weight", DType::Float16, { 4, 4 }));
    s.entries.push_back(tensor("dense.weight_scale", DType::Float32, { 1 })); // beside a float weight
    s.entries.push_back(tensor("rope:cos", DType::Float32, { 4 })); // a colon, but no torchao inner name
    s.entries.push_back(tensor("head.qweight", DType::Float32, { 4, 4 })); // float "qweight": not GPTQ
    const std::vector<Entry> before = s.entries;
    quant::groupQuantizedEntries(s);
    QVERIFY(s.findings.empty());
    // int8 + weight_scale is compressed-tensors W8A8 and is grouped on purpose; everything else stays.
    QStringList names;
    for (const Entry& e : s.entries)
        names << q(e.name);
    QCOMPARE(names, QStringList({ "ln.weight", "ln.scale", "ln.zero_point", "emb.weight", "proj.weight", "dense.weight",
                        "dense.weight_scale", "rope:cos", "head.qweight" }));
    for (const Entry& e : s.entries) {
        if (e.name == "proj.weight") {
            QVERIFY(e.quantization && e.quantization->scheme == "int8.per_channel");
            continue;
        }
        QVERIFY2(e.kind == EntryKind::Tensor && !e.quantization && e.attributes.empty() && e.parts.empty(), e.name.c_str());
    }
}

void TstQuantization::largeQuantizedSource()
{
    // 20,000 bitsandbytes layers (100,000 keys) and 10,000 block-FP8 layers: grouped in linear time.
    Source s;
    s.format = SourceFormat::SafetensorsIndex;
    for (int i = 0; i < 20'000; ++i) {
        const std::string w = "l." + std::to_string(i) + ".weight";
        s.entries.push_back(tensor(w, DType::UInt8, { 512, 1 }));
        s.entries.push_back(tensor(w + ".absmax", DType::Float32, { 16 }));
        s.entries.push_back(tensor(w + ".quant_map", DType::Float32, { 16 }));
        s.entries.push_back(tensor(w + ".quant_state.bitsandbytes__nf4", DType::UInt8, { 120 }));
        s.entries.push_back(tensor("l." + std::to_string(i) + ".bias", DType::BFloat16, { 32 }));
    }
    for (int i = 0; i < 10'000; ++i) {
        const std::string w = "f." + std::to_string(i) + ".weight";
        s.entries.push_back(tensor(w, DType::Float8_e4m3fn, { 256, 256 }));
        s.entries.push_back(tensor(w + "_scale_inv", DType::Float32, { 2, 2 }));
    }
    QElapsedTimer timer;
    timer.start();
    const qint64 cpu0 = threadCpuMs();
    quant::groupQuantizedEntries(s);
    const qint64 ms = threadCpuMs() - cpu0;
    qInfo("grouping 120,000 entries into 30,000 groups: %lld ms CPU, %lld ms wall", ms, timer.elapsed());
    QCOMPARE(s.entries.size(), size_t(20'000 * 2 + 10'000));
    QCOMPARE(q(s.entries[0].name), QStringLiteral("l.0.weight"));
    QCOMPARE(s.entries[0].parts.size(), size_t(4));
    QVERIFY(!s.entries[0].shapeKnown); // no bytes to read the quant_state from
    QCOMPARE(q(s.entries.back().quantization->scheme), QStringLiteral("fp8.block"));
    QVERIFY(s.findings.empty());
    QVERIFY2(ms < 5000, qPrintable(QString::number(ms) + " ms CPU"));
    const std::string once = json(s);
    quant::groupQuantizedEntries(s);
    QVERIFY(json(s) == once);
}

void TstQuantization::fp8ScalesBesideOrApart()
{
    // Scales are looked for beside their weight first, then anywhere by name: both find them. A scale name
    // that repeats pairs the copy beside the weight, and the other copy stays a top-level tensor.
    Source s;
    s.format = SourceFormat::Safetensors;
    s.entries.push_back(tensor("a.weight", DType::Float8_e4m3fn, { 256, 256 }));
    s.entries.push_back(tensor("b.weight", DType::Float8_e4m3fn, { 256, 128 }));
    s.entries.push_back(tensor("a.weight_scale_inv", DType::Float32, { 2, 2 })); // apart from its weight
    s.entries.push_back(tensor("c.weight_scale_inv", DType::Float32, { 2, 1 })); // a repeat, before its weight
    s.entries.push_back(tensor("c.weight", DType::Float8_e4m3fn, { 256, 128 }));
    s.entries.push_back(tensor("c.weight_scale_inv", DType::Float32, { 2, 1 }));
    s.entries.push_back(tensor("b.weight_scale_inv", DType::Float32, { 2, 1 }));
    s.entries[5].location.offset = 555; // tells the two copies of c's scale apart
    quant::groupQuantizedEntries(s);
    QStringList names;
    for (const Entry& e : s.entries)
        names << q(e.name) + (e.kind == EntryKind::Group ? "(group)" : "");
    QCOMPARE(names, QStringList({ "a.weight(group)", "b.weight(group)", "c.weight_scale_inv", "c.weight(group)" }));
    for (int i : { 0, 1, 3 }) {
        const Entry& g = s.entries[size_t(i)];
        QCOMPARE(q(g.quantization->scheme), QStringLiteral("fp8.block"));
        QCOMPARE(g.parts.size(), size_t(2));
        QCOMPARE(attribute(g.parts[1], quant::kPartKeyAttribute), q(g.name) + "_scale_inv");
        QCOMPARE(g.parts[1].shape, (i == 0 ? Shape { 2, 2 } : Shape { 2, 1 }));
    }
    QCOMPARE(s.entries[3].parts[1].location.offset, uint64_t(555));
    QCOMPARE(s.entries[2].location.offset, uint64_t(0));
}

void TstQuantization::oneNameTwoSchemes()
{
    // torchao's flattened layout makes a group "p.weight" of p.weight:qdata and p.weight:scale, and GPTQ's
    // p.qweight, p.qzeros and p.scales would make a group of that name too: the scheme grouped first
    // (torchao's) keeps the name, and the GPTQ keys stay top-level tensors, untouched. FP8 weights are named
    // after their own key and are checked for clashes another way when the names are sorted (so unique):
    // both orders are tried.
    for (const bool sorted : { true, false }) {
        Source s;
        s.format = SourceFormat::Safetensors;
        s.entries.push_back(tensor("p.qweight", DType::Int32, { 32, 256 }));
        s.entries.push_back(tensor("p.qzeros", DType::Int32, { 2, 32 }));
        s.entries.push_back(tensor("p.scales", DType::Float16, { 2, 256 }));
        s.entries.push_back(tensor("p.weight:qdata", DType::Float8_e4m3fn, { 256, 256 }));
        s.entries.push_back(tensor("p.weight:scale", DType::Float32, { 256, 1 }));
        s.entries.push_back(tensor("q.weight", DType::Float8_e4m3fn, { 256, 256 }));
        s.entries.push_back(tensor("q.weight_scale_inv", DType::Float32, { 2, 2 }));
        if (!sorted)
            std::reverse(s.entries.begin(), s.entries.end());
        quant::groupQuantizedEntries(s);
        QStringList shown;
        for (const Entry& e : s.entries)
            shown << q(e.name) + (e.quantization ? " " + q(e.quantization->scheme) : QString());
        shown.sort();
        QCOMPARE(shown, QStringList({ "p.qweight", "p.qzeros", "p.scales", "p.weight torchao", "q.weight fp8.block" }));
        for (const Entry& e : s.entries)
            if (!e.quantization)
                QVERIFY2(e.kind == EntryKind::Tensor && e.parts.empty() && e.attributes.empty(), e.name.c_str());
    }
}

void TstQuantization::quantStateReadIsBounded()
{
    // A quant_state tensor claiming more bytes than the cap is not read, whatever its location says.
    Source s;
    s.format = SourceFormat::Safetensors;
    s.files.push_back((quantDir() + "/bnb_nf4.safetensors").toStdString());
    s.entries.push_back(tensor("w", DType::UInt8, { 8, 1 }));
    s.entries.push_back(tensor("w.absmax", DType::Float32, { 1 }));
    s.entries.push_back(tensor("w.quant_map", DType::Float32, { 16 }));
    Entry st = tensor("w.quant_state.bitsandbytes__nf4", DType::UInt8, { int64_t(quant::kMaxQuantStateBytes + 1) });
    st.location.kind = TensorLocation::Kind::Mapped;
    st.location.file = 0;
    st.location.offset = 0;
    st.location.length = quant::kMaxQuantStateBytes + 1;
    s.entries.push_back(st);
    quant::groupQuantizedEntries(s);
    QCOMPARE(s.entries.size(), size_t(1));
    QVERIFY(!s.entries[0].shapeKnown);
    QVERIFY(param(s.entries[0], "quant_state").contains("not read"));
    // Past the end of the file: refused too.
    Source t = s;
    t.entries.clear();
    t.entries.push_back(tensor("w", DType::UInt8, { 8, 1 }));
    st.location.length = 100;
    st.location.offset = uint64_t(1) << 40;
    t.entries.push_back(st);
    quant::groupQuantizedEntries(t);
    QVERIFY(param(t.entries[0], "quant_state").contains("past the end"));
}

void TstQuantization::realTorchaoAwq()
{
    // awq_model.pth (torchao, 2025-03): WeightTensorWithLinearActivationScaleMetadata wrapping an
    // AffineQuantizedTensor with TensorCoreTiledAQTTensorImpl (packed_weight int32 [32, 8, 32, 4],
    // scale_and_zero bf16 [8, 256, 2], inner_k_tiles 8) and the AWQ activation scale bf16 [1, 512].
    SKIP_WITHOUT_REAL("pytorch__ao/awq_model.pth");
    const Source s = openSource(path.toStdString());
    QCOMPARE(s.entries.size(), size_t(3));
    const char* names[] = { "linear1.weight", "linear2.weight", "linear3.weight" };
    const Shape shapes[] = { { 256, 512 }, { 128, 256 }, { 1, 128 } };
    for (int i = 0; i < 3; ++i) {
        const Entry& e = s.entries[size_t(i)];
        QCOMPARE(q(e.name), QLatin1String(names[i]));
        QCOMPARE(e.kind, EntryKind::Group);
        QVERIFY(e.quantization);
        QCOMPARE(q(e.quantization->scheme), QStringLiteral("torchao.AffineQuantizedTensor"));
        QCOMPARE(e.quantization->storageDType, DType::Int32);
        QCOMPARE(e.dtype, DType::BFloat16);
        QVERIFY(e.shape == shapes[i]);
        QCOMPARE(param(e, "tensor_impl"), QStringLiteral("TensorCoreTiledAQTTensorImpl"));
        QCOMPARE(param(e, "layout"), QStringLiteral("TensorCoreTiledLayout(inner_k_tiles=8)"));
        QCOMPARE(param(e, "wrapper"), QStringLiteral("WeightTensorWithLinearActivationScaleMetadata"));
        QCOMPARE(param(e, "zero_point_domain"), QStringLiteral("ZeroPointDomain.FLOAT"));
        QCOMPARE(param(e, "quant_min"), QStringLiteral("0"));
        QCOMPARE(param(e, "quant_max"), QStringLiteral("15"));
        QStringList roles;
        for (const Entry& p : e.parts)
            roles << q(p.name);
        QCOMPARE(roles, QStringList({ "packed_weight", "scale_and_zero", "scale" }));
    }
    const Entry& l1 = s.entries[0];
    QVERIFY((l1.parts[0].shape == Shape { 32, 8, 32, 4 }) && l1.parts[0].dtype == DType::Int32);
    QVERIFY((l1.parts[1].shape == Shape { 8, 256, 2 }) && l1.parts[1].dtype == DType::BFloat16);
    QVERIFY((l1.parts[2].shape == Shape { 1, 512 }) && l1.parts[2].dtype == DType::BFloat16);
    QCOMPARE(param(l1, "block_size"), QStringLiteral("(1, 128)"));
    for (const Entry& p : l1.parts)
        QCOMPARE(p.location.kind, TensorLocation::Kind::Mapped);
    for (const Finding& f : s.findings)
        QVERIFY2(f.entry.empty() || f.severity == Severity::Info, f.message.c_str());
}

void TstQuantization::realTorchaoPrototypeInt4()
{
    // model.pt (torchao, 2024-03): Int4WeightOnlyQuantizedLinearWeight pickled from __main__, state
    // scales_and_zeros bf16 [8, 16, 2], groupsize 128, inner_k_tiles 8, int_data int32 [2, 8, 32, 4].
    SKIP_WITHOUT_REAL("pytorch__ao/model.pt");
    const Source s = openSource(path.toStdString());
    QCOMPARE(s.entries.size(), size_t(2));
    const Entry& e = s.entries[0];
    QCOMPARE(q(e.name), QStringLiteral("lin_mod.weight"));
    QCOMPARE(e.kind, EntryKind::Group);
    QVERIFY(e.quantization);
    QCOMPARE(q(e.quantization->scheme), QStringLiteral("torchao.Int4WeightOnlyQuantizedLinearWeight"));
    QCOMPARE(e.quantization->storageDType, DType::Int32);
    QCOMPARE(e.dtype, DType::Float32);
    QVERIFY((e.shape == Shape { 10, 10 }));
    QCOMPARE(param(e, "groupsize"), QStringLiteral("128"));
    QCOMPARE(param(e, "inner_k_tiles"), QStringLiteral("8"));
    QVERIFY(param(e, "class_module").startsWith("__main__"));
    QCOMPARE(e.parts.size(), size_t(2));
    QVERIFY(findEntry(e.parts, "int_data") && (findEntry(e.parts, "int_data")->shape == Shape { 2, 8, 32, 4 }));
    QVERIFY(findEntry(e.parts, "scales_and_zeros") && (findEntry(e.parts, "scales_and_zeros")->shape == Shape { 8, 16, 2 }));
    QCOMPARE(s.entries[1].kind, EntryKind::Tensor);
}

void TstQuantization::realTorchaoSafetensors()
{
    // fp8_weights.safetensors (torchao PR branch, 2025-08): header tensors 0.weight:scale F32 [256, 1],
    // 0.bias:data BF16 [256], 0.weight:qdata F8_E4M3 [256, 32]; __metadata__ tensor_names
    // ["0.weight", "0.bias"], 0.weight:tensor_type Float8Tensor, 0.weight:block_size "[1, 32]".
    SKIP_WITHOUT_REAL("pytorch__ao/fp8_weights.safetensors");
    Source s = openSource(path.toStdString());
    QStringList names;
    for (const Entry& e : s.entries)
        names << q(e.name);
    QCOMPARE(names, QStringList({ "0.bias", "0.weight" })); // each at its data's position
    const Entry* w = findEntry(s.entries, "0.weight");
    QVERIFY(w && w->quantization);
    QCOMPARE(q(w->quantization->scheme), QStringLiteral("torchao.Float8Tensor"));
    QCOMPARE(w->quantization->storageDType, DType::Float8_e4m3fn);
    QCOMPARE(q(w->typeName), QStringLiteral("torchao.quantization.Float8Tensor"));
    QVERIFY((w->shape == Shape { 256, 32 }));
    QCOMPARE(param(*w, "block_size"), QStringLiteral("[1, 32]"));
    QCOMPARE(w->parts.size(), size_t(2));
    QCOMPARE(q(w->parts[0].name), QStringLiteral("qdata"));
    QCOMPARE(attribute(w->parts[0], quant::kPartKeyAttribute), QStringLiteral("0.weight:qdata"));
    QCOMPARE(q(w->parts[1].name), QStringLiteral("scale"));
    const Entry* b = findEntry(s.entries, "0.bias");
    QVERIFY(b && b->kind == EntryKind::Group && !b->quantization);
    QCOMPARE(b->dtype, DType::BFloat16);
    QCOMPARE(attribute(b->parts.at(0), quant::kPartKeyAttribute), QStringLiteral("0.bias:data"));

    // fp8_weights_multi.safetensors: LinearActivationQuantizedTensor over a float32 weight
    // (layerN.weight:original_weight), input_quant_func FbgemmFp8Tensor.from_float.
    const QString multi = realPath("pytorch__ao/fp8_weights_multi.safetensors");
    s = openSource(multi.toStdString());
    QCOMPARE(s.entries.size(), size_t(3));
    const Shape shapes[] = { { 32, 64 }, { 64, 128 }, { 128, 256 } };
    for (int i = 0; i < 3; ++i) {
        const Entry& e = s.entries[size_t(i)];
        QCOMPARE(q(e.name), QStringLiteral("layer%1.weight").arg(i + 1));
        QVERIFY(e.quantization);
        QCOMPARE(q(e.quantization->scheme), QStringLiteral("torchao.LinearActivationQuantizedTensor"));
        QCOMPARE(e.dtype, DType::Float32);
        QVERIFY(e.shape == shapes[i]);
        QCOMPARE(param(e, "input_quant_func"), QStringLiteral("torchao.dtypes.fbgemm_fp8_tensor.FbgemmFp8Tensor.from_float"));
    }
    QCOMPARE(param(s.entries[1], "quant_kwargs"), QStringLiteral("{\"activation_scale_ub\": 0.5}"));
}

void TstQuantization::realBnbIndex()
{
    // The Molmo-7B NF4 index (no shards): bitsandbytes key naming only. Truth from the weight_map itself.
    SKIP_WITHOUT_REAL("reubzdubz__Molmo7B_D_NF4Quant/index_only_bnb_nf4/model.safetensors.index.json");
    QFile f(path);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonObject weightMap = QJsonDocument::fromJson(f.readAll()).object().value("weight_map").toObject();
    QSet<QString> keys;
    for (auto it = weightMap.begin(); it != weightMap.end(); ++it)
        keys.insert(it.key());
    QSet<QString> bases;
    const QString suffix = QStringLiteral(".quant_state.bitsandbytes__nf4");
    for (const QString& k : keys)
        if (k.endsWith(suffix))
            bases.insert(k.chopped(suffix.size()));
    QVERIFY(bases.size() > 10);
    qsizetype absorbed = 0;
    for (const QString& b : bases)
        for (const char* s : { ".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map" })
            absorbed += keys.contains(b + s);
    absorbed += bases.size(); // the quant_state keys

    const Source s = openSource(path.toStdString());
    QCOMPARE(qsizetype(s.entries.size()), keys.size() - absorbed);
    qsizetype groups = 0;
    for (const Entry& e : s.entries) {
        if (e.kind != EntryKind::Group)
            continue;
        ++groups;
        QVERIFY(bases.contains(q(e.name)));
        QVERIFY(e.quantization);
        QCOMPARE(q(e.quantization->scheme), QStringLiteral("bitsandbytes.nf4"));
        QVERIFY(!e.shapeKnown && !e.quantization->logicalShapeKnown); // the shards are not there
        QVERIFY(param(e, "quant_state").contains("not available"));
        QCOMPARE(q(e.parts.front().name), QStringLiteral("weight"));
        QCOMPARE(attribute(e.parts.front(), quant::kPartKeyAttribute), q(e.name));
    }
    QCOMPARE(groups, bases.size());
    for (const Finding& fd : s.findings)
        QVERIFY2(fd.entry.empty() || fd.message.find("bitsandbytes") == std::string::npos, fd.message.c_str());
}

void TstQuantization::realTorchAoEager()
{
    // 5usu/quantization: dynamic quantized Linear layers, (qint8 weight, bias) packed params, per-tensor.
    {
        SKIP_WITHOUT_REAL("5usu__quantization/quantized_model.pth");
        const Source s = openSource(path.toStdString());
        const Entry* g = findEntry(s.entries, "fc1._packed_params._packed_params");
        QVERIFY(g && g->kind == EntryKind::Group && g->quantization);
        QCOMPARE(q(g->quantization->scheme), QStringLiteral("torch.ao.per_tensor_affine"));
        QCOMPARE(g->quantization->storageDType, DType::QInt8);
        QCOMPARE(g->dtype, DType::QInt8);
        QVERIFY((g->shape == Shape { 128, 784 }));
        QVERIFY(param(*g, "scale") != QLatin1String("<absent>"));
        const Entry* scale = findEntry(s.entries, "fc1.scale");
        QVERIFY(scale && scale->kind == EntryKind::Tensor && !scale->quantization);
        QCOMPARE(attribute(*scale, "quant_role"), QStringLiteral("activation scale (torch.ao)"));
        QCOMPARE(s.entries.size(), size_t(8)); // nothing absorbed: torch.ao keys stay as torch names them
    }
    // suPisanu: static quantized CNN, per-channel conv weights and a QuantStub.
    const QString p = realPath("suPisanu__fp32toint8QuantizationCNN/model__model_quantized_state_dict.pth");
    const Source s = openSource(p.toStdString());
    const Entry* conv = findEntry(s.entries, "conv1.weight");
    QVERIFY(conv && conv->kind == EntryKind::Tensor && conv->quantization);
    QCOMPARE(q(conv->quantization->scheme), QStringLiteral("torch.ao.per_channel_affine"));
    QCOMPARE(param(*conv, "axis"), QStringLiteral("0"));
    QCOMPARE(attribute(*findEntry(s.entries, "quant.scale"), "quant_role"), QStringLiteral("activation scale (torch.ao)"));
    QCOMPARE(attribute(*findEntry(s.entries, "quant.zero_point"), "quant_role"),
        QStringLiteral("activation zero_point (torch.ao)"));
    QVERIFY(!findEntry(s.entries, "conv1.bias")->quantization);
    for (const Finding& f : s.findings)
        QVERIFY2(f.severity == Severity::Info || f.entry.empty(), f.message.c_str());
}

QTEST_GUILESS_MAIN(TstQuantization)
#include "tst_quantization.moc"
