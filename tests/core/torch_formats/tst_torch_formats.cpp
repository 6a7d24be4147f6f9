// torch.save formats against torch's own numbers.
//
// Every fixture in tests/fixtures/torch/ has a `<file>.expected.json` written by
// tests/fixtures/make_torch_fixtures.py (torch 1.13 loads the file and lists what it holds; byte offsets
// come from Python's zipfile and a walk of the legacy storage section) or by
// make_torch2_reconstructions.py (torch 2.x-only files rebuilt without torch, marked "reconstruction").
// The tests open each file with sl::openSource and compare with those numbers, never with StateLens's
// own output.

#include "common/qt_text.h"
#include "common/test_paths.h"
#include "formats/loader.h"
#include "model/dtype.h"
#include "model/source.h"
#include "util/error.h"
#include "util/timings.h"

#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMap>
#include <QSet>
#include <QTest>

#include "io/input_file.h"
#include "io/zip_archive.h"
#include "pickle/opcode_scan.h"
#include "pickle/unpickler.h"
#include "report/source_report.h"
#include "torch/torch_semantics.h"

#include <cmath>
#include <thread>

using namespace sl;

namespace {

QString torchFixturesDir() { return test::fixturesDir() + QStringLiteral("/torch"); }

QJsonObject readExpected(const QString& fixture)
{
    QFile f(torchFixturesDir() + "/" + fixture + ".expected.json");
    if (!f.open(QIODevice::ReadOnly))
        return {};
    return QJsonDocument::fromJson(f.readAll()).object();
}

QStringList expectedFixtures()
{
    QStringList out;
    const QStringList files = QDir(torchFixturesDir()).entryList({ QStringLiteral("*.expected.json") }, QDir::Files,
        QDir::Name);
    for (const QString& f : files)
        out << f.chopped(int(sizeof(".expected.json") - 1));
    return out;
}

std::string path(const QString& fixture) { return (torchFixturesDir() + "/" + fixture).toStdString(); }

using sl::test::q;

QString kindName(EntryKind k)
{
    switch (k) {
    case EntryKind::Tensor:
        return QStringLiteral("tensor");
    case EntryKind::Group:
        return QStringLiteral("group");
    case EntryKind::Object:
        return QStringLiteral("object");
    }
    return {};
}

QString locationKindText(TensorLocation::Kind k)
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
    return {};
}

template <typename Container>
QString listText(const Container& v)
{
    QStringList parts;
    for (const auto& x : v)
        parts << QString::number(x);
    return "[" + parts.join(", ") + "]";
}

QString listText(const QJsonArray& a)
{
    QStringList parts;
    for (const auto& x : a)
        parts << QString::number(x.toInteger());
    return "[" + parts.join(", ") + "]";
}

// Collects every mismatch of one fixture so a failure shows them all at once.
class Checker {
public:
    QStringList problems;

    void expect(bool ok, const QString& where, const QString& what)
    {
        if (!ok && problems.size() < 60)
            problems << where + ": " + what;
    }

    template <typename A, typename B>
    void equal(const A& actual, const B& expected, const QString& where, const char* field)
    {
        if (!(actual == expected))
            expect(false, where, QStringLiteral("%1 is %2, torch says %3").arg(field).arg(text(actual)).arg(text(expected)));
    }

    void entries(const std::vector<Entry>& actual, const QJsonArray& expected, const QString& where)
    {
        QStringList actualNames;
        for (const auto& e : actual)
            actualNames << q(e.name);
        QStringList expectedNames;
        for (const auto& e : expected)
            expectedNames << e.toObject().value("name").toString();
        if (actualNames != expectedNames) {
            qsizetype at = 0;
            while (at < actualNames.size() && at < expectedNames.size() && actualNames[at] == expectedNames[at])
                ++at;
            auto from = [at](const QStringList& l) { return l.mid(at, 6).join(QStringLiteral(" | ")); };
            expect(false, where,
                QStringLiteral("%1 entries, torch says %2; from entry %3 on\n    StateLens: %4\n    torch:     %5")
                    .arg(actualNames.size())
                    .arg(expectedNames.size())
                    .arg(at)
                    .arg(from(actualNames), from(expectedNames)));
            return;
        }
        for (qsizetype i = 0; i < expected.size(); ++i)
            entry(actual[size_t(i)], expected[i].toObject(), where + " '" + expectedNames[i] + "'");
    }

    void entry(const Entry& a, const QJsonObject& e, const QString& where)
    {
        equal(kindName(a.kind), e.value("kind").toString(), where, "kind");
        if (a.kind == EntryKind::Object) {
            equal(q(a.typeName), e.value("type_name").toString(), where, "type name");
            return;
        }
        equal(QString::fromLatin1(dtypeName(a.dtype).data(), qsizetype(dtypeName(a.dtype).size())),
            e.value("dtype").toString(), where, "dtype");
        equal(listText(a.shape), listText(e.value("shape").toArray()), where, "shape");
        if (e.value("kind").toString() == QLatin1String("tensor"))
            tensor(a, e, where);
        if (e.contains("parts")) {
            const QJsonArray parts = e.value("parts").toArray();
            if (a.parts.size() != size_t(parts.size())) {
                QStringList names;
                for (const auto& p : a.parts)
                    names << q(p.name);
                expect(false, where,
                    QStringLiteral("has %1 parts (%2), torch says %3").arg(a.parts.size()).arg(names.join(", ")).arg(parts.size()));
                return;
            }
            for (qsizetype i = 0; i < parts.size(); ++i) {
                const QJsonObject p = parts[i].toObject();
                equal(q(a.parts[size_t(i)].name), p.value("name").toString(), where, "part name");
                entry(a.parts[size_t(i)], p, where + " part '" + p.value("name").toString() + "'");
            }
        } else if (e.value("kind").toString() == QLatin1String("tensor")) {
            expect(a.parts.empty(), where, QStringLiteral("has %1 unexpected parts").arg(a.parts.size()));
        }
    }

    void tensor(const Entry& a, const QJsonObject& e, const QString& where)
    {
        const TensorLocation& loc = a.location;
        equal(a.requiresGrad, e.value("requires_grad").toBool(), where, "requires_grad");
        equal(a.isParameter, e.value("is_parameter").toBool(), where, "is Parameter");
        if (e.contains("device"))
            equal(q(a.device), e.value("device").toString(), where, "device");
        equal(q(a.typeName), e.value("type_name").toString(), where, "tensor type");
        if (e.contains("stride"))
            equal(listText(loc.strides), listText(e.value("stride").toArray()), where, "stride");
        if (e.contains("storage_offset"))
            equal(qint64(loc.storageOffset), e.value("storage_offset").toInteger(), where, "storage offset");
        if (e.contains("layout")) {
            const std::string* layout = a.attribute("layout");
            equal(layout ? q(*layout) : QString(), e.value("layout").toString(), where, "layout");
        }
        if (e.contains("quant"))
            quant(a, e.value("quant").toObject(), where);
        for (const auto& key : e.value("state_keys").toArray())
            expect(a.attribute(key.toString().toStdString()), where,
                QStringLiteral("no attribute for the subclass state '%1'").arg(key.toString()));
        expect(!a.attribute("invalid_view"), where, QStringLiteral("flagged as an invalid view"));

        if (e.contains("has_storage") && !e.value("has_storage").toBool()) {
            equal(locationKindText(loc.kind), QStringLiteral("none"), where, "location kind");
            return;
        }
        if (!e.contains("storage_group") || e.value("storage_group").isNull())
            return;
        const bool compressed = e.value("compressed").toBool();
        equal(locationKindText(loc.kind), compressed ? QStringLiteral("compressed") : QStringLiteral("mapped"), where,
            "location kind");
        equal(loc.file, 0, where, "location file");
        equal(quint64(loc.storageNbytes), quint64(e.value("storage_nbytes").toInteger()), where, "storage bytes");
        equal(quint64(loc.storageByteOffset), quint64(e.value("storage_byte_offset").toInteger()), where,
            "storage byte offset");
        equal(quint64(loc.length), quint64(e.value("byte_length").toInteger()), where, "byte length");
        // Mapped: the view's first byte. Compressed: the record's data offset (entry.h), since no byte
        // inside a deflated record has an address in the file.
        const char* field = compressed ? "offset (record data offset)" : "byte offset";
        const qint64 want = compressed ? e.value("storage_byte_offset").toInteger() : e.value("byte_offset").toInteger();
        equal(quint64(loc.offset), quint64(want), where, field);
    }

    void quant(const Entry& a, const QJsonObject& qe, const QString& where)
    {
        auto attr = [&](const char* key) {
            const std::string* v = a.attribute(key);
            return v ? q(*v) : QString();
        };
        equal(attr("qscheme"), qe.value("qscheme").toString(), where, "qscheme");
        if (qe.contains("scale")) {
            bool ok = false;
            const double scale = attr("scale").toDouble(&ok);
            const double want = qe.value("scale").toDouble();
            expect(ok && std::abs(scale - want) <= 1e-7 * std::abs(want), where,
                QStringLiteral("scale is '%1', torch says %2").arg(attr("scale")).arg(want, 0, 'g', 17));
            equal(attr("zero_point"), QString::number(qe.value("zero_point").toInteger()), where, "zero point");
        }
        if (qe.contains("axis"))
            equal(attr("axis"), QString::number(qe.value("axis").toInteger()), where, "axis");
    }

    // Entries torch loaded onto one storage must share location.storageId, and no others may.
    void storageGroups(const std::vector<const Entry*>& actual, const std::vector<QJsonObject>& expected,
        const QString& where)
    {
        QMap<qint64, QString> idOfGroup;
        QMap<QString, qint64> groupOfId;
        for (size_t i = 0; i < actual.size() && i < expected.size(); ++i) {
            const QJsonValue g = expected[i].value("storage_group");
            if (!g.isDouble())
                continue;
            const qint64 group = g.toInteger();
            const QString id = q(actual[i]->location.storageId);
            const QString name = where + " '" + q(actual[i]->name) + "'";
            if (id.isEmpty()) {
                expect(false, name, QStringLiteral("has no storage id"));
                continue;
            }
            if (idOfGroup.contains(group) && idOfGroup[group] != id)
                expect(false, name,
                    QStringLiteral("shares torch storage group %1 but has storage id '%2', not '%3'")
                        .arg(group)
                        .arg(id, idOfGroup[group]));
            if (groupOfId.contains(id) && groupOfId[id] != group)
                expect(false, name,
                    QStringLiteral("storage id '%1' is also used by torch storage group %2, a different storage")
                        .arg(id)
                        .arg(groupOfId[id]));
            idOfGroup.insert(group, id);
            groupOfId.insert(id, group);
        }
    }

    void findings(const Source& s, const QJsonObject& exp)
    {
        auto severityOf = [](const QString& name) {
            return name == QLatin1String("danger") ? Severity::Danger
                : name == QLatin1String("warning") ? Severity::Warning
                                                   : Severity::Info;
        };
        auto matches = [&](const Finding& f, const QJsonObject& pattern) {
            return f.severity == severityOf(pattern.value("severity").toString())
                && q(f.message).contains(pattern.value("contains").toString());
        };
        const QJsonArray required = exp.value("findings").toArray();
        const QJsonArray allowed = exp.value("allowed_findings").toArray();
        QStringList all;
        for (const auto& f : s.findings)
            all << QString::fromLatin1(severityName(f.severity).data()) + ": " + q(f.message);
        for (const auto& r : required) {
            const QJsonObject pattern = r.toObject();
            bool found = std::any_of(s.findings.begin(), s.findings.end(), [&](const Finding& f) { return matches(f, pattern); });
            expect(found, QStringLiteral("findings"),
                QStringLiteral("no %1 finding containing '%2' among: %3")
                    .arg(pattern.value("severity").toString(), pattern.value("contains").toString(), all.join(" || ")));
        }
        // Warnings and dangers are promises about the file: none may appear unless declared.
        for (const auto& f : s.findings) {
            if (f.severity == Severity::Info)
                continue;
            bool declared = false;
            for (const QJsonArray* list : { &required, &allowed })
                for (const auto& p : *list)
                    declared |= matches(f, p.toObject());
            expect(declared, QStringLiteral("findings"),
                QStringLiteral("unexpected %1: %2").arg(QString::fromLatin1(severityName(f.severity).data()), q(f.message)));
        }
    }

private:
    static QString text(const QString& s) { return "'" + s + "'"; }
    static QString text(bool b) { return b ? QStringLiteral("true") : QStringLiteral("false"); }
    template <typename N>
    static QString text(N n)
    {
        return QString::number(n);
    }
};

template <typename Entries> void flatten(const Entries& entries, std::vector<const Entry*>& out)
{
    for (const auto& e : entries) {
        if (e.kind != EntryKind::Object)
            out.push_back(&e);
        flatten(e.parts, out);
    }
}

void flatten(const QJsonArray& entries, std::vector<QJsonObject>& out)
{
    for (const auto& v : entries) {
        const QJsonObject e = v.toObject();
        if (e.value("kind").toString() != QLatin1String("object"))
            out.push_back(e);
        flatten(e.value("parts").toArray(), out);
    }
}

QString report(const Checker& c) { return c.problems.join(QStringLiteral("\n  ")); }

// openSource and withContainer, with a LoadError recorded as a problem instead of ending the test.
bool open(Checker& c, const QString& fixture, const OpenOptions& opts, Source& out)
{
    try {
        out = openSource(path(fixture), opts);
        return true;
    } catch (const std::exception& e) {
        c.expect(false, "openSource", QString::fromStdString(e.what()));
        return false;
    }
}

bool switchTo(Checker& c, const Source& from, const QString& container, Source& out)
{
    try {
        out = from.withContainer(container.toStdString());
        return true;
    } catch (const std::exception& e) {
        c.expect(false, "withContainer(" + container + ")", QString::fromStdString(e.what()));
        return false;
    }
}

} // namespace

// Fails on any problem, except where the expected file names a known StateLens issue for this test
// function: there the failure is expected, and an XPASS once it is fixed says to drop the note.
#define VERIFY_FIXTURE(c, exp)                                                                                 \
    do {                                                                                                       \
        const QJsonObject known = (exp).value("known_issue").toObject();                                       \
        if (known.value("tests").toArray().contains(QString::fromLatin1(QTest::currentTestFunction())))        \
            QEXPECT_FAIL("", qPrintable("known issue: " + known.value("text").toString()), Abort);             \
        QVERIFY2((c).problems.isEmpty(), qPrintable("\n  " + report(c)));                                      \
    } while (false)

class TstTorchFormats : public QObject {
    Q_OBJECT

private slots:
    void fixturesArePresent();
    void fixture_data();
    void fixture();
    void storageSharingAcrossFile_data();
    void storageSharingAcrossFile();
    void selectContainer_data();
    void selectContainer();
    void withContainerRoundTrip_data();
    void withContainerRoundTrip();
    void unknownContainerIsAnError();
    void deflatedArchive();
    void torchAlignmentRuleMatchesEveryRecord();
    void earlyUnpickleIsKeptOnlyForTheRecordTorchReads();
    void tensorLanesChangeNothing();
    void deferredEntriesListAlike();
    void plainTensorJsonAsFieldByField();
    void plainTensorJsonWithEveryField();
    void deferredEntriesBuildOnceOnDemand();
};

// StateLens computes record offsets of large torch archives with torch's alignment rule; on every zip
// fixture torch wrote, the rule must give exactly what each local header says.
void TstTorchFormats::torchAlignmentRuleMatchesEveryRecord()
{
    int checked = 0;
    for (const QString& f : expectedFixtures()) {
        // deflated.pt and renamed_keys.pt were re-written by Python's zipfile, which does not align records.
        if (f.endsWith(QLatin1String(".legacy.pt")) || f == QLatin1String("deflated.pt")
            || f == QLatin1String("renamed_keys.pt"))
            continue;
        auto file = sl::InputFile::open((torchFixturesDir() + "/" + f).toStdString());
        std::vector<uint8_t> head;
        if (!sl::looksLikeZip(file->prefix(4, head)))
            continue;
        sl::ZipArchive zip(*file);
        uint64_t alignment = 64;
        std::vector<uint8_t> text;
        for (const auto& e : zip.entries())
            if (std::string_view(e.name).ends_with("/.storage_alignment")) {
                const sl::Bytes b = zip.contents(e, text, 64);
                alignment = std::stoull(std::string(reinterpret_cast<const char*>(b.data()), b.size()));
            }
        for (const auto& e : zip.entries()) {
            QVERIFY2(zip.dataOffset(e) == zip.torchDataOffset(e, alignment),
                qPrintable(f + ": " + QString::fromStdString(std::string(e.name))));
            ++checked;
        }
        QVERIFY(zip.torchLayoutHolds(alignment, 64));
    }
    QVERIFY2(checked > 500, qPrintable(QString::number(checked)));
}

// torch writes data.pkl as the first record, so StateLens unpickles it while a second thread reads the
// central directory, which decides afterwards (torch_zip_reader.cpp). A file torch wrote keeps that work: one
// pickle phase, then a wait for the load-safety scan. An archive whose first record is a data.pkl that torch
// does not read (a duplicate; tst_hostile_pickles checks those entries against torch) unpickles again, and
// one whose first record is deflated starts in order.
void TstTorchFormats::earlyUnpickleIsKeptOnlyForTheRecordTorchReads()
{
    const auto phases = [](const QString& file) {
        Timings timings;
        OpenOptions options;
        options.timings = &timings;
        openSource(file.toStdString(), options);
        QStringList names;
        for (const auto& p : timings.phases)
            names << QString::fromStdString(p.name);
        return names;
    };
    const QStringList kept = phases(torchFixturesDir() + QStringLiteral("/many_records.pt"));
    QCOMPARE(kept.count(QStringLiteral("pickle")), 1);
    QVERIFY2(kept.contains(QStringLiteral("zip end records + data.pkl")), qPrintable(kept.join(", ")));
    QVERIFY2(kept.contains(QStringLiteral("load-safety scan (wait)")), qPrintable(kept.join(", ")));
    const QStringList dropped = phases(test::fixturesDir() + QStringLiteral("/hostile/zip/duplicate_pkl_adjacent.pt"));
    QCOMPARE(dropped.count(QStringLiteral("pickle")), 2);
    QVERIFY2(!dropped.contains(QStringLiteral("load-safety scan (wait)")), qPrintable(dropped.join(", ")));
    const QStringList inOrder = phases(torchFixturesDir() + QStringLiteral("/deflated.pt"));
    QCOMPARE(inOrder.count(QStringLiteral("pickle")), 1);
    QVERIFY2(!inOrder.contains(QStringLiteral("zip end records + data.pkl")), qPrintable(inOrder.join(", ")));
}

namespace {

// Every field of a load-safety scan, as text to compare.
QString scanText(const pickle::PickleScan& s)
{
    QString out = QStringLiteral("consumed %1 complete %2 ranOut %3\n").arg(s.consumed).arg(s.complete).arg(s.ranOut);
    for (const auto& g : s.globals)
        out += QStringLiteral("%1.%2 %3 @%4 uses %5 count %6 depth %7 attribute %8\n")
                   .arg(q(g.module), q(g.name), q(g.opcode))
                   .arg(g.offset)
                   .arg(g.uses)
                   .arg(g.count)
                   .arg(g.nestedDepth)
                   .arg(g.attribute);
    for (const auto& p : s.problems)
        out += q(p) + "\n";
    return out;
}

// Every container's JSON listing, or the error.
QString everyListing(const std::string& file, bool lanes)
{
    OpenOptions options;
    options.tensorLanes = lanes;
    try {
        Source s = openSource(file, options);
        QString out = QString::fromStdString(sourceToJson(s));
        for (const ContainerInfo& c : s.containers)
            out += QString::fromStdString(sourceToJson(s.withContainer(c.path)));
        return out;
    } catch (const std::exception& e) {
        return QString::fromUtf8(e.what());
    }
}

} // namespace

// The tensor lanes (pickle/tensor_record.h) take each tensor record torch writes in one step, in the
// unpickler and in the load-safety scan. On every torch.save zip here and in ../shared/fixtures/real
// (torch 1.x and 2.x, Lightning, torchao, HF tools), every container lists the same with and without them,
// and the scan of data.pkl is the same field for field. And they do take records: in many_records.pt
// (torch 1.13's state dict of float tensors) every tensor but the first, which names the globals.
void TstTorchFormats::tensorLanesChangeNothing()
{
    QStringList files;
    for (const QString& f : expectedFixtures())
        files << torchFixturesDir() + "/" + f;
    if (const QString real = test::realFixturesDir(); !real.isEmpty())
        for (QDirIterator it(real, QDir::Files, QDirIterator::Subdirectories); it.hasNext();)
            files << it.next();
    int zips = 0, withRecords = 0;
    bool sawManyRecords = false;
    for (const QString& file : files) {
        std::shared_ptr<const InputFile> in;
        std::vector<uint8_t> head;
        size_t records = 0, scanned = 0;
        try {
            in = InputFile::open(file.toStdString());
            if (!looksLikeZip(in->prefix(4, head)))
                continue;
            ZipArchive zip(*in);
            const ZipEntry* pkl = nullptr;
            for (const auto& e : zip.entries())
                if (std::string_view(e.name).ends_with("/data.pkl") && std::string_view(e.name).find('/') + 9 == e.name.size())
                    pkl = &e;
            if (!pkl)
                continue;
            std::vector<uint8_t> buffer;
            const Bytes bytes = zip.contents(*pkl, buffer, 1 << 30);
            const pickle::PickleScan laned = pickle::scanPickle(bytes, 0, 2, true);
            QCOMPARE(scanText(laned), scanText(pickle::scanPickle(bytes, 0, 2, false)));
            scanned = laned.tensorRecords;
            pickle::Arena arena;
            torch::TorchSemantics semantics(torch::TorchSemantics::PersistentIds::Zip);
            pickle::Unpickler unpickler(bytes, arena, semantics);
            unpickler.setTensorLane(true);
            try {
                unpickler.load();
            } catch (const FormatError&) {
            }
            records = unpickler.tensorRecords();
        } catch (const FormatError&) {
            continue; // not a zip this test can read; the listings below still compare
        }
        ++zips;
        withRecords += records > 0;
        const std::string path = file.toStdString();
        QCOMPARE(everyListing(path, true), everyListing(path, false));
        if (file.endsWith(QLatin1String("/many_records.pt"))) {
            const qsizetype tensors = readExpected(QStringLiteral("many_records.pt")).value("entries").toArray().size();
            QVERIFY(tensors > 100);
            QCOMPARE(qsizetype(records), tensors - 1);
            QCOMPARE(qsizetype(scanned), tensors - 1);
            sawManyRecords = true;
        }
    }
    qInfo("%d zips, %d with records the lane took", zips, withRecords);
    QVERIFY(sawManyRecords);
    QVERIFY2(zips >= 30, qPrintable(QString::number(zips)));
}

namespace {

Source openDeferring(const std::string& path, bool defer)
{
    OpenOptions options;
    options.deferEntries = defer;
    return openSource(path, options);
}

} // namespace

// A state dict of plain tensors is handed over as rows (model/entry_list.h), its entries built on first
// access. On every torch.save file (zip and legacy) among the fixtures here, hostile ones included, and in
// ../shared/fixtures/real, the table and the JSON a listing writes from the rows, and the JSON of the entries
// built from them, are those of the entries built as the file is read. And rows are handed over: for many_records.pt
// and for a share of the real files.
void TstTorchFormats::deferredEntriesListAlike()
{
    QStringList files;
    for (QDirIterator it(test::fixturesDir(), QDir::Files, QDirIterator::Subdirectories); it.hasNext();)
        if (const QString f = it.next(); !f.endsWith(QLatin1String(".json")))
            files << f;
    const QString real = test::realFixturesDir();
    if (!real.isEmpty())
        for (QDirIterator it(real, QDir::Files, QDirIterator::Subdirectories); it.hasNext();)
            files << it.next();
    int torchFiles = 0, deferred = 0;
    bool manyRecordsDeferred = false, bnbGrouped = false;
    int nestedPlainDeferred = 0; // both: rows whose names are top-level keys' own bytes, and composed ones
    for (const QString& file : files) {
        const std::string path = file.toStdString();
        Source rows, built;
        try {
            rows = openDeferring(path, true);
            built = openDeferring(path, false);
        } catch (const std::exception&) {
            continue; // refused either way (the other tests check how)
        }
        if (rows.format != SourceFormat::TorchZip && rows.format != SourceFormat::TorchLegacy)
            continue;
        ++torchFiles;
        QVERIFY2(!built.entries.deferred(), qPrintable(file));
        if (rows.entries.deferred()) {
            ++deferred;
            manyRecordsDeferred |= file.endsWith(QLatin1String("/many_records.pt"));
            nestedPlainDeferred += file.endsWith(QLatin1String("/nested_plain.pt"))
                || file.endsWith(QLatin1String("/nested_plain.legacy.pt"));
            QCOMPARE(rows.entries.size(), built.entries.size()); // counted without building them
            // Listed from the rows: they are still not built after.
            QCOMPARE(QString::fromStdString(sourceToTable(rows)), QString::fromStdString(sourceToTable(built)));
            QVERIFY2(rows.entries.deferred(), qPrintable(file));
        } else {
            QCOMPARE(QString::fromStdString(sourceToTable(rows)), QString::fromStdString(sourceToTable(built)));
        }
        // JSON builds one entry at a time and forgets it (DeferredEntries::forEachBuilt): still rows after.
        const bool wasDeferred = rows.entries.deferred() != nullptr;
        QCOMPARE(QString::fromStdString(sourceToJson(rows)), QString::fromStdString(sourceToJson(built)));
        QCOMPARE(rows.entries.deferred() != nullptr, wasDeferred);
        // Any other access builds the entries, as the reader would have.
        QCOMPARE(std::as_const(rows.entries).vector().size(), built.entries.size());
        QVERIFY2(!rows.entries.deferred(), qPrintable(file));
        QCOMPARE(QString::fromStdString(sourceToJson(rows)), QString::fromStdString(sourceToJson(built)));
        if (file.endsWith(QLatin1String("/bnb_int8.pt"))) {
            // Plain int8 tensors and their SCB scales: the names show bitsandbytes, so they are grouped.
            bool group = false;
            for (const Entry& e : rows.entries)
                group |= e.kind == EntryKind::Group;
            bnbGrouped = group;
        }
    }
    qInfo("%d torch.save files, %d handed over as rows", torchFiles, deferred);
    QVERIFY(manyRecordsDeferred);
    QCOMPARE(nestedPlainDeferred, 2);
    QVERIFY(bnbGrouped);
    QVERIFY2(deferred >= 5, qPrintable(QString::number(deferred)));
    if (!real.isEmpty())
        QVERIFY2(deferred >= 20, qPrintable(QString::number(deferred)));
}

// The entries of rows are built once, whichever thread asks first; copies list alike; a change builds them
// first, then applies.
void TstTorchFormats::deferredEntriesBuildOnceOnDemand()
{
    const std::string path = (torchFixturesDir() + "/many_records.pt").toStdString();
    const Source built = openDeferring(path, false);
    const std::string want = sourceToJson(built);
    {
        const Source s = openDeferring(path, true);
        QVERIFY(s.entries.deferred());
        std::string seen[2];
        std::thread other([&] { seen[1] = s.entries[5].name + std::to_string(s.entries.size()); });
        seen[0] = s.entries[5].name + std::to_string(s.entries.size());
        other.join();
        QCOMPARE(seen[0], seen[1]);
        QCOMPARE(seen[0], built.entries[5].name + std::to_string(built.entries.size()));
        QVERIFY(!s.entries.deferred());
        QCOMPARE(sourceToJson(s), want);
    }
    {
        Source s = openDeferring(path, true);
        const Source copy = s; // shares the rows; each builds its own entries
        QVERIFY(copy.entries.deferred());
        s.entries.push_back(Entry {});
        QVERIFY(!s.entries.deferred());
        QCOMPARE(s.entries.size(), built.entries.size() + 1);
        QCOMPARE(s.entries.front().name, built.entries.front().name);
        QVERIFY(copy.entries.deferred());
        QCOMPARE(sourceToJson(copy), want);
        Source moved = std::move(s);
        QCOMPARE(moved.entries.size(), built.entries.size() + 1);
    }
    {
        Source s = openDeferring(path, true);
        s.entries.clear(); // drops the rows unbuilt
        QVERIFY(!s.entries.deferred());
        QVERIFY(s.entries.empty());
    }
}

// The suite is only as good as its fixtures: a missing one must fail, not shrink the data table.
void TstTorchFormats::fixturesArePresent()
{
    const QStringList have = expectedFixtures();
    QStringList missing;
    for (const char* stem : { "dtypes", "views", "tied", "params", "module_sd", "meta", "empty_scalar", "quant",
             "qdynamic_sd", "qstatic_sd", "sparse", "subclass", "train_ckpt", "model_state_dict", "ema",
             "nested_model_module", "nanogpt", "whole_module", "bare_tensor", "tensor_list", "mixed", "nested_plain",
             "conj_views", "no_tensors" }) {
        for (const QString& suffix : { QStringLiteral(".pt"), QStringLiteral(".legacy.pt") })
            if (!have.contains(QLatin1String(stem) + suffix))
                missing << QLatin1String(stem) + suffix;
    }
    for (const char* f : { "lightning.pt", "deepspeed.pt", "tensor_tuple.pt", "proto1.pt", "proto2.pt", "proto3.pt",
             "proto4.pt", "proto5.pt", "proto1.legacy.pt", "proto4.legacy.pt", "proto5.legacy.pt", "deflated.pt",
             "buffer_saved.pt", "gan.pt", "ema_and_optimizer.pt", "t2_new_dtypes.pt",
             "many_records.pt" })
        if (!have.contains(QLatin1String(f)))
            missing << QLatin1String(f);
    QVERIFY2(missing.isEmpty(), qPrintable("missing fixtures (run tests/fixtures/make_torch_fixtures.py): " + missing.join(", ")));
    for (const QString& f : have)
        QVERIFY2(QFile::exists(torchFixturesDir() + "/" + f), qPrintable(f + " has an expected file but no data file"));
}

void TstTorchFormats::fixture_data()
{
    QTest::addColumn<QString>("file");
    for (const QString& f : expectedFixtures())
        QTest::newRow(qPrintable(f)) << f;
}

void TstTorchFormats::fixture()
{
    QFETCH(QString, file);
    const QJsonObject exp = readExpected(file);
    QVERIFY2(!exp.isEmpty(), "unreadable expected JSON");

    Checker c;
    Source s;
    if (open(c, file, {}, s)) {
        c.equal(q(formatId(s.format)), exp.value("format").toString(), "source", "format");
        c.equal(q(s.container), exp.value("container").toString(), "source", "picked container");
        QStringList containers;
        for (const auto& ci : s.containers)
            containers << q(ci.path);
        for (const auto& want : exp.value("containers_include").toArray())
            c.expect(containers.contains(want.toString()), "containers",
                QStringLiteral("'%1' is not among the candidates [%2]").arg(want.toString(), containers.join(", ")));
        const QJsonObject meta = exp.value("metadata").toObject();
        for (auto it = meta.begin(); it != meta.end(); ++it) {
            const std::pair<std::string, std::string> want { it.key().toStdString(),
                it.value().toString().toStdString() };
            c.expect(std::find(s.metadata.begin(), s.metadata.end(), want) != s.metadata.end(), "metadata",
                QStringLiteral("no %1 = '%2'").arg(it.key(), it.value().toString()));
        }
        if (q(s.container) == exp.value("container").toString()) {
            c.entries(s.entries, exp.value("entries").toArray(), file);
            std::vector<const Entry*> flatActual;
            std::vector<QJsonObject> flatExpected;
            flatten(s.entries, flatActual);
            flatten(exp.value("entries").toArray(), flatExpected);
            if (flatActual.size() == flatExpected.size())
                c.storageGroups(flatActual, flatExpected, file);
        }
        c.findings(s, exp);
    }
    VERIFY_FIXTURE(c, exp);
}

// Storage groups hold across containers of one file: the optimizer's tensors never share the model's.
void TstTorchFormats::storageSharingAcrossFile_data()
{
    QTest::addColumn<QString>("file");
    for (const QString& f : expectedFixtures())
        if (!readExpected(f).value("alternates").toArray().isEmpty())
            QTest::newRow(qPrintable(f)) << f;
}

void TstTorchFormats::storageSharingAcrossFile()
{
    QFETCH(QString, file);
    const QJsonObject exp = readExpected(file);
    Checker c;
    std::vector<Source> sources(1);
    std::vector<QJsonObject> flatExpected;
    flatten(exp.value("entries").toArray(), flatExpected);
    OpenOptions opts; // named, not picked: this test is about storages, not the pick
    opts.container = exp.value("container").toString().toStdString();
    bool ok = open(c, file, opts, sources[0]);
    const QJsonArray alternates = exp.value("alternates").toArray();
    for (const auto& a : alternates) {
        const QJsonObject alt = a.toObject();
        flatten(alt.value("entries").toArray(), flatExpected);
        sources.emplace_back();
        ok = ok && switchTo(c, sources[0], alt.value("container").toString(), sources.back());
    }
    if (ok) {
        std::vector<const Entry*> flatActual;
        for (const auto& src : sources)
            flatten(src.entries, flatActual);
        c.equal(flatActual.size(), flatExpected.size(), file, "tensor count over all containers");
        if (flatActual.size() == flatExpected.size())
            c.storageGroups(flatActual, flatExpected, file);
    }
    VERIFY_FIXTURE(c, exp);
}

void TstTorchFormats::selectContainer_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("container");
    for (const QString& f : expectedFixtures())
        for (const auto& a : readExpected(f).value("alternates").toArray()) {
            const QString container = a.toObject().value("container").toString();
            QTest::newRow(qPrintable(f + " " + container)) << f << container;
        }
}

// OpenOptions.container and Source::withContainer must both give the container torch's walk describes.
void TstTorchFormats::selectContainer()
{
    QFETCH(QString, file);
    QFETCH(QString, container);
    const QJsonObject exp = readExpected(file);
    QJsonArray expected;
    for (const auto& a : exp.value("alternates").toArray())
        if (a.toObject().value("container").toString() == container)
            expected = a.toObject().value("entries").toArray();

    Checker c;
    OpenOptions opts;
    opts.container = container.toStdString();
    Source opened;
    if (open(c, file, opts, opened)) {
        c.equal(q(opened.container), container, "OpenOptions.container", "container");
        c.entries(opened.entries, expected, "OpenOptions.container=" + container);
    }
    Source picked;
    Source switched;
    if (open(c, file, {}, picked) && switchTo(c, picked, container, switched)) {
        c.equal(q(switched.container), container, "withContainer", "container");
        c.entries(switched.entries, expected, "withContainer(" + container + ")");
        // The copy is independent: the source it came from still shows its own pick.
        c.equal(q(picked.container), exp.value("container").toString(), "original", "container");
        c.equal(picked.entries.size(), size_t(exp.value("entries").toArray().size()), "original", "entry count");
    }
    VERIFY_FIXTURE(c, exp);
}

void TstTorchFormats::withContainerRoundTrip_data() { selectContainer_data(); }

// Switching away and back gives the picked container's entries again, and no leftover entry findings.
void TstTorchFormats::withContainerRoundTrip()
{
    QFETCH(QString, file);
    QFETCH(QString, container);
    const QJsonObject exp = readExpected(file);
    Checker c;
    Source picked;
    Source away;
    Source back;
    if (open(c, file, {}, picked) && switchTo(c, picked, container, away)
        && switchTo(c, away, exp.value("container").toString(), back)) {
        c.equal(q(back.container), exp.value("container").toString(), "round trip", "container");
        c.entries(back.entries, exp.value("entries").toArray(), "round trip");
        c.findings(back, exp);
    }
    VERIFY_FIXTURE(c, exp);
}

void TstTorchFormats::unknownContainerIsAnError()
{
    OpenOptions opts;
    opts.container = "no.such.container";
    QVERIFY_THROWS_EXCEPTION(LoadError, openSource(path("train_ckpt.pt"), opts));
    Source s = openSource(path("train_ckpt.pt"));
    QVERIFY_THROWS_EXCEPTION(LoadError, (void)s.withContainer("optimizer.state.0.exp_avg.nope"));
    QVERIFY_THROWS_EXCEPTION(LoadError, (void)openSource(path("train_ckpt.legacy.pt")).withContainer("epoch"));
}

// Re-zipped with deflate: still listed, every storage reported as compressed, and an info finding says so.
void TstTorchFormats::deflatedArchive()
{
    Source s = openSource(path("deflated.pt"));
    QVERIFY(!s.entries.empty());
    for (const auto& e : s.entries) {
        QVERIFY2(e.location.kind == TensorLocation::Kind::Compressed, e.name.c_str());
        QVERIFY2(!e.location.storageId.empty(), e.name.c_str());
    }
    QVERIFY(s.countFindings(Severity::Info) >= 1);
    // The same content stored uncompressed lists the same names, shapes and strides.
    Source plain = openSource(path("views.pt"));
    QCOMPARE(s.entries.size(), plain.entries.size());
    for (size_t i = 0; i < s.entries.size(); ++i) {
        QCOMPARE(s.entries[i].name, plain.entries[i].name);
        QCOMPARE(s.entries[i].shape, plain.entries[i].shape);
        QCOMPARE(s.entries[i].location.strides, plain.entries[i].location.strides);
        QCOMPARE(s.entries[i].location.storageOffset, plain.entries[i].location.storageOffset);
        QCOMPARE(s.entries[i].location.length, plain.entries[i].location.length);
    }
}

QTEST_GUILESS_MAIN(TstTorchFormats)
// A plain tensor's JSON object is written from fixed pieces of text (writePlainTensorJson); every entry of
// every fixture here and in ../shared/fixtures/real (every format, hostile files among them), and every part,
// is written the same with and without that shortcut, field by field through rapidjson. Many take it.
void TstTorchFormats::plainTensorJsonAsFieldByField()
{
    QStringList files;
    for (const QString& dir : { test::fixturesDir(), test::realFixturesDir() })
        if (!dir.isEmpty())
            for (QDirIterator it(dir, QDir::Files, QDirIterator::Subdirectories); it.hasNext();)
                files << it.next();
    int sources = 0;
    size_t entries = 0, plain = 0;
    size_t shortcutFields[8] = {}; // parts, quantization, attributes, requires_grad, parameter, type, shape_known, params
    for (const QString& file : files) {
        Source src;
        try {
            src = openSource(file.toStdString());
        } catch (const std::exception&) {
            continue; // refused (the other tests check how)
        }
        ++sources;
        // Also as a listing writes them, with the files' paths checked once (plainFiles); and again with
        // paths that need escaping, which the shortcut must leave to the field-by-field writer.
        for (bool escapedPaths : { false, true }) {
            if (escapedPaths)
                for (std::string& f : src.files)
                    f += "/\"\u00e9\x01";
            const std::vector<uint8_t> plainPaths = plainFiles(src);
            JsonWriter shortcut, listed, fieldByField, scratch;
            for (JsonWriter* w : { &shortcut, &listed, &fieldByField, &scratch })
                w->beginArray();
            for (const Entry& e : src.entries) {
                writeEntryJson(shortcut, e, src);
                writeEntryJson(listed, e, src, true, plainPaths);
                writeEntryJson(fieldByField, e, src, false);
                if (!escapedPaths) {
                    ++entries;
                    if (writePlainTensorJson(scratch, e, src)) {
                        ++plain;
                        // Each optional field the shortcut writes, written by it somewhere.
                        const bool has[] = { !e.parts.empty(), bool(e.quantization), !e.attributes.empty(),
                            e.requiresGrad, e.isParameter, !e.typeName.empty(), !e.shapeKnown,
                            e.quantization && !e.quantization->params.empty() };
                        for (size_t k = 0; k < std::size(has); ++k)
                            shortcutFields[k] += has[k];
                    }
                }
            }
            for (JsonWriter* w : { &shortcut, &listed, &fieldByField })
                w->endArray();
            QVERIFY2(shortcut.text() == fieldByField.text(), qPrintable(file));
            QVERIFY2(listed.text() == fieldByField.text(), qPrintable(file));
        }
    }
    qInfo("%d sources, %zu entries, %zu of them written by the shortcut", sources, entries, plain);
    QVERIFY2(sources >= 100 && plain >= 1000 && plain < entries, qPrintable(QString::number(plain)));
    for (size_t k = 0; k < std::size(shortcutFields); ++k) {
        qInfo("optional field %zu: %zu entries by the shortcut", k, shortcutFields[k]);
        QVERIFY2(shortcutFields[k] > 0, qPrintable(QString::number(k)));
    }
}

// The shortcut reserves room from a bound on its fixed text: an entry with every optional field it writes,
// each at its longest name (dtype, location kind), and a part just like it, comes out as field by field.
void TstTorchFormats::plainTensorJsonWithEveryField()
{
    Source src;
    src.files = { "/ckpt/model.bin" };
    Entry e;
    e.name = "w";
    e.kind = EntryKind::Group;
    e.dtype = DType::Float8_e4m3fnuz;
    e.shapeKnown = false;
    e.requiresGrad = true;
    e.isParameter = true;
    e.device = "cuda:0";
    e.typeName = "t";
    e.location.kind = TensorLocation::Kind::Transformed;
    e.location.file = 0;
    e.location.offset = INT64_MAX;
    e.location.length = UINT64_MAX;
    e.location.storageId = "0";
    e.location.storageByteOffset = UINT64_MAX;
    e.location.storageNbytes = UINT64_MAX;
    e.location.storageOffset = INT64_MIN;
    e.location.strides = { INT64_MIN };
    e.attributes.emplace_back("k", "v");
    auto q = std::make_shared<Quantization>();
    q->scheme = "s";
    q->storageDType = DType::Float8_e4m3fnuz;
    q->logicalShapeKnown = false;
    q->params.emplace_back("k", "v");
    e.quantization = q;
    Entry part = e;
    e.parts.push_back(part);
    JsonWriter shortcut, fieldByField;
    QVERIFY(writePlainTensorJson(shortcut, e, src));
    writeEntryJson(fieldByField, e, src, false);
    QCOMPARE(QString::fromStdString(std::string(shortcut.text())), QString::fromStdString(std::string(fieldByField.text())));
    for (const char* key : { "shape_known", "requires_grad", "parameter", "type", "storage_byte_offset", "strides",
             "attributes", "logical_shape_known", "params", "parts" })
        QVERIFY2(shortcut.text().find(std::string("\"") + key + "\"") != std::string_view::npos, key);
}

#include "tst_torch_formats.moc"
