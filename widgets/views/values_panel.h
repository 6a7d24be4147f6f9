#pragma once
// The values of the selected row, beside its details: statistics of A's and B's tensors, both histograms
// overlaid on one axis, and a heatmap thumbnail of each 2-D (or wider) weight. Computed in the background
// when a row is selected (a newer selection cancels the older computation), cached per entry, never on the
// UI thread. The numbers come from core/values, the same code as `statelens stats`.

#include "session/diff_snapshot.h"
#include "session/latest_job.h"
#include "values/tensor_stats.h"
#include "values/thumbnail.h"

#include <QHash>
#include <QWidget>

#include <memory>
#include <optional>

class QLabel;

namespace sl {
class LoadControl;
}

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
    explicit ValuesPanel(QWidget* parent = nullptr);
    ~ValuesPanel() override;

    // The selected row's entries (either may be null); `snapshot` keeps their sources alive.
    void showEntries(std::shared_ptr<const DiffSnapshot> snapshot, const Entry* a, const Entry* b);
    bool isBusy() const { return m_job.running(); }
    QString summaryText() const; // what the panel says, for tests and copying
    HistogramView* histogram() const { return m_histogram; }

    struct SideValues {
        std::optional<values::TensorStats> stats;
        std::string why; // when there are no stats
        std::optional<values::Thumbnail> thumbnail;
    };

signals:
    void computed();

private:
    struct Request {
        std::shared_ptr<const DiffSnapshot> snapshot;
        const Entry* a = nullptr;
        const Entry* b = nullptr;
    };
    struct Answer {
        Request request;
        std::shared_ptr<const SideValues> a, b; // null when cancelled
    };
    void finished(Answer answer);
    void present(const Request& r, const std::shared_ptr<const SideValues>& a, const std::shared_ptr<const SideValues>& b);
    std::shared_ptr<const SideValues> cached(const Entry* e) const;

    QLabel* m_text;
    HistogramView* m_histogram;
    QLabel* m_heatA;
    QLabel* m_heatB;
    Request m_current;
    QHash<const Entry*, std::shared_ptr<const SideValues>> m_cache; // entries of m_cacheSources' sources
    std::pair<const Source*, const Source*> m_cacheSources { nullptr, nullptr };
    std::shared_ptr<const DiffSnapshot> m_cacheHold; // keeps the cached entries' sources (and addresses) alive
    LatestJob<Answer> m_job { this }; // declared last: its destructor waits for a run still reading
};

} // namespace sl::gui
