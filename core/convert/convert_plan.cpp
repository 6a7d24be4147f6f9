#include "convert_plan.h"

#include "quant/quantized_tensors.h"
#include "rules/rule_engine.h"
#include "util/error.h"
#include "util/utf8.h"
#include "values/torch_ao_dequant.h"
#include "values/value_reader.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

namespace sl::convert {

namespace {

// Names listed in one finding before "and N more": a finding stays one readable line.
constexpr size_t kNamesInFinding = 8;

std::string quoted(std::string_view s)
{
    return "'" + std::string(s) + "'";
}

std::string someNames(const std::vector<std::string>& names)
{
    std::string out;
    for (size_t i = 0; i < names.size() && i < kNamesInFinding; ++i)
        out += (i ? ", " : "") + quoted(names[i]);
    if (names.size() > kNamesInFinding)
        out += " and " + std::to_string(names.size() - kNamesInFinding) + " more";
    return out;
}

DType castTo(DType stored, TargetDType target)
{
    const bool castable = stored == DType::Float16 || stored == DType::BFloat16 || stored == DType::Float32
        || stored == DType::Float64;
    if (!castable)
        return stored;
    switch (target) {
    case TargetDType::Keep:
        return stored;
    case TargetDType::BFloat16:
        return DType::BFloat16;
    case TargetDType::Float16:
        return DType::Float16;
    case TargetDType::Float32:
        return DType::Float32;
    }
    return stored;
}

// Same bytes under two names: a torch tied weight (or one tensor saved twice) is one storage, and the two
// entries view it at the same place with the same dtype, shape and strides. Views of other parts of a
// storage are different tensors and are written each on its own.
using TieKey = std::tuple<std::string_view, int32_t, uint64_t, DType, std::string, std::string>;

std::string dimsText(const Dims& d)
{
    std::string s;
    for (int64_t v : d)
        s += std::to_string(v) + ',';
    return s;
}

} // namespace

std::optional<TargetDType> targetDTypeFromName(std::string_view name)
{
    if (name == "keep")
        return TargetDType::Keep;
    if (name == "bf16" || name == "bfloat16")
        return TargetDType::BFloat16;
    if (name == "fp16" || name == "float16")
        return TargetDType::Float16;
    if (name == "fp32" || name == "float32")
        return TargetDType::Float32;
    return std::nullopt;
}

ConvertPlan planConversion(const Source& source, const ConvertOptions& options)
{
    const std::string nothing = "; nothing was written";
    auto refuse = [&](const std::string& problem) -> void { throw LoadError(source.path, problem + nothing); };

    std::vector<PatternError> errors;
    const CompiledRules rules = CompiledRules::compile(options.rules, &errors);
    if (!errors.empty())
        refuse("the rules cannot be used: " + describePatternError(errors.front()));
    std::optional<CompiledRules> only;
    if (!options.only.empty()) {
        RuleSet one;
        one.rules.push_back(Rule { options.only, "", false, true, {}, {} });
        std::vector<PatternError> onlyErrors;
        only = CompiledRules::compile(one, &onlyErrors);
        if (!onlyErrors.empty())
            throw LoadError("--only",
                "position " + std::to_string(onlyErrors[0].offset) + ": " + onlyErrors[0].message + nothing);
    }

    ConvertPlan plan;
    // The output name of each key, and the source key that took it first: a second key mapped onto the same
    // name is a collision (a dict would keep one of them silently).
    std::unordered_map<std::string, std::string> taken;
    std::map<TieKey, size_t> byBytes; // -> index in plan.tensors
    std::vector<std::pair<size_t, std::string>> tied; // (kept tensor, the other output name)

    // The name a source key is written under: nullopt when --only leaves it out or a rule drops it. Refuses
    // names safetensors cannot hold and a second key on one name.
    auto outputName = [&](const std::string& sourceKey, const std::string& label) -> std::optional<std::string> {
        if (only) {
            bool keep = false;
            try {
                keep = only->matches(0, sourceKey);
            } catch (const RuleMatchError& err) {
                throw LoadError("--only", "the pattern " + err.problem() + nothing);
            }
            if (!keep) {
                ++plan.leftOutByOnly;
                return std::nullopt;
            }
        }
        CompiledRules::Result mapped = rules.apply(sourceKey);
        if (mapped.dropped) {
            plan.droppedByRules.push_back(sourceKey);
            return std::nullopt;
        }
        const std::string& name = mapped.name;
        if (name.empty())
            refuse("the rules map " + label + " to an empty name");
        if (name == "__metadata__")
            refuse("the rules map " + label + " to '__metadata__', which safetensors reserves for its metadata");
        if (!isValidUtf8(name))
            refuse(label + ": its name is not valid UTF-8, which a safetensors header must be");
        const auto [at, fresh] = taken.emplace(name, sourceKey);
        if (!fresh)
            refuse("two keys would be written as " + quoted(name) + ": " + quoted(at->second) + " and " + label
                + (mapped.lastRule >= 0 ? " (rule " + std::to_string(mapped.lastRule + 1) + ")" : std::string())
                + "; a rule collides");
        return std::move(mapped.name);
    };

    // A quantized group under --dtype: its logical values, made by the value reader with the libraries'
    // dequantization recipes (a torch.ao quantized tensor: ATen's affine dequantization), written in the
    // dtype asked for under the entry's own name.
    values::FileCache files;
    std::vector<std::string> dequantized;
    std::string firstNote;
    auto addDequantized = [&](const Entry& g) {
        const std::string label = quoted(g.name);
        std::optional<std::string> name = outputName(g.name, label);
        if (!name)
            return;
        if (!g.shapeKnown || !g.quantization || !g.quantization->logicalShapeKnown)
            refuse(label + ": a quantized weight whose logical shape is not known, so it cannot be dequantized; "
                "use --dtype keep to write its parts as stored");
        std::string why;
        std::string note;
        if (g.kind == EntryKind::Group) {
            const auto reader = values::ValueReader::open(source, g, files, why);
            if (!reader || reader->numel() != g.numel())
                refuse(label + ": cannot be dequantized (" + (why.empty() ? "its values do not match its shape" : why)
                    + "); use --dtype keep to write its parts as stored");
            note = reader->note();
        } else if (!values::torchAoDequant(source, g, files, note).active) {
            refuse(label + ": cannot be dequantized (" + note + ")");
        }
        if (firstNote.empty())
            firstNote = note;
        PlannedTensor t;
        t.name = std::move(*name);
        t.sourceName = g.name;
        t.entry = &g;
        t.dequantize = true;
        t.sourceDType = DType::Float32; // the reader's values, each a float32 (or narrower) result
        t.dtype = castTo(DType::Float32, options.dtype);
        t.shape = g.shape;
        if (__builtin_mul_overflow(g.numel(), static_cast<uint64_t>(dtypeItemSize(t.dtype)), &t.nbytes)
            || __builtin_add_overflow(plan.totalBytes, t.nbytes, &plan.totalBytes))
            refuse(label + ": its shape is too large");
        dequantized.push_back(g.name);
        plan.tensors.push_back(std::move(t));
    };

    auto addTensor = [&](const Entry& e, const std::string& sourceKey, const std::string& groupName) {
        auto label = [&] {
            return groupName.empty() ? quoted(sourceKey) : quoted(sourceKey) + " (a part of " + quoted(groupName) + ")";
        };
        std::optional<std::string> mappedName = outputName(sourceKey, label());
        if (!mappedName)
            return;
        const std::string& name = *mappedName;
        if (e.kind != EntryKind::Tensor)
            refuse(label() + ": not a tensor");
        if (!e.shapeKnown)
            refuse(label() + ": its shape is not known");
        if (dtypeSafetensorsName(e.dtype).empty() || dtypeItemSize(e.dtype) == 0)
            refuse(label() + ": " + std::string(dtypeName(e.dtype))
                + " has no safetensors dtype this writer copies; leave it out with a drop rule or --only");
        const TensorLocation& loc = e.location;
        const bool chunked = e.sharding && !e.sharding->chunks.empty()
            && (e.sharding->kind == Sharding::Kind::DcpChunks || e.sharding->kind == Sharding::Kind::PerRankFiles);
        if (loc.kind != TensorLocation::Kind::Mapped && loc.kind != TensorLocation::Kind::Compressed && !chunked) {
            const char* why = loc.kind == TensorLocation::Kind::Inline ? "its bytes sit inside the pickle; not read yet"
                : loc.kind == TensorLocation::Kind::Unavailable       ? "the file that holds its bytes is missing or unreadable"
                : e.sharding ? "a sharded tensor whose pieces are not in this source (open every rank's file together)"
                : !e.parts.empty() ? "a tensor subclass whose values are in its parts; not converted yet"
                                   : "no bytes in this source (a meta or storage-less tensor)";
            refuse(label() + ": " + why);
        }
        PlannedTensor t;
        t.name = name;
        t.sourceName = sourceKey;
        t.entry = &e;
        t.sourceDType = e.dtype;
        t.dtype = castTo(e.dtype, options.dtype);
        t.shape = e.shape;
        const uint64_t numel = e.numel();
        if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtypeItemSize(t.dtype)), &t.nbytes))
            refuse(label() + ": its shape is too large");
        if (!loc.storageId.empty() && !chunked) {
            const TieKey key { std::string_view(loc.storageId), loc.file, loc.offset, e.dtype, dimsText(e.shape),
                dimsText(loc.strides) };
            const auto [it, first] = byBytes.emplace(key, plan.tensors.size());
            if (!first) {
                tied.emplace_back(it->second, name);
                return;
            }
        }
        if (__builtin_add_overflow(plan.totalBytes, t.nbytes, &plan.totalBytes))
            refuse("the tensors' bytes add up past 2^64");
        plan.tensors.push_back(std::move(t));
    };

    for (const Entry& e : source.entries) {
        if (e.kind == EntryKind::Object) {
            plan.notTensors.push_back(e.name);
            continue;
        }
        if (e.kind == EntryKind::Group) {
            if (options.dtype != TargetDType::Keep && e.quantization) {
                addDequantized(e);
                continue;
            }
            for (const Entry& part : e.parts) {
                const std::string* key = part.attribute(quant::kPartKeyAttribute);
                addTensor(part, key ? *key : e.name + "." + part.name, e.name);
            }
            continue;
        }
        if (options.dtype != TargetDType::Keep && e.kind == EntryKind::Tensor && e.quantization && dtypeIsQuantized(e.dtype)) {
            addDequantized(e);
            continue;
        }
        addTensor(e, e.name, {});
    }

    // save_model's choice: of the names of one storage the first in sorted order is kept, the others are
    // recorded as metadata[removed] = kept.
    std::map<size_t, std::vector<std::string>> groups;
    for (auto& [kept, other] : tied)
        groups[kept].push_back(std::move(other));
    std::vector<std::pair<std::string, std::string>> tiedMetadata;
    for (auto& [index, others] : groups) {
        PlannedTensor& t = plan.tensors[index];
        others.push_back(t.name);
        std::sort(others.begin(), others.end());
        t.name = others.front();
        others.erase(others.begin());
        t.tiedNames = others;
        for (const std::string& o : others)
            tiedMetadata.emplace_back(o, t.name);
        plan.findings.push_back(Finding { Severity::Info,
            "shares its bytes with " + someNames(others) + "; written once, the other names recorded in __metadata__ "
                "as safetensors.torch.save_model records them",
            t.name });
    }
    plan.metadata.emplace_back("format", "pt");
    std::sort(tiedMetadata.begin(), tiedMetadata.end());
    for (auto& m : tiedMetadata)
        plan.metadata.push_back(std::move(m));

    if (!dequantized.empty())
        plan.findings.push_back(Finding { Severity::Info,
            std::to_string(dequantized.size()) + " quantized weight" + (dequantized.size() == 1 ? "" : "s")
                + " written dequantized as " + std::string(dtypeName(castTo(DType::Float32, options.dtype)))
                + ", each with its library's recipe as StateLens's value reader applies it (e.g. " + firstNote
                + "): " + someNames(dequantized),
            dequantized.front() });
    if (!plan.notTensors.empty())
        plan.findings.push_back(Finding { Severity::Warning,
            std::to_string(plan.notTensors.size()) + " entr" + (plan.notTensors.size() == 1 ? "y is" : "ies are")
                + " not a tensor and not written (safetensors holds tensors only): " + someNames(plan.notTensors),
            {} });
    if (!plan.droppedByRules.empty())
        plan.findings.push_back(Finding { Severity::Info,
            std::to_string(plan.droppedByRules.size()) + " key" + (plan.droppedByRules.size() == 1 ? "" : "s")
                + " dropped by the rules: " + someNames(plan.droppedByRules),
            {} });
    if (plan.tensors.empty())
        refuse("no tensor to write" + std::string(plan.leftOutByOnly ? " (--only matched none)" : ""));
    return plan;
}

} // namespace sl::convert
