#include "checkpoint_writer.h"

#include "convert/convert_plan.h"
#include "io/file_trust.h"
#include "util/error.h"
#include "util/load_control.h"

#include <QLocale>

namespace sl::gui {

CheckpointWriter::CheckpointWriter(QObject* parent)
    : QObject(parent)
{
}

bool CheckpointWriter::start(Request request)
{
    if (!request.source || m_job.running())
        return false;
    {
        std::lock_guard lock(m_current->mutex);
        m_current->name.clear();
    }
    m_job.start(
        [request = std::move(request), current = m_current](LoadControl& control) -> Outcome {
            Outcome o;
            o.output = request.output;
            const std::string output = request.output.toStdString();
            try {
                convert::ConvertOptions options;
                options.rules = request.rules;
                const convert::ConvertPlan plan = convert::planConversion(*request.source, options);
                // Never over a checkpoint or model this window has read (io/file_trust.h), as the CLI refuses.
                refuseOutputOntoInput(output, static_cast<unsigned>(InputKind::Checkpoint));
                convert::WriteOptions write;
                write.output = output;
                write.shardBytes = request.shardBytes;
                write.control = &control;
                write.progress = [current](uint64_t, uint64_t, const std::string& name) {
                    std::lock_guard lock(current->mutex);
                    if (current->name != name)
                        current->name = name;
                };
                o.report = convert::writeSafetensors(*request.source, plan, write);
                o.findings = plan.findings;
                o.leftOut = plan.droppedByRules.size();
                o.kind = Outcome::Kind::Written;
            } catch (const LoadCancelled&) {
                o.kind = Outcome::Kind::Cancelled; // the writer removed its temporary folder before throwing on
            } catch (const std::exception& e) {
                o.kind = Outcome::Kind::Failed;
                o.error = QString::fromStdString(e.what());
            }
            return o;
        },
        [this](Outcome o) { emit finished(o); });
    return true;
}

void CheckpointWriter::cancel()
{
    m_job.stop(); // not LatestJob::cancel(): the outcome must still arrive, after the cleanup
}

double CheckpointWriter::progress() const
{
    return m_job.running() && m_job.control() ? m_job.control()->fraction() : -1.0;
}

QString CheckpointWriter::currentTensor() const
{
    std::lock_guard lock(m_current->mutex);
    return QString::fromStdString(m_current->name);
}

QString CheckpointWriter::Outcome::summary() const
{
    switch (kind) {
    case Kind::Cancelled:
        return QObject::tr("Cancelled: nothing was written to %1.").arg(output);
    case Kind::Failed:
        return error;
    case Kind::Written:
        break;
    }
    const QLocale locale = QLocale::c();
    auto plural = [](uint64_t n, const char* one, const char* many) {
        return QStringLiteral("%1 %2").arg(n).arg(QLatin1String(n == 1 ? one : many));
    };
    const QString bytes = report.bytesWritten < 1000
        ? plural(report.bytesWritten, "byte", "bytes")
        : QStringLiteral("%1, %2 bytes")
              .arg(locale.formattedDataSize(static_cast<qint64>(report.bytesWritten), 1, QLocale::DataSizeSIFormat))
              .arg(report.bytesWritten);
    QString text = QObject::tr("Wrote %1 (%2) in %3%4 to %5.")
                       .arg(plural(report.tensorsWritten, "tensor", "tensors"), bytes, plural(report.shards, "file", "files"),
                           report.shards > 1 ? QObject::tr(" and their index") : QString(), output);
    text += QLatin1Char('\n') + QObject::tr("Verified: every key, dtype, shape and byte range read back as planned.");
    for (const Finding& f : findings)
        text += QLatin1Char('\n') + QString::fromUtf8(severityName(f.severity).data(), static_cast<qsizetype>(severityName(f.severity).size()))
            + QStringLiteral(": ") + (f.entry.empty() ? QString() : QStringLiteral("'%1': ").arg(QString::fromStdString(f.entry)))
            + QString::fromStdString(f.message);
    return text;
}

} // namespace sl::gui
