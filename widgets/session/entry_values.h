#pragma once
// The values of the selected row's tensors: statistics, a histogram and a heatmap thumbnail of A's and B's
// entry, read off the UI thread when a row is selected (a newer selection cancels the older read) and cached
// per entry while the same sources are open. The numbers come from core/values, the same code as
// `statelens stats`; views/values_panel.h shows them.

#include "session/diff_snapshot.h"
#include "session/latest_job.h"
#include "values/tensor_stats.h"
#include "values/thumbnail.h"

#include <QHash>
#include <QObject>

#include <memory>
#include <optional>
#include <string>

namespace sl::gui {

class EntryValues : public QObject {
    Q_OBJECT
public:
    explicit EntryValues(QObject* parent = nullptr);

    // One side's values; `why` says why there are no stats (no bytes, an unsupported dtype, ...).
    struct Side {
        std::optional<values::TensorStats> stats;
        std::string why;
        std::optional<values::Thumbnail> thumbnail;
    };
    // The selected row's entries (either may be null); `snapshot` keeps their sources alive.
    struct Selection {
        std::shared_ptr<const DiffSnapshot> snapshot;
        const Entry* a = nullptr;
        const Entry* b = nullptr;
        bool empty() const { return !snapshot || (!a && !b); }
    };

    // Answers from the cache at once (ready), or starts reading (reading, then ready or failed).
    void select(Selection selection);
    bool isBusy() const { return m_job.running(); }

    static constexpr unsigned kBins = 32; // histogram bins
    static constexpr int kThumbSide = 96; // heatmap cells on the longer side

signals:
    void cleared(); // nothing is selected
    void reading();
    void ready(const Selection& selection, std::shared_ptr<const Side> a, std::shared_ptr<const Side> b);
    void failed(); // the selection's bytes could not be read at all

private:
    struct Answer {
        Selection selection;
        std::shared_ptr<const Side> a, b; // null when cancelled or unreadable
    };
    void finished(Answer answer);
    std::shared_ptr<const Side> cached(const Entry* e) const;

    Selection m_current;
    QHash<const Entry*, std::shared_ptr<const Side>> m_cache; // entries of m_cacheSources' sources
    std::pair<const Source*, const Source*> m_cacheSources { nullptr, nullptr };
    std::shared_ptr<const DiffSnapshot> m_cacheHold; // keeps the cached entries' sources (and addresses) alive
    LatestJob<Answer> m_job { this }; // declared last: its destructor waits for a run still reading
};

} // namespace sl::gui
