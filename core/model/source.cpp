#include "source.h"

#include "model/shape_volume.h"

#include "util/error.h"

#include <algorithm>
#include <charconv>

namespace sl {

std::string_view severityName(Severity s)
{
    switch (s) {
    case Severity::Info:
        return "info";
    case Severity::Warning:
        return "warning";
    case Severity::Danger:
        return "danger";
    }
    return "info";
}

std::string_view shardingKindName(Sharding::Kind k)
{
    switch (k) {
    case Sharding::Kind::DTensor:
        return "dtensor";
    case Sharding::Kind::ShardedTensor:
        return "sharded_tensor";
    case Sharding::Kind::FlatParameter:
        return "flat_parameter";
    case Sharding::Kind::DcpChunks:
        return "dcp_chunks";
    case Sharding::Kind::PerRankFiles:
        return "per_rank_files";
    }
    return "dtensor";
}

std::string_view containerRoleName(ContainerInfo::Role r)
{
    switch (r) {
    case ContainerInfo::Role::Model:
        return "model";
    case ContainerInfo::Role::Optimizer:
        return "optimizer";
    case ContainerInfo::Role::Ema:
        return "ema";
    case ContainerInfo::Role::Other:
        return "other";
    }
    return "other";
}

int pickLargestContainer(const std::vector<ContainerInfo>& containers, std::string* reason)
{
    for (ContainerInfo::Role role : { ContainerInfo::Role::Model, ContainerInfo::Role::Ema, ContainerInfo::Role::Other,
             ContainerInfo::Role::Optimizer }) {
        int best = -1;
        for (size_t i = 0; i < containers.size(); ++i) {
            const ContainerInfo& c = containers[i];
            if (c.role == role && c.tensorCount > 0
                && (best < 0 || c.tensorCount > containers[static_cast<size_t>(best)].tensorCount))
                best = static_cast<int>(i);
        }
        if (best >= 0) {
            if (reason)
                *reason = role == ContainerInfo::Role::Model ? "the model state dict with the most tensors"
                                                             : "no model state dict; the "
                        + std::string(containerRoleName(role)) + " container with the most tensors";
            return best;
        }
    }
    return -1;
}

uint64_t Entry::numel() const
{
    return shapeKnown ? shapeVolume(shape) : 0;
}

uint64_t Entry::nbytes() const
{
    if (kind == EntryKind::Object)
        return 0;
    if (kind == EntryKind::Group) {
        uint64_t sum = 0;
        for (const auto& p : parts)
            sum += p.nbytes();
        return sum;
    }
    return tensorBytes(numel(), dtype);
}

const std::string* Entry::attribute(std::string_view key) const
{
    for (const auto& [k, v] : attributes)
        if (k == key)
            return &v;
    return nullptr;
}

const Entry* Entry::part(std::string_view role) const
{
    for (const Entry& p : parts)
        if (p.name == role)
            return &p;
    return nullptr;
}

const std::string* Quantization::param(std::string_view key) const
{
    for (const auto& [k, v] : params)
        if (k == key)
            return &v;
    return nullptr;
}

std::string shapeToString(const Shape& s)
{
    // Called once per row of a listing: digits go straight into the result, no temporary strings (and no
    // reserve, which would move short shapes out of the small-string buffer onto the heap).
    std::string out;
    out += '[';
    char digits[24];
    for (size_t i = 0; i < s.size(); ++i) {
        if (i)
            out += ", ";
        auto [end, ec] = std::to_chars(digits, digits + sizeof digits, s[i]);
        out.append(digits, end);
    }
    out += ']';
    return out;
}

void SourceBacking::selectContainer(Source& s, const std::string& container) const
{
    if (container != s.container)
        throw LoadError(s.path, "no container '" + container + "' (this format has only one)");
}

Source Source::withContainer(const std::string& container) const
{
    Source out = *this;
    if (backing) {
        backing->selectContainer(out, container);
    } else if (container != this->container) {
        throw LoadError(path, "no container '" + container + "' (this format has only one)");
    }
    return out;
}

void Source::addFinding(Severity s, std::string message, std::string entry)
{
    findings.push_back(Finding { s, std::move(message), std::move(entry) });
}

size_t Source::countFindings(Severity s) const
{
    return static_cast<size_t>(
        std::count_if(findings.begin(), findings.end(), [s](const Finding& f) { return f.severity == s; }));
}

uint64_t Source::totalParameters() const
{
    uint64_t sum = 0;
    for (const auto& e : entries)
        sum += parameterCount(e);
    return sum;
}

uint64_t Source::totalBytes() const
{
    uint64_t sum = 0;
    for (const auto& e : entries)
        sum += e.nbytes();
    return sum;
}

} // namespace sl
