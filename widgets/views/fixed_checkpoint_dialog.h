#pragma once
// File > Save Fixed Checkpoint As…: asks where to write the converted checkpoint (a .safetensors file, or a
// folder for shards and their index) and the shard size (none by default). Only asks: the window starts the
// write (session/checkpoint_writer.h) with what this returns.

#include <QDialog>

#include <cstdint>
#include <optional>

class QComboBox;
class QDialogButtonBox;
class QLabel;
class QLineEdit;

namespace sl::gui {

class FixedCheckpointDialog : public QDialog {
    Q_OBJECT
public:
    // `what` describes the conversion (the checkpoint, its container, the rules); `suggestedOutput` is the
    // path offered first.
    FixedCheckpointDialog(const QString& what, const QString& suggestedOutput, QWidget* parent = nullptr);

    QString output() const;
    // The shard size chosen: 0 for one file; nullopt when the text is not a size.
    std::optional<uint64_t> shardBytes() const;

    QLineEdit* outputEdit() const { return m_output; }
    QComboBox* shardCombo() const { return m_shards; }

private:
    void browse();
    void update(); // the hint, and whether Save can be pressed

    QLineEdit* m_output;
    QComboBox* m_shards;
    QLabel* m_hint;
    QDialogButtonBox* m_buttons;
};

} // namespace sl::gui
