#include "aligned_tree_model.h"

#include "diff/name_diff.h"
#include "report/source_report.h"
#include "style/status_style.h"
#include "torch/wrapper_prefixes.h"

#include <QGuiApplication>
#include <QBrush>
#include <QFont>
#include <QPoint>

#include <algorithm>
#include <array>
#include <unordered_map>

namespace sl::gui {

namespace {

std::vector<std::string_view> splitSegments(std::string_view name)
{
    std::vector<std::string_view> out;
    forEachNameSegment(name, [&](std::string_view s) { out.push_back(s); });
    return out;
}

// Segments that wrappers put into names. `module` (DDP, DataParallel) and `base_model` (PEFT) only count
// at the top: deeper down they are ordinary module names.
bool isWrapperSegment(std::string_view s, bool top)
{
    if (isInnerWrapperSegment(s) || s == "_flat_param") // and FSDP1's flattened parameter
        return true;
    if (top)
        for (const WrapperPrefix& w : kWrapperPrefixes)
            if (w.place == WrapperPrefix::Place::Start && w.prefix.substr(0, w.prefix.find('.')) == s)
                return true;
    return false;
}

// What "next difference" stops at: rows a strict load would not take as they are. Renamed rows are
// matched through a rule, so they are resolved, not differences.
bool isDifference(uint8_t status)
{
    return statusSeverity(static_cast<RowStatus>(status)) > statusSeverity(RowStatus::Renamed);
}

QString qs(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())); }

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool containsFolded(std::string_view hay, std::string_view needle)
{
    if (needle.size() > hay.size())
        return false;
    const char first = needle.front();
    for (size_t i = 0; i + needle.size() <= hay.size(); ++i) {
        if (lower(hay[i]) != first)
            continue;
        size_t k = 1;
        while (k < needle.size() && lower(hay[i + k]) == needle[k])
            ++k;
        if (k == needle.size())
            return true;
    }
    return false;
}

struct ChildKey {
    int32_t parent;
    std::string_view segment;
    bool operator==(const ChildKey&) const = default;
};
struct ChildKeyHash {
    size_t operator()(const ChildKey& k) const
    {
        return std::hash<std::string_view>()(k.segment) ^ (static_cast<size_t>(k.parent) * 0x9e3779b97f4a7c15ULL);
    }
};

QString sizeText(uint64_t params, uint64_t bytes)
{
    return QStringLiteral("%1 · %2").arg(QString::fromStdString(humanCount(params)), QString::fromStdString(humanBytes(bytes)));
}

QString shapeText(const Entry& e)
{
    if (e.kind == EntryKind::Object)
        return qs(e.value);
    if (!e.shapeKnown)
        return QStringLiteral("?");
    return QString::fromStdString(shapeToString(e.shape));
}

QString dtypeText(const Entry& e)
{
    if (e.kind == EntryKind::Object)
        return qs(e.typeName);
    return qs(dtypeName(e.dtype));
}

// What a half shows where it has no key: muted and hatched (data()), so a gap reads as a gap.
QVariant gapText(bool sideA)
{
    return sideA ? AlignedTreeModel::tr("not in the checkpoint") : AlignedTreeModel::tr("not in the model");
}

QVariantList highlightSpans(const QString& shown, const QString& other)
{
    // Spans are found on the UTF-8 names and mapped back to QString positions (names are mostly ASCII).
    const QByteArray a = shown.toUtf8(), b = other.toUtf8();
    QVariantList out;
    for (const NameSpan& span : differingSegments(std::string_view(a.constData(), size_t(a.size())), std::string_view(b.constData(), size_t(b.size())))) {
        const int start = QString::fromUtf8(a.constData(), qsizetype(span.start)).size();
        const int length = QString::fromUtf8(a.constData() + span.start, qsizetype(span.length)).size();
        out << QPoint(start, length);
    }
    return out;
}

const std::array<QIcon, kRowStatusCount>& statusIcons()
{
    // Drawn once per palette lightness; the icons follow light and dark themes.
    static std::array<QIcon, kRowStatusCount> icons;
    static int builtFor = -1;
    const QPalette palette = QGuiApplication::palette();
    const int key = StatusStyle::isDark(palette) ? 1 : 0;
    if (builtFor != key) {
        for (size_t s = 0; s < kRowStatusCount; ++s)
            icons[s] = StatusStyle::icon(static_cast<RowStatus>(s), palette);
        builtFor = key;
    }
    return icons;
}

} // namespace

AlignedTreeModel::AlignedTreeModel(QObject* parent)
    : QAbstractItemModel(parent)
{
    m_nodes.resize(1);
}

void AlignedTreeModel::setSnapshot(std::shared_ptr<const DiffSnapshot> snapshot)
{
    beginResetModel();
    // The same diff again with its pending pairs marked has the same rows: their value comparisons hold.
    if (!m_snap || !snapshot || snapshot->generation != m_snap->generation || snapshot->diff.rows.size() != m_snap->diff.rows.size())
        m_values.reset();
    m_snap = std::move(snapshot);
    rebuild();
    endResetModel();
}

void AlignedTreeModel::setValueComparisons(std::shared_ptr<const std::vector<values::ValueComparison>> perRow)
{
    m_values = std::move(perRow);
    if (rowCount() > 0)
        emit dataChanged(index(0, ValuesColumn), index(rowCount() - 1, ValuesColumn));
    emit headerDataChanged(Qt::Horizontal, ValuesColumn, ValuesColumn);
}

const values::ValueComparison* AlignedTreeModel::comparisonOf(const DiffRow& row) const
{
    if (!m_values || !m_snap)
        return nullptr;
    const size_t i = static_cast<size_t>(&row - m_snap->diff.rows.data());
    return i < m_values->size() && (*m_values)[i].compared ? &(*m_values)[i] : nullptr;
}

QVariant AlignedTreeModel::valuesCell(const Node& n, int role) const
{
    if (!m_values || (role != Qt::DisplayRole && role != Qt::ToolTipRole))
        return {};
    auto describe = [](const values::ValueComparison& c) {
        if (c.equalBytes)
            return tr("= same bytes");
        if (c.equalValues)
            return tr("= same values");
        QString s = tr("max|Δ| %1").arg(c.maxAbsDiff ? QString::number(*c.maxAbsDiff, 'g', 3) : QStringLiteral("—"));
        if (c.cosine)
            s += tr(" · cos %1").arg(QString::number(*c.cosine, 'f', 6));
        if (c.nanMismatch)
            s += tr(" · NaN ≠ %1").arg(c.nanMismatch);
        return s;
    };
    if (n.kind == NodeKind::Leaf && m_leaves[static_cast<size_t>(n.ref)].folded >= 0) {
        size_t same = 0, differ = 0;
        for (size_t r : m_snap->folded[static_cast<size_t>(m_leaves[static_cast<size_t>(n.ref)].folded)].rows)
            if (const auto* c = comparisonOf(m_snap->diff.rows[r]))
                (c->equalBytes || c->equalValues ? same : differ) += 1;
        if (!same && !differ)
            return {};
        return tr("%1 same · %2 differ").arg(same).arg(differ);
    }
    const DiffRow* row = rowOf(n);
    if (!row)
        return {};
    if (const auto* c = comparisonOf(*row)) {
        if (role == Qt::ToolTipRole)
            return tr("equal bytes: %1\nmax |a-b|: %2\nmax relative: %3\ncosine: %4\nNaN on one side only: %5")
                       .arg(c->equalBytes ? tr("yes") : tr("no"))
                       .arg(c->maxAbsDiff ? QString::number(*c->maxAbsDiff, 'g', 9) : QStringLiteral("—"))
                       .arg(c->maxRelDiff ? QString::number(*c->maxRelDiff, 'g', 9) : QStringLiteral("—"))
                       .arg(c->cosine ? QString::number(*c->cosine, 'g', 12) : QStringLiteral("—"))
                       .arg(c->nanMismatch)
                + (c->note.empty() ? QString() : QLatin1Char('\n') + QString::fromStdString(c->note));
        return describe(*c);
    }
    const size_t i = static_cast<size_t>(row - m_snap->diff.rows.data());
    if (row->a.valid() && row->b.valid() && i < m_values->size())
        return role == Qt::ToolTipRole ? QString::fromStdString((*m_values)[i].why) : tr("not compared");
    return {};
}

void AlignedTreeModel::setFolding(bool fold)
{
    if (fold == m_fold)
        return;
    beginResetModel();
    m_fold = fold;
    rebuild();
    endResetModel();
}

bool AlignedTreeModel::setFilter(const Filter& filter)
{
    if (filter == m_filter)
        return true;
    QRegularExpression regex;
    if (filter.regex && !filter.text.isEmpty()) {
        regex = QRegularExpression(filter.text, QRegularExpression::CaseInsensitiveOption);
        if (!regex.isValid()) {
            m_filterError = tr("position %1: %2").arg(regex.patternErrorOffset()).arg(regex.errorString());
            return false;
        }
        regex.optimize();
    }
    m_filterError.clear();
    m_regex = regex;
    m_needle = filter.regex ? std::string() : filter.text.toLower().toStdString();
    m_filter = filter;
    // Typing often keeps the same rows ("l", "la", "lay" all match every layer): then the tree stands.
    std::vector<bool> pass = passing();
    if (pass == m_pass)
        return true;
    beginResetModel();
    m_pass = std::move(pass);
    buildTree();
    endResetModel();
    return true;
}

std::vector<bool> AlignedTreeModel::passing() const
{
    std::vector<bool> pass(m_leaves.size());
    for (size_t i = 0; i < m_leaves.size(); ++i)
        pass[i] = passes(m_leaves[i]);
    return pass;
}

bool AlignedTreeModel::textMatches(std::string_view name) const
{
    if (m_filter.regex)
        return m_regex.match(qs(name)).hasMatch();
    return containsFolded(name, m_needle);
}

bool AlignedTreeModel::passes(const Leaf& leaf) const
{
    const auto& diff = m_snap->diff;
    const RowStatus status = leaf.folded >= 0 ? m_snap->folded[static_cast<size_t>(leaf.folded)].status : diff.rows[leaf.row].status;
    // A pair's line holds a missing and an unexpected key: either status shows it.
    const bool pair = lineRows(diff.rows[leaf.row]) > 0;
    const RowStatus other = status == RowStatus::Missing ? RowStatus::Unexpected : RowStatus::Missing;
    const uint32_t bits = (1u << static_cast<unsigned>(status)) | (pair ? 1u << static_cast<unsigned>(other) : 0u);
    if (!(m_filter.statuses & bits))
        return false;
    if (m_filter.text.isEmpty())
        return true;
    if (textMatches(leaf.name))
        return true;
    // A's original name and B's name too, for every row a folded leaf holds.
    auto keysMatch = [&](const DiffRow& row) {
        return (row.a.valid() && textMatches(rowKeyA(row, *m_snap->a))) || (row.b.valid() && textMatches(rowKeyB(row, *m_snap->b)));
    };
    auto rowMatches = [&](size_t r) { // the row's keys, and those of the rows on its line
        if (keysMatch(diff.rows[r]))
            return true;
        for (uint32_t other : m_snap->lines.on(r))
            if (keysMatch(diff.rows[other]))
                return true;
        return false;
    };
    if (leaf.folded < 0)
        return rowMatches(leaf.row);
    const auto& rows = m_snap->folded[static_cast<size_t>(leaf.folded)].rows;
    return std::any_of(rows.begin(), rows.end(), rowMatches);
}

int32_t AlignedTreeModel::addNode(int32_t parent, std::string_view segment, NodeKind kind, int32_t ref)
{
    Node n;
    n.segment = segment;
    n.parent = parent;
    n.kind = kind;
    n.ref = ref;
    auto& siblings = m_nodes[static_cast<size_t>(parent)].children;
    n.row = static_cast<int32_t>(siblings.size());
    n.wrapper = kind == NodeKind::Inner && isWrapperSegment(segment, parent == 0);
    const auto id = static_cast<int32_t>(m_nodes.size());
    siblings.push_back(id);
    m_nodes.push_back(std::move(n));
    return id;
}

void AlignedTreeModel::account(int32_t node, size_t diffRow)
{
    const DiffRow& row = m_snap->diff.rows[diffRow];
    // A line holds the other side's rows shown with it: they count too, so roll-ups agree with the summary.
    for (uint32_t other : m_snap->lines.on(diffRow))
        account(node, other);
    const Entry* a = rowEntryA(row, *m_snap->a);
    const Entry* b = rowEntryB(row, *m_snap->b);
    const uint64_t paramsA = a && a->kind != EntryKind::Object ? a->numel() : 0;
    const uint64_t paramsB = b && b->kind != EntryKind::Object ? b->numel() : 0;
    const uint64_t bytesA = a ? a->nbytes() : 0;
    const uint64_t bytesB = b ? b->nbytes() : 0;
    const int severity = statusSeverity(row.status);
    for (int32_t n = node; n >= 0; n = m_nodes[static_cast<size_t>(n)].parent) {
        Node& x = m_nodes[static_cast<size_t>(n)];
        x.counts[static_cast<size_t>(row.status)] += 1;
        x.entriesA += a ? 1 : 0;
        x.entriesB += b ? 1 : 0;
        x.paramsA += paramsA;
        x.paramsB += paramsB;
        x.bytesA += bytesA;
        x.bytesB += bytesB;
        if (severity > statusSeverity(static_cast<RowStatus>(x.worst)))
            x.worst = static_cast<uint8_t>(row.status);
    }
}

void AlignedTreeModel::rebuild()
{
    m_leaves.clear();
    m_pass.clear();
    if (m_snap) {
        collectLeaves();
        m_pass = passing();
    }
    buildTree();
}

void AlignedTreeModel::collectLeaves()
{
    const auto& diff = m_snap->diff;
    const Source& a = *m_snap->a;
    const Source& b = *m_snap->b;
    if (m_fold) {
        m_leaves.reserve(m_snap->folded.size());
        for (size_t i = 0; i < m_snap->folded.size(); ++i) {
            const FoldedRow& f = m_snap->folded[i];
            if (f.rows.size() == 1)
                m_leaves.push_back({ rowName(diff.rows[f.rows[0]], a, b), -1, f.rows[0] });
            else
                m_leaves.push_back({ f.name, static_cast<int32_t>(i), f.rows[0] });
        }
    } else {
        m_leaves.reserve(diff.rows.size());
        for (size_t i = 0; i < diff.rows.size(); ++i)
            if (m_snap->lines.shownWith[i] < 0) // a row shown on another's line (a pair) has no leaf of its own
                m_leaves.push_back({ rowName(diff.rows[i], a, b), -1, i });
    }
}

void AlignedTreeModel::buildTree()
{
    m_nodes.clear();
    m_nodes.emplace_back();
    m_leafCount = 0;
    m_chunkNodes = 0;
    if (!m_snap)
        return;
    // Inner nodes found by (parent, segment). Leaves are never looked up: "a.b" and "a.b.c" can both be keys.
    std::unordered_map<ChildKey, int32_t, ChildKeyHash> inner;
    inner.reserve(m_leaves.size());
    std::vector<std::string_view> segments;
    for (size_t li = 0; li < m_leaves.size(); ++li) {
        const Leaf& leaf = m_leaves[li];
        if (!m_pass[li])
            continue;
        segments.clear();
        forEachNameSegment(leaf.name, [&](std::string_view s) { segments.push_back(s); });
        int32_t node = 0;
        for (size_t s = 0; s + 1 < segments.size(); ++s) {
            // Consecutive keys share their parents, so the last child is the usual answer.
            const auto& kids = m_nodes[static_cast<size_t>(node)].children;
            if (!kids.empty()) {
                const Node& last = m_nodes[static_cast<size_t>(kids.back())];
                if (last.kind == NodeKind::Inner && last.segment == segments[s]) {
                    node = kids.back();
                    continue;
                }
            }
            auto [it, inserted] = inner.try_emplace(ChildKey { node, segments[s] }, 0);
            if (inserted)
                it->second = addNode(node, segments[s], NodeKind::Inner, -1);
            node = it->second;
        }
        addLeaf(leaf, static_cast<int32_t>(li), node, segments.back());
    }
}

void AlignedTreeModel::addLeaf(const Leaf& leaf, int32_t leafIndex, int32_t parent, std::string_view last)
{
    const int32_t node = addNode(parent, last, NodeKind::Leaf, leafIndex);
    const auto& diff = m_snap->diff;
    if (leaf.folded >= 0) {
        for (size_t r : m_snap->folded[static_cast<size_t>(leaf.folded)].rows) {
            const int32_t member = addNode(node, rowName(diff.rows[r], *m_snap->a, *m_snap->b), NodeKind::FoldedMember,
                static_cast<int32_t>(r));
            account(member, r);
            m_leafCount += 1 + m_snap->lines.count(r);
        }
        return;
    }
    account(node, leaf.row);
    m_leafCount += 1 + m_snap->lines.count(leaf.row); // a pair's line holds two rows
    // A quantized group or a wrapper subclass shows its stored tensors when expanded.
    const DiffRow& rowA = diff.rows[m_snap->lines.rowA(diff, leaf.row)];
    const DiffRow& rowB = diff.rows[m_snap->lines.rowB(diff, leaf.row)];
    if (const Entry* a = rowEntryA(rowA, *m_snap->a)) {
        for (size_t p = 0; p < a->parts.size(); ++p)
            addNode(node, a->parts[p].name, NodeKind::PartA, static_cast<int32_t>(p));
    }
    if (const Entry* b = rowEntryB(rowB, *m_snap->b)) {
        for (size_t p = 0; p < b->parts.size(); ++p)
            addNode(node, b->parts[p].name, NodeKind::PartB, static_cast<int32_t>(p));
    }
    // A sharded tensor shows its pieces (DTensor/ShardedTensor shards, DCP chunks, per-rank slices). Capped,
    // so a DCP checkpoint of 100,000 tensors over many ranks does not multiply the tree; the details
    // panel lists every chunk.
    constexpr size_t kChunksPerEntry = 64;
    constexpr size_t kChunkNodes = 200000;
    for (bool sideA : { true, false }) {
        const Entry* e = sideA ? rowEntryA(rowA, *m_snap->a) : rowEntryB(rowB, *m_snap->b);
        if (!e)
            continue;
        const auto& sharding = e->sharding;
        if (!sharding)
            continue;
        const size_t n = std::min(sharding->chunks.size(), kChunksPerEntry);
        for (size_t c = 0; c < n && m_chunkNodes < kChunkNodes; ++c, ++m_chunkNodes) {
            static constexpr std::string_view kUnlabelled = "chunk";
            const std::string& label = sharding->chunks[c].label;
            addNode(node, label.empty() ? kUnlabelled : std::string_view(label), sideA ? NodeKind::ChunkA : NodeKind::ChunkB,
                static_cast<int32_t>(c));
        }
    }
}

const DiffRow* AlignedTreeModel::rowOf(const Node& n) const
{
    switch (n.kind) {
    case NodeKind::Leaf:
        return &m_snap->diff.rows[m_leaves[static_cast<size_t>(n.ref)].row];
    case NodeKind::FoldedMember:
        return &m_snap->diff.rows[static_cast<size_t>(n.ref)];
    default:
        return nullptr;
    }
}

size_t AlignedTreeModel::lineRows(const DiffRow& row) const
{
    return m_snap->lines.count(static_cast<size_t>(&row - m_snap->diff.rows.data()));
}

const DiffRow* AlignedTreeModel::rowAOf(const Node& n) const
{
    const DiffRow* row = rowOf(n);
    if (!row)
        return nullptr;
    return &m_snap->diff.rows[m_snap->lines.rowA(m_snap->diff, static_cast<size_t>(row - m_snap->diff.rows.data()))];
}

const DiffRow* AlignedTreeModel::rowBOf(const Node& n) const
{
    const DiffRow* row = rowOf(n);
    if (!row)
        return nullptr;
    return &m_snap->diff.rows[m_snap->lines.rowB(m_snap->diff, static_cast<size_t>(row - m_snap->diff.rows.data()))];
}

const Entry* AlignedTreeModel::entryOf(const Node& n, bool sideA) const
{
    const DiffRow* row = sideA ? rowAOf(n) : rowBOf(n);
    if (!row)
        return nullptr;
    return sideA ? rowEntryA(*row, *m_snap->a) : rowEntryB(*row, *m_snap->b);
}

bool AlignedTreeModel::isGap(const Node& n, int column) const
{
    if (!m_snap || column >= StatusColumn)
        return false;
    const bool sideA = column <= SizeA;
    if (n.kind == NodeKind::Inner)
        return (sideA ? n.entriesA : n.entriesB) == 0;
    if (n.kind == NodeKind::Leaf || n.kind == NodeKind::FoldedMember)
        return entryOf(n, sideA) == nullptr;
    return false;
}

QString AlignedTreeModel::pairName(const Node& n, bool sideA) const
{
    const DiffRow* head = rowOf(n);
    const size_t headIndex = static_cast<size_t>(head - m_snap->diff.rows.data());
    const bool headOnThisSide = sideA ? head->a.valid() : head->b.valid();
    if (n.kind == NodeKind::Leaf) {
        const Leaf& leaf = m_leaves[static_cast<size_t>(n.ref)];
        if (leaf.folded >= 0) {
            const FoldedRow& f = m_snap->folded[static_cast<size_t>(leaf.folded)];
            return qs(headOnThisSide ? f.name : f.partnerName);
        }
    }
    if (headOnThisSide)
        return sideA ? qs(rowKeyA(*head, *m_snap->a)) : qs(rowKeyB(*head, *m_snap->b));
    // The other side's rows on this line: one key, or many folded ("experts.{0..255}.w1.weight").
    return qs(foldedNames(m_snap->diff, *m_snap->a, *m_snap->b, m_snap->lines.on(headIndex)));
}

const Entry* AlignedTreeModel::partEntry(const QModelIndex& index) const
{
    if (!index.isValid())
        return nullptr;
    const Node& n = m_nodes[static_cast<size_t>(nodeOf(index))];
    if (n.kind != NodeKind::PartA && n.kind != NodeKind::PartB)
        return nullptr;
    const Node& owner = m_nodes[static_cast<size_t>(n.parent)];
    const Entry* e = entryOf(owner, n.kind == NodeKind::PartA);
    return e ? &e->parts[static_cast<size_t>(n.ref)] : nullptr;
}

std::vector<size_t> AlignedTreeModel::diffRows(const QModelIndex& index) const
{
    if (!index.isValid())
        return {};
    const Node& n = m_nodes[static_cast<size_t>(nodeOf(index))];
    if (n.kind == NodeKind::FoldedMember)
        return { static_cast<size_t>(n.ref) };
    if (n.kind != NodeKind::Leaf)
        return {};
    const Leaf& leaf = m_leaves[static_cast<size_t>(n.ref)];
    if (leaf.folded >= 0)
        return m_snap->folded[static_cast<size_t>(leaf.folded)].rows;
    return { leaf.row };
}

AlignedTreeModel::NodeKind AlignedTreeModel::kind(const QModelIndex& index) const
{
    return m_nodes[static_cast<size_t>(nodeOf(index))].kind;
}

QString AlignedTreeModel::path(const QModelIndex& index) const
{
    std::vector<std::string_view> parts;
    for (int n = nodeOf(index); n > 0; n = m_nodes[static_cast<size_t>(n)].parent) {
        const Node& x = m_nodes[static_cast<size_t>(n)];
        parts.push_back(x.segment);
        if (x.kind == NodeKind::FoldedMember) // its segment is the whole name already
            break;
    }
    std::string out;
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (!out.empty())
            out += '.';
        out += *it;
    }
    return QString::fromStdString(out);
}

QModelIndex AlignedTreeModel::findPath(const QString& path) const
{
    const std::string p = path.toStdString();
    int32_t node = 0;
    for (std::string_view seg : splitSegments(p)) {
        int32_t found = -1;
        for (int32_t c : m_nodes[static_cast<size_t>(node)].children)
            if (m_nodes[static_cast<size_t>(c)].segment == seg) {
                found = c;
                // Prefer an inner node when a leaf shares its segment: paths usually lead somewhere deeper.
                if (m_nodes[static_cast<size_t>(c)].kind == NodeKind::Inner)
                    break;
            }
        if (found < 0)
            return {};
        node = found;
    }
    if (node == 0)
        return {};
    return createIndex(m_nodes[static_cast<size_t>(node)].row, 0, static_cast<quintptr>(node));
}

QModelIndex AlignedTreeModel::findRow(size_t diffRow) const
{
    if (!m_snap || diffRow >= m_snap->diff.rows.size())
        return {};
    const int32_t head = m_snap->lines.shownWith[diffRow]; // the line it is shown on, if not its own
    for (size_t i = 1; i < m_nodes.size(); ++i) {
        const Node& n = m_nodes[i];
        if (n.kind != NodeKind::Leaf && n.kind != NodeKind::FoldedMember)
            continue;
        const size_t row = n.kind == NodeKind::Leaf ? m_leaves[static_cast<size_t>(n.ref)].row : static_cast<size_t>(n.ref);
        if (row == diffRow || (head >= 0 && row == static_cast<size_t>(head)))
            return createIndex(n.row, 0, static_cast<quintptr>(i));
    }
    return {};
}

QModelIndex AlignedTreeModel::nextDifference(const QModelIndex& from, bool forward) const
{
    // Depth-first display order over the difference leaves; the tree is small enough to walk per keypress
    // (100,000 leaves walk in about a millisecond).
    std::vector<int32_t> order;
    std::vector<int32_t> stack { 0 };
    while (!stack.empty()) {
        const int32_t n = stack.back();
        stack.pop_back();
        const Node& x = m_nodes[static_cast<size_t>(n)];
        if (x.kind == NodeKind::Leaf || x.kind == NodeKind::FoldedMember) {
            if (isDifference(x.worst) && x.kind == NodeKind::Leaf)
                order.push_back(n);
            continue;
        }
        if (n != 0 && !isDifference(x.worst))
            continue; // nothing to find below
        for (auto it = x.children.rbegin(); it != x.children.rend(); ++it)
            stack.push_back(*it);
    }
    if (order.empty())
        return {};
    // Where `from` sits in display order: its own position, or that of the leaf it leads to.
    auto positionOf = [&](int32_t node) {
        // Compare by the path of ancestors: walk both to the root. Simple and exact: find the first leaf in
        // `order` that is at or after `node` in depth-first order.
        std::vector<int32_t> chain;
        for (int32_t n = node; n > 0; n = m_nodes[static_cast<size_t>(n)].parent)
            chain.push_back(n);
        auto before = [&](int32_t leaf) { // is `leaf` before `node` in display order?
            std::vector<int32_t> lchain;
            for (int32_t n = leaf; n > 0; n = m_nodes[static_cast<size_t>(n)].parent)
                lchain.push_back(n);
            auto i = chain.rbegin();
            auto j = lchain.rbegin();
            while (i != chain.rend() && j != lchain.rend() && *i == *j) {
                ++i;
                ++j;
            }
            if (j == lchain.rend())
                return false; // leaf is `node` or an ancestor of it
            if (i == chain.rend())
                return false; // leaf is below node: after it
            return m_nodes[static_cast<size_t>(*j)].row < m_nodes[static_cast<size_t>(*i)].row;
        };
        return static_cast<size_t>(std::partition_point(order.begin(), order.end(), before) - order.begin());
    };
    int32_t target;
    if (!from.isValid()) {
        target = forward ? order.front() : order.back();
    } else {
        const int32_t node = nodeOf(from);
        const size_t pos = positionOf(node); // first difference at or after `node`
        if (forward) {
            size_t next = pos < order.size() && order[pos] == node ? pos + 1 : pos;
            target = order[next % order.size()];
        } else {
            target = pos == 0 ? order.back() : order[pos - 1];
        }
    }
    return createIndex(m_nodes[static_cast<size_t>(target)].row, 0, static_cast<quintptr>(target));
}

QModelIndex AlignedTreeModel::index(int row, int column, const QModelIndex& parent) const
{
    if (!hasIndex(row, column, parent))
        return {};
    const Node& p = m_nodes[static_cast<size_t>(nodeOf(parent))];
    return createIndex(row, column, static_cast<quintptr>(p.children[static_cast<size_t>(row)]));
}

QModelIndex AlignedTreeModel::parent(const QModelIndex& child) const
{
    if (!child.isValid())
        return {};
    const int32_t p = m_nodes[static_cast<size_t>(nodeOf(child))].parent;
    if (p <= 0)
        return {};
    return createIndex(m_nodes[static_cast<size_t>(p)].row, 0, static_cast<quintptr>(p));
}

int AlignedTreeModel::rowCount(const QModelIndex& parent) const
{
    if (parent.column() > 0)
        return 0;
    return static_cast<int>(m_nodes[static_cast<size_t>(nodeOf(parent))].children.size());
}

int AlignedTreeModel::columnCount(const QModelIndex&) const { return ColumnCount; }

QVariant AlignedTreeModel::display(const Node& n, int column) const
{
    const bool sideA = column <= SizeA;
    if (n.kind == NodeKind::PartA || n.kind == NodeKind::PartB) {
        if (sideA != (n.kind == NodeKind::PartA) || column == StatusColumn)
            return {};
        const Entry* owner = entryOf(m_nodes[static_cast<size_t>(n.parent)], n.kind == NodeKind::PartA);
        const Entry& p = owner->parts[static_cast<size_t>(n.ref)];
        switch (column) {
        case NameA:
        case NameB:
            return qs(n.segment);
        case ShapeA:
        case ShapeB:
            return shapeText(p);
        case DTypeA:
        case DTypeB:
            return dtypeText(p);
        case SizeA:
        case SizeB:
            return p.kind == EntryKind::Object ? QVariant() : QVariant(QString::fromStdString(humanBytes(p.nbytes())));
        default:
            return {};
        }
    }
    if (n.kind == NodeKind::ChunkA || n.kind == NodeKind::ChunkB) {
        const bool chunkA = n.kind == NodeKind::ChunkA;
        if (sideA != chunkA || column == StatusColumn)
            return {};
        const Entry* owner = entryOf(m_nodes[static_cast<size_t>(n.parent)], chunkA);
        const ShardChunk& c = owner->sharding->chunks[static_cast<size_t>(n.ref)];
        switch (column) {
        case NameA:
        case NameB:
            return qs(n.segment);
        case ShapeA:
        case ShapeB:
            return tr("%1 at %2").arg(QString::fromStdString(shapeToString(c.sizes)), QString::fromStdString(shapeToString(c.offsets)));
        case DTypeA:
        case DTypeB:
            return dtypeText(*owner);
        case SizeA:
        case SizeB:
            return c.byteLength ? QVariant(QString::fromStdString(humanBytes(c.byteLength))) : QVariant();
        default:
            return {};
        }
    }
    if (n.kind == NodeKind::Inner) {
        const uint32_t entries = sideA ? n.entriesA : n.entriesB;
        switch (column) {
        case NameA:
        case NameB:
            return entries ? QVariant(qs(n.segment)) : gapText(sideA);
        case ShapeA:
        case ShapeB:
            if (!entries)
                return {};
            return entries == 1 ? tr("1 entry") : tr("%1 entries").arg(entries);
        case SizeA:
            return entries ? sizeText(n.paramsA, n.bytesA) : QVariant();
        case SizeB:
            return entries ? sizeText(n.paramsB, n.bytesB) : QVariant();
        case StatusColumn: {
            // The roll-up: what is wrong below, worst first.
            QStringList parts;
            std::array<RowStatus, kRowStatusCount> order {};
            for (size_t s = 0; s < kRowStatusCount; ++s)
                order[s] = static_cast<RowStatus>(s);
            std::sort(order.begin(), order.end(), [](RowStatus x, RowStatus y) { return statusSeverity(x) > statusSeverity(y); });
            for (RowStatus s : order)
                if (s != RowStatus::Match && n.counts[static_cast<size_t>(s)])
                    parts << QStringLiteral("%1 %2").arg(n.counts[static_cast<size_t>(s)]).arg(StatusStyle::label(s));
            if (parts.isEmpty())
                return tr("all %1 match").arg(n.counts[static_cast<size_t>(RowStatus::Match)]);
            return parts.join(QStringLiteral(" · "));
        }
        default:
            return {};
        }
    }
    // Leaves and folded members.
    const DiffRow& row = *rowOf(n);
    const Entry* e = entryOf(n, sideA);
    const bool folded = n.kind == NodeKind::Leaf && m_leaves[static_cast<size_t>(n.ref)].folded >= 0;
    const bool pair = lineRows(row) > 0;
    if (column == StatusColumn) {
        const RowStatus status = folded ? m_snap->folded[static_cast<size_t>(m_leaves[static_cast<size_t>(n.ref)].folded)].status : row.status;
        QString text = pair ? (row.suggestion.valid() ? tr("pending: suggestion %1").arg(row.suggestion.get() + 1) : tr("unexpected ↔ missing"))
                            : StatusStyle::label(status);
        if (row.reason != Reason::None && !(pair && row.reason == Reason::SuggestedRename)) // "pending" says it
            text += QStringLiteral(" · ") + StatusStyle::label(row.reason);
        if (folded)
            text += QStringLiteral(" · ×%1").arg(n.children.size());
        return text;
    }
    if (!e)
        return (column == NameA || column == NameB) ? gapText(sideA) : QVariant(); // the side that lacks the row
    if (pair && (column == NameA || column == NameB))
        return pairName(n, sideA); // both full names, so the word diff can mark what differs
    switch (column) {
    case NameA: {
        QString text = qs(n.segment);
        // The tree is in B's namespace; A's own name is shown where a rule changed it.
        if (!folded && !row.mapped.empty() && rowKeyA(row, *m_snap->a) != row.mapped)
            text += QStringLiteral("  ← ") + QString::fromStdString(rowKeyA(row, *m_snap->a));
        return text;
    }
    case NameB:
        return qs(n.segment);
    case ShapeA:
    case ShapeB:
    {
        const uint32_t entries = sideA ? n.entriesA : n.entriesB; // a folded leaf's, or the many of a line
        return shapeText(*e) + (entries > 1 ? QStringLiteral(" ×%1").arg(entries) : QString());
    }
    case DTypeA:
    case DTypeB:
        return dtypeText(*e);
    case SizeA:
        return e->kind == EntryKind::Object ? QVariant() : QVariant(sizeText(n.paramsA, n.bytesA));
    case SizeB:
        return e->kind == EntryKind::Object ? QVariant() : QVariant(sizeText(n.paramsB, n.bytesB));
    default:
        return {};
    }
}

QString AlignedTreeModel::tooltip(const Node& n) const
{
    if (n.kind == NodeKind::Inner) {
        QString t = path(createIndex(n.row, 0, static_cast<quintptr>(&n - m_nodes.data())));
        if (n.wrapper)
            t += QStringLiteral("\n") + tr("A wrapper's segment: ") + StatusStyle::description(Reason::WrapperPrefix);
        return t;
    }
    const DiffRow* row = rowOf(n);
    if (!row)
        return qs(n.segment);
    QStringList lines;
    if (row->a.valid())
        lines << tr("A: %1").arg(QString::fromStdString(rowKeyA(*row, *m_snap->a)));
    if (row->b.valid())
        lines << tr("B: %1").arg(QString::fromStdString(rowKeyB(*row, *m_snap->b)));
    lines << StatusStyle::label(row->status) + QStringLiteral(": ") + StatusStyle::description(row->status);
    if (!row->explanation.empty())
        lines << QString::fromStdString(row->explanation);
    if (row->rule.valid() && row->rule.get() < m_snap->rules.rules.size()) {
        const Rule& r = m_snap->rules.rules[row->rule.get()];
        lines << tr("rule %1: %2 → %3").arg(row->rule.get() + 1).arg(QString::fromStdString(r.pattern),
                     r.drop ? tr("(drop)") : QString::fromStdString(r.replacement));
    }
    return lines.join(QLatin1Char('\n'));
}

QVariant AlignedTreeModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || !m_snap)
        return {};
    const Node& n = m_nodes[static_cast<size_t>(nodeOf(index))];
    const int column = index.column();
    const bool nameColumn = column == NameA || column == NameB;
    const bool sideA = column <= SizeA;
    if (column == ValuesColumn)
        return valuesCell(n, role);
    switch (role) {
    case Qt::DisplayRole:
        return display(n, column);
    case Qt::DecorationRole: {
        if (!nameColumn || (n.kind != NodeKind::Inner && n.kind != NodeKind::Leaf && n.kind != NodeKind::FoldedMember))
            return {};
        const bool present = n.kind == NodeKind::Inner ? (sideA ? n.entriesA : n.entriesB) > 0 : entryOf(n, sideA) != nullptr;
        if (!present || !m_snap->complete())
            return {};
        return statusIcons()[n.worst];
    }
    case Qt::BackgroundRole: {
        if (isGap(n, column))
            return QBrush(QGuiApplication::palette().color(QPalette::Mid), Qt::BDiagPattern);
        if (n.kind != NodeKind::Leaf && n.kind != NodeKind::FoldedMember)
            return {};
        if (!m_snap->complete())
            return {};
        const QColor c = StatusStyle::tint(static_cast<RowStatus>(n.worst), QGuiApplication::palette());
        return c.isValid() ? QVariant(c) : QVariant();
    }
    case Qt::ForegroundRole:
        if (isGap(n, column))
            return QGuiApplication::palette().color(QPalette::PlaceholderText);
        if (nameColumn && n.wrapper)
            return StatusStyle::wrapperColor(QGuiApplication::palette());
        if (column == StatusColumn && m_snap->complete() && n.worst != static_cast<uint8_t>(RowStatus::Match))
            return StatusStyle::color(static_cast<RowStatus>(n.worst), QGuiApplication::palette());
        return {};
    case Qt::FontRole:
        if (nameColumn && n.wrapper) {
            QFont f;
            f.setBold(true);
            f.setItalic(true);
            return f;
        }
        return {};
    case Qt::ToolTipRole:
        return tooltip(n);
    case Qt::TextAlignmentRole:
        if (column == SizeA || column == SizeB)
            return QVariant(Qt::AlignRight | Qt::AlignVCenter);
        return {};
    case StatusRole:
        return static_cast<int>(n.worst);
    case ReasonRole: {
        const DiffRow* row = rowOf(n);
        return static_cast<int>(row ? row->reason : Reason::None);
    }
    case KindRole:
        return static_cast<int>(n.kind);
    case PathRole:
        return path(index);
    case DifferenceRole:
        return isDifference(n.worst);
    case GapRole:
        return isGap(n, column);
    case PairRole: {
        const DiffRow* row = rowOf(n);
        return row && lineRows(*row) > 0;
    }
    case SuggestionRole: {
        const DiffRow* row = rowOf(n);
        return row ? static_cast<int>(row->suggestion.number()) : -1;
    }
    case HighlightRole: {
        const DiffRow* row = rowOf(n);
        if (!nameColumn || !row || lineRows(*row) == 0)
            return {};
        return highlightSpans(pairName(n, sideA), pairName(n, !sideA));
    }
    case CopyTextRole: {
        const DiffRow* row = rowOf(n);
        if (!row)
            return path(index);
        const Entry* a = entryOf(n, true);
        const Entry* b = entryOf(n, false);
        if (a && b && a->name != b->name)
            return QStringLiteral("%1 -> %2").arg(QString::fromStdString(a->name), QString::fromStdString(b->name));
        return QString::fromStdString((a ? a : b)->name);
    }
    default:
        return {};
    }
}

QVariant AlignedTreeModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case NameA:
        return tr("Checkpoint (A)");
    case NameB:
        return tr("Model (B)");
    case ShapeA:
    case ShapeB:
        return tr("Shape");
    case DTypeA:
    case DTypeB:
        return tr("DType");
    case SizeA:
    case SizeB:
        return tr("Params · Bytes");
    case StatusColumn:
        return tr("Status");
    case ValuesColumn:
        return tr("Values");
    default:
        return {};
    }
}

} // namespace sl::gui
