#pragma once
// The values of the selected row, beside its details: statistics of A's and B's tensors, both histograms
// overlaid on one axis, and a heatmap thumbnail of each 2-D (or wider) weight. It shows what
// session/entry_values.h reads in the background; it reads nothing itself.

#include "session/entry_values.h"

#include <QWidget>

#include <memory>

class QLabel;

namespace sl::gui {

// One or two histograms on a shared value axis: each bar spans its own bin's range, so two tensors with
// different ranges still overlay faithfully.
class HistogramView : public QWidget {
    Q_OBJECT
public:
    explicit HistogramView(QWidget* parent = nullptr);
    struct Series {
        std::vector<uint64_t> counts;
        double min = 0;
        double max = 0;
        QColor color;
        QString label;
    };
    void setSeries(std::vector<Series> series);
    const std::vector<Series>& series() const { return m_series; }
    QSize sizeHint() const override { return { 320, 140 }; }

protected:
    void paintEvent(QPaintEvent* event) override;

private:
    std::vector<Series> m_series;
};

class ValuesPanel : public QWidget {
    Q_OBJECT
public:
    explicit ValuesPanel(EntryValues* values, QWidget* parent = nullptr);

    QString summaryText() const; // what the panel says, for tests and copying
    HistogramView* histogram() const { return m_histogram; }

signals:
    void computed(); // the selection's values are shown

private:
    void clear();
    void present(const EntryValues::Selection& r, const std::shared_ptr<const EntryValues::Side>& a,
        const std::shared_ptr<const EntryValues::Side>& b);

    QLabel* m_text;
    HistogramView* m_histogram;
    QLabel* m_heatA;
    QLabel* m_heatB;
};

} // namespace sl::gui
