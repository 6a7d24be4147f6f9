// The aligned tree model, tested from small text descriptions of two trees: each case lists A's and B's
// keys ("name shape dtype"), runs the core diff with some rules, and compares the model's tree, rendered as
// indented text (A's name | B's name | status, "·" for a gap), with the tree written out by hand.
// QAbstractItemModelTester watches every model built here.

#include "models/aligned_tree_model.h"
#include "session/comparison.h"

#include <QAbstractItemModelTester>
#include <QElapsedTimer>
#include <QFont>
#include <QBrush>
#include <QPoint>
#include <QTest>

#include <map>
#include <sstream>

using namespace sl;
using namespace sl::gui;

namespace {

// "layers.0.w [4,4] float32" per line; shape and dtype are optional ([1] float32).
std::shared_ptr<const Source> parseSource(const char* text)
{
    auto s = std::make_shared<Source>();
    s->format = SourceFormat::Safetensors;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string name, shape = "[1]", dtype = "float32";
        if (!(fields >> name))
            continue;
        fields >> shape >> dtype;
        Entry e;
        e.name = name;
        e.dtype = *dtypeFromName(dtype);
        std::vector<int64_t> dims;
        std::string inner = shape.substr(1, shape.size() - 2);
        std::istringstream ds(inner);
        std::string d;
        while (std::getline(ds, d, ','))
            dims.push_back(std::stoll(d));
        e.shape = Shape(dims.begin(), dims.end());
        s->entries.push_back(std::move(e));
    }
    return s;
}

std::shared_ptr<const DiffSnapshot> snapshot(const char* a, const char* b, std::vector<std::pair<std::string, std::string>> rules = {})
{
    RuleSet set;
    for (auto& [p, r] : rules) {
        Rule rule;
        rule.pattern = p;
        rule.replacement = r;
        set.rules.push_back(rule);
    }
    return buildSnapshot(parseSource(a), parseSource(b), set, 1);
}

QString dump(const AlignedTreeModel& m, const QModelIndex& parent = {}, int depth = 0)
{
    QString out;
    for (int r = 0; r < m.rowCount(parent); ++r) {
        const QModelIndex i = m.index(r, 0, parent);
        auto cell = [&](int column) {
            const QString s = i.siblingAtColumn(column).data().toString();
            return s.isEmpty() ? QStringLiteral("·") : s;
        };
        out += QString(depth * 2, QLatin1Char(' ')) + cell(AlignedTreeModel::NameA) + QStringLiteral(" | ")
            + cell(AlignedTreeModel::NameB) + QStringLiteral(" | ") + cell(AlignedTreeModel::StatusColumn) + QLatin1Char('\n');
        out += dump(m, i, depth + 1);
    }
    return out;
}

const char* kCompiledA = "_orig_mod.layers.0.w [4,4]\n_orig_mod.layers.1.w [4,4]\n_orig_mod.head.w [2]\n";
const char* kModelB = "layers.0.w [4,4]\nlayers.1.w [4,4]\nhead.w [3]\n";

} // namespace

class TestAlignedTreeModel : public QObject {
    Q_OBJECT
private slots:
    void pairsShareALineBeforeAnyRule()
    {
        AlignedTreeModel m;
        QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::QtTest);
        m.setFolding(false);
        m.setSnapshot(snapshot(kCompiledA, (std::string(kModelB) + "extra.b [1]\n").c_str()));
        // Without rules, each wrapped key of A sits on the line of the model's key it corresponds to, with
        // both full names; the key only the model has keeps its gap, drawn as one.
        QCOMPARE(dump(m),
            QStringLiteral("layers | layers | 2 missing · 2 unexpected\n"
                           "  0 | 0 | 1 missing · 1 unexpected\n"
                           "    _orig_mod.layers.0.w | layers.0.w | unexpected ↔ missing · wrapper prefix\n"
                           "  1 | 1 | 1 missing · 1 unexpected\n"
                           "    _orig_mod.layers.1.w | layers.1.w | unexpected ↔ missing · wrapper prefix\n"
                           "head | head | 1 missing · 1 unexpected\n"
                           "  _orig_mod.head.w | head.w | unexpected ↔ missing · wrapper prefix\n"
                           "not in the checkpoint | extra | 1 missing\n"
                           "  not in the checkpoint | b | missing\n"));
        const QModelIndex pair = m.findPath(QStringLiteral("layers.0.w"));
        QVERIFY(pair.isValid());
        QVERIFY(pair.data(AlignedTreeModel::PairRole).toBool());
        QCOMPARE(m.diffRows(pair).size(), size_t(1));
        QCOMPARE(pair.siblingAtColumn(AlignedTreeModel::ShapeA).data().toString(), QStringLiteral("[4, 4]"));
        QCOMPARE(pair.siblingAtColumn(AlignedTreeModel::ShapeB).data().toString(), QStringLiteral("[4, 4]"));
        // The word diff marks the wrapper's segment in A's name, nothing in B's.
        const QVariantList spans = pair.siblingAtColumn(AlignedTreeModel::NameA).data(AlignedTreeModel::HighlightRole).toList();
        QCOMPARE(spans.size(), qsizetype(1));
        QCOMPARE(spans[0].toPoint(), QPoint(0, 10)); // "_orig_mod."
        QVERIFY(pair.siblingAtColumn(AlignedTreeModel::NameB).data(AlignedTreeModel::HighlightRole).toList().isEmpty());
        // The gap is a gap on A's side only, muted and hatched.
        const QModelIndex gap = m.findPath(QStringLiteral("extra.b"));
        QVERIFY(gap.siblingAtColumn(AlignedTreeModel::NameA).data(AlignedTreeModel::GapRole).toBool());
        QVERIFY(!gap.siblingAtColumn(AlignedTreeModel::NameB).data(AlignedTreeModel::GapRole).toBool());
        QCOMPARE(gap.siblingAtColumn(AlignedTreeModel::NameA).data(Qt::BackgroundRole).value<QBrush>().style(), Qt::BDiagPattern);
        QVERIFY(!pair.siblingAtColumn(AlignedTreeModel::NameA).data(AlignedTreeModel::GapRole).toBool());
        // Filtering by A's own name finds the pair; the unexpected status alone shows it too.
        // (leafCount counts diff rows: a pair's line holds two.)
        QVERIFY(m.setFilter({ QStringLiteral("_orig_mod.head"), false, AlignedTreeModel::kAllStatuses }));
        QCOMPARE(m.leafCount(), size_t(2));
        QCOMPARE(m.rowCount(), 1);
        QVERIFY(m.setFilter({ QString(), false, 1u << static_cast<unsigned>(RowStatus::Unexpected) }));
        QCOMPARE(m.leafCount(), size_t(6));
    }

    // Per-expert weights against one stacked tensor (transformers v5's layout): the many share the line of
    // the one, their names folded, whichever way folding is set.
    void stackedExpertsShareTheStackedLine()
    {
        const char* perExpert = "layers.0.mlp.experts.0.w1.weight [4,8]\nlayers.0.mlp.experts.1.w1.weight [4,8]\n"
                                "layers.0.mlp.experts.2.w1.weight [4,8]\n";
        const char* stacked = "layers.0.mlp.experts.w1 [3,4,8]\n";
        for (bool fold : { false, true }) {
            AlignedTreeModel m;
            QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::QtTest);
            m.setFolding(fold);
            m.setSnapshot(snapshot(perExpert, stacked));
            QCOMPARE(dump(m),
                QStringLiteral("layers | layers | 1 missing · 3 unexpected\n"
                               "  0 | 0 | 1 missing · 3 unexpected\n"
                               "    mlp | mlp | 1 missing · 3 unexpected\n"
                               "      experts | experts | 1 missing · 3 unexpected\n"
                               "        layers.0.mlp.experts.{0..2}.w1.weight | layers.0.mlp.experts.w1 | unexpected ↔ missing · stacked experts\n"));
            const QModelIndex line = m.findPath(QStringLiteral("layers.0.mlp.experts.w1"));
            QCOMPARE(line.siblingAtColumn(AlignedTreeModel::ShapeA).data().toString(), QStringLiteral("[4, 8] ×3"));
            QCOMPARE(line.siblingAtColumn(AlignedTreeModel::ShapeB).data().toString(), QStringLiteral("[3, 4, 8]"));
            QCOMPARE(m.leafCount(), size_t(4));
            // The core folds it the same way for the reports: one line, three rows beside the stacked one.
            const auto& snap = *m.snapshot();
            const auto folded = foldRows(snap.diff, *snap.a, *snap.b);
            QCOMPARE(folded.size(), size_t(1));
            QCOMPARE(folded[0].partnerRows.size(), size_t(3));
            QCOMPARE(folded[0].partnerName, std::string("layers.0.mlp.experts.{0..2}.w1.weight"));
            QVERIFY(!pairedRow(snap.diff, folded[0].rows[0]).valid()); // many to one, not a pair of two
        }
        // transformers v5 fuses gate and up when it stacks: each projection's experts go to the tensor that
        // holds them, two lines.
        auto experts = snapshot("m.experts.0.gate_proj.weight [8,4]\nm.experts.0.up_proj.weight [8,4]\nm.experts.0.down_proj.weight [4,8]\n"
                                "m.experts.1.gate_proj.weight [8,4]\nm.experts.1.up_proj.weight [8,4]\nm.experts.1.down_proj.weight [4,8]\n",
            "m.experts.gate_up_proj [2,16,4]\nm.experts.down_proj [2,4,8]\n");
        const auto lines = foldRows(experts->diff, *experts->a, *experts->b);
        QCOMPARE(lines.size(), size_t(2));
        std::map<std::string, std::string> byStacked;
        for (const FoldedRow& f : lines)
            byStacked[f.name] = f.partnerName;
        QCOMPARE(byStacked["m.experts.gate_up_proj"], std::string("m.experts.{0,1}.gate_proj.weight + m.experts.{0,1}.up_proj.weight"));
        QCOMPARE(byStacked["m.experts.down_proj"], std::string("m.experts.{0,1}.down_proj.weight"));
    }

    void rulesBringBothSidesOntoOneLine()
    {
        AlignedTreeModel m;
        QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::QtTest);
        m.setFolding(false);
        m.setSnapshot(snapshot(kCompiledA, kModelB, { { "^_orig_mod\\.", "" } }));
        QCOMPARE(dump(m),
            QStringLiteral("layers | layers | 2 renamed\n"
                           "  0 | 0 | 1 renamed\n"
                           "    w  ← _orig_mod.layers.0.w | w | renamed\n"
                           "  1 | 1 | 1 renamed\n"
                           "    w  ← _orig_mod.layers.1.w | w | renamed\n"
                           "head | head | 1 shape mismatch\n"
                           "  w  ← _orig_mod.head.w | w | shape mismatch\n"));
        const QModelIndex head = m.findPath(QStringLiteral("head.w"));
        QVERIFY(head.isValid());
        QCOMPARE(head.siblingAtColumn(AlignedTreeModel::ShapeA).data().toString(), QStringLiteral("[2]"));
        QCOMPARE(head.siblingAtColumn(AlignedTreeModel::ShapeB).data().toString(), QStringLiteral("[3]"));
        QCOMPARE(m.diffRows(head).size(), size_t(1));
        // The roll-up carries the worst status below.
        QCOMPARE(m.findPath(QStringLiteral("head")).data(AlignedTreeModel::StatusRole).toInt(), static_cast<int>(RowStatus::ShapeMismatch));
        QCOMPARE(m.findPath(QStringLiteral("layers")).data(AlignedTreeModel::StatusRole).toInt(), static_cast<int>(RowStatus::Renamed));
    }

    void foldingGroupsLayersAndExpandsToMembers()
    {
        std::string a, b;
        for (int i = 0; i < 32; ++i) {
            a += "model.layers." + std::to_string(i) + ".mlp.up.weight [8,4]\n";
            b += "model.layers." + std::to_string(i) + ".mlp.up.weight " + (i == 7 ? "[9,4]" : "[8,4]") + "\n";
        }
        AlignedTreeModel m;
        QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::QtTest);
        auto snap = snapshot(a.c_str(), b.c_str());
        m.setSnapshot(snap);
        QVERIFY(m.folding());
        // 31 matches fold into one leaf; the shape mismatch at layer 7 stays its own row.
        const QModelIndex folded = m.findPath(QStringLiteral("model.layers.{0..6,8..31}.mlp.up.weight"));
        QVERIFY2(folded.isValid(), qPrintable(dump(m)));
        QCOMPARE(m.rowCount(folded), 31);
        QCOMPARE(m.diffRows(folded).size(), size_t(31));
        QCOMPARE(m.index(0, 0, folded).data().toString(), QStringLiteral("model.layers.0.mlp.up.weight"));
        QCOMPARE(m.kind(m.index(0, 0, folded)), AlignedTreeModel::NodeKind::FoldedMember);
        QVERIFY(m.findPath(QStringLiteral("model.layers.7.mlp.up.weight")).isValid());
        QCOMPARE(m.leafCount(), size_t(32));
        QCOMPARE(m.findPath(QStringLiteral("model")).siblingAtColumn(AlignedTreeModel::StatusColumn).data().toString(),
            QStringLiteral("1 shape mismatch"));
        m.setFolding(false);
        QCOMPARE(m.rowCount(m.findPath(QStringLiteral("model.layers"))), 32);
        QCOMPARE(m.leafCount(), size_t(32));
    }

    void filtersBySubstringRegexAndStatus()
    {
        std::string a, b;
        for (int i = 0; i < 20; ++i) {
            a += "layers." + std::to_string(i) + ".w\n";
            if (i % 5 != 0)
                b += "layers." + std::to_string(i) + ".w\n";
        }
        b += "extra.bias\n";
        auto snap = snapshot(a.c_str(), b.c_str());
        AlignedTreeModel m;
        QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::QtTest);
        m.setFolding(false);
        m.setSnapshot(snap);
        QCOMPARE(m.leafCount(), size_t(21));
        // Substring, case-insensitive: layers.1.w and layers.10..19.w.
        QVERIFY(m.setFilter({ QStringLiteral("LAYERS.1"), false }));
        QCOMPARE(m.leafCount(), size_t(11));
        // A regular expression.
        QVERIFY(m.setFilter({ QStringLiteral("\\.1[05]\\.w$"), true }));
        QCOMPARE(m.leafCount(), size_t(2));
        // An invalid one is refused and the previous filter stays.
        QVERIFY(!m.setFilter({ QStringLiteral("(unclosed"), true }));
        QVERIFY(!m.filterError().isEmpty());
        QCOMPARE(m.leafCount(), size_t(2));
        // Only the unexpected rows: layers.0, 5, 10 and 15 are not in B.
        AlignedTreeModel::Filter f;
        f.statuses = 1u << static_cast<unsigned>(RowStatus::Unexpected);
        QVERIFY(m.setFilter(f));
        QCOMPARE(m.leafCount(), snap->diff.summary.count(RowStatus::Unexpected));
        QCOMPARE(m.leafCount(), size_t(4));
        f.statuses = AlignedTreeModel::kAllStatuses & ~(1u << static_cast<unsigned>(RowStatus::Match));
        QVERIFY(m.setFilter(f));
        QCOMPARE(m.leafCount(), size_t(5)); // 4 unexpected + extra.bias missing
    }

    void nextDifferenceWalksInDisplayOrderAndWraps()
    {
        auto snap = snapshot("a.w\nb.w\nc.w [2]\nd.w\n", "a.w\nb.w [3]\nc.w [2]\nd.w [5]\n");
        AlignedTreeModel m;
        m.setFolding(false);
        m.setSnapshot(snap);
        QModelIndex i = m.nextDifference({}, true);
        QCOMPARE(m.path(i), QStringLiteral("b.w"));
        i = m.nextDifference(i, true);
        QCOMPARE(m.path(i), QStringLiteral("d.w"));
        i = m.nextDifference(i, true);
        QCOMPARE(m.path(i), QStringLiteral("b.w"));
        i = m.nextDifference(i, false);
        QCOMPARE(m.path(i), QStringLiteral("d.w"));
        // From an inner node or a match: the next difference after it.
        QCOMPARE(m.path(m.nextDifference(m.findPath(QStringLiteral("c")), true)), QStringLiteral("d.w"));
    }

    void groupsShowTheirPartsWhenExpanded()
    {
        auto a = std::make_shared<Source>(*parseSource("q.weight [4,4] float32\n"));
        Entry& g = a->entries[0];
        g.kind = EntryKind::Group;
        Entry qdata;
        qdata.name = "qdata";
        qdata.dtype = DType::Int8;
        qdata.shape = { 4, 4 };
        Entry scale;
        scale.name = "scale";
        scale.shape = { 4 };
        g.parts = { qdata, scale };
        auto b = std::make_shared<Source>(*parseSource("q.weight [4,4] float32\n"));
        auto sharding = std::make_shared<Sharding>();
        sharding->kind = Sharding::Kind::DcpChunks;
        ShardChunk c0;
        c0.offsets = { 0, 0 };
        c0.sizes = { 2, 4 };
        c0.label = "__0_0.distcp";
        ShardChunk c1 = c0;
        c1.offsets = { 2, 0 };
        c1.label = "__1_0.distcp";
        sharding->chunks = { c0, c1 };
        b->entries[0].sharding = sharding;
        auto snap = buildSnapshot(a, b, {}, 1);
        AlignedTreeModel m;
        QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::QtTest);
        m.setSnapshot(snap);
        const QModelIndex leaf = m.findPath(QStringLiteral("q.weight"));
        QCOMPARE(m.rowCount(leaf), 4); // A's two parts, B's two chunks
        const QModelIndex part = m.index(0, 0, leaf);
        QCOMPARE(m.kind(part), AlignedTreeModel::NodeKind::PartA);
        QCOMPARE(part.data().toString(), QStringLiteral("qdata"));
        QCOMPARE(part.siblingAtColumn(AlignedTreeModel::DTypeA).data().toString(), QStringLiteral("int8"));
        QVERIFY(part.siblingAtColumn(AlignedTreeModel::NameB).data().toString().isEmpty());
        QCOMPARE(m.partEntry(part)->name, std::string("qdata"));
        const QModelIndex chunk = m.index(3, 0, leaf);
        QCOMPARE(m.kind(chunk), AlignedTreeModel::NodeKind::ChunkB);
        QCOMPARE(chunk.siblingAtColumn(AlignedTreeModel::NameB).data().toString(), QStringLiteral("__1_0.distcp"));
        QCOMPARE(chunk.siblingAtColumn(AlignedTreeModel::ShapeB).data().toString(), QStringLiteral("[2, 4] at [2, 0]"));
        QVERIFY(chunk.siblingAtColumn(AlignedTreeModel::NameA).data().toString().isEmpty());
    }

    // A rule that reaches PCRE2's match limit on a key (rules/rule_engine.h) is left out of the snapshot and
    // named as invalid with the key, as a rule that does not compile is; the other rules still apply.
    void aRuleThatReachesAMatchLimitIsLeftOut()
    {
        const std::string hostile = std::string(40, 'a') + "!";
        const std::string a = "x.w\n" + hostile + "\n";
        auto snap = snapshot(a.c_str(), "y.w\nz\n", { { "^x\\.", "y." }, { "(a+)+$", "z" } });
        QVERIFY(snap->rules.rules[0].enabled);
        QVERIFY(!snap->rules.rules[1].enabled);
        QCOMPARE(snap->diff.summary.count(RowStatus::Renamed), size_t(1)); // x.w -> y.w
        QCOMPARE(snap->diff.summary.count(RowStatus::Unexpected), size_t(1)); // the hostile key, as it is
        const auto limit = std::find_if(snap->issues.begin(), snap->issues.end(), [](const RuleIssue& i) { return i.rule == RuleIndex(1); });
        QVERIFY(limit != snap->issues.end());
        QCOMPARE(limit->kind, RuleIssue::Kind::Invalid);
        QCOMPARE(limit->severity, Severity::Danger);
        QVERIFY2(limit->message.rfind("rule 2 ('(a+)+$') took more than", 0) == 0, limit->message.c_str());
        QVERIFY2(limit->message.find("on the key 'aaaaaaaaaa") != std::string::npos, limit->message.c_str());
        AlignedTreeModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        model.setSnapshot(snap);
        QVERIFY(model.rowCount() > 0);
    }

    void oneSideOpenShowsItsTreeWithoutStatuses()
    {
        auto snap = buildSnapshot(parseSource("x.w\nx.b\n"), nullptr, {}, 1);
        AlignedTreeModel m;
        QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::QtTest);
        m.setSnapshot(snap);
        QCOMPARE(m.rowCount(), 1);
        const QModelIndex x = m.index(0, AlignedTreeModel::NameA);
        QCOMPARE(x.data().toString(), QStringLiteral("x"));
        QVERIFY(!x.data(Qt::DecorationRole).isValid()); // nothing to compare against yet
        QCOMPARE(x.siblingAtColumn(AlignedTreeModel::ShapeA).data().toString(), QStringLiteral("2 entries"));
    }

    void hundredThousandRowsBuildAndFilterQuickly()
    {
        std::string a, b;
        a.reserve(5000000);
        b.reserve(5000000);
        for (int l = 0; l < 1000; ++l)
            for (int k = 0; k < 100; ++k) {
                a += "model.layers." + std::to_string(l) + ".block." + std::to_string(k) + ".weight [16,16]\n";
                b += "layers." + std::to_string(l) + ".block." + std::to_string(k) + ".weight [16,16]\n";
            }
        auto snap = snapshot(a.c_str(), b.c_str(), { { "^model\\.", "" } });
        QCOMPARE(snap->diff.rows.size(), size_t(100000));
        AlignedTreeModel m;
        m.setFolding(false);
        QElapsedTimer t;
        t.start();
        m.setSnapshot(snap);
        const qint64 build = t.elapsed();
        t.restart();
        QVERIFY(m.setFilter({ QStringLiteral("layers.99"), false }));
        const qint64 filter = t.elapsed();
        QCOMPARE(m.leafCount(), size_t(1100)); // layers.99 and layers.990..999, 100 blocks each
        qInfo("100,000 rows: build %lld ms, filter %lld ms", build, filter);
        // Hang guards, not speed targets (the benchmark measures those): a quadratic build would take minutes.
        QVERIFY(build < 20000);
        QVERIFY(filter < 20000);
    }
};

QTEST_MAIN(TestAlignedTreeModel)
#include "tst_aligned_tree_model.moc"
