// torch.distributed.checkpoint (DCP) folders: format id "dcp".
//
// Fixtures and truth: tests/fixtures/make_dcp_fixtures.py. The t113_* folders were written by torch 1.13's own
// DCP writer and their expected files come from torch (FileSystemReader.read_metadata, torch.load of every
// item, zipfile over each item for where the tensor bytes are); the t2_* and hf_* folders are reconstructions
// of torch 2.x output (marked "reconstruction": true) whose truth is what the generator wrote. Every row opens
// a folder with StateLens and compares names, containers, shapes, dtypes, chunks, byte ranges, files, source
// metadata and findings with that truth.
//
// The real two-rank save in ../shared/fixtures/real (Lightning, torch 2.0 era) is read at test time and
// checked against a Python reading of its .metadata that imports nothing (stand-in classes) plus zipfile.
// Corrupt inputs (truncated and bit-flipped .metadata, missing or short .distcp files, relative paths that
// leave the folder, absurd chunk counts, hand-made pickles) are made here: each must give a Source or a
// one-line LoadError naming the folder, quickly.

#include "common/qt_text.h"
#include "common/test_files.h"
#include "common/test_paths.h"
#include "formats/dcp_metadata.h"
#include "formats/dcp_reader.h"
#include "formats/dcp_source.h"
#include "formats/loader.h"
#include "io/arriving_bytes.h"
#include "io/file_trust.h"
#include "io/input_file.h"
#include "pickle/opcode_scan.h"
#include "model/dtype.h"
#include "model/source.h"
#include "report/source_report.h"
#include "util/error.h"
#include "util/load_control.h"
#include "values/tensor_bytes.h"

#include <QDir>
#include <QDirIterator>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QtTest>

#include <functional>
#include <map>
#include <unistd.h>

using namespace sl;

namespace {

using sl::test::requireJson;
using sl::test::readAll;

using sl::test::q;
std::string s(const QString& v) { return v.toStdString(); }
QString dcpDir() { return test::fixturesDir() + QStringLiteral("/dcp"); }



bool writeFile(const QString& path, const QByteArray& bytes)
{
    QFile f(path);
    return f.open(QIODevice::WriteOnly | QIODevice::Truncate) && f.write(bytes) == bytes.size();
}

// A fixture folder copied into a temporary one, to be damaged there.
bool symlinkTo(const QString& target, const QString& link)
{
    return ::symlink(QFile::encodeName(target).constData(), QFile::encodeName(link).constData()) == 0;
}

bool copyFolder(const QString& from, const QString& to)
{
    QDir().mkpath(to);
    QDirIterator it(from, QDir::Files | QDir::Hidden);
    while (it.hasNext()) {
        it.next();
        if (!QFile::copy(it.filePath(), to + "/" + it.fileName()))
            return false;
    }
    return true;
}

Shape shapeOf(const QJsonValue& v)
{
    Shape out;
    for (const auto& x : v.toArray())
        out.push_back(static_cast<int64_t>(x.toDouble()));
    return out;
}

QString shapeText(const Shape& sh) { return q(shapeToString(sh)); }

QString describeFindings(const Source& src)
{
    QString out;
    for (const auto& f : src.findings)
        out += QStringLiteral("\n  [%1] %2%3")
                   .arg(q(std::string(severityName(f.severity))), q(f.message),
                       f.entry.empty() ? QString() : QStringLiteral(" (entry '%1')").arg(q(f.entry)));
    return out.isEmpty() ? QStringLiteral(" (none)") : out;
}

QString fileName(const std::string& path) { return QFileInfo(q(path)).fileName(); }

int severityRank(const QString& s) { return s == "danger" ? 2 : s == "warning" ? 1 : 0; }

bool hasFinding(const Source& src, Severity sev, const QString& contains, const QString& entry = {})
{
    for (const auto& f : src.findings)
        if (f.severity == sev && q(f.message).contains(contains, Qt::CaseInsensitive)
            && (entry.isEmpty() || q(f.entry) == entry))
            return true;
    return false;
}

const Entry* entryNamed(const Source& src, const QString& name)
{
    for (const auto& e : src.entries)
        if (q(e.name) == name)
            return &e;
    return nullptr;
}

// Most tests look at what reading the items shows (where each chunk's data starts, the findings a damaged
// item gives), which listing leaves to value reads unless asked: `ls --inspect-items`.
OpenOptions inspecting()
{
    OpenOptions o;
    o.inspectDcpItems = true;
    return o;
}

// Opens `path`; a LoadError must be one line that starts with `name`. Returns whether a Source came back.
bool openOrLoadError(const QString& path, const QString& name, Source* out = nullptr, QString* error = nullptr)
{
    try {
        Source src = openSource(s(path), inspecting());
        (void)sourceToJson(src);
        for (const auto& c : src.containers)
            (void)sourceToJson(src.withContainer(c.path));
        if (out)
            *out = std::move(src);
        return true;
    } catch (const LoadError& e) {
        const QString msg = QString::fromUtf8(e.what());
        if (!msg.startsWith(name + ": ") || msg.contains('\n') || msg.contains('\r'))
            qFatal("LoadError is not one line naming %s: %s", qPrintable(name), qPrintable(msg));
        if (error)
            *error = msg;
        return false;
    }
}

// ---- hand-made .metadata pickles (protocol 2) ----

class Pickle {
public:
    Pickle() { m_b.append("\x80\x02", 2); }
    Pickle& op(char c)
    {
        m_b.append(c);
        return *this;
    }
    Pickle& str(const QByteArray& v)
    {
        m_b.append('X');
        u32(static_cast<uint32_t>(v.size()));
        m_b.append(v);
        return *this;
    }
    Pickle& integer(int64_t v)
    {
        if (v >= INT32_MIN && v <= INT32_MAX) {
            m_b.append('J');
            u32(static_cast<uint32_t>(static_cast<int32_t>(v)));
        } else {
            m_b.append('\x8a');
            m_b.append('\x08');
            for (int i = 0; i < 8; ++i)
                m_b.append(static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff));
        }
        return *this;
    }
    Pickle& global(const char* module, const char* name)
    {
        m_b.append('c');
        m_b.append(module);
        m_b.append('\n');
        m_b.append(name);
        m_b.append('\n');
        return *this;
    }
    // cls.__new__(cls): what dataclasses pickle as at protocol 2, before BUILD.
    Pickle& newObject(const char* module, const char* name) { return global(module, name).op(')').op('\x81'); }
    Pickle& size(const std::vector<int64_t>& dims)
    {
        global("torch", "Size").op('(');
        for (int64_t d : dims)
            integer(d);
        return op('t').op('\x85').op('R');
    }
    Pickle& put(uint32_t k)
    {
        m_b.append('r');
        return u32(k);
    }
    Pickle& get(uint32_t k)
    {
        m_b.append('j');
        return u32(k);
    }
    Pickle& raw(const QByteArray& b)
    {
        m_b.append(b);
        return *this;
    }
    QByteArray bytes() const { return m_b; }

private:
    Pickle& u32(uint32_t v)
    {
        for (int i = 0; i < 4; ++i)
            m_b.append(static_cast<char>((v >> (8 * i)) & 0xff));
        return *this;
    }
    QByteArray m_b;
};

constexpr const char* kMeta = "torch.distributed.checkpoint.metadata";
constexpr const char* kFs = "torch.distributed.checkpoint.filesystem";

// TensorStorageMetadata with TensorProperties as __getstate__ writes it; `chunks` writes the chunk list.
void tensorMeta(Pickle& p, const char* dtype, const std::vector<int64_t>& size, const std::function<void(Pickle&)>& chunks)
{
    p.newObject(kMeta, "TensorStorageMetadata").op('}').op('(');
    p.str("properties").newObject(kMeta, "TensorProperties").op('(').global("torch", dtype).op('N').op('\x89').op('N').op('\x89').op('t').op('b');
    p.str("size").size(size);
    p.str("chunks").op(']');
    chunks(p);
    p.op('u').op('b');
}

void chunkMeta(Pickle& p, const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes)
{
    p.newObject(kMeta, "ChunkStorageMetadata").op('}').op('(').str("offsets").size(offsets).str("sizes").size(sizes).op('u').op('b');
}

void storageEntry(Pickle& p, const QByteArray& fqn, const std::vector<int64_t>* offsets, const QByteArray& path,
    int64_t offset, int64_t length)
{
    p.newObject(kMeta, "MetadataIndex").op('}').op('(').str("fqn").str(fqn);
    if (offsets)
        p.str("offset").size(*offsets);
    p.str("index").op('N').op('u').op('b');
    p.newObject(kFs, "_StorageInfo").op('}').op('(').str("relative_path").str(path).str("offset").integer(offset).str("length").integer(length).op('u').op('b');
}

// A whole Metadata: `items` writes state_dict_metadata's key/value pairs, `storage` storage_data's.
QByteArray metadataPickle(const std::function<void(Pickle&)>& items, const std::function<void(Pickle&)>& storage,
    const std::function<void(Pickle&)>& extra = {})
{
    Pickle p;
    p.newObject(kMeta, "Metadata").op('}').op('(');
    p.str("state_dict_metadata").op('}').op('(');
    items(p);
    p.op('u');
    p.str("planner_data").op('N');
    p.str("storage_data").op('}').op('(');
    storage(p);
    p.op('u');
    if (extra)
        extra(p);
    p.op('u').op('b').op('.');
    return p.bytes();
}

// Python that reads a DCP folder without torch (every class a stand-in) and reports what its .metadata and
// its items hold, as JSON: the truth for the real fixture.
const char* kPythonTruth = R"PY(
import io, json, pickle, struct, sys, zipfile
class Stub:
    def __init__(self, *a, **k): self.args = a
    def __setstate__(self, st): self.state = st
class U(pickle.Unpickler):
    def find_class(self, module, name):
        if module == "torch" and name == "Size": return lambda t: list(t)
        if module == "torch": return "dtype:" + name
        return type(name, (Stub,), {})
folder = sys.argv[1]
md = U(open(folder + "/.metadata", "rb")).load()
st = md.state
out = {"items": {}, "storage": [], "planner": {}}
for fqn, v in st["state_dict_metadata"].items():
    if type(v).__name__ == "BytesStorageMetadata":
        out["items"][fqn] = {"kind": "bytes"}
        continue
    f = v.state
    out["items"][fqn] = {"kind": "tensor", "dtype": f["properties"].state[0][6:], "size": f["size"],
                         "chunks": [{"offsets": c.state["offsets"], "sizes": c.state["sizes"]} for c in f["chunks"]]}
for k, v in st["storage_data"].items():
    rec = {"fqn": k.state["fqn"], "offset": k.state.get("offset"), "file": v.state["relative_path"],
           "item_offset": v.state["offset"], "item_length": v.state["length"]}
    data = open(folder + "/" + rec["file"], "rb").read()[rec["item_offset"]:rec["item_offset"] + rec["item_length"]]
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        recs = [i for i in z.infolist() if "/data/" in i.filename]
        if recs:
            h = data[recs[0].header_offset:recs[0].header_offset + 30]
            n, e = struct.unpack("<HH", h[26:30])
            rec["data_offset"] = rec["item_offset"] + recs[0].header_offset + 30 + n + e
            rec["data_length"] = recs[0].file_size
    out["storage"].append(rec)
for k, v in (st.get("planner_data") or {}).items():
    out["planner"][k] = list(v)
print(json.dumps(out))
)PY";

} // namespace

class TestDcp : public QObject {
    Q_OBJECT

private slots:
    void cancelledOpenStops();
    void fixture_data();
    void fixture();
    void fromMemoryMatchesDisk();
    void realLightning();
    void distcpOpenedDirectly();
    void truncatedMetadata();
    void bitFlippedMetadata();
    void missingAndShortFiles();
    void escapingRelativePaths();
    void symlinksOutOfTheFolder();
    void damagedItems();
    void handMadePickles();
    void repeatedStorageKeyTakesTheLast();
    void notAMetadata();
    void absurdChunkCounts();
    void listingReadsNoTensorData();
    void transformedItemsRefuseValues();
    void laneMatchesOpcodes();
    void laneRestarts();
    void stringTableKeepsViews();
    void readAsItArrives();
};

void TestDcp::fixture_data()
{
    QTest::addColumn<QString>("name");
    const QStringList expected = QDir(dcpDir()).entryList({ "*.expected.json" }, QDir::Files, QDir::Name);
    QVERIFY2(expected.size() >= 10, "tests/fixtures/dcp is missing: run make_dcp_fixtures.py");
    for (const QString& f : expected) {
        const QString name = f.chopped(QStringLiteral(".expected.json").size());
        QTest::newRow(qPrintable(name)) << name;
    }
}

void TestDcp::fixture()
{
    QFETCH(QString, name);
    const QString folder = dcpDir() + "/" + name;
    const QJsonObject want = requireJson(dcpDir() + "/" + name + ".expected.json");
    QVERIFY(want.contains("reconstruction"));

    Source src;
    try {
        src = openSource(s(folder), inspecting());
    } catch (const std::exception& e) {
        QFAIL(qPrintable(QString("openSource threw: ") + e.what()));
    }
    QCOMPARE(q(formatId(src.format)), want["format"].toString());
    QCOMPARE(q(formatId(detectFormat(s(folder)))), want["format"].toString());
    QCOMPARE(q(src.container), want["container"].toString());

    // Containers: the declared ones, with their roles, and no others.
    if (want.contains("containers")) {
        QStringList got, expected;
        for (const auto& c : src.containers)
            got << q(c.path) + "=" + q(std::string(containerRoleName(c.role)));
        for (const auto& c : want["containers"].toArray())
            expected << c.toObject()["path"].toString() + "=" + c.toObject()["role"].toString();
        got.sort();
        expected.sort();
        QCOMPARE(got, expected);
    }

    // Entries, container by container.
    const QJsonObject entriesByContainer = want["entries"].toObject();
    for (auto it = entriesByContainer.begin(); it != entriesByContainer.end(); ++it) {
        const QString container = it.key();
        const Source view = container == q(src.container) ? src : src.withContainer(s(container));
        const QJsonArray wantEntries = it.value().toArray();
        QCOMPARE(qsizetype(view.entries.size()), wantEntries.size());
        for (qsizetype i = 0; i < wantEntries.size(); ++i) {
            const QJsonObject we = wantEntries[i].toObject();
            const Entry& e = view.entries[static_cast<size_t>(i)];
            const QString where = QString("%1: container '%2' entry %3 (%4)").arg(name, container).arg(i).arg(we["name"].toString());
            QVERIFY2(q(e.name) == we["name"].toString(), qPrintable(where + ": name is " + q(e.name)));
            if (we["kind"].toString() == "object") {
                QVERIFY2(e.kind == EntryKind::Object, qPrintable(where + ": not an object entry"));
                if (we.contains("type"))
                    QVERIFY2(q(e.typeName) == we["type"].toString(),
                        qPrintable(where + ": type " + q(e.typeName) + ", torch.load gives " + we["type"].toString()));
                if (we.contains("file")) {
                    QVERIFY2(e.location.file >= 0, qPrintable(where + ": no file"));
                    QCOMPARE(fileName(src.files[static_cast<size_t>(e.location.file)]), we["file"].toString());
                }
                continue;
            }
            QVERIFY2(e.kind == EntryKind::Tensor, qPrintable(where + ": not a tensor"));
            QVERIFY2(q(std::string(dtypeName(e.dtype))) == we["dtype"].toString(),
                qPrintable(where + ": dtype " + q(std::string(dtypeName(e.dtype)))));
            QVERIFY2(e.shape == shapeOf(we["shape"]), qPrintable(where + ": shape " + shapeText(e.shape)));
            if (we.contains("requires_grad"))
                QCOMPARE(e.requiresGrad, we["requires_grad"].toBool());
            if (we.contains("param")) {
                const std::string* p = e.attribute("param");
                QVERIFY2(p && q(*p) == we["param"].toString(), qPrintable(where + ": param attribute"));
            }
            if (!we.contains("chunks")) {
                // A tensor of a Hugging Face index: a plain mapped location.
                QCOMPARE(e.location.kind, TensorLocation::Kind::Mapped);
                QCOMPARE(fileName(src.files[static_cast<size_t>(e.location.file)]), we["file"].toString());
                QCOMPARE(e.location.offset, static_cast<uint64_t>(we["byte_offset"].toDouble()));
                QCOMPARE(e.location.length, static_cast<uint64_t>(we["byte_length"].toDouble()));
                continue;
            }
            QVERIFY2(e.sharding && e.sharding->kind == Sharding::Kind::DcpChunks, qPrintable(where + ": no dcp_chunks sharding"));
            const QJsonArray wantChunks = we["chunks"].toArray();
            QCOMPARE(qsizetype(e.sharding->chunks.size()), wantChunks.size());
            bool allInFiles = true;
            for (qsizetype c = 0; c < wantChunks.size(); ++c) {
                const QJsonObject wc = wantChunks[c].toObject();
                const ShardChunk& sc = e.sharding->chunks[static_cast<size_t>(c)];
                const QString cw = where + QString(" chunk %1").arg(c);
                QVERIFY2(sc.offsets == shapeOf(wc["offsets"]), qPrintable(cw + ": offsets " + shapeText(sc.offsets)));
                QVERIFY2(sc.sizes == shapeOf(wc["sizes"]), qPrintable(cw + ": sizes " + shapeText(sc.sizes)));
                if (!wc.contains("file")) {
                    allInFiles = false;
                    QVERIFY2(sc.byteLength == 0, qPrintable(cw + ": a chunk without storage has a byte range"));
                    continue;
                }
                QVERIFY2(sc.file >= 0, qPrintable(cw + ": no file"));
                QCOMPARE(fileName(src.files[static_cast<size_t>(sc.file)]), wc["file"].toString());
                QVERIFY2(q(sc.label).startsWith(wc["file"].toString()), qPrintable(cw + ": label " + q(sc.label)));
                const uint64_t wantLength = static_cast<uint64_t>(wc["byte_length"].toDouble());
                QCOMPARE(sc.byteLength, wantLength);
                QCOMPARE(sc.transformed, wc["transformed"].toBool());
                if (wantLength)
                    QCOMPARE(sc.byteOffset, static_cast<uint64_t>(wc["byte_offset"].toDouble()));
            }
            // One chunk that is the whole tensor: the entry itself is located there.
            const QJsonObject only = wantChunks.isEmpty() ? QJsonObject() : wantChunks[0].toObject();
            if (wantChunks.size() == 1 && allInFiles && only["sizes"] == we["shape"] && only["byte_length"].toDouble() > 0) {
                QCOMPARE(e.location.kind,
                    only["transformed"].toBool() ? TensorLocation::Kind::Transformed : TensorLocation::Kind::Mapped);
                QCOMPARE(e.location.offset, static_cast<uint64_t>(only["byte_offset"].toDouble()));
            }
        }
    }

    if (want.contains("files")) {
        QStringList got;
        for (const auto& f : src.files)
            got << fileName(f);
        QStringList expected;
        for (const auto& f : want["files"].toArray())
            expected << f.toString();
        QCOMPARE(got, expected);
    }
    const QJsonObject wantMeta = want["metadata"].toObject();
    for (auto it = wantMeta.begin(); it != wantMeta.end(); ++it) {
        QString got;
        for (const auto& [k, v] : src.metadata)
            if (q(k) == it.key())
                got = q(v);
        QVERIFY2(got == it.value().toString(), qPrintable("metadata " + it.key() + " is '" + got + "'"));
    }

    // Findings: none above the declared severity, and each required one present.
    const QJsonObject wantFindings = want["findings"].toObject();
    if (wantFindings.contains("max_severity")) {
        const int max = severityRank(wantFindings["max_severity"].toString());
        for (const auto& f : src.findings)
            QVERIFY2(severityRank(q(std::string(severityName(f.severity)))) <= max,
                qPrintable("unexpected finding:" + describeFindings(src)));
    }
    for (const auto& r : wantFindings["required"].toArray()) {
        const QJsonObject rf = r.toObject();
        const QString sev = rf["severity"].toString();
        const Severity sv = sev == "danger" ? Severity::Danger : sev == "warning" ? Severity::Warning : Severity::Info;
        QVERIFY2(hasFinding(src, sv, rf["contains"].toString(), rf["entry"].toString()),
            qPrintable("no " + sev + " finding with '" + rf["contains"].toString() + "':" + describeFindings(src)));
    }

    // The same through its .metadata file, and the JSON report carries the chunks.
    if (QFileInfo::exists(folder + "/.metadata")) {
        Source viaMetadata = openSource(s(folder + "/.metadata"), inspecting());
        QCOMPARE(viaMetadata.entries.size(), src.entries.size());
        QCOMPARE(q(formatId(detectFormat(s(folder + "/.metadata")))), QStringLiteral("dcp"));
    }
    const QString json = q(sourceToJson(src));
    if (formatId(src.format) == "dcp")
        QVERIFY(json.contains("\"dcp_chunks\""));
}

void TestDcp::fromMemoryMatchesDisk()
{
    // The in-memory path the fuzzer uses gives what the folder gives.
    for (const QString& folder : { dcpDir() + "/t113_two_ranks", dcpDir() + "/t2_torchtitan", dcpDir() + "/t2_safetensors",
             test::fixturesDir() + "/torch2/dcp/dcp_titan", test::fixturesDir() + "/torch2/float8/dcp_titan_float8" }) {
        Source disk = openSource(s(folder), inspecting());
        dcp::MemoryFiles files(s(folder));
        QDirIterator it(folder, QDir::Files);
        while (it.hasNext()) {
            it.next();
            const QByteArray b = readAll(it.filePath());
            files.add(s(it.fileName()), std::vector<uint8_t>(b.begin(), b.end()));
        }
        const QByteArray md = readAll(folder + "/.metadata");
        Source mem = dcp::readCheckpoint(s(folder), Bytes(reinterpret_cast<const uint8_t*>(md.data()), size_t(md.size())), files, inspecting());
        QCOMPARE(q(sourceToJson(mem)), q(sourceToJson(disk)));
    }
}

void TestDcp::realLightning()
{
    const QString real = test::realFixturesDir();
    if (real.isEmpty())
        QSKIP("../shared/fixtures/real is not there");
    const QString folder = real + "/Lightning-AI__pytorch-lightning/dcp_BufferedRandom_name105";
    if (!QFileInfo::exists(folder + "/.metadata"))
        QSKIP("the Lightning DCP fixture is not there");

    Source src = openSource(s(folder), inspecting());
    QCOMPARE(q(formatId(src.format)), QStringLiteral("dcp"));
    // SOURCES.md: planner_data maps model.<n> to ('model', '<n>') and 'optimizer' to ('optimizer',).
    QCOMPARE(q(src.container), QStringLiteral("model"));
    QCOMPARE(src.containers.size(), size_t(2));
    QCOMPARE(src.entries.size(), size_t(4));
    const Source top = src.withContainer("");
    QCOMPARE(top.entries.size(), size_t(1));
    QCOMPARE(q(top.entries[0].name), QStringLiteral("optimizer"));
    QCOMPARE(top.entries[0].kind, EntryKind::Object);
    QCOMPARE(q(top.entries[0].typeName), QStringLiteral("dict")); // SOURCES.md: {'state': {}, 'param_groups': [...]}

    // Python's own reading of the files (no torch needed: every class is a stand-in).
    QProcess p;
    p.start(test::torchPython(), { "-c", kPythonTruth, folder });
    if (!p.waitForStarted() || !p.waitForFinished(60000) || p.exitCode() != 0)
        QSKIP(qPrintable("no Python truth: " + QString::fromUtf8(p.readAllStandardError())));
    const QJsonObject truth = QJsonDocument::fromJson(p.readAllStandardOutput()).object();
    const QJsonObject items = truth["items"].toObject();
    QCOMPARE(items.size(), 5);
    const QJsonObject planner = truth["planner"].toObject();
    for (auto it = items.begin(); it != items.end(); ++it) {
        const QJsonArray path = planner[it.key()].toArray();
        const QString container = path.size() > 1 ? path[0].toString() : QString();
        const QString name = path.size() > 1 ? path[1].toString() : it.key();
        const Source view = src.withContainer(s(container));
        const Entry* e = entryNamed(view, name);
        QVERIFY2(e, qPrintable("no entry " + container + "/" + name));
        const QJsonObject t = it.value().toObject();
        if (t["kind"] == "bytes") {
            QCOMPARE(e->kind, EntryKind::Object);
            continue;
        }
        QCOMPARE(q(std::string(dtypeName(e->dtype))), t["dtype"].toString());
        QCOMPARE(e->shape, shapeOf(t["size"]));
        const QJsonArray chunks = t["chunks"].toArray();
        QCOMPARE(qsizetype(e->sharding->chunks.size()), chunks.size());
        for (qsizetype c = 0; c < chunks.size(); ++c) {
            const ShardChunk& sc = e->sharding->chunks[size_t(c)];
            QCOMPARE(sc.offsets, shapeOf(chunks[c].toObject()["offsets"]));
            QCOMPARE(sc.sizes, shapeOf(chunks[c].toObject()["sizes"]));
            bool found = false;
            for (const auto& rv : truth["storage"].toArray()) {
                const QJsonObject r = rv.toObject();
                if (r["fqn"].toString() != it.key() || shapeOf(r["offset"]) != sc.offsets)
                    continue;
                found = true;
                QCOMPARE(fileName(src.files[size_t(sc.file)]), r["file"].toString());
                QCOMPARE(sc.byteOffset, uint64_t(r["data_offset"].toDouble()));
                QCOMPARE(sc.byteLength, uint64_t(r["data_length"].toDouble()));
            }
            QVERIFY(found);
        }
    }
    for (const auto& f : src.findings)
        QVERIFY2(f.severity == Severity::Info, qPrintable(describeFindings(src)));
}

void TestDcp::distcpOpenedDirectly()
{
    const QString file = dcpDir() + "/t113_two_ranks/__1_0.distcp";
    QString error;
    QVERIFY(!openOrLoadError(file, file, nullptr, &error));
    QVERIFY2(error.contains("torch.distributed.checkpoint") && error.contains(dcpDir() + "/t113_two_ranks"), qPrintable(error));

    // Outside its folder there is no .metadata: the message says so.
    QTemporaryDir tmp;
    QVERIFY(QFile::copy(file, tmp.path() + "/__1_0.distcp"));
    QVERIFY(!openOrLoadError(tmp.path() + "/__1_0.distcp", tmp.path() + "/__1_0.distcp", nullptr, &error));
    QVERIFY2(error.contains("has none"), qPrintable(error));

    // A .metadata renamed, out of its folder.
    QVERIFY(QFile::copy(test::fixturesDir() + "/torch2/dcp/accelerate/pytorch_model_fsdp_0/.metadata", tmp.path() + "/renamed.metadata"));
    QVERIFY(!openOrLoadError(tmp.path() + "/renamed.metadata", tmp.path() + "/renamed.metadata", nullptr, &error));
    QVERIFY2(error.contains("torch.distributed.checkpoint"), qPrintable(error));
}

void TestDcp::truncatedMetadata()
{
    const QByteArray md = readAll(dcpDir() + "/t113_two_ranks/.metadata");
    QTemporaryDir tmp;
    const QString folder = tmp.path() + "/ckpt";
    QVERIFY(copyFolder(dcpDir() + "/t113_two_ranks", folder));
    for (qsizetype cut : { qsizetype(0), qsizetype(1), qsizetype(2), qsizetype(11), md.size() / 3, md.size() / 2,
             md.size() - 2, md.size() - 1 }) {
        QVERIFY(writeFile(folder + "/.metadata", md.left(cut)));
        QString error;
        const bool opened = openOrLoadError(folder, folder, nullptr, &error);
        QVERIFY2(!opened, qPrintable(QString("a .metadata cut to %1 bytes opened").arg(cut)));
        QVERIFY2(error.contains(".metadata"), qPrintable(error));
    }
}

void TestDcp::bitFlippedMetadata()
{
    // A real torch 2.6 torchtitan save (tests/fixtures/torch2): model, optimizer and train_state bytes items.
    const QString real = test::fixturesDir() + "/torch2/dcp/dcp_titan";
    const QByteArray md = readAll(real + "/.metadata");
    QTemporaryDir tmp;
    const QString folder = tmp.path() + "/ckpt";
    QVERIFY(copyFolder(real, folder));
    QRandomGenerator rng(20261121);
    QElapsedTimer timer;
    timer.start();
    int opened = 0, refused = 0;
    for (int round = 0; round < 400; ++round) {
        QByteArray bad = md;
        for (int k = 0, n = 1 + int(rng.bounded(3)); k < n; ++k) {
            const qsizetype at = qsizetype(rng.bounded(quint32(bad.size())));
            bad[at] = char(bad[at] ^ (1 << rng.bounded(8)));
        }
        QVERIFY(writeFile(folder + "/.metadata", bad));
        openOrLoadError(folder, folder) ? ++opened : ++refused;
    }
    qInfo("bit-flipped .metadata: %d opened, %d refused with a LoadError, %lld ms", opened, refused, timer.elapsed());
    QVERIFY(opened > 0 && refused > 0);
    QVERIFY(timer.elapsed() < 60000);
}

void TestDcp::missingAndShortFiles()
{
    QTemporaryDir tmp;
    const QString folder = tmp.path() + "/ckpt";
    QVERIFY(copyFolder(dcpDir() + "/t113_two_ranks", folder));

    // Rank 1's file is gone: its chunks are unavailable, rank 0's are still located.
    QVERIFY(QFile::remove(folder + "/__1_0.distcp"));
    Source src;
    QVERIFY(openOrLoadError(folder, folder, &src));
    QVERIFY2(hasFinding(src, Severity::Warning, "__1_0.distcp is missing"), qPrintable(describeFindings(src)));
    const Entry* w = entryNamed(src, "layers.0.weight");
    QVERIFY(w);
    QCOMPARE(w->location.kind, TensorLocation::Kind::Unavailable);
    QCOMPARE(q(*w->attribute("unavailable_chunks")), QStringLiteral("2 of 4"));
    QVERIFY(w->sharding->chunks[0].byteLength > 0);
    QVERIFY(w->sharding->chunks[2].byteLength == 0);
    QVERIFY(q(w->sharding->chunks[2].label).contains("unavailable"));
    const Entry* norm = entryNamed(src, "norm.weight");
    QCOMPARE(norm->location.kind, TensorLocation::Kind::Mapped);

    // Half of it is there: items past its end are unavailable.
    const QByteArray full = readAll(dcpDir() + "/t113_two_ranks/__1_0.distcp");
    QVERIFY(writeFile(folder + "/__1_0.distcp", full.left(full.size() / 2)));
    QVERIFY(openOrLoadError(folder, folder, &src));
    QVERIFY2(hasFinding(src, Severity::Warning, "__1_0.distcp is too short"), qPrintable(describeFindings(src)));
    QCOMPARE(entryNamed(src, "layers.0.weight")->location.kind, TensorLocation::Kind::Unavailable);

    // A .distcp that is a folder.
    QVERIFY(QFile::remove(folder + "/__1_0.distcp"));
    QVERIFY(QDir().mkpath(folder + "/__1_0.distcp"));
    QVERIFY(openOrLoadError(folder, folder, &src));
    QVERIFY2(hasFinding(src, Severity::Warning, "__1_0.distcp cannot be read"), qPrintable(describeFindings(src)));
}

void TestDcp::escapingRelativePaths()
{
    // relative_path '__1_0.distcp' is 12 bytes in the pickle; each replacement has the same length.
    const QByteArray md = readAll(dcpDir() + "/t113_two_ranks/.metadata");
    QVERIFY(md.contains("__1_0.distcp"));
    QTemporaryDir tmp;
    const QString folder = tmp.path() + "/ckpt";
    QVERIFY(copyFolder(dcpDir() + "/t113_two_ranks", folder));
    // A file the escaping paths would reach, with real rank-1 bytes: it must still not be used.
    QVERIFY(QFile::copy(folder + "/__1_0.distcp", tmp.path() + "/_1.distcp"));
    const QByteArray bad[] = { QByteArray("../_1.distcp"), QByteArray("/etc/passwd\0", 12), QByteArray("..\\_1.distcp"),
        QByteArray("__1_0\0distcp", 12), QByteArray("sub/../../_1") };
    for (const QByteArray& path : bad) {
        QCOMPARE(path.size(), qsizetype(12));
        QByteArray patched = md;
        patched.replace("__1_0.distcp", path);
        QVERIFY(writeFile(folder + "/.metadata", patched));
        Source src;
        QVERIFY(openOrLoadError(folder, folder, &src));
        QVERIFY2(hasFinding(src, Severity::Danger, "points outside the checkpoint folder"), qPrintable(describeFindings(src)));
        const Entry* w = entryNamed(src, "layers.0.weight");
        QCOMPARE(w->location.kind, TensorLocation::Kind::Unavailable);
        QCOMPARE(w->sharding->chunks[2].file, -1);
        QCOMPARE(w->sharding->chunks[2].byteLength, uint64_t(0));
        // Nothing outside the folder is listed, let alone opened.
        for (const auto& f : src.files)
            QVERIFY2(q(f).startsWith(folder + "/"), qPrintable(q(f)));
    }
}

// A data file that is a symlink out of the checkpoint folder is never opened, though it holds the real rank-1
// bytes: its chunks are unavailable, their values refused, and a danger names it. That it was not opened is
// read from io/file_trust.h's record of every file StateLens opens. The folder itself may be named through a
// symlink, and symlinks that stay inside it are followed.
void TestDcp::symlinksOutOfTheFolder()
{
    QTemporaryDir tmp;
    const QString folder = tmp.path() + "/ckpt";
    QVERIFY(copyFolder(dcpDir() + "/t113_two_ranks", folder));
    QVERIFY(QDir().mkpath(tmp.path() + "/outside"));
    const QString outside = tmp.path() + "/outside/__1_0.distcp";
    QVERIFY(QFile::rename(folder + "/__1_0.distcp", outside));
    for (const QString& target : { QStringLiteral("../outside/__1_0.distcp"), outside }) {
        QFile::remove(folder + "/__1_0.distcp");
        QVERIFY(symlinkTo(target, folder + "/__1_0.distcp"));
        Source src;
        QVERIFY(openOrLoadError(folder, folder, &src));
        QVERIFY2(hasFinding(src, Severity::Danger,
                     "__1_0.distcp is a symlink that points outside the checkpoint folder (to " + outside),
            qPrintable(describeFindings(src)));
        const Entry* w = entryNamed(src, "layers.0.weight");
        QVERIFY(w && w->sharding);
        QCOMPARE(w->location.kind, TensorLocation::Kind::Unavailable);
        QCOMPARE(w->sharding->chunks[2].byteLength, uint64_t(0));
        QVERIFY(q(w->sharding->chunks[2].label).contains("outside"));
        QCOMPARE(entryNamed(src, "norm.weight")->location.kind, TensorLocation::Kind::Mapped); // rank 0's file
        values::FileCache files;
        QVERIFY_THROWS_EXCEPTION(LoadError, values::TensorBytes::open(src, *w, files));
        QVERIFY2(inputReachedBy(s(outside)).empty(), "the file outside the folder was opened");
    }

    // .metadata itself out of the folder (a copy never opened): nothing to list.
    QVERIFY(QFile::remove(folder + "/__1_0.distcp") && QFile::rename(outside, folder + "/__1_0.distcp"));
    const QString metadataOutside = tmp.path() + "/outside/.metadata";
    QVERIFY(
        QFile::copy(dcpDir() + "/t113_two_ranks/.metadata", metadataOutside) && QFile::remove(folder + "/.metadata"));
    QVERIFY(symlinkTo(metadataOutside, folder + "/.metadata"));
    QString error;
    QVERIFY(!openOrLoadError(folder, folder, nullptr, &error));
    QVERIFY2(error.contains(".metadata is a symlink that points outside the checkpoint folder"), qPrintable(error));
    QVERIFY(inputReachedBy(s(metadataOutside)).empty());

    // Inside is fine: the folder named by a symlink, a data file linked to a sub-folder of it.
    QVERIFY(QFile::remove(folder + "/.metadata") && QFile::rename(metadataOutside, folder + "/.metadata"));
    QVERIFY(QDir().mkpath(folder + "/sub") && QFile::rename(folder + "/__1_0.distcp", folder + "/sub/real.distcp"));
    QVERIFY(symlinkTo("sub/real.distcp", folder + "/__1_0.distcp"));
    QVERIFY(symlinkTo(folder, tmp.path() + "/alias"));
    Source src;
    QVERIFY(openOrLoadError(tmp.path() + "/alias", tmp.path() + "/alias", &src));
    QCOMPARE(src.countFindings(Severity::Danger), size_t(0));
    QVERIFY(entryNamed(src, "layers.0.weight")->sharding->chunks[2].byteLength > 0); // in rank 1's file
    QVERIFY(!entryNamed(src, "layers.0.weight")->attribute("unavailable_chunks"));

    // HuggingFaceStorageWriter's sharded folder (no .metadata): a shard out of the folder is not read either.
    const QString hf = tmp.path() + "/hf";
    QVERIFY(copyFolder(dcpDir() + "/hf_sharded", hf));
    const QString hfOutside = tmp.path() + "/outside/shard-00002-model-00001-of-00001.safetensors";
    QVERIFY(QFile::rename(hf + "/shard-00002-model-00001-of-00001.safetensors", hfOutside));
    QVERIFY(symlinkTo(hfOutside, hf + "/shard-00002-model-00001-of-00001.safetensors"));
    QVERIFY(openOrLoadError(hf, hf, &src));
    QVERIFY2(hasFinding(src, Severity::Danger,
                 "shard-00002-model-00001-of-00001.safetensors is a symlink that points outside"),
        qPrintable(describeFindings(src)));
    QVERIFY(inputReachedBy(s(hfOutside)).empty());
}

void TestDcp::damagedItems()
{
    // Damage inside .distcp items: a broken embedded zip, a chunk whose data record is too short.
    QTemporaryDir tmp;
    const QString folder = tmp.path() + "/ckpt";
    QVERIFY(copyFolder(dcpDir() + "/t113_flat", folder));
    QByteArray data = readAll(folder + "/__0_0.distcp");
    // Overwrite every end-of-central-directory signature: no item's zip can be read any more.
    qsizetype at = 0;
    while ((at = data.indexOf("PK\x05\x06", at)) >= 0)
        data[at + 3] = 'X';
    QVERIFY(writeFile(folder + "/__0_0.distcp", data));
    Source src;
    QVERIFY(openOrLoadError(folder, folder, &src));
    QVERIFY2(hasFinding(src, Severity::Warning, "not a readable torch.save archive", "embed.weight"), qPrintable(describeFindings(src)));
    // The item's own range is still reported.
    QVERIFY(entryNamed(src, "embed.weight")->sharding->chunks[0].byteLength > 0);

    // Random byte damage anywhere in a .distcp: never a crash.
    const QByteArray clean = readAll(dcpDir() + "/t113_flat/__0_0.distcp");
    QRandomGenerator rng(7);
    for (int round = 0; round < 200; ++round) {
        QByteArray bad = clean;
        for (int k = 0; k < 8; ++k) {
            const qsizetype pos = qsizetype(rng.bounded(quint32(bad.size())));
            bad[pos] = char(rng.bounded(256));
        }
        QVERIFY(writeFile(folder + "/__0_0.distcp", bad));
        QVERIFY(openOrLoadError(folder, folder));
    }
}

void TestDcp::handMadePickles()
{
    QTemporaryDir tmp;
    const QString folder = tmp.path() + "/ckpt";
    QVERIFY(QDir().mkpath(folder));
    auto open = [&](const QByteArray& md, Source* out = nullptr, QString* error = nullptr) {
        writeFile(folder + "/.metadata", md);
        return openOrLoadError(folder, folder, out, error);
    };
    const std::vector<int64_t> o0 { 0 };

    // A tensor whose only chunk has no storage_data entry, and a storage entry for nothing.
    Source src;
    QVERIFY(open(metadataPickle([&](Pickle& p) { p.str("w"); tensorMeta(p, "float32", { 4 }, [&](Pickle& c) { chunkMeta(c, o0, { 4 }); c.op('a'); }); },
                     [&](Pickle& p) { storageEntry(p, "ghost", &o0, "__0_0.distcp", 0, 10); }),
        &src));
    QVERIFY2(hasFinding(src, Severity::Warning, "no storage_data entry", "w"), qPrintable(describeFindings(src)));
    QVERIFY2(hasFinding(src, Severity::Info, "name no chunk"), qPrintable(describeFindings(src)));
    QVERIFY2(hasFinding(src, Severity::Warning, "__0_0.distcp", "") == false, "a file nothing reads was reported");

    // Malformed pieces: a chunk with mismatched ranks, a dtype torch does not have, negative sizes, an unknown
    // storage metadata class, a non-str key, offsets and lengths that point past any file.
    QVERIFY(open(metadataPickle(
                     [&](Pickle& p) {
                         p.str("a");
                         tensorMeta(p, "float32", { 2, 2 }, [&](Pickle& c) { chunkMeta(c, { 0 }, { 2, 2 }); c.op('a'); });
                         p.str("b");
                         tensorMeta(p, "float99", { 3 }, [&](Pickle& c) { chunkMeta(c, o0, { 3 }); c.op('a'); });
                         p.str("c");
                         tensorMeta(p, "int8", { -1 }, [](Pickle&) {});
                         p.str("d").newObject("megatron.core", "ShardedObjectMetadata").op('}').op('b');
                         p.integer(5).newObject(kMeta, "BytesStorageMetadata");
                         p.str("e");
                         tensorMeta(p, "int64", { 2 }, [&](Pickle& c) { chunkMeta(c, o0, { 2 }); c.op('a'); });
                     },
                     [&](Pickle& p) {
                         storageEntry(p, "b", &o0, "__0_0.distcp", 0, 12);
                         storageEntry(p, "e", &o0, "__0_0.distcp", int64_t(1) << 62, int64_t(1) << 62);
                     }),
        &src));
    QVERIFY2(hasFinding(src, Severity::Warning, "malformed", "a"), qPrintable(describeFindings(src)));
    QVERIFY2(hasFinding(src, Severity::Warning, "unknown dtype torch.float99", "b"), qPrintable(describeFindings(src)));
    QVERIFY2(hasFinding(src, Severity::Warning, "size", "c"), qPrintable(describeFindings(src)));
    QVERIFY2(hasFinding(src, Severity::Warning, "ShardedObjectMetadata", "d"), qPrintable(describeFindings(src)));
    QVERIFY2(hasFinding(src, Severity::Warning, "not a str"), qPrintable(describeFindings(src)));
    QVERIFY2(hasFinding(src, Severity::Warning, "__0_0.distcp is missing"), qPrintable(describeFindings(src)));
    QCOMPARE(entryNamed(src, "c")->shapeKnown, false);

    // Too short for an item at 2^62: unavailable, reported as too short.
    writeFile(folder + "/__0_0.distcp", QByteArray(64, 'x'));
    QVERIFY(open(readAll(folder + "/.metadata"), &src));
    QVERIFY2(hasFinding(src, Severity::Warning, "__0_0.distcp is too short"), qPrintable(describeFindings(src)));
    QVERIFY2(hasFinding(src, Severity::Warning, "neither a torch.save archive nor a safetensors blob", "b"), qPrintable(describeFindings(src)));
    QFile::remove(folder + "/__0_0.distcp");

    // A global that would run code, inside the .metadata itself.
    QVERIFY(open(metadataPickle([&](Pickle& p) { p.str("x").global("os", "system").op('(').str("true").op('t').op('R'); },
                     [](Pickle&) {}),
        &src));
    QVERIFY2(hasFinding(src, Severity::Danger, "os.system"), qPrintable(describeFindings(src)));

    // Megatron's extra field and an unknown one are listed, not fatal.
    QVERIFY(open(metadataPickle([](Pickle&) {}, [](Pickle&) {},
                     [](Pickle& p) { p.str("mcore_data").op('}').str("other").op('N'); }),
        &src));
    bool listed = false;
    for (const auto& [k, v] : src.metadata)
        listed |= k == "extra_fields" && v == "mcore_data, other";
    QVERIFY(listed);

    // planner_data whose paths do not join to their keys, or are not tuples.
    QVERIFY(open(
        [&] {
            Pickle p;
            p.newObject(kMeta, "Metadata").op('}').op('(');
            p.str("state_dict_metadata").op('}').op('(').str("model.w");
            tensorMeta(p, "float32", { 1 }, [&](Pickle& c) { chunkMeta(c, o0, { 1 }); c.op('a'); });
            p.str("opt.x").newObject(kMeta, "BytesStorageMetadata").op('u');
            p.str("planner_data").op('}').op('(').str("model.w").op('(').str("model").str("v").op('t');
            p.str("opt.x").integer(3).op('u');
            p.op('u').op('b').op('.');
            return p.bytes();
        }(),
        &src));
    QVERIFY2(hasFinding(src, Severity::Info, "do not join"), qPrintable(describeFindings(src)));
    QVERIFY(entryNamed(src, "model.w"));
}

void TestDcp::notAMetadata()
{
    QTemporaryDir tmp;
    const QString folder = tmp.path() + "/ckpt";
    QVERIFY(QDir().mkpath(folder));
    const QByteArray cases[] = {
        QByteArray("not a pickle at all"),
        QByteArray("\x80\x02}q\x00.", 6), // an empty dict
        Pickle().global("torch.distributed.checkpoint.metadata", "Metadata").op(')').op('\x81').op('.').bytes(), // no fields
        Pickle().str("Metadata").op('.').bytes(),
        QByteArray("\x80\x04\x95", 3),
    };
    for (const QByteArray& md : cases) {
        writeFile(folder + "/.metadata", md);
        QString error;
        QVERIFY2(!openOrLoadError(folder, folder, nullptr, &error), qPrintable(md.toHex()));
        QVERIFY2(error.contains(".metadata"), qPrintable(error));
    }
    // The same through the .metadata path: the error names that file.
    QString error;
    QVERIFY(!openOrLoadError(folder + "/.metadata", folder + "/.metadata", nullptr, &error));
}

void TestDcp::absurdChunkCounts()
{
    QTemporaryDir tmp;
    const QString folder = tmp.path() + "/ckpt";
    QVERIFY(QDir().mkpath(folder));
    QElapsedTimer timer;

    // 300,000 references to one chunk object (memo GETs, 6 bytes each): bounded work, an overlap reported.
    timer.start();
    QByteArray md = metadataPickle(
        [&](Pickle& p) {
            p.str("w");
            tensorMeta(p, "float32", { 8, 8 }, [&](Pickle& c) {
                chunkMeta(c, { 0, 0 }, { 8, 8 });
                c.put(9000).op('a');
                for (int k = 0; k < 300000; ++k)
                    c.get(9000).op('a');
            });
        },
        [](Pickle&) {});
    writeFile(folder + "/.metadata", md);
    Source src;
    QVERIFY(openOrLoadError(folder, folder, &src));
    QCOMPARE(entryNamed(src, "w")->sharding->chunks.size(), size_t(300001));
    QVERIFY2(hasFinding(src, Severity::Warning, "overlap", "w"), qPrintable(describeFindings(src)));
    QVERIFY2(timer.elapsed() < 20000, qPrintable(QString::number(timer.elapsed())));

    // 100,000 disjoint chunks along one dimension (a layout a naive pairwise check would take 10^10 steps on).
    timer.restart();
    md = metadataPickle(
        [&](Pickle& p) {
            p.str("row");
            tensorMeta(p, "float32", { 1, 100000 }, [&](Pickle& c) {
                c.op('(');
                for (int k = 0; k < 100000; ++k)
                    chunkMeta(c, { 0, k }, { 1, 1 });
                c.op('e');
            });
        },
        [](Pickle&) {});
    writeFile(folder + "/.metadata", md);
    QVERIFY(openOrLoadError(folder, folder, &src));
    QVERIFY2(!hasFinding(src, Severity::Warning, "tile", "row") && !hasFinding(src, Severity::Warning, "overlap", "row"),
        qPrintable(describeFindings(src)));
    QVERIFY2(timer.elapsed() < 20000, qPrintable(QString::number(timer.elapsed())));

    // Sizes near 2^63 and more dimensions than a tensor can have.
    md = metadataPickle(
        [&](Pickle& p) {
            p.str("huge");
            tensorMeta(p, "float32", { int64_t(1) << 62, int64_t(1) << 62 }, [&](Pickle& c) {
                chunkMeta(c, { 0, 0 }, { int64_t(1) << 62, int64_t(1) << 62 });
                c.op('a');
                chunkMeta(c, { int64_t(1) << 62, 0 }, { int64_t(1) << 62, 1 });
                c.op('a');
            });
            p.str("deep");
            tensorMeta(p, "float32", std::vector<int64_t>(65, 1), [](Pickle&) {});
        },
        [](Pickle&) {});
    writeFile(folder + "/.metadata", md);
    QVERIFY(openOrLoadError(folder, folder, &src));
    QVERIFY2(hasFinding(src, Severity::Warning, "runs past", "huge"), qPrintable(describeFindings(src)));
    QCOMPARE(entryNamed(src, "deep")->shapeKnown, false);
}

// An item stored through a stream transform (torch 2.x `_extensions`: zstd) holds compressed bytes, not the
// elements. StateLens does not undo transforms, so reading its values is refused with a line that names the
// transform, whether its one chunk is the whole tensor (located as the item) or one of several; the plain
// tensor beside it still reads.
void TestDcp::transformedItemsRefuseValues()
{
    const Source src = openSource(s(dcpDir() + "/t2_extras"));
    const Entry* norm = entryNamed(src, "decoder.final_norm.weight");
    QVERIFY(norm && norm->sharding && norm->sharding->chunks.size() == 1);
    QVERIFY(norm->sharding->chunks[0].transformed);
    values::FileCache files;
    const auto refused = [&](const Entry& e) {
        try {
            (void)values::TensorBytes::open(src, e, files);
        } catch (const LoadError& err) {
            const QString m = q(err.what());
            QVERIFY2(m.contains("stream transforms") && m.contains("zstd") && m.contains("__0_0.distcp")
                    && !m.contains('\n'),
                err.what());
            return;
        }
        QFAIL("the values of a transformed item were read");
    };
    refused(*norm);
    Entry oneOfSeveral = *norm; // as a chunk of a tensor cut in several: not located as the item
    oneOfSeveral.location = TensorLocation {};
    refused(oneOfSeveral);
    const Entry* plain = entryNamed(src, "decoder.layers.0.mlp.weight");
    QVERIFY(plain);
    QCOMPARE(values::TensorBytes::open(src, *plain, files).numel(), uint64_t(16));
}

namespace {

// What the load-safety scan saw, as text: its dataclass lane must see what the opcodes do.
std::string describeScan(const pickle::PickleScan& s)
{
    std::string out = std::to_string(s.consumed) + " " + std::to_string(s.complete) + " " + std::to_string(s.ranOut);
    for (const auto& g : s.globals)
        out += "\n" + g.module + "." + g.name + " " + g.opcode + " " + std::to_string(g.offset) + " " + std::to_string(g.uses)
            + " " + std::to_string(g.count) + " " + std::to_string(g.nestedDepth) + " " + std::to_string(g.attribute);
    for (const auto& p : s.problems)
        out += "\n" + p;
    return out;
}

std::string scanned(Bytes b, bool lane) { return describeScan(pickle::scanPickle(b, 0, 2, lane)); }

// A protocol 4 pickle as torch 2.x writes .metadata: MEMOIZE after each new value, BINGET for the memo's.
class Pickle4 {
public:
    Pickle4() { m_b.append("\x80\x04", 2); }
    Pickle4& op(char c)
    {
        m_b.append(c);
        return *this;
    }
    uint32_t memoize() // the slot it stored into
    {
        m_b.append('\x94');
        return m_memo++;
    }
    Pickle4& str(const QByteArray& v)
    {
        m_b.append('\x8c');
        m_b.append(static_cast<char>(v.size()));
        m_b.append(v);
        return *this;
    }
    Pickle4& small(int v) // BININT1
    {
        m_b.append('K');
        m_b.append(static_cast<char>(v));
        return *this;
    }
    Pickle4& get(uint32_t slot)
    {
        m_b.append('h');
        m_b.append(static_cast<char>(slot));
        return *this;
    }
    // module.name through STACK_GLOBAL, memoised and left off the stack: its slot.
    uint32_t global(const char* module, const char* name)
    {
        str(module).memoize();
        str(name).memoize();
        op('\x93');
        const uint32_t slot = memoize();
        op('0'); // POP
        return slot;
    }
    QByteArray bytes() const { return m_b; }

private:
    QByteArray m_b;
    uint32_t m_memo = 0;
};

} // namespace

void TestDcp::laneMatchesOpcodes()
{
    // Every .metadata the fixtures hold, torch 1.13's and torch 2.6's, read with the dataclass lane and without.
    size_t files = 0, taken = 0;
    QDirIterator it(test::fixturesDir(), { QStringLiteral(".metadata") }, QDir::Files | QDir::Hidden, QDirIterator::Subdirectories);
    while (it.hasNext()) {
        const QString path = it.next();
        const QByteArray bytes = readAll(path);
        const Bytes b(reinterpret_cast<const uint8_t*>(bytes.constData()), static_cast<size_t>(bytes.size()));
        dcp::MetadataFile on, off;
        try {
            on = dcp::parseMetadata(path.toStdString(), b, nullptr, true);
            off = dcp::parseMetadata(path.toStdString(), b, nullptr, false);
        } catch (const LoadError&) {
            continue; // fixtures of damaged .metadata: the loader tests cover their errors
        }
        ++files;
        taken += on.laneRecords;
        QCOMPARE(off.laneRecords, size_t(0));
        const std::string a = dcp::dumpMetadata(on), c = dcp::dumpMetadata(off);
        QVERIFY2(a == c, qPrintable(path + ": the dataclass lane read it differently"));
        QVERIFY2(scanned(b, true) == scanned(b, false), qPrintable(path + ": the scan's dataclass lane saw it differently"));
    }
    QVERIFY2(files >= 10, "tests/fixtures holds too few .metadata files");

    // torch 2.6's own saves, against what torch's read_metadata() lists: storage_data entry by entry, with
    // the lane and without, and the lane took every chunk, MetadataIndex and _StorageInfo record torch wrote
    // but the first of each class, which names its class in full (STACK_GLOBAL) where the others fetch it.
    size_t truths = 0;
    for (const char* name : { "dcp/dcp_titan", "dcp/dcp_compiled", "dcp/accelerate/pytorch_model_fsdp_0",
             "dcp/accelerate/optimizer_0", "float8/dcp_titan_float8" }) {
        const QString where = QString::fromLatin1(name);
        const QJsonObject md = requireJson(test::fixturesDir() + "/torch2/" + where + ".truth.json")["metadata"].toObject();
        size_t chunks = 0;
        const QJsonObject keys = md["keys"].toObject();
        for (auto k = keys.begin(); k != keys.end(); ++k)
            chunks += static_cast<size_t>(k.value().toObject()["chunks"].toArray().size());
        const QJsonArray storage = md["storage"].toArray();
        QVERIFY2(chunks > 0 && !storage.isEmpty() && md["storage_info_objects"].toInteger() > 0,
            qPrintable(where + ": truth without chunks or storage_data"));
        const QByteArray bytes = readAll(test::fixturesDir() + "/torch2/" + where + "/.metadata");
        const Bytes b(reinterpret_cast<const uint8_t*>(bytes.constData()), static_cast<size_t>(bytes.size()));
        // A _StorageInfo two entries share is pickled once, and fetched (GET) the second time.
        const size_t infos = static_cast<size_t>(md["storage_info_objects"].toInteger());
        const size_t records = (chunks - 1) + (static_cast<size_t>(storage.size()) - 1) + (infos - 1);
        // Less one per FRAME opcode (one every 64 KiB) where it falls inside a record, which the lane leaves
        // to the opcode loop.
        const size_t frames = b.size() / 65536 + 1;
        auto near = [&](size_t taken) { return taken <= records && taken + (frames - 1) >= records; };
        const QString counts = ": " + QString::number(records) + " records, " + QString::number(frames) + " frames, took ";
        for (bool lane : { true, false }) {
            const dcp::MetadataFile f = dcp::parseMetadata(name, b, nullptr, lane);
            QCOMPARE(f.storage.size(), static_cast<size_t>(storage.size()));
            for (size_t i = 0; i < f.storage.size(); ++i) {
                const dcp::StorageRef& r = f.storage[i];
                const QJsonArray t = storage[static_cast<qsizetype>(i)].toArray();
                const QString at = where + " storage_data[" + QString::number(i) + "]";
                QVERIFY2(f.fqns[r.fqn] == t[0].toString().toStdString(), qPrintable(at + ": fqn"));
                QVERIFY2(r.hasOffset == !t[1].isNull(), qPrintable(at + ": offset None or not"));
                Shape offset;
                for (const QJsonValue& d : t[1].toArray())
                    offset.push_back(d.toInteger());
                QVERIFY2(r.offset == offset, qPrintable(at + ": offset"));
                QVERIFY2(r.pathIsText && f.paths[r.path] == t[2].toString().toStdString(), qPrintable(at + ": relative_path"));
                QVERIFY2(r.rangeKnown && r.itemOffset == static_cast<uint64_t>(t[3].toInteger())
                        && r.itemLength == static_cast<uint64_t>(t[4].toInteger()),
                    qPrintable(at + ": offset and length"));
                QVERIFY2(!r.transformed(), qPrintable(at + ": transforms"));
            }
            QVERIFY2(lane ? near(f.laneRecords) : f.laneRecords == 0, qPrintable(where + counts + QString::number(f.laneRecords)));
        }
        const uint64_t scannedRecords = pickle::scanPickle(b).dataclassRecords;
        QVERIFY2(near(scannedRecords), qPrintable(where + counts + QString::number(scannedRecords) + " in the scan"));
        ++truths;
    }
    QCOMPARE(truths, size_t(5));
    QVERIFY(taken > 0);
}

void TestDcp::laneRestarts()
{
    // A chunk record and a storage_data entry (MetadataIndex -> _StorageInfo) as torch 2.x writes them, then
    // (`after`, among state_dict_metadata's items, or `afterStorage`, among the Metadata's fields) something
    // that fetches or changes what the lane does not build, or reads a lane's value as an object of fields:
    // the lane must give way to the opcode loop, to the same result.
    struct Slots {
        uint32_t object = 0, state = 0, args = 0; // the chunk's
        uint32_t index = 0, indexArgs = 0, info = 0, infoState = 0; // the storage entry's
    };
    using After = std::function<void(Pickle4&, const Slots&)>;
    auto metadata = [](const After& after, const After& afterStorage, bool transforms) {
        Pickle4 p;
        const uint32_t meta = p.global("torch.distributed.checkpoint.metadata", "Metadata");
        const uint32_t tsm = p.global("torch.distributed.checkpoint.metadata", "TensorStorageMetadata");
        const uint32_t chunk = p.global("torch.distributed.checkpoint.metadata", "ChunkStorageMetadata");
        const uint32_t index = p.global("torch.distributed.checkpoint.metadata", "MetadataIndex");
        const uint32_t info = p.global("torch.distributed.checkpoint.filesystem", "_StorageInfo");
        const uint32_t size = p.global("torch", "Size");
        p.get(meta).op(')').op('\x81').memoize();
        p.op('}').memoize();
        p.op('(').str("state_dict_metadata").memoize();
        p.op('}').memoize();
        p.op('(').str("w");
        const uint32_t w = p.memoize();
        p.get(tsm).op(')').op('\x81').memoize();
        p.op('}').memoize();
        p.op('(').str("size").memoize();
        p.get(size).small(4).op('\x85').memoize();
        p.op('\x85').memoize();
        p.op('R').memoize();
        p.str("chunks").memoize();
        p.op(']').memoize();
        // The chunk record.
        Slots s;
        p.get(chunk).op(')').op('\x81');
        s.object = p.memoize();
        p.op('}');
        s.state = p.memoize();
        p.op('(').str("offsets").memoize();
        p.get(size).small(0).op('\x85').memoize();
        p.op('\x85');
        s.args = p.memoize();
        p.op('R').memoize();
        p.str("sizes").memoize();
        p.get(size).small(4).op('\x85').memoize();
        p.op('\x85').memoize();
        p.op('R').memoize();
        p.op('u').op('b');
        p.op('a'); // onto the chunk list
        p.op('u').op('b'); // the TensorStorageMetadata's fields
        after(p, s); // among state_dict_metadata's items
        p.op('u'); // state_dict_metadata
        p.str("storage_data").memoize();
        p.op('}').memoize();
        p.op('(');
        // MetadataIndex(fqn="w", offset=torch.Size([0]), index=0), its fqn the key's string fetched again.
        p.get(index).op(')').op('\x81');
        s.index = p.memoize();
        p.op('}').memoize();
        p.op('(').str("fqn").memoize();
        p.get(w);
        p.str("offset");
        const uint32_t offsetKey = p.memoize();
        p.get(size).small(0).op('\x85').memoize();
        p.op('\x85');
        s.indexArgs = p.memoize();
        p.op('R').memoize();
        p.str("index").memoize();
        p.small(0);
        p.op('u').op('b');
        // _StorageInfo(relative_path="__0_0.distcp", offset=0, length=16), its "offset" key fetched.
        p.get(info).op(')').op('\x81');
        s.info = p.memoize();
        p.op('}');
        s.infoState = p.memoize();
        p.op('(').str("relative_path").memoize();
        p.str("__0_0.distcp").memoize();
        p.get(offsetKey).small(0);
        p.str("length").memoize();
        p.small(16);
        if (transforms) { // a list, which the lane leaves to the opcodes
            p.str("transform_descriptors").memoize();
            p.op(']').memoize();
            p.op('(').str("zstd").memoize();
            p.op('e');
        }
        p.op('u').op('b');
        p.op('u'); // storage_data
        afterStorage(p, s); // among the Metadata's fields
        p.op('u').op('b').op('.');
        return p.bytes();
    };
    auto parse = [](const QByteArray& bytes, bool lane) {
        return dcp::parseMetadata("hand-made", Bytes(reinterpret_cast<const uint8_t*>(bytes.constData()), static_cast<size_t>(bytes.size())), nullptr, lane);
    };
    auto scannedRecords = [](const QByteArray& bytes) {
        return pickle::scanPickle(Bytes(reinterpret_cast<const uint8_t*>(bytes.constData()), static_cast<size_t>(bytes.size()))).dataclassRecords;
    };
    const After nothing = [](Pickle4&, const Slots&) {};

    // Nothing after them: the lane takes all three records.
    const QByteArray plain = metadata(nothing, nothing, false);
    QCOMPARE(parse(plain, true).laneRecords, size_t(3));
    QCOMPARE(scannedRecords(plain), uint64_t(3));
    QCOMPARE(dcp::dumpMetadata(parse(plain, true)), dcp::dumpMetadata(parse(plain, false)));
    QVERIFY(dcp::dumpMetadata(parse(plain, true)).find("chunk [0] [4]") != std::string::npos);
    QVERIFY(dcp::dumpMetadata(parse(plain, true)).find("storage w [0] __0_0.distcp 0+16\n") != std::string::npos);

    // A _StorageInfo with transform_descriptors: the lane takes the other two, the opcodes that one.
    const QByteArray mixed = metadata(nothing, nothing, true);
    QCOMPARE(parse(mixed, true).laneRecords, size_t(2));
    QCOMPARE(scannedRecords(mixed), uint64_t(2));
    QCOMPARE(dcp::dumpMetadata(parse(mixed, true)), dcp::dumpMetadata(parse(mixed, false)));
    QVERIFY(dcp::dumpMetadata(parse(mixed, true)).find("storage w [0] __0_0.distcp 0+16 transform zstd\n") != std::string::npos);

    struct Case {
        const char* what;
        After after = nullptr, afterStorage = nullptr;
    };
    const std::vector<Case> cases {
        // A later BUILD gives the chunk new fields, which the opcodes' object takes.
        { "BUILD onto the chunk", [](Pickle4& p, const Slots& s) {
             p.get(s.object).op('}').op('(').str("offsets").small(1).op('\x85').str("sizes").small(3).op('\x85').op('u').op('b').op('0');
         } },
        // The chunk's state dict, fetched again and given an item.
        { "the state dict fetched", [](Pickle4& p, const Slots& s) { p.get(s.state).str("sizes").small(2).op('\x85').op('s').op('0'); } },
        // The tuple around torch.Size's argument, fetched again.
        { "an argument tuple fetched", [](Pickle4& p, const Slots& s) { p.get(s.args).op('0'); } },
        // SETITEM onto the chunk object itself.
        { "SETITEM onto the chunk", [](Pickle4& p, const Slots& s) { p.get(s.object).str("k").small(1).op('s').op('0'); } },
        // The chunk object fetched again and put where an object's fields are read (an item of its own).
        { "the chunk as an item", [](Pickle4& p, const Slots& s) { p.str("w2").get(s.object); } },
        // The MetadataIndex given a new fqn by BUILD, as a field of the Metadata.
        { "BUILD onto the index", nullptr, [](Pickle4& p, const Slots& s) {
             p.str("x").get(s.index).op('}').op('(').str("fqn").str("v").str("offset").op('N').str("index").op('N').op('u').op('b');
         } },
        { "the index's argument tuple fetched", nullptr, [](Pickle4& p, const Slots& s) { p.str("x").get(s.indexArgs); } },
        { "SETITEM onto the _StorageInfo", nullptr, [](Pickle4& p, const Slots& s) { p.str("x").get(s.info).str("k").small(1).op('s'); } },
        { "the _StorageInfo's state fetched", nullptr, [](Pickle4& p, const Slots& s) { p.str("x").get(s.infoState); } },
        // The MetadataIndex as storage_meta, whose fields are read.
        { "the index as storage_meta", nullptr, [](Pickle4& p, const Slots& s) { p.str("storage_meta").get(s.index); } },
    };
    for (const Case& c : cases) {
        const QByteArray bytes = metadata(c.after ? c.after : nothing, c.afterStorage ? c.afterStorage : nothing, false);
        const dcp::MetadataFile on = parse(bytes, true);
        QVERIFY2(on.laneRecords == 0, c.what); // restarted without the lane
        QVERIFY2(dcp::dumpMetadata(on) == dcp::dumpMetadata(parse(bytes, false)), c.what);
        // Read as it arrives, three bytes at a time: the restart waits for the rest, to the same result. (Whether
        // the lane took a record depends on how much had arrived when it began, so whether it restarted does
        // too: one cut short is left to the opcodes.) Read whole once arrived, with the lane: restarted.
        const auto file = InputFile::fromBuffer("hand-made", std::vector<uint8_t>(bytes.begin(), bytes.end()));
        ArrivingBytes arriving(*file, 0, file->size(), 3, 1);
        QVERIFY2(dcp::dumpMetadata(dcp::parseMetadata("hand-made", arriving)) == dcp::dumpMetadata(on), c.what);
        ArrivingBytes atOnce(*file, 0, file->size(), ArrivingBytes::kPiece, ArrivingBytes::kAhead);
        const dcp::MetadataFile whole = dcp::parseMetadata("hand-made", atOnce);
        QVERIFY2(whole.laneRecords == 0 && dcp::dumpMetadata(whole) == dcp::dumpMetadata(on), c.what);
        const Bytes b(reinterpret_cast<const uint8_t*>(bytes.constData()), static_cast<size_t>(bytes.size()));
        QVERIFY2(scanned(b, true) == scanned(b, false), c.what);
    }
    // The BUILD cases read the new fields, as torch's unpickler would.
    QVERIFY(dcp::dumpMetadata(parse(metadata(cases[0].after, nothing, false), true)).find("chunk [1] [3]") != std::string::npos);
    QVERIFY(dcp::dumpMetadata(parse(metadata(nothing, cases[5].afterStorage, false), true)).find("storage v __0_0.distcp 0+16\n") != std::string::npos);
}

// The key and path table (dcp::StringTable) hands out views of text it keeps in blocks: every string interned
// must come back equal under its first id, ids must be dense in first-seen order, and views taken before
// more strings were added, or before the table was moved, must stay valid (the reader keeps them in
// ItemMeta::fqn and planner_data). Strings of every length from empty to past a block (64 KiB) included.
void TestDcp::stringTableKeepsViews()
{
    std::vector<std::string> distinct;
    for (size_t i = 0; i < 6000; ++i) {
        const size_t length = i % 7 == 3 ? 0 : (i * 37) % 300;
        std::string s = "k" + std::to_string(i) + ".";
        s.resize(std::max(length, s.size()), char('a' + i % 26));
        distinct.push_back(s);
    }
    for (size_t length : { size_t(16 << 10) + 1, size_t(64 << 10), size_t(200 << 10) })
        distinct.push_back(std::string(length, 'x') + std::to_string(length));
    distinct.push_back(std::string()); // the empty string, once

    dcp::StringTable table;
    std::vector<uint32_t> ids;
    std::vector<std::string_view> views;
    for (const std::string& s : distinct) {
        ids.push_back(table.intern(s));
        views.push_back(table[ids.back()]);
    }
    // First-seen order, dense; an empty string may only have been seen before as the same empty string.
    std::map<std::string, uint32_t> firstId;
    for (size_t i = 0; i < distinct.size(); ++i) {
        auto [it, inserted] = firstId.emplace(distinct[i], static_cast<uint32_t>(firstId.size()));
        QCOMPARE(ids[i], it->second);
    }
    QCOMPARE(table.size(), firstId.size());
    // Interning again (from other buffers) gives the same ids, and every earlier view still reads the same.
    for (size_t i = 0; i < distinct.size(); ++i) {
        const std::string copy = distinct[i];
        QCOMPARE(table.intern(copy), ids[i]);
        QVERIFY2(views[i] == distinct[i], qPrintable("view " + QString::number(i) + " changed"));
    }
    // Moving the table moves its blocks, not its text.
    dcp::StringTable moved = std::move(table);
    for (size_t i = 0; i < distinct.size(); ++i) {
        QVERIFY(moved[ids[i]] == distinct[i]);
        QVERIFY(distinct[i].empty() || moved[ids[i]].data() == views[i].data());
    }
    QCOMPARE(moved.intern("a key not seen before"), static_cast<uint32_t>(firstId.size()));
}

// .metadata read on the scan's thread while the unpickler follows (io/arriving_bytes.h), as `ls` of a DCP
// folder reads it: every .metadata of the fixtures, damaged ones included, must read the same, or fail with
// the same message, as from bytes read whole, with pieces down to one byte (the unpickler then waits inside
// opcodes, strings and lane records). torch 2.6's own saves are held to the keys and storage_data entries
// torch's read_metadata() listed. A file that shrinks while it is read ends the read with its error.
void TestDcp::readAsItArrives()
{
    auto whole = [](const std::string& name, const std::vector<uint8_t>& bytes) {
        try {
            return dcp::dumpMetadata(dcp::parseMetadata(name, Bytes(bytes.data(), bytes.size())));
        } catch (const LoadError& e) {
            return std::string("error: ") + e.what();
        }
    };
    auto arriving = [](const std::string& name, const std::vector<uint8_t>& bytes, size_t piece) {
        const auto file = InputFile::fromBuffer(name, bytes);
        ArrivingBytes in(*file, 0, file->size(), piece, piece == ArrivingBytes::kPiece ? ArrivingBytes::kAhead : 1);
        try {
            return dcp::dumpMetadata(dcp::parseMetadata(name, in));
        } catch (const LoadError& e) {
            return std::string("error: ") + e.what();
        }
    };
    size_t files = 0, failing = 0;
    QDirIterator it(test::fixturesDir(), { QStringLiteral(".metadata") }, QDir::Files | QDir::Hidden, QDirIterator::Subdirectories);
    while (it.hasNext()) {
        const QString path = it.next();
        const QByteArray read = readAll(path);
        const std::vector<uint8_t> bytes(read.begin(), read.end());
        const std::string name = path.toStdString(), expected = whole(name, bytes);
        failing += expected.starts_with("error: ");
        ++files;
        // One-byte pieces for the small files only: each piece is a wake-up of the unpickler.
        for (size_t piece : { bytes.size() < 4096 ? size_t(1) : size_t(3), size_t(61), size_t(4096), ArrivingBytes::kPiece })
            QVERIFY2(arriving(name, bytes, piece) == expected,
                qPrintable(path + ": read in pieces of " + QString::number(piece) + " it differs"));
        // Cut short at 24 places: the same error as the whole read of the cut bytes.
        for (size_t cut = 0; cut < bytes.size(); cut += bytes.size() / 24 + 1) {
            const std::vector<uint8_t> head(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut));
            QVERIFY2(arriving(name, head, 5) == whole(name, head), qPrintable(path + ": cut at " + QString::number(cut)));
        }
    }
    QVERIFY2(files >= 10 && failing < files, "tests/fixtures holds too few .metadata files");

    for (const char* where : { "dcp/dcp_titan", "dcp/dcp_compiled", "float8/dcp_titan_float8" }) {
        const QString dir = test::fixturesDir() + "/torch2/" + QString::fromLatin1(where);
        const QJsonObject md = requireJson(dir + ".truth.json")["metadata"].toObject();
        const QByteArray read = readAll(dir + "/.metadata");
        const auto file = InputFile::fromBuffer(where, std::vector<uint8_t>(read.begin(), read.end()));
        ArrivingBytes in(*file, 0, file->size(), 13, 100);
        const dcp::MetadataFile f = dcp::parseMetadata(where, in);
        QCOMPARE(f.items.size(), static_cast<size_t>(md["keys"].toObject().size()));
        QCOMPARE(f.storage.size(), static_cast<size_t>(md["storage"].toArray().size()));
        QVERIFY2(f.laneRecords > 0, where);
    }

    // On disk, a .metadata that loses its second half after it was opened: the reader's error, naming it.
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    const QString copy = tmp.filePath(QStringLiteral(".metadata"));
    QVERIFY(QFile::copy(test::fixturesDir() + "/torch2/dcp/dcp_titan/.metadata", copy));
    QFile::setPermissions(copy, QFile::ReadOwner | QFile::WriteOwner);
    const auto file = InputFile::open(copy.toStdString());
    QVERIFY(file->size() > 1000);
    QVERIFY(QFile::resize(copy, static_cast<qint64>(file->size() / 2)));
    ArrivingBytes in(*file, 0, file->size(), 64, 64);
    try {
        (void)dcp::parseMetadata(copy.toStdString(), in);
        QFAIL("a .metadata that shrank while read was read");
    } catch (const LoadError& e) {
        const std::string message = e.what();
        QVERIFY2(message.find("changed while reading") != std::string::npos && message.find(".metadata") != std::string::npos,
            message.c_str());
    }
}

QTEST_GUILESS_MAIN(TestDcp)
// Bytes this process has read through read() and pread() so far (/proc/self/io rchar).
static qint64 bytesReadSoFar()
{
    QFile io(QStringLiteral("/proc/self/io"));
    if (!io.open(QIODevice::ReadOnly))
        return -1;
    for (const QByteArray& line : io.readAll().split('\n'))
        if (line.startsWith("rchar:"))
            return line.mid(6).trimmed().toLongLong();
    return -1;
}

// Listing a DCP save reads `.metadata` and the bytes items (what DCP's loader would torch.load, scanned for
// dangers), never a tensor item: the bytes read are counted, and a copy whose tensor items are overwritten
// with garbage lists exactly as the original. Its values are found when they are read, and equal those of
// the inspecting listing.
void TestDcp::listingReadsNoTensorData()
{
    for (const QString& folder : { test::fixturesDir() + "/torch2/dcp/dcp_titan", test::fixturesDir() + "/torch2/dcp/dcp_compiled",
             dcpDir() + "/t2_safetensors", dcpDir() + "/t113_two_ranks" }) {
        const qint64 before = bytesReadSoFar();
        QVERIFY(before >= 0);
        const Source src = openSource(s(folder));
        const qint64 read = bytesReadSoFar() - before;
        uint64_t tensorItems = 0, bytesItems = 0;
        std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> tensorRanges; // file -> item ranges
        for (const auto& c : src.containers) {
            const Source side = src.withContainer(c.path);
            for (const Entry& e : side.entries) {
                if (e.kind == EntryKind::Object && e.location.length) {
                    bytesItems += e.location.length;
                    tensorRanges[side.files[size_t(e.location.file)]].emplace_back(e.location.offset, e.location.length);
                    continue;
                }
                if (!e.sharding)
                    continue;
                for (const ShardChunk& ch : e.sharding->chunks) {
                    if (!ch.byteLength)
                        continue;
                    QVERIFY2(ch.inItem, qPrintable(q(e.name) + ": a chunk was placed inside its item while listing"));
                    tensorItems += ch.byteLength;
                    tensorRanges[side.files[size_t(ch.file)]].emplace_back(ch.byteOffset, ch.byteLength);
                }
            }
        }
        const qint64 metadata = QFileInfo(folder + "/.metadata").size();
        qInfo("%s: read %lld bytes; .metadata %lld, bytes items %llu, tensor items %llu", qPrintable(QFileInfo(folder).fileName()),
            read, metadata, static_cast<unsigned long long>(bytesItems), static_cast<unsigned long long>(tensorItems));
        QVERIFY2(tensorItems > 0, "no tensor items to leave unread");
        // The .metadata and nothing else: no data file's byte, bytes items included.
        QVERIFY2(uint64_t(read) <= uint64_t(metadata) + 4096, qPrintable(QString::number(read)));
        if (bytesItems)
            QVERIFY2(hasFinding(src, Severity::Info, "non-tensor (bytes) items were not read", {}),
                qPrintable(describeFindings(src)));

        // The same folder with every item, tensor or bytes, overwritten: listed the same.
        QTemporaryDir tmp;
        QDirIterator it(folder, QDir::Files | QDir::Hidden);
        while (it.hasNext()) {
            it.next();
            QVERIFY(QFile::copy(it.filePath(), tmp.filePath(it.fileName())));
        }
        for (const auto& [file, ranges] : tensorRanges) {
            QFile f(tmp.filePath(QFileInfo(q(file)).fileName()));
            QVERIFY(f.open(QIODevice::ReadWrite));
            for (const auto& [offset, length] : ranges) {
                QVERIFY(f.seek(qint64(offset)));
                f.write(QByteArray(qsizetype(length), char(0xFF)));
            }
        }
        const Source garbled = openSource(s(tmp.path()));
        QString want = q(sourceToJson(src)), got = q(sourceToJson(garbled));
        QCOMPARE(got.replace(tmp.path(), QStringLiteral("DIR")), want.replace(folder, QStringLiteral("DIR")));
        // Asked to read the items, it finds them garbled.
        const Source inspected = openSource(s(tmp.path()), inspecting());
        QVERIFY2(hasFinding(inspected, Severity::Warning, "neither a torch.save archive nor a safetensors blob", {}),
            qPrintable(describeFindings(inspected)));

        // Values: located in their items when read, equal to those of the inspecting listing.
        const Source placed = openSource(s(folder), inspecting());
        values::FileCache files;
        size_t compared = 0;
        for (size_t i = 0; i < src.entries.size(); ++i) {
            const Entry& e = src.entries[i];
            if (e.kind != EntryKind::Tensor || !e.sharding)
                continue;
            std::vector<uint8_t> a, b;
            const auto lazy = values::TensorBytes::open(src, e, files);
            const auto eager = values::TensorBytes::open(placed, placed.entries[i], files);
            QCOMPARE(lazy.numel(), eager.numel());
            const uint8_t* x = lazy.read(0, lazy.numel(), a);
            const uint8_t* y = eager.read(0, eager.numel(), b);
            QVERIFY2(std::equal(x, x + lazy.numel() * lazy.itemSize(), y), qPrintable(q(e.name)));
            ++compared;
        }
        QVERIFY(compared > 0);
    }
}

// storage_data with one key twice: pickle.load builds a dict, so the later _StorageInfo wins. The chunks sit
// at a fixed stride in storage_data, as planners write them, and the stride leads the lookup of the third
// chunk onto the earlier, replaced entry: the lookup must not take it. Truth: Python's own dict, with
// MetadataIndex compared by its fields as the frozen dataclass is.
void TestDcp::repeatedStorageKeyTakesTheLast()
{
    QTemporaryDir tmp;
    const QString folder = tmp.path() + "/ckpt";
    QVERIFY(QDir().mkpath(folder));
    const std::vector<int64_t> o0 { 0 }, o2 { 2 }, o4 { 4 };
    writeFile(folder + "/.metadata",
        metadataPickle(
            [&](Pickle& p) {
                p.str("w");
                tensorMeta(p, "float32", { 6 }, [&](Pickle& c) {
                    for (const auto* o : { &o0, &o2, &o4 }) {
                        chunkMeta(c, *o, { 2 });
                        c.op('a');
                    }
                });
            },
            [&](Pickle& p) {
                storageEntry(p, "w", &o0, "__0_0.distcp", 0, 8);
                storageEntry(p, "w", &o2, "__0_0.distcp", 100, 8);
                storageEntry(p, "w", &o4, "__0_0.distcp", 200, 8); // replaced by the next
                storageEntry(p, "w", &o4, "__0_0.distcp", 300, 8);
            }));
    writeFile(folder + "/__0_0.distcp", QByteArray(400, '\0'));

    const char* truthScript = R"PY(
import pickle, sys
class Obj:
    def __setstate__(self, st): self.__dict__.update(st if isinstance(st, dict) else {})
class MetadataIndex(Obj):
    def key(self): return (self.fqn, tuple(self.offset) if self.offset is not None else None)
    def __eq__(self, o): return self.key() == o.key()
    def __hash__(self): return hash(self.key())
class U(pickle.Unpickler):
    def find_class(self, module, name):
        if module == "torch" and name == "Size": return lambda t: tuple(t)
        if module == "torch": return name
        return MetadataIndex if name == "MetadataIndex" else type(name, (Obj,), {})
md = U(open(sys.argv[1], "rb")).load()
print(" ".join(str(md.storage_data[k].offset) for k in sorted(md.storage_data, key=lambda k: k.offset)))
)PY";
    QProcess p;
    p.start(test::torchPython(), { "-c", truthScript, folder + "/.metadata" });
    if (!p.waitForStarted() || !p.waitForFinished(60000) || p.exitCode() != 0)
        QSKIP(qPrintable("no Python truth: " + QString::fromUtf8(p.readAllStandardError())));
    const QStringList truth = QString::fromUtf8(p.readAllStandardOutput()).trimmed().split(' ');
    QCOMPARE(truth.size(), 3);

    const Source src = openSource(s(folder)); // listing: chunks keep their items' ranges
    const Entry* w = entryNamed(src, "w");
    QVERIFY(w && w->sharding);
    QCOMPARE(w->sharding->chunks.size(), size_t(3));
    QStringList got;
    for (const ShardChunk& c : w->sharding->chunks)
        got << QString::number(c.byteOffset);
    QCOMPARE(got, truth);
}

#include "tst_dcp.moc"

// A cancelled open stops inside the .metadata pickle (the loader's own first check is bypassed by calling
// the reader directly) and says so with LoadCancelled, not as a corrupt file.
void TestDcp::cancelledOpenStops()
{
    const std::string dir = (dcpDir() + QStringLiteral("/both")).toStdString();
    sl::LoadControl c;
    c.cancel();
    sl::OpenOptions o;
    o.control = &c;
    QVERIFY_THROWS_EXCEPTION(sl::LoadCancelled, sl::readDcp(dir, o));
    QVERIFY(!sl::readDcp(dir, {}).entries.empty());
}

