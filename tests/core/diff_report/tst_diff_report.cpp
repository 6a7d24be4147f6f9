// The diff report in every format (report/diff_report.h), checked by reading each document back with an
// independent parser: QJsonDocument, QXmlStreamReader (HTML and JUnit), an RFC 4180 reader and a GFM table
// splitter written here. The pair is built in memory and diffed with real rules, so every status shows up,
// and its names carry what breaks naive writers: quotes, Unicode, markup, pipes, backticks, formula
// prefixes, control characters, invalid UTF-8. What each document says is compared with the diff itself
// (counts, rows, names), never with a stored copy of an earlier output.

#include "common/qt_text.h"
#include "common/test_paths.h"
#include "diff/diff.h"
#include "diff/rule_checks.h"
#include "model/source.h"
#include "report/diff_report.h"
#include "rules/rule.h"
#include "suggest/pending_pairs.h"
#include "suggest/suggestions.h"

#include <QCryptographicHash>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMap>
#include <QRegularExpression>
#include <QSet>
#include <QTest>
#include <QXmlStreamReader>

#include <algorithm>
#include <ctime>
#include <optional>

using namespace sl;

namespace {

using sl::test::q;
QByteArray bytes(const std::string& s) { return QByteArray(s.data(), qsizetype(s.size())); }

Entry makeEntry(std::string name, Shape shape, DType dtype = DType::Float32)
{
    Entry e;
    e.name = std::move(name);
    e.dtype = dtype;
    e.shape = std::move(shape);
    return e;
}

// Names that break writers which do not escape (or escape the wrong way).
const std::vector<std::string>& awkwardNames()
{
    static const std::vector<std::string> names = {
        "quote\"d.'single'.weight",
        "unicode.\xCE\xA9\xCE\xBC\xCE\xAD\xCE\xB3\xCE\xB1.\xE5\x90\x8D\xE5\x89\x8D.weight", // Ωμέγα.名前
        "<script>alert(1)</script>",
        "pipe|name.weight",
        "=cmd|' /C calc'!A0",
        "+plus",
        "-minus",
        "@at",
        "back`tick``s",
        "amp&amp;lt;",
        std::string("ctl\x1b[31mred\x07"),
        "tab\tname",
        "new\nline",
        "cr\rname",
        "comma,name",
        std::string("nul\0byte", 8),
        "bad\xFFutf8",
        " spaced ",
        "c1\xC2\x85next",
        "del\x7Fname",
        "back\\slash\\",
        // Escapes past the first eight bytes and at block edges (the JSON writer skips clean 8-byte blocks).
        std::string("model.layers.10.self_attn\"q\\k\tv\x01.weight_after_escapes_\x1f"),
        "0123456\"89abcdef\\",
    };
    return names;
}

// What people see of a name in the text, Markdown and CSV reports, which terminals print
// (util/terminal_text.h): \t \n \r, \xNN for other C0 controls, DEL and C1 controls, and \xNN for each
// byte that is not UTF-8; the rest as it is. Written here from the bytes, not with the helper.
QString shown(const std::string& raw)
{
    QString out;
    for (size_t i = 0; i < raw.size();) {
        const auto c = static_cast<unsigned char>(raw[i]);
        const size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        const QByteArray seq = QByteArray::fromStdString(raw.substr(i, std::max<size_t>(n, 1)));
        const QString decoded = QString::fromUtf8(seq);
        const bool valid
            = n > 0 && size_t(seq.size()) == n && !decoded.contains(QChar(0xfffd)) && decoded.toUtf8() == seq;
        const char32_t cp = valid ? decoded.toUcs4().value(0) : c;
        if (!valid || cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) {
            out += cp == '\t' ? QStringLiteral("\\t")
                : cp == '\n'  ? QStringLiteral("\\n")
                : cp == '\r'  ? QStringLiteral("\\r")
                              : QStringLiteral("\\x%1").arg(uint(cp), 2, 16, QChar('0'));
            i += valid ? n : 1;
        } else {
            out += decoded;
            i += n;
        }
    }
    return out;
}

// What people see of a name in HTML and JUnit (their documented mapping): invalid UTF-8 as U+FFFD, C0
// controls and DEL as their control pictures, C1 controls as U+FFFD.
QString visible(const std::string& raw)
{
    const QString s = q(raw);
    QString out;
    for (QChar c : s) {
        const char16_t u = c.unicode();
        if (u < 0x20)
            out += QChar(char16_t(0x2400 + u));
        else if (u == 0x7f)
            out += QChar(char16_t(0x2421));
        else if (u >= 0x80 && u <= 0x9f)
            out += QChar(char16_t(0xfffd));
        else
            out += c;
    }
    return out;
}

// RFC 4180: records end in CRLF, fields are quoted when they hold a comma, quote or line break, quotes
// inside doubled. Anything else (a quote inside an unquoted field, text after a closing quote, a bare CR
// or LF, a last record without CRLF) is malformed: nullopt.
std::optional<QList<QStringList>> parseCsv(const QByteArray& data)
{
    QList<QStringList> records;
    QStringList fields;
    qsizetype i = 0;
    const qsizetype n = data.size();
    while (i < n) {
        QByteArray field;
        if (data[i] == '"') {
            ++i;
            for (;;) {
                if (i >= n)
                    return std::nullopt; // unterminated
                if (data[i] == '"') {
                    if (i + 1 < n && data[i + 1] == '"') {
                        field += '"';
                        i += 2;
                        continue;
                    }
                    ++i;
                    break;
                }
                field += data[i++];
            }
        } else {
            while (i < n && data[i] != ',' && data[i] != '\r') {
                if (data[i] == '"' || data[i] == '\n')
                    return std::nullopt;
                field += data[i++];
            }
        }
        fields << QString::fromUtf8(field);
        if (i >= n)
            return std::nullopt; // no CRLF after the last record
        if (data[i] == ',') {
            ++i;
            if (i >= n)
                return std::nullopt;
            continue;
        }
        if (data[i] != '\r' || i + 1 >= n || data[i + 1] != '\n')
            return std::nullopt;
        i += 2;
        records << fields;
        fields.clear();
    }
    return records;
}

// GFM splits table rows at pipes that are not backslash-escaped.
QStringList markdownCells(const QString& line)
{
    QStringList cells;
    QString cell;
    for (qsizetype i = 0; i < line.size(); ++i) {
        if (line[i] == '|' && (i == 0 || line[i - 1] != '\\')) {
            cells << cell;
            cell.clear();
        } else {
            cell += line[i];
        }
    }
    cells << cell;
    return cells; // the first and last are what lies outside the outer pipes
}

// The literal text of a cell that is one code span (CommonMark: strip the fences, then one space at each
// end when both are spaces; GFM: `\|` is a pipe).
std::optional<QString> codeSpanText(QString cell)
{
    cell = cell.trimmed();
    qsizetype fence = 0;
    while (fence < cell.size() && cell[fence] == '`')
        ++fence;
    if (fence == 0 || cell.size() < 2 * fence || cell.right(fence) != QString(fence, '`'))
        return std::nullopt;
    QString inner = cell.mid(fence, cell.size() - 2 * fence);
    if (inner.size() >= 2 && inner.front() == ' ' && inner.back() == ' ' && inner.trimmed().size() > 0)
        inner = inner.mid(1, inner.size() - 2);
    return inner.replace(QStringLiteral("\\|"), QStringLiteral("|"));
}

QString shapeText(const Entry* e) { return e && e->shapeKnown ? q(shapeToString(e->shape)) : QString(); }

template <typename Index> const Entry* entryAt(const Source& s, Index i) { return i.valid() ? &s.entries[i.get()] : nullptr; }

QString dtypeText(const Entry* e)
{
    if (!e)
        return {};
    return e->kind == EntryKind::Object ? QStringLiteral("object") : q(dtypeName(e->dtype));
}

struct Fixture {
    Source a, b;
    RuleSet rules;
    DiffResult diff;
    std::vector<RuleIssue> issues;
    std::vector<Suggestion> suggestions;

    DiffReportInput input(bool failOnDtype = false) const
    {
        return DiffReportInput { a, b, rules, diff, &issues, &suggestions, failOnDtype };
    }
};

// A torch.compile'd checkpoint (A) against its model (B), with every status present.
Fixture makeFixture()
{
    Fixture f;
    f.a.path = "runs/ckpt \"final\" <v2>.pt";
    f.a.format = SourceFormat::TorchZip;
    f.b.path = "model|live.sldump.json";
    f.b.format = SourceFormat::LiveDump;
    auto& A = f.a.entries;
    auto& B = f.b.entries;
    A.push_back(makeEntry("_orig_mod.embed.weight", { 100, 32 }));
    B.push_back(makeEntry("embed.weight", { 100, 32 }));
    for (int i = 0; i < 4; ++i) {
        const std::string l = "layers." + std::to_string(i) + ".";
        A.push_back(makeEntry("_orig_mod." + l + "attn.q.weight", { 32, 32 }));
        B.push_back(makeEntry(l + "attn.q.weight", { 32, 32 }));
        A.push_back(makeEntry("_orig_mod." + l + "mlp.up.weight", { 64, 32 })); // shape_mismatch
        B.push_back(makeEntry(l + "mlp.up.weight", { 128, 32 }));
        A.push_back(makeEntry("_orig_mod." + l + "norm.weight", { 32 }, DType::BFloat16)); // dtype_mismatch
        B.push_back(makeEntry(l + "norm.weight", { 32 }));
        B.push_back(makeEntry(l + "attn.k.weight", { 32, 32 })); // missing
    }
    A.push_back(makeEntry("_orig_mod.rotary.inv_freq", { 16 })); // dropped
    A.push_back(makeEntry("_orig_mod.old_head.weight", { 10, 32 })); // unexpected
    B.push_back(makeEntry("head.bias", { 10 })); // missing
    for (int i = 0; i < 4; ++i) { // a systematic rename the suggestions find
        A.push_back(makeEntry("encoder.blocks." + std::to_string(i) + ".fc.weight", { 16, 8 }));
        B.push_back(makeEntry("encoder.layers." + std::to_string(i) + ".fc.weight", { 16, 8 }));
    }
    A.push_back(makeEntry("_orig_mod.proj.weight", { 8, 8 }, DType::BFloat16)); // copy_error: a torchao subclass
    A.back().typeName = "torchao.dtypes.affine_quantized_tensor.AffineQuantizedTensor";
    B.push_back(makeEntry("proj.weight", { 8, 8 }, DType::BFloat16));
    A.push_back(makeEntry("dup1.w", { 3 })); // both map onto dup.w: a collision
    A.push_back(makeEntry("dup2.w", { 3 }));
    B.push_back(makeEntry("dup.w", { 3 }));
    for (const std::string& w : awkwardNames()) {
        A.push_back(makeEntry(w + ".m", { 2, 3 }));
        B.push_back(makeEntry(w + ".m", { 2, 3 }));
        A.push_back(makeEntry(w + ".u", { 4 }, DType::Float16));
        B.push_back(makeEntry(w + ".x", { 5 }, DType::Int64));
    }
    Rule strip;
    strip.pattern = "^_orig_mod\\.";
    strip.note = "torch.compile's prefix | `_orig_mod.` <b>";
    Rule drop;
    drop.pattern = "\\.inv_freq$";
    drop.drop = true;
    Rule unused;
    unused.pattern = "^=never\\.(\\d+)";
    unused.replacement = "@never.\\1";
    Rule disabled;
    disabled.pattern = "^layers\\.";
    disabled.replacement = "blocks.";
    disabled.enabled = false;
    Rule collide;
    collide.pattern = "^dup[12]\\.";
    collide.replacement = "dup.";
    f.rules.rules = { strip, drop, unused, disabled, collide };
    f.diff = diffSources(f.a, f.b, f.rules);
    f.issues = checkRules(f.rules, f.a, f.b);
    f.suggestions = suggestRules(f.a, f.b, f.rules);
    return f;
}

size_t nonMatchRows(const DiffSummary& s)
{
    size_t n = 0;
    for (size_t i = 1; i < kRowStatusCount; ++i)
        n += s.counts[i];
    return n;
}

// The test's own reading of torch's strict load_state_dict (not the production rowFails): missing and
// unexpected keys are errors, a shape mismatch or a failed copy raises, a dtype difference is cast (and
// counts as a failure only with --fail-on-dtype).
bool failsStrictLoad(RowStatus s, bool failOnDtype)
{
    return s == RowStatus::Missing || s == RowStatus::Unexpected || s == RowStatus::ShapeMismatch
        || s == RowStatus::CopyError || (failOnDtype && s == RowStatus::DtypeMismatch);
}

size_t failingRows(const DiffSummary& s, bool failOnDtype)
{
    size_t n = 0;
    for (size_t i = 0; i < kRowStatusCount; ++i)
        n += failsStrictLoad(RowStatus(i), failOnDtype) ? s.counts[i] : 0;
    return n;
}

// The verdict line a report ends with when the load fails, from the counts: the failing statuses in the
// order torch raises them (sizes, copies, then the key lists), dtype casts after.
QString expectedFailingVerdict(const DiffSummary& s)
{
    QStringList failing;
    for (RowStatus st : { RowStatus::ShapeMismatch, RowStatus::CopyError, RowStatus::Missing, RowStatus::Unexpected })
        if (s.counts[size_t(st)])
            failing << QStringLiteral("%1 %2").arg(s.counts[size_t(st)]).arg(q(rowStatusName(st)));
    QString out = QStringLiteral("a strict load_state_dict would fail: ") + failing.join(QStringLiteral(", "));
    if (const size_t casts = s.counts[size_t(RowStatus::DtypeMismatch)])
        out += QStringLiteral("; %1 dtype_mismatch (cast on load)").arg(casts);
    return out;
}

} // namespace

class TestDiffReport : public QObject {
    Q_OBJECT

    Fixture m_f;

private slots:
    void initTestCase()
    {
        m_f = makeFixture();
        // The fixture is only useful when every status is there (the diff engine is tested elsewhere).
        for (size_t i = 0; i < kRowStatusCount; ++i)
            QVERIFY2(m_f.diff.summary.counts[i] > 0, rowStatusName(RowStatus(i)).data());
        QVERIFY(std::any_of(m_f.issues.begin(), m_f.issues.end(), [](const RuleIssue& i) { return i.severity == Severity::Danger; }));
        QVERIFY(std::any_of(m_f.issues.begin(), m_f.issues.end(), [](const RuleIssue& i) { return i.severity != Severity::Danger; }));
        QVERIFY(!m_f.suggestions.empty());
        // STATELENS_DIFF_REPORT_DUMP=dir keeps the fixture's documents for a look by eye.
        if (const QString dir = qEnvironmentVariable("STATELENS_DIFF_REPORT_DUMP"); !dir.isEmpty()) {
            for (auto f : { DiffReportFormat::Text, DiffReportFormat::Json, DiffReportFormat::Markdown, DiffReportFormat::Csv,
                     DiffReportFormat::Html, DiffReportFormat::Junit }) {
                QFile file(dir + "/diff." + q(diffReportFormatName(f)));
                QVERIFY(file.open(QIODevice::WriteOnly));
                file.write(bytes(renderDiffReport(m_f.input(), f)));
            }
        }
    }

    void json()
    {
        const std::string text = diffToJson(m_f.input());
        QJsonParseError error;
        const QJsonDocument doc = QJsonDocument::fromJson(bytes(text), &error);
        QVERIFY2(error.error == QJsonParseError::NoError, qPrintable(error.errorString()));
        const QJsonObject root = doc.object();
        const QStringList keys = root.keys();
        QCOMPARE(QSet<QString>(keys.begin(), keys.end()),
            (QSet<QString> { "a", "b", "source_findings", "rules", "summary", "rows", "folded", "rule_issues", "suggestions" }));
        QCOMPARE(root["a"].toObject()["path"].toString(), q(m_f.a.path));
        QCOMPARE(root["b"].toObject()["format"].toString(), QStringLiteral("live-dump"));

        const QJsonObject summary = root["summary"].toObject();
        QCOMPARE(summary.size(), qsizetype(kRowStatusCount + 1));
        for (size_t i = 0; i < kRowStatusCount; ++i)
            QCOMPARE(summary[q(rowStatusName(RowStatus(i)))].toInteger(), qint64(m_f.diff.summary.counts[i]));
        QCOMPARE(summary["load_succeeds"].toBool(), failingRows(m_f.diff.summary, false) == 0);
        QVERIFY(summary["load_succeeds"].isBool());

        const QJsonArray rules = root["rules"].toArray();
        QCOMPARE(rules.size(), qsizetype(m_f.rules.rules.size()));
        for (qsizetype k = 0; k < rules.size(); ++k) {
            const Rule& r = m_f.rules.rules[size_t(k)];
            const QJsonObject o = rules[k].toObject();
            QCOMPARE(o["pattern"].toString(), q(r.pattern));
            QCOMPARE(o["replace"].toString(), q(r.replacement));
            QCOMPARE(o["drop"].toBool(), r.drop);
            QCOMPARE(o["enabled"].toBool(), r.enabled);
            QCOMPARE(o["note"].toString(), q(r.note));
        }

        const QJsonArray rows = root["rows"].toArray();
        QCOMPARE(rows.size(), qsizetype(m_f.diff.rows.size()));
        const QStringList rowKeys { "status", "a", "b", "reason", "explanation", "rule", "partner", "suggestion", "a_shape", "b_shape", "a_dtype", "b_dtype" };
        for (qsizetype i = 0; i < rows.size(); ++i) {
            const DiffRow& row = m_f.diff.rows[size_t(i)];
            const QJsonObject o = rows[i].toObject();
            QCOMPARE(o.size(), rowKeys.size());
            for (const QString& key : rowKeys)
                QVERIFY2(o.contains(key), qPrintable(key));
            const Entry* ea = entryAt(m_f.a, row.a);
            const Entry* eb = entryAt(m_f.b, row.b);
            QCOMPARE(o["status"].toString(), q(rowStatusName(row.status)));
            QCOMPARE(o["a"].isNull(), ea == nullptr);
            QCOMPARE(o["b"].isNull(), eb == nullptr);
            if (ea)
                QCOMPARE(o["a"].toString(), q(ea->name)); // the original name, before the rules
            if (eb)
                QCOMPARE(o["b"].toString(), q(eb->name));
            QCOMPARE(o["reason"].isNull(), row.reason == Reason::None);
            if (row.reason != Reason::None)
                QCOMPARE(o["reason"].toString(), q(reasonName(row.reason)));
            QCOMPARE(o["explanation"].isNull(), row.explanation.empty());
            if (!row.explanation.empty())
                QCOMPARE(o["explanation"].toString(), q(row.explanation));
            QCOMPARE(o["partner"].isNull(), !row.partner.valid());
            if (row.partner.valid())
                QCOMPARE(o["partner"].toInteger(), row.partner.number());
            QCOMPARE(o["suggestion"].isNull(), !row.suggestion.valid());
            QCOMPARE(o["rule"].isNull(), !row.rule.valid());
            if (row.rule.valid()) {
                // 0-based into "rules"; explanations number rules from 1.
                QCOMPARE(o["rule"].toInteger(), row.rule.number());
                QVERIFY(row.rule.number() < rules.size());
                if (row.status == RowStatus::Renamed)
                    QVERIFY2(o["explanation"].toString().contains(QStringLiteral("rule %1").arg(row.rule.get() + 1)), qPrintable(o["explanation"].toString()));
            }
            for (const auto& [side, e] : { std::pair { QStringLiteral("a"), ea }, std::pair { QStringLiteral("b"), eb } }) {
                const QJsonValue shape = o[side + "_shape"];
                QCOMPARE(shape.isNull(), !(e && e->shapeKnown));
                if (e) {
                    QStringList dims;
                    for (const auto& d : shape.toArray())
                        dims << QString::number(d.toInteger());
                    QCOMPARE("[" + dims.join(", ") + "]", shapeText(e));
                    QCOMPARE(o[side + "_dtype"].toString(), dtypeText(e));
                } else {
                    QVERIFY(o[side + "_dtype"].isNull());
                }
            }
        }

        // Folded rows account for every row once, statuses agreeing.
        const QJsonArray folded = root["folded"].toArray();
        const std::vector<FoldedRow> expectedFolded = foldRows(m_f.diff, m_f.a, m_f.b);
        QCOMPARE(folded.size(), qsizetype(expectedFolded.size()));
        qint64 total = 0;
        size_t perStatus[kRowStatusCount] = {};
        for (qsizetype i = 0; i < folded.size(); ++i) {
            const QJsonObject o = folded[i].toObject();
            QCOMPARE(o["name"].toString(), q(expectedFolded[size_t(i)].name));
            QCOMPARE(o["status"].toString(), q(rowStatusName(expectedFolded[size_t(i)].status)));
            QVERIFY(o.contains("reason"));
            // A line that shows rows of the other side (a pair) counts its own rows in "count" and those in
            // "partner_count", of the other status (missing against unexpected).
            const bool pair = !o["partner_name"].isNull();
            QCOMPARE(o["partner_name"].toString(), q(expectedFolded[size_t(i)].partnerName));
            QCOMPARE(o["partner_count"].toInteger() > 0, pair);
            total += o["count"].toInteger() + o["partner_count"].toInteger();
            for (size_t k = 0; k < kRowStatusCount; ++k)
                if (o["status"].toString() == q(rowStatusName(RowStatus(k))))
                    perStatus[k] += size_t(o["count"].toInteger());
            if (pair) {
                const bool missing = o["status"].toString() == QStringLiteral("missing");
                QVERIFY(missing || o["status"].toString() == QStringLiteral("unexpected"));
                perStatus[size_t(missing ? RowStatus::Unexpected : RowStatus::Missing)] += size_t(o["partner_count"].toInteger());
            }
        }
        QCOMPARE(total, qint64(m_f.diff.rows.size()));
        for (size_t k = 0; k < kRowStatusCount; ++k)
            QCOMPARE(perStatus[k], m_f.diff.summary.counts[k]);
        QVERIFY([&] {
            for (const auto& v : folded) {
                const QJsonObject o = v.toObject();
                if (o["name"] == QStringLiteral("layers.{0..3}.mlp.up.weight") && o["status"] == QStringLiteral("shape_mismatch") && o["count"].toInt() == 4)
                    return true;
            }
            return false;
        }());

        const QJsonArray issues = root["rule_issues"].toArray();
        QCOMPARE(issues.size(), qsizetype(m_f.issues.size()));
        for (qsizetype i = 0; i < issues.size(); ++i) {
            const RuleIssue& issue = m_f.issues[size_t(i)];
            const QJsonObject o = issues[i].toObject();
            QCOMPARE(o["kind"].toString(), q(ruleIssueKindName(issue.kind)));
            QCOMPARE(o["severity"].toString(), q(severityName(issue.severity)));
            QCOMPARE(o["rule"].isNull(), !issue.rule.valid());
            if (issue.rule.valid())
                QCOMPARE(qint64(o["rule"].toInt()), issue.rule.number());
            QCOMPARE(o["message"].toString(), q(issue.message));
            QCOMPARE(o["examples"].toArray().size(), qsizetype(issue.examples.size()));
        }
        const QJsonArray suggestions = root["suggestions"].toArray();
        QCOMPARE(suggestions.size(), qsizetype(m_f.suggestions.size()));
        for (qsizetype i = 0; i < suggestions.size(); ++i) {
            const QJsonObject o = suggestions[i].toObject();
            QCOMPARE(o["title"].toString(), q(m_f.suggestions[size_t(i)].title));
            QCOMPARE(o["resolves"].toInteger(), qint64(m_f.suggestions[size_t(i)].resolves));
            QCOMPARE(o["rules"].toArray().size(), qsizetype(m_f.suggestions[size_t(i)].rules.size()));
        }
    }

    // Every awkward name comes back exactly (invalid UTF-8 as U+FFFD, which is what valid JSON can say).
    void jsonNames()
    {
        const QJsonDocument doc = QJsonDocument::fromJson(bytes(diffToJson(m_f.input())));
        QSet<QString> names;
        for (const auto& v : doc.object()["rows"].toArray()) {
            names << v.toObject()["a"].toString();
            names << v.toObject()["b"].toString();
        }
        for (const std::string& w : awkwardNames()) {
            for (const char* suffix : { ".m", ".u", ".x" })
                QVERIFY2(names.contains(q(w + suffix)), qPrintable(visible(w + suffix)));
        }
        QVERIFY(names.contains(QStringLiteral("bad\uFFFDutf8.u")));
    }

    void jsonFailOnDtypeAndRuleErrors()
    {
        // Only a dtype difference: a strict load casts, so it succeeds unless dtypes count as failures.
        Source a, b;
        a.entries = { makeEntry("w", { 2 }, DType::BFloat16) };
        b.entries = { makeEntry("w", { 2 }, DType::Float32) };
        RuleSet rules;
        Rule broken;
        broken.pattern = "(unclosed";
        rules.rules = { broken };
        const DiffResult diff = diffSources(a, b, rules);
        QVERIFY(!diff.ruleErrors.empty());
        for (bool failOnDtype : { false, true }) {
            const DiffReportInput in { a, b, rules, diff, nullptr, nullptr, failOnDtype };
            const QJsonObject root = QJsonDocument::fromJson(bytes(diffToJson(in))).object();
            QCOMPARE(root["summary"].toObject()["load_succeeds"].toBool(), !failOnDtype);
            QCOMPARE(root["summary"].toObject()["dtype_mismatch"].toInt(), 1);
            // Without checkRules' issues the compile errors still reach the report.
            const QJsonArray issues = root["rule_issues"].toArray();
            QCOMPARE(issues.size(), qsizetype(diff.ruleErrors.size()));
            QCOMPARE(issues[0].toObject()["kind"].toString(), QStringLiteral("invalid"));
            QCOMPARE(issues[0].toObject()["rule"].toInt(), 0);
            QCOMPARE(root["suggestions"].toArray().size(), 0);
            const std::string verdict = diffVerdict(diff.summary, failOnDtype);
            QCOMPARE(verdict.find("would fail") != std::string::npos, failOnDtype);
            QVERIFY(verdict.rfind("a strict load_state_dict would ", 0) == 0);
        }
    }

    // The fixture's encoder.blocks.i keys are the model's encoder.layers.i (built so above): with the pending
    // suggestions marked, every format shows each pair on one line, A's name beside B's.
    void pairsSideBySide()
    {
        Fixture f = makeFixture();
        markPendingSuggestions(f.diff, f.a, f.b, f.rules.mode, f.suggestions);
        size_t blocks = f.suggestions.size();
        for (size_t i = 0; i < f.suggestions.size(); ++i)
            if (f.suggestions[i].title.find("blocks") != std::string::npos)
                blocks = i;
        QVERIFY(blocks < f.suggestions.size());
        const std::string number = std::to_string(blocks + 1);

        const QString text = q(diffToText(f.input()));
        const QString line = QStringLiteral("  encoder.blocks.{0..3}.fc.weight  ->  encoder.layers.{0..3}.fc.weight  (4 pairs)");
        QVERIFY2(text.contains(line), qPrintable(text));
        QVERIFY2(text.contains(QStringLiteral("pending: suggestion ") + q(number)), qPrintable(text));

        const QString md = q(diffToMarkdown(f.input()));
        QVERIFY2(md.contains(QStringLiteral("| `encoder.blocks.{0..3}.fc.weight` | `encoder.layers.{0..3}.fc.weight` | 8 |")), qPrintable(md));

        const std::string html = diffToHtml(f.input());
        QXmlStreamReader xml(bytes(html));
        while (!xml.atEnd())
            xml.readNext();
        QVERIFY2(!xml.hasError(), qPrintable(xml.errorString()));
        QVERIFY(q(html).contains(QStringLiteral("encoder.blocks.{0..3}.fc.weight</span> \u2192 <span class=\"name\">encoder.layers.{0..3}.fc.weight")));

        // JSON: each row names its partner's index, both ways.
        const QJsonArray rows = QJsonDocument::fromJson(bytes(diffToJson(f.input()))).object()["rows"].toArray();
        qsizetype fromA = -1, toB = -1;
        for (qsizetype i = 0; i < rows.size(); ++i) {
            const QJsonObject o = rows[i].toObject();
            if (o["a"].toString() == QStringLiteral("encoder.blocks.2.fc.weight"))
                fromA = i;
            if (o["b"].toString() == QStringLiteral("encoder.layers.2.fc.weight"))
                toB = i;
        }
        QVERIFY(fromA >= 0 && toB >= 0 && fromA != toB);
        QCOMPARE(rows[fromA].toObject()["partner"].toInteger(), qint64(toB));
        QCOMPARE(rows[toB].toObject()["partner"].toInteger(), qint64(fromA));
        QCOMPARE(rows[fromA].toObject()["suggestion"].toInteger(), qint64(blocks));
        QCOMPARE(rows[fromA].toObject()["reason"].toString(), QStringLiteral("suggested_rename"));
    }

    void text()
    {
        const std::string out = diffToText(m_f.input());
        const QString t = q(out);
        const QStringList lines = t.split('\n');
        // Summary first: every non-zero count with its status.
        for (size_t i = 0; i < kRowStatusCount; ++i) {
            const QString needle = QStringLiteral("%1 %2").arg(m_f.diff.summary.counts[i]).arg(q(rowStatusName(RowStatus(i))));
            QVERIFY2(lines.first().contains(needle), qPrintable(lines.first() + " lacks " + needle));
        }
        // The verdict last.
        QCOMPARE(lines.last(), QString());
        const QString verdict = lines[lines.size() - 2];
        QVERIFY2(verdict.startsWith(QStringLiteral("a strict load_state_dict would fail: ")), qPrintable(verdict));
        QVERIFY(failingRows(m_f.diff.summary, false) > 0);
        QCOMPARE(verdict, expectedFailingVerdict(m_f.diff.summary));
        // Nothing that could drive a terminal (C0, DEL, C1).
        for (char16_t c : t.toStdU16String())
            QVERIFY2((c >= 0x20 && c != 0x7f && (c < 0x80 || c > 0x9f)) || c == '\n', qPrintable(QString::number(int(c), 16)));
        QVERIFY(t.contains(QStringLiteral("layers.{0..3}.mlp.up.weight  (4 rows)")));
        QVERIFY(t.contains(QStringLiteral("checkpoint [64, 32] float32, model [128, 32] float32")));
        // Non-match rows are listed, matches are not.
        for (const std::string& w : awkwardNames()) {
            QVERIFY2(t.contains(shown(w + ".u")), qPrintable(shown(w + ".u")));
            QVERIFY2(t.contains(shown(w + ".x")), qPrintable(shown(w + ".x")));
            QVERIFY2(!t.contains(shown(w + ".m")), qPrintable(shown(w + ".m")));
        }
        for (const RuleIssue& issue : m_f.issues)
            QVERIFY(t.contains(shown(issue.message)));
        for (const Suggestion& s : m_f.suggestions)
            QVERIFY(t.contains(shown(s.title)));
        // Differences in the order of importance: shape mismatches before renames.
        QVERIFY(t.indexOf(QStringLiteral("\nshape_mismatch (")) < t.indexOf(QStringLiteral("\nrenamed (")));
    }

    void markdown()
    {
        const QString md = q(diffToMarkdown(m_f.input()));
        const QStringList lines = md.split('\n');
        // Every table keeps its header's column count on every line.
        int tables = 0;
        qsizetype columns = -1;
        for (const QString& line : lines) {
            if (!line.startsWith('|')) {
                columns = -1;
                continue;
            }
            const QStringList cells = markdownCells(line);
            QVERIFY2(cells.first().isEmpty() && cells.last().isEmpty(), qPrintable(line));
            if (columns < 0) {
                columns = cells.size();
                ++tables;
            }
            QVERIFY2(cells.size() == columns, qPrintable(QStringLiteral("%1 cells, expected %2: ").arg(cells.size()).arg(columns) + line));
        }
        // sources, summary, differences, rules, rule issues, suggestions (when there are any)
        QCOMPARE(tables, m_f.suggestions.empty() ? 5 : 6);

        // The differences table names every folded non-match row (status and name), literally, in a code span.
        QStringList listed;
        bool inDifferences = false;
        for (const QString& line : lines) {
            if (line.startsWith(QStringLiteral("## ")))
                inDifferences = line == QStringLiteral("## Differences");
            if (!inDifferences || !line.startsWith(QStringLiteral("| ")) || line.startsWith(QStringLiteral("| status")))
                continue;
            const QStringList cells = markdownCells(line);
            const auto name = codeSpanText(cells[2]);
            QVERIFY2(name.has_value(), qPrintable(line));
            listed << cells[1].trimmed() + " " + *name;
        }
        QStringList expected;
        for (const FoldedRow& f : foldRows(m_f.diff, m_f.a, m_f.b))
            if (f.status != RowStatus::Match)
                expected << q(rowStatusName(f.status)) + " " + shown(f.name);
        listed.sort();
        expected.sort();
        QCOMPARE(listed, expected);

        // Outside code spans nothing is markup: no raw tag (but the <br> we write between rules).
        QString prose = md;
        prose.remove(QRegularExpression(QStringLiteral("(`+)(?:(?!\\1).)+?\\1")));
        prose.remove(QStringLiteral("<br>"));
        QVERIFY2(!QRegularExpression(QStringLiteral("(?<!\\\\)<")).match(prose).hasMatch(), qPrintable(prose));
        for (size_t k = 0; k < kRowStatusCount; ++k)
            QVERIFY(md.contains(QStringLiteral("| %1 | %2 |").arg(q(rowStatusName(RowStatus(k)))).arg(m_f.diff.summary.counts[k])));
        for (char16_t c : md.toStdU16String())
            QVERIFY((c >= 0x20 && c != 0x7f && (c < 0x80 || c > 0x9f)) || c == '\n');
    }

    void csv()
    {
        const std::string out = diffToCsv(m_f.input());
        const auto parsed = parseCsv(bytes(out));
        QVERIFY2(parsed.has_value(), "not RFC 4180");
        // CSV goes to terminals too: nothing that could drive one but the record ends.
        for (char16_t c : q(out).toStdU16String())
            QVERIFY2((c >= 0x20 && c != 0x7f && (c < 0x80 || c > 0x9f)) || c == '\n' || c == '\r',
                qPrintable(QString::number(int(c), 16)));
        const QList<QStringList>& records = *parsed;
        QCOMPARE(records.size(), qsizetype(m_f.diff.rows.size() + 1));
        QCOMPARE(records[0].join(','), QStringLiteral("status,a,b,reason,rule,a_shape,b_shape,a_dtype,b_dtype,explanation"));
        // A cell that starts a formula carries the apostrophe; take it off to compare.
        // Control characters are shown escaped, as in the text report (a tab or CR no longer leads a cell).
        auto expectCell = [](const QString& cell, const std::string& raw) {
            const QString text = shown(raw);
            const bool formula = !text.isEmpty() && QStringLiteral("=+-@").contains(text.front());
            return cell == (formula ? "'" + text : text);
        };
        int guarded = 0;
        for (qsizetype i = 1; i < records.size(); ++i) {
            const QStringList& r = records[i];
            const DiffRow& row = m_f.diff.rows[size_t(i - 1)];
            QCOMPARE(r.size(), 10);
            const Entry* ea = entryAt(m_f.a, row.a);
            const Entry* eb = entryAt(m_f.b, row.b);
            QCOMPARE(r[0], q(rowStatusName(row.status)));
            QVERIFY2(expectCell(r[1], ea ? ea->name : std::string()), qPrintable(r[1]));
            QVERIFY2(expectCell(r[2], eb ? eb->name : std::string()), qPrintable(r[2]));
            QCOMPARE(r[3], q(reasonName(row.reason)));
            QCOMPARE(r[4], row.rule.valid() ? QString::number(row.rule.number()) : QString());
            QCOMPARE(r[5], shapeText(ea));
            QCOMPARE(r[6], shapeText(eb));
            QCOMPARE(r[7], dtypeText(ea));
            QCOMPARE(r[8], dtypeText(eb));
            QVERIFY(expectCell(r[9], row.explanation));
            for (const QString& cell : r) {
                QVERIFY2(cell.isEmpty() || !QStringLiteral("=+-@\t\r").contains(cell.front()), qPrintable(cell));
                guarded += cell.startsWith('\'') ? 1 : 0;
            }
        }
        QVERIFY(guarded >= 8); // = + - @ names, each on at least two rows
    }

    void html()
    {
        const std::string out = diffToHtml(m_f.input());
        // Nothing from the network, and nothing a browser would fetch.
        for (const char* banned : { "http://", "https://", "//cdn", "url(", "@import", " src=", " href=", " style=" })
            QVERIFY2(out.find(banned) == std::string::npos, banned);
        for (char c : out)
            QVERIFY(static_cast<unsigned char>(c) >= 0x20 || c == '\n');

        const QSet<QString> allowed { "html", "head", "meta", "title", "style", "body", "h1", "h2", "table", "thead", "tbody", "tr", "th", "td",
            "code", "p", "div", "label", "input", "b", "br", "details", "summary", "span", "script" };
        QXmlStreamReader x(bytes(out));
        int scripts = 0, styles = 0, groups = 0, rowsListed = 0;
        bool inGroup = false;
        QString csp, scriptText, styleText;
        QSet<QString> cellTexts;
        qint64 counts[kRowStatusCount] = {};
        QStringList verdicts;
        QStringList toggledOn;
        while (!x.atEnd()) {
            const auto token = x.readNext();
            if (token == QXmlStreamReader::EndElement && x.name() == QStringLiteral("details"))
                inGroup = false;
            if (token != QXmlStreamReader::StartElement)
                continue;
            const QString name = x.name().toString();
            QVERIFY2(allowed.contains(name), qPrintable(name));
            const QXmlStreamAttributes attrs = x.attributes();
            for (const auto& attr : attrs)
                QVERIFY2(!attr.name().startsWith(QStringLiteral("on")), qPrintable(attr.name().toString()));
            const QString cls = attrs.value(QStringLiteral("class")).toString();
            if (name == "input" && attrs.hasAttribute(QStringLiteral("data-status")) && attrs.value(QStringLiteral("checked")) == QStringLiteral("checked"))
                toggledOn << attrs.value(QStringLiteral("data-status")).toString();
            if (name == "meta" && attrs.value(QStringLiteral("http-equiv")) == QStringLiteral("Content-Security-Policy"))
                csp = attrs.value(QStringLiteral("content")).toString();
            else if (name == "script") {
                ++scripts;
                scriptText = x.readElementText();
            } else if (name == "style") {
                ++styles;
                styleText = x.readElementText();
            } else if (name == "details" && cls == QStringLiteral("group")) {
                ++groups;
                inGroup = true;
            } else if (name == "tr" && inGroup)
                ++rowsListed;
            else if (name == "td" && cls == QStringLiteral("mono"))
                cellTexts << x.readElementText(QXmlStreamReader::IncludeChildElements);
            else if (name == "p" && cls.startsWith(QStringLiteral("verdict")))
                verdicts << cls;
            else if (name == "b" && cls == QStringLiteral("summary-count")) {
                const QString status = attrs.value(QStringLiteral("data-status")).toString();
                for (size_t k = 0; k < kRowStatusCount; ++k)
                    if (status == q(rowStatusName(RowStatus(k))))
                        counts[k] = x.readElementText().toLongLong();
            }
        }
        QVERIFY2(!x.hasError(), qPrintable(QStringLiteral("line %1: ").arg(x.lineNumber()) + x.errorString()));
        QCOMPARE(scripts, 1);
        QCOMPARE(styles, 1);
        QCOMPARE(verdicts, QStringList { QStringLiteral("verdict fail") });
        // Every status has a toggle; all but matches start shown.
        QStringList differenceStatuses;
        for (size_t k = 1; k < kRowStatusCount; ++k)
            differenceStatuses << q(rowStatusName(RowStatus(k)));
        QCOMPARE(toggledOn, differenceStatuses);
        for (size_t k = 0; k < kRowStatusCount; ++k)
            QCOMPARE(counts[k], qint64(m_f.diff.summary.counts[k]));
        QCOMPARE(size_t(groups), foldRows(m_f.diff, m_f.a, m_f.b).size());
        // One header row per group table and one row per diff row (groups are small here).
        QCOMPARE(size_t(rowsListed), m_f.diff.rows.size() + size_t(groups));

        // The policy allows exactly the inline style and script, by hash.
        auto hash = [](const QString& s) {
            return "'sha256-" + QCryptographicHash::hash(s.toUtf8(), QCryptographicHash::Sha256).toBase64() + "'";
        };
        QVERIFY2(csp.contains(QStringLiteral("default-src 'none'")), qPrintable(csp));
        QVERIFY2(csp.contains("style-src " + hash(styleText)), qPrintable(csp + " vs " + hash(styleText)));
        QVERIFY2(csp.contains("script-src " + hash(scriptText)), qPrintable(csp + " vs " + hash(scriptText)));
        QVERIFY(styleText.contains(QStringLiteral("prefers-color-scheme: dark")));

        for (const Entry& e : m_f.a.entries)
            QVERIFY2(cellTexts.contains(visible(e.name)), qPrintable(visible(e.name)));
        for (const Entry& e : m_f.b.entries)
            QVERIFY2(cellTexts.contains(visible(e.name)), qPrintable(visible(e.name)));
    }

    // The Content-Security-Policy names the SHA-256 of the page's style and script, which the build computes
    // (resources/cmake/embed_csp_text.cmake) from resources/report. Here the hashes come from Qt's SHA-256 and
    // base64 instead, over the bytes between the tags as the page holds them (what a browser hashes), and
    // those bytes are the files in resources/report exactly.
    void htmlPolicyHashesTheInlineStyleAndScript()
    {
        Source emptyA, emptyB;
        emptyA.path = "a.safetensors";
        emptyB.path = "b.safetensors";
        const RuleSet noRules;
        const DiffResult emptyDiff = diffSources(emptyA, emptyB, noRules);
        for (const DiffReportInput& in : { m_f.input(), m_f.input(true), DiffReportInput { emptyA, emptyB, noRules, emptyDiff } }) {
            const QByteArray page = bytes(diffToHtml(in));
            // The text of the page's one element with this tag (hostile names hold "<script>", escaped).
            auto text = [&page](const QByteArray& tag) {
                const QByteArray open = "<" + tag + ">", close = "</" + tag + ">";
                const qsizetype start = page.indexOf(open), end = page.indexOf(close);
                if (start < 0 || end < start || page.indexOf(open, start + 1) >= 0 || page.indexOf(close, end + 1) >= 0)
                    return QByteArray();
                return page.mid(start + open.size(), end - start - open.size());
            };
            const QByteArray style = text("style"), script = text("script");
            QVERIFY(!style.isEmpty());
            QVERIFY(!script.isEmpty());
            auto file = [](const char* name) {
                QFile f(sl::test::sourceDir() + QStringLiteral("/resources/report/") + QLatin1String(name));
                return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray("(unreadable)");
            };
            QCOMPARE(style, file("diff_report.css"));
            QCOMPARE(script, file("diff_report.js"));

            const QRegularExpression meta(QStringLiteral("<meta http-equiv=\"Content-Security-Policy\" content=\"([^\"]*)\"/>"));
            const QString page16 = QString::fromUtf8(page);
            QCOMPARE(page16.count(meta), 1);
            QMap<QString, QStringList> policy;
            for (const QString& directive : meta.match(page16).captured(1).split(QLatin1Char(';'), Qt::SkipEmptyParts)) {
                QStringList words = directive.split(QLatin1Char(' '), Qt::SkipEmptyParts);
                QVERIFY(!words.isEmpty());
                const QString name = words.takeFirst();
                QVERIFY2(!policy.contains(name), qPrintable(name));
                policy.insert(name, words);
            }
            auto source = [](const QByteArray& body) {
                return "'sha256-" + QString::fromLatin1(QCryptographicHash::hash(body, QCryptographicHash::Sha256).toBase64()) + "'";
            };
            QCOMPARE(policy.value(QStringLiteral("default-src")), QStringList { QStringLiteral("'none'") });
            QCOMPARE(policy.value(QStringLiteral("style-src")), QStringList { source(style) });
            QCOMPARE(policy.value(QStringLiteral("script-src")), QStringList { source(script) });
        }
    }

    void junit_data()
    {
        QTest::addColumn<bool>("failOnDtype");
        QTest::newRow("dtype passes") << false;
        QTest::newRow("fail on dtype") << true;
    }

    void junit()
    {
        QFETCH(bool, failOnDtype);
        const DiffSummary& s = m_f.diff.summary;
        const std::string out = diffToJunit(m_f.input(failOnDtype));
        QXmlStreamReader x(bytes(out));
        struct Suite {
            QString name;
            qint64 tests = 0, failures = 0, seenTests = 0, seenFailures = 0;
        };
        QList<Suite> suites;
        qint64 allTests = -1, allFailures = -1;
        QSet<QString> failingNames, passingNames;
        QString currentName, currentClass;
        while (!x.atEnd()) {
            if (x.readNext() != QXmlStreamReader::StartElement)
                continue;
            const auto attrs = x.attributes();
            if (x.name() == QStringLiteral("testsuites")) {
                allTests = attrs.value(QStringLiteral("tests")).toLongLong();
                allFailures = attrs.value(QStringLiteral("failures")).toLongLong();
            } else if (x.name() == QStringLiteral("testsuite")) {
                suites.append({ attrs.value(QStringLiteral("name")).toString(), attrs.value(QStringLiteral("tests")).toLongLong(),
                    attrs.value(QStringLiteral("failures")).toLongLong() });
            } else if (x.name() == QStringLiteral("testcase")) {
                QVERIFY(!suites.isEmpty());
                ++suites.last().seenTests;
                currentName = attrs.value(QStringLiteral("name")).toString();
                currentClass = attrs.value(QStringLiteral("classname")).toString();
                if (suites.last().name == QStringLiteral("load_state_dict"))
                    passingNames << currentName;
            } else if (x.name() == QStringLiteral("failure")) {
                ++suites.last().seenFailures;
                QVERIFY(!attrs.value(QStringLiteral("message")).isEmpty());
                QCOMPARE(attrs.value(QStringLiteral("type")).toString(), currentClass);
                passingNames.remove(currentName);
                failingNames << currentClass + ":" + currentName;
            }
        }
        QVERIFY2(!x.hasError(), qPrintable(QStringLiteral("line %1: ").arg(x.lineNumber()) + x.errorString()));
        QCOMPARE(suites.size(), 2);
        for (const Suite& suite : suites) {
            QCOMPARE(suite.tests, suite.seenTests);
            QCOMPARE(suite.failures, suite.seenFailures);
        }
        QCOMPARE(allTests, suites[0].tests + suites[1].tests);
        QCOMPARE(allFailures, suites[0].failures + suites[1].failures);

        // One testcase per row that is not a match, one for the load and one per source's findings (these
        // sources have no danger, so those pass); failures as documented.
        QCOMPARE(suites[0].name, QStringLiteral("load_state_dict"));
        QCOMPARE(size_t(suites[0].tests), nonMatchRows(s) + 3);
        const size_t failing = failingRows(s, failOnDtype);
        QCOMPARE(size_t(suites[0].failures), failing + (failing ? 1 : 0)); // and the load_state_dict case
        QVERIFY(failingNames.contains(QStringLiteral("load_state_dict:strict=True")));
        for (const std::string& w : awkwardNames()) {
            QVERIFY2(failingNames.contains("unexpected:" + visible(w + ".u")), qPrintable(visible(w + ".u")));
            QVERIFY2(failingNames.contains("missing:" + visible(w + ".x")), qPrintable(visible(w + ".x")));
        }
        QCOMPARE(failingNames.contains(QStringLiteral("dtype_mismatch:layers.0.norm.weight")), failOnDtype);
        QCOMPARE(passingNames.contains(QStringLiteral("layers.0.norm.weight")), !failOnDtype);
        QVERIFY(passingNames.contains(QStringLiteral("embed.weight"))); // renamed

        size_t dangers = 0;
        for (const RuleIssue& issue : m_f.issues)
            dangers += issue.severity == Severity::Danger ? 1 : 0;
        QCOMPARE(size_t(suites[1].tests), m_f.issues.size());
        QCOMPARE(size_t(suites[1].failures), dangers);
    }

    // A pair that loads: every format says so.
    void cleanDiff()
    {
        Source a, b;
        a.path = b.path = "same.safetensors";
        for (int i = 0; i < 3; ++i) {
            a.entries.push_back(makeEntry("layers." + std::to_string(i) + ".w", { 4, 4 }));
            b.entries.push_back(makeEntry("layers." + std::to_string(i) + ".w", { 4, 4 }));
        }
        const RuleSet rules;
        const DiffResult diff = diffSources(a, b, rules);
        const DiffReportInput in { a, b, rules, diff };
        QVERIFY(diffToText(in).find("a strict load_state_dict would succeed: all 3 model keys found\n") != std::string::npos);
        QVERIFY(diffToMarkdown(in).find("## Differences") == std::string::npos);
        const std::string html = diffToHtml(in);
        QVERIFY(html.find("verdict fail") == std::string::npos);
        QXmlStreamReader x(bytes(html));
        while (!x.atEnd())
            x.readNext();
        QVERIFY(!x.hasError());
        QXmlStreamReader j(bytes(diffToJunit(in)));
        while (!j.atEnd()) {
            if (j.readNext() == QXmlStreamReader::StartElement && j.name() == QStringLiteral("testsuite")
                && j.attributes().value(QStringLiteral("name")) == QStringLiteral("load_state_dict")) {
                QCOMPARE(j.attributes().value(QStringLiteral("tests")).toInt(), 3); // the load, each source's findings
                QCOMPARE(j.attributes().value(QStringLiteral("failures")).toInt(), 0);
            }
            QVERIFY(j.name() != QStringLiteral("failure"));
        }
        QVERIFY(!j.hasError());
        QCOMPARE(parseCsv(bytes(diffToCsv(in)))->size(), 4);
        for (auto f : { DiffReportFormat::Text, DiffReportFormat::Json, DiffReportFormat::Markdown, DiffReportFormat::Csv,
                 DiffReportFormat::Html, DiffReportFormat::Junit }) {
            QCOMPARE(parseDiffReportFormat(diffReportFormatName(f)), std::optional(f));
            QVERIFY(!renderDiffReport(in, f).empty());
        }
        QVERIFY(!parseDiffReportFormat("yaml").has_value());
    }

    // 100,000 entries a side (checkpoint prefixed, some shapes off): JSON in well under 0.3 s optimised.
    void largeDiffIsFast()
    {
        Source a, b;
        a.path = "big.pt";
        b.path = "big-model";
        constexpr int kEntries = 100000;
        a.entries.reserve(kEntries);
        b.entries.reserve(kEntries);
        for (int i = 0; i < kEntries; ++i) {
            const std::string name = "model.layers." + std::to_string(i / 50) + ".block." + std::to_string(i % 50) + ".weight";
            a.entries.push_back(makeEntry("_orig_mod." + name, { 64, 64 }, DType::BFloat16));
            b.entries.push_back(makeEntry(i % 97 == 0 ? name + "_renamed" : name, { 64, i % 101 == 0 ? 65 : 64 }, DType::BFloat16));
        }
        RuleSet rules;
        rules.rules.push_back(Rule { "^_orig_mod\\.", "", false, true, "", {} });
        const DiffResult diff = diffSources(a, b, rules);
        QVERIFY(diff.rows.size() >= size_t(kEntries));
        const DiffReportInput in { a, b, rules, diff };

        // CPU time, best of three: the budget is about this code, not about what else the machine runs.
        auto cpuMs = [] { return 1000.0 * double(std::clock()) / CLOCKS_PER_SEC; };
        double jsonMs = 1e9;
        std::string json;
        for (int run = 0; run < 3; ++run) {
            const double start = cpuMs();
            json = diffToJson(in);
            jsonMs = std::min(jsonMs, cpuMs() - start);
        }
        QCOMPARE(QJsonDocument::fromJson(bytes(json)).object()["rows"].toArray().size(), qsizetype(diff.rows.size()));
        // The CLI streams it: pieces of about a megabyte, never the whole report at once, that add up to it.
        std::string streamed;
        size_t pieces = 0, largest = 0;
        renderDiffReport(in, DiffReportFormat::Json, [&](std::string_view part) {
            ++pieces;
            largest = std::max(largest, part.size());
            streamed.append(part);
        });
        QVERIFY2(pieces >= json.size() / (size_t(1) << 20) && largest < (size_t(1) << 20) + 4096,
            qPrintable(QStringLiteral("%1 pieces, largest %2 bytes, of %3").arg(pieces).arg(largest).arg(json.size())));
        QVERIFY(streamed == json);
        QString timings = QStringLiteral("json %1 ms (%2 MB)").arg(jsonMs, 0, 'f', 0).arg(double(json.size()) / 1e6, 0, 'f', 1);
        for (auto f : { DiffReportFormat::Text, DiffReportFormat::Markdown, DiffReportFormat::Csv, DiffReportFormat::Html, DiffReportFormat::Junit }) {
            const double start = cpuMs();
            const std::string s = renderDiffReport(in, f);
            timings += QStringLiteral(", %1 %2 ms (%3 MB)").arg(q(diffReportFormatName(f))).arg(cpuMs() - start, 0, 'f', 0).arg(double(s.size()) / 1e6, 0, 'f', 1);
        }
        qInfo("%s rows: %s", qPrintable(QString::number(diff.rows.size())), qPrintable(timings));
#if defined(__OPTIMIZE__)
        constexpr bool optimised = true;
#else
        constexpr bool optimised = false;
#endif
        // Unoptimised or sanitised, the bound only catches quadratic work.
        QVERIFY2(jsonMs < (optimised && !sl::test::sanitized() ? 300 : 10000), qPrintable(timings));
    }
};

QTEST_GUILESS_MAIN(TestDiffReport)
#include "tst_diff_report.moc"
