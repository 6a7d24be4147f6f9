// Optimizer state labelled with its parameters, against the truth torch gives (make_optimizer_fixtures.py):
// each optimizer id names the parameter at that position of model.parameters().

#include "common/test_paths.h"
#include "formats/loader.h"

#include <QDir>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTest>

#include <map>

using namespace sl;

class TestOptimizer : public QObject {
    Q_OBJECT
private slots:
    void labels_data()
    {
        QTest::addColumn<QString>("file");
        const QDir dir(sl::test::fixturesDir() + QStringLiteral("/optimizer"));
        const auto files = dir.entryList({ QStringLiteral("*.pt") }, QDir::Files, QDir::Name);
        QVERIFY(files.size() >= 6);
        for (const QString& f : files)
            QTest::newRow(qPrintable(f)) << dir.filePath(f);
    }

    void labels()
    {
        QFETCH(QString, file);
        QFile f(file + QStringLiteral(".expected.json"));
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QJsonObject expected = QJsonDocument::fromJson(f.readAll()).object();
        const QJsonObject labels = expected.value(QStringLiteral("labels")).toObject();

        const Source s0 = openSource(file.toStdString());
        // The optimizer container, wherever the file keeps it.
        std::string container;
        for (const auto& c : s0.containers)
            if (c.role == ContainerInfo::Role::Optimizer)
                container = c.path;
        QVERIFY2(!container.empty() || s0.container.empty(), "no optimizer container found");
        const Source s = container == s0.container ? s0 : s0.withContainer(container);

        std::map<std::string, std::string> got; // id -> label
        std::map<std::string, std::string> how;
        for (const auto& e : s.entries) {
            if (e.name.rfind("state.", 0) != 0)
                continue;
            const std::string id = e.name.substr(6, e.name.rfind('.') - 6);
            if (const std::string* p = e.attribute("param")) {
                QVERIFY2(!got.count(id) || got[id] == *p, qPrintable(QString::fromStdString(e.name)));
                got[id] = *p;
                how[id] = *e.attribute("param_source");
            }
        }
        // Every expected label is there, and nothing is labelled that the truth leaves open.
        for (auto it = labels.begin(); it != labels.end(); ++it) {
            const std::string id = it.key().toStdString();
            QVERIFY2(got.count(id), qPrintable(QStringLiteral("state %1 is not labelled").arg(it.key())));
            QCOMPARE(QString::fromStdString(got[id]), it.value().toString());
            QCOMPARE(QString::fromStdString(how[id]), expected.value(QStringLiteral("how")).toString());
        }
        QCOMPARE(got.size(), size_t(labels.size()));
    }
};

QTEST_GUILESS_MAIN(TestOptimizer)
#include "tst_optimizer.moc"
