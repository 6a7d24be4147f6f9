#include "details_panel.h"

#include "models/aligned_tree_model.h"
#include "report/source_report.h"
#include "style/status_style.h"

namespace sl::gui {

namespace {

QString esc(const std::string& s) { return QString::fromStdString(s).toHtmlEscaped(); }
QString esc(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())).toHtmlEscaped(); }

QString dimsText(const Dims& d) { return esc(shapeToString(d)); }

void row(QString& html, const QString& key, const QString& value)
{
    html += QStringLiteral("<tr><td style='padding-right:10px'><i>%1</i></td><td>%2</td></tr>").arg(key, value);
}

QString entryHtml(const Entry& e, const Source& s, const QString& side)
{
    QString h = QStringLiteral("<h4>%1: <code>%2</code></h4><table>").arg(side, esc(e.name));
    row(h, QObject::tr("kind"), esc(entryKindName(e.kind)) + (e.typeName.empty() ? QString() : QStringLiteral(" (%1)").arg(esc(e.typeName))));
    if (e.kind == EntryKind::Object) {
        row(h, QObject::tr("value"), QStringLiteral("<code>%1</code>").arg(esc(e.value)));
    } else {
        row(h, QObject::tr("shape"), e.shapeKnown ? dimsText(e.shape) : QObject::tr("unknown"));
        row(h, QObject::tr("dtype"), esc(dtypeName(e.dtype)));
        row(h, QObject::tr("elements"), QString::fromStdString(humanCount(e.numel())) + QStringLiteral(" (%1)").arg(e.numel()));
        row(h, QObject::tr("bytes"), QString::fromStdString(humanBytes(e.nbytes())));
    }
    if (e.isParameter || e.requiresGrad)
        row(h, QObject::tr("parameter"), e.requiresGrad ? QObject::tr("yes, requires_grad") : QObject::tr("yes"));
    if (!e.device.empty())
        row(h, QObject::tr("device"), esc(e.device));
    const TensorLocation& loc = e.location;
    if (loc.kind != TensorLocation::Kind::None) {
        QString where = esc(locationKindName(loc.kind));
        if (loc.file >= 0 && static_cast<size_t>(loc.file) < s.files.size())
            where += QStringLiteral(" · %1").arg(esc(s.files[static_cast<size_t>(loc.file)]));
        row(h, QObject::tr("bytes at"), where + QStringLiteral(" · offset %1 · length %2").arg(loc.offset).arg(loc.length));
    }
    if (!loc.storageId.empty()) {
        row(h, QObject::tr("storage"), QStringLiteral("%1 · %2 · element offset %3")
                                           .arg(esc(loc.storageId), QString::fromStdString(humanBytes(loc.storageNbytes)))
                                           .arg(loc.storageOffset));
        // Tied weights and views: other keys over the same storage.
        QStringList tied;
        for (const Entry& other : s.entries)
            if (&other != &e && other.location.sharesStorageWith(loc)) {
                tied << QStringLiteral("<code>%1</code>").arg(esc(other.name));
                if (tied.size() == 8)
                    break;
            }
        if (!tied.isEmpty())
            row(h, QObject::tr("shares storage with"), tied.join(QStringLiteral(", ")));
    }
    if (!loc.strides.empty())
        row(h, QObject::tr("strides"), dimsText(loc.strides));
    if (e.sharding) {
        const Sharding& sh = *e.sharding;
        row(h, QObject::tr("sharding"), esc(shardingKindName(sh.kind)));
        if (!sh.localShape.empty())
            row(h, QObject::tr("local shape"), dimsText(sh.localShape));
        if (!sh.placements.empty()) {
            QStringList p;
            for (const auto& x : sh.placements)
                p << esc(x);
            row(h, QObject::tr("placements"), p.join(QStringLiteral(", ")));
        }
        if (!sh.meshShape.empty()) {
            QStringList names;
            for (const auto& x : sh.meshDimNames)
                names << esc(x);
            row(h, QObject::tr("mesh"), dimsText(sh.meshShape) + (names.isEmpty() ? QString() : QStringLiteral(" (%1)").arg(names.join(QStringLiteral(", ")))));
        }
        if (!sh.chunks.empty()) {
            QString chunks;
            size_t shown = 0;
            for (const auto& c : sh.chunks) {
                if (shown++ == 16) {
                    chunks += QObject::tr("… %1 more").arg(sh.chunks.size() - 16);
                    break;
                }
                QString file = c.file >= 0 && static_cast<size_t>(c.file) < s.files.size() ? esc(s.files[static_cast<size_t>(c.file)]) : QString();
                chunks += QStringLiteral("%1 offsets %2 sizes %3 %4<br/>").arg(esc(c.label), dimsText(c.offsets), dimsText(c.sizes), file);
            }
            row(h, QObject::tr("chunks (%1)").arg(sh.chunks.size()), chunks);
        }
    }
    if (e.quantization) {
        const Quantization& q = *e.quantization;
        QString params;
        for (const auto& [k, v] : q.params)
            params += QStringLiteral(" · %1=%2").arg(esc(k), esc(v));
        row(h, QObject::tr("quantization"), esc(q.scheme) + QStringLiteral(" · stored as %1").arg(esc(dtypeName(q.storageDType))) + params);
    }
    if (!e.parts.empty()) {
        QString parts;
        for (const Entry& p : e.parts)
            parts += QStringLiteral("<code>%1</code> %2 %3<br/>").arg(esc(p.name), dimsText(p.shape), esc(dtypeName(p.dtype)));
        row(h, QObject::tr("parts"), parts);
    }
    for (const auto& [k, v] : e.attributes)
        row(h, esc(k), esc(v));
    h += QStringLiteral("</table>");
    return h;
}

} // namespace

DetailsPanel::DetailsPanel(QWidget* parent)
    : QTextBrowser(parent)
{
    setOpenLinks(false);
    setPlaceholderText(tr("Select a row to see everything known about it."));
    connect(this, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
        if (url.scheme() == QLatin1String("accept"))
            emit acceptRequested(url.path().toULongLong());
    });
}

void DetailsPanel::showIndex(const AlignedTreeModel* model, const QModelIndex& index)
{
    auto snap = model ? model->snapshot() : nullptr;
    if (!snap || !index.isValid()) {
        clear();
        return;
    }
    QString html;
    if (const Entry* part = model->partEntry(index)) {
        const bool a = model->kind(index) == AlignedTreeModel::NodeKind::PartA;
        setHtml(entryHtml(*part, a ? *snap->a : *snap->b, a ? tr("A part") : tr("B part")));
        return;
    }
    const auto kind = model->kind(index);
    if (kind == AlignedTreeModel::NodeKind::ChunkA || kind == AlignedTreeModel::NodeKind::ChunkB) {
        showIndex(model, index.parent()); // the sharded entry, whose chunks the panel lists
        return;
    }
    const auto rows = model->diffRows(index);
    if (rows.empty()) {
        html = QStringLiteral("<h4><code>%1</code></h4><p>%2</p>")
                   .arg(model->path(index).toHtmlEscaped(), index.siblingAtColumn(AlignedTreeModel::StatusColumn).data().toString().toHtmlEscaped());
        html += QStringLiteral("<p>A: %1 · %2</p><p>B: %3 · %4</p>")
                    .arg(index.siblingAtColumn(AlignedTreeModel::ShapeA).data().toString(), index.siblingAtColumn(AlignedTreeModel::SizeA).data().toString(),
                        index.siblingAtColumn(AlignedTreeModel::ShapeB).data().toString(), index.siblingAtColumn(AlignedTreeModel::SizeB).data().toString());
        setHtml(html);
        return;
    }
    const DiffRow& r = snap->diff.rows[rows.front()];
    // A pair's line shows its partner on the other side (the first of a many-to-one line's many).
    const bool line = snap->lines.count(rows.front()) > 0;
    const DiffRow& rA = snap->diff.rows[snap->lines.rowA(snap->diff, rows.front())];
    const DiffRow& rB = snap->diff.rows[snap->lines.rowB(snap->diff, rows.front())];
    if (r.suggestion.valid() && r.suggestion.get() < snap->suggestions.size())
        html += QStringLiteral("<p><a href='accept:%1'><b>%2</b></a> — %3</p>")
                    .arg(rows.front())
                    .arg(tr("Accept suggestion %1").arg(r.suggestion.get() + 1), esc(snap->suggestions[r.suggestion.get()].title));
    if (line)
        html += QStringLiteral("<p>%1 <code>%2</code> → <code>%3</code>%4</p>")
                    .arg(tr("Pair:"), esc(rowKeyA(rA, *snap->a)), esc(rowKeyB(rB, *snap->b)),
                        snap->lines.count(rows.front()) > 1 ? tr(" and %1 more").arg(snap->lines.count(rows.front()) - 1) : QString());
    if (rows.size() > 1)
        html += QStringLiteral("<p><b>%1</b></p>").arg(tr("%1 rows folded; the first is shown.").arg(rows.size()));
    const QColor c = StatusStyle::color(r.status, palette());
    if (line) { // both of its rows fail the load until a rule renames one onto the other
        html += QStringLiteral("<h3 style='color:%1'>%2</h3>").arg(c.name(), tr("unexpected ↔ missing: a pair").toHtmlEscaped());
        html += QStringLiteral("<p>%1</p>").arg(tr("The checkpoint's key and the model's key correspond, but their names differ: a strict load "
                                                   "reports one as unexpected and the other as missing until a rule renames it.")
                                                    .toHtmlEscaped());
    } else {
        html += QStringLiteral("<h3 style='color:%1'>%2</h3>").arg(c.name(), StatusStyle::label(r.status).toHtmlEscaped());
        html += QStringLiteral("<p>%1</p>").arg(StatusStyle::description(r.status).toHtmlEscaped());
    }
    if (r.reason != Reason::None)
        html += QStringLiteral("<p><b>%1</b>: %2</p>").arg(StatusStyle::label(r.reason).toHtmlEscaped(), esc(r.explanation));
    if (r.rule.valid() && r.rule.get() < snap->rules.rules.size()) {
        const Rule& rule = snap->rules.rules[r.rule.get()];
        html += QStringLiteral("<p>%1 <code>%2</code> → <code>%3</code>%4</p>")
                    .arg(tr("Rule %1:").arg(r.rule.get() + 1), esc(rule.pattern), rule.drop ? tr("(drop)") : esc(rule.replacement),
                        rule.note.empty() ? QString() : QStringLiteral(" — ") + esc(rule.note));
    }
    if (r.a.valid() && !r.mapped.empty() && rowKeyA(r, *snap->a) != r.mapped)
        html += QStringLiteral("<p>%1 <code>%2</code></p>").arg(tr("A's name after the rules:"), esc(r.mapped));
    // A row that is one key of a quantized group shows the group too: the key alone is codes or scales.
    for (bool sideA : { true, false }) {
        const DiffRow& row = sideA ? rA : rB;
        const Entry* e = sideA ? rowEntryA(row, *snap->a) : rowEntryB(row, *snap->b);
        if (!e)
            continue;
        const Source& s = sideA ? *snap->a : *snap->b;
        const QString label = sideA ? tr("A") : tr("B");
        if ((sideA ? row.aPart : row.bPart).valid()) {
            Entry key = *e;
            key.name = sideA ? rowKeyA(row, s) : rowKeyB(row, s);
            html += entryHtml(key, s, label);
            html += entryHtml(s.entries[sideA ? row.a.get() : row.b.get()], s, tr("%1's group").arg(label));
        } else {
            html += entryHtml(*e, s, label);
        }
    }
    setHtml(html);
}

} // namespace sl::gui
