// `statelens convert` against torch: sources written by Debian's torch 1.13 at test time
// (tests/tools/convert_truth.py make) and the repository's torch 1.13 fixtures are converted, and
// convert_truth.py check reads the output by hand (no safetensors module in torch 1.13) and compares it with
// torch.load of the source (or torch's own assembly of a DCP checkpoint's chunks), names from Python's own
// string handling, values byte for byte, --dtype against torch's .to(), shards against huggingface_hub's cut,
// and a strict load_state_dict into the model the rules were made for. The torch 2.6 pair in
// tests/fixtures/convert is the safetensors library's own save_model output, which the conversion must equal.
// Refusals (a rule collision, an output onto an input, a non-empty folder, a dtype safetensors lacks, a
// cancel) must leave nothing behind.

#include "common/test_files.h"
#include "common/test_paths.h"
#include "convert/convert_plan.h"
#include "convert/safetensors_writer.h"
#include "formats/loader.h"
#include "util/error.h"
#include "util/load_control.h"

#include <QCryptographicHash>
#include <cstring>

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QTest>

using namespace sl;

namespace {

QString tool()
{
    return test::sourceDir() + QStringLiteral("/tests/tools/convert_truth.py");
}

// convert_truth.py check ARGS: its JSON summary; fails the test with its message otherwise.
QJsonObject check(const QStringList& args)
{
    const auto r = test::run(test::torchPython(), QStringList { tool(), QStringLiteral("check") } + args);
    if (r.exitCode != 0) {
        QTest::qFail(("convert_truth.py check: " + r.err.trimmed()).constData(), __FILE__, __LINE__);
        return {};
    }
    return QJsonDocument::fromJson(r.out).object();
}

test::RunResult runConvert(const QStringList& args)
{
    return test::runStatelens(QStringList { QStringLiteral("convert") } + args);
}

QByteArray sha256(const QString& path)
{
    return QCryptographicHash::hash(test::readAll(path), QCryptographicHash::Sha256).toHex();
}

QStringList entries(const QString& folder)
{
    return QDir(folder).entryList(QDir::AllEntries | QDir::Hidden | QDir::NoDotAndDotDot, QDir::Name);
}

void writeText(const QString& path, const QByteArray& text)
{
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(text);
}

// tests/tools/llama_models.py's TITAN_TO_HF: the renames a user would write (rule files take Python's \\1).
const std::pair<const char*, const char*> kTitanToHf[] = {
    { "^tok_embeddings\\.", "model.embed_tokens." },
    { "^layers\\.(\\d+)\\.attention\\.wq\\.", "model.layers.\\1.self_attn.q_proj." },
    { "^layers\\.(\\d+)\\.attention\\.wk\\.", "model.layers.\\1.self_attn.k_proj." },
    { "^layers\\.(\\d+)\\.attention\\.wv\\.", "model.layers.\\1.self_attn.v_proj." },
    { "^layers\\.(\\d+)\\.attention\\.wo\\.", "model.layers.\\1.self_attn.o_proj." },
    { "^layers\\.(\\d+)\\.feed_forward\\.w1\\.", "model.layers.\\1.mlp.gate_proj." },
    { "^layers\\.(\\d+)\\.feed_forward\\.w2\\.", "model.layers.\\1.mlp.down_proj." },
    { "^layers\\.(\\d+)\\.feed_forward\\.w3\\.", "model.layers.\\1.mlp.up_proj." },
    { "^layers\\.(\\d+)\\.attention_norm\\.", "model.layers.\\1.input_layernorm." },
    { "^layers\\.(\\d+)\\.ffn_norm\\.", "model.layers.\\1.post_attention_layernorm." },
    { "^norm\\.", "model.norm." },
    { "^output\\.", "lm_head." },
    { "^mask$", "model.mask" },
    { "^freqs_cis$", "model.freqs_cis" },
};

// kTitanToHf as a rule file, and as convert_truth.py check's --sub arguments (Python's re.sub of the same).
void writeTitanToHfRules(const QString& path)
{
    QByteArray yaml = "rules:\n";
    for (const auto& [p, r] : kTitanToHf)
        yaml += "  - pattern: '" + QByteArray(p) + "'\n    replace: '" + QByteArray(r) + "'\n";
    writeText(path, yaml);
}

QStringList titanToHfSubArgs()
{
    QStringList args;
    for (const auto& [p, rep] : kTitanToHf)
        args << QStringLiteral("--sub") << QString::fromLatin1(p) << QString::fromLatin1(rep);
    return args;
}

// A safetensors file read by hand (u64 header length, the JSON header, the bytes), not by our reader.
struct HandReadSafetensors {
    QByteArray file;
    QJsonObject header;
    qsizetype dataStart = 0;
    // A tensor's bytes, from its data_offsets.
    QByteArray bytes(const QJsonObject& tensor) const
    {
        const QJsonArray range = tensor.value(QStringLiteral("data_offsets")).toArray();
        return file.mid(dataStart + qsizetype(range[0].toInteger()), qsizetype(range[1].toInteger() - range[0].toInteger()));
    }
};

HandReadSafetensors readByHand(const QString& path)
{
    HandReadSafetensors st;
    st.file = test::readAll(path);
    quint64 headerLength = 0;
    if (st.file.size() >= 8)
        std::memcpy(&headerLength, st.file.constData(), 8);
    if (st.file.size() < 8 || headerLength > quint64(st.file.size()) - 8) {
        QTest::qFail(qPrintable(path + QStringLiteral(": no safetensors header")), __FILE__, __LINE__);
        return st;
    }
    st.header = QJsonDocument::fromJson(st.file.mid(8, qsizetype(headerLength))).object();
    st.dataStart = qsizetype(8 + headerLength);
    return st;
}

const QByteArray kStripCompile = "rules:\n  - pattern: \"^_orig_mod\\\\.\"\n    replace: \"\"\n    note: torch.compile's wrapper\n";

} // namespace

class TestConvert : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    QString m_src; // convert_truth.py make's sources

    QString src(const char* name) const { return m_src + QLatin1Char('/') + QLatin1String(name); }
    QString out(const char* name) const { return m_dir.filePath(QLatin1String(name)); }

private slots:
    void initTestCase()
    {
        if (!test::haveTorchPython())
            QSKIP("no /usr/bin/python3 with torch");
        QVERIFY(m_dir.isValid());
        m_src = m_dir.filePath(QStringLiteral("src"));
        const auto r = test::run(test::torchPython(), { tool(), QStringLiteral("make"), m_src });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        writeText(m_dir.filePath(QStringLiteral("strip.yaml")), kStripCompile);
    }

    // The seed workflow: a torch.compile'd training checkpoint, a rule stripping `_orig_mod.`, and the plain
    // model loads the output strictly.
    void compiledCheckpointIntoPlainModel()
    {
        const auto r = runConvert({ src("compiled.pt"), QStringLiteral("--rules"), m_dir.filePath(QStringLiteral("strip.yaml")),
            QStringLiteral("-o"), out("compiled.safetensors") });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.out.contains("wrote 20 tensors"), r.out.constData());
        QVERIFY(r.err.contains("converting: 100%"));
        const QJsonObject c = check({ QStringLiteral("--out"), out("compiled.safetensors"), QStringLiteral("--source"),
            src("compiled.pt"), QStringLiteral("--container"), QStringLiteral("model"), QStringLiteral("--strip"),
            QStringLiteral("_orig_mod."), QStringLiteral("--model"), QStringLiteral("net") });
        QCOMPARE(c.value(QStringLiteral("checked")).toInt(), 20);
        QCOMPARE(c.value(QStringLiteral("strict_load")).toBool(), true);
    }

    // Without the rule the names keep the prefix, and the same model refuses them: the check can fail.
    void withoutTheRuleTheStrictLoadFails()
    {
        const auto r = runConvert({ src("compiled.pt"), QStringLiteral("-o"), out("unfixed.safetensors") });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto c = test::run(test::torchPython(),
            { tool(), QStringLiteral("check"), QStringLiteral("--out"), out("unfixed.safetensors"), QStringLiteral("--source"),
                src("compiled.pt"), QStringLiteral("--container"), QStringLiteral("model"), QStringLiteral("--model"),
                QStringLiteral("net") });
        QVERIFY(c.exitCode != 0);
        QVERIFY2(c.err.contains("Missing key") || c.err.contains("Unexpected key"), c.err.constData());
    }

    void tiedWeightsWrittenOnce()
    {
        const auto r = runConvert({ src("tied.pt"), QStringLiteral("-o"), out("tied") });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QCOMPARE(entries(out("tied")), QStringList { QStringLiteral("model.safetensors") });
        const QJsonObject c = check({ QStringLiteral("--out"), out("tied"), QStringLiteral("--source"), src("tied.pt"),
            QStringLiteral("--model"), QStringLiteral("tied") });
        QCOMPARE(c.value(QStringLiteral("tied")).toInt(), 1);
        QCOMPARE(c.value(QStringLiteral("strict_load")).toBool(), true);
        // The plan says the same: one tensor for the two names, the other recorded.
        const Source s = openSource(src("tied.pt").toStdString());
        const convert::ConvertPlan plan = convert::planConversion(s, {});
        QCOMPARE(plan.tensors.size(), s.entries.size() - 1);
        const auto& md = plan.metadata;
        QVERIFY(std::find(md.begin(), md.end(), std::pair<std::string, std::string> { "head.weight", "embed.weight" }) != md.end());
    }

    void nonTensorsListed()
    {
        const auto r = runConvert({ src("extras.pt"), QStringLiteral("-o"), out("extras.safetensors") });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        for (const char* name : { "'_extra_state'", "'train_state'", "'step'" })
            QVERIFY2(r.out.contains(name), r.out.constData());
        QVERIFY(r.out.contains("3 entries are not a tensor"));
        const QJsonObject c = check({ QStringLiteral("--out"), out("extras.safetensors"), QStringLiteral("--source"), src("extras.pt") });
        QCOMPARE(c.value(QStringLiteral("checked")).toInt(), 2);
        QCOMPARE(c.value(QStringLiteral("objects")).toArray().size(), 3);
    }

    void viewsAndDtypes_data()
    {
        QTest::addColumn<QString>("dtype");
        for (const char* d : { "keep", "bf16", "fp16", "fp32" })
            QTest::newRow(d) << QString::fromLatin1(d);
    }
    // Slices, a transpose, an expanded tensor, NaN/Inf/denormals, empty and 0-d tensors; cast as torch casts.
    void viewsAndDtypes()
    {
        QFETCH(QString, dtype);
        const QString o = out("views_") + dtype + QStringLiteral(".safetensors");
        const auto r = runConvert({ src("views.pt"), QStringLiteral("--dtype"), dtype, QStringLiteral("-o"), o });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const QJsonObject c = check({ QStringLiteral("--out"), o, QStringLiteral("--source"), src("views.pt"),
            QStringLiteral("--dtype"), dtype });
        QCOMPARE(c.value(QStringLiteral("checked")).toInt(), 11);
    }

    void repositoryFixtures_data()
    {
        QTest::addColumn<QString>("path");
        QTest::addColumn<QString>("kind");
        const QString f = test::fixturesDir();
        // zip, legacy and deflated torch.save files, every whole-byte dtype, views with offsets and strides,
        // tied storages, DCP folders assembled from their chunks.
        for (const char* name : { "dtypes.pt", "dtypes.legacy.pt", "deflated.pt", "edge.pt", "views.pt", "large.pt" })
            QTest::newRow(name) << f + QStringLiteral("/values/") + QLatin1String(name) << QStringLiteral("pt");
        QTest::newRow("dtypes.safetensors") << f + QStringLiteral("/values/dtypes.safetensors") << QStringLiteral("safetensors");
        for (const char* name : { "t113_two_ranks", "t113_flat", "t113_per_item" })
            QTest::newRow(name) << f + QStringLiteral("/dcp/") + QLatin1String(name) << QStringLiteral("dcp");
    }
    void repositoryFixtures()
    {
        QFETCH(QString, path);
        QFETCH(QString, kind);
        const QString o = out("fixture_") + QFileInfo(path).fileName() + QStringLiteral(".safetensors");
        const auto r = runConvert({ path, QStringLiteral("-o"), o });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const QJsonObject c = check({ QStringLiteral("--out"), o, QStringLiteral("--source"), path, QStringLiteral("--kind"), kind });
        QVERIFY(c.value(QStringLiteral("checked")).toInt() > 0);
        QVERIFY(QFile::remove(o));
    }

    // A .bin index in, safetensors shards out: the cut as huggingface_hub's, the index as transformers
    // writes it, and the model loads strictly from the shards.
    void binIndexIntoShards()
    {
        const auto r = runConvert({ src("bin_index"), QStringLiteral("--shard-size"), QStringLiteral("300B"),
            QStringLiteral("-o"), out("shards") });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.out.contains("in 4 files"), r.out.constData());
        const QJsonObject c = check({ QStringLiteral("--out"), out("shards"), QStringLiteral("--source"), src("bin_index"),
            QStringLiteral("--kind"), QStringLiteral("bin-index"), QStringLiteral("--shard-size"), QStringLiteral("300"),
            QStringLiteral("--model"), QStringLiteral("net") });
        QCOMPARE(c.value(QStringLiteral("files")).toInt(), 4);
        QCOMPARE(c.value(QStringLiteral("strict_load")).toBool(), true);
        // StateLens reads its own output back as an index.
        const Source back = openSource(out("shards").toStdString());
        QCOMPARE(back.entries.size(), size_t(20));
        QCOMPARE(back.countFindings(Severity::Danger), size_t(0));
    }

    // A torch 2.6 FSDP2 save, one file per rank (plain and torch.compile'd), assembled from the ranks'
    // pieces: the values torch's full_tensor() gave when the fixture was made (tests/fixtures/torch2).
    void perRankFsdp2Set()
    {
        const QString dir = test::fixturesDir() + QStringLiteral("/torch2/fsdp2/");
        for (const bool compiled : { false, true }) {
            const QString set = compiled ? QStringLiteral("compiled_model") : QStringLiteral("model");
            const QString o = out("fsdp2_") + set + QStringLiteral(".safetensors");
            QStringList args { dir + set + QStringLiteral("_rank*.pt"), QStringLiteral("-o"), o };
            if (compiled)
                args << QStringLiteral("--rules") << m_dir.filePath(QStringLiteral("strip.yaml"));
            const auto r = runConvert(args);
            QVERIFY2(r.exitCode == 0, r.err.constData());
            QStringList c { QStringLiteral("--out"), o, QStringLiteral("--source"), dir + set + QStringLiteral(".per-rank.truth.json"),
                QStringLiteral("--kind"), QStringLiteral("per-rank-truth") };
            if (compiled)
                c << QStringLiteral("--strip") << QStringLiteral("_orig_mod.");
            QCOMPARE(check(c).value(QStringLiteral("checked")).toInt(), 23);
        }
    }

    void onlyAndDropRules()
    {
        writeText(m_dir.filePath(QStringLiteral("drop.yaml")),
            kStripCompile + "  - pattern: \"\\\\.num_batches_tracked$\"\n    drop: true\n");
        const auto r = runConvert({ src("compiled.pt"), QStringLiteral("--rules"), m_dir.filePath(QStringLiteral("drop.yaml")),
            QStringLiteral("--only"), QStringLiteral("layers\\.1\\."), QStringLiteral("--shard-size"), QStringLiteral("0.2KB"),
            QStringLiteral("-o"), out("only") });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.out.contains("dropped by the rules: '_orig_mod.layers.1.bn.num_batches_tracked'"), r.out.constData());
        check({ QStringLiteral("--out"), out("only"), QStringLiteral("--source"), src("compiled.pt"), QStringLiteral("--container"),
            QStringLiteral("model"), QStringLiteral("--strip"), QStringLiteral("_orig_mod."), QStringLiteral("--only"),
            QStringLiteral("layers\\.1\\."), QStringLiteral("--drop"), QStringLiteral("\\.num_batches_tracked$"),
            QStringLiteral("--shard-size"), QStringLiteral("200") });
    }

    // The safetensors library's own file for the same model: the conversion of the compiled torch 2.6
    // checkpoint must hold the same header (tensor order, offsets, dtypes, the tied name in __metadata__;
    // the library's metadata order is a hash map's, so headers compare as JSON) and the same bytes.
    void equalsSafetensorsSaveModel()
    {
        const QString dir = test::fixturesDir() + QStringLiteral("/convert");
        const auto r = runConvert({ dir + QStringLiteral("/t2_compiled_tied.pt"), QStringLiteral("--rules"),
            m_dir.filePath(QStringLiteral("strip.yaml")), QStringLiteral("-o"), out("t2.safetensors") });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const QByteArray got = test::readAll(out("t2.safetensors"));
        const QByteArray want = test::readAll(dir + QStringLiteral("/t2_compiled_tied.expected.safetensors"));
        QVERIFY(want.size() > 8);
        QCOMPARE(got.size(), want.size());
        quint64 n = 0;
        std::memcpy(&n, want.constData(), 8);
        QCOMPARE(got.left(8), want.left(8));
        QCOMPARE(QJsonDocument::fromJson(got.mid(8, qsizetype(n))).object(), QJsonDocument::fromJson(want.mid(8, qsizetype(n))).object());
        QVERIFY(QJsonDocument::fromJson(want.mid(8, qsizetype(n))).object().value(QStringLiteral("__metadata__")).toObject().contains(QStringLiteral("head.weight")));
        QVERIFY(got.mid(8 + qsizetype(n)) == want.mid(8 + qsizetype(n)));
    }

    void collisionWritesNothing()
    {
        writeText(m_dir.filePath(QStringLiteral("collide.yaml")), "rules:\n  - pattern: \"^[ab]\\\\.\"\n    replace: \"\"\n");
        const QString parent = m_dir.filePath(QStringLiteral("collision"));
        QVERIFY(QDir().mkpath(parent));
        for (const QString& o : { parent + QStringLiteral("/x.safetensors"), parent + QStringLiteral("/folder") }) {
            const auto r = runConvert({ src("collide.pt"), QStringLiteral("--rules"), m_dir.filePath(QStringLiteral("collide.yaml")),
                QStringLiteral("--shard-size"), QStringLiteral("1KB"), QStringLiteral("-o"), o });
            QCOMPARE(r.exitCode, 2);
            QCOMPARE(r.err.count('\n'), 1);
            QVERIFY2(r.err.contains("'a.weight' and 'b.weight'") && r.err.contains("'weight'") && r.err.contains("nothing was written"),
                r.err.constData());
            QCOMPARE(entries(parent), QStringList());
        }
    }

    void refusalsLeaveNothing()
    {
        const QString parent = m_dir.filePath(QStringLiteral("refusals"));
        QVERIFY(QDir().mkpath(parent + QStringLiteral("/full")));
        writeText(parent + QStringLiteral("/full/keep.txt"), "mine");
        const QString input = parent + QStringLiteral("/input.safetensors");
        QVERIFY(QFile::copy(test::fixturesDir() + QStringLiteral("/values/dtypes.safetensors"), input));
        const QByteArray inputSha = sha256(input);
        struct Case {
            QStringList args;
            const char* says;
        };
        const QList<Case> cases {
            { { src("views.pt"), QStringLiteral("-o"), parent + QStringLiteral("/full") }, "not empty" },
            { { input, QStringLiteral("-o"), input }, "input" },
            { { src("views.pt"), QStringLiteral("--shard-size"), QStringLiteral("1MB"), QStringLiteral("-o"), parent + QStringLiteral("/a.safetensors") }, "folder" },
            { { src("views.pt"), QStringLiteral("--shard-size"), QStringLiteral("lots"), QStringLiteral("-o"), parent + QStringLiteral("/b") }, "not a size" },
            { { src("views.pt"), QStringLiteral("--only"), QStringLiteral("nothing-matches"), QStringLiteral("-o"), parent + QStringLiteral("/c") }, "no tensor" },
            // qint8 has no safetensors dtype
            { { test::fixturesDir() + QStringLiteral("/values/quantized.pt"), QStringLiteral("-o"), parent + QStringLiteral("/d") }, "safetensors dtype" },
        };
        for (const Case& c : cases) {
            const auto r = runConvert(c.args);
            QVERIFY2(r.exitCode == 2, qPrintable(c.args.join(QLatin1Char(' ')) + QStringLiteral(": ") + QString::fromUtf8(r.err)));
            QCOMPARE(r.err.count('\n'), 1);
            QVERIFY2(r.err.contains(c.says), r.err.constData());
            QCOMPARE(entries(parent), (QStringList { QStringLiteral("full"), QStringLiteral("input.safetensors") }));
            QCOMPARE(entries(parent + QStringLiteral("/full")), QStringList { QStringLiteral("keep.txt") });
        }
        QCOMPARE(sha256(input), inputSha);
    }

    // Quantized groups are written part by part under their own keys (scales included), bytes unchanged.
    void quantizedGroupsKeptAsStored()
    {
        const QString path = test::fixturesDir() + QStringLiteral("/values/quantized_groups.safetensors");
        const Source s = openSource(path.toStdString());
        QVERIFY(std::any_of(s.entries.begin(), s.entries.end(), [](const Entry& e) { return e.kind == EntryKind::Group; }));
        const auto r = runConvert({ path, QStringLiteral("-o"), out("quant.safetensors") });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const QJsonObject c = check({ QStringLiteral("--out"), out("quant.safetensors"), QStringLiteral("--source"), path,
            QStringLiteral("--kind"), QStringLiteral("safetensors") });
        QVERIFY(c.value(QStringLiteral("checked")).toInt() > 0);
    }

    // --dtype on quantized groups: each group written under its own name as its logical values. Truth: the
    // libraries' dequantization recipes run with torch by make_values_fixtures.py (sha256 of every value as
    // float64); bf16 and fp16 are then torch 1.13's .to() of those float32 values.
    void quantizedGroupsDequantized()
    {
        const QString path = test::fixturesDir() + QStringLiteral("/values/quantized_groups.safetensors");
        const QJsonObject truth = test::readJson(path + QStringLiteral(".expected.json")).value(QStringLiteral("tensors")).toObject();
        const QString f32 = out("dequantized_f32.safetensors");
        auto r = runConvert({ path, QStringLiteral("--dtype"), QStringLiteral("fp32"), QStringLiteral("-o"), f32 });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.out.contains("written dequantized"), r.out.constData());
        const HandReadSafetensors st = readByHand(f32);
        QVERIFY(!st.header.isEmpty());
        int checked = 0;
        for (auto it = truth.begin(); it != truth.end(); ++it) {
            const QJsonObject want = it.value().toObject();
            if (!want.contains(QStringLiteral("sha256_values_f64")))
                continue;
            const QJsonObject got = st.header.value(it.key()).toObject();
            QVERIFY2(!got.isEmpty(), qPrintable(it.key() + QStringLiteral(" is not in the output")));
            QCOMPARE(got.value(QStringLiteral("dtype")).toString(), QStringLiteral("F32"));
            QCOMPARE(got.value(QStringLiteral("shape")).toArray(), want.value(QStringLiteral("shape")).toArray());
            const QByteArray bytes = st.bytes(got);
            const qsizetype count = bytes.size() / 4;
            QCOMPARE(qint64(count), want.value(QStringLiteral("numel")).toInteger());
            std::vector<double> widened(static_cast<size_t>(count));
            for (qsizetype k = 0; k < count; ++k) {
                float v;
                std::memcpy(&v, bytes.constData() + 4 * k, 4);
                widened[static_cast<size_t>(k)] = v;
            }
            const QByteArray sha = QCryptographicHash::hash(QByteArrayView(reinterpret_cast<const char*>(widened.data()),
                                                               qsizetype(widened.size() * sizeof(double))),
                QCryptographicHash::Sha256)
                                       .toHex();
            QVERIFY2(sha == want.value(QStringLiteral("sha256_values_f64")).toString().toLatin1(), qPrintable(it.key()));
            ++checked;
        }
        QVERIFY(checked >= 8);

        // bf16 and fp16: torch's own cast of the float32 output just checked.
        for (const char* dtype : { "bf16", "fp16" }) {
            const QString o = out("dequantized_") + QLatin1String(dtype) + QStringLiteral(".safetensors");
            r = runConvert({ path, QStringLiteral("--dtype"), QLatin1String(dtype), QStringLiteral("-o"), o });
            QVERIFY2(r.exitCode == 0, r.err.constData());
            const QString py = QStringLiteral(R"(
import json, struct, sys, torch
def tensors(path):
    data = open(path, 'rb').read()
    (n,) = struct.unpack('<Q', data[:8])
    header = json.loads(data[8:8 + n])
    names = {'F32': torch.float32, 'BF16': torch.bfloat16, 'F16': torch.float16}
    out = {}
    for k, v in header.items():
        if k == '__metadata__':
            continue
        b, e = v['data_offsets']
        t = torch.frombuffer(bytearray(data[8 + n + b:8 + n + e]), dtype=names[v['dtype']]) if e > b else torch.zeros(0)
        out[k] = t.reshape(v['shape'])
    return out
f32, low = tensors(sys.argv[1]), tensors(sys.argv[2])
target = {'bf16': torch.bfloat16, 'fp16': torch.float16}[sys.argv[3]]
assert sorted(f32) == sorted(low), 'keys differ'
for k in f32:
    want = f32[k].to(target) if f32[k].dtype == torch.float32 else f32[k]
    assert low[k].dtype == want.dtype and low[k].shape == want.shape, k
    assert torch.equal(low[k].view(torch.int16), want.view(torch.int16)), k
print(len(f32))
)");
            const auto c = test::run(test::torchPython(), { QStringLiteral("-c"), py, f32, o, QLatin1String(dtype) });
            QVERIFY2(c.exitCode == 0, c.err.constData());
            QVERIFY(c.out.trimmed().toInt() >= checked);
        }
    }

    // Quantized checkpoints kept quantized: torchao's AffineQuantizedTensor (float8 and int8 weight-only),
    // NF4Tensor and Float8Tensor in torch 2.6 torch.save files, DeepSeek-style FP8 weights with their block
    // scales in safetensors, and the AWQ file torchao's developers committed (int4 TensorCoreTiled inside a
    // scale wrapper; ../shared): every part is written under its weight's key and its own name, scales and
    // zero points included, bytes as torch and torchao hold them (tests/fixtures/convert/quantized_parts.truth.json,
    // made with torch 2.6 + torchao 0.9, whose --check-quant also rebuilt each subclass from the written parts
    // and got the source's dequantized values back). A rename rule applies to the parts' keys too.
    void quantizedKeptQuantized_data()
    {
        QTest::addColumn<QString>("entry");
        QTest::addColumn<bool>("rule");
        for (const char* e : { "torch2/torchao/fp8wo.pt", "torch2/torchao/int8wo.pt", "torch2/torchao/nf4.pt",
                 "torch2/torchao/float8_tensor.pt", "torch2/safetensors/fp8_block.safetensors", "real/pytorch__ao/awq_model.pth" })
            QTest::newRow(e) << QString::fromLatin1(e) << false;
        QTest::newRow("fp8_block.safetensors, model. stripped") << QStringLiteral("torch2/safetensors/fp8_block.safetensors") << true;
        QTest::newRow("int8wo.pt, every key under q.") << QStringLiteral("torch2/torchao/int8wo.pt") << true;
    }
    void quantizedKeptQuantized()
    {
        QFETCH(QString, entry);
        QFETCH(bool, rule);
        QString path = test::fixturesDir() + QLatin1Char('/') + entry;
        if (entry.startsWith(QStringLiteral("real/"))) {
            if (test::realFixturesDir().isEmpty())
                QSKIP("../shared/fixtures/real is not there");
            path = test::realFixturesDir() + entry.mid(4);
        }
        const bool st = entry.endsWith(QStringLiteral(".safetensors"));
        const QString pattern = st ? QStringLiteral("^model\\.") : QStringLiteral("^");
        const QString replacement = st ? QString() : QStringLiteral("q.");
        const QString o = out("quant_") + QFileInfo(path).fileName() + (rule ? QStringLiteral(".renamed") : QString())
            + QStringLiteral(".safetensors");
        QStringList args { path, QStringLiteral("-o"), o };
        if (rule) {
            const QString rules = m_dir.filePath(QStringLiteral("quant_rule.yaml"));
            writeText(rules, "rules:\n  - pattern: '" + pattern.toUtf8() + "'\n    replace: '" + replacement.toUtf8() + "'\n");
            args << QStringLiteral("--rules") << rules;
        }
        const auto r = runConvert(args);
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QStringList c { QStringLiteral("--out"), o, QStringLiteral("--source"),
            test::fixturesDir() + QStringLiteral("/convert/quantized_parts.truth.json"), QStringLiteral("--kind"),
            QStringLiteral("parts"), QStringLiteral("--entry"), entry };
        if (rule)
            c << QStringLiteral("--sub") << pattern << replacement;
        QVERIFY(check(c).value(QStringLiteral("checked")).toInt() > 0);
    }

    // A compiled FSDP2 DCP save (torch 2.6: two gloo processes, fully_shard then torch.compile(backend="eager"),
    // dcp.save of the compiled model's state_dict(); tests/fixtures/torch2/dcp/dcp_compiled, made by
    // make_torch2_fixtures.py) converted with the rule that strips `_orig_mod.`: every chunk assembled, values
    // equal to what torch saved (the fixture's truth), and the plain model loads the file strictly under
    // torch 1.13. Without the rule the same load fails.
    void compiledFsdp2DcpIntoThePlainModel()
    {
        const QString dcp = test::fixturesDir() + QStringLiteral("/torch2/dcp/dcp_compiled");
        const QString o = out("dcp_compiled.safetensors");
        const auto r = runConvert({ dcp, QStringLiteral("--rules"), m_dir.filePath(QStringLiteral("strip.yaml")),
            QStringLiteral("-o"), o });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.out.contains("wrote 23 tensors"), r.out.constData());
        const QStringList c { QStringLiteral("--out"), o, QStringLiteral("--source"), dcp + QStringLiteral(".truth.json"),
            QStringLiteral("--kind"), QStringLiteral("per-rank-truth"), QStringLiteral("--model"), QStringLiteral("titan") };
        const QJsonObject got = check(c + QStringList { QStringLiteral("--strip"), QStringLiteral("_orig_mod.") });
        QCOMPARE(got.value(QStringLiteral("checked")).toInt(), 23);
        QCOMPARE(got.value(QStringLiteral("strict_load")).toBool(), true);

        const QString unfixed = out("dcp_compiled_unfixed.safetensors");
        QCOMPARE(runConvert({ dcp, QStringLiteral("-o"), unfixed }).exitCode, 0);
        const auto failed = test::run(test::torchPython(), QStringList { tool(), QStringLiteral("check"), QStringLiteral("--out"), unfixed,
            QStringLiteral("--source"), dcp + QStringLiteral(".truth.json"), QStringLiteral("--kind"), QStringLiteral("per-rank-truth"),
            QStringLiteral("--model"), QStringLiteral("titan") });
        QVERIFY(failed.exitCode != 0);
        QVERIFY2(failed.err.contains("Missing key") && failed.err.contains("Unexpected key"), failed.err.constData());
    }

    // The torchtitan <-> Hugging Face pair: the torchtitan DCP save (torch 2.6, FSDP2 on two processes, its
    // `model` container beside the optimizer and train_state) converted with the titan -> HF rules loads
    // strictly into the HF-named model with the saved values; the HF file converted back with the inverse rules
    // (`statelens rules export --invert`) loads strictly into the torchtitan model, every value equal to the
    // save again. The rules' renames are checked against Python's re.sub of tests/tools/llama_models.py's
    // TITAN_TO_HF.
    void titanToHfAndBack()
    {
        const QString dcp = test::fixturesDir() + QStringLiteral("/torch2/dcp/dcp_titan");
        const QString rules = m_dir.filePath(QStringLiteral("titan_to_hf.yaml"));
        writeTitanToHfRules(rules);
        const QString hf = out("titan_hf");
        const auto r = runConvert({ dcp, QStringLiteral("--container"), QStringLiteral("model"), QStringLiteral("--rules"), rules,
            QStringLiteral("--shard-size"), QStringLiteral("20KB"), QStringLiteral("-o"), hf });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const QStringList c { QStringLiteral("--out"), hf, QStringLiteral("--source"), dcp + QStringLiteral(".truth.json"),
            QStringLiteral("--kind"), QStringLiteral("per-rank-truth"), QStringLiteral("--container"), QStringLiteral("model"),
            QStringLiteral("--model"), QStringLiteral("hf"), QStringLiteral("--shard-size"), QStringLiteral("20000") };
        const QJsonObject there = check(c + titanToHfSubArgs());
        QCOMPARE(there.value(QStringLiteral("checked")).toInt(), 23);
        QCOMPARE(there.value(QStringLiteral("strict_load")).toBool(), true);
        QVERIFY(there.value(QStringLiteral("files")).toInt() > 1);

        const QString inverse = m_dir.filePath(QStringLiteral("hf_to_titan.yaml"));
        const auto inv = test::runStatelens({ QStringLiteral("rules"), QStringLiteral("export"), rules, QStringLiteral("--to"),
            QStringLiteral("yaml"), QStringLiteral("--invert"), QStringLiteral("-o"), inverse });
        QVERIFY2(inv.exitCode == 0, inv.err.constData());
        const QString back = out("titan_back.safetensors");
        const auto r2 = runConvert({ hf, QStringLiteral("--rules"), inverse, QStringLiteral("-o"), back });
        QVERIFY2(r2.exitCode == 0, r2.err.constData());
        const QJsonObject again = check({ QStringLiteral("--out"), back, QStringLiteral("--source"), dcp + QStringLiteral(".truth.json"),
            QStringLiteral("--kind"), QStringLiteral("per-rank-truth"), QStringLiteral("--container"), QStringLiteral("model"),
            QStringLiteral("--model"), QStringLiteral("titan") });
        QCOMPARE(again.value(QStringLiteral("checked")).toInt(), 23);
        QCOMPARE(again.value(QStringLiteral("strict_load")).toBool(), true);
    }

    // A real Meta-layout checkpoint (torchtune's tests/assets/tiny_fair_checkpoint.pt, torchtitan's names
    // without buffers; ../shared) into the Hugging Face names: strict load into the HF model, values equal to
    // torch.load's.
    void realFairCheckpointIntoHf()
    {
        if (test::realFixturesDir().isEmpty())
            QSKIP("../shared/fixtures/real is not there");
        const QString src = test::realFixturesDir() + QStringLiteral("/pytorch__torchtune/tests__assets__tiny_fair_checkpoint.pt");
        const QString rules = m_dir.filePath(QStringLiteral("fair_to_hf.yaml"));
        writeTitanToHfRules(rules);
        const QString o = out("fair_hf.safetensors");
        const auto r = runConvert({ src, QStringLiteral("--rules"), rules, QStringLiteral("-o"), o });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const QJsonObject got = check(QStringList { QStringLiteral("--out"), o, QStringLiteral("--source"), src,
                                          QStringLiteral("--model"), QStringLiteral("fair-hf") }
            + titanToHfSubArgs());
        QCOMPARE(got.value(QStringLiteral("checked")).toInt(), 21);
        QCOMPARE(got.value(QStringLiteral("strict_load")).toBool(), true);
    }

    // --dtype on torch.ao quantized tensors (qint8 and quint8, per tensor and per channel): ATen's dequantize(),
    // whose float32 bytes make_values_fixtures.py hashed with torch 1.13.
    void torchAoTensorsDequantized()
    {
        const QString path = test::fixturesDir() + QStringLiteral("/values/quantized.pt");
        const QJsonObject truth = test::readJson(path + QStringLiteral(".expected.json")).value(QStringLiteral("tensors")).toObject();
        QVERIFY(truth.size() >= 3);
        const QString o = out("torch_ao_f32.safetensors");
        const auto r = runConvert({ path, QStringLiteral("--dtype"), QStringLiteral("fp32"), QStringLiteral("-o"), o });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.out.contains("torch.ao per-channel affine") || r.out.contains("torch.ao per-tensor affine"), r.out.constData());
        const HandReadSafetensors st = readByHand(o);
        QVERIFY(!st.header.isEmpty());
        for (auto it = truth.begin(); it != truth.end(); ++it) {
            const QJsonObject want = it.value().toObject().value(QStringLiteral("dequantized")).toObject();
            QCOMPARE(want.value(QStringLiteral("dtype")).toString(), QStringLiteral("float32"));
            const QJsonObject got = st.header.value(it.key()).toObject();
            QCOMPARE(got.value(QStringLiteral("dtype")).toString(), QStringLiteral("F32"));
            QCOMPARE(QCryptographicHash::hash(st.bytes(got), QCryptographicHash::Sha256).toHex(),
                want.value(QStringLiteral("sha256_logical")).toString().toLatin1());
        }
    }

    void cancelledLeavesNothing()
    {
        const Source s = openSource(src("views.pt").toStdString());
        const convert::ConvertPlan plan = convert::planConversion(s, {});
        const QString parent = m_dir.filePath(QStringLiteral("cancel"));
        QVERIFY(QDir().mkpath(parent));
        for (const char* name : { "/one.safetensors", "/folder" }) {
            LoadControl control;
            control.cancel();
            convert::WriteOptions w;
            w.output = (parent + QLatin1String(name)).toStdString();
            w.control = &control;
            QVERIFY_THROWS_EXCEPTION(LoadCancelled, convert::writeSafetensors(s, plan, w));
            QCOMPARE(entries(parent), QStringList());
        }
    }

    // huggingface_hub's parse_size_to_int: decimal units; transformers also takes the binary ones.
    void byteSizes()
    {
        QCOMPARE(convert::parseByteSize("5GB").value_or(0), uint64_t(5'000'000'000));
        QCOMPARE(convert::parseByteSize("500MB").value_or(0), uint64_t(500'000'000));
        QCOMPARE(convert::parseByteSize("2GiB").value_or(0), uint64_t(2) << 30);
        QCOMPARE(convert::parseByteSize("0.5kb").value_or(0), uint64_t(500));
        QCOMPARE(convert::parseByteSize("4096").value_or(0), uint64_t(4096));
        for (const char* bad : { "", "GB", "0", "-1GB", "5XB", "1e3", "5 G B" })
            QVERIFY2(!convert::parseByteSize(bad), bad);
    }

    // Memory is bounded by the copy buffer: a 256 MB tensor converts at a peak far below its size.
    // A deflated archive (torch.load reads records that zip tools re-compressed): its 128 MB storage is
    // inflated as the copy advances, not whole, and the values are torch.load's.
    void deflatedRecordsStreamInBoundedMemory()
    {
        const QString big = m_dir.filePath(QStringLiteral("deflated_big.pt"));
        const auto made = test::run(test::torchPython(), { QStringLiteral("-c"), QStringLiteral(R"(
import io, sys, torch, zipfile
buf = io.BytesIO()
torch.save({'w': torch.arange(32 << 20, dtype=torch.float32), 'small': torch.ones(3)}, buf)
src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED, compresslevel=1) as out:
    for info in src.infolist():
        out.writestr(info.filename, src.read(info.filename))
assert torch.equal(torch.load(sys.argv[1])['w'], torch.arange(32 << 20, dtype=torch.float32))
)"), big });
        QVERIFY2(made.exitCode == 0, made.err.constData());
        const QString o = out("deflated_big.safetensors");
        const auto r = test::runMeasured(test::statelensBinary(), { QStringLiteral("convert"), big, QStringLiteral("-o"), o });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        // Under a sanitizer, its shadow memory and quarantine come on top (112 MB measured); holding the
        // storage whole would still pass 200 MB there (271 MB without one).
        const qint64 limitKb = (test::sanitized() ? 200 : 64) * 1024;
        QVERIFY2(r.peakKb > 0 && r.peakKb < limitKb, qPrintable(QString::number(r.peakKb) + QStringLiteral(" kB peak")));
        const QJsonObject c = check({ QStringLiteral("--out"), o, QStringLiteral("--source"), big });
        QCOMPARE(c.value(QStringLiteral("checked")).toInt(), 2);
        QFile::remove(big);
        QFile::remove(o);
    }

    void boundedMemory()
    {
        const QString big = m_dir.filePath(QStringLiteral("big.pt"));
        const auto made = test::run(test::torchPython(),
            { QStringLiteral("-c"), QStringLiteral("import torch,sys; torch.save({'w': torch.ones(64 << 20)}, sys.argv[1])"), big });
        QVERIFY2(made.exitCode == 0, made.err.constData());
        const auto r = test::runMeasured(test::statelensBinary(),
            { QStringLiteral("convert"), big, QStringLiteral("--dtype"), QStringLiteral("bf16"), QStringLiteral("-o"), out("big.safetensors") });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY(QFileInfo(out("big.safetensors")).size() > (128 << 20));
        // A sanitizer's shadow memory and quarantine come on top (114 MB measured); the 256 MB tensor held
        // whole would still pass 200 MB there.
        const qint64 limitKb = (test::sanitized() ? 200 : 96) * 1024;
        QVERIFY2(r.peakKb > 0 && r.peakKb < limitKb, qPrintable(QString::number(r.peakKb) + QStringLiteral(" kB peak")));
        QFile::remove(big);
        QFile::remove(out("big.safetensors"));
    }
};

QTEST_GUILESS_MAIN(TestConvert)
#include "tst_convert.moc"
