// Terminal injection (issue 12): names, storage keys, container paths and messages come from the file, and
// a name holding "\x1b[2J" clears the screen while "\x1b[1A\x1b[2K" rewrites the line above. Every table and
// text report shows control characters escaped (util/terminal_text.h): ls and stats tables, ls
// --containers, diff as text, Markdown and CSV, suggest's rule file and its stderr lines, error lines. JSON
// keeps its own escaping and its bytes. Columns still line up.

#include "common/handwritten_safetensors.h"
#include "common/test_paths.h"

#include "util/error.h"
#include "util/terminal_text.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QTest>

#include <cstdint>
#include <cstdio>

using sl::test::runStatelens;

namespace {

const QByteArray kClear = "evil.\x1b[2J.weight";
const QByteArray kRewrite = "fake.\x1b[1A\x1b[2K.all_good";
const QByteArray kC1 = "c1.\xc2\x9b"
                       "31m.bias";
const QByteArray kDel = "del.\x7f.x";
const QByteArray kOthers = "bell.\x07.tab\t.nl\n.cr\r.y";
const QByteArray kUnicode = "unicode.\xce\xa9\xce\xbc\xce\xad\xce\xb3\xce\xb1.\xe5\x90\x8d.weight"; // Ωμέγα.名: kept
const QList<QByteArray> kNames = { kClear, kRewrite, kC1, kDel, kOthers, kUnicode, "plain.weight" };

// What must never reach a terminal raw: C0 controls but the output's own line breaks, DEL, C1 (UTF-8 C2
// 80..C2 9F), and bytes that are not UTF-8. Returns a description of the first, or an empty string.
QByteArray firstRawControl(const QByteArray& out)
{
    const std::string_view s(out.constData(), static_cast<size_t>(out.size()));
    for (size_t i = 0; i < s.size(); ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        const size_t n = c < 0x80 ? 1 : sl::utf8SequenceLength(s, i);
        const bool ownLineEnd
            = c == '\n' || (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n'); // CSV's records end in CRLF
        const bool control = c < 0x80 ? (c < 0x20 && !ownLineEnd) || c == 0x7f
                                      : n == 0 || (c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0);
        if (control)
            return "byte 0x" + QByteArray::number(c, 16) + " at " + QByteArray::number(qulonglong(i))
                + " in: " + out.mid(std::max<qsizetype>(0, qsizetype(i) - 40), 80).toPercentEncoding(" ./:[]");
        i += std::max<size_t>(n, 1) - 1;
    }
    return {};
}

// The escaped forms of the names above, as people see them.
const QList<QByteArray> kShown = { "evil.\\x1b[2J.weight", "fake.\\x1b[1A\\x1b[2K.all_good", "c1.\\x9b31m.bias",
    "del.\\x7f.x", "bell.\\x07.tab\\t.nl\\n.cr\\r.y", kUnicode };

void checkSafe(const QByteArray& out, const char* what)
{
    const QByteArray bad = firstRawControl(out);
    QVERIFY2(bad.isEmpty(), qPrintable(QString::fromLatin1(what) + ": " + QString::fromUtf8(bad)));
}

// Column of `needle` in `line`, in code points.
qsizetype columnOf(const QByteArray& line, const QByteArray& needle)
{
    const qsizetype at = line.indexOf(needle);
    return at < 0 ? -1 : QString::fromUtf8(line.left(at)).toUcs4().size();
}

// ---- a torch zip written by hand: a container path and a storage key holding ESC -------------------------

uint32_t crc32(const QByteArray& data)
{
    uint32_t crc = 0xFFFFFFFFu;
    for (char ch : data) {
        crc ^= static_cast<uint8_t>(ch);
        for (int k = 0; k < 8; ++k)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

void le(QByteArray& out, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; ++i)
        out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

QByteArray storedZip(const QList<std::pair<QByteArray, QByteArray>>& records)
{
    QByteArray out, central;
    for (const auto& [name, data] : records) {
        const auto offset = static_cast<uint64_t>(out.size());
        QByteArray common;
        le(common, 20, 2); // version needed
        le(common, 0, 2); // flags
        le(common, 0, 2); // stored
        le(common, 0, 4); // time, date
        le(common, crc32(data), 4);
        le(common, static_cast<uint64_t>(data.size()), 4);
        le(common, static_cast<uint64_t>(data.size()), 4);
        le(common, static_cast<uint64_t>(name.size()), 2);
        le(common, 0, 2); // extra
        le(out, 0x04034b50, 4);
        out += common + name + data;
        le(central, 0x02014b50, 4);
        le(central, 20, 2); // version made by
        central += common;
        le(central, 0, 2); // comment
        le(central, 0, 2); // disk
        le(central, 0, 2); // internal attributes
        le(central, 0, 4); // external attributes
        le(central, offset, 4);
        central += name;
    }
    const auto cdOffset = static_cast<uint64_t>(out.size());
    out += central;
    le(out, 0x06054b50, 4);
    le(out, 0, 4);
    le(out, static_cast<uint64_t>(records.size()), 2);
    le(out, static_cast<uint64_t>(records.size()), 2);
    le(out, static_cast<uint64_t>(central.size()), 4);
    le(out, cdOffset, 4);
    le(out, 0, 2);
    return out;
}

QByteArray unicodeOp(const QByteArray& s) // BINUNICODE
{
    QByteArray out = "X";
    le(out, static_cast<uint64_t>(s.size()), 4);
    return out + s;
}

// torch.save's layout: {container: {name: tensor, "run": posix.<call>("echo")}} with the tensor's storage
// under `key`; the call is what torch.load would run, and the findings name it.
QByteArray torchZip(const QByteArray& container, const QByteArray& name, const QByteArray& key, const QByteArray& call)
{
    const QByteArray zero(1, '\0');
    QByteArray p = "\x80\x02}" + unicodeOp(container) + "}" + unicodeOp(name) + "ctorch._utils\n_rebuild_tensor_v2\n(("
        + unicodeOp("storage") + "ctorch\nFloatStorage\n" + unicodeOp(key) + unicodeOp("cpu") + "K\x02tQK" + zero
        + "K\x02\x85K\x01\x85\x89" + "ccollections\nOrderedDict\n)RtRs" + unicodeOp("run") + "cposix\n" + call + "\n("
        + unicodeOp("echo") + "tRss.";
    return storedZip(
        { { "archive/data.pkl", p }, { "archive/data/" + key, QByteArray(8, '\0') }, { "archive/version", "3\n" } });
}

} // namespace

class TestTerminalOutput : public QObject {
    Q_OBJECT
private:
    QTemporaryDir m_dir;
    QString m_a; // the names above under _orig_mod.
    QString m_b; // the names above, and one more of its own
    QString m_pt; // a container path and a storage key holding ESC

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        QList<QByteArray> a, b;
        for (const QByteArray& n : kNames) {
            a << "_orig_mod." + n;
            b << n;
        }
        b << "osc.\x1b]0;pwned\x07.w";
        m_a = m_dir.filePath(QStringLiteral("a.safetensors"));
        m_b = m_dir.filePath(QStringLiteral("b.safetensors"));
        QVERIFY(sl::test::writeSafetensors(m_a, a));
        QVERIFY(sl::test::writeSafetensors(m_b, b));
        m_pt = m_dir.filePath(QStringLiteral("hostile.pt"));
        QFile f(m_pt);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(torchZip("outer\x1b[2J", kRewrite, "k\x1b[2J", "system\x1b[2J"));
    }

    // The helper itself: every control and every byte that is not UTF-8 escaped, the rest kept.
    void escaping()
    {
        QCOMPARE(sl::terminalText("\x1b[2J"), std::string("\\x1b[2J"));
        QCOMPARE(sl::terminalText(std::string("a\0b", 3)), std::string("a\\x00b"));
        QCOMPARE(sl::terminalText("\t\n\r\x7f"), std::string("\\t\\n\\r\\x7f"));
        QCOMPARE(sl::terminalText("\xc2\x80\xc2\x9b\xc2\x9f"), std::string("\\x80\\x9b\\x9f")); // C1
        QCOMPARE(sl::terminalText("\xc2\xa0\xce\xa9\xe5\x90\x8d\xf0\x9f\x98\x80"),
            std::string("\xc2\xa0\xce\xa9\xe5\x90\x8d\xf0\x9f\x98\x80"));
        QCOMPARE(sl::terminalText("bad\xff\x9b\xc3"), std::string("bad\\xff\\x9b\\xc3")); // not UTF-8: each byte
        QCOMPARE(sl::terminalText("\xed\xa0\x80"), std::string("\\xed\\xa0\\x80")); // a surrogate
        QCOMPARE(sl::terminalText("back\\slash"), std::string("back\\slash"));
        QCOMPARE(sl::terminalColumns("\xce\xa9\x1b"), size_t(5));
        QVERIFY(sl::isTerminalSafe("\xce\xa9 plain"));
        QVERIFY(!sl::isTerminalSafe("\xc2\x85"));
        // Every single byte at every position of a 23-byte ASCII name (the fast path checks eight bytes at a
        // time), against what Python's repr() shows for a lone byte.
        const std::string plain = "abcdefghijklmnopqrstuvw";
        for (int b = 0; b < 256; ++b)
            for (size_t at = 0; at < plain.size(); ++at) {
                std::string name = plain;
                name[at] = static_cast<char>(b);
                char hex[8];
                std::snprintf(hex, sizeof hex, "\\x%02x", b);
                const std::string shown = b == '\t' ? "\\t" : b == '\n' ? "\\n" : b == '\r' ? "\\r"
                    : (b >= 0x20 && b < 0x7F)                           ? std::string(1, char(b))
                                                                        : std::string(hex);
                const std::string expected = plain.substr(0, at) + shown + plain.substr(at + 1);
                QCOMPARE(sl::terminalText(name), expected);
                QCOMPARE(sl::terminalColumns(name), expected.size());
                QCOMPARE(sl::isTerminalSafe(name), b >= 0x20 && b < 0x7F);
            }
        // Error lines use the same helper.
        QCOMPARE(sl::oneLineMessage("k\xc2\x9b\x1b\n"), std::string("k\\x9b\\x1b\\n"));
        QCOMPARE(std::string(sl::LoadError("dir/\x1b[2J.pt", "bad").what()), std::string("dir/\\x1b[2J.pt: bad"));
    }

    void lsTable()
    {
        const auto r = runStatelens({ QStringLiteral("ls"), m_a });
        QCOMPARE(r.exitCode, 0);
        checkSafe(r.out, "ls");
        for (const QByteArray& shown : kShown)
            QVERIFY2(r.out.contains("_orig_mod." + shown), shown.constData());
        // Every row's DTYPE cell starts under the header's.
        const QList<QByteArray> lines = r.out.split('\n');
        const auto header
            = std::find_if(lines.begin(), lines.end(), [](const QByteArray& l) { return l.startsWith("NAME "); });
        QVERIFY(header != lines.end());
        const qsizetype column = columnOf(*header, "DTYPE");
        int rows = 0;
        for (auto it = header + 1; it != lines.end() && !it->isEmpty(); ++it, ++rows)
            QVERIFY2(columnOf(*it, "float32") == column, it->constData());
        QCOMPARE(rows, kNames.size());
    }

    // A torch file: the container path and the storage key come from its pickle.
    void lsTorchFile()
    {
        const auto r = runStatelens({ QStringLiteral("ls"), m_pt });
        QCOMPARE(r.exitCode, 0);
        checkSafe(r.out, "ls .pt");
        QVERIFY2(r.out.contains("container: outer\\x1b[2J"), r.out.constData());
        QVERIFY2(r.out.contains("fake.\\x1b[1A\\x1b[2K.all_good"), r.out.constData());
        QVERIFY2(r.out.contains("k\\x1b[2J\n"), r.out.constData()); // the STORAGE column
        QVERIFY2(r.out.contains("[danger] ") && r.out.contains("posix.system\\x1b[2J"), r.out.constData()); // a finding's line
        // diff carries the findings and leads its verdict with the danger, both naming the call.
        const auto d = runStatelens({ QStringLiteral("diff"), m_pt, m_pt });
        checkSafe(d.out, "diff .pt");
        QVERIFY2(d.out.contains("DANGER: loading the checkpoint would run code (posix.system\\x1b[2J"), d.out.constData());
        const auto c = runStatelens({ QStringLiteral("ls"), m_pt, QStringLiteral("--containers") });
        QCOMPARE(c.exitCode, 0);
        checkSafe(c.out, "ls --containers");
        QVERIFY2(c.out.contains("* outer\\x1b[2J  ["), c.out.constData());
        // JSON escapes controls itself: its names read back exactly.
        const auto j = runStatelens({ QStringLiteral("ls"), m_pt, QStringLiteral("--format"), QStringLiteral("json") });
        const QJsonObject o = QJsonDocument::fromJson(j.out).object();
        QCOMPARE(o["source"].toObject()["container"].toString(), QString::fromUtf8("outer\x1b[2J"));
        QCOMPARE(o["entries"].toArray()[0].toObject()["name"].toString(), QString::fromUtf8(kRewrite));
        QCOMPARE(o["entries"].toArray()[0].toObject()["location"].toObject()["storage"].toString(),
            QString::fromUtf8("k\x1b[2J"));
    }

    // JSON is for programs and keeps its own escaping, bytes unchanged: C0 controls as \u escapes (DEL and C1
    // stay raw, as JSON allows), and every name reads back exactly.
    void lsJsonUnchanged()
    {
        const auto j = runStatelens({ QStringLiteral("ls"), m_a, QStringLiteral("--format"), QStringLiteral("json") });
        QCOMPARE(j.exitCode, 0);
        QVERIFY(j.out.contains("\\u001B[2J") || j.out.contains("\\u001b[2J"));
        QVERIFY(!j.out.contains("\\x1b"));
        QStringList names;
        for (const auto& e : QJsonDocument::fromJson(j.out).object()["entries"].toArray())
            names << e.toObject()["name"].toString();
        for (const QByteArray& n : kNames)
            QVERIFY2(names.contains(QString::fromUtf8("_orig_mod." + n)), n.constData());
    }

    void statsTable()
    {
        const auto r = runStatelens({ QStringLiteral("stats"), m_a });
        QCOMPARE(r.exitCode, 0);
        checkSafe(r.out, "stats");
        for (const QByteArray& shown : kShown)
            QVERIFY2(r.out.contains("_orig_mod." + shown), shown.constData());
        const QList<QByteArray> lines = r.out.split('\n');
        QVERIFY(lines.first().startsWith("NAME "));
        const qsizetype column = columnOf(lines.first(), "DTYPE");
        for (qsizetype i = 1; i <= kNames.size(); ++i)
            QVERIFY2(columnOf(lines[i], "float32") == column, lines[i].constData());
        const auto filtered
            = runStatelens({ QStringLiteral("stats"), m_pt, QStringLiteral("--filter"), QStringLiteral("fake") });
        QCOMPARE(filtered.exitCode, 0);
        checkSafe(filtered.out, "stats .pt");
        QVERIFY(filtered.out.contains("fake.\\x1b[1A\\x1b[2K.all_good"));
    }

    void diffReports()
    {
        for (const char* format : { "text", "md", "csv" }) {
            const auto r = runStatelens(
                { QStringLiteral("diff"), m_a, m_b, QStringLiteral("--format"), QString::fromLatin1(format) });
            QCOMPARE(r.exitCode, 1);
            checkSafe(r.out, format);
            for (const QByteArray& shown : kShown) // Markdown shows names in code spans, where backslashes are literal
                QVERIFY2(
                    r.out.contains(shown), qPrintable(QString::fromLatin1(format) + ": " + QString::fromUtf8(shown)));
            QVERIFY2(r.out.contains("osc.\\x1b]0;pwned\\x07.w"), format);
        }
    }

    void suggestOutput()
    {
        const auto r = runStatelens({ QStringLiteral("suggest"), m_a, m_b });
        QCOMPARE(r.exitCode, 0);
        checkSafe(r.out, "suggest stdout");
        checkSafe(r.err, "suggest stderr");
        QVERIFY2(r.out.contains("_orig_mod."), r.out.constData());
        QVERIFY2(r.out.contains("\\x1b["), r.out.constData()); // an example key in the comments
        // A rule inferred from one pair: its title (on stderr) and its pattern quote the keys.
        const auto pair = runStatelens({ QStringLiteral("suggest"), m_a, m_b, QStringLiteral("--pair"),
            QString::fromUtf8("_orig_mod." + kClear), QString::fromUtf8("osc.\x1b]0;pwned\x07.w") });
        QCOMPARE(pair.exitCode, 0);
        checkSafe(pair.out, "suggest --pair stdout");
        checkSafe(pair.err, "suggest --pair stderr");
        QVERIFY2(pair.err.contains("suggest: rename '") && pair.err.contains("\\x1b"), pair.err.constData());
        // The rule file still reads back, and the rule still does what it did.
        QFile f(m_dir.filePath(QStringLiteral("suggested.yaml")));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(r.out);
        f.close();
        const auto d = runStatelens({ QStringLiteral("diff"), m_a, m_b, QStringLiteral("--rules"), f.fileName() });
        checkSafe(d.out, "diff --rules");
        QVERIFY2(d.out.contains("7 renamed") && d.out.contains("1 missing"), d.out.constData());
    }

    // A rule file's scalars with control characters are written double-quoted and escaped (never raw), and
    // read back the same.
    void rulesOutput()
    {
        QFile f(m_dir.filePath(QStringLiteral("ctl.json")));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("{\"version\": 1, \"rules\": [{\"pattern\": \"^_orig_mod\\\\.evil\\\\.\\u001b\\\\[2J\\\\.\", "
                "\"replace\": \"x\\u009b\\u007f.\", \"note\": \"n\\u001b[2J\\u009b\"}]}");
        f.close();
        const auto y = runStatelens({ QStringLiteral("rules"), QStringLiteral("export"), f.fileName(),
            QStringLiteral("--to"), QStringLiteral("yaml") });
        QCOMPARE(y.exitCode, 0);
        checkSafe(y.out, "rules export yaml");
        QVERIFY2(y.out.contains("\\x9b\\x7f.\""), y.out.constData());
        QFile back(m_dir.filePath(QStringLiteral("ctl.yaml")));
        QVERIFY(back.open(QIODevice::WriteOnly));
        back.write(y.out);
        back.close();
        const auto j = runStatelens({ QStringLiteral("rules"), QStringLiteral("export"), back.fileName(),
            QStringLiteral("--to"), QStringLiteral("json") });
        const auto direct = runStatelens({ QStringLiteral("rules"), QStringLiteral("export"), f.fileName(),
            QStringLiteral("--to"), QStringLiteral("json") });
        QCOMPARE(j.out, direct.out);
        const auto py = runStatelens({ QStringLiteral("rules"), QStringLiteral("export"), f.fileName(),
            QStringLiteral("--to"), QStringLiteral("python") });
        checkSafe(py.out, "rules export python");
        // Problems name keys: stderr too.
        const auto hf = runStatelens({ QStringLiteral("rules"), QStringLiteral("export"), f.fileName(),
            QStringLiteral("--to"), QStringLiteral("hf-key-mapping"), QStringLiteral("--keys"), m_a });
        checkSafe(hf.err, "rules export stderr");
    }

    // Error lines name the file: a path holding ESC is escaped there too.
    void errorLines()
    {
        const QString evil = m_dir.filePath(QString::fromUtf8("\x1b[2J\xc2\x9b.safetensors"));
        QFile f(evil);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("not a checkpoint");
        f.close();
        const auto r = runStatelens({ QStringLiteral("ls"), evil });
        QCOMPARE(r.exitCode, 2);
        checkSafe(r.err, "error line");
        QVERIFY2(r.err.contains("\\x1b[2J\\x9b.safetensors: "), r.err.constData());
    }
};

QTEST_GUILESS_MAIN(TestTerminalOutput)
#include "tst_terminal_output.moc"
