#include "values_panel.h"

#include "report/source_report.h"
#include "values/init_hints.h"

#include <QHBoxLayout>
#include <QImage>
#include <QLabel>
#include <QPainter>
#include <QPixmap>
#include <QRegularExpression>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

namespace sl::gui {

namespace {

QString num(double v) { return QString::number(v, 'g', 6); }

// Blue for negative, white for zero, red for positive, scaled to the larger magnitude.
QImage heatmap(const values::Thumbnail& t)
{
    QImage img(t.cols, t.rows, QImage::Format_RGB32);
    const float scale = std::max(std::fabs(t.min), std::fabs(t.max));
    for (int r = 0; r < t.rows; ++r)
        for (int c = 0; c < t.cols; ++c) {
            const float v = t.cells[static_cast<size_t>(r) * static_cast<size_t>(t.cols) + static_cast<size_t>(c)];
            QRgb px;
            if (!std::isfinite(v)) {
                px = qRgb(128, 128, 128);
            } else {
                const float x = scale > 0 ? std::clamp(v / scale, -1.0f, 1.0f) : 0.0f;
                const int fade = static_cast<int>(255 * (1 - std::fabs(x)));
                px = x >= 0 ? qRgb(255, fade, fade) : qRgb(fade, fade, 255);
            }
            img.setPixel(c, r, px);
        }
    return img;
}

} // namespace

HistogramView::HistogramView(QWidget* parent)
    : QWidget(parent)
{
    setMinimumHeight(110);
}

void HistogramView::setSeries(std::vector<Series> series)
{
    m_series = std::move(series);
    update();
}

void HistogramView::paintEvent(QPaintEvent*)
{
    QPainter p(this);
    p.fillRect(rect(), palette().color(QPalette::Base));
    if (m_series.empty())
        return;
    double lo = m_series[0].min, hi = m_series[0].max;
    uint64_t peak = 1;
    for (const Series& s : m_series) {
        lo = std::min(lo, s.min);
        hi = std::max(hi, s.max);
        for (uint64_t c : s.counts)
            peak = std::max(peak, c);
    }
    const QRectF plot = QRectF(rect()).adjusted(6, 6, -6, -20);
    const double span = hi > lo ? hi - lo : 1.0;
    auto xOf = [&](double v) { return plot.left() + (v - lo) / span * plot.width(); };
    for (const Series& s : m_series) {
        QColor fill = s.color;
        fill.setAlpha(110);
        const double width = (s.max - s.min) / static_cast<double>(std::max<size_t>(s.counts.size(), 1));
        for (size_t b = 0; b < s.counts.size(); ++b) {
            const double left = s.max > s.min ? xOf(s.min + width * static_cast<double>(b)) : xOf(s.min) - 2;
            const double right = s.max > s.min ? xOf(s.min + width * static_cast<double>(b + 1)) : xOf(s.min) + 2;
            const double h = plot.height() * static_cast<double>(s.counts[b]) / static_cast<double>(peak);
            p.fillRect(QRectF(left, plot.bottom() - h, std::max(1.0, right - left), h), fill);
        }
    }
    p.setPen(palette().color(QPalette::Text));
    p.drawLine(plot.bottomLeft(), plot.bottomRight());
    p.drawText(QRectF(plot.left(), plot.bottom() + 2, plot.width(), 16), Qt::AlignLeft, num(lo));
    p.drawText(QRectF(plot.left(), plot.bottom() + 2, plot.width(), 16), Qt::AlignRight, num(hi));
    int x = static_cast<int>(plot.left()) + 4;
    for (const Series& s : m_series) {
        p.fillRect(QRect(x, static_cast<int>(plot.top()) + 2, 10, 10), s.color);
        p.drawText(QPoint(x + 14, static_cast<int>(plot.top()) + 12), s.label);
        x += 30 + p.fontMetrics().horizontalAdvance(s.label);
    }
}

ValuesPanel::ValuesPanel(EntryValues* values, QWidget* parent)
    : QWidget(parent)
    , m_text(new QLabel(this))
    , m_histogram(new HistogramView(this))
    , m_heatA(new QLabel(this))
    , m_heatB(new QLabel(this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(2, 2, 2, 2);
    m_text->setTextFormat(Qt::RichText);
    m_text->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_text->setWordWrap(true);
    m_text->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    layout->addWidget(m_text);
    layout->addWidget(m_histogram, 1);
    auto* heat = new QHBoxLayout;
    for (QLabel* l : { m_heatA, m_heatB }) {
        l->setAlignment(Qt::AlignCenter);
        heat->addWidget(l);
    }
    layout->addLayout(heat);
    clear();
    connect(values, &EntryValues::cleared, this, &ValuesPanel::clear);
    connect(values, &EntryValues::reading, this, [this] { m_text->setText(tr("Reading values…")); });
    connect(values, &EntryValues::failed, this, [this] { m_text->setText(tr("The values could not be read.")); });
    connect(values, &EntryValues::ready, this, [this](const EntryValues::Selection& r,
                                                   std::shared_ptr<const EntryValues::Side> a,
                                                   std::shared_ptr<const EntryValues::Side> b) {
        present(r, a, b);
        emit computed();
    });
}

void ValuesPanel::clear()
{
    m_text->setText(tr("Select a tensor to see its values."));
    m_histogram->setSeries({});
    m_heatA->clear();
    m_heatB->clear();
}

void ValuesPanel::present(const EntryValues::Selection& r, const std::shared_ptr<const EntryValues::Side>& a,
    const std::shared_ptr<const EntryValues::Side>& b)
{
    QString html = QStringLiteral("<table cellspacing='4'><tr><th></th>");
    const QColor colA(0x1e, 0x88, 0xe5), colB(0xfb, 0x8c, 0x00);
    struct Side {
        const Entry* e;
        const EntryValues::Side* v;
        QString name;
        QColor color;
    };
    const Side sides[] = { { r.a, a.get(), tr("A"), colA }, { r.b, b.get(), tr("B"), colB } };
    for (const Side& s : sides)
        if (s.e)
            html += QStringLiteral("<th style='color:%1'>%2</th>").arg(s.color.name(), s.name);
    html += QStringLiteral("</tr>");
    auto row = [&](const QString& label, auto&& value) {
        html += QStringLiteral("<tr><td><i>%1</i></td>").arg(label);
        for (const Side& s : sides)
            if (s.e)
                html += QStringLiteral("<td>%1</td>").arg(s.v && s.v->stats ? value(*s.v->stats) : QStringLiteral("—"));
        html += QStringLiteral("</tr>");
    };
    row(tr("min"), [](const values::TensorStats& t) { return t.finite ? num(t.min) : QStringLiteral("—"); });
    row(tr("max"), [](const values::TensorStats& t) { return t.finite ? num(t.max) : QStringLiteral("—"); });
    row(tr("mean"), [](const values::TensorStats& t) { return t.finite ? num(t.mean) : QStringLiteral("—"); });
    row(tr("std"), [](const values::TensorStats& t) { return t.std() ? num(*t.std()) : QStringLiteral("—"); });
    row(tr("NaN / Inf"), [](const values::TensorStats& t) { return QStringLiteral("%1 / %2").arg(t.nan).arg(t.posInf + t.negInf); });
    row(tr("zeros"), [](const values::TensorStats& t) { return QString::number(t.zeros); });
    row(tr("xxh3"), [](const values::TensorStats& t) { return QStringLiteral("<code>%1</code>").arg(t.hash, 16, 16, QLatin1Char('0')); });
    html += QStringLiteral("</table>");
    for (const Side& s : sides) {
        if (s.e && s.v && !s.v->stats)
            html += QStringLiteral("<p>%1: %2</p>").arg(s.name, QString::fromStdString(s.v->why).toHtmlEscaped());
        else if (s.e && s.v && !s.v->stats->note.empty()) // how the values were made (dequantized, ...)
            html += QStringLiteral("<p><small>%1: %2</small></p>").arg(s.name, QString::fromStdString(s.v->stats->note).toHtmlEscaped());
    }
    if (r.a && r.b && a->stats && b->stats)
        html += a->stats->hash == b->stats->hash && r.a->dtype == r.b->dtype ? tr("<p><b>Same elements on both sides.</b></p>") : QString();
    m_text->setText(html);

    std::vector<HistogramView::Series> series;
    for (const Side& s : sides)
        if (s.e && s.v && s.v->stats && !s.v->stats->histogram.empty())
            series.push_back({ s.v->stats->histogram, s.v->stats->min, s.v->stats->max, s.color, s.name });
    m_histogram->setSeries(std::move(series));
    QLabel* heat[] = { m_heatA, m_heatB };
    for (int i = 0; i < 2; ++i) {
        const Side& s = sides[i];
        if (s.e && s.v && s.v->thumbnail) {
            const QImage img = heatmap(*s.v->thumbnail);
            heat[i]->setPixmap(QPixmap::fromImage(img.scaled(160, 160, Qt::KeepAspectRatio, Qt::FastTransformation)));
            heat[i]->setToolTip(tr("%1: %2 averaged into %3 x %4 blocks (blue negative, red positive)")
                                    .arg(s.name, QString::fromStdString(shapeToString(s.e->shape)))
                                    .arg(s.v->thumbnail->rows)
                                    .arg(s.v->thumbnail->cols));
        } else {
            heat[i]->clear();
        }
    }
}

QString ValuesPanel::summaryText() const
{
    QString plain = m_text->text();
    plain.replace(QStringLiteral("</td>"), QStringLiteral(" "));
    plain.replace(QStringLiteral("</tr>"), QStringLiteral("\n"));
    plain.remove(QRegularExpression(QStringLiteral("<[^>]*>")));
    return plain;
}

} // namespace sl::gui
