// libFuzzer target: the pickle VM itself, with inert semantics and with TorchSemantics in each persistent-id
// mode, then what the torch readers do with the object graph: scanContainers, pickContainer, buildEntries
// for every container, shortRepr. Graphs from hostile pickles can be cyclic, deeply nested and shared
// (memo GET), so every walk over them is exercised here.
// The tensor lanes (pickle/tensor_record.h) are held to the opcode loop: with and without them the unpickler
// (in the zip's persistent-id mode) gives the same graph, storages, globals, problems or error, unless the
// laned run asks to be run again (TensorLaneRestart), and the opcode scan gives the same scan.
// It also holds the load-safety verdict to the VM: when the unpickler resolved an import that executes,
// the opcode scan (pickle/opcode_scan.h, what the verdict is made from) must call the pickle dangerous too,
// so mutations around a known GLOBAL never make the verdict safer than what the VM saw.

#include "fuzz_common.h"

#include "pickle/global_policy.h"
#include "pickle/opcode_scan.h"
#include "pickle/unpickler.h"
#include "pickle/value_repr.h"
#include "torch/state_dict_tree.h"
#include "torch/torch_semantics.h"
#include "util/terminal_text.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace {

using sl::torch::TorchSemantics;

void walk(sl::pickle::Value* root)
{
    (void)sl::pickle::shortRepr(root);
    (void)sl::pickle::shortRepr(root, 4000);
    sl::torch::ContainerScan scan = sl::torch::scanContainers(root);
    std::string reason;
    (void)sl::torch::pickContainer(scan, &reason);
    size_t n = 0;
    for (const auto& c : scan.containers) {
        if (++n > 16)
            break;
        sl::Source out;
        sl::torch::EntryContext ctx;
        ctx.bigEndian = n % 2;
        sl::torch::buildEntries(scan, c, ctx, out);
        (void)out.totalParameters();
        (void)out.totalBytes();
        (void)sl::sourceToJson(out);
    }
}

void scanNeverSafer(sl::Bytes bytes, const TorchSemantics& sem)
{
    using namespace sl::pickle;
    std::vector<std::string> vmDangers;
    for (const auto& [qualified, use] : sem.globals())
        if (use.risk == GlobalRisk::Dangerous)
            vmDangers.push_back(qualified);
    if (vmDangers.empty())
        return;
    // The scan must call the pickle dangerous, or have seen each of those imports itself (it knows how
    // they are used, which the unpickler's name-only view does not: getattr reading an enum member).
    PickleScan scan = scanPickle(bytes);
    for (const auto& g : scan.globals)
        if (g.module == "?" || classifyGlobal(g.module, g.name, g.uses).risk == GlobalRisk::Dangerous)
            return;
    for (const auto& name : vmDangers) {
        bool seen = false;
        for (const auto& g : scan.globals)
            seen |= g.qualified() == name;
        if (!seen)
            sl::fuzz::die("the unpickler resolved an import that executes, the opcode scan missed it", name.c_str());
    }
}

// What one unpickler run shows, as text; nullopt when the laned run asks to be run again without the lane.
std::optional<std::string> unpickled(sl::Bytes bytes, bool lane)
{
    sl::pickle::Arena arena;
    TorchSemantics sem(TorchSemantics::PersistentIds::Zip);
    std::string out;
    try {
        sl::pickle::Unpickler u(bytes, arena, sem, 0);
        u.setTensorLane(lane);
        sl::pickle::Value* root = u.load();
        out = sl::pickle::shortRepr(root, 4000) + "\nconsumed " + std::to_string(u.consumed());
        sl::torch::ContainerScan scan = sl::torch::scanContainers(root);
        if (int picked = sl::torch::pickContainer(scan); picked >= 0) {
            sl::Source entries;
            sl::torch::buildEntries(scan, scan.containers[size_t(picked)], {}, entries);
            out += "\n" + sl::sourceToJson(entries);
        }
    } catch (const sl::pickle::TensorLaneRestart&) {
        return std::nullopt;
    } catch (const sl::FormatError& e) {
        out = std::string("error: ") + e.what();
    }
    for (const auto* st : sem.storages())
        out += "\nstorage " + std::string(st->key) + " " + std::to_string(int(st->dtype)) + " " + std::to_string(st->numel)
            + " " + std::string(st->location) + " " + std::to_string(st->index);
    for (const auto& [name, use] : sem.globals())
        out += "\nglobal " + name + " " + std::to_string(use.count);
    for (const auto& p : sem.problems())
        out += "\nproblem " + p;
    return out;
}

std::string scanned(const sl::pickle::PickleScan& s)
{
    std::string out = std::to_string(s.consumed) + " " + std::to_string(s.complete) + " " + std::to_string(s.ranOut);
    for (const auto& g : s.globals)
        out += "\n" + g.module + "." + g.name + " " + g.opcode + " " + std::to_string(g.offset) + " "
            + std::to_string(g.uses) + " " + std::to_string(g.count) + " " + std::to_string(g.nestedDepth) + " "
            + std::to_string(g.attribute);
    for (const auto& p : s.problems)
        out += "\n" + p;
    return out;
}

void lanesChangeNothing(sl::Bytes bytes)
{
    const std::optional<std::string> laned = unpickled(bytes, true);
    if (laned && *laned != *unpickled(bytes, false))
        sl::fuzz::die("the unpickler's tensor lane changed what it built", laned->substr(0, 200).c_str());
    const std::string with = scanned(sl::pickle::scanPickle(bytes, 0, 2, true));
    const std::string without = scanned(sl::pickle::scanPickle(bytes, 0, 2, false));
    if (with != without)
        sl::fuzz::die("the opcode scan's tensor lane changed the scan",
            sl::terminalText(with + "\n--- without the lane:\n" + without).c_str());
}

void runTorch(sl::Bytes bytes, TorchSemantics::PersistentIds mode)
{
    sl::pickle::Arena arena;
    TorchSemantics sem(mode);
    if (mode == TorchSemantics::PersistentIds::Tar) {
        // The tar layout's main pickle refers to storages and tensors built from other members, by key.
        sl::pickle::InertSemantics inert;
        sl::pickle::Unpickler dummy(sl::Bytes {}, arena, inert);
        auto* cls = sem.global(dummy, "torch", "FloatStorage");
        for (const char* key : { "0", "1", "2" })
            sem.addPrebuilt(key, sem.storage(dummy, cls, key, "cpu", 4));
        auto* root = sem.storagesByKey("0");
        sem.addPrebuilt("3", sem.view(dummy, root, "3", 1, 2));
    }
    try {
        sl::pickle::Unpickler u(bytes, arena, sem, 0);
        sl::pickle::Value* root = u.load();
        (void)u.consumed();
        walk(root);
        for (auto* s : sem.storages())
            (void)s->numel;
    } catch (const sl::FormatError&) {
        // The expected way to refuse a malformed pickle.
    }
    if (mode != TorchSemantics::PersistentIds::Tar)
        scanNeverSafer(bytes, sem);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string name = "fuzz.pkl";
    sl::Bytes bytes(data, size);
    sl::fuzz::expectOnlyLoadError(name, [&] {
        try {
            sl::pickle::Arena arena;
            sl::pickle::InertSemantics inert;
            sl::pickle::Unpickler u(bytes, arena, inert, 0);
            walk(u.load());
        } catch (const sl::FormatError&) {
        }
        runTorch(bytes, TorchSemantics::PersistentIds::Zip);
        runTorch(bytes, TorchSemantics::PersistentIds::Legacy);
        runTorch(bytes, TorchSemantics::PersistentIds::Tar);
        lanesChangeNothing(bytes);
        // Again with 4,096 bytes of STOPs after the input: the record matcher reads unchecked where that
        // many remain (pickle/tensor_record.cpp), which short inputs never reach. ASan sees any read past.
        std::vector<uint8_t> padded(bytes.begin(), bytes.end());
        padded.resize(size + 4096, '.');
        lanesChangeNothing(sl::Bytes(padded.data(), padded.size()));
    });
    return 0;
}
