#pragma once
// The header above one side of the window: what is open there (path, format, container), a container
// picker, the load's progress with Cancel, and what the reader found. It shows a side's SideLoader
// (session/side_loader.h), which does the loading; an error shows here, on its side, never as a dialog. Files
// and folders dropped here are handed to the window to open on this side; several files dropped at once open
// as one per-rank source.

#include <QWidget>

#include <memory>

class QComboBox;
class QLabel;
class QListWidget;
class QProgressBar;
class QTimer;
class QToolButton;

namespace sl {
class Source;
}

namespace sl::gui {

class SideLoader;

class SourcePane : public QWidget {
    Q_OBJECT
public:
    SourcePane(const QString& role, SideLoader* side, QWidget* parent = nullptr);

    SideLoader* side() const { return m_side; }

signals:
    void filesDropped(const QStringList& paths); // several: the rank files of one save

protected:
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private:
    void loadStarted(const QString& label);
    void loadEnded();
    void showSource();

    QString m_role;
    QLabel* m_title;
    QLabel* m_summary;
    QComboBox* m_containers;
    QProgressBar* m_progress;
    QToolButton* m_cancel;
    QListWidget* m_findings;
    SideLoader* m_side;
    QTimer* m_poll; // reads the load's progress into the bar
};

} // namespace sl::gui
