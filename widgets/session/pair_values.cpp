#include "pair_values.h"

#include "util/load_control.h"

namespace sl::gui {

PairValues::PairValues(QObject* parent)
    : QObject(parent)
{
}

bool PairValues::start(std::shared_ptr<const DiffSnapshot> snap)
{
    if (!snap || !snap->complete() || m_job.running())
        return false;
    m_job.start(
        [snap](LoadControl& control) -> PerRow {
            try {
                values::StatsOptions o;
                o.control = &control;
                return std::make_shared<const std::vector<values::ValueComparison>>(
                    values::compareDiffRows(*snap->a, *snap->b, snap->diff, o));
            } catch (const std::exception&) {
                return nullptr; // unreadable bytes (a cancelled run's result is dropped)
            }
        },
        [this, snap](PerRow perRow) {
            if (perRow)
                emit compared(snap, std::move(perRow));
            else
                emit failed();
        });
    return true;
}

void PairValues::cancel()
{
    if (!m_job.running())
        return;
    m_job.cancel();
    emit cancelled();
}

double PairValues::progress() const
{
    return m_job.running() && m_job.control() ? m_job.control()->fraction() : -1.0;
}

} // namespace sl::gui
