#include "entry_values.h"

#include "util/load_control.h"

namespace sl::gui {

namespace {

std::shared_ptr<const EntryValues::Side> readSide(const Source& s, const Entry* e, const LoadControl* control)
{
    auto out = std::make_shared<EntryValues::Side>();
    if (!e)
        return out;
    const size_t index = static_cast<size_t>(e - s.entries.data());
    values::StatsOptions o;
    o.bins = EntryValues::kBins;
    o.control = control;
    auto r = values::computeStats(s, { index }, o);
    if (r[0].stats)
        out->stats = r[0].stats;
    else
        out->why = r[0].skipped;
    std::string why;
    out->thumbnail = values::thumbnail(s, *e, EntryValues::kThumbSide, &why, control);
    return out;
}

} // namespace

EntryValues::EntryValues(QObject* parent)
    : QObject(parent)
{
}

std::shared_ptr<const EntryValues::Side> EntryValues::cached(const Entry* e) const
{
    return e ? m_cache.value(e) : std::make_shared<Side>();
}

void EntryValues::select(Selection selection)
{
    if (selection.empty()) {
        m_current = {};
        m_job.cancel();
        emit cleared();
        return;
    }
    // Entries are cached by address while the same sources are open; other sources empty the cache.
    const DiffSnapshot& snap = *selection.snapshot;
    if (m_cacheSources.first != snap.a.get() || m_cacheSources.second != snap.b.get()) {
        m_cache.clear();
        m_cacheSources = { snap.a.get(), snap.b.get() };
        m_cacheHold = selection.snapshot;
    }
    m_current = std::move(selection);
    auto ca = cached(m_current.a), cb = cached(m_current.b);
    if (ca && cb) {
        m_job.cancel(); // an older selection's read is no longer wanted
        emit ready(m_current, ca, cb);
        return;
    }
    emit reading();
    const Selection r = m_current;
    m_job.start( // the previous selection's read is no longer wanted: it is cancelled
        [r, ca, cb](LoadControl& control) -> Answer {
            try {
                auto va = ca ? ca : readSide(*r.snapshot->a, r.a, &control);
                auto vb = cb ? cb : readSide(*r.snapshot->b, r.b, &control);
                return { r, va, vb };
            } catch (const std::exception&) {
                return { r, nullptr, nullptr };
            }
        },
        [this](Answer answer) { finished(std::move(answer)); });
}

void EntryValues::finished(Answer answer)
{
    if (!answer.a || !answer.b) {
        emit failed();
        return;
    }
    const Selection& s = answer.selection;
    if (s.snapshot->a.get() == m_cacheSources.first && s.snapshot->b.get() == m_cacheSources.second) {
        if (s.a)
            m_cache.insert(s.a, answer.a);
        if (s.b)
            m_cache.insert(s.b, answer.b);
    }
    emit ready(s, answer.a, answer.b);
}

} // namespace sl::gui
