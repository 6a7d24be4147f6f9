// Distributed tensors inside torch.save files, and per-rank files opened as one source.
//
// The fixtures in tests/fixtures/distributed/ come from tests/fixtures/make_distributed_fixtures.py: real
// torch 1.13 output (ShardedTensor from torch.distributed._shard, FSDP1 SHARDED and LOCAL state dicts, each
// rank's file written by its own process of a gloo group) and DTensor reconstructions (marked
// "reconstruction": torch 2.x's classes stood in for, torch 1.13's torch.save wrote the files). Each file has
// `<file>.expected.json` and each set `<set>.per-rank.expected.json`, computed from what torch loaded (or, for
// the reconstructions, what was cut by construction), never from StateLens.
//
// Corrupt variants are built here (a small pickle and zip writer): placements of the wrong type, meshes
// without a rank tensor, shard metadata with absurd sizes, shared metadata bombs, rank files of different
// saves. Each must give a Source or a one-line LoadError naming the file, quickly.

#include "common/qt_text.h"
#include "common/test_files.h"
#include "common/test_paths.h"
#include "distributed/chunk_tiling.h"
#include "distributed/distributed_tensors.h"
#include "formats/loader.h"
#include "formats/rank_files_reader.h"
#include "formats/rank_sets.h"
#include "io/file_trust.h"
#include "model/source.h"
#include "report/source_report.h"
#include "util/error.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QTest>

#include <zlib.h>

#include <functional>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

using namespace sl;

namespace {

using sl::test::readJson;

QString fixtures() { return test::fixturesDir() + QStringLiteral("/distributed"); }
std::string fixture(const QString& name) { return (fixtures() + "/" + name).toStdString(); }
using sl::test::q;


QStringList expectedFiles(const QString& suffix)
{
    QStringList out;
    for (const QString& f : QDir(fixtures()).entryList({ "*" + suffix }, QDir::Files, QDir::Name))
        out << f.chopped(int(suffix.size()));
    return out;
}

QString dimsText(const Shape& s)
{
    QStringList p;
    for (int64_t d : s)
        p << QString::number(d);
    return "[" + p.join(", ") + "]";
}

QString dimsText(const QJsonValue& v)
{
    QStringList p;
    for (const auto& d : v.toArray())
        p << QString::number(d.toInteger());
    return "[" + p.join(", ") + "]";
}

QString attribute(const Entry& e, const char* key)
{
    const std::string* v = e.attribute(key);
    return v ? q(*v) : QString();
}

// Collects every mismatch so a failure shows them all.
struct Checker {
    QStringList problems;
    void expect(bool ok, const QString& where, const QString& what)
    {
        if (!ok && problems.size() < 80)
            problems << where + ": " + what;
    }
    template <typename A, typename B> void equal(const A& a, const B& b, const QString& where, const char* field)
    {
        if (!(a == b))
            expect(false, where, QStringLiteral("%1 is %2, expected %3").arg(field, text(a), text(b)));
    }
    static QString text(const QString& s) { return "'" + s + "'"; }
    template <typename N> static QString text(N n) { return QString::number(n); }

    void names(const Source& s, const QJsonArray& expected, const QString& where)
    {
        QStringList have;
        for (const auto& e : s.entries)
            have << q(e.name);
        QStringList want;
        for (const auto& e : expected)
            want << e.toObject().value("name").toString();
        expect(have == want, where, "entries are [" + have.join(", ") + "], expected [" + want.join(", ") + "]");
    }

    void findings(const Source& s, const QJsonObject& exp)
    {
        auto severityOf = [](const QString& name) {
            return name == "danger" ? Severity::Danger : name == "warning" ? Severity::Warning : Severity::Info;
        };
        auto matches = [&](const Finding& f, const QJsonObject& p) {
            return f.severity == severityOf(p.value("severity").toString())
                && q(f.message).contains(p.value("contains").toString());
        };
        QStringList all;
        for (const auto& f : s.findings)
            all << QString::fromLatin1(severityName(f.severity).data()) + ": " + q(f.message);
        for (const auto& r : exp.value("findings").toArray()) {
            const QJsonObject p = r.toObject();
            expect(std::any_of(s.findings.begin(), s.findings.end(), [&](const Finding& f) { return matches(f, p); }),
                "findings",
                "no " + p.value("severity").toString() + " containing '" + p.value("contains").toString()
                    + "' among: " + all.join(" || "));
        }
        // Warnings and dangers are claims about the file: none may appear undeclared.
        for (const auto& f : s.findings) {
            if (f.severity == Severity::Info)
                continue;
            bool declared = false;
            for (const char* list : { "findings", "allowed_findings" })
                for (const auto& p : exp.value(list).toArray())
                    declared |= matches(f, p.toObject());
            expect(declared, "findings", "unexpected " + QString::fromLatin1(severityName(f.severity).data()) + ": " + q(f.message));
        }
    }

    void chunks(const std::vector<ShardChunk>& have, const QJsonArray& want, const Source& s, bool merged,
        const QString& where)
    {
        if (have.size() != size_t(want.size())) {
            expect(false, where, QStringLiteral("%1 chunks, expected %2").arg(have.size()).arg(want.size()));
            return;
        }
        for (qsizetype i = 0; i < want.size(); ++i) {
            const QJsonObject w = want[i].toObject();
            const ShardChunk& c = have[size_t(i)];
            const QString at = where + QStringLiteral(" chunk %1").arg(i);
            if (w.value("offsets").isNull())
                expect(c.offsets.empty(), at,
                    "offsets are " + dimsText(c.offsets) + ", expected unknown");
            else
                equal(dimsText(c.offsets), dimsText(w.value("offsets")), at, "offsets");
            equal(dimsText(c.sizes), dimsText(w.value("sizes")), at, "sizes");
            equal(q(c.label), w.value("label").toString(), at, "label");
            const bool holdsBytes = merged || w.value("local").toBool();
            if (holdsBytes) {
                expect(c.file >= 0 && size_t(c.file) < s.files.size(), at, "no file");
                if (c.file >= 0 && size_t(c.file) < s.files.size() && merged)
                    equal(QFileInfo(q(s.files[size_t(c.file)])).fileName(), w.value("file").toString(), at, "file");
                equal(quint64(c.byteOffset), quint64(w.value("byte_offset").toInteger()), at, "byte offset");
                equal(quint64(c.byteLength), quint64(w.value("byte_length").toInteger()), at, "byte length");
            } else {
                equal(c.file, -1, at, "file (a piece in another rank's file)");
            }
        }
    }
};

QString report(const Checker& c) { return "\n  " + c.problems.join("\n  "); }

// ---- a pickle writer and a stored zip, enough to build torch.save files around distributed tensors ----

using Blob = std::vector<uint8_t>;

void put32(Blob& b, uint32_t v)
{
    for (int i = 0; i < 4; ++i)
        b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put16(Blob& b, uint16_t v)
{
    b.push_back(static_cast<uint8_t>(v));
    b.push_back(static_cast<uint8_t>(v >> 8));
}

class Pickle {
public:
    Blob b;
    Pickle& op(uint8_t o)
    {
        b.push_back(o);
        return *this;
    }
    Pickle& str(std::string_view s)
    {
        op('X');
        put32(b, static_cast<uint32_t>(s.size()));
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
    Pickle& num(int64_t v)
    {
        if (v >= INT32_MIN && v <= INT32_MAX) {
            op('J');
            put32(b, static_cast<uint32_t>(v));
        } else {
            op(0x8a).op(8);
            for (int i = 0; i < 8; ++i)
                b.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
        }
        return *this;
    }
    Pickle& global(std::string_view module, std::string_view name)
    {
        op('c');
        b.insert(b.end(), module.begin(), module.end());
        b.push_back('\n');
        b.insert(b.end(), name.begin(), name.end());
        b.push_back('\n');
        return *this;
    }
    Pickle& mark() { return op('('); }
    Pickle& tuple() { return op('t'); }
    Pickle& none() { return op('N'); }
    Pickle& no() { return op(0x89); }
    Pickle& put(uint32_t i)
    {
        op('r');
        put32(b, i);
        return *this;
    }
    Pickle& get(uint32_t i)
    {
        op('j');
        put32(b, i);
        return *this;
    }
    Pickle& ints(const std::vector<int64_t>& v)
    {
        mark();
        for (int64_t x : v)
            num(x);
        return tuple();
    }
    Pickle& list(const std::vector<int64_t>& v)
    {
        op(']').mark();
        for (int64_t x : v)
            num(x);
        return op('e');
    }
    // An object built as pickle builds a class instance: NEWOBJ, then BUILD with a dict state (or (None, dict)).
    Pickle& object(std::string_view module, std::string_view name, const std::function<void(Pickle&)>& items,
        bool withSlots = false)
    {
        global(module, name).op(')').op(0x81);
        if (withSlots)
            none();
        op('}').mark();
        items(*this);
        op('u');
        if (withSlots)
            op(0x86);
        return op('b');
    }
    // _rebuild_tensor_v2 over storage `key` (float32 or int64), contiguous.
    Pickle& tensor(std::string_view key, const std::vector<int64_t>& size, bool int64 = false)
    {
        int64_t numel = 1;
        for (int64_t d : size)
            numel *= d;
        std::vector<int64_t> stride(size.size(), 1);
        for (size_t i = size.size(); i-- > 1;)
            stride[i - 1] = stride[i] * size[i];
        global("torch._utils", "_rebuild_tensor_v2").mark();
        mark().str("storage").global("torch", int64 ? "LongStorage" : "FloatStorage").str(key).str("cpu").num(numel).tuple();
        op('Q');
        num(0).ints(size).ints(stride).no().global("collections", "OrderedDict").op(')').op('R');
        return tuple().op('R');
    }
    // _rebuild_from_type_v2(_rebuild_wrapper_subclass, cls, (cls, float32, size, stride, 0, strided, cpu, False), state)
    Pickle& wrapper(std::string_view module, std::string_view name, const std::vector<int64_t>& size,
        const std::function<void(Pickle&)>& state)
    {
        std::vector<int64_t> stride(size.size(), 1);
        for (size_t i = size.size(); i-- > 1;)
            stride[i - 1] = stride[i] * size[i];
        global("torch._tensor", "_rebuild_from_type_v2").mark();
        global("torch._utils", "_rebuild_wrapper_subclass").global(module, name);
        mark().global(module, name).global("torch", "float32").ints(size).ints(stride).num(0);
        global("torch.serialization", "_get_layout").mark().str("torch.strided").tuple().op('R');
        global("torch", "device").mark().str("cpu").tuple().op('R').no().tuple();
        state(*this);
        return tuple().op('R');
    }
};

Blob zip(const std::vector<std::pair<std::string, Blob>>& records)
{
    Blob out;
    Blob cd;
    for (const auto& [name, data] : records) {
        const uint32_t crc = static_cast<uint32_t>(crc32(0, data.data(), static_cast<uInt>(data.size())));
        const auto offset = static_cast<uint32_t>(out.size());
        for (Blob* b : { &out, &cd }) {
            const bool central = b == &cd;
            put32(*b, central ? 0x02014b50 : 0x04034b50);
            if (central)
                put16(*b, 20);
            put16(*b, 20);
            put16(*b, 0);
            put16(*b, 0);
            put32(*b, 0);
            put32(*b, crc);
            put32(*b, static_cast<uint32_t>(data.size()));
            put32(*b, static_cast<uint32_t>(data.size()));
            put16(*b, static_cast<uint16_t>(name.size()));
            put16(*b, 0);
            if (central) {
                put16(*b, 0);
                put16(*b, 0);
                put16(*b, 0);
                put32(*b, 0);
                put32(*b, offset);
            }
            b->insert(b->end(), name.begin(), name.end());
            if (!central)
                b->insert(b->end(), data.begin(), data.end());
        }
    }
    const auto cdOffset = static_cast<uint32_t>(out.size());
    out.insert(out.end(), cd.begin(), cd.end());
    put32(out, 0x06054b50);
    put16(out, 0);
    put16(out, 0);
    put16(out, static_cast<uint16_t>(records.size()));
    put16(out, static_cast<uint16_t>(records.size()));
    put32(out, static_cast<uint32_t>(cd.size()));
    put32(out, cdOffset);
    put16(out, 0);
    return out;
}

// A torch.save archive whose pickle is {key: value(p)}, with float storages "0".."3" of 64 elements and an
// int64 storage "m" of 4.
Blob torchSave(const std::function<void(Pickle&)>& body)
{
    Pickle p;
    p.op(0x80).op(2).op('}').mark();
    body(p);
    p.op('u').op('.');
    std::vector<std::pair<std::string, Blob>> records { { "archive/data.pkl", p.b } };
    for (const char* key : { "0", "1", "2", "3" })
        records.emplace_back(std::string("archive/data/") + key, Blob(256, 0));
    records.emplace_back("archive/data/m", Blob(32, 0));
    records.emplace_back("archive/version", Blob { '3', '\n' });
    return zip(records);
}

// ---- DTensor and ShardedTensor pickles with every part replaceable ----

using Part = std::function<void(Pickle&)>;

struct DTensorParts {
    std::vector<int64_t> global { 4, 3 };
    std::vector<int64_t> local { 2, 3 };
    Part placements = [](Pickle& p) {
        p.mark().object("torch.distributed.tensor.placement_types", "Shard", [](Pickle& q) { q.str("dim").num(0); }).tuple();
    };
    Part mesh = [](Pickle& p) {
        p.object("torch.distributed.device_mesh", "DeviceMesh", [](Pickle& q) {
            q.str("device_type").str("cuda").str("mesh").tensor("m", { 2 }, true);
            q.str("mesh_dim_names").mark().str("dp").tuple();
            q.str("_coordinate_on_dim").list({ 0 }).str("_flatten_mesh_list").ints({ 0, 1 });
        });
    };
    std::function<void(Pickle&, const DTensorParts&)> meta = [](Pickle& p, const DTensorParts& d) {
        p.global("torch.distributed.tensor._dtensor_spec", "TensorMeta").mark();
        p.global("torch", "Size").mark().ints(d.global).tuple().op('R');
        p.ints({ 3, 1 }).global("torch", "float32").tuple().op(0x81);
    };
    std::function<void(Pickle&, const DTensorParts&)> localTensor = [](Pickle& p, const DTensorParts& d) {
        p.tensor("0", d.local);
    };
    bool withSpec = true;
    std::function<void(Pickle&, const DTensorParts&)> spec = [](Pickle& p, const DTensorParts& d) {
        p.object("torch.distributed.tensor._dtensor_spec", "DTensorSpec", [&](Pickle& q) {
            q.str("mesh");
            d.mesh(q);
            q.str("placements");
            d.placements(q);
            q.str("tensor_meta");
            d.meta(q, d);
        });
    };

    void write(Pickle& p) const
    {
        p.wrapper("torch.distributed.tensor", "DTensor", global, [&](Pickle& q) {
            q.mark().none().op('}').mark().str("_local_tensor");
            localTensor(q, *this);
            if (withSpec) {
                q.str("_spec");
                spec(q, *this);
            }
            q.op('u').tuple();
        });
    }
};

Part shardObject(int64_t dim)
{
    return [dim](Pickle& p) {
        p.object("torch.distributed.tensor.placement_types", "Shard", [dim](Pickle& q) { q.str("dim").num(dim); });
    };
}

struct ShardSpec {
    std::vector<int64_t> offsets;
    std::vector<int64_t> sizes;
    int64_t rank = 0;
};

void shardMetadata(Pickle& p, const ShardSpec& s)
{
    p.object("torch.distributed._shard.metadata", "ShardMetadata", [&](Pickle& q) {
        q.str("shard_offsets").list(s.offsets).str("shard_sizes").list(s.sizes).str("placement");
        q.object("torch.distributed.remote_device", "_remote_device", [&](Pickle& r) {
            r.str("_worker_name").none().str("_rank").num(s.rank).str("_device").str("cpu");
        });
    }, true);
}

struct ShardedParts {
    std::vector<int64_t> global { 4, 2 };
    std::vector<ShardSpec> all { { { 0, 0 }, { 2, 2 }, 0 }, { { 2, 0 }, { 2, 2 }, 1 } };
    std::vector<std::pair<ShardSpec, std::vector<int64_t>>> local { { { { 0, 0 }, { 2, 2 }, 0 }, { 2, 2 } } };
    int64_t rank = 0;
    int64_t world = 2;
    // The metadata's shard list; replaceable to share one list (memo) between tensors.
    std::function<void(Pickle&, const ShardedParts&)> shardList = [](Pickle& p, const ShardedParts& s) {
        p.op(']').mark();
        for (const auto& m : s.all)
            shardMetadata(p, m);
        p.op('e');
    };
    std::function<void(Pickle&, const ShardedParts&)> state;

    void write(Pickle& p) const
    {
        p.wrapper("torch.distributed._shard.sharded_tensor.api", "ShardedTensor", global, [&](Pickle& q) {
            if (state) {
                state(q, *this);
                return;
            }
            q.mark().op(']').mark();
            for (size_t i = 0; i < local.size(); ++i)
                q.object("torch.distributed._shard.sharded_tensor.shard", "Shard", [&](Pickle& r) {
                    r.str("tensor").tensor(std::to_string(i), local[i].second).str("metadata");
                    shardMetadata(r, local[i].first);
                }, true);
            q.op('e');
            q.object("torch.distributed._shard.sharded_tensor.metadata", "ShardedTensorMetadata", [&](Pickle& r) {
                r.str("shards_metadata");
                shardList(r, *this);
                r.str("size").global("torch", "Size").mark().ints(global).tuple().op('R');
            });
            q.object("torch.distributed._shard.sharded_tensor.api.ShardedTensor", "ProcessGroupState", [&](Pickle& r) {
                r.str("local_rank").num(rank).str("global_rank").num(rank);
                r.str("local_world_size").num(world).str("global_world_size").num(world);
            });
            q.object("torch.distributed._shard.sharding_spec.chunk_sharding_spec", "ChunkShardingSpec",
                [](Pickle& r) { r.str("dim").num(0); });
            q.no().tuple();
        });
    }
};

// Opens bytes as a file would be; records what went wrong with the contract (Source or one-line LoadError
// naming the file, quickly), and returns the source when there is one.
struct Verdict {
    QStringList failures;
    std::optional<Source> open(const Blob& bytes, const QString& what)
    {
        const std::string name = "case.pt";
        QElapsedTimer timer;
        timer.start();
        std::optional<Source> s;
        try {
            s = openSourceFromMemory(name, bytes);
            (void)sourceToJson(*s);
            (void)sourceToTable(*s);
        } catch (const LoadError& e) {
            const std::string m = e.what();
            if (m.rfind(name + ": ", 0) != 0 || m.find('\n') != std::string::npos)
                failures << what + ": error not one line naming the file: " + q(m);
        } catch (const std::exception& e) {
            failures << what + ": escaped as " + q(e.what());
        }
        if (timer.elapsed() > 5000)
            failures << what + QStringLiteral(": took %1 ms").arg(timer.elapsed());
        return s;
    }
};

bool hasWarning(const Source& s, const QString& text)
{
    return std::any_of(s.findings.begin(), s.findings.end(),
        [&](const Finding& f) { return f.severity == Severity::Warning && q(f.message).contains(text); });
}

QString findingsText(const Source& s)
{
    QStringList out;
    for (const auto& f : s.findings)
        out << QString::fromLatin1(severityName(f.severity).data()) + ": " + q(f.message);
    return out.join("\n  ");
}

const Entry* entryNamed(const Source& s, const std::string& name)
{
    for (const auto& e : s.entries)
        if (e.name == name)
            return &e;
    return nullptr;
}

bool writeFile(const QString& path, const Blob& b)
{
    QFile f(path);
    return f.open(QIODevice::WriteOnly) && f.write(reinterpret_cast<const char*>(b.data()), qint64(b.size())) == qint64(b.size());
}

QString torch2()
{
    return test::fixturesDir() + QStringLiteral("/torch2");
}

// The files of a set (names relative to `dir`) given in reverse order, so their ranks must come from their
// names, as one source; the error when it does not open.
QString openReversed(const QJsonArray& files, const QString& dir, Source& out)
{
    std::vector<std::string> paths;
    for (qsizetype i = files.size(); i-- > 0;)
        paths.push_back((dir + "/" + files[i].toString()).toStdString());
    try {
        out = openRankFiles(paths, {});
    } catch (const std::exception& e) {
        return QString::fromUtf8(e.what());
    }
    return {};
}

QStringList entryNames(const Source& s)
{
    QStringList out;
    for (const auto& e : s.entries)
        out << q(e.name);
    return out;
}

QStringList truthNames(const QJsonObject& truth)
{
    QStringList out;
    for (const auto& e : truth.value("entries").toArray())
        out << e.toObject().value("name").toString();
    return out;
}

QStringList containerPaths(const Source& s)
{
    QStringList out;
    for (const auto& c : s.containers)
        out << q(c.path) + ":" + QString::fromLatin1(containerRoleName(c.role).data());
    return out;
}

bool hasInfo(const Source& s, const QString& text)
{
    return std::any_of(s.findings.begin(), s.findings.end(),
        [&](const Finding& f) { return f.severity == Severity::Info && q(f.message).contains(text); });
}

// A DTensor [4, 3] sharded on dim 0 over a 2-rank mesh, as rank `rank` saves it (its coordinate recorded).
DTensorParts dtensorOfRank(int64_t rank)
{
    DTensorParts d;
    d.mesh = [rank](Pickle& p) {
        p.object("torch.distributed.device_mesh", "DeviceMesh", [rank](Pickle& q) {
            q.str("device_type").str("cuda").str("mesh").tensor("m", { 2 }, true);
            q.str("mesh_dim_names").mark().str("dp").tuple();
            q.str("_coordinate_on_dim").list({ rank });
        });
    };
    return d;
}

// {"model": {"w": [2, 3]}, "optimizer": {"state": {0: {"exp_avg": [2, 3]}}, "param_groups": [{"params": [0]}]}}
Blob trainingCheckpoint()
{
    return torchSave([](Pickle& p) {
        p.str("model").op('}').mark().str("w").tensor("0", { 2, 3 }).op('u');
        p.str("optimizer").op('}').mark();
        p.str("state").op('}').mark().num(0).op('}').mark().str("exp_avg").tensor("1", { 2, 3 }).op('u').op('u');
        p.str("param_groups").op(']').mark().op('}').mark().str("params").list({ 0 }).op('u').op('e');
        p.op('u');
    });
}

} // namespace

class TstDistributed : public QObject {
    Q_OBJECT

private slots:
    void fixturesArePresent();
    void singleFile_data();
    void singleFile();
    void perRank_data();
    void perRank();
    void perRankContainers();
    void torch2PerRank_data();
    void torch2PerRank();
    void replicasOnlyInDTensorSaves();
    void rankFilesKeepPartsFiles();
    void torch2FolderOpensWithSetsAsContainers();
    void folderWithTwoSets();
    void folderSetsWithInnerContainers();
    void folderWithStrayFiles();
    void folderRankFilesSymlinkedOutside();
    void rankSetNames();
    void pathsSplitIntoSides();
    void perRankRejectsOtherFormats();
    void differentSaves();
    void missingRankFile();
    void rankNumbersFromContent();
    void cliListsRankFilesAsOneSource();
    void cliErrorsNameTheFile();
    void chunkPieces();
    void chunkTiling();
    void corruptDTensors();
    void corruptShardedTensors();
    void sharedMetadataBomb();
    void mutatedPickles();
};

void TstDistributed::fixturesArePresent()
{
    const QStringList singles = expectedFiles(".expected.json");
    QStringList missing;
    for (const char* stem : { "st_api", "fsdp1_sharded", "fsdp1_local", "dt_legacy" })
        for (int r = 0; r < 2; ++r)
            if (!singles.contains(QStringLiteral("%1_rank%2.pt").arg(stem).arg(r)))
                missing << QStringLiteral("%1_rank%2.pt").arg(stem).arg(r);
    for (int r = 0; r < 4; ++r)
        if (!singles.contains(QStringLiteral("dt_2d_rank%1.pt").arg(r)))
            missing << QStringLiteral("dt_2d_rank%1.pt").arg(r);
    const QStringList sets = expectedFiles(".per-rank.expected.json");
    for (const char* stem : { "st_api", "fsdp1_sharded", "fsdp1_local", "dt_2d", "dt_legacy" })
        if (!sets.contains(QLatin1String(stem)))
            missing << QLatin1String(stem) + QStringLiteral(".per-rank");
    QVERIFY2(missing.isEmpty(),
        qPrintable("missing fixtures (run /usr/bin/python3 tests/fixtures/make_distributed_fixtures.py): " + missing.join(", ")));
    qint64 total = 0;
    for (const QFileInfo& f : QDir(fixtures()).entryInfoList(QDir::Files))
        total += f.size();
    QVERIFY2(total < 300 * 1024, qPrintable(QStringLiteral("fixtures take %1 bytes").arg(total)));
}

void TstDistributed::singleFile_data()
{
    QTest::addColumn<QString>("file");
    for (const QString& f : expectedFiles(".expected.json"))
        if (!f.endsWith(QLatin1String(".per-rank")))
            QTest::newRow(qPrintable(f)) << f;
}

// One rank's file alone: global shapes, local pieces, every rank's chunk (ShardedTensor) or this rank's
// (DTensor with a mesh coordinate), the local bytes.
void TstDistributed::singleFile()
{
    QFETCH(QString, file);
    const QJsonObject exp = readJson(fixtures() + "/" + file + ".expected.json");
    QVERIFY(!exp.isEmpty());
    Checker c;
    Source s;
    try {
        s = openSource(fixture(file));
    } catch (const std::exception& e) {
        QFAIL(e.what());
    }
    c.equal(q(formatId(s.format)), exp.value("format").toString(), "source", "format");
    c.equal(q(s.container), exp.value("container").toString(), "source", "container");
    const QJsonArray entries = exp.value("entries").toArray();
    c.names(s, entries, file);
    for (qsizetype i = 0; i < entries.size() && size_t(i) < s.entries.size(); ++i) {
        const QJsonObject w = entries[i].toObject();
        const Entry& e = s.entries[size_t(i)];
        const QString at = file + " '" + q(e.name) + "'";
        c.equal(QString::fromLatin1(dtypeName(e.dtype).data()), w.value("dtype").toString(), at, "dtype");
        c.equal(dimsText(e.shape), dimsText(w.value("shape")), at, "shape");
        c.expect(e.shapeKnown, at, "shape unknown");
        if (w.contains("type_name"))
            c.equal(q(e.typeName), w.value("type_name").toString(), at, "type");
        const QJsonValue loc = w.value("location");
        if (loc.isNull()) {
            c.equal(int(e.location.kind), int(TensorLocation::Kind::None), at, "location kind");
        } else {
            const QJsonObject l = loc.toObject();
            c.equal(int(e.location.kind), int(TensorLocation::Kind::Mapped), at, "location kind");
            c.equal(quint64(e.location.offset), quint64(l.value("byte_offset").toInteger()), at, "byte offset");
            c.equal(quint64(e.location.length), quint64(l.value("byte_length").toInteger()), at, "byte length");
            c.equal(q(e.location.storageId), l.value("storage_key").toString(), at, "storage");
            c.equal(e.location.file, 0, at, "file");
        }
        c.expect(!e.attribute("sharding_problem"), at, "flagged: " + attribute(e, "sharding_problem"));
        const QJsonValue sv = w.value("sharding");
        if (sv.isNull()) {
            c.expect(!e.sharding, at, "has a sharding");
            continue;
        }
        const QJsonObject sw = sv.toObject();
        if (!e.sharding) {
            c.expect(false, at, "no sharding");
            continue;
        }
        const Sharding& sh = *e.sharding;
        c.equal(QString::fromLatin1(shardingKindName(sh.kind).data()), sw.value("kind").toString(), at, "sharding kind");
        if (sw.value("local_shape").isNull())
            c.expect(sh.localShape.empty(), at, "local shape " + dimsText(sh.localShape) + ", expected none");
        else
            c.equal(dimsText(sh.localShape), dimsText(sw.value("local_shape")), at, "local shape");
        if (sw.contains("placements")) {
            QStringList pl;
            for (const auto& p : sh.placements)
                pl << q(p);
            QStringList want;
            for (const auto& p : sw.value("placements").toArray())
                want << p.toString();
            c.equal(pl.join(" "), want.join(" "), at, "placements");
            c.equal(dimsText(sh.meshShape), dimsText(sw.value("mesh_shape")), at, "mesh shape");
            QStringList names;
            for (const auto& n : sh.meshDimNames)
                names << q(n);
            QStringList wantNames;
            for (const auto& n : sw.value("mesh_dim_names").toArray())
                wantNames << n.toString();
            c.equal(names.join(" "), wantNames.join(" "), at, "mesh dim names");
        }
        c.chunks(sh.chunks, sw.value("chunks").toArray(), s, false, at);
        const QJsonObject attrs = w.value("attributes").toObject();
        for (auto it = attrs.begin(); it != attrs.end(); ++it)
            c.equal(attribute(e, it.key().toLatin1().constData()), it.value().toString(), at,
                qPrintable("attribute " + it.key()));
    }
    c.findings(s, exp);
    QVERIFY2(c.problems.isEmpty(), qPrintable(report(c)));
}

void TstDistributed::perRank_data()
{
    QTest::addColumn<QString>("set");
    for (const QString& f : expectedFiles(".per-rank.expected.json"))
        QTest::newRow(qPrintable(f)) << f;
}

// The files of one save as one source. They are given in reverse order: the ranks come from the names.
void TstDistributed::perRank()
{
    QFETCH(QString, set);
    const QJsonObject exp = readJson(fixtures() + "/" + set + ".per-rank.expected.json");
    QVERIFY(!exp.isEmpty());
    const QJsonArray files = exp.value("files").toArray();
    Source s;
    const QString error = openReversed(files, fixtures(), s);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    Checker c;
    c.equal(q(formatId(s.format)), QStringLiteral("per-rank"), "source", "format");
    QStringList order;
    for (const auto& f : s.files)
        order << QFileInfo(q(f)).fileName();
    QStringList want;
    for (const auto& f : files)
        want << f.toString();
    c.equal(order.join(" "), want.join(" "), "source", "files");
    const QJsonArray entries = exp.value("entries").toArray();
    c.names(s, entries, set);
    for (qsizetype i = 0; i < entries.size() && size_t(i) < s.entries.size(); ++i) {
        const QJsonObject w = entries[i].toObject();
        const Entry& e = s.entries[size_t(i)];
        const QString at = set + " '" + q(e.name) + "'";
        c.equal(QString::fromLatin1(dtypeName(e.dtype).data()), w.value("dtype").toString(), at, "dtype");
        if (w.value("shape").isNull()) {
            c.expect(!e.shapeKnown, at, "global shape " + dimsText(e.shape) + ", expected unknown");
        } else {
            c.expect(e.shapeKnown, at, "global shape unknown");
            c.equal(dimsText(e.shape), dimsText(w.value("shape")), at, "global shape");
        }
        if (!e.sharding) {
            c.expect(false, at, "no sharding");
            continue;
        }
        c.equal(QString::fromLatin1(shardingKindName(e.sharding->kind).data()), QStringLiteral("per_rank_files"), at,
            "sharding kind");
        if (w.contains("placements")) {
            QStringList pl;
            for (const auto& p : e.sharding->placements)
                pl << q(p);
            QStringList wp;
            for (const auto& p : w.value("placements").toArray())
                wp << p.toString();
            c.equal(pl.join(" "), wp.join(" "), at, "placements");
            c.equal(dimsText(e.sharding->meshShape), dimsText(w.value("mesh_shape")), at, "mesh shape");
        }
        c.chunks(e.sharding->chunks, w.value("chunks").toArray(), s, true, at);
        QStringList missing;
        for (const auto& r : w.value("missing_in_ranks").toArray())
            missing << QString::number(r.toInt());
        c.equal(attribute(e, "missing_in_ranks"), missing.join(", "), at, "missing_in_ranks");
    }
    c.findings(s, exp);
    QVERIFY2(c.problems.isEmpty(), qPrintable(report(c)));
}

// Selecting a container again goes through every file; a container no file has is a LoadError.
void TstDistributed::perRankContainers()
{
    const std::vector<std::string> paths { fixture("fsdp1_sharded_rank0.pt"), fixture("fsdp1_sharded_rank1.pt") };
    Source s = openRankFiles(paths, {});
    Source again = s.withContainer("");
    QCOMPARE(again.entries.size(), s.entries.size());
    for (size_t i = 0; i < s.entries.size(); ++i) {
        QCOMPARE(again.entries[i].name, s.entries[i].name);
        QCOMPARE(again.entries[i].shape, s.entries[i].shape);
        QCOMPARE(again.entries[i].sharding->chunks.size(), s.entries[i].sharding->chunks.size());
    }
    QCOMPARE(again.findings.size(), s.findings.size());
    QVERIFY_THROWS_EXCEPTION(LoadError, (void)s.withContainer("no.such.container"));
    OpenOptions opts;
    opts.container = "";
    QCOMPARE(openRankFiles(paths, opts).entries.size(), s.entries.size());
}

void TstDistributed::torch2PerRank_data()
{
    QTest::addColumn<QString>("set");
    for (const char* set : { "fsdp2/model", "fsdp2/optim", "fsdp2/optim_fqn", "fsdp2/compiled_model", "fsdp2_tp/model",
             "nf4_fsdp2/model", "float8/float8_model" })
        QTest::newRow(set) << QString::fromLatin1(set);
}

// Real torch 2.6 rank files (tests/fixtures/make_torch2_fixtures.py) against what torch itself reported for
// each entry: name, dtype, global shape, every rank's local shape in rank order, placements and mesh.
void TstDistributed::torch2PerRank()
{
    QFETCH(QString, set);
    const QJsonObject truth = readJson(torch2() + "/" + set + ".per-rank.truth.json");
    QVERIFY2(!truth.isEmpty(), qPrintable(set));
    const QJsonArray open = truth.value("open").toArray();
    QVERIFY(open.size() >= 2);
    Source s;
    const QString error = openReversed(open, torch2(), s);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    Checker c;
    c.equal(q(formatId(s.format)), QStringLiteral("per-rank"), set, "format");
    c.equal(entryNames(s).join(" "), truthNames(truth).join(" "), set, "entries");
    for (const auto& v : truth.value("entries").toArray()) {
        const QJsonObject t = v.toObject();
        const QString name = t.value("name").toString();
        const Entry* e = entryNamed(s, name.toStdString());
        if (!e)
            continue;
        const QString at = set + " '" + name + "'";
        if (t.value("class").toString() == QLatin1String("builtins.list")) {
            c.expect(e->kind == EntryKind::Object, at, "not an object entry");
            continue;
        }
        c.equal(QString::fromLatin1(dtypeName(e->dtype).data()), t.value("dtype").toString(), at, "dtype");
        c.expect(e->shapeKnown, at, "global shape unknown (" + attribute(*e, "global_shape") + ")");
        c.equal(dimsText(e->shape), dimsText(t.value("shape")), at, "global shape");
        if (!e->sharding) {
            c.expect(false, at, "no sharding");
            continue;
        }
        const QJsonArray locals = t.value("local_shapes").toArray();
        QStringList have;
        QStringList want;
        for (size_t i = 0; i < e->sharding->chunks.size(); ++i) {
            have << dimsText(e->sharding->chunks[i].sizes);
            c.equal(q(e->sharding->chunks[i].label), QStringLiteral("rank %1").arg(i), at, "chunk label");
        }
        for (const auto& l : locals)
            want << dimsText(l);
        c.equal(have.join(" "), want.join(" "), at, "local shapes");
        if (t.contains("placements")) {
            QStringList pl;
            for (const auto& p : e->sharding->placements)
                pl << q(p);
            QStringList wp;
            for (const auto& p : t.value("placements").toArray())
                wp << p.toString();
            c.equal(pl.join(" "), wp.join(" "), at, "placements");
            c.equal(dimsText(e->sharding->meshShape), dimsText(t.value("mesh_shape")), at, "mesh shape");
        } else {
            // A plain tensor in a DTensor save: whole on every rank, so every piece starts at the origin.
            c.expect(attribute(*e, "global_shape").contains("replica"), at,
                "global_shape is '" + attribute(*e, "global_shape") + "'");
            Shape origin;
            origin.resize(e->shape.size());
            for (const ShardChunk& ch : e->sharding->chunks)
                c.equal(dimsText(ch.offsets), dimsText(origin), at, "replica offsets");
        }
    }
    // Every piece is there: nothing may be reported missing or uncovered.
    for (const Finding& f : s.findings)
        c.expect(f.severity != Severity::Warning || q(f.message).contains("weights_only"), set,
            "unexpected warning: " + q(f.message));
    QVERIFY2(c.problems.isEmpty(), qPrintable(report(c)));
}

// A plain tensor of one shape in every file is a replica only where the save's sharded tensors are
// DTensors (FSDP2 leaves buffers whole); without them it may as well be an even shard, so it stays unknown.
// Pipeline stages saved per rank by torch 2.6 (make_torch2_fixtures.py, set pipeline_fp8): each rank's own
// layer is an FP8 weight and its scale as DTensors, grouped in the rank's source, so the group's parts carry
// locations and pieces of their own. A key held by rank 1 only is taken from rank 1's file; every file its
// parts and their pieces name must be that file (the pieces named rank 0's file: the parts' chunks were not
// renumbered). Which file holds which key is what torch.load read back from each.
void TstDistributed::rankFilesKeepPartsFiles()
{
    const QString dir = test::fixturesDir() + QStringLiteral("/torch2/pipeline_fp8");
    const QJsonObject held = readJson(dir + QStringLiteral("/pipeline_fp8.held.json")).value("files").toObject();
    QCOMPARE(held.size(), 2);
    std::vector<std::string> paths;
    std::map<std::string, std::vector<std::string>> holders; // key -> the files torch found it in
    for (auto it = held.begin(); it != held.end(); ++it) {
        paths.push_back((dir + QLatin1Char('/') + it.key()).toStdString());
        for (const QJsonValue& k : it.value().toArray())
            holders[k.toString().toStdString()].push_back(paths.back());
    }
    const Source s = openRankFiles(paths, {});
    const auto fileName = [&](int32_t f) {
        return f >= 0 && size_t(f) < s.files.size() ? s.files[size_t(f)] : std::string("(none)");
    };
    int checked = 0;
    for (const Entry& e : s.entries) {
        const auto& files = holders[e.name];
        QVERIFY2(!files.empty(), e.name.c_str());
        if (files.size() != 1 || e.parts.empty())
            continue;
        QCOMPARE(e.kind, EntryKind::Group);
        for (const Entry& part : e.parts) {
            QCOMPARE(fileName(part.location.file), files[0]);
            QVERIFY2(part.sharding && !part.sharding->chunks.empty(), part.name.c_str());
            for (const ShardChunk& c : part.sharding->chunks)
                QCOMPARE(fileName(c.file), files[0]);
            ++checked;
        }
    }
    QCOMPARE(checked, 4); // two parts of each rank's own layer
}

void TstDistributed::replicasOnlyInDTensorSaves()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    std::vector<std::string> plain;
    std::vector<std::string> dtensor;
    for (int r = 0; r < 2; ++r) {
        const QString p = dir.filePath(QStringLiteral("plain_rank%1.pt").arg(r));
        QVERIFY(writeFile(p, torchSave([](Pickle& k) { k.str("buf").tensor("0", { 2, 3 }); })));
        plain.push_back(p.toStdString());
        const QString d = dir.filePath(QStringLiteral("dt_rank%1.pt").arg(r));
        QVERIFY(writeFile(d, torchSave([r](Pickle& k) {
            k.str("w");
            dtensorOfRank(r).write(k);
            k.str("buf").tensor("1", { 2, 3 });
            k.str("pieces").tensor("2", { 3 - r, 3 }); // differ along dim 0: concatenated, as before
        })));
        dtensor.push_back(d.toStdString());
    }
    const Source a = openRankFiles(plain, {});
    const Entry* buf = entryNamed(a, "buf");
    QVERIFY(buf);
    QVERIFY2(!buf->shapeKnown, qPrintable(attribute(*buf, "global_shape")));
    QVERIFY(attribute(*buf, "global_shape").contains("unknown"));
    QVERIFY2(hasInfo(a, "replica or an even shard"), qPrintable(findingsText(a)));

    const Source b = openRankFiles(dtensor, {});
    const Entry* w = entryNamed(b, "w");
    QVERIFY(w && w->shapeKnown);
    QCOMPARE(w->shape, Shape({ 4, 3 }));
    buf = entryNamed(b, "buf");
    QVERIFY(buf);
    QVERIFY2(buf->shapeKnown, qPrintable(attribute(*buf, "global_shape")));
    QCOMPARE(buf->shape, Shape({ 2, 3 }));
    QVERIFY(attribute(*buf, "global_shape").contains("replica"));
    QCOMPARE(buf->sharding->chunks.size(), size_t(2));
    QCOMPARE(buf->sharding->chunks[1].offsets, Shape({ 0, 0 }));
    QVERIFY2(hasInfo(b, "taken as a replica"), qPrintable(findingsText(b)));
    const Entry* pieces = entryNamed(b, "pieces");
    QVERIFY(pieces && pieces->shapeKnown);
    QCOMPARE(pieces->shape, Shape({ 5, 3 }));
    QVERIFY2(!hasWarning(b, "elements"), qPrintable(findingsText(b)));
}

// The real FSDP2 folder: one container per set of rank files, the model set picked, each set as the
// truth lists it; other checkpoints in the folder are named, not opened.
void TstDistributed::torch2FolderOpensWithSetsAsContainers()
{
    const std::string folder = (torch2() + "/fsdp2").toStdString();
    Source s;
    try {
        QCOMPARE(std::string(formatId(detectFormat(folder))), std::string("per-rank"));
        s = openSource(folder);
    } catch (const std::exception& e) {
        QFAIL(e.what());
    }
    QCOMPARE(std::string(formatId(s.format)), std::string("per-rank"));
    QCOMPARE(containerPaths(s).join(" "),
        QStringLiteral("compiled_model:model model:model optim:optimizer optim_fqn:optimizer"));
    QCOMPARE(s.container, std::string("model"));
    QCOMPARE(entryNames(s), truthNames(readJson(torch2() + "/fsdp2/model.per-rank.truth.json")));
    QCOMPARE(s.files.size(), size_t(2));
    QVERIFY2(hasInfo(s, "picked container 'model'"), qPrintable(findingsText(s)));
    QVERIFY2(hasInfo(s, "compiled_fsdp2_rank0.sldump.json"), qPrintable(findingsText(s)));
    const Entry* mask = entryNamed(s, "mask");
    QVERIFY(mask && mask->shapeKnown);
    QCOMPARE(mask->shape, Shape({ 4, 4 }));

    for (const char* set : { "optim", "optim_fqn", "compiled_model" }) {
        const QStringList want = truthNames(readJson(torch2() + "/fsdp2/" + set + ".per-rank.truth.json"));
        const Source other = s.withContainer(set);
        QCOMPARE(other.container, std::string(set));
        QCOMPARE(entryNames(other), want);
        QCOMPARE(other.containers.size(), s.containers.size());
        OpenOptions o;
        o.container = set;
        QCOMPARE(entryNames(openSource(folder, o)), want);
    }
    try {
        (void)s.withContainer("optimizer.state");
        QFAIL("an absent container was selected");
    } catch (const LoadError& e) {
        QVERIFY2(QString::fromUtf8(e.what()).startsWith(q(folder) + ": no container 'optimizer.state'"), e.what());
    }
    // A folder holding a DCP checkpoint or an index keeps opening as that.
    QCOMPARE(std::string(formatId(detectFormat((torch2() + "/dcp/dcp_titan").toStdString()))), std::string("dcp"));
}

// Two sets of synthetic rank files: roles from the names, the model set picked, the EMA copy selectable.
void TstDistributed::folderWithTwoSets()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    for (int r = 0; r < 2; ++r) {
        for (const char* set : { "model", "ema" })
            QVERIFY(writeFile(
                dir.filePath(QStringLiteral("%1_rank%2.pt").arg(QLatin1String(set)).arg(r)), torchSave([r](Pickle& k) {
                    k.str("w");
                    dtensorOfRank(r).write(k);
                    k.str("b").tensor("1", { 3 });
                })));
    }
    const Source s = openSource(dir.path().toStdString());
    QCOMPARE(containerPaths(s).join(" "), QStringLiteral("ema:ema model:model"));
    QCOMPARE(s.container, std::string("model"));
    QCOMPARE(entryNames(s).join(" "), QStringLiteral("w b"));
    QCOMPARE(entryNamed(s, "b")->shape, Shape({ 3 }));
    const Source ema = s.withContainer("ema");
    QCOMPARE(QFileInfo(q(ema.files.front())).fileName(), QStringLiteral("ema_rank0.pt"));
    QCOMPARE(ema.container, std::string("ema"));
}

// Rank files that each hold a training checkpoint ({"model", "optimizer"}): one container per inner state
// dict, SET/INNER; the set's name alone gives its files' own pick, an inner name alone the one set that has it.
void TstDistributed::folderSetsWithInnerContainers()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    for (int r = 0; r < 2; ++r)
        QVERIFY(writeFile(dir.filePath(QStringLiteral("ckpt_rank%1.pt").arg(r)), trainingCheckpoint()));
    const Source s = openSource(dir.path().toStdString());
    QCOMPARE(containerPaths(s).join(" "), QStringLiteral("ckpt/model:model ckpt/optimizer:optimizer"));
    QCOMPARE(s.container, std::string("ckpt/model"));
    QCOMPARE(entryNames(s).join(" "), QStringLiteral("w"));
    for (const char* name : { "ckpt/optimizer", "optimizer" }) {
        const Source o = s.withContainer(name);
        QCOMPARE(o.container, std::string("ckpt/optimizer"));
        QCOMPARE(entryNames(o).join(" "), QStringLiteral("state.0.exp_avg param_groups"));
    }
    QCOMPARE(s.withContainer("ckpt").container, std::string("ckpt/model"));
}

// Files in no set are named and left alone; a folder with nothing but them is an error that says so.
void TstDistributed::folderWithStrayFiles()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const Blob plain = torchSave([](Pickle& k) { k.str("w").tensor("0", { 2, 3 }); });
    QVERIFY(writeFile(dir.filePath("extra.pt"), plain));
    QVERIFY(writeFile(dir.filePath("notes.txt"), Blob { 'h', 'i' }));
    QVERIFY(writeFile(dir.filePath("shard_rank7.pt"), Blob { 'h', 'i' })); // named as a rank's file, but junk
    // Numbers that are not 0..n-1 are steps or epochs, not ranks.
    QVERIFY(writeFile(dir.filePath("step_100.pt"), plain));
    QVERIFY(writeFile(dir.filePath("step_200.pt"), plain));
    try {
        (void)openSource(dir.path().toStdString());
        QFAIL("a folder without rank files opened");
    } catch (const LoadError& e) {
        const QString m = QString::fromUtf8(e.what());
        QVERIFY2(
            m.startsWith(dir.path() + ": the folder holds no checkpoint") && m.contains("extra.pt"), qPrintable(m));
        QVERIFY(!m.contains('\n'));
    }
    for (int r = 0; r < 2; ++r)
        QVERIFY(writeFile(dir.filePath(QStringLiteral("shard_%1.pt").arg(r)), plain)); // bare numbers 0, 1: a save
    const Source s = openSource(dir.path().toStdString());
    QCOMPARE(containerPaths(s).join(" "), QStringLiteral("shard:model"));
    QCOMPARE(s.files.size(), size_t(2));
    QVERIFY2(hasInfo(s, "extra.pt (no rank number in its name)"), qPrintable(findingsText(s)));
    QVERIFY2(hasInfo(s, "step_100.pt (its number is not a rank"), qPrintable(findingsText(s)));
    QVERIFY2(!hasInfo(s, "notes.txt"), qPrintable(findingsText(s)));
    QVERIFY2(hasWarning(s, "shard_rank7.pt (unrecognised format"), qPrintable(findingsText(s)));
    // No DTensors here: identical shapes stay unknown.
    QVERIFY(!entryNamed(s, "w")->shapeKnown);
}

// A rank file in a folder that is a symlink out of the folder is never opened: a danger names it and its set
// goes on without it (its pieces are missing). That it was not opened is read from io/file_trust.h's record of
// every file StateLens opens. Rank files named one by one on the command line are the user's to name.
void TstDistributed::folderRankFilesSymlinkedOutside()
{
    QTemporaryDir tmp;
    const QString ckpt = tmp.path() + "/ckpt";
    const QString outside = tmp.path() + "/outside";
    QVERIFY(QDir().mkpath(ckpt) && QDir().mkpath(outside));
    for (const char* name : { "model_rank0.pt", "optim_rank0.pt", "optim_rank1.pt" })
        QVERIFY(QFile::copy(torch2() + "/fsdp2/" + name, ckpt + "/" + name));
    QVERIFY(QFile::copy(torch2() + "/fsdp2/model_rank1.pt", outside + "/model_rank1.pt"));
    auto link = [](const QString& target, const QString& at) {
        return ::symlink(QFile::encodeName(target).constData(), QFile::encodeName(at).constData()) == 0;
    };
    QVERIFY(link("../outside/model_rank1.pt", ckpt + "/model_rank1.pt"));
    const Source s = openSource(ckpt.toStdString());
    const QString danger = "symlinks that point outside it; not opened, so no set holds them: model_rank1.pt (to "
        + outside + "/model_rank1.pt)";
    QVERIFY2(std::any_of(s.findings.begin(), s.findings.end(),
                 [&](const Finding& f) { return f.severity == Severity::Danger && q(f.message).contains(danger); }),
        qPrintable(findingsText(s)));
    QCOMPARE(q(s.container), QStringLiteral("model"));
    QCOMPARE(s.files.size(), size_t(1));
    QVERIFY2(inputReachedBy((outside + "/model_rank1.pt").toStdString()).empty(),
        "the rank file outside the folder was opened");
    // The same file named by the user is read.
    const Source named
        = openRankFiles({ (ckpt + "/model_rank0.pt").toStdString(), (ckpt + "/model_rank1.pt").toStdString() }, {});
    QCOMPARE(named.files.size(), size_t(2));

    // Every rank file outside: nothing to open, and the error says why.
    QTemporaryDir tmp2;
    QVERIFY(link(outside + "/model_rank1.pt", tmp2.filePath("model_rank1.pt")));
    QVERIFY(link(torch2() + "/fsdp2/model_rank0.pt", tmp2.filePath("model_rank0.pt")));
    try {
        (void)openSource(tmp2.path().toStdString());
        QFAIL("a folder of rank files that all lie outside it opened");
    } catch (const LoadError& e) {
        QVERIFY2(QString::fromUtf8(e.what()).contains(
                     "not opened, as symlinks that point outside the folder: model_rank0.pt"),
            e.what());
    }
}

void TstDistributed::rankSetNames()
{
    auto set = [](const char* name) { return q(rankSetName(name).set); };
    QCOMPARE(set("model_rank0.pt"), QStringLiteral("model"));
    QCOMPARE(set("optim_fqn_rank1.pt"), QStringLiteral("optim_fqn"));
    QCOMPARE(set("compiled_model_rank12.pt"), QStringLiteral("compiled_model"));
    QCOMPARE(set("mp_rank_03_model_states.pt"), QStringLiteral("mp_model_states"));
    QCOMPARE(set("rank-3.pt"), QStringLiteral("rank"));
    QCOMPARE(set("RANK0_weights.bin"), QStringLiteral("weights"));
    QCOMPARE(set("shard_3.pt"), QStringLiteral("shard"));
    QCOMPARE(set("model.pt"), QString());
    QCOMPARE(rankSetName("mp_rank_03_model_states.pt").rank, int64_t(3));
    QVERIFY(rankSetName("model_rank2.pt").fromRankWord);
    QVERIFY(!rankSetName("shard_2.pt").fromRankWord);
    QCOMPARE(rankInName("model_rank3.pt"), int64_t(3));
    QCOMPARE(lastNumberInName("shard_7.pt"), int64_t(7));
    using Groups = std::vector<std::vector<std::string>>;
    QCOMPARE(groupBySet({ "a/m_rank0.pt", "b.json", "a/m_rank1.pt", "c/m_rank0.pt", "a/m_rank0.bin" }),
        Groups({ { "a/m_rank0.pt", "a/m_rank1.pt" }, { "b.json" }, { "c/m_rank0.pt" }, { "a/m_rank0.bin" } }));
    QCOMPARE(describePaths({ "a/m_rank0.pt", "a/m_rank1.pt" }), std::string("a/m_rank*.pt (2 files)"));
}

// Paths given together become the sides of a comparison: as many as sides one each, more grouped by set,
// a pattern one side; anything else is one line naming a path and saying how to write it.
void TstDistributed::pathsSplitIntoSides()
{
    using Groups = std::vector<std::vector<std::string>>;
    const std::string d = (torch2() + "/fsdp2/").toStdString();
    const std::string m = (torch2() + "/models/titan.sldump.json").toStdString();
    QCOMPARE(splitIntoSides({ d + "model_rank0.pt", d + "model_rank1.pt" }, 2, 2, "diff"),
        Groups({ { d + "model_rank0.pt" }, { d + "model_rank1.pt" } }));
    QCOMPARE(splitIntoSides({ d + "compiled_model_rank0.pt", d + "compiled_model_rank1.pt", m }, 2, 2, "diff"),
        Groups({ { d + "compiled_model_rank0.pt", d + "compiled_model_rank1.pt" }, { m } }));
    QCOMPARE(splitIntoSides({ m, d + "compiled_model_rank*.pt" }, 2, 2, "diff"),
        Groups({ { m }, { d + "compiled_model_rank0.pt", d + "compiled_model_rank1.pt" } }));
    // A pattern keeps its place among grouped paths.
    QCOMPARE(splitIntoSides({ d + "optim_rank*.pt", d + "model_rank0.pt", d + "model_rank1.pt" }, 2, 2, "diff"),
        Groups({ { d + "optim_rank0.pt", d + "optim_rank1.pt" }, { d + "model_rank0.pt", d + "model_rank1.pt" } }));
    QCOMPARE(
        splitIntoSides({ d + "model_rank0.pt", d + "model_rank1.pt", d + "optim_rank0.pt" }, 1, 2, "the window").size(),
        size_t(2));
    struct Bad {
        std::vector<std::string> args;
        std::string blamed;
    };
    for (const Bad& b : { Bad { { d + "model_rank0.pt", d + "model_rank1.pt", d + "optim_rank0.pt", m }, m },
             Bad { { d + "model_rank0.pt", d + "model_rank1.pt", d + "model_rank1.pt" }, d + "model_rank0.pt" },
             Bad { { d + "absent_rank*.pt", m }, d + "absent_rank*.pt" } }) {
        try {
            (void)splitIntoSides(b.args, 2, 2, "diff");
            QFAIL(("split: " + b.blamed).c_str());
        } catch (const LoadError& e) {
            const std::string msg = e.what();
            QVERIFY2(msg.rfind(b.blamed + ": ", 0) == 0, msg.c_str());
            QVERIFY2(msg.find('\n') == std::string::npos, msg.c_str());
        }
    }
}

// Only torch.save files: anything else is a one-line LoadError naming it.
void TstDistributed::perRankRejectsOtherFormats()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString st = dir.filePath("model_rank1.safetensors");
    {
        std::string header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
        Blob b;
        uint64_t n = header.size();
        for (int i = 0; i < 8; ++i)
            b.push_back(static_cast<uint8_t>(n >> (8 * i)));
        b.insert(b.end(), header.begin(), header.end());
        b.insert(b.end(), 4, 0);
        QVERIFY(writeFile(st, b));
    }
    const QString junk = dir.filePath("model_rank2.pt");
    QVERIFY(writeFile(junk, Blob { 'n', 'o', 'p', 'e' }));
    struct Case {
        std::vector<std::string> paths;
        std::string blamed;
    };
    const std::string r0 = fixture("st_api_rank0.pt");
    for (const Case& k : { Case { { r0, st.toStdString() }, st.toStdString() },
             Case { { r0, junk.toStdString() }, junk.toStdString() },
             Case { { r0, dir.path().toStdString() }, dir.path().toStdString() },
             Case { { r0, dir.filePath("absent_rank3.pt").toStdString() }, dir.filePath("absent_rank3.pt").toStdString() },
             Case { { r0, r0 }, r0 }, Case { {}, "(no files)" } }) {
        try {
            (void)openRankFiles(k.paths, {});
            QFAIL(("opened: " + k.blamed).c_str());
        } catch (const LoadError& e) {
            const std::string m = e.what();
            QVERIFY2(m.rfind(k.blamed + ": ", 0) == 0, m.c_str());
            QVERIFY2(m.find('\n') == std::string::npos, m.c_str());
        }
    }
}

// Files of different saves still open, with warnings saying so.
void TstDistributed::differentSaves()
{
    // Named ranks 0 and 1, but different models.
    Source s = openRankFiles({ fixture("st_api_rank0.pt"), fixture("fsdp1_sharded_rank1.pt") }, {});
    QVERIFY2(hasWarning(s, "different saves"), qPrintable(findingsText(s)));
    QVERIFY(hasWarning(s, "is missing in rank"));
    // Two files saved by rank 0: no rank numbers to tell them apart, so the order given decides.
    Source t = openRankFiles({ fixture("st_api_rank0.pt"), fixture("fsdp1_local_rank0.pt") }, {});
    QVERIFY2(hasWarning(t, "were both saved by rank 0"), qPrintable(findingsText(t)));
    QVERIFY2(hasWarning(t, "its tensors were saved by rank 0"), qPrintable(findingsText(t)));
    QCOMPARE(QFileInfo(q(t.files[0])).fileName(), QStringLiteral("st_api_rank0.pt"));
    // Same keys, other dtypes and shapes: a ShardedTensor set against a DTensor set of other keys is covered
    // above; here one key with different global shapes across ranks.
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    for (int r = 0; r < 2; ++r) {
        DTensorParts d;
        d.global = { 4 + r, 3 };
        d.local = { 2, 3 };
        d.meta = [](Pickle& p, const DTensorParts&) { p.none(); };
        QVERIFY(writeFile(dir.filePath(QStringLiteral("w_rank%1.pt").arg(r)), torchSave([&](Pickle& p) {
            p.str("w");
            d.write(p);
            p.str("b").tensor("1", { 2 + r }, r == 1);
        })));
    }
    Source u = openRankFiles({ dir.filePath("w_rank0.pt").toStdString(), dir.filePath("w_rank1.pt").toStdString() }, {});
    QVERIFY2(hasWarning(u, "has global shape [4, 3] in rank 0 but [5, 3] in rank 1"), qPrintable(findingsText(u)));
    QVERIFY2(hasWarning(u, "different dtypes"), qPrintable(findingsText(u)));
    const Entry* b = entryNamed(u, "b");
    QVERIFY(b);
    QVERIFY(b->shapeKnown); // [2] and [3]: pieces along dim 0
    QCOMPARE(b->shape, Shape({ 5 }));
}

// One file of a two-rank FSDP1 save: the pieces it lacks are reported.
void TstDistributed::missingRankFile()
{
    Source s = openRankFiles({ fixture("fsdp1_sharded_rank1.pt") }, {});
    QVERIFY2(hasWarning(s, "no file for rank 0"), qPrintable(findingsText(s)));
    QVERIFY2(hasWarning(s, "is a rank's file missing?"), qPrintable(findingsText(s)));
    const Entry* w = entryNamed(s, "enc.weight");
    QVERIFY(w && w->shapeKnown);
    QCOMPARE(w->shape, Shape({ 3, 4 }));
    QCOMPARE(w->sharding->chunks.size(), size_t(1));
    QCOMPARE(w->sharding->chunks[0].offsets, Shape({ 2, 0 }));
}

// Without rank numbers in the names, the ranks that saved the ShardedTensors order the files.
void TstDistributed::rankNumbersFromContent()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString a = dir.filePath("alpha.pt");
    const QString b = dir.filePath("beta.pt");
    QVERIFY(QFile::copy(fixtures() + "/st_api_rank1.pt", a));
    QVERIFY(QFile::copy(fixtures() + "/st_api_rank0.pt", b));
    Source s = openRankFiles({ a.toStdString(), b.toStdString() }, {});
    QCOMPARE(QFileInfo(q(s.files[0])).fileName(), QStringLiteral("beta.pt"));
    const Entry* cols = entryNamed(s, "cols");
    QVERIFY(cols);
    QCOMPARE(cols->sharding->chunks[0].label, std::string("rank 0"));
    QCOMPARE(cols->sharding->chunks[0].offsets, Shape({ 0, 0 }));
    QVERIFY2(!hasWarning(s, "saved by rank"), qPrintable(findingsText(s)));
}

void TstDistributed::cliListsRankFilesAsOneSource()
{
    auto r = test::runStatelens({ QStringLiteral("ls"), fixtures() + "/fsdp1_sharded_rank0.pt",
        fixtures() + "/fsdp1_sharded_rank1.pt", QStringLiteral("--format"), QStringLiteral("json") });
    QVERIFY2(r.exitCode == 0, r.err.constData());
    const QJsonObject doc = QJsonDocument::fromJson(r.out).object();
    const QJsonObject source = doc.value("source").toObject();
    QCOMPARE(source.value("format").toString(), QStringLiteral("per-rank"));
    QCOMPARE(source.value("files").toArray().size(), 2);
    const QJsonArray entries = doc.value("entries").toArray();
    QCOMPARE(entries.size(), 9);
    const QJsonObject w = entries[0].toObject();
    QCOMPARE(w.value("name").toString(), QStringLiteral("enc.weight"));
    QCOMPARE(w.value("sharding").toObject().value("kind").toString(), QStringLiteral("per_rank_files"));
    QCOMPARE(w.value("sharding").toObject().value("chunks").toArray().size(), 2);
    // The table lists the same source.
    const QString tp = test::fixturesDir() + "/torch2/fsdp2_tp/model_rank";
    auto t = test::runStatelens({ QStringLiteral("ls"), tp + "0.pt", tp + "1.pt", tp + "2.pt", tp + "3.pt" });
    QVERIFY2(t.exitCode == 0, t.err.constData());
    QVERIFY(t.out.contains("per-rank"));
    QVERIFY(t.out.contains("layers.0.attention.wq.weight"));
}

void TstDistributed::cliErrorsNameTheFile()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString junk = dir.filePath("model_rank1.pt");
    QVERIFY(writeFile(junk, Blob { 'x' }));
    auto r = test::runStatelens({ QStringLiteral("ls"), fixtures() + "/st_api_rank0.pt", junk });
    QCOMPARE(r.exitCode, 2);
    const QString err = QString::fromUtf8(r.err).trimmed();
    QVERIFY2(err.startsWith("statelens: " + junk + ": "), qPrintable(err));
    QVERIFY2(!err.contains('\n'), qPrintable(err));
}

// torch.chunk along one dim, as Shard.local_shard_size_and_offset computes it.
void TstDistributed::chunkPieces()
{
    using distributed::chunkPiece;
    using Piece = std::pair<int64_t, int64_t>;
    QCOMPARE(chunkPiece(5, 2, 0), Piece(3, 0));
    QCOMPARE(chunkPiece(5, 2, 1), Piece(2, 3));
    QCOMPARE(chunkPiece(1, 2, 1), Piece(0, 1)); // empty pieces sit at the end
    QCOMPARE(chunkPiece(5, 4, 3), Piece(0, 5));
    QCOMPARE(chunkPiece(5, 4, 2), Piece(1, 4));
    QCOMPARE(chunkPiece(8, 4, 3), Piece(2, 6));
    QCOMPARE(chunkPiece(0, 3, 1), Piece(0, 0));
    QCOMPARE(chunkPiece(INT64_MAX, 3, 2).first + chunkPiece(INT64_MAX, 3, 2).second, INT64_MAX);
    QCOMPARE(chunkPiece(7, 0, 0), Piece(0, 7));
    QCOMPARE(chunkPiece(7, 2, 5), Piece(0, 7));
    Shape local;
    Shape offsets;
    // FSDP2 + TP: [_StridedShard(0, sf=2), Shard(0)] on a (2, 2) mesh puts (1, 0) at rows 2-3.
    QVERIFY(distributed::dtensorPiece({ 8, 4 }, { "_StridedShard(dim=0, sf=2)", "Shard(dim=0)" }, { 2, 2 }, { 1, 0 }, local, offsets));
    QCOMPARE(local, Shape({ 2, 4 }));
    QCOMPARE(offsets, Shape({ 2, 0 }));
    // Alone, a _StridedShard piece is two runs of rows: not one box.
    QVERIFY(!distributed::dtensorPiece({ 8, 4 }, { "_StridedShard(dim=0, sf=2)" }, { 2 }, { 1 }, local, offsets));
    QCOMPARE(local, Shape({ 4, 4 }));
    QVERIFY(!distributed::dtensorPiece({ 8 }, { "Bogus()" }, { 2 }, { 0 }, local, offsets));
    QVERIFY(!distributed::dtensorPiece({ 8 }, { "Shard(dim=3)" }, { 2 }, { 0 }, local, offsets));
    QVERIFY(!distributed::dtensorPiece({ 8 }, { "Shard(dim=0)" }, { 2 }, { 2 }, local, offsets));
}

// DTensor states damaged every way the brief names: each gives a Source (with a sharding problem where the
// file contradicts itself) or a one-line LoadError.
void TstDistributed::corruptDTensors()
{
    struct Case {
        const char* what;
        std::function<void(DTensorParts&)> change;
        const char* problem; // expected in a "sharding_problem" warning; null: no specific expectation
    };
    auto placementsOf = [](Part item) {
        return [item](DTensorParts& d) {
            d.placements = [item](Pickle& p) {
                p.mark();
                item(p);
                p.tuple();
            };
        };
    };
    const std::vector<Case> cases {
        { "valid", [](DTensorParts&) {}, nullptr },
        { "placement is an int", placementsOf([](Pickle& p) { p.num(42); }), "is not a placement object" },
        { "placement is a string", placementsOf([](Pickle& p) { p.str("Shard(0)"); }), "is not a placement object" },
        { "placements are a dict", [](DTensorParts& d) { d.placements = [](Pickle& p) { p.op('}'); }; },
            "placements are not a tuple" },
        { "placements missing", [](DTensorParts& d) { d.placements = [](Pickle& p) { p.none(); }; },
            "placements are not a tuple" },
        { "Shard without dim",
            placementsOf([](Pickle& p) {
                p.object("torch.distributed.tensor.placement_types", "Shard", [](Pickle& q) { q.str("x").num(1); });
            }),
            "without an integer dim" },
        { "Shard dim is a string",
            placementsOf([](Pickle& p) {
                p.object("torch.distributed.tensor.placement_types", "Shard", [](Pickle& q) { q.str("dim").str("0"); });
            }),
            "without an integer dim" },
        { "Shard dim out of range", placementsOf(shardObject(7)), "on a 2-D tensor" },
        { "unknown placement",
            placementsOf([](Pickle& p) { p.object("torch.distributed.tensor.placement_types", "Sideways", [](Pickle&) {}); }),
            "unknown placement type" },
        { "two placements on a 1-D mesh",
            [](DTensorParts& d) {
                d.placements = [](Pickle& p) {
                    p.mark();
                    shardObject(0)(p);
                    shardObject(1)(p);
                    p.tuple();
                };
            },
            "2 placements for a 1-D mesh" },
        { "mesh without a tensor",
            [](DTensorParts& d) {
                d.mesh = [](Pickle& p) {
                    p.object("torch.distributed.device_mesh", "DeviceMesh", [](Pickle& q) { q.str("device_type").str("cuda"); });
                };
            },
            nullptr },
        { "mesh is None", [](DTensorParts& d) { d.mesh = [](Pickle& p) { p.none(); }; }, nullptr },
        { "mesh tensor is an int", [](DTensorParts& d) {
             d.mesh = [](Pickle& p) {
                 p.object("torch.distributed.device_mesh", "DeviceMesh", [](Pickle& q) { q.str("mesh").num(2); });
             };
         },
            nullptr },
        { "mesh with an empty dim", [](DTensorParts& d) {
             d.mesh = [](Pickle& p) {
                 p.object("torch.distributed.device_mesh", "DeviceMesh", [](Pickle& q) { q.str("mesh").tensor("m", { 0 }, true); });
             };
         },
            "has an empty dim" },
        { "coordinate outside the mesh", [](DTensorParts& d) {
             d.mesh = [](Pickle& p) {
                 p.object("torch.distributed.device_mesh", "DeviceMesh", [](Pickle& q) {
                     q.str("mesh").tensor("m", { 2 }, true).str("_coordinate_on_dim").list({ 5 });
                 });
             };
         },
            "lies outside mesh" },
        { "coordinate of the wrong length", [](DTensorParts& d) {
             d.mesh = [](Pickle& p) {
                 p.object("torch.distributed.device_mesh", "DeviceMesh", [](Pickle& q) {
                     q.str("mesh").tensor("m", { 2 }, true).str("_coordinate_on_dim").list({ 0, 0, 0 });
                 });
             };
         },
            "lies outside mesh" },
        { "huge flatten list index", [](DTensorParts& d) {
             d.mesh = [](Pickle& p) {
                 p.object("torch.distributed.device_mesh", "DeviceMesh", [](Pickle& q) {
                     q.str("mesh").tensor("m", { 2 }, true).str("_coordinate_on_dim").list({ 1 }).str("_flatten_mesh_list").ints({ 0 });
                 });
             };
         },
            nullptr },
        { "local piece of the wrong size", [](DTensorParts& d) { d.local = { 3, 3 }; }, "is not the piece mesh coordinate" },
        { "local piece of the wrong size, no coordinate",
            [](DTensorParts& d) {
                d.local = { 3, 3 };
                d.mesh = [](Pickle& p) {
                    p.object("torch.distributed.device_mesh", "DeviceMesh", [](Pickle& q) { q.str("mesh").tensor("m", { 2 }, true); });
                };
            },
            "is not a torch.chunk piece" },
        { "local piece with other dims", [](DTensorParts& d) { d.local = { 2, 3, 1 }; }, "the local tensor has 3 dims" },
        { "local tensor missing", [](DTensorParts& d) { d.localTensor = [](Pickle& p, const DTensorParts&) { p.none(); }; },
            "no _local_tensor" },
        { "local tensor is a string",
            [](DTensorParts& d) { d.localTensor = [](Pickle& p, const DTensorParts&) { p.str("tensor"); }; },
            "no _local_tensor" },
        { "spec missing", [](DTensorParts& d) { d.withSpec = false; }, "no _spec" },
        { "spec is a list", [](DTensorParts& d) { d.spec = [](Pickle& p, const DTensorParts&) { p.op(']'); }; },
            "not a DTensorSpec" },
        { "tensor_meta disagrees",
            [](DTensorParts& d) {
                d.meta = [](Pickle& p, const DTensorParts&) {
                    p.global("torch.distributed.tensor._dtensor_spec", "TensorMeta").mark().ints({ 9, 9 }).ints({ 9, 1 });
                    p.global("torch", "float32").tuple().op(0x81);
                };
            },
            "tensor_meta says shape [9, 9]" },
        { "tensor_meta is garbage",
            [](DTensorParts& d) { d.meta = [](Pickle& p, const DTensorParts&) { p.num(-1); }; }, nullptr },
        { "huge global shape",
            [](DTensorParts& d) {
                d.global = { INT64_MAX / 2, 3 };
                d.meta = [](Pickle& p, const DTensorParts&) { p.none(); };
            },
            nullptr },
        { "negative global shape", [](DTensorParts& d) { d.global = { -4, 3 }; }, nullptr },
        { "strided shard with a zero split factor",
            placementsOf([](Pickle& p) {
                p.object("torch.distributed.tensor.placement_types", "_StridedShard",
                    [](Pickle& q) { q.str("dim").num(0).str("split_factor").num(0); });
            }),
            "positive split_factor" },
        { "strided shard over a long dim",
            [](DTensorParts& d) {
                d.global = { int64_t(1) << 40, 3 };
                d.meta = [](Pickle& p, const DTensorParts&) { p.none(); };
                d.placements = [](Pickle& p) {
                    p.mark().object("torch.distributed.tensor.placement_types", "_StridedShard",
                        [](Pickle& q) { q.str("dim").num(0).str("split_factor").num(3); }).tuple();
                };
            },
            nullptr },
    };
    Verdict v;
    for (const Case& k : cases) {
        DTensorParts d;
        k.change(d);
        const Blob file = torchSave([&](Pickle& p) {
            p.str("w");
            d.write(p);
        });
        auto s = v.open(file, QLatin1String(k.what));
        if (!s)
            continue;
        const Entry* w = entryNamed(*s, "w");
        if (!w) {
            v.failures << QLatin1String(k.what) + ": no entry 'w'";
            continue;
        }
        if (!k.problem) {
            if (std::string_view(k.what) == "valid" && (w->attribute("sharding_problem") || !w->sharding))
                v.failures << QStringLiteral("valid: ") + attribute(*w, "sharding_problem");
            continue;
        }
        if (!attribute(*w, "sharding_problem").contains(QLatin1String(k.problem)))
            v.failures << QLatin1String(k.what) + ": problem is '" + attribute(*w, "sharding_problem") + "'";
        else if (!hasWarning(*s, QLatin1String(k.problem)))
            v.failures << QLatin1String(k.what) + ": no warning\n  " + findingsText(*s);
    }
    QVERIFY2(v.failures.isEmpty(), qPrintable(v.failures.join("\n")));
}

void TstDistributed::corruptShardedTensors()
{
    struct Case {
        const char* what;
        std::function<void(ShardedParts&)> change;
        const char* problem;
    };
    const std::vector<Case> cases {
        { "valid", [](ShardedParts&) {}, nullptr },
        { "absurd shard size", [](ShardedParts& s) { s.all[1].sizes = { int64_t(1) << 62, 2 }; }, "does not lie inside" },
        { "negative offset", [](ShardedParts& s) { s.all[1].offsets = { -2, 0 }; }, "does not lie inside" },
        { "offset overflow", [](ShardedParts& s) {
             s.all[1].offsets = { INT64_MAX, 0 };
             s.all[1].sizes = { INT64_MAX, 2 };
         },
            "does not lie inside" },
        { "shard of the wrong rank", [](ShardedParts& s) { s.all[1].sizes = { 2 }; }, "does not lie inside" },
        { "overlapping shards", [](ShardedParts& s) { s.all[1].offsets = { 1, 0 }; s.all[1].sizes = { 2, 2 }; }, "overlap" },
        { "shards leave a gap", [](ShardedParts& s) { s.all.pop_back(); }, "cover 4 of 8" },
        { "local shard not in the metadata", [](ShardedParts& s) {
             s.local[0].first.offsets = { 1, 0 };
             s.local[0].first.sizes = { 2, 2 };
         },
            "is not among the metadata's shards" },
        { "local tensor disagrees with its metadata", [](ShardedParts& s) { s.local[0].second = { 3, 2 }; },
            "but its metadata says" },
        { "local shard of another rank", [](ShardedParts& s) { s.rank = 1; }, "but rank 1 saved it" },
        { "no local shards", [](ShardedParts& s) { s.local.clear(); }, nullptr },
        { "two local shards", [](ShardedParts& s) {
             s.local.push_back({ { { 2, 0 }, { 2, 2 }, 0 }, { 2, 2 } });
             s.all[1].rank = 0;
         },
            nullptr },
        { "state is a string", [](ShardedParts& s) { s.state = [](Pickle& p, const ShardedParts&) { p.str("state"); }; },
            "is not (local_shards, metadata" },
        { "state is an empty tuple", [](ShardedParts& s) { s.state = [](Pickle& p, const ShardedParts&) { p.op(')'); }; },
            "is not (local_shards, metadata" },
        { "metadata is a number",
            [](ShardedParts& s) {
                s.state = [](Pickle& p, const ShardedParts&) { p.mark().op(']').num(3).none().none().no().tuple(); };
            },
            "not a ShardedTensorMetadata" },
        { "local shards are a dict",
            [](ShardedParts& s) {
                s.state = [](Pickle& p, const ShardedParts& self) {
                    p.mark().op('}');
                    p.object("torch.distributed._shard.sharded_tensor.metadata", "ShardedTensorMetadata", [&](Pickle& r) {
                        r.str("shards_metadata");
                        self.shardList(r, self);
                        r.str("size").ints(self.global);
                    });
                    p.none().none().no().tuple();
                };
            },
            "local_shards is not a list" },
        { "shard list holds garbage", [](ShardedParts& s) {
             s.shardList = [](Pickle& p, const ShardedParts&) { p.op(']').mark().num(1).str("x").none().op('e'); };
         },
            "does not lie inside" },
        { "flat param with a plain key", [](ShardedParts& s) {
             s.global = { 8 };
             s.all = { { { 0 }, { 4 }, 0 }, { { 4 }, { 4 }, 1 } };
             s.local = { { { { 0 }, { 4 }, 0 }, { 4 } } };
         },
            nullptr },
    };
    Verdict v;
    for (const Case& k : cases) {
        ShardedParts d;
        k.change(d);
        const Blob file = torchSave([&](Pickle& p) {
            p.str("w");
            d.write(p);
        });
        auto s = v.open(file, QLatin1String(k.what));
        if (!s)
            continue;
        const Entry* w = entryNamed(*s, "w");
        if (!w) {
            v.failures << QLatin1String(k.what) + ": no entry 'w'";
            continue;
        }
        if (!k.problem) {
            if (w->attribute("sharding_problem"))
                v.failures << QLatin1String(k.what) + ": flagged: " + attribute(*w, "sharding_problem");
            continue;
        }
        if (!attribute(*w, "sharding_problem").contains(QLatin1String(k.problem)))
            v.failures << QLatin1String(k.what) + ": problem is '" + attribute(*w, "sharding_problem") + "'";
    }
    QVERIFY2(v.failures.isEmpty(), qPrintable(v.failures.join("\n")));

    // A key named flat_param: an FSDP LOCAL_STATE_DICT flat parameter, with its per-source warning; plain too.
    ShardedParts flat;
    flat.global = { 8 };
    flat.all = { { { 0 }, { 4 }, 0 }, { { 4 }, { 4 }, 1 } };
    flat.local = { { { { 0 }, { 4 }, 0 }, { 4 } } };
    Source s = openSourceFromMemory("flat.pt", torchSave([&](Pickle& p) {
        p.str("layer._flat_param");
        flat.write(p);
        p.str("flat_param").tensor("3", { 5 });
    }));
    QCOMPARE(s.entries.size(), size_t(2));
    QCOMPARE(s.entries[0].sharding->kind, Sharding::Kind::FlatParameter);
    QCOMPARE(s.entries[0].shape, Shape({ 8 }));
    QCOMPARE(s.entries[1].sharding->kind, Sharding::Kind::FlatParameter);
    QVERIFY(!s.entries[1].shapeKnown);
    QCOMPARE(s.entries[1].sharding->localShape, Shape({ 5 }));
    QVERIFY2(hasWarning(s, "LOCAL_STATE_DICT flat parameters (layer._flat_param, flat_param)"), qPrintable(findingsText(s)));
}

// One metadata list of 60,000 shards shared (through the memo) by 2,000 ShardedTensors: bounded work.
void TstDistributed::sharedMetadataBomb()
{
    ShardedParts d;
    d.global = { 60000 };
    d.local.clear();
    bool first = true;
    d.shardList = [&first](Pickle& p, const ShardedParts&) {
        if (!first) {
            p.get(1);
            return;
        }
        first = false;
        p.op(']').put(1).mark();
        for (int64_t i = 0; i < 60000; ++i)
            shardMetadata(p, { { i }, { 1 }, i % 8 });
        p.op('e');
    };
    const Blob file = torchSave([&](Pickle& p) {
        for (int i = 0; i < 2000; ++i) {
            p.str("w" + std::to_string(i));
            d.write(p);
        }
    });
    if (qEnvironmentVariableIsSet("SL_DUMP_BOMB"))
        writeFile(qEnvironmentVariable("SL_DUMP_BOMB"), file);
    Verdict v;
    QElapsedTimer timer;
    timer.start();
    auto s = v.open(file, "shared metadata");
    QVERIFY2(v.failures.isEmpty(), qPrintable(v.failures.join("\n")));
    qInfo() << "shared metadata:" << (s ? "listed" : "refused") << "in" << timer.elapsed() << "ms";
}

// Seeded damage inside the pickles of real fixtures (the zip reader does not check CRCs, so the damaged
// pickle is what gets parsed).
void TstDistributed::mutatedPickles()
{
    Verdict v;
    for (const char* name : { "st_api_rank0.pt", "fsdp1_local_rank1.pt", "dt_2d_rank1.pt", "dt_legacy_rank0.pt" }) {
        QFile f(fixtures() + "/" + name);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray bytes = f.readAll();
        const Blob base(bytes.begin(), bytes.end());
        // data.pkl is the first record: its data starts after the 30-byte local header, name and extra field.
        const size_t nameLen = base[26] | base[27] << 8;
        const size_t extraLen = base[28] | base[29] << 8;
        const size_t start = 30 + nameLen + extraLen;
        size_t size = base[18] | base[19] << 8 | base[20] << 16 | size_t(base[21]) << 24;
        if (size == 0) {
            // Written with a data descriptor (sizes after the data): the record runs to the next header.
            const QByteArray next = bytes.mid(int(start)).left(1 << 20);
            const int at = next.indexOf("PK\x07\x08") >= 0 ? next.indexOf("PK\x07\x08") : next.indexOf("PK\x03\x04");
            size = at > 0 ? size_t(at) : 0;
        }
        QVERIFY(size > 0 && start + size <= base.size());
        for (uint32_t seed = 1; seed <= 400; ++seed) {
            std::mt19937 rng(seed);
            Blob b = base;
            const int edits = 1 + int(rng() % 3);
            for (int i = 0; i < edits; ++i) {
                const size_t at = start + rng() % size;
                switch (rng() % 3) {
                case 0: b[at] ^= uint8_t(1u << (rng() % 8)); break;
                case 1: b[at] = uint8_t(rng()); break;
                default: b[at] = '0' + uint8_t(rng() % 10); break;
                }
            }
            v.open(b, QStringLiteral("%1 seed %2").arg(QLatin1String(name)).arg(seed));
        }
    }
    QVERIFY2(v.failures.isEmpty(), qPrintable(v.failures.join("\n")));
}

QTEST_GUILESS_MAIN(TstDistributed)
// The grid check every sharded reader shares: verdicts written out by hand for small layouts, the piece
// holding each element, and a staggered layout that would need far more cells than pieces.
void TstDistributed::chunkTiling()
{
    using distributed::ChunkTiling;
    using V = ChunkTiling::Verdict;
    struct Box {
        Dims offsets, sizes;
    };
    auto check = [](const Dims& shape, const std::vector<Box>& boxes) {
        return ChunkTiling::check(
            shape, boxes.size(), [&](size_t i) { return distributed::ChunkBox { boxes[i].offsets, boxes[i].sizes }; });
    };
    // A 2 x 3 grid of a [4, 6] tensor (rows cut at 2, columns at 2 and 4), listed out of order.
    const std::vector<Box> grid = { { { 2, 4 }, { 2, 2 } }, { { 0, 0 }, { 2, 2 } }, { { 0, 2 }, { 2, 2 } },
        { { 2, 0 }, { 2, 2 } }, { { 0, 4 }, { 2, 2 } }, { { 2, 2 }, { 2, 2 } } };
    const ChunkTiling t = check({ 4, 6 }, grid);
    QCOMPARE(t.verdict(), V::Tiles);
    const int64_t expected[4][6] = { { 1, 1, 2, 2, 4, 4 }, { 1, 1, 2, 2, 4, 4 }, { 3, 3, 5, 5, 0, 0 }, { 3, 3, 5, 5, 0, 0 } };
    for (int64_t r = 0; r < 4; ++r)
        for (int64_t c = 0; c < 6; ++c) {
            const int64_t at[2] = { r, c };
            QCOMPARE(t.pieceAt(at), expected[r][c]);
        }
    // Uneven torch.chunk pieces with an empty trailing one (ignored).
    QCOMPARE(check({ 5 }, { { { 0 }, { 3 } }, { { 3 }, { 2 } }, { { 5 }, { 0 } } }).verdict(), V::Tiles);
    // Overlap names both pieces; a gap says how much is covered.
    auto overlap = grid;
    overlap[3].offsets = { 2, 1 };
    const ChunkTiling o = check({ 4, 6 }, overlap);
    QCOMPARE(o.verdict(), V::Overlap);
    QCOMPARE(o.first(), size_t(3)); // painted first
    QCOMPARE(o.second(), size_t(5));
    auto gap = grid;
    gap.pop_back();
    const ChunkTiling g = check({ 4, 6 }, gap);
    QCOMPARE(g.verdict(), V::Gap);
    QCOMPARE(g.covered(), uint64_t(20));
    // Outside the shape, wrong rank, negative.
    QCOMPARE(check({ 4 }, { { { 2 }, { 3 } } }).verdict(), V::Outside);
    QCOMPARE(check({ 4 }, { { { 0, 0 }, { 4, 1 } } }).verdict(), V::Outside);
    QCOMPARE(check({ 4 }, { { { -1 }, { 2 } } }).verdict(), V::Outside);
    // A 0-d tensor saved twice overlaps; once tiles.
    QCOMPARE(check({}, { { {}, {} } }).verdict(), V::Tiles);
    QCOMPARE(check({}, { { {}, {} }, { {}, {} } }).verdict(), V::Overlap);
    // Staggered rows: row i cut at column i. 2,000 pieces in 1,000 rows would need a 1,000 x 1,001 grid.
    std::vector<Box> staggered;
    for (int64_t i = 0; i < 1000; ++i) {
        staggered.push_back({ { i, 0 }, { 1, i + 1 } });
        if (i + 1 < 1000)
            staggered.push_back({ { i, i + 1 }, { 1, 999 - i } });
    }
    const ChunkTiling st = check({ 1000, 1000 }, staggered);
    QCOMPARE(st.verdict(), V::Irregular);
    QCOMPARE(st.covered(), uint64_t(1000 * 1000));
    // Replicas: exact copies are dropped, first occurrences kept in order.
    std::vector<Box> replicas = { grid[0], grid[1], grid[0], grid[2], grid[1] };
    const auto kept = distributed::distinctBoxes(
        replicas.size(), [&](size_t i) { return distributed::ChunkBox { replicas[i].offsets, replicas[i].sizes }; });
    QCOMPARE(kept, (std::vector<size_t> { 0, 1, 3 }));
}

#include "tst_distributed.moc"
