#include "comparison.h"

#include "session/rule_document.h"

#include <QElapsedTimer>
#include <QtConcurrent/QtConcurrentRun>

namespace sl::gui {

std::shared_ptr<const DiffSnapshot> buildSnapshot(std::shared_ptr<const Source> a, std::shared_ptr<const Source> b,
    const RuleSet& rules, uint64_t generation)
{
    QElapsedTimer timer;
    timer.start();
    auto s = std::make_shared<DiffSnapshot>();
    s->hasA = a != nullptr;
    s->hasB = b != nullptr;
    s->a = a ? std::move(a) : std::make_shared<const Source>();
    s->b = b ? std::move(b) : std::make_shared<const Source>();
    s->generation = generation;
    // With one side open there is nothing to explain or check: every row would read "unexpected" or "missing".
    ComparisonOptions options;
    options.explain = s->complete();
    options.checkRules = s->complete();
    options.onMatchLimit = ComparisonOptions::OnMatchLimit::DisableRule;
    static_cast<ComparisonResult&>(*s) = compareSources(*s->a, *s->b, rules, options);
    s->lines = rowLines(s->diff);
    s->folded = foldRows(s->diff, *s->a, *s->b, s->lines);
    s->milliseconds = static_cast<double>(timer.nsecsElapsed()) / 1e6;
    return s;
}

std::shared_ptr<const DiffSnapshot> withSuggestions(const DiffSnapshot& snapshot)
{
    auto s = std::make_shared<DiffSnapshot>(snapshot);
    addSuggestions(*s, *s->a, *s->b);
    s->lines = rowLines(s->diff);
    s->folded = foldRows(s->diff, *s->a, *s->b, s->lines);
    return s;
}

Comparison::Comparison(RuleDocument* rules, QObject* parent)
    : QObject(parent)
    , m_rules(rules)
    , m_snapshot(buildSnapshot(nullptr, nullptr, {}, 0))
{
    connect(m_rules, &RuleDocument::rulesChanged, this, &Comparison::schedule);
    connect(&m_diffWatcher, &QFutureWatcherBase::finished, this, &Comparison::diffFinished);
    connect(&m_suggestWatcher, &QFutureWatcherBase::finished, this, &Comparison::suggestionsFinished);
}

Comparison::~Comparison()
{
    // The runs hold shared pointers to what they use; waiting keeps them from outliving the application.
    m_diffWatcher.waitForFinished();
    m_suggestWatcher.waitForFinished();
}

void Comparison::setSource(Side side, std::shared_ptr<const Source> source)
{
    (side == Side::A ? m_a : m_b) = std::move(source);
    schedule();
}

bool Comparison::isBusy() const
{
    // Own flags, not the watchers' isRunning(): a run that has ended but whose result is not handled yet
    // still counts as busy.
    return m_diffRunning || m_suggestRunning || m_diffStale || m_suggestStale;
}

void Comparison::schedule()
{
    ++m_generation;
    if (m_diffRunning) {
        m_diffStale = true;
    } else {
        startDiff();
    }
    updateBusy();
}

void Comparison::startDiff()
{
    m_diffStale = false;
    m_diffRunning = true;
    m_diffWatcher.setFuture(QtConcurrent::run(buildSnapshot, m_a, m_b, m_rules->rules(), m_generation));
}

void Comparison::diffFinished()
{
    auto result = m_diffWatcher.result();
    m_diffRunning = false;
    if (m_diffStale) { // the sources or rules changed meanwhile: this result is already old
        startDiff();
        updateBusy();
        return;
    }
    m_snapshot = std::move(result);
    m_suggestions.clear();
    emit snapshotChanged();
    if (m_snapshot->complete()) {
        if (m_suggestRunning)
            m_suggestStale = true;
        else
            startSuggestions();
    } else {
        m_suggestionsFor = m_snapshot->generation;
        emit suggestionsChanged();
    }
    updateBusy();
}

void Comparison::startSuggestions()
{
    m_suggestStale = false;
    m_suggestRunning = true;
    auto snap = m_snapshot;
    m_suggestWatcher.setFuture(QtConcurrent::run([snap]() -> std::shared_ptr<const DiffSnapshot> {
        try {
            // The rows the suggestions pair, marked in a copy of the snapshot (it stays immutable).
            return withSuggestions(*snap);
        } catch (const RuleMatchError&) {
            return snap; // no suggestions: the snapshot's issues say why
        }
    }));
}

void Comparison::suggestionsFinished()
{
    auto paired = m_suggestWatcher.result();
    const uint64_t generation = paired->generation;
    m_suggestRunning = false;
    if (m_suggestStale || generation != m_snapshot->generation) {
        if (m_snapshot->complete())
            startSuggestions();
        else
            m_suggestStale = false;
        updateBusy();
        return;
    }
    m_suggestions = paired->suggestions;
    m_suggestionsFor = generation;
    if (paired != m_snapshot && !m_suggestions.empty()) {
        m_snapshot = std::move(paired); // the same diff, its pending pairs on one line
        emit snapshotChanged();
    }
    emit suggestionsChanged();
    updateBusy();
}

void Comparison::updateBusy()
{
    const bool busy = isBusy();
    if (busy != m_wasBusy) {
        m_wasBusy = busy;
        emit busyChanged(busy);
    }
}

} // namespace sl::gui
