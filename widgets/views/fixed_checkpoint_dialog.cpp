#include "fixed_checkpoint_dialog.h"

#include "convert/safetensors_writer.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QVBoxLayout>

namespace sl::gui {

namespace {

bool namesOneFile(const QString& path)
{
    return path.endsWith(QStringLiteral(".safetensors"));
}

} // namespace

FixedCheckpointDialog::FixedCheckpointDialog(const QString& what, const QString& suggestedOutput, QWidget* parent)
    : QDialog(parent)
    , m_output(new QLineEdit(suggestedOutput))
    , m_shards(new QComboBox)
    , m_hint(new QLabel)
    , m_buttons(new QDialogButtonBox(QDialogButtonBox::Save | QDialogButtonBox::Cancel))
{
    setWindowTitle(tr("Save Fixed Checkpoint"));
    auto* intro = new QLabel(what);
    intro->setWordWrap(true);
    intro->setTextFormat(Qt::PlainText);

    auto* browse = new QPushButton(tr("Browse…"));
    auto* row = new QHBoxLayout;
    row->addWidget(m_output, 1);
    row->addWidget(browse);

    // Editable: any size huggingface_hub's parse_size_to_int or transformers take (5GB, 500MB, 2GiB, bytes).
    m_shards->setEditable(true);
    m_shards->addItem(tr("None (one file)"));
    for (const char* size : { "5GB", "2GB", "1GB", "500MB" })
        m_shards->addItem(QString::fromLatin1(size));
    m_shards->setToolTip(tr("Cut the output into shards of at most this size, as Hugging Face does"));

    m_hint->setWordWrap(true);
    m_hint->setTextFormat(Qt::PlainText);

    auto* form = new QFormLayout;
    form->addRow(tr("Save to:"), row);
    form->addRow(tr("Shard size:"), m_shards);
    form->addRow(QString(), m_hint);

    auto* layout = new QVBoxLayout(this);
    layout->addWidget(intro);
    layout->addLayout(form);
    layout->addWidget(m_buttons);
    resize(620, sizeHint().height());

    connect(browse, &QPushButton::clicked, this, &FixedCheckpointDialog::browse);
    connect(m_output, &QLineEdit::textChanged, this, &FixedCheckpointDialog::update);
    connect(m_shards, &QComboBox::currentTextChanged, this, &FixedCheckpointDialog::update);
    connect(m_buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(m_buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    update();
}

QString FixedCheckpointDialog::output() const
{
    return m_output->text().trimmed();
}

std::optional<uint64_t> FixedCheckpointDialog::shardBytes() const
{
    const QString text = m_shards->currentText().trimmed();
    if (text.isEmpty() || text == m_shards->itemText(0) || text.compare(QStringLiteral("none"), Qt::CaseInsensitive) == 0)
        return 0;
    const auto size = convert::parseByteSize(text.toStdString());
    return size ? std::optional<uint64_t>(*size) : std::nullopt;
}

void FixedCheckpointDialog::browse()
{
    const bool sharded = shardBytes().value_or(0) != 0;
    QString start = output();
    // Shards go into a folder: offer the file's name without its extension.
    if (sharded && namesOneFile(start))
        start.chop(int(sizeof(".safetensors")) - 1);
    else if (!sharded && !start.isEmpty() && !namesOneFile(start))
        start += QStringLiteral(".safetensors");
    const QString path = sharded
        ? QFileDialog::getSaveFileName(this, tr("Folder for the shards (new or empty)"), start)
        : QFileDialog::getSaveFileName(this, tr("Save fixed checkpoint"), start, tr("safetensors (*.safetensors)"));
    if (!path.isEmpty())
        m_output->setText(path);
}

void FixedCheckpointDialog::update()
{
    const auto shards = shardBytes();
    const QString out = output();
    QString hint;
    bool ok = !out.isEmpty() && shards.has_value();
    if (!shards)
        hint = tr("Not a size: write 5GB, 500MB, 2GiB or a number of bytes.");
    else if (*shards == 0)
        hint = namesOneFile(out) || out.isEmpty()
            ? tr("One .safetensors file, replaced if it exists.")
            : tr("A new or empty folder that receives model.safetensors.");
    else if (namesOneFile(out)) {
        hint = tr("Shards are written into a folder: name a folder, not a .safetensors file.");
        ok = false;
    } else {
        hint = tr("A new or empty folder that receives model-0000N-of-0000M.safetensors and "
                  "model.safetensors.index.json, as Hugging Face writes them.");
    }
    hint += QLatin1Char(' ') + tr("Written to a temporary folder, verified, then moved into place: on an error or Cancel nothing is left.");
    m_hint->setText(hint);
    m_buttons->button(QDialogButtonBox::Save)->setEnabled(ok);
}

} // namespace sl::gui
