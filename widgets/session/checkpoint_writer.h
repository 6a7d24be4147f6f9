#pragma once
// File > Save Fixed Checkpoint As…: the checkpoint (side A, its current container) written as safetensors
// with the window's rules applied, the same conversion as `statelens convert` (core/convert), on a worker
// thread with progress and Cancel. The plan is made on the worker too: a rule collision or a tensor that
// cannot be written fails there, before anything exists on disk. A cancel stops the copy at its next
// buffer, and the cancel is reported only once the core has removed its temporary folder, so when
// finished() says Cancelled nothing of the write is left.

#include "convert/safetensors_writer.h"
#include "model/source.h"
#include "rules/rule.h"
#include "session/latest_job.h"

#include <QObject>
#include <QString>
#include <QStringList>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace sl::gui {

class CheckpointWriter : public QObject {
    Q_OBJECT
public:
    struct Request {
        std::shared_ptr<const Source> source; // side A as the window has it (its container selected)
        RuleSet rules; // the window's rules at the time of the request
        QString output; // a .safetensors file, or a folder (new or empty) for model.safetensors or the shards
        uint64_t shardBytes = 0; // 0: one file
    };
    struct Outcome {
        enum class Kind { Written, Failed, Cancelled };
        Kind kind = Kind::Failed;
        QString output;
        QString error; // Failed: the one line the CLI would print (file and problem)
        convert::WriteReport report; // Written: what was written
        std::vector<Finding> findings; // Written: the plan's findings (non-tensors listed, tied names, drops)
        size_t leftOut = 0; // keys a drop rule removed
        // What was written (keys, bytes, files), the findings, or the error: what the window shows.
        QString summary() const;
    };

    explicit CheckpointWriter(QObject* parent = nullptr);

    // Starts the write; false (and nothing starts) while one runs or without a source.
    bool start(Request request);
    // Asks the write to stop; finished() with Cancelled follows once nothing of it is left on disk.
    void cancel();
    bool isRunning() const { return m_job.running(); }
    double progress() const; // [0, 1] of the tensor bytes; negative before the plan has counted them
    QString currentTensor() const; // the key being written
    const LoadControl* control() const { return m_job.running() ? m_job.control() : nullptr; } // bytes done, total

signals:
    void finished(const sl::gui::CheckpointWriter::Outcome& outcome);

private:
    struct Current {
        std::mutex mutex;
        std::string name;
    };
    std::shared_ptr<Current> m_current = std::make_shared<Current>();
    LatestJob<Outcome> m_job { this }; // declared last: its destructor waits for a write still running
};

} // namespace sl::gui
