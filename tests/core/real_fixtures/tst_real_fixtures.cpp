// Real third-party checkpoints (../shared/fixtures/real, 236 files from public repositories) through
// sl::openSource, one data row per file listed in MANIFEST.tsv, checked against sources that are not
// StateLens:
//   - MANIFEST.tsv: size and sha256 (the fixture is intact) and the kind, which decides what must happen:
//     torch.save zip / legacy / tar, safetensors, sharded indexes, DCP .metadata (its folder) and TorchScript
//     archives (through the LibTorch worker; see checkTorchScript) must open; DCP .distcp data files, HF
//     config.json and Git LFS pointer stubs must fail with a LoadError that names the file and says what it is.
//   - SOURCES.md: per-file lines "tensors=N (T:f32×4, ...); first keys: [...]", "structure: {...}",
//     safetensors "header N bytes; K tensors; dtypes {...}" / "tensors: name:DT[shape], ..." and index
//     "K keys -> S shard files {...}".
//   - safetensors headers and index JSON parsed here with QJsonDocument.
//   - torch 1.13 itself through tests/tools/torch_truth.py (one /usr/bin/python3 run for all files;
//     torch.load(weights_only=True), else a restricted unpickler that imports and runs nothing).
//
// Counting tensors. SOURCES.md counts every tensor leaf reachable from the top object, while StateLens
// lists the entries of one selected container. So the suite builds the union over *all* containers
// (Source::containers, each shown with Source::withContainer), names each leaf by its full dotted path
// (container path + entry name, a Group's tensor parts as "<name>.<i>"), and de-duplicates by that path:
// a container nested in another (the model dict inside a nanoGPT training dict) names the same tensors
// by the same paths. Leaves that are numpy arrays are left out (StateLens shows them, SOURCES.md and torch
// do not count them as tensors). For pickled nn.Modules SOURCES.md walks the objects' __dict__s and also
// counts attributes that alias parameters (LSTM._flat_weights), while StateLens names what state_dict()
// would: there the count may only be lower, and torch_truth.py (which flattens modules as state_dict())
// gives the exact set.

#include "common/qt_text.h"
#include "common/test_paths.h"
#include "formats/loader.h"
#include "formats/torchscript_reader.h"
#include "model/dtype.h"
#include "model/source.h"
#include "report/source_report.h"
#include "util/error.h"

#include <QCryptographicHash>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QHash>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMap>
#include <QProcess>
#include <QRegularExpression>
#include <QSet>
#include <QTest>
#include <QtEndian>

using namespace sl;

namespace {

// `abs` opened with `options` lists exactly as `src` (opened with the defaults); else a problem naming `how`.
void listsAlike(const QString& abs, const OpenOptions& options, const Source& src, const QString& how, QStringList& problems)
{
    try {
        if (sourceToJson(openSource(abs.toStdString(), options)) != sourceToJson(src))
            problems << how + " lists differently";
    } catch (const std::exception& e) {
        problems << "openSource with " + how + " threw: " + QString::fromUtf8(e.what());
    }
}

using sl::test::q;

QString joinPath(const QString& prefix, const QString& key)
{
    return prefix.isEmpty() ? key : prefix + "." + key;
}

const QChar kTimes(0x00D7); // "×" in "T:f32×4"
const QChar kEllipsis(0x2026); // "…" where SOURCES.md elides

// SOURCES.md's short dtype names ("f32", "bf16", "c64") to torch's ("float32", ...).
QString normDtype(const QString& s)
{
    static const QHash<QString, QString> abbrev { { "f16", "float16" }, { "bf16", "bfloat16" }, { "f32", "float32" },
        { "f64", "float64" }, { "c32", "complex32" }, { "c64", "complex64" }, { "c128", "complex128" },
        { "i8", "int8" }, { "i16", "int16" }, { "i32", "int32" }, { "i64", "int64" }, { "u8", "uint8" },
        { "u16", "uint16" }, { "u32", "uint32" }, { "u64", "uint64" }, { "b", "bool" } };
    return abbrev.value(s, s);
}

// safetensors dtype strings, kept here rather than taken from StateLens.
QString safetensorsDtype(const QString& st)
{
    static const QHash<QString, QString> names { { "BOOL", "bool" }, { "U8", "uint8" }, { "I8", "int8" },
        { "I16", "int16" }, { "U16", "uint16" }, { "I32", "int32" }, { "U32", "uint32" }, { "I64", "int64" },
        { "U64", "uint64" }, { "F16", "float16" }, { "BF16", "bfloat16" }, { "F32", "float32" }, { "F64", "float64" },
        { "C64", "complex64" }, { "F8_E4M3", "float8_e4m3fn" }, { "F8_E5M2", "float8_e5m2" },
        { "F8_E8M0", "float8_e8m0fnu" }, { "F4", "float4_e2m1fn" } };
    return names.value(st, "?" + st);
}

QString shapeString(const Shape& s)
{
    return q(shapeToString(s));
}
QString shapeString(const QList<qint64>& s)
{
    QStringList parts;
    for (qint64 d : s)
        parts << QString::number(d);
    return "[" + parts.join(", ") + "]";
}
QList<qint64> jsonInts(const QJsonValue& v)
{
    QList<qint64> out;
    for (const QJsonValue& x : v.toArray())
        out << x.toInteger();
    return out;
}
QList<qint64> toList(const sl::Dims& v)
{
    return QList<qint64>(v.begin(), v.end());
}

// ----------------------------------------------------------------------------------------------------
// MANIFEST.tsv and SOURCES.md

struct ManifestRow {
    QString file;
    QString kind;
    qint64 size = -1;
    QString sha256;
};

struct StructureLeaf {
    QString path;
    QString label; // T, QT, Sub
    QString dtype;
    QList<qint64> shape;
};

struct SourcesInfo {
    QString format;
    bool hasTensorLine = false;
    int tensorTotal = 0;
    QMap<QString, int> dtypeCounts; // "T:float32" -> 4
    QStringList firstKeys;
    QString top;
    QString structure;
    // safetensors
    int headerBytes = -1;
    int stTensorCount = -1;
    QMap<QString, int> stDtypes;
    QStringList stListed; // "name:F32[6, 768]"
    // sharded index
    int indexKeys = -1;
    int indexShardFiles = -1;
    QMap<QString, qint64> indexMetadata;
    QMap<QString, int> indexShardCounts;
};

// A Python string literal at s[i] ('...' or "..."); advances i past it.
bool pyString(const QString& s, qsizetype& i, QString& out)
{
    if (i >= s.size() || (s[i] != '\'' && s[i] != '"'))
        return false;
    const QChar quote = s[i++];
    out.clear();
    while (i < s.size()) {
        QChar c = s[i++];
        if (c == quote)
            return true;
        if (c != '\\' || i >= s.size()) {
            out += c;
            continue;
        }
        QChar e = s[i++];
        switch (e.unicode()) {
        case 'n':
            out += '\n';
            break;
        case 't':
            out += '\t';
            break;
        case 'r':
            out += '\r';
            break;
        case 'x':
        case 'u': {
            int len = e == 'x' ? 2 : 4;
            out += QChar(s.mid(i, len).toUShort(nullptr, 16));
            i += len;
            break;
        }
        default:
            out += e;
            break;
        }
    }
    return false; // unterminated (a truncated line)
}

QStringList pyStringList(const QString& body)
{
    QStringList out;
    qsizetype i = 0;
    while (i < body.size()) {
        if (body[i] == '\'' || body[i] == '"') {
            QString s;
            if (!pyString(body, i, s))
                break;
            out << s;
        } else {
            ++i;
        }
    }
    return out;
}

// The `structure: ...` repr: dicts, tuples, lists, T[f32[2, 3]] / QT[qint8[..],scheme] / Sub[bfloat16[..],type=..]
// leaves, and opaque values; "…" and "…(+N keys)" elide, and long lines are cut short. Collects every leaf
// it can read completely.
class StructureParser {
public:
    explicit StructureParser(const QString& s)
        : m_s(s)
    {
    }
    QList<StructureLeaf> parse()
    {
        value(QString());
        return m_leaves;
    }

private:
    bool eof() const { return m_i >= m_s.size(); }
    void ws()
    {
        while (!eof() && m_s[m_i].isSpace())
            ++m_i;
    }
    bool startsWith(const char* t) const { return m_s.mid(m_i, qsizetype(strlen(t))) == QLatin1String(t); }

    bool value(const QString& path)
    {
        ws();
        if (eof())
            return false;
        QChar c = m_s[m_i];
        if (c == '{')
            return dict(path);
        if (c == '(' || c == '[')
            return seq(path, c == '(' ? ')' : ']');
        if (startsWith("T[") || startsWith("QT[") || startsWith("Sub["))
            return leaf(path);
        if (c == kEllipsis) {
            ++m_i;
            return eof() || m_s[m_i] != '(' || skipBalanced();
        }
        return skipOpaque();
    }

    bool dict(const QString& path)
    {
        ++m_i;
        for (;;) {
            ws();
            if (eof())
                return false;
            if (m_s[m_i] == '}') {
                ++m_i;
                return true;
            }
            if (m_s[m_i] == kEllipsis) {
                if (!value(path))
                    return false;
            } else {
                QString key;
                if (m_s[m_i] == '\'' || m_s[m_i] == '"') {
                    if (!pyString(m_s, m_i, key))
                        return false;
                } else {
                    while (!eof() && m_s[m_i] != ':')
                        key += m_s[m_i++];
                    key = key.trimmed();
                }
                ws();
                if (eof() || m_s[m_i] != ':')
                    return false;
                ++m_i;
                if (!value(joinPath(path, key)))
                    return false;
            }
            ws();
            if (eof())
                return false;
            if (m_s[m_i] == ',')
                ++m_i;
            else if (m_s[m_i] != '}')
                return false;
        }
    }

    bool seq(const QString& path, QChar close)
    {
        ++m_i;
        for (int idx = 0;; ++idx) {
            ws();
            if (eof())
                return false;
            if (m_s[m_i] == close) {
                ++m_i;
                return true;
            }
            if (!value(joinPath(path, QString::number(idx))))
                return false;
            ws();
            if (eof())
                return false;
            if (m_s[m_i] == ',')
                ++m_i;
            else if (m_s[m_i] != close)
                return false;
        }
    }

    bool leaf(const QString& path)
    {
        StructureLeaf l;
        l.path = path;
        while (!eof() && m_s[m_i] != '[')
            l.label += m_s[m_i++];
        ++m_i;
        QString dtype;
        while (!eof() && m_s[m_i] != '[')
            dtype += m_s[m_i++];
        l.dtype = normDtype(dtype);
        ++m_i;
        QString dims;
        while (!eof() && m_s[m_i] != ']')
            dims += m_s[m_i++];
        if (eof())
            return false;
        ++m_i;
        for (const QString& d : dims.split(',', Qt::SkipEmptyParts))
            l.shape << d.trimmed().toLongLong();
        // The rest of the leaf (",torch.per_tensor_affine", ",type=...") up to its closing bracket.
        int depth = 1;
        while (!eof() && depth > 0) {
            QChar c = m_s[m_i++];
            depth += c == '[' ? 1 : c == ']' ? -1 : 0;
        }
        if (depth != 0)
            return false;
        m_leaves << l;
        return true;
    }

    bool skipBalanced()
    {
        int depth = 0;
        while (!eof()) {
            QChar c = m_s[m_i];
            if (c == '\'' || c == '"') {
                QString ignored;
                if (!pyString(m_s, m_i, ignored))
                    return false;
                continue;
            }
            ++m_i;
            if (c == '(' || c == '[' || c == '{')
                ++depth;
            else if ((c == ')' || c == ']' || c == '}') && --depth == 0)
                return true;
        }
        return false;
    }

    // A scalar, a string, a "<torch.qint8>" or an object repr "cls(state keys=[...])": up to the next ',' or
    // closing bracket outside any nesting.
    bool skipOpaque()
    {
        int depth = 0;
        while (!eof()) {
            QChar c = m_s[m_i];
            if (c == '\'' || c == '"') {
                QString ignored;
                if (!pyString(m_s, m_i, ignored))
                    return false;
                continue;
            }
            if (depth == 0 && (c == ',' || c == ')' || c == ']' || c == '}'))
                return true;
            if (c == '(' || c == '[' || c == '{')
                ++depth;
            else if (c == ')' || c == ']' || c == '}')
                --depth;
            ++m_i;
        }
        return false;
    }

    const QString& m_s;
    qsizetype m_i = 0;
    QList<StructureLeaf> m_leaves;
};

QHash<QString, SourcesInfo> parseSources(const QString& text)
{
    static const QRegularExpression tensorsRe(
        QStringLiteral(R"(^(.+?): tensors=(\d+) \((.*)\); first keys: \[(.*)\]$)"));
    static const QRegularExpression structureRe(QStringLiteral(R"(^(.+?): top=([^;]+); structure: (.*)$)"));
    static const QRegularExpression headerRe(
        QStringLiteral(R"(^header (\d+) bytes; (\d+) tensors; dtypes \{(.*)\}; __metadata__=(.*)$)"));
    static const QRegularExpression indexRe(
        QStringLiteral(R"(^metadata=\{(.*)\}; (\d+) keys -> (\d+) shard files \{(.*)\}$)"));
    static const QRegularExpression pairRe(QStringLiteral(R"('([^']+)': (\d+))"));
    auto isMainPickle = [](const QString& record) {
        return record == QLatin1String("main pickle") || record.endsWith(QLatin1String("data.pkl"));
    };

    QHash<QString, SourcesInfo> out;
    SourcesInfo* cur = nullptr;
    for (const QString& line : text.split('\n')) {
        if (line.startsWith(QLatin1String("#### `")) && line.endsWith('`')) {
            cur = &out[line.mid(6, line.size() - 7)];
            continue;
        }
        if (line.startsWith(QLatin1String("#"))) {
            cur = nullptr;
            continue;
        }
        // "-   " lines describe zips embedded in a DCP shard, not the file's own object.
        if (!cur || !line.startsWith(QLatin1String("- ")) || line.startsWith(QLatin1String("-  ")))
            continue;
        const QString body = line.mid(2);
        if (body.startsWith(QLatin1String("Format: "))) {
            cur->format = body.mid(8);
        } else if (auto m = tensorsRe.match(body); m.hasMatch() && isMainPickle(m.captured(1))) {
            cur->hasTensorLine = true;
            cur->tensorTotal = m.captured(2).toInt();
            for (const QString& part : m.captured(3).split(QStringLiteral(", "), Qt::SkipEmptyParts)) {
                const qsizetype colon = part.indexOf(':');
                const qsizetype times = part.lastIndexOf(kTimes);
                cur->dtypeCounts[part.left(colon) + ":" + normDtype(part.mid(colon + 1, times - colon - 1))]
                    += part.mid(times + 1).toInt();
            }
            cur->firstKeys = pyStringList(m.captured(4));
        } else if (auto m = structureRe.match(body); m.hasMatch() && isMainPickle(m.captured(1))) {
            cur->top = m.captured(2);
            cur->structure = m.captured(3);
        } else if (auto m = headerRe.match(body); m.hasMatch()) {
            cur->headerBytes = m.captured(1).toInt();
            cur->stTensorCount = m.captured(2).toInt();
            for (auto it = pairRe.globalMatch(m.captured(3)); it.hasNext();) {
                auto p = it.next();
                cur->stDtypes[p.captured(1)] = p.captured(2).toInt();
            }
        } else if (body.startsWith(QLatin1String("tensors: "))) {
            // "a:F32[2, 3], b:I64[] …": split at ", " outside brackets.
            QString list = body.mid(9);
            if (list.endsWith(kEllipsis))
                list.chop(1);
            QString item;
            int depth = 0;
            for (qsizetype i = 0; i < list.size(); ++i) {
                QChar c = list[i];
                depth += c == '[' ? 1 : c == ']' ? -1 : 0;
                if (depth == 0 && c == ',' && i + 1 < list.size() && list[i + 1] == ' ') {
                    cur->stListed << item.trimmed();
                    item.clear();
                    ++i;
                    continue;
                }
                item += c;
            }
            if (!item.trimmed().isEmpty())
                cur->stListed << item.trimmed();
        } else if (auto m = indexRe.match(body); m.hasMatch()) {
            for (auto it = pairRe.globalMatch(m.captured(1)); it.hasNext();) {
                auto p = it.next();
                cur->indexMetadata[p.captured(1)] = p.captured(2).toLongLong();
            }
            cur->indexKeys = m.captured(2).toInt();
            cur->indexShardFiles = m.captured(3).toInt();
            for (auto it = pairRe.globalMatch(m.captured(4)); it.hasNext();) {
                auto p = it.next();
                cur->indexShardCounts[p.captured(1)] = p.captured(2).toInt();
            }
        }
    }
    return out;
}

// A SOURCES.md key ("state_dict.module.conv1.weight", "fc1._packed_params._packed_params[0]",
// "<state>._modules.lstm<state>._parameters.weight_ih_l0") as the dotted path StateLens's names give.
// Returns false for keys of pickled modules that state_dict() does not list (LSTM._flat_weights.0).
bool sourcesKeyToPath(QString key, QString& path)
{
    static const QRegularExpression index(QStringLiteral(R"(\[(\d+)\])"));
    key.replace(index, QStringLiteral(".\\1"));
    if (!key.contains(QLatin1String("<state>"))) {
        path = key;
        return true;
    }
    key.replace(QLatin1String("<state>."), QLatin1String("."));
    QStringList kept;
    for (const QString& c : key.split('.', Qt::SkipEmptyParts)) {
        if (c == QLatin1String("_modules") || c == QLatin1String("_parameters") || c == QLatin1String("_buffers"))
            continue;
        if (c.startsWith('_'))
            return false;
        kept << c;
    }
    path = kept.join('.');
    return true;
}

// ----------------------------------------------------------------------------------------------------
// StateLens's tensors, over every container

struct Leaf {
    QString container;
    Entry entry;
};

bool isNumpy(const Entry& e)
{
    return e.typeName == "numpy.ndarray" || e.location.kind == TensorLocation::Kind::Inline;
}

// "T:float32", "QT:qint8", "Sub:bfloat16": the labels SOURCES.md counts by.
QString labelOf(const Entry& e)
{
    QString dt = q(std::string(dtypeName(e.dtype)));
    if (dtypeIsQuantized(e.dtype))
        return "QT:" + dt;
    if (!e.typeName.empty())
        return "Sub:" + dt;
    return "T:" + dt;
}

// Quantized groups (core/quant): a key-pattern group (bitsandbytes, GPTQ, FP8, torchao's flattened
// safetensors) holds other state-dict keys as parts, each naming its key in the "key" attribute; a torchao
// tensor subclass is one tensor of the file shown as a Group with its inner tensors as parts.
const std::string* partKey(const Entry& part) { return part.attribute("key"); }

bool isSubclassGroup(const Entry& e)
{
    return e.kind == EntryKind::Group && !e.typeName.empty() && e.typeName != "tuple"
        && !(e.parts.empty() ? nullptr : partKey(e.parts.front()));
}

// A group part's dotted path: its own key, or "<group>.<role>" for the parts of one pickled value.
QString partPath(const QString& container, const QString& group, const Entry& part)
{
    const std::string* key = partKey(part);
    return key ? joinPath(container, q(*key)) : joinPath(group, q(part.name));
}

// The tensors as the file stores them, by key: entries, and the parts of key-pattern groups.
std::vector<std::pair<QString, const Entry*>> storedTensors(const std::vector<Entry>& entries)
{
    std::vector<std::pair<QString, const Entry*>> out;
    for (const Entry& e : entries) {
        if (e.kind == EntryKind::Group && !e.parts.empty() && partKey(e.parts.front()))
            for (const Entry& part : e.parts)
                out.emplace_back(q(*partKey(part)), &part);
        else
            out.emplace_back(q(e.name), &e);
    }
    return out;
}

void addLeaves(const QString& container, const std::vector<Entry>& entries, QMap<QString, Leaf>& out)
{
    auto add = [&](const QString& path, const Entry& e) {
        if ((e.kind == EntryKind::Tensor || isSubclassGroup(e)) && !isNumpy(e) && !out.contains(path))
            out.insert(path, Leaf { container, e });
    };
    for (const Entry& e : entries) {
        const QString full = joinPath(container, q(e.name));
        if (e.kind == EntryKind::Tensor || isSubclassGroup(e))
            add(full, e);
        else if (e.kind == EntryKind::Group)
            for (const Entry& part : e.parts)
                add(partPath(container, full, part), part);
    }
}

QMap<QString, Leaf> leavesOfAllContainers(const Source& src, QStringList& problems)
{
    QMap<QString, Leaf> out;
    addLeaves(q(src.container), src.entries, out);
    for (const ContainerInfo& c : src.containers) {
        if (c.path == src.container)
            continue;
        try {
            Source other = src.withContainer(c.path);
            if (other.container != c.path)
                problems << QString("withContainer('%1') shows container '%2'").arg(q(c.path), q(other.container));
            addLeaves(q(c.path), other.entries, out);
        } catch (const std::exception& e) {
            problems << QString("withContainer('%1') threw: %2").arg(q(c.path), QString::fromUtf8(e.what()));
        }
    }
    return out;
}

QList<qint64> contiguousStrides(const Shape& shape)
{
    QList<qint64> out(qsizetype(shape.size()), 1);
    for (qsizetype i = qsizetype(shape.size()) - 2; i >= 0; --i)
        out[i] = out[i + 1] * std::max<int64_t>(shape[size_t(i + 1)], 1);
    return out;
}

// safetensors header parsed here: {name: {dtype, shape, data_offsets}} plus the header length.
struct StHeader {
    bool ok = false;
    QString error;
    quint64 length = 0;
    QJsonObject object;
};

StHeader readStHeader(const QByteArray& bytes)
{
    StHeader h;
    if (bytes.size() < 8) {
        h.error = "shorter than 8 bytes";
        return h;
    }
    h.length = qFromLittleEndian<quint64>(bytes.constData());
    if (h.length > quint64(bytes.size() - 8)) {
        h.error = "header length past the end";
        return h;
    }
    QJsonParseError err;
    QJsonDocument doc = QJsonDocument::fromJson(bytes.mid(8, qsizetype(h.length)), &err);
    if (err.error != QJsonParseError::NoError || !doc.isObject()) {
        h.error = "header JSON: " + err.errorString();
        return h;
    }
    h.object = doc.object();
    h.ok = true;
    return h;
}

enum class Kind { TorchZip, TorchLegacy, Safetensors, Index, TorchScript, Dcp, HfConfig, LfsPointer, Unknown };

Kind kindOf(const QString& manifestKind)
{
    if (manifestKind.contains(QLatin1String("TorchScript")))
        return Kind::TorchScript;
    if (manifestKind.contains(QLatin1String("distributed.checkpoint")) || manifestKind.startsWith(QLatin1String("DCP")))
        return Kind::Dcp;
    if (manifestKind.startsWith(QLatin1String("json (HF config)")))
        return Kind::HfConfig;
    if (manifestKind.startsWith(QLatin1String("Git LFS pointer")))
        return Kind::LfsPointer;
    if (manifestKind == QLatin1String("torch.save-zip"))
        return Kind::TorchZip;
    if (manifestKind.startsWith(QLatin1String("legacy torch.save")) || manifestKind.startsWith(QLatin1String("tar ")))
        return Kind::TorchLegacy;
    if (manifestKind == QLatin1String("safetensors"))
        return Kind::Safetensors;
    if (manifestKind == QLatin1String("sharded-checkpoint index JSON"))
        return Kind::Index;
    return Kind::Unknown;
}

} // namespace

class TestRealFixtures : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    void realFile_data();
    void realFile();
    void cleanupTestCase();

private:
    void checkRejected(const QString& abs, Kind kind, QStringList& problems);
    void checkTorchScript(const QString& abs, const QString& manifestKind, QStringList& problems);
    void checkDcp(const QString& file, const QString& abs, QStringList& problems);
    void checkTorch(const QString& file, const QString& abs, Kind kind, QStringList& problems);
    void compareWithSources(const SourcesInfo& si, const QMap<QString, Leaf>& leaves, QStringList& problems);
    void compareWithTorch(
        const QString& file, const Source& src, const QMap<QString, Leaf>& leaves, QStringList& problems);
    void compareTensor(const QString& path, const Entry& e, const QJsonObject& t, QStringList& problems);
    void checkSafetensors(const QString& file, const QString& abs, const QByteArray& bytes, QStringList& problems);
    void checkIndex(const QString& file, const QString& abs, const QByteArray& bytes, QStringList& problems);

    void tally(const QString& what, int n = 1) { m_tally[what] += n; }

    QString m_dir;
    QList<ManifestRow> m_manifest;
    QHash<QString, SourcesInfo> m_sources;
    QString m_truthSkipped; // why there is no torch truth, when there is none
    QJsonObject m_truth; // file -> torch_truth.py result
    QMap<QString, int> m_tally;
};

void TestRealFixtures::initTestCase()
{
    m_dir = test::realFixturesDir();
    if (m_dir.isEmpty())
        QSKIP("../shared/fixtures/real is not there (set STATELENS_SHARED_DIR to point elsewhere)");
    // TorchScript archives are loaded by the statelens executable's worker (as app/main.cpp sets it up).
    setTorchScriptWorker(torchScriptWorkerFor(test::statelensBinary().toStdString()));

    QFile manifest(m_dir + "/MANIFEST.tsv");
    QVERIFY2(manifest.open(QIODevice::ReadOnly), "MANIFEST.tsv is missing");
    const QStringList lines = QString::fromUtf8(manifest.readAll()).split('\n', Qt::SkipEmptyParts);
    QVERIFY(lines.size() > 1);
    QVERIFY(lines.front().startsWith(QLatin1String("file\t")));
    for (qsizetype i = 1; i < lines.size(); ++i) {
        const QStringList f = lines[i].split('\t');
        QVERIFY2(f.size() == 8, qPrintable("MANIFEST.tsv line " + QString::number(i + 1)));
        m_manifest.append(ManifestRow { f[0], f[7], f[5].toLongLong(), f[6] });
    }

    QFile sources(m_dir + "/SOURCES.md");
    QVERIFY2(sources.open(QIODevice::ReadOnly), "SOURCES.md is missing");
    m_sources = parseSources(QString::fromUtf8(sources.readAll()));

    // Torch truth for every torch.save file in one Python run.
    if (!test::haveTorchPython()) {
        m_truthSkipped = test::torchPython() + " cannot import torch";
        qWarning("no torch truth: %s", qPrintable(m_truthSkipped));
        return;
    }
    QStringList torchFiles;
    for (const ManifestRow& r : m_manifest) {
        Kind k = kindOf(r.kind);
        if (k == Kind::TorchZip || k == Kind::TorchLegacy)
            torchFiles << r.file;
    }
    QElapsedTimer timer;
    timer.start();
    QProcess p;
    p.setWorkingDirectory(m_dir);
    p.start(test::torchPython(), { test::sourceDir() + "/tests/tools/torch_truth.py", "-" });
    QVERIFY2(p.waitForStarted(), "cannot start torch_truth.py");
    p.write(torchFiles.join('\n').toUtf8() + "\n");
    p.closeWriteChannel();
    if (!p.waitForFinished(90000)) {
        p.kill();
        p.waitForFinished();
        QFAIL("torch_truth.py took more than 90 s");
    }
    QVERIFY2(p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0,
        qPrintable("torch_truth.py failed: " + QString::fromUtf8(p.readAllStandardError())));
    QJsonParseError err;
    const QJsonDocument doc = QJsonDocument::fromJson(p.readAllStandardOutput(), &err);
    QVERIFY2(err.error == QJsonParseError::NoError, qPrintable("torch_truth.py output: " + err.errorString()));
    m_truth = doc.object().value("files").toObject();
    QCOMPARE(m_truth.size(), torchFiles.size());
    qInfo("torch truth (torch %s) for %d files in %lld ms", qPrintable(doc.object().value("torch").toString()),
        int(m_truth.size()), timer.elapsed());
}

void TestRealFixtures::realFile_data()
{
    QTest::addColumn<int>("row");
    for (qsizetype i = 0; i < m_manifest.size(); ++i)
        QTest::newRow(qPrintable(m_manifest[i].file)) << int(i);
}

void TestRealFixtures::realFile()
{
    QFETCH(int, row);
    const ManifestRow& m = m_manifest[row];
    const QString abs = m_dir + "/" + m.file;
    const Kind kind = kindOf(m.kind);
    QVERIFY2(kind != Kind::Unknown, qPrintable("MANIFEST kind this suite does not know: " + m.kind));

    // The fixture is the one MANIFEST.tsv describes.
    QFile f(abs);
    QVERIFY2(f.open(QIODevice::ReadOnly), qPrintable("cannot read " + abs));
    const QByteArray bytes = f.readAll();
    QCOMPARE(qint64(bytes.size()), m.size);
    QCOMPARE(QString::fromLatin1(QCryptographicHash::hash(bytes, QCryptographicHash::Sha256).toHex()), m.sha256);
    QVERIFY2(m_sources.contains(m.file), "SOURCES.md has no section for this file");

    QStringList problems;
    switch (kind) {
    case Kind::TorchZip:
    case Kind::TorchLegacy:
        checkTorch(m.file, abs, kind, problems);
        break;
    case Kind::Safetensors:
        checkSafetensors(m.file, abs, bytes, problems);
        break;
    case Kind::Index:
        checkIndex(m.file, abs, bytes, problems);
        break;
    case Kind::Dcp:
        if (m.file.endsWith(QLatin1String("/.metadata"))) {
            checkDcp(m.file, abs, problems);
            break;
        }
        checkRejected(abs, kind, problems); // a .distcp alone: only .metadata locates anything in it
        break;
    case Kind::TorchScript:
        checkTorchScript(abs, m.kind, problems);
        break;
    case Kind::HfConfig:
    case Kind::LfsPointer:
        checkRejected(abs, kind, problems);
        break;
    case Kind::Unknown:
        break;
    }
    tally(problems.isEmpty() ? "files passing every check" : "files with problems");
    QVERIFY2(problems.isEmpty(), qPrintable("\n  " + problems.join("\n  ")));
}

void TestRealFixtures::cleanupTestCase()
{
    if (m_dir.isEmpty())
        return;
    if (!m_truthSkipped.isEmpty())
        qInfo("torch truth skipped: %s", qPrintable(m_truthSkipped));
    for (auto it = m_tally.cbegin(); it != m_tally.cend(); ++it)
        qInfo("%5d  %s", it.value(), qPrintable(it.key()));
}

// ----------------------------------------------------------------------------------------------------

void TestRealFixtures::checkRejected(const QString& abs, Kind kind, QStringList& problems)
{
    const char* says = kind == Kind::TorchScript ? "TorchScript"
        : kind == Kind::Dcp                      ? "torch.distributed.checkpoint"
        : kind == Kind::HfConfig                 ? "model config"
                                                 : "Git LFS pointer";
    try {
        Source s = openSource(abs.toStdString());
        problems << QString("opened as %1 with %2 entries; expected a LoadError saying '%3'")
                        .arg(q(formatId(s.format)))
                        .arg(s.entries.size())
                        .arg(says);
    } catch (const LoadError& e) {
        const QString msg = QString::fromUtf8(e.what());
        if (q(e.file()) != abs)
            problems << "LoadError::file() is '" + q(e.file()) + "'";
        if (!msg.contains(abs))
            problems << "the message does not name the file: " + msg;
        if (!msg.contains(QLatin1String(says)))
            problems << QString("the message does not say '%1': %2").arg(says, msg);
        tally(QString("unsupported files rejected with a LoadError saying '%1'").arg(says));
    } catch (const std::exception& e) {
        problems << "threw something other than LoadError: " + QString::fromUtf8(e.what());
    }
}

// TorchScript archives open through the LibTorch worker (tests/core/torchscript compares them with
// torch.jit.load). The pre-1.4 model.json layout, which torch 1.13 no longer loads either, and every archive
// when the plugin is not built, fail with a LoadError that says TorchScript.
void TestRealFixtures::checkTorchScript(const QString& abs, const QString& manifestKind, QStringList& problems)
{
    const bool plugin = QFileInfo::exists(QFileInfo(test::statelensBinary()).absolutePath() + "/libstatelens-torch.so");
    if (!plugin || manifestKind.contains(QLatin1String("TorchScript-v1"))) {
        checkRejected(abs, Kind::TorchScript, problems);
        return;
    }
    try {
        Source s = openSource(abs.toStdString());
        if (formatId(s.format) != "torchscript")
            problems << "format is " + q(formatId(s.format)) + ", expected torchscript";
        tally("TorchScript archives opened (LibTorch worker)");
    } catch (const std::exception& e) {
        problems << "openSource threw: " + QString::fromUtf8(e.what());
    }
}

// A DCP checkpoint opened through its .metadata: every state_dict_metadata key of SOURCES.md ("name:
// TensorStorageMetadata size=[..] dtype=torch.X chunks=N" or "name: ...BytesStorageMetadata"), found under its
// container (container path + "." + entry name is the flat key), and storage_data's items per file.
void TestRealFixtures::checkDcp(const QString& file, const QString& abs, QStringList& problems)
{
    Source src;
    try {
        src = openSource(abs.toStdString());
    } catch (const std::exception& e) {
        problems << "openSource threw: " + QString::fromUtf8(e.what());
        return;
    }
    if (formatId(src.format) != "dcp")
        problems << "format is " + q(formatId(src.format)) + ", expected dcp";
    QFile sources(m_dir + "/SOURCES.md");
    if (!sources.open(QIODevice::ReadOnly)) {
        problems << "SOURCES.md is missing";
        return;
    }
    const QString text = QString::fromUtf8(sources.readAll());
    const QString section = text.mid(text.indexOf("#### `" + file + "`")).section(QStringLiteral("\n#### "), 0, 0);
    static const QRegularExpression sdmRe(QStringLiteral(R"(- state_dict_metadata \((\d+) entries\): (.*))"));
    static const QRegularExpression tensorRe(QStringLiteral(R"(^(.+): TensorStorageMetadata size=\[([0-9, ]*)\] dtype=torch\.(\w+) chunks=(\d+)$)"));
    static const QRegularExpression storageRe(QStringLiteral(R"(- storage_data: (\d+) items in files \{(.*)\})"));
    static const QRegularExpression pairRe(QStringLiteral(R"('([^']+)': (\d+))"));
    const auto sdm = sdmRe.match(section);
    const auto storage = storageRe.match(section);
    if (!sdm.hasMatch() || !storage.hasMatch()) {
        problems << "SOURCES.md has no state_dict_metadata or storage_data line for " + file;
        return;
    }
    QHash<QString, const Entry*> byKey;
    std::vector<Source> views;
    for (const ContainerInfo& c : src.containers)
        views.push_back(src.withContainer(c.path));
    QMap<QString, int> perFile;
    for (const Source& v : views)
        for (const Entry& e : v.entries) {
            byKey.insert(joinPath(q(v.container), q(e.name)), &e);
            if (e.sharding)
                for (const ShardChunk& c : e.sharding->chunks)
                    if (c.file >= 0)
                        ++perFile[QFileInfo(q(src.files[size_t(c.file)])).fileName()];
            if (e.kind == EntryKind::Object && e.location.file >= 0)
                ++perFile[QFileInfo(q(src.files[size_t(e.location.file)])).fileName()];
        }
    const QStringList keys = sdm.captured(2).split(QStringLiteral("; "));
    if (keys.size() != sdm.captured(1).toInt() || byKey.size() != keys.size())
        problems << QString("SOURCES.md lists %1 keys, StateLens %2").arg(keys.size()).arg(byKey.size());
    for (const QString& k : keys) {
        const auto t = tensorRe.match(k);
        const QString name = t.hasMatch() ? t.captured(1) : k.section(QStringLiteral(": "), 0, 0);
        const Entry* e = byKey.value(name);
        if (!e) {
            problems << "no entry for " + name;
        } else if (!t.hasMatch()) {
            if (e->kind != EntryKind::Object)
                problems << name + " is a bytes item in SOURCES.md but not an object entry";
        } else {
            Shape shape;
            for (const QString& d : t.captured(2).split(QStringLiteral(", "), Qt::SkipEmptyParts))
                shape.push_back(d.toLongLong());
            if (e->shape != shape || q(std::string(dtypeName(e->dtype))) != t.captured(3)
                || !e->sharding || int(e->sharding->chunks.size()) != t.captured(4).toInt())
                problems << name + " differs from SOURCES.md: " + k;
        }
    }
    QMap<QString, int> wantFiles;
    for (auto it = pairRe.globalMatch(storage.captured(2)); it.hasNext();) {
        const auto m = it.next();
        wantFiles[m.captured(1)] = m.captured(2).toInt();
    }
    if (perFile != wantFiles)
        problems << "items per file differ from SOURCES.md's storage_data line";
    tally("DCP checkpoints opened and compared with SOURCES.md");
}

void TestRealFixtures::checkTorch(const QString& file, const QString& abs, Kind kind, QStringList& problems)
{
    Source src;
    try {
        src = openSource(abs.toStdString());
    } catch (const std::exception& e) {
        problems << "openSource threw: " + QString::fromUtf8(e.what());
        return;
    }
    tally("torch.save files opened (zip, legacy, tar)");
    const char* format = kind == Kind::TorchZip ? "torch-zip" : "torch-legacy";
    if (formatId(src.format) != format)
        problems << QString("format is %1, expected %2").arg(q(formatId(src.format)), format);
    bool picked = src.containers.empty() && src.container.empty();
    for (const ContainerInfo& c : src.containers)
        picked |= c.path == src.container;
    if (!picked)
        problems << "the selected container '" + q(src.container) + "' is not among Source::containers";

    const QMap<QString, Leaf> leaves = leavesOfAllContainers(src, problems);
    compareWithSources(m_sources.value(file), leaves, problems);
    compareWithTorch(file, src, leaves, problems);
}

void TestRealFixtures::compareWithSources(
    const SourcesInfo& si, const QMap<QString, Leaf>& leaves, QStringList& problems)
{
    // Pickled modules: SOURCES.md walks __dict__s ("<state>." paths) and counts aliases too.
    bool moduleWalk = false;
    for (const QString& k : si.firstKeys)
        moduleWalk |= k.contains(QLatin1String("<state>"));

    if (!si.hasTensorLine && si.structure.isEmpty()) {
        // SOURCES.md does not describe the pickle (the hand-built tar): torch truth covers it.
        tally("torch.save files whose contents SOURCES.md does not describe");
        return;
    }
    QMap<QString, int> ours;
    for (const Leaf& l : leaves)
        ++ours[labelOf(l.entry)];
    const QMap<QString, int> theirs = si.hasTensorLine ? si.dtypeCounts : QMap<QString, int>();
    const int theirTotal = si.hasTensorLine ? si.tensorTotal : 0;

    if (moduleWalk) {
        bool ok = leaves.size() <= theirTotal && !leaves.isEmpty();
        for (auto it = ours.cbegin(); it != ours.cend(); ++it)
            ok &= it.value() <= theirs.value(it.key());
        if (!ok)
            problems << QString("SOURCES.md counts %1 tensor references %2 in the module tree; StateLens lists %3 %4")
                            .arg(theirTotal)
                            .arg(QStringList(theirs.keys()).join(','))
                            .arg(leaves.size())
                            .arg(QStringList(ours.keys()).join(','));
        else
            tally("module pickles: state_dict count within SOURCES.md's reference count");
    } else {
        if (leaves.size() != theirTotal)
            problems << QString("SOURCES.md counts %1 tensors in the file; StateLens lists %2 over all containers")
                            .arg(theirTotal)
                            .arg(leaves.size());
        else
            tally("torch.save files: tensor count over all containers = SOURCES.md");
        if (ours != theirs) {
            QStringList a, b;
            for (auto it = theirs.cbegin(); it != theirs.cend(); ++it)
                a << it.key() + "x" + QString::number(it.value());
            for (auto it = ours.cbegin(); it != ours.cend(); ++it)
                b << it.key() + "x" + QString::number(it.value());
            problems << "per-dtype counts: SOURCES.md " + a.join(", ") + "; StateLens " + b.join(", ");
        } else {
            tally("torch.save files: per-dtype counts = SOURCES.md");
        }
    }

    int keysChecked = 0;
    for (const QString& key : si.firstKeys) {
        QString path;
        if (!sourcesKeyToPath(key, path))
            continue; // an attribute that state_dict() does not list
        ++keysChecked;
        if (!leaves.contains(path))
            problems << QString("SOURCES.md key '%1' (path '%2') is not a container path + entry name in StateLens")
                            .arg(key, path);
    }
    tally("torch.save files: SOURCES.md first keys checked (keys)", keysChecked);

    int leavesChecked = 0;
    for (const StructureLeaf& l : StructureParser(si.structure).parse()) {
        ++leavesChecked;
        auto it = leaves.constFind(l.path);
        if (it == leaves.cend()) {
            problems << "SOURCES.md structure has tensor '" + l.path + "'; StateLens lists no such path";
            continue;
        }
        const Entry& e = it->entry;
        const QString want = l.label + ":" + l.dtype + shapeString(l.shape);
        const QString got = labelOf(e) + shapeString(e.shape);
        if (want != got)
            problems << QString("'%1': SOURCES.md structure says %2, StateLens %3").arg(l.path, want, got);
    }
    tally("torch.save files: SOURCES.md structure leaves checked (tensors)", leavesChecked);
}

void TestRealFixtures::compareWithTorch(
    const QString& file, const Source& src, const QMap<QString, Leaf>& leaves, QStringList& problems)
{
    if (!m_truthSkipped.isEmpty())
        return;
    const QJsonObject r = m_truth.value(file).toObject();
    const QString status = r.value("status").toString();
    if (status == QLatin1String("skipped")) {
        tally("torch truth: skipped (" + r.value("reason").toString() + ")");
        return;
    }
    if (status != QLatin1String("ok")) {
        problems << "torch_truth.py: " + r.value("reason").toString();
        return;
    }
    tally("torch truth: files compared, via " + r.value("method").toString());

    QMap<QString, QJsonObject> truth;
    for (const QJsonValue& v : r.value("tensors").toArray()) {
        const QJsonObject t = v.toObject();
        truth.insert(t.value("path").toString(), t); // aliases (the same tensor twice) keep one path each
    }
    // The same set of tensors, by dotted path, over all containers...
    for (auto it = truth.cbegin(); it != truth.cend(); ++it)
        if (!leaves.contains(it.key()))
            problems << "torch has a tensor at '" + it.key() + "' that no StateLens container lists";
    for (auto it = leaves.cbegin(); it != leaves.cend(); ++it)
        if (!truth.contains(it.key()))
            problems << "StateLens lists '" + it.key() + "' (container '" + it->container + "'), torch has none there";
    // ...and every tensor of the picked container (and of the others) as torch describes it.
    int picked = 0;
    for (const Entry& e : src.entries) {
        const QString full = joinPath(q(src.container), q(e.name));
        std::vector<std::pair<QString, const Entry*>> tensors;
        if ((e.kind == EntryKind::Tensor || isSubclassGroup(e)) && !isNumpy(e))
            tensors.emplace_back(full, &e);
        else if (e.kind == EntryKind::Group)
            for (const Entry& part : e.parts)
                if (part.kind == EntryKind::Tensor && !isNumpy(part))
                    tensors.emplace_back(partPath(q(src.container), full, part), &part);
        for (const auto& [path, entry] : tensors) {
            ++picked;
            if (truth.contains(path))
                compareTensor(path, *entry, truth.value(path), problems);
            else
                problems << "picked-container tensor '" + path + "' is not among torch's tensors";
        }
    }
    int others = 0;
    for (auto it = leaves.cbegin(); it != leaves.cend(); ++it)
        if (it->container != q(src.container) && truth.contains(it.key())) {
            ++others;
            compareTensor(it.key(), it->entry, truth.value(it.key()), problems);
        }
    tally("torch truth: picked-container tensors compared (shape/dtype/stride/offset)", picked);
    tally("torch truth: other-container tensors compared", others);
}

void TestRealFixtures::compareTensor(const QString& path, const Entry& e, const QJsonObject& t, QStringList& problems)
{
    auto bad = [&](const QString& what, const QString& theirs, const QString& ours) {
        problems << QString("'%1' %2: torch %3, StateLens %4").arg(path, what, theirs, ours);
    };
    const QString kind = t.value("kind").toString();
    const QString dtype = q(std::string(dtypeName(e.dtype)));
    if (t.value("dtype").toString() != dtype)
        bad("dtype", t.value("dtype").toString(), dtype);
    const QList<qint64> shape = toList(e.shape);
    if (jsonInts(t.value("shape")) != shape)
        bad("shape", shapeString(jsonInts(t.value("shape"))), shapeString(shape));
    // Empty strides mean "contiguous" for a tensor with bytes; a wrapper subclass without them says nothing.
    const bool hasBytes
        = e.location.kind == TensorLocation::Kind::Mapped || e.location.kind == TensorLocation::Kind::Compressed;
    if (!e.location.strides.empty() || hasBytes) {
        const QList<qint64> strides
            = e.location.strides.empty() ? contiguousStrides(e.shape) : toList(e.location.strides);
        if (jsonInts(t.value("stride")) != strides)
            bad("stride", shapeString(jsonInts(t.value("stride"))), shapeString(strides));
    }
    if (t.value("storage_offset").toInteger() != e.location.storageOffset)
        bad("storage offset", QString::number(t.value("storage_offset").toInteger()),
            QString::number(e.location.storageOffset));
    if ((kind == QLatin1String("qtensor")) != dtypeIsQuantized(e.dtype))
        bad("quantized", kind, dtype);
    if ((kind == QLatin1String("parameter")) != e.isParameter)
        bad("nn.Parameter", kind, e.isParameter ? "parameter" : "plain tensor");
    if (kind == QLatin1String("subclass") && t.value("subclass").toString() != q(e.typeName))
        bad("subclass", t.value("subclass").toString(), q(e.typeName));
}

void TestRealFixtures::checkSafetensors(
    const QString& file, const QString& abs, const QByteArray& bytes, QStringList& problems)
{
    const StHeader h = readStHeader(bytes);
    if (!h.ok) {
        problems << "the test's own header parse failed: " + h.error;
        return;
    }
    Source src;
    try {
        src = openSource(abs.toStdString());
    } catch (const std::exception& e) {
        problems << "openSource threw: " + QString::fromUtf8(e.what());
        return;
    }
    tally("safetensors files opened");
    // The header read by simdjson alone, without SafetensorsScan for members in the writers' layout, lists the same.
    OpenOptions json;
    json.headerScanBatch = 0;
    listsAlike(abs, json, src, "the header read by simdjson alone", problems);
    if (formatId(src.format) != "safetensors")
        problems << "format is " + q(formatId(src.format));

    QHash<QString, const Entry*> byName;
    const auto stored = storedTensors(src.entries);
    for (const auto& [name, e] : stored)
        if (byName.contains(name))
            problems << "entry listed twice: " + name;
        else
            byName.insert(name, e);
    const quint64 dataStart = 8 + h.length;
    int compared = 0;
    QMap<QString, int> dtypes;
    for (auto it = h.object.constBegin(); it != h.object.constEnd(); ++it) {
        const QJsonObject t = it.value().toObject();
        if (it.key() == QLatin1String("__metadata__")) {
            for (auto m = t.constBegin(); m != t.constEnd(); ++m) {
                bool found = false;
                for (const auto& [k, v] : src.metadata)
                    found |= q(k) == m.key() && q(v) == m.value().toString();
                if (!found)
                    problems << "__metadata__ '" + m.key() + "' is not in Source::metadata with its value";
            }
            continue;
        }
        ++dtypes[t.value("dtype").toString()];
        const Entry* e = byName.value(it.key());
        if (!e) {
            problems << "header tensor '" + it.key() + "' is not an entry";
            continue;
        }
        ++compared;
        const QString dtype = q(std::string(dtypeName(e->dtype)));
        if (safetensorsDtype(t.value("dtype").toString()) != dtype)
            problems
                << QString("'%1' dtype: header %2, StateLens %3").arg(it.key(), t.value("dtype").toString(), dtype);
        if (jsonInts(t.value("shape")) != toList(e->shape))
            problems << QString("'%1' shape: header %2, StateLens %3")
                            .arg(it.key(), shapeString(jsonInts(t.value("shape"))), shapeString(e->shape));
        const QList<qint64> off = jsonInts(t.value("data_offsets"));
        if (off.size() != 2 || e->location.offset != dataStart + quint64(off[0])
            || e->location.length != quint64(off[1] - off[0]))
            problems << QString("'%1' bytes: header [%2, %3) after %4, StateLens offset %5 length %6")
                            .arg(it.key())
                            .arg(off.value(0))
                            .arg(off.value(1))
                            .arg(dataStart)
                            .arg(e->location.offset)
                            .arg(e->location.length);
    }
    const qsizetype headerTensors = h.object.size() - (h.object.contains("__metadata__") ? 1 : 0);
    if (qsizetype(stored.size()) != headerTensors)
        problems << QString("%1 entries for %2 header tensors").arg(stored.size()).arg(headerTensors);
    tally("safetensors: tensors compared with the header parsed by QJsonDocument", compared);

    const SourcesInfo si = m_sources.value(file);
    if (si.headerBytes < 0) {
        problems << "SOURCES.md has no header line for this file";
        return;
    }
    if (quint64(si.headerBytes) != h.length)
        problems << QString("SOURCES.md header %1 bytes, the file %2").arg(si.headerBytes).arg(h.length);
    if (si.stTensorCount != qsizetype(stored.size()))
        problems << QString("SOURCES.md %1 tensors, StateLens %2").arg(si.stTensorCount).arg(stored.size());
    if (si.stDtypes != dtypes)
        problems << "SOURCES.md dtype counts differ from the header";
    static const QRegularExpression listed(QStringLiteral(R"(^(.*):([A-Z0-9_]+)\[([0-9, ]*)\]$)"));
    for (const QString& item : si.stListed) {
        auto m = listed.match(item);
        const Entry* e = m.hasMatch() ? byName.value(m.captured(1)) : nullptr;
        if (!e) {
            problems << "SOURCES.md tensor '" + item + "' is not an entry";
            continue;
        }
        const QString got = q(std::string(dtypeName(e->dtype))) + shapeString(e->shape);
        const QString want = safetensorsDtype(m.captured(2)) + "[" + m.captured(3) + "]";
        if (got != want)
            problems << QString("'%1': SOURCES.md %2, StateLens %3").arg(m.captured(1), want, got);
    }
    tally("safetensors: files whose SOURCES.md header/tensor lines were compared");
}

void TestRealFixtures::checkIndex(
    const QString& file, const QString& abs, const QByteArray& bytes, QStringList& problems)
{
    QJsonParseError err;
    const QJsonObject index = QJsonDocument::fromJson(bytes, &err).object();
    if (err.error != QJsonParseError::NoError) {
        problems << "the test's own JSON parse failed: " + err.errorString();
        return;
    }
    const QJsonObject weightMap = index.value("weight_map").toObject();
    Source src;
    try {
        src = openSource(abs.toStdString());
    } catch (const std::exception& e) {
        problems << "openSource threw: " + QString::fromUtf8(e.what());
        return;
    }
    tally("sharded indexes opened");
    // Shards opened while the index is parsed (ShardPrefetch, all of them there), shard headers read by
    // simdjson alone, and FP8 pairs left to the grouping pass (no early groups) list the same.
    OpenOptions prefetch;
    prefetch.shardPrefetchFrom = 0;
    prefetch.shardPrefetchFinishes = true;
    listsAlike(abs, prefetch, src, "shards opened while the index is parsed", problems);
    OpenOptions json;
    json.headerScanBatch = 0;
    listsAlike(abs, json, src, "shard headers read by simdjson alone", problems);
    OpenOptions later;
    later.earlyFp8Groups = false;
    listsAlike(abs, later, src, "FP8 pairs grouped after the reader", problems);
    const char* format = abs.endsWith(QLatin1String(".bin.index.json")) ? "torch-bin-index" : "safetensors-index";
    if (formatId(src.format) != format)
        problems << QString("format is %1, expected %2").arg(q(formatId(src.format)), format);

    QHash<QString, const Entry*> byName;
    const auto stored = storedTensors(src.entries);
    for (const auto& [name, e] : stored)
        if (byName.contains(name))
            problems << "entry listed twice: " + name;
        else
            byName.insert(name, e);
    if (qsizetype(stored.size()) != weightMap.size())
        problems << QString("%1 entries for %2 weight_map keys").arg(stored.size()).arg(weightMap.size());

    // Shards as this test reads them: a safetensors header, or nothing (missing, LFS pointer, .bin).
    const QString dir = QFileInfo(abs).absolutePath();
    QHash<QString, StHeader> shards;
    QMap<QString, int> perShard;
    for (auto it = weightMap.constBegin(); it != weightMap.constEnd(); ++it) {
        const QString shard = it.value().toString();
        ++perShard[shard];
        if (!shards.contains(shard)) {
            QFile f(dir + "/" + shard);
            StHeader h;
            if (shard.endsWith(QLatin1String(".safetensors")) && f.open(QIODevice::ReadOnly))
                h = readStHeader(f.readAll());
            shards.insert(shard, h);
        }
    }
    int compared = 0;
    int unavailable = 0;
    quint64 readableNumel = 0; // from the shard headers
    for (auto it = weightMap.constBegin(); it != weightMap.constEnd(); ++it) {
        const QString shard = it.value().toString();
        const Entry* e = byName.value(it.key());
        if (!e) {
            problems << "weight_map tensor '" + it.key() + "' is not an entry";
            continue;
        }
        const StHeader& h = shards[shard];
        if (!h.ok) {
            ++unavailable;
            if (e->location.kind != TensorLocation::Kind::Unavailable)
                problems << "'" + it.key() + "' lives in unreadable shard " + shard + " but is not marked unavailable";
            // Nothing says how many elements it has: it must not count as a 0-d tensor.
            if (e->numel() != 0)
                problems
                    << QString("'%1' in unreadable shard %2 claims %3 elements").arg(it.key(), shard).arg(e->numel());
            continue;
        }
        const QJsonObject t = h.object.value(it.key()).toObject();
        const QString dtype = q(std::string(dtypeName(e->dtype)));
        if (safetensorsDtype(t.value("dtype").toString()) != dtype || jsonInts(t.value("shape")) != toList(e->shape))
            problems << QString("'%1': shard header %2%3, StateLens %4%5")
                            .arg(it.key(), t.value("dtype").toString(), shapeString(jsonInts(t.value("shape"))), dtype,
                                shapeString(e->shape));
        quint64 n = 1;
        for (qint64 d : jsonInts(t.value("shape")))
            n *= quint64(d);
        readableNumel += n;
        const QList<qint64> off = jsonInts(t.value("data_offsets"));
        if (off.size() != 2 || e->location.offset != 8 + h.length + quint64(off[0]))
            problems << "'" + it.key() + "': byte offset differs from the shard header";
        if (e->location.file < 0 || size_t(e->location.file) >= src.files.size()
            || !q(src.files[size_t(e->location.file)]).endsWith("/" + shard))
            problems << "'" + it.key() + "': location file is not " + shard;
        ++compared;
    }
    for (auto it = shards.cbegin(); it != shards.cend(); ++it) {
        if (it->ok)
            continue;
        bool mentioned = false;
        for (const Finding& f : src.findings)
            mentioned |= f.severity >= Severity::Warning && q(f.message).contains(it.key());
        if (!mentioned)
            problems << "no warning names the unreadable shard " + it.key();
    }
    if (src.totalParameters() != readableNumel)
        problems << QString("totalParameters() is %1; the readable shards hold %2 elements")
                        .arg(src.totalParameters())
                        .arg(readableNumel);
    tally("sharded indexes: tensors compared with shard headers parsed by QJsonDocument", compared);
    tally("sharded indexes: tensors in unreadable shards marked unavailable", unavailable);

    const SourcesInfo si = m_sources.value(file);
    if (si.indexKeys < 0) {
        problems << "SOURCES.md has no index line for this file";
        return;
    }
    if (si.indexKeys != weightMap.size() || si.indexKeys != qsizetype(stored.size()))
        problems << QString("SOURCES.md %1 keys, weight_map %2, StateLens %3")
                        .arg(si.indexKeys)
                        .arg(weightMap.size())
                        .arg(stored.size());
    if (si.indexShardFiles != perShard.size() || si.indexShardCounts != perShard)
        problems << "SOURCES.md shard counts differ from weight_map";
    for (auto it = si.indexMetadata.cbegin(); it != si.indexMetadata.cend(); ++it) {
        bool found = false;
        for (const auto& [k, v] : src.metadata)
            found |= q(k) == it.key() && q(v).toLongLong() == it.value();
        if (!found)
            problems
                << QString("metadata %1 = %2 (SOURCES.md) is not in Source::metadata").arg(it.key()).arg(it.value());
    }
    tally("sharded indexes: files whose SOURCES.md key/shard counts were compared");
}

QTEST_GUILESS_MAIN(TestRealFixtures)
#include "tst_real_fixtures.moc"
