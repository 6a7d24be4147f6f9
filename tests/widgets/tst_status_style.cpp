// Status colours must read on both light and dark palettes: each status colour against the view's base
// colour keeps a WCAG contrast ratio of at least 3:1 (what icons and bold text need), and the seven
// statuses stay distinguishable from one another.

#include "style/status_style.h"

#include <QPalette>
#include <QTest>

#include <cmath>

using namespace sl;
using namespace sl::gui;

namespace {

double luminance(const QColor& c)
{
    auto channel = [](double v) { return v <= 0.03928 ? v / 12.92 : std::pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * channel(c.redF()) + 0.7152 * channel(c.greenF()) + 0.0722 * channel(c.blueF());
}

double contrast(const QColor& x, const QColor& y)
{
    double a = luminance(x), b = luminance(y);
    if (a < b)
        std::swap(a, b);
    return (a + 0.05) / (b + 0.05);
}

QPalette paletteWithBase(const QColor& base)
{
    QPalette p;
    p.setColor(QPalette::Base, base);
    p.setColor(QPalette::Window, base);
    return p;
}

} // namespace

class TestStatusStyle : public QObject {
    Q_OBJECT
private slots:
    void coloursReadOnLightAndDarkPalettes_data()
    {
        QTest::addColumn<QColor>("base");
        QTest::newRow("light") << QColor(Qt::white);
        QTest::newRow("light grey") << QColor(0xf5, 0xf5, 0xf5);
        QTest::newRow("dark") << QColor(0x1e, 0x1e, 0x1e);
        QTest::newRow("dark grey") << QColor(0x2d, 0x2d, 0x30);
    }
    void coloursReadOnLightAndDarkPalettes()
    {
        QFETCH(QColor, base);
        const QPalette p = paletteWithBase(base);
        for (size_t s = 0; s < kRowStatusCount; ++s) {
            const QColor c = StatusStyle::color(static_cast<RowStatus>(s), p);
            QVERIFY2(contrast(c, base) >= 3.0, qPrintable(QStringLiteral("%1 on %2: %3").arg(StatusStyle::label(static_cast<RowStatus>(s)), base.name()).arg(contrast(c, base))));
        }
        QVERIFY(contrast(StatusStyle::wrapperColor(p), base) >= 3.0);
        // Every status has its own colour.
        for (size_t s = 0; s < kRowStatusCount; ++s)
            for (size_t t = s + 1; t < kRowStatusCount; ++t)
                QVERIFY(StatusStyle::color(static_cast<RowStatus>(s), p) != StatusStyle::color(static_cast<RowStatus>(t), p));
    }

    void everyStatusAndReasonHasWordsAndAnIcon()
    {
        for (size_t s = 0; s < kRowStatusCount; ++s) {
            QVERIFY(!StatusStyle::label(static_cast<RowStatus>(s)).isEmpty());
            QVERIFY(!StatusStyle::description(static_cast<RowStatus>(s)).isEmpty());
            QVERIFY(!StatusStyle::icon(static_cast<RowStatus>(s), QPalette()).isNull());
        }
        for (int r = 1; r <= static_cast<int>(kLastReason); ++r) {
            QVERIFY(!StatusStyle::label(static_cast<Reason>(r)).isEmpty());
            QVERIFY(!StatusStyle::description(static_cast<Reason>(r)).isEmpty());
        }
        // Severity orders failures above harmless rows.
        QVERIFY(statusSeverity(RowStatus::ShapeMismatch) > statusSeverity(RowStatus::DtypeMismatch));
        QVERIFY(statusSeverity(RowStatus::Missing) > statusSeverity(RowStatus::Renamed));
        QCOMPARE(statusSeverity(RowStatus::Match), 0);
    }
};

QTEST_MAIN(TestStatusStyle)
#include "tst_status_style.moc"
