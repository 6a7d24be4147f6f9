#pragma once
// What the core proposes for the open pair: each suggestion with the rows it resolves and a few examples.
// "Apply" (or a double click, or Ctrl+Return for the first) appends its rules through the rule document,
// so it is one undoable step and the trees update when the new diff is ready.

#include "suggest/suggestions.h"

#include <QWidget>

#include <vector>

class QLabel;
class QListWidget;
class QPushButton;

namespace sl::gui {

class SuggestionsPanel : public QWidget {
    Q_OBJECT
public:
    explicit SuggestionsPanel(QWidget* parent = nullptr);
    void setSuggestions(const std::vector<Suggestion>& suggestions, bool current);
    QListWidget* list() const { return m_list; }
    int count() const;

signals:
    void applyRequested(int index);
    void applyAllRequested(); // every suggestion, in order, as one undoable step

private:
    QLabel* m_status;
    QListWidget* m_list;
    QPushButton* m_apply;
    QPushButton* m_applyAll;
};

} // namespace sl::gui
