#include "side_loader.h"

#include "formats/rank_sets.h"

namespace sl::gui {

SideLoader::SideLoader(QObject* parent)
    : QObject(parent)
{
}

void SideLoader::load(const QString& label, std::function<Source(const OpenOptions&)> loadFn)
{
    m_label = label;
    m_loading = true;
    m_job.start( // replaces (cancels) a load still running
        [loadFn = std::move(loadFn)](LoadControl& control) -> Result {
            try {
                OpenOptions options;
                options.control = &control;
                return { std::make_shared<const Source>(loadFn(options)), {} };
            } catch (const std::exception& e) {
                return { nullptr, QString::fromStdString(e.what()) };
            }
        },
        [this](Result r) { finished(std::move(r)); });
    emit loadStarted(label);
    emit loadingChanged(true);
}

void SideLoader::loadPaths(const QStringList& paths)
{
    std::vector<std::string> p;
    for (const QString& path : paths)
        p.push_back(path.toStdString());
    load(QString::fromStdString(describePaths(p)), [p](const OpenOptions& o) { return openPaths(p, o); });
}

void SideLoader::selectContainer(const QString& container)
{
    if (!m_source || container.toStdString() == m_source->container)
        return;
    auto current = m_source;
    const std::string c = container.toStdString();
    load(m_label, [current, c](const OpenOptions&) { return current->withContainer(c); });
}

void SideLoader::cancel()
{
    if (!m_loading)
        return;
    m_job.cancel();
    m_loading = false;
    emit loadCancelled();
    emit loadingChanged(false);
}

double SideLoader::progress() const
{
    return m_loading && m_job.control() ? m_job.control()->fraction() : -1.0;
}

void SideLoader::finished(Result r)
{
    m_loading = false;
    m_source = std::move(r.source);
    m_error = m_source ? QString() : r.error;
    emit loadingChanged(false);
    emit sourceChanged(m_source);
}

} // namespace sl::gui
