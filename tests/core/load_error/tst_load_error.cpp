// load_state_dict error texts written by real torch (make_errors.py), read back as the two sides a
// failed load had: the model's keys and the checkpoint's keys, with shapes where the text gives them.

#include "common/test_paths.h"
#include "formats/load_error_reader.h"
#include "formats/loader.h"
#include "util/error.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QElapsedTimer>
#include <QTest>

#include <map>

using namespace sl;

namespace {

// key -> "[a, b]" or "?" for unknown shapes
std::map<QString, QString> side(const Source& s)
{
    std::map<QString, QString> out;
    for (const auto& e : s.entries)
        out[QString::fromStdString(e.name)] = e.shapeKnown ? QString::fromStdString(shapeToString(e.shape)) : QStringLiteral("?");
    return out;
}

std::map<QString, QString> side(const QJsonObject& o)
{
    std::map<QString, QString> out;
    for (auto it = o.begin(); it != o.end(); ++it) {
        if (it.value().isNull()) {
            out[it.key()] = QStringLiteral("?");
            continue;
        }
        QStringList dims;
        for (const auto& d : it.value().toArray())
            dims << QString::number(d.toInteger());
        out[it.key()] = QStringLiteral("[") + dims.join(QStringLiteral(", ")) + QStringLiteral("]");
    }
    return out;
}

} // namespace

class TestLoadError : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private slots:
    void initTestCase()
    {
        if (!sl::test::haveTorchPython())
            QSKIP("Debian's torch (/usr/bin/python3) is not installed");
        QVERIFY(m_dir.isValid());
        auto r = sl::test::run(sl::test::torchPython(),
            { sl::test::sourceDir() + QStringLiteral("/tests/core/load_error/make_errors.py"), m_dir.path() });
        QVERIFY2(r.exitCode == 0, r.err.constData());
    }

    void text_data()
    {
        QTest::addColumn<QString>("name");
        for (const char* c : { "plain", "traceback", "tabs_to_spaces", "crlf", "compiled_model", "compiled_checkpoint",
                 "lowercase_single_quotes", "in_log", "while_copying" })
            QTest::newRow(c) << QString::fromLatin1(c);
    }

    void text()
    {
        QFETCH(QString, name);
        QFile t(m_dir.filePath(name + QStringLiteral(".truth.json")));
        QVERIFY(t.open(QIODevice::ReadOnly));
        const QJsonObject truth = QJsonDocument::fromJson(t.readAll()).object();

        const Source model = openSource(m_dir.filePath(name + QStringLiteral(".txt")).toStdString());
        QCOMPARE(QString::fromUtf8(formatId(model.format)), QStringLiteral("load-error-text"));
        QCOMPARE(QString::fromStdString(model.container), QStringLiteral("model"));
        QCOMPARE(side(model), side(truth.value(QStringLiteral("model")).toObject()));
        const Source checkpoint = model.withContainer("checkpoint");
        QCOMPARE(side(checkpoint), side(truth.value(QStringLiteral("checkpoint")).toObject()));
        bool classFound = false;
        for (const auto& [k, v] : model.metadata)
            if (k == "model_class") {
                QCOMPARE(QString::fromStdString(v), truth.value(QStringLiteral("model_class")).toString());
                classFound = true;
            }
        QVERIFY(classFound);
        const bool compiled = truth.value(QStringLiteral("model_class")).toString() == QStringLiteral("OptimizedModule");
        bool compiledNoted = false;
        for (const auto& f : model.findings)
            compiledNoted |= f.message.find("torch.compile") != std::string::npos;
        QCOMPARE(compiledNoted, compiled);
    }

    void notAnError()
    {
        try {
            parseLoadErrorText("log.txt", "size mismatch for something unrelated\nall good\n");
            QFAIL("expected a LoadError");
        } catch (const LoadError& e) {
            QVERIFY(QString::fromUtf8(e.what()).startsWith(QStringLiteral("log.txt: ")));
        }
    }

    void hugeAndHostileTextStaysQuick()
    {
        // One clause head, 200,000 keys and a last unterminated quote: every key read, no crash, no hang.
        // A quadratic scan would take minutes here; a linear one takes ~0.4 s in a release build and ~2 s
        // under ASan. The bound is loose on purpose: a sanitizer build on a busy CI machine must not fail it.
        std::string text = "Missing key(s) in state_dict: ";
        for (int i = 0; i < 200000; ++i)
            text += "\"k" + std::to_string(i) + "\", ";
        text += "\"unterminated";
        QElapsedTimer timer;
        timer.start();
        const Source s = parseLoadErrorText("big.txt", text);
        QCOMPARE(s.entries.size(), size_t(200000));
        QVERIFY2(timer.elapsed() < 30000, qPrintable(QStringLiteral("%1 ms").arg(timer.elapsed())));
    }
};

QTEST_GUILESS_MAIN(TestLoadError)
#include "tst_load_error.moc"
