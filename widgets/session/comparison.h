#pragma once
// What the window compares: the two sources and the rule document. Any change to either starts a new diff
// in the background; the newest finished one is published as a DiffSnapshot, then suggestions for it are
// computed, also in the background, and the snapshot is published again with the pairs they would resolve
// marked on its rows (same generation, same rows). Runs never pile up: while one is running, further changes only mark
// the comparison stale, and one more run follows. (Not a LatestJob, session/latest_job.h: a diff cannot be
// cancelled half-way, so starting the next one beside it would only make both slower while a user types.)

#include "session/diff_snapshot.h"
#include "suggest/suggestions.h"

#include <QFutureWatcher>
#include <QObject>

#include <memory>
#include <vector>

namespace sl::gui {

class RuleDocument;

enum class Side { A, B };

class Comparison : public QObject {
    Q_OBJECT
public:
    explicit Comparison(RuleDocument* rules, QObject* parent = nullptr);
    ~Comparison() override;

    void setSource(Side side, std::shared_ptr<const Source> source); // null closes the side
    std::shared_ptr<const Source> source(Side side) const { return side == Side::A ? m_a : m_b; }
    RuleDocument* rules() const { return m_rules; }

    // The newest finished diff (never null; empty until something is open).
    std::shared_ptr<const DiffSnapshot> snapshot() const { return m_snapshot; }
    // Suggestions for snapshot() (empty while they are being computed).
    const std::vector<Suggestion>& suggestions() const { return m_suggestions; }
    bool suggestionsCurrent() const { return m_suggestionsFor == m_snapshot->generation; }
    // A diff or a suggestion run is pending or running.
    bool isBusy() const;

signals:
    void snapshotChanged();
    void suggestionsChanged();
    void busyChanged(bool busy);

private:
    void schedule();
    void startDiff();
    void diffFinished();
    void startSuggestions();
    void suggestionsFinished();
    void updateBusy();

    RuleDocument* m_rules;
    std::shared_ptr<const Source> m_a;
    std::shared_ptr<const Source> m_b;
    std::shared_ptr<const DiffSnapshot> m_snapshot;
    std::vector<Suggestion> m_suggestions;
    uint64_t m_generation = 0;
    uint64_t m_suggestionsFor = 0;
    bool m_diffRunning = false;
    bool m_suggestRunning = false;
    bool m_diffStale = false;
    bool m_suggestStale = false;
    bool m_wasBusy = false;
    QFutureWatcher<std::shared_ptr<const DiffSnapshot>> m_diffWatcher;
    QFutureWatcher<std::shared_ptr<const DiffSnapshot>> m_suggestWatcher; // the snapshot with pending pairs
};

} // namespace sl::gui
