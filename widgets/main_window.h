#pragma once
// The StateLens window: the checkpoint (A, what is loaded) and the model (B, what receives it) side by side.

#include <QMainWindow>

namespace sl::gui {

class SourcePane;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);

    void openA(const QString& path);
    void openB(const QString& path);
    // The embedded demo pair: a compiled training checkpoint and the model it fails to load into.
    void openDemo();

    SourcePane* paneA() const { return m_a; }
    SourcePane* paneB() const { return m_b; }

private:
    void chooseFile(SourcePane* pane);

    SourcePane* m_a;
    SourcePane* m_b;
};

} // namespace sl::gui
