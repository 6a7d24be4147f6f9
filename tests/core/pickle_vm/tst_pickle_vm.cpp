// The pickle VM against CPython's own pickle module: every value make_pickles.py pickles, at every
// protocol, must decode to the same canonical value. Also the VM's limits on hostile input.

#include "common/test_paths.h"
#include "pickle/pickle_memo.h"
#include "pickle/unpickler.h"
#include "torch/torch_semantics.h"
#include "util/error.h"

#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTest>

#include <bit>
#include <map>
#include <unordered_set>

using namespace sl;
using namespace sl::pickle;

namespace {

// Little-endian two's complement bytes to decimal text (for LONG1/LONG4 values beyond int64).
QString bigIntToDecimal(std::string_view le)
{
    std::vector<uint8_t> mag(le.begin(), le.end());
    bool negative = !mag.empty() && (mag.back() & 0x80);
    if (negative) { // two's complement magnitude
        bool carry = true;
        for (auto& b : mag) {
            b = static_cast<uint8_t>(~b);
            if (carry) {
                carry = ++b == 0;
            }
        }
    }
    QString digits;
    while (std::any_of(mag.begin(), mag.end(), [](uint8_t b) { return b != 0; })) {
        unsigned rem = 0;
        for (size_t i = mag.size(); i-- > 0;) {
            unsigned cur = rem << 8 | mag[i];
            mag[i] = static_cast<uint8_t>(cur / 10);
            rem = cur % 10;
        }
        digits.prepend(QChar(u'0' + rem));
    }
    if (digits.isEmpty())
        digits = QStringLiteral("0");
    return negative ? QStringLiteral("-") + digits : digits;
}

QString hex(std::string_view s) { return QString::fromLatin1(QByteArray(s.data(), static_cast<int>(s.size())).toHex()); }

QJsonValue canon(const Value* v, std::unordered_set<const Value*>& path);

QJsonArray canonItems(std::span<Value* const> items, std::unordered_set<const Value*>& path)
{
    QJsonArray a;
    for (auto* i : items)
        a.append(canon(i, path));
    return a;
}

QJsonArray canonPairs(std::span<const std::pair<Value*, Value*>> items, std::unordered_set<const Value*>& path)
{
    QJsonArray a;
    for (const auto& [k, x] : items)
        a.append(QJsonArray { canon(k, path), canon(x, path) });
    return a;
}

QJsonValue canon(const Value* v, std::unordered_set<const Value*>& path)
{
    if (path.count(v))
        return QJsonObject { { QStringLiteral("cycle"), true } };
    struct Guard {
        std::unordered_set<const Value*>& p;
        const Value* v;
        ~Guard() { p.erase(v); }
    } guard { path, v };
    path.insert(v);
    switch (v->kind) {
    case Kind::None:
        return QJsonValue::Null;
    case Kind::Bool:
        return QJsonObject { { QStringLiteral("bool"), static_cast<const BoolValue*>(v)->v } };
    case Kind::Int:
        return QJsonObject { { QStringLiteral("int"), QString::number(static_cast<const IntValue*>(v)->v) } };
    case Kind::BigInt: {
        auto* b = static_cast<const BigIntValue*>(v);
        QString text = b->decimal ? QString::fromLatin1(b->bytes.data(), static_cast<int>(b->bytes.size())) : bigIntToDecimal(b->bytes);
        if (text.startsWith(u'+'))
            text.remove(0, 1);
        return QJsonObject { { QStringLiteral("int"), text } };
    }
    case Kind::Float: {
        uint64_t bits = std::bit_cast<uint64_t>(static_cast<const FloatValue*>(v)->v);
        return QJsonObject { { QStringLiteral("float"), QStringLiteral("%1").arg(bits, 16, 16, QChar(u'0')) } };
    }
    case Kind::Str: {
        auto s = static_cast<const StrValue*>(v)->s;
        return QJsonObject { { QStringLiteral("str"), QString::fromUtf8(s.data(), static_cast<int>(s.size())) } };
    }
    case Kind::Bytes:
        return QJsonObject { { QStringLiteral("bytes"), hex(static_cast<const StrValue*>(v)->s) } };
    case Kind::Tuple:
        return QJsonObject { { QStringLiteral("tuple"), canonItems(static_cast<const SeqValue*>(v)->items, path) } };
    case Kind::List:
        return QJsonObject { { QStringLiteral("list"), canonItems(static_cast<const SeqValue*>(v)->items, path) } };
    case Kind::Set:
        return QJsonObject { { QStringLiteral("set"), canonItems(static_cast<const SeqValue*>(v)->items, path) } };
    case Kind::Dict: {
        auto* d = static_cast<const DictValue*>(v);
        QJsonObject o { { QStringLiteral("dict"), canonPairs(d->items, path) } };
        if (d->cls && d->cls->id == KnownGlobal::OrderedDict)
            o[QStringLiteral("ordered")] = true;
        return o;
    }
    case Kind::Object: {
        auto* o = static_cast<const ObjectValue*>(v);
        QJsonObject out;
        const GlobalValue* cls = o->cls();
        out[QStringLiteral("object")] = cls ? QString::fromStdString(qualifiedName(*cls)) : QStringLiteral("?");
        if (!o->viaNewObj && o->args && asSeq(o->args) && !asSeq(o->args)->items.empty() && cls == asGlobal(o->callable))
            out[QStringLiteral("args")] = canon(o->args, path);
        if (auto* st = asSeq(o->state); st && st->kind == Kind::Tuple && st->items.size() == 2
            && st->items[0]->kind == Kind::None)
            out[QStringLiteral("slots")] = canon(st->items[1], path);
        else if (o->state)
            out[QStringLiteral("state")] = canon(o->state, path);
        return out;
    }
    default:
        return QJsonObject { { QStringLiteral("unexpected"), static_cast<int>(v->kind) } };
    }
}

Value* decode(const QByteArray& bytes, Arena& arena, Semantics& sem)
{
    Bytes b(reinterpret_cast<const uint8_t*>(bytes.constData()), static_cast<size_t>(bytes.size()));
    Unpickler u(b, arena, sem);
    Value* v = u.load();
    if (u.consumed() != b.size())
        throw FormatError("trailing bytes after STOP");
    return v;
}

// BINUNICODE of `s`, for pickles spelled out in a test.
std::string binUnicode(const std::string& s)
{
    std::string out = "X";
    for (int i = 0; i < 4; ++i)
        out += char((s.size() >> (8 * i)) & 0xff);
    return out + s;
}

// The tensors of a pickle whose root is a tuple of `count` tensors (empty when it is not).
std::vector<const TensorValue*> decodeTensors(const std::string& p, size_t count, Arena& arena, Semantics& sem)
{
    const auto* root = asSeq(decode(QByteArray(p.data(), static_cast<int>(p.size())), arena, sem));
    std::vector<const TensorValue*> out;
    if (!root || root->items.size() != count)
        return out;
    for (const Value* v : root->items)
        if (const TensorValue* t = asTensor(v))
            out.push_back(t);
    return out.size() == count ? out : std::vector<const TensorValue*> {};
}

std::vector<int64_t> dimsOf(std::span<const int64_t> s) { return { s.begin(), s.end() }; }

// One tensor as torch.save pickles it (_rebuild_tensor_v2 of float storage `key`, 6 elements at offset 0),
// its size and stride tuples given as pickle bytes. Each names its globals with GLOBAL, so the opcode loop
// rebuilds it, not the tensor lane.
std::string rebuildTensorV2(const std::string& key, const std::string& size, const std::string& stride)
{
    using namespace std::string_literals; // the pickle holds NUL bytes
    return "ctorch._utils\n_rebuild_tensor_v2\n((" + binUnicode("storage") + "ctorch\nFloatStorage\n" + binUnicode(key)
        + binUnicode("cpu") + "K\x06tQK\x00"s + size + stride + "\x89" "ccollections\nOrderedDict\n)RtR";
}

QString pythonForPickles()
{
    // Any CPython works; Debian's is preferred for a stable pickle module.
    return QFileInfo::exists(QStringLiteral("/usr/bin/python3")) ? QStringLiteral("/usr/bin/python3") : QStringLiteral("python3");
}

} // namespace

class TestPickleVm : public QObject {
    Q_OBJECT
private slots:
    void conformance_data()
    {
        QTest::addColumn<QByteArray>("pickle");
        QTest::addColumn<QByteArray>("expected");
        const QString script = sl::test::sourceDir() + QStringLiteral("/tests/core/pickle_vm/make_pickles.py");
        auto r = sl::test::run(pythonForPickles(), { script });
        if (r.exitCode != 0)
            QSKIP("no Python interpreter to make reference pickles");
        const auto lines = r.out.split('\n');
        int rows = 0;
        for (const QByteArray& line : lines) {
            if (line.trimmed().isEmpty())
                continue;
            QJsonObject o = QJsonDocument::fromJson(line).object();
            QByteArray expected = QJsonDocument(QJsonArray { o.value(QStringLiteral("expected")) }).toJson(QJsonDocument::Compact);
            QTest::addRow("%s/p%d", qPrintable(o.value(QStringLiteral("name")).toString()),
                o.value(QStringLiteral("protocol")).toInt())
                << QByteArray::fromHex(o.value(QStringLiteral("hex")).toString().toLatin1()) << expected;
            ++rows;
        }
        QVERIFY2(rows > 60, "the generator produced too few cases");
    }

    void conformance()
    {
        QFETCH(QByteArray, pickle);
        QFETCH(QByteArray, expected);
        Arena arena;
        torch::TorchSemantics sem(torch::TorchSemantics::PersistentIds::Zip);
        Value* v = nullptr;
        try {
            v = decode(pickle, arena, sem);
        } catch (const std::exception& e) {
            QFAIL(e.what());
        }
        std::unordered_set<const Value*> path;
        QByteArray got = QJsonDocument(QJsonArray { canon(v, path) }).toJson(QJsonDocument::Compact);
        QCOMPARE(got, expected);
    }

    void sharedReferencesStayShared()
    {
        // a = [1]; pickle.dumps([a, a], 2): the memo must hand back the same node, not a copy.
        QByteArray p = QByteArray::fromHex("80025d7100285d71014b01616801652e");
        Arena arena;
        InertSemantics sem;
        auto* outer = asSeq(decode(p, arena, sem));
        QVERIFY(outer);
        QCOMPARE(outer->items.size(), size_t(2));
        QCOMPARE(outer->items[0], outer->items[1]);
    }

    void hostileInput_data()
    {
        QTest::addColumn<QByteArray>("pickle");
        QTest::addColumn<QString>("message");
        QTest::addRow("empty") << QByteArray() << QStringLiteral("no STOP");
        QTest::addRow("unknown opcode") << QByteArray("\x80\x02\xff", 3) << QStringLiteral("unknown opcode");
        QTest::addRow("protocol 6") << QByteArray("\x80\x06N.", 4) << QStringLiteral("unsupported pickle protocol");
        QTest::addRow("stack underflow") << QByteArray("\x80\x02R.", 4) << QStringLiteral("stack underflow");
        QTest::addRow("missing memo") << QByteArray("\x80\x02h\x05.", 5) << QStringLiteral("never stored");
        QTest::addRow("huge BINUNICODE8") << QByteArray("\x8d\xff\xff\xff\xff\xff\xff\xff\x7f", 9) << QStringLiteral("truncated");
        QTest::addRow("huge LONG4") << QByteArray("\x8b\xff\xff\xff\x7f", 5) << QStringLiteral("truncated");
        QTest::addRow("negative LONG4") << QByteArray("\x8b\xff\xff\xff\xff", 5) << QStringLiteral("negative");
        QTest::addRow("huge FRAME") << QByteArray("\x95\xff\xff\xff\xff\xff\xff\xff\x7fN.", 11) << QStringLiteral("runs past");
        QTest::addRow("unclosed mark") << QByteArray("(N.", 3) << QStringLiteral("unclosed MARK");
        QTest::addRow("APPEND to int") << QByteArray("K\x01K\x02" "a.", 6) << QStringLiteral("not a list");
        QTest::addRow("EXT1") << QByteArray("\x82\x01.", 3) << QStringLiteral("extension");
        QTest::addRow("out-of-band buffer") << QByteArray("\x97.", 2) << QStringLiteral("out-of-band");
        QTest::addRow("REDUCE non-tuple") << QByteArray("cos\nsystem\nK\x01R.", 15) << QStringLiteral("not a tuple");
        QTest::addRow("persistent id refused") << QByteArray("K\x01Q.", 4) << QStringLiteral("persistent");
    }

    void hostileInput()
    {
        QFETCH(QByteArray, pickle);
        QFETCH(QString, message);
        Arena arena;
        InertSemantics sem;
        try {
            decode(pickle, arena, sem);
            QFAIL("decoding should have failed");
        } catch (const FormatError& e) {
            QVERIFY2(QString::fromUtf8(e.what()).contains(message), e.what());
        }
    }

    // Arena blocks stop doubling at 2 MiB: a graph takes at most one block more than it uses (with doubling,
    // 8.5 MB of values took 16.3 MB of blocks). Values keep distinct, aligned addresses across blocks, and a
    // value larger than a block gets one of its own.
    void arenaBlocksStayNearTheGraph()
    {
        Arena arena;
        std::vector<IntValue*> made;
        for (int64_t i = 0; arena.bytesAllocated() < (size_t(17) << 19); ++i)
            made.push_back(arena.make<IntValue>(i));
        QVERIFY2(arena.bytesReserved() <= arena.bytesAllocated() + (size_t(2) << 20),
            qPrintable(QStringLiteral("%1 bytes of blocks for %2 of values")
                           .arg(arena.bytesReserved())
                           .arg(arena.bytesAllocated())));
        for (size_t i = 0; i < made.size(); i += 997) {
            QCOMPARE(made[i]->v, int64_t(i));
            QCOMPARE(reinterpret_cast<uintptr_t>(made[i]) % alignof(IntValue), uintptr_t(0));
        }
        const size_t before = arena.bytesReserved();
        std::span<int64_t> big = arena.array<int64_t>(size_t(3) << 20 >> 3); // 3 MiB
        QCOMPARE(big.size(), size_t(3) << 20 >> 3);
        QVERIFY(arena.bytesReserved() >= before + (size_t(3) << 20));
        big.back() = 7;
        QCOMPARE(made.back()->v, int64_t(made.size() - 1));
    }

    // The memo's packed dense part (pickle/pickle_memo.h) against a std::map of the same stores: every slot
    // reads back the last value stored in it, a placeholder as the placeholder, and count() is the number of
    // slots stored (Python's len(memo)). Random runs mix in-order stores, placeholders, stores over stored,
    // placeholder and empty slots, gaps, and far slots the dense part later reaches.
    void memoMatchesAMap()
    {
        std::vector<Value> values(64, Value(Kind::None));
        uint64_t state = 0x9e3779b97f4a7c15u;
        auto next = [&] { return state = state * 6364136223846793005u + 1442695040888963407u, state >> 33; };
        for (int run = 0; run < 200; ++run) {
            PickleMemo memo(1u << 20);
            // The load-safety scan's memo of 4-byte handles (pickle/opcode_scan.cpp), given the same stores.
            constexpr uint32_t kScanPlaceholder = 0x7fffffff;
            SlotMemo<uint32_t> handles(1u << 20, kScanPlaceholder);
            auto handleOf = [&](Value* v) {
                return v == PickleMemo::placeholder() ? kScanPlaceholder : static_cast<uint32_t>(v - values.data()) + 1;
            };
            std::map<uint64_t, Value*> model;
            uint64_t dense = 0; // what the model thinks is the next in-order slot
            for (int op = 0; op < 3000; ++op) {
                const uint64_t r = next() % 100;
                uint64_t index = r < 70 ? dense // in order
                    : r < 85 ? (dense ? next() % dense : 0) // over an earlier slot
                    : r < 93 ? dense + 1 + next() % 200 // a gap
                    : r < 97 ? dense + PickleMemo::kDenseSlack + next() % 1000 // far
                    : model.empty() ? 0 : std::next(model.begin(), static_cast<long>(next() % model.size()))->first;
                if (r < 5 && run % 2) // MEMOIZE's slot
                    index = memo.count();
                Value* v = next() % 3 == 0 ? PickleMemo::placeholder() : &values[next() % values.size()];
                QVERIFY(memo.put(index, v));
                QVERIFY(handles.put(index, handleOf(v)));
                model[index] = v;
                dense = std::max(dense, index < dense + PickleMemo::kDenseSlack ? index + 1 : dense);
                QCOMPARE(memo.count(), uint64_t(model.size()));
                QCOMPARE(handles.count(), uint64_t(model.size()));
            }
            for (uint64_t i = 0; i < dense + 2 * PickleMemo::kDenseSlack; i += (i < dense + 300 ? 1 : 97)) {
                Value** slot = memo.slot(i);
                const uint32_t* handle = handles.slot(i);
                auto it = model.find(i);
                QCOMPARE(slot != nullptr, it != model.end());
                QCOMPARE(handle != nullptr, it != model.end());
                if (slot) {
                    QCOMPARE(*slot, it->second);
                    QCOMPARE(*handle, handleOf(it->second));
                }
            }
            for (const auto& [i, v] : model) {
                QCOMPARE(*memo.slot(i), v);
                QCOMPARE(*handles.slot(i), handleOf(v));
            }
        }
        // A hostile pickle's far slots stop at the bound.
        PickleMemo small(10);
        QVERIFY(small.put(0, &values[0]));
        int stored = 0;
        while (stored < 100 && small.put(PickleMemo::kDenseSlack * (stored + 1), &values[1]))
            ++stored;
        QCOMPARE(stored, 10);
    }

    void memoAmplificationIsBounded()
    {
        // A list of 1,000 items, then 200,000 x (GET list; OrderedDict REDUCE): each call would copy the
        // list; the work budget must stop it quickly instead of running for minutes.
        QByteArray p("\x80\x02]q\x00(", 6);
        for (int i = 0; i < 1000; ++i)
            p += QByteArray("K\x01K\x02\x86", 5);
        p += "e";
        p += "ccollections\nOrderedDict\nq\x01";
        for (int i = 0; i < 200000; ++i)
            p += QByteArray("h\x01h\x00\x85R0", 7);
        p += "N.";
        Arena arena;
        torch::TorchSemantics sem(torch::TorchSemantics::PersistentIds::Zip);
        QElapsedTimer timer;
        timer.start();
        try {
            decode(p, arena, sem);
            QFAIL("expected the work budget to stop this pickle");
        } catch (const FormatError& e) {
            QVERIFY2(QString::fromUtf8(e.what()).contains(QStringLiteral("pickle bomb")), e.what());
        }
        QVERIFY2(timer.elapsed() < 5000, "the budget should stop the pickle within seconds");
    }

    // A Parameter is rebuilt as a copy of its data tensor, which shares the rarer fields (TensorExtras) until
    // one of the two sets one: a write to either must not show in the other.
    void tensorExtrasAreCopiedBeforeAWrite()
    {
        Arena arena;
        QVERIFY(!arena.make<TensorValue>()->extras().state);
        auto* data = arena.make<TensorValue>();
        Value* first = noneValue();
        Value* second = boolValue(true);
        data->extrasToSet(arena.resource()).state = first;
        auto* param = arena.make<TensorValue>(*data);
        QCOMPARE(param->extras().state, first);
        param->extrasToSet(arena.resource()).state = second;
        QCOMPARE(param->extras().state, second);
        QCOMPARE(data->extras().state, first);
        auto* copy = arena.make<TensorValue>(*data);
        data->extrasToSet(arena.resource()).layout = "sparse_coo";
        QVERIFY(copy->extras().layout.empty());
        QCOMPARE(copy->extras().state, first);
        QCOMPARE(data->extras().state, first);
    }

    // device() reads the storage's location unless another was set; one set on a copy (a device tensor
    // rebuilt from a cpu one) must not show in the tensor it was copied from, which shares its extras.
    void tensorDeviceFollowsItsStorageUnlessSet()
    {
        Arena arena;
        auto* storage = arena.make<StorageValue>();
        storage->location = "cuda:1";
        auto* t = arena.make<TensorValue>();
        QVERIFY(t->device().empty());
        t->storage = storage;
        QVERIFY(t->device() == "cuda:1");
        t->setDevice("", arena.resource());
        QVERIFY(t->device().empty());
        auto* xla = arena.make<TensorValue>();
        xla->setDevice("xla:0", arena.resource());
        QVERIFY(xla->device() == "xla:0");
        auto* moved = arena.make<TensorValue>(*xla);
        QVERIFY(moved->device() == "xla:0");
        moved->setDevice("mtia:2", arena.resource());
        QVERIFY(moved->device() == "mtia:2");
        QVERIFY(xla->device() == "xla:0");
        for (const char* d : { "cpu", "meta" }) {
            moved->setDevice(d, arena.resource());
            QVERIFY(moved->device() == d);
        }
        QVERIFY(xla->device() == "xla:0");
    }

    // Tensors of one shape share one array of sizes and strides; one with the same sizes but other strides,
    // or none, reads its own. Each tensor must read back what its pickle says.
    void tensorsOfOneShapeShareTheirDims()
    {
        const auto& tensor = rebuildTensorV2;
        const std::string twoByThree = "K\x02K\x03\x86", rowMajor = "K\x03K\x01\x86", colMajor = "K\x01K\x02\x86";
        // The meta tensor's stride has the wrong length, so it keeps none (hasStride false).
        const std::string meta = "ctorch._utils\n_rebuild_meta_tensor_no_storage\n(ctorch\nfloat32\n" + twoByThree
            + "K\x01\x85\x89tR";
        const std::string p = "\x80\x02(" + tensor("0", twoByThree, rowMajor) + tensor("1", twoByThree, rowMajor)
            + tensor("2", twoByThree, colMajor) + meta + tensor("3", "K\x03K\x02\x86", rowMajor) + "t.";
        Arena arena;
        torch::TorchSemantics sem(torch::TorchSemantics::PersistentIds::Zip);
        const std::vector<const TensorValue*> t = decodeTensors(p, 5, arena, sem);
        QCOMPARE(t.size(), size_t(5));
        using Dims = std::vector<int64_t>;
        const auto& dims = dimsOf;
        for (int i : { 0, 1, 2, 3 })
            QCOMPARE(dims(t[i]->size()), Dims({ 2, 3 }));
        QCOMPARE(dims(t[0]->stride()), Dims({ 3, 1 }));
        QCOMPARE(dims(t[1]->stride()), Dims({ 3, 1 }));
        QCOMPARE(dims(t[2]->stride()), Dims({ 1, 2 }));
        QVERIFY(t[3]->stride().empty() && !t[3]->hasStride);
        QCOMPARE(dims(t[4]->size()), Dims({ 3, 2 }));
        QCOMPARE(dims(t[4]->stride()), Dims({ 3, 1 }));
        QCOMPARE(t[1]->size().data(), t[0]->size().data()); // shared
        QVERIFY(t[2]->size().data() != t[0]->size().data());
        QVERIFY(t[4]->stride().data() != t[0]->stride().data());
    }

    void shapesWhoseHashesCollideKeepTheirOwnStrides()
    {
        // Two [2, 3] tensors whose strides differ but whose dims hash alike: the second stride is picked so the
        // hash comes out equal (its multiplier is odd, so the last step is invertible). The table must compare
        // the strides, not trust the hash.
        using namespace std::string_literals;
        const std::vector<int64_t> size { 2, 3 }, strideA { 3, 1 };
        const uint64_t afterSize = torch::TorchSemantics::dimsHash(size, {}); // the hash's state before the strides
        constexpr uint64_t kPrime = 0x100000001b3u;
        const uint64_t b1 = ((afterSize ^ 3) * kPrime) ^ 1 ^ ((afterSize ^ 4) * kPrime);
        const std::vector<int64_t> strideB { 4, static_cast<int64_t>(b1) };
        QCOMPARE(torch::TorchSemantics::dimsHash(size, strideB), torch::TorchSemantics::dimsHash(size, strideA));
        QVERIFY(strideB != strideA);

        auto long1 = [](int64_t v) { // LONG1 of eight bytes, little-endian two's complement
            std::string out = "\x8a\x08"s;
            for (int i = 0; i < 8; ++i)
                out += char((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
            return out;
        };
        auto tuple = [&](const std::vector<int64_t>& v) { return "(" + long1(v[0]) + long1(v[1]) + "t"; };
        auto tensor = [&](const std::string& key, const std::vector<int64_t>& stride) {
            return rebuildTensorV2(key, tuple(size), tuple(stride));
        };
        const std::string p = "\x80\x02(" + tensor("0", strideA) + tensor("1", strideB) + tensor("2", strideA) + "t.";
        Arena arena;
        torch::TorchSemantics sem(torch::TorchSemantics::PersistentIds::Zip);
        const std::vector<const TensorValue*> t = decodeTensors(p, 3, arena, sem);
        QCOMPARE(t.size(), size_t(3));
        const auto& dims = dimsOf;
        for (const TensorValue* x : t)
            QCOMPARE(dims(x->size()), size);
        QCOMPARE(dims(t[0]->stride()), strideA);
        QCOMPARE(dims(t[1]->stride()), strideB);
        QCOMPARE(dims(t[2]->stride()), strideA);
    }

    void dangerousGlobalsAreRecordedNotRun()
    {
        // cos\nsystem\n(S'echo pwned'\ntR.  -- the classic payload. Nothing runs; the global is classified.
        QByteArray p("cos\nsystem\n(S'touch /tmp/statelens-pwned'\ntR.");
        Arena arena;
        torch::TorchSemantics sem(torch::TorchSemantics::PersistentIds::Zip);
        Value* v = decode(p, arena, sem);
        QVERIFY(asObject(v));
        QVERIFY(!QFileInfo::exists(QStringLiteral("/tmp/statelens-pwned")));
        const auto& globals = sem.globals();
        auto it = globals.find("os.system");
        QVERIFY(it != globals.end());
        QCOMPARE(int(it->second.risk), int(GlobalRisk::Dangerous));
    }
};

QTEST_GUILESS_MAIN(TestPickleVm)
#include "tst_pickle_vm.moc"
