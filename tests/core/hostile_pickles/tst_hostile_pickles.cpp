// The load-safety verdict on hostile pickles (tests/fixtures/hostile, made by make_hostile_fixtures.py with
// torch 1.13, which proved torch.load runs the payloads it could run harmlessly) and on every benign real
// file: each hostile case is "executes" and names what it calls, through the core and through the CLI's
// exit codes (`ls --fail-on danger` exits 1, a read that stops exits 2 and still names the danger); no
// benign real checkpoint is "executes"; and the opcode scan itself names imports however they are reached.

#include "common/test_paths.h"

#include "formats/loader.h"
#include "io/miniz_lookup.h"
#include "io/zip_archive.h"
#include "pickle/global_policy.h"
#include "pickle/opcode_scan.h"
#include "pickle/unpickler.h"
#include "report/source_report.h"
#include "torch/torch_semantics.h"
#include "util/error.h"

#include <QDirIterator>
#include <QTemporaryDir>
#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSet>
#include <QtTest>

using namespace sl;

namespace {

QString hostileDir() { return test::fixturesDir() + QStringLiteral("/hostile"); }

QJsonArray cases()
{
    QFile f(hostileDir() + QStringLiteral("/hostile.truth.json"));
    if (!f.open(QIODevice::ReadOnly))
        return {};
    return QJsonDocument::fromJson(f.readAll()).object().value(QStringLiteral("cases")).toArray();
}

// What torch 2.6 loads from the duplicate-record cases (tests/fixtures/make_hostile_duplicates_torch2.py).
QJsonObject torch26Duplicates()
{
    QFile f(hostileDir() + QStringLiteral("/duplicates.torch26.json"));
    if (!f.open(QIODevice::ReadOnly))
        return {};
    return QJsonDocument::fromJson(f.readAll()).object().value(QStringLiteral("cases")).toObject();
}

QString ordinal(int n)
{
    const char* suffix = (n % 100 >= 11 && n % 100 <= 13) ? "th" : n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
    return QString::number(n) + QLatin1String(suffix);
}

// The JSON listing of a file, or its error, with the tensor lanes on or off (OpenOptions::tensorLanes).
QString listedWithLanes(const QString& path, bool lanes)
{
    OpenOptions options;
    options.tensorLanes = lanes;
    try {
        return QString::fromStdString(sourceToJson(openSource(path.toStdString(), options)));
    } catch (const std::exception& e) {
        return QString::fromUtf8(e.what());
    }
}

// Two float tensors {"a": [2, 2], "b": [2, 2]} pickled as torch.save does (protocol 2, every value memoised),
// and with `fetchSize` a third value "c" that is b's size tuple, fetched again by GET. With `systemHooks`, a
// first value "x" is os.system, and b's backward hooks are built by calling it instead of OrderedDict.
std::string twoTensorPickle(bool fetchSize, bool systemHooks = false, const std::string& secondKey = "1", size_t tail = 0)
{
    using namespace std::literals;
    auto str = [](std::string_view t) {
        std::string s = "X"s;
        for (int i = 0; i < 4; ++i)
            s += char(t.size() >> (8 * i));
        return s + std::string(t);
    };
    auto put = [](int slot) { return "q"s + char(slot); };
    auto get = [](int slot) { return "h"s + char(slot); };
    const std::string geometry = "QK\0K\x02K\x02\x86"s; // BINPERSID, offset 0, size (2, 2)
    std::string p = "\x80\x02}"s + put(0) + "(";
    if (systemHooks)
        p += str("x") + "cos\nsystem\n" + put(20);
    p += str("a") + "ctorch._utils\n_rebuild_tensor_v2\n" + put(1) + "((" + str("storage") + put(2)
        + "ctorch\nFloatStorage\n" + put(3) + str("0") + put(4) + str("cpu") + put(5) + "K\x04t" + put(6) + geometry
        + put(7) + "K\x02K\x01\x86" + put(8) + "\x89"s + "ccollections\nOrderedDict\n" + put(9) + ")R" + put(10) + "t"
        + put(11) + "R" + put(12);
    p += str("b") + get(1) + "((" + get(2) + get(3) + str(secondKey) + put(13) + get(5) + "K\x04t" + put(14) + geometry
        + put(15) + "K\x02K\x01\x86" + put(16) + "\x89" + get(systemHooks ? 20 : 9) + ")R" + put(17) + "t" + put(18) + "R" + put(19);
    if (fetchSize)
        p += str("c") + get(15);
    if (tail)
        p += str("d") + str(std::string(tail, 'x'));
    return p + "u.";
}

// A stored zip of empty records with these names (ZIP64 end records, so more than 65,535 fit)
// (data.pkl records hold `pkl`, version records "3" as torch writes it).
std::vector<uint8_t> emptyRecordsZip(const std::vector<std::string>& names, const std::string& pkl = {})
{
    std::vector<uint8_t> out, cd;
    // Little-endian; bytes past the eighth are zero (a shift of 64 or more is undefined).
    auto put = [](std::vector<uint8_t>& b, uint64_t v, int bytes) {
        for (int i = 0; i < bytes; ++i)
            b.push_back(i < 8 ? static_cast<uint8_t>(v >> (8 * i)) : 0);
    };
    for (const auto& n : names) {
        const uint64_t offset = out.size();
        auto endsWith = [&](std::string_view tail) { return n.size() >= tail.size() && n.compare(n.size() - tail.size(), tail.size(), tail) == 0; };
        const std::string data = endsWith("data.pkl") ? pkl : endsWith("/version") ? std::string("3\n") : std::string();
        put(out, 0x04034b50, 4);
        put(out, 20, 2);
        put(out, 0, 8); // flags, method, time, date
        put(out, 0, 4); // crc (not checked)
        put(out, data.size(), 4);
        put(out, data.size(), 4);
        put(out, n.size(), 2);
        put(out, 0, 2);
        out.insert(out.end(), n.begin(), n.end());
        out.insert(out.end(), data.begin(), data.end());
        put(cd, 0x02014b50, 4);
        put(cd, 20, 2);
        put(cd, 20, 2);
        put(cd, 0, 12);
        put(cd, data.size(), 4);
        put(cd, data.size(), 4);
        put(cd, n.size(), 2);
        put(cd, 0, 12); // extra, comment, disk, attributes
        put(cd, offset, 4);
        cd.insert(cd.end(), n.begin(), n.end());
    }
    const uint64_t cdOffset = out.size(), cdSize = cd.size();
    out.insert(out.end(), cd.begin(), cd.end());
    const uint64_t z64 = out.size();
    put(out, 0x06064b50, 4);
    put(out, 44, 8);
    put(out, 45, 2);
    put(out, 45, 2);
    put(out, 0, 8);
    put(out, names.size(), 8);
    put(out, names.size(), 8);
    put(out, cdSize, 8);
    put(out, cdOffset, 8);
    put(out, 0x07064b50, 4);
    put(out, 0, 4);
    put(out, z64, 8);
    put(out, 1, 4);
    put(out, 0x06054b50, 4);
    put(out, 0, 4);
    put(out, 0xFFFF, 2);
    put(out, 0xFFFF, 2);
    put(out, 0xFFFFFFFF, 4);
    put(out, 0xFFFFFFFF, 4);
    put(out, 0, 2);
    return out;
}

QString dangerText(const Source& s)
{
    QString all;
    for (const auto& f : s.findings)
        if (f.severity == Severity::Danger)
            all += QString::fromStdString(f.message) + QLatin1Char('\n');
    return all;
}

pickle::PickleScan scan(const QByteArray& p)
{
    return pickle::scanPickle(Bytes(reinterpret_cast<const uint8_t*>(p.constData()), size_t(p.size())));
}

const pickle::ScannedGlobal* findGlobal(const pickle::PickleScan& s, const std::string& qualified)
{
    for (const auto& g : s.globals)
        if (g.qualified() == qualified)
            return &g;
    return nullptr;
}

// A torch.save archive of twoTensorPickle's kind: its data.pkl, two empty storage records and a version.
bool writeTwoTensorZip(const QString& path, const std::string& pkl)
{
    const auto zip = emptyRecordsZip({ "archive/data.pkl", "archive/data/0", "archive/data/1", "archive/version" }, pkl);
    QFile f(path);
    return f.open(QIODevice::WriteOnly) && f.write(reinterpret_cast<const char*>(zip.data()), qint64(zip.size())) == qint64(zip.size());
}

} // namespace

class TestHostilePickles : public QObject {
    Q_OBJECT
private slots:
    void corpus_data()
    {
        QTest::addColumn<QJsonObject>("c");
        const QJsonArray all = cases();
        QVERIFY2(all.size() >= 40, "hostile.truth.json is missing or short");
        for (const auto& v : all)
            QTest::newRow(v.toObject().value(QStringLiteral("file")).toString().toUtf8().constData()) << v.toObject();
    }

    void corpus()
    {
        QFETCH(QJsonObject, c);
        const QString path = hostileDir() + QLatin1Char('/') + c.value(QStringLiteral("file")).toString();
        const QString verdict = c.value(QStringLiteral("verdict")).toString();
        QStringList names;
        for (const auto& n : c.value(QStringLiteral("executes")).toArray())
            names << n.toString();
        const bool stops = c.value(QStringLiteral("stops")).toBool();

        // Through the core.
        QString seen;
        QElapsedTimer clock;
        clock.start();
        try {
            Source s = openSource(path.toStdString());
            QVERIFY2(!stops, "the read was expected to stop");
            QCOMPARE(QString::fromUtf8(s.weightsOnly.verdict()), verdict);
            seen = dangerText(s);
            QCOMPARE(s.countFindings(Severity::Danger) > 0, c.value(QStringLiteral("danger")).toBool());
        } catch (const LoadError& e) {
            QVERIFY2(stops, e.what());
            seen = QString::fromUtf8(e.what());
            QVERIFY2(seen.contains(QLatin1String("DANGER")), e.what());
        }
        QVERIFY2(clock.elapsed() < 20000, "took too long");
        for (const auto& n : names)
            QVERIFY2(seen.contains(n), qPrintable(n + QStringLiteral(" not named in: ") + seen));
        // The tensor lanes change nothing a hostile file shows (pickle/tensor_record.h).
        QCOMPARE(listedWithLanes(path, false), listedWithLanes(path, true));

        // Through the CLI: the exit code a CI gate sees.
        auto plain = test::runStatelens({ QStringLiteral("ls"), path });
        QCOMPARE(plain.exitCode, c.value(QStringLiteral("ls_exit")).toInt());
        auto gate = test::runStatelens({ QStringLiteral("ls"), path, QStringLiteral("--fail-on"), QStringLiteral("danger") });
        QCOMPARE(gate.exitCode, stops ? 2 : c.value(QStringLiteral("danger")).toBool() ? 1 : 0);

        // Values read the way torch reads them (duplicate records: the one torch.load took). For duplicated
        // records, torch 2.6's answer (the current torch), and the finding names the copy each version read.
        QJsonObject values = c.value(QStringLiteral("values")).toObject();
        const QJsonObject dup = c.value(QStringLiteral("duplicate")).toObject();
        if (!dup.isEmpty()) {
            const QJsonObject t26 = torch26Duplicates().value(c.value(QStringLiteral("file")).toString()).toObject();
            QVERIFY2(!t26.isEmpty(), "no torch 2.6 truth for this case in duplicates.torch26.json");
            values = t26.value(QStringLiteral("values")).toObject();
            const int copies = dup.value(QStringLiteral("copies")).toInt();
            const int read113 = dup.value(QStringLiteral("torch113_reads")).toInt();
            const int read26 = t26.value(QStringLiteral("reads")).toInt();
            QVERIFY(copies >= 2 && read113 >= 1 && read26 >= 1);
            QVERIFY2(seen.contains(QStringLiteral("holds %1 records named '%2'").arg(copies).arg(dup.value(QStringLiteral("record")).toString())), qPrintable(seen));
            if (read113 == read26)
                QVERIFY2(seen.contains(QStringLiteral("torch 1.13 and 2.6 both read the %1 of them").arg(ordinal(read26))), qPrintable(seen));
            else
                QVERIFY2(seen.contains(QStringLiteral("torch 1.13 reads the %1").arg(ordinal(read113)))
                        && seen.contains(QStringLiteral("torch 2.6 the %1").arg(ordinal(read26))),
                    qPrintable(seen));
        }
        if (!values.isEmpty()) {
            auto stats = test::runStatelens({ QStringLiteral("stats"), path, QStringLiteral("--format"), QStringLiteral("json") });
            QCOMPARE(stats.exitCode, 0);
            const QJsonArray tensors = QJsonDocument::fromJson(stats.out).object().value(QStringLiteral("tensors")).toArray();
            QCOMPARE(tensors.size(), values.size());
            for (const auto& t : tensors) {
                const QJsonObject o = t.toObject();
                QCOMPARE(o.value(QStringLiteral("max")).toDouble(), values.value(o.value(QStringLiteral("name")).toString()).toDouble());
            }
        }
        if (stops)
            QVERIFY2(gate.err.contains("DANGER") && gate.err.count('\n') == 1, gate.err.constData());

        // `diff` carries the verdict too: CI users run diff, not ls.
        if (stops || c.value(QStringLiteral("file")).toString().startsWith(QLatin1String("dcp/")))
            return;
        const QString plainModel = hostileDir() + QStringLiteral("/benign/plain.pt");
        auto diff = test::runStatelens({ QStringLiteral("diff"), path, plainModel, QStringLiteral("--fail-on"), QStringLiteral("danger") });
        const bool executes = verdict == QLatin1String("executes");
        QCOMPARE(diff.exitCode, c.value(QStringLiteral("danger")).toBool() ? 1 : 0);
        QCOMPARE(diff.out.contains("DANGER: loading the checkpoint would run code"), executes);
        QVERIFY(!executes || !diff.out.contains("\na strict load_state_dict would succeed"));
        auto json = test::runStatelens({ QStringLiteral("diff"), path, plainModel, QStringLiteral("--format"), QStringLiteral("json") });
        const QJsonObject doc = QJsonDocument::fromJson(json.out).object();
        int dangers = 0;
        for (const auto& f : doc.value(QStringLiteral("source_findings")).toObject().value(QStringLiteral("a")).toArray())
            dangers += f.toObject().value(QStringLiteral("severity")).toString() == QLatin1String("danger");
        QCOMPARE(dangers > 0, c.value(QStringLiteral("danger")).toBool());
        QCOMPARE(doc.value(QStringLiteral("a")).toObject().value(QStringLiteral("weights_only")).toObject()
                     .value(QStringLiteral("verdict")).toString(), verdict);
        auto junit = test::runStatelens({ QStringLiteral("diff"), path, plainModel, QStringLiteral("--format"), QStringLiteral("junit") });
        QCOMPARE(junit.out.contains("name=\"A (checkpoint)\"><failure type=\"danger\""), c.value(QStringLiteral("danger")).toBool());
    }

    // Which duplicate torch reads is checked against torch itself in corpus(); here, that the lookup stays
    // cheap: 100,000 records (as large sharded checkpoints have) without duplicates pay nothing for it, not
    // even with upper-case names (which need the case-folded index), and one duplicate costs one sort.
    // A storage whose key is the empty string: torch.load looks for the record "data/" and fails, so the
    // file is refused with that reason (it was "storage key is not a string").
    void emptyStorageKey()
    {
        const std::string pkl("\x80\x02}q\x00X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage"
                              "ctorch\nFloatStorage\nX\x00\x00\x00\x00X\x03\x00\x00\x00" "cpuK\x04tQK\x00K\x04\x85K\x01\x85\x89"
                              "ccollections\nOrderedDict\n)RtRs.",
            135);
        QCOMPARE(pkl.back(), '.');
        const auto zip = emptyRecordsZip({ "archive/data.pkl", "archive/data/0", "archive/version" }, pkl);
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("empty_key.pt"));
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(reinterpret_cast<const char*>(zip.data()), qint64(zip.size()));
        f.close();
        try {
            (void)openSource(path.toStdString());
            QFAIL("a storage with an empty key was listed");
        } catch (const LoadError& e) {
            QVERIFY2(std::string(e.what()).find("storage key is empty; torch.load cannot find its record") != std::string::npos, e.what());
        }
        if (!test::haveTorchPython())
            QSKIP("torch is not importable here; the verdict above was checked against torch 1.13");
        const auto torch = test::run(test::torchPython(), { QStringLiteral("-c"),
            QStringLiteral("import sys, torch\ntry:\n    torch.load(sys.argv[1])\nexcept Exception as e:\n    print(e)\n"), path });
        QVERIFY2(torch.out.contains("failed locating file data/"), torch.out.constData());
    }

    void manyRecordsStayFast()
    {
        for (const char* prefix : { "archive/", "Model_V2/" }) {
            for (bool duplicate : { false, true }) {
                std::vector<std::string> names { std::string(prefix) + "data.pkl" };
                for (int i = 0; i < 100000; ++i)
                    names.push_back(std::string(prefix) + "data/" + std::to_string(i));
                names.push_back(std::string(prefix) + "version");
                if (duplicate)
                    names.push_back(std::string(prefix) + "data/777");
                const std::vector<uint8_t> bytes = emptyRecordsZip(names);
                QElapsedTimer clock;
                clock.start();
                const auto file = InputFile::fromBuffer("records.zip", bytes);
                ZipArchive zip(*file);
                const qint64 parsed = clock.elapsed();
                size_t found = 0;
                for (size_t i = 0; i < names.size(); ++i) {
                    const ZipEntry* e = zip.findAsTorch(names[i]);
                    found += e && e->name == names[i];
                }
                QVERIFY(!zip.findAsTorch(std::string(prefix) + "data/100000"));
                QVERIFY(!zip.findAsTorch(std::string(prefix) + "byteorder"));
                // miniz ignores case, and so does the lookup, whatever the archive holds.
                std::string upper = std::string(prefix) + "DATA/5";
                QVERIFY(zip.findAsTorch(upper) && zip.findAsTorch(upper)->name == std::string(prefix) + "data/5");
                const qint64 total = clock.elapsed();
                qInfo("%s%s: %zu records parsed in %lld ms, each looked up in %lld ms", prefix,
                    duplicate ? " (one duplicate)" : "", names.size(), parsed, total - parsed);
                QCOMPARE(found, names.size());
                QCOMPARE(zip.duplicates().size(), duplicate ? size_t(1) : size_t(0));
                QVERIFY(zip.caseVariants().empty());
                QVERIFY2(total < 3000, qPrintable(QString::number(total)));
            }
        }
        QVERIFY(MinizLookup::compare("a/DATA.pkl", "a/data.PKL") == 0);
        // Hostile shapes: 100,000 copies of one upper-case name; 50,000 names each with a case variant;
        // 50,000 names each twice. Read whole (findings grouped), each in well under the limit.
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string emptyDict("\x80\x02}.", 4);
        struct Shape {
            const char* what;
            std::vector<std::string> names;
            size_t groups;
        };
        std::vector<Shape> shapes(3);
        shapes[0].what = "one name 100,000 times";
        shapes[0].names = { "Model/data.pkl" };
        shapes[0].names.insert(shapes[0].names.end(), 100000, "Model/data/0");
        shapes[0].groups = 1;
        shapes[1].what = "50,000 case variants";
        shapes[1].names = { "Model/data.pkl" };
        for (int i = 0; i < 50000; ++i) {
            shapes[1].names.push_back("Model/data/" + std::to_string(i));
            shapes[1].names.push_back("Model/DATA/" + std::to_string(i));
        }
        shapes[1].groups = 50000;
        shapes[2].what = "50,000 duplicates";
        shapes[2].names = { "archive/data.pkl" };
        for (int k = 0; k < 2; ++k)
            for (int i = 0; i < 50000; ++i)
                shapes[2].names.push_back("archive/data/" + std::to_string(i));
        shapes[2].groups = 50000;
        for (const Shape& shape : shapes) {
            const std::vector<uint8_t> bytes = emptyRecordsZip(shape.names, emptyDict);
            const QString path = dir.filePath(QStringLiteral("shape.pt"));
            QFile f(path);
            QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
            f.write(reinterpret_cast<const char*>(bytes.data()), qint64(bytes.size()));
            f.close();
            QElapsedTimer clock;
            clock.start();
            Source src;
            try {
                src = openSource(path.toStdString());
            } catch (const std::exception& e) {
                QFAIL(e.what());
            }
            qInfo("%s: read in %lld ms", shape.what, clock.elapsed());
            QVERIFY2(clock.elapsed() < 5000, shape.what);
            const QString dangers = dangerText(src);
            QVERIFY2(dangers.contains(QLatin1String("records named")), qPrintable(dangers));
            if (shape.groups > 5)
                QVERIFY2(dangers.contains(QStringLiteral("%1 duplicated record names in all").arg(shape.groups)), qPrintable(dangers));
        }

        // Lower-cased before comparing: 'Z' sorts as 'z', after '_'; a prefix sorts first.
        QVERIFY(MinizLookup::compare("a/data", "a/data/0") < 0 && MinizLookup::compare("a/_", "a/Z") < 0);
    }

    // Every benign real checkpoint: never "executes" (the lists are tuned so they come out weights-only or
    // imports), whatever else is wrong with it.
    void realFilesNeverExecute()
    {
        const QString real = test::realFixturesDir();
        if (real.isEmpty())
            QSKIP("../shared/fixtures/real is not here");
        int opened = 0;
        QStringList wrong;
        QDirIterator it(real, QDir::Files | QDir::Hidden, QDirIterator::Subdirectories);
        while (it.hasNext()) {
            QString file = it.next();
            if (file.endsWith(QLatin1String(".md")) || file.endsWith(QLatin1String(".tsv")))
                continue;
            QString open = file.endsWith(QLatin1String("/.metadata")) ? QFileInfo(file).absolutePath() : file;
            try {
                Source s = openSource(open.toStdString());
                ++opened;
                if (s.weightsOnly.verdict() == "executes" || dangerText(s).contains(QLatin1String("would run it")))
                    wrong << open + QStringLiteral(": ") + dangerText(s);
            } catch (const LoadError& e) {
                if (QString::fromUtf8(e.what()).contains(QLatin1String("DANGER")))
                    wrong << open + QStringLiteral(": ") + QString::fromUtf8(e.what());
            }
        }
        QVERIFY(opened > 150);
        QVERIFY2(wrong.isEmpty(), qPrintable(wrong.join(QLatin1Char('\n'))));
    }

    // A memoised string is kept in its slot as where its bytes start, and its length is read again from the
    // prefix before them on every fetch: each width of prefix, the strings on either side of the import, and
    // strings long enough to need the wider prefixes must still name it.
    void scanFetchesMemoisedStringsOfEveryWidth()
    {
        auto le = [](uint64_t v, int width) {
            QByteArray b;
            for (int i = 0; i < width; ++i)
                b += char((v >> (8 * i)) & 0xff);
            return b;
        };
        struct Encoding {
            const char* what;
            char opcode;
            int width;
        };
        const Encoding encodings[] = { { "SHORT_BINUNICODE", '\x8c', 1 }, { "BINUNICODE", 'X', 4 },
            { "BINUNICODE8", '\x8d', 8 }, { "SHORT_BINSTRING", 'U', 1 }, { "BINSTRING", 'T', 4 } };
        // A name padded with a dotted tail past 255 bytes: only a 4- or 8-byte prefix holds its length.
        const std::string longName = "system" + std::string(1, '.') + std::string(300, 'x');
        for (const Encoding& m : encodings) {
            for (const Encoding& n : encodings) {
                for (const std::string& name : { std::string("system"), longName }) {
                    if (n.width == 1 && name.size() > 255)
                        continue;
                    auto enc = [](const Encoding& e, const std::string& t, auto& le) {
                        return QByteArray(1, e.opcode) + le(t.size(), e.width) + QByteArray::fromStdString(t);
                    };
                    // os PUT 0, a decoy PUT 1, name PUT 2, popped; then fetched with GET 0 and GET 2.
                    QByteArray p = QByteArray("\x80\x04", 2) + enc(m, "os", le) + QByteArray("q\0", 2) + "0"
                        + enc(n, "decoy", le) + QByteArray("q\x01", 2) + "0" + enc(n, name, le) + QByteArray("q\x02", 2)
                        + "0" + QByteArray("h\0", 2) + QByteArray("h\x02", 2) + "\x93" + enc(m, "", le) + "\x85R.";
                    const auto s = scan(p);
                    const std::string want = "os." + name;
                    const QByteArray label = QByteArray(m.what) + " / " + n.what + " / " + QByteArray::number(qsizetype(name.size()));
                    QVERIFY2(s.complete, label.constData());
                    auto* g = findGlobal(s, want);
                    QVERIFY2(g, label.constData());
                    QVERIFY2(g->uses & pickle::kCalled, label.constData());
                    QVERIFY2(!findGlobal(s, "os.decoy"), label.constData());
                }
            }
        }
    }

    // The scan names imports however the pickle reaches them, and follows how each is used.
    void scanFollowsTheStack()
    {
        // STACK_GLOBAL operands pushed, memoised, popped and fetched again; a decoy string in between.
        const QByteArray proto4("\x80\x04", 2), proto2("\x80\x02", 2), pop("0"), tuple1("\x85"), tuple2("\x86");
        auto str = [](const char* t) { return QByteArray(1, '\x8c') + char(qstrlen(t)) + t; };
        const QByteArray stackGlobal(1, '\x93'), newObj(1, '\x81');
        QByteArray p = proto4 + str("os") + QByteArray("q\0", 2) + pop + str("decoy") + pop + QByteArray("h\0", 2)
            + str("system") + stackGlobal + str("true") + tuple1 + "R.";
        auto s = scan(p);
        QVERIFY(s.complete);
        auto* g = findGlobal(s, "os.system");
        QVERIFY(g);
        QVERIFY(g->uses & pickle::kCalled);
        QCOMPARE(int(pickle::classifyGlobal(g->module, g->name, g->uses).risk), int(pickle::GlobalRisk::Dangerous));

        // An enum member read with getattr(<class>, "NAME") calls nothing: getattr is no gadget there.
        QByteArray e = proto2 + "cbuiltins\ngetattr\ncmylib\nColor\n" + str("RED") + tuple2 + "R";
        s = scan(e + ".");
        g = findGlobal(s, "builtins.getattr");
        QVERIFY(g);
        QCOMPARE(int(g->uses), int(pickle::kAttributeLookup));
        QCOMPARE(int(pickle::classifyGlobal(g->module, g->name, g->uses).risk), int(pickle::GlobalRisk::Unknown));
        // ... and calling what it returned makes it one.
        s = scan(e + str("x") + tuple1 + "R.");
        g = findGlobal(s, "builtins.getattr");
        QVERIFY(g && (g->uses & pickle::kCalled));
        QCOMPARE(int(pickle::classifyGlobal(g->module, g->name, g->uses).risk), int(pickle::GlobalRisk::Dangerous));

        // A class constructed by NEWOBJ stays an import; a lower-case function called by REDUCE executes.
        QByteArray n = proto4 + str("mylib") + str("Config") + stackGlobal + ")" + newObj + pop + str("mylib")
            + str("wipe") + stackGlobal + ")R.";
        s = scan(n);
        QVERIFY(findGlobal(s, "mylib.Config") && findGlobal(s, "mylib.wipe"));
        QCOMPARE(int(pickle::classifyGlobal("mylib", "Config", findGlobal(s, "mylib.Config")->uses).risk),
            int(pickle::GlobalRisk::Unknown));
        QCOMPARE(int(pickle::classifyGlobal("mylib", "wipe", findGlobal(s, "mylib.wipe")->uses).risk),
            int(pickle::GlobalRisk::Dangerous));

        // Protocol 0 text strings are unescaped before Python looks them up: o\x73 and o\u0073 are "os".
        s = scan(QByteArray("(S'o\\x73'\nVsy\\u0073tem\n") + stackGlobal + "(S'true'\ntR.");
        QVERIFY2(findGlobal(s, "os.system"), s.globals.empty() ? "nothing" : s.globals.front().qualified().c_str());

        // Protocol 2 maps Python 2 names, as Python's unpickler does.
        s = scan(proto2 + "c__builtin__\neval\n" + str("1") + tuple1 + "R.");
        QVERIFY(findGlobal(s, "builtins.eval"));
        // Truncated input: the scan reports what it saw and stops.
        s = scan(proto2 + "cos\nsystem\n" + QByteArray(1, '\x8c') + QByteArray(1, '\xff'));
        QVERIFY(!s.complete && findGlobal(s, "os.system") && !s.problems.empty());
    }

    // The tensor lane (pickle/tensor_record.h) does not build the tuples of the records it takes, as nothing
    // torch writes fetches them again. A pickle that does (its third value is the second tensor's size tuple,
    // by GET) must still read as the opcode loop reads it: the unpickler stops with TensorLaneRestart and the
    // reader runs the pickle again without the lane.
    void fetchingWhatTheTensorLaneSkipped()
    {
        using pickle::TensorLaneRestart;
        auto run = [](const std::string& p, bool lane, size_t* records = nullptr) {
            pickle::Arena arena;
            torch::TorchSemantics sem(torch::TorchSemantics::PersistentIds::Zip);
            pickle::Unpickler u(Bytes(reinterpret_cast<const uint8_t*>(p.data()), p.size()), arena, sem);
            u.setTensorLane(lane);
            auto* root = pickle::asDict(u.load());
            if (records)
                *records = u.tensorRecords();
            return root ? root->items.size() : size_t(0);
        };
        size_t records = 0;
        QCOMPARE(run(twoTensorPickle(false), true, &records), size_t(2));
        QCOMPARE(records, size_t(1)); // the second tensor: the first names its globals, which the lane leaves alone
        QCOMPARE(run(twoTensorPickle(true), false), size_t(3));
        QVERIFY_THROWS_EXCEPTION(TensorLaneRestart, run(twoTensorPickle(true), true));

        QTemporaryDir dir;
        for (bool fetch : { false, true }) {
            const QString path = dir.filePath(fetch ? QStringLiteral("fetch.pt") : QStringLiteral("plain.pt"));
            QVERIFY(writeTwoTensorZip(path, twoTensorPickle(fetch)));
            const QString with = listedWithLanes(path, true);
            QCOMPARE(with, listedWithLanes(path, false));
            QVERIFY2(with.contains(QLatin1String("{\"name\":\"b\",\"kind\":\"tensor\"")), qPrintable(with));
            QCOMPARE(with.contains(QLatin1String("(2, 2)")), fetch);
        }
    }

    // Where more bytes remain than any record can span, the record is read without checking each read
    // against the end (pickle/tensor_record.cpp), but for a string's length: one longer than that cursor
    // takes must still be matched, by the checked one. Both lanes take the second tensor in every case.
    void tensorLaneReadsLongStringsChecked()
    {
        for (const std::string& key : { std::string("1"), std::string(300, '7') })
            for (size_t tail : { size_t(0), size_t(5000) }) {
                const std::string p = twoTensorPickle(false, false, key, tail);
                pickle::Arena arena;
                torch::TorchSemantics sem(torch::TorchSemantics::PersistentIds::Zip);
                pickle::Unpickler u(Bytes(reinterpret_cast<const uint8_t*>(p.data()), p.size()), arena, sem);
                u.setTensorLane(true);
                const pickle::DictValue* root = pickle::asDict(u.load());
                QVERIFY(root && root->items.size() == (tail ? 3u : 2u));
                const auto* b = pickle::asTensor(root->items[1].second);
                QVERIFY(b && b->storage && b->storage->key == key);
                QCOMPARE(u.tensorRecords(), size_t(1));
                QCOMPARE(scan(QByteArray(p.data(), qsizetype(p.size()))).tensorRecords, uint64_t(1));
            }
    }

    // A pickle that ends right after a record the lane takes: the scan says where as the opcode loop does,
    // at the record's last opcode (its result's PUT), not where the record began (found by fuzz_pickle).
    void tensorLaneEndsWhereTheOpcodeLoopEnds()
    {
        std::string p = twoTensorPickle(false);
        p.resize(p.size() - 2); // no SETITEMS, no STOP: the pickle ends with b's record
        const QByteArray bytes(p.data(), qsizetype(p.size()));
        const pickle::PickleScan with = scan(bytes), without = pickle::scanPickle(
            Bytes(reinterpret_cast<const uint8_t*>(p.data()), p.size()), 0, 2, false);
        QCOMPARE(with.tensorRecords, uint64_t(1));
        QVERIFY(with.ranOut && !with.problems.empty());
        QCOMPARE(with.problems, without.problems);
        QCOMPARE(with.problems.back(), "at offset " + std::to_string(p.size() - 2) + ": ends without STOP");
    }

    // A record the scan's lane takes still calls what it fetches: b's backward hooks are os.system(), an import
    // the pickle only named as a value before. The scan must see the call and call the pickle dangerous.
    void tensorLaneSeesWhatARecordCalls()
    {
        const std::string p = twoTensorPickle(false, true);
        const QByteArray bytes(p.data(), qsizetype(p.size()));
        const pickle::PickleScan s = scan(bytes);
        QCOMPARE(s.tensorRecords, uint64_t(1));
        bool called = false;
        for (const auto& g : s.globals)
            called |= g.module == "os" && g.name == "system" && (g.uses & pickle::kCalled);
        QVERIFY(called);
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("system_hooks.pt"));
        QVERIFY(writeTwoTensorZip(path, p));
        const QString listed = listedWithLanes(path, true);
        QCOMPARE(listed, listedWithLanes(path, false));
        QVERIFY2(listed.contains(QLatin1String("\"verdict\":\"executes\"")) && listed.contains(QLatin1String("\"executes\":[\"os.system\"]")),
            qPrintable(listed));
    }

    // Python 2 names as pickle's find_class maps them at protocols 0-2, against the Python at hand's own
    // _compat_pickle: a renamed (module, name) pair first, else a renamed module; nothing at protocol 3.
    // SocketServer.TCPServer is socketserver.TCPServer to torch.load, thread.start_new_thread is
    // _thread.start_new_thread: a scan must name what Python imports.
    void python2NamesAsCPythonMapsThem()
    {
        const auto py = test::run(QStringLiteral("/usr/bin/python3"), { QStringLiteral("-c"),
            QStringLiteral("import _compat_pickle as c, json; print(json.dumps({'names': [[m, n, m2, n2] for (m, n), (m2, n2)"
                           " in c.NAME_MAPPING.items()], 'modules': list(c.IMPORT_MAPPING.items())}))") });
        if (py.exitCode != 0)
            QSKIP("no /usr/bin/python3 to read _compat_pickle from");
        const QJsonObject o = QJsonDocument::fromJson(py.out).object();
        const QJsonArray names = o.value(QStringLiteral("names")).toArray(), modules = o.value(QStringLiteral("modules")).toArray();
        QVERIFY(names.size() > 80 && modules.size() > 50);
        auto mapped = [](const QJsonValue& m, const QJsonValue& n, int protocol) {
            const std::string module = m.toString().toStdString(), name = n.toString().toStdString();
            auto [m2, n2] = pickle::mapLegacyName(module, name, protocol);
            return QStringList { QString::fromUtf8(m2.data(), qsizetype(m2.size())), QString::fromUtf8(n2.data(), qsizetype(n2.size())) };
        };
        QSet<QString> pairs;
        for (const auto& v : names) {
            const QJsonArray e = v.toArray();
            pairs.insert(e[0].toString() + QLatin1Char('\n') + e[1].toString());
            QCOMPARE(mapped(e[0], e[1], 2), (QStringList { e[2].toString(), e[3].toString() }));
            QCOMPARE(mapped(e[0], e[1], 3), (QStringList { e[0].toString(), e[1].toString() }));
        }
        const QString other = QStringLiteral("NotRenamed");
        for (const auto& v : modules) {
            const QJsonArray e = v.toArray();
            QVERIFY(!pairs.contains(e[0].toString() + QLatin1Char('\n') + other));
            QCOMPARE(mapped(e[0], other, 1), (QStringList { e[1].toString(), other }));
            QCOMPARE(mapped(e[0], other, 4), (QStringList { e[0].toString(), other }));
        }
        QCOMPARE(mapped(QStringLiteral("collections"), QStringLiteral("OrderedDict"), 2), (QStringList { QStringLiteral("collections"), QStringLiteral("OrderedDict") }));
        QCOMPARE(mapped(QStringLiteral("torch.tensor"), QStringLiteral("_rebuild_from_type_v2"), 2), (QStringList { QStringLiteral("torch._tensor"), QStringLiteral("_rebuild_from_type_v2") }));
    }

    // The scan is linear: a 32 MB pickle of memo traffic takes well under a second.
    void scanIsLinear()
    {
        QByteArray p("\x80\x04");
        p.reserve(32 << 20);
        while (p.size() < (32 << 20))
            p += QByteArray("\x8c\x01xq\x01h\x01" "00", 9);
        p += "N.";
        QElapsedTimer clock;
        clock.start();
        auto s = scan(p);
        QVERIFY(s.complete);
        QVERIFY2(clock.elapsed() < 5000, qPrintable(QString::number(clock.elapsed())));
    }
};

QTEST_GUILESS_MAIN(TestHostilePickles)
#include "tst_hostile_pickles.moc"
