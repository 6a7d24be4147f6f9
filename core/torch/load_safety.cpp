#include "load_safety.h"

#include "pickle/global_policy.h"
#include "util/name_list.h"

#include <algorithm>
#include <unordered_map>

namespace sl::torch {

using namespace sl::pickle;

namespace {

// At most this many danger findings one by one; the rest are counted in one more.
constexpr size_t kMaxDangerFindings = 20;

GlobalVerdict judge(const ScannedGlobal& g)
{
    if (g.module == "?" && g.opcode == "FRAME")
        return { GlobalRisk::Dangerous, "stands for what torch.load reads past the end of a pickle FRAME, bytes other than these, so no list can vouch for it" };
    if (g.module == "?")
        return { GlobalRisk::Dangerous, "is an import whose name is computed at load time, so no list can vouch for it" };
    return classifyGlobal(g.module, g.name, g.uses);
}

std::string useVerb(const ScannedGlobal& g)
{
    if (g.uses & kCalled)
        return "calls";
    if (g.uses & kInstantiated)
        return "constructs";
    return "imports";
}

} // namespace

void LoadSafety::add(std::string where, const PickleScan& scan)
{
    for (const auto& g : scan.globals)
        m_imports.push_back({ g.nestedDepth ? where + ", in a pickle nested in its bytes," : where, g });
}

std::vector<std::string> LoadSafety::dangerSummaries() const
{
    std::vector<std::string> out;
    for (const auto& i : m_imports) {
        GlobalVerdict v = judge(i.global);
        std::string text = i.global.qualified() + " (" + v.reason + ")";
        if (v.risk == GlobalRisk::Dangerous && std::find(out.begin(), out.end(), text) == out.end())
            out.push_back(std::move(text));
    }
    return out;
}

std::string LoadSafety::withDangers(std::string message, std::string_view loader) const
{
    auto d = dangerSummaries();
    if (!d.empty())
        message += "; DANGER: its pickle references " + listNames(d, 4) + ", which " + std::string(loader) + " would run";
    return message;
}

void LoadSafety::report(std::vector<Finding>& findings, WeightsOnlyLoad& wo, std::string_view loader) const
{
    wo = WeightsOnlyLoad {};
    wo.checked = true;
    // One verdict per distinct import; the uses of every pickle that references it are combined.
    std::vector<const Import*> order;
    std::unordered_map<std::string, uint8_t> uses;
    // A getattr lookup's result is kept apart from a real import of the same name, which it must not hide.
    auto key = [](const ScannedGlobal& g) { return g.attribute ? "@" + g.qualified() : g.qualified(); };
    for (const auto& i : m_imports) {
        auto [it, fresh] = uses.emplace(key(i.global), i.global.uses);
        if (fresh)
            order.push_back(&i);
        else
            it->second |= i.global.uses;
    }
    std::vector<std::string> needImport;
    std::vector<std::string> unknown;
    size_t dangers = 0;
    for (const Import* i : order) {
        ScannedGlobal g = i->global;
        std::string q = g.qualified();
        g.uses = uses[key(g)];
        if (g.attribute && !(g.uses & (kCalled | kInstantiated)))
            continue; // an enum member read off an import that is judged on its own
        GlobalVerdict v = judge(g);
        if (v.risk == GlobalRisk::Dangerous) {
            wo.refused.push_back(q);
            wo.executes.push_back(q);
            if (++dangers <= kMaxDangerFindings)
                findings.push_back({ Severity::Danger,
                    i->where + " " + useVerb(g) + " " + q + " (" + g.opcode + " at offset " + std::to_string(g.offset)
                        + "), which " + v.reason + "; " + std::string(loader)
                        + " would run it (StateLens did not run anything)",
                    {} });
        } else if (v.risk == GlobalRisk::Unknown) {
            std::string_view import = allowlistingImport(g.module, g.name);
            if (import.empty()) {
                wo.refused.push_back(q);
                unknown.push_back(q);
            } else {
                needImport.push_back(g.name.substr(g.name.rfind('.') + 1)); // DTensor, AffineQuantizedTensor, ...
                if (std::find(wo.imports.begin(), wo.imports.end(), import) == wo.imports.end())
                    wo.imports.emplace_back(import);
            }
        }
    }
    if (dangers > kMaxDangerFindings)
        findings.push_back({ Severity::Danger,
            std::to_string(dangers) + " imports that run code in all: " + listNames(wo.executes), {} });
    std::sort(wo.imports.begin(), wo.imports.end());
    std::string imports;
    for (size_t i = 0; i < wo.imports.size(); ++i)
        imports += (i ? (i + 1 == wo.imports.size() ? " and " : ", ") : "") + std::string("`import ") + wo.imports[i] + "`";
    if (!unknown.empty())
        findings.push_back({ Severity::Warning,
            "pickle references classes outside torch's weights-only allowlist (" + listNames(unknown)
                + "); torch.load(weights_only=True) refuses this file"
                + (imports.empty() ? std::string() : " even after " + imports)
                + " unless torch.serialization.add_safe_globals names them, and weights_only=False imports them",
            {} });
    else if (!wo.imports.empty() && wo.refused.empty())
        findings.push_back({ Severity::Info,
            "torch.load(weights_only=True) reads this file only after " + imports + " (importing allow-lists "
                + listNames(needImport, 4) + "); without that torch refuses it, and weights_only=False imports them",
            {} });
}

} // namespace sl::torch
