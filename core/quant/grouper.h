#pragma once
// Key-pattern grouping of quantized parameters (groupQuantizedEntries, quantized_tensors.h), run once per
// opened source after its reader, over the whole state dict (an index's shards merged), and again after a
// container switch. Private to quant/: the Grouper (grouper.cpp: the name index, plans, claims and turning
// plans into groups) and one file per scheme family that finds its plans (scheme_*.cpp).
//
// Each scheme is a pattern of keys under one module prefix plus a dtype that float modules do not write
// (docs/on-disk-formats.md, "Quantized layouts"):
//   bitsandbytes 4-bit  W + W.absmax, W.quant_map, [W.nested_absmax, W.nested_quant_map],
//                       W.quant_state.bitsandbytes__nf4|fp4 (uint8 bytes of JSON: original shape and dtype)
//   bitsandbytes 8-bit  P.weight (int8) + P.SCB + P.weight_format
//   GPTQ / AWQ          P.qweight (int32) + P.qzeros + P.scales [+ P.g_idx]   -> group P.weight
//   FP8                 W (float8) + W_scale_inv (block) | W_scale [+ P.input_scale]
//   torchao flattened   `M._P_<inner>` or `N:<inner>` with __metadata__ tensor_names and per-name JSON
//   torch.ao eager      qint8/quint8 tensors and packed-params tuples get Quantization; P.scale/P.zero_point
//                       of quantized modules are marked as activation qparams
// Each match becomes one Group at its weight's position; the other keys move into its parts.
//
// Cost: one pass that looks at each name's last component and dtype; ordinary float state dicts stop
// there. Only sources with a trigger build a name index (NameIndex, O(1) lookups); nothing is quadratic.
// Running it again finds the groups already formed (their parts are no longer top-level keys) and changes
// nothing; findings are added only when not already there.

#include "bnb_quant_state.h"
#include "grouper_names.h"
#include "torchao_metadata.h"

#include <unordered_set>

namespace sl::quant::grouping {

enum class Concern : uint8_t { MissingPart, Orphan, Inconsistent, Unscaled, Count_ };

// What a group is, as every scheme forms it in place of its anchor (the weight, itself one of the parts): its
// flags and device are the anchor's.
void describeGroup(Entry& group, std::string name, const Entry& anchor, DType dtype, Shape shape, bool shapeKnown,
    std::string_view typeName, std::shared_ptr<const Quantization> q);
// A part of a group: the key it was stored under moves to its "key" attribute, and its name becomes its role.
void nameByRole(Entry& part, std::string_view role);

// The descriptions of FP8 (and int8) groups, one per distinct layout, shared by every group of that layout
// (DeepSeek-V3's 45,000 FP8 weights point at one). A checkpoint has a handful of layouts over thousands of
// weights, so the last few are remembered and most weights skip describing their blocks. Used by the
// Grouper and by Fp8PairGrouper (quantized_tensors.h).
class Fp8Layouts {
public:
    // `scale`: the weight's `_scale_inv` (`inverse`) or `_scale`; `input`: it has an input_scale.
    std::shared_ptr<const Quantization> describe(const Entry& weight, const Entry& scale, bool inverse, bool input);

private:
    static std::string blockOf(const Shape& w, const Shape& s);
    std::shared_ptr<const Quantization> described(
        DType stored, std::string_view granularity, const std::string& block, bool inverse, bool input);

    struct Layout {
        DType dtype;
        bool weightKnown, scaleKnown, inverse, input;
        Shape weight, scale;
        std::shared_ptr<const Quantization> q;
    };
    std::array<Layout, 8> m_recent {};
    size_t m_nextRecent = 0;
    std::string m_key;
    std::unordered_map<std::string, std::shared_ptr<const Quantization>> m_described;
};

class Grouper {
public:
    explicit Grouper(Source& s);

    // Which patterns the names, dtypes and metadata show (scan()), from entries or from rows: a source whose
    // entries are handed over as rows and show none is left as it is, its entries unbuilt.
    struct Patterns {
        bool torchAo = false, colon = false, fp8 = false, underscore = false, bnb4 = false, bnb8 = false,
             gptq = false, tensorNames = false, inputScale = false;
        // `quantizedEntry`: a quantized entry other than an FP8 group, or torch.ao's packed-params tuple group.
        void note(std::string_view name, DType dtype, bool isGroup, bool quantizedEntry);
        void noteMetadata(const Source& s);
        bool any() const { return torchAo || colon || fp8 || bnb4 || bnb8 || gptq || underscore || tensorNames; }
        // What either shows: of two parts of one list, scanned apart.
        Patterns& operator|=(const Patterns& o);
        // Anything other than FP8 weights and their scales, which the index reader may have paired early.
        bool beyondFp8Pairs() const { return torchAo || colon || underscore || bnb4 || bnb8 || gptq || tensorNames || inputScale; }
    };
    static Patterns patternsIn(const DeferredEntries& rows, const Source& s);

    void run();

private:
    // The index reader's early FP8 groups (Source::provisionalFp8Groups) stand where FP8 is the only scheme
    // present; otherwise they go back to the weight and scale they were made of, in place, before any
    // scheme claims parts, so the result is the same as without them. Uses scan()'s findings.
    void confirmProvisionalGroups();

    // A part's role is a literal, or text the Grouper keeps (role()): a plan holds no string of its own
    // but its name, so the 45,000 plans of a DeepSeek-V3 index cost a few MB, not 17.
    struct Part {
        std::string_view role;
        size_t index;
    };
    // What a scheme fills in: one reused draft per scheme is cheap (its parts keep their capacity).
    struct Plan {
        size_t anchor = npos;
        std::string name;
        std::vector<Part> parts;
        // Empty for a plain tensor stored under another key. Shared: groups of one scheme and layout (the
        // 45,000 FP8 weights of a DeepSeek-V3 index) point at one description.
        std::shared_ptr<const Quantization> q;
        DType dtype = DType::Unknown;
        Shape shape;
        bool shapeKnown = true;
        std::string_view typeName; // a literal or role() text
    };
    // A plan as kept until apply(): its parts sit in m_parts, one flat array for all plans, and its shape, when
    // not its anchor's (FP8 and most schemes keep the weight's), in m_planShapes: 88 bytes a plan, not 128,
    // for the 45,000 plans of a DeepSeek-V3 index.
    static constexpr uint32_t kAnchorShape = UINT32_MAX;
    struct Planned {
        std::string name;
        std::shared_ptr<const Quantization> q;
        std::string_view typeName;
        uint32_t anchor;
        uint32_t firstPart;
        uint32_t partCount;
        uint32_t shape; // in m_planShapes, or kAnchorShape
        DType dtype;
        bool shapeKnown;
    };

    // Text that lives as long as the Grouper, each distinct text once (roles and type names are few).
    std::string_view role(std::string_view text);

    // Which patterns occur at all. A float state dict without any of them returns at once.
    bool scan();

    struct NameOf {
        const std::vector<Entry>* entries;
        std::string_view operator()(size_t i) const { return (*entries)[i].name; }
    };
    NameOf nameOf() const { return { &m_e }; }

    size_t find(std::string_view name);
    bool isFree(size_t i) const { return i != npos && (m_claimed.empty() || !m_claimed[i]); }
    size_t findFree(std::string_view name);

    // findFree(name), trying `beside` first: writers list a weight's scale right after it (sorted keys), and
    // that comparison saves a hashed lookup, a cache miss, for each of 45,000 FP8 weights. Where a name
    // repeats, the copy beside the weight is the one paired.
    size_t findFreeBeside(size_t beside, std::string_view name);

    // Keeps the plan unless another claimed its name; the draft is left cleared for reuse.
    bool addPlan(Plan& p);
    // Whether the name of the plan just added (m_plans' last) is still free, and if so takes it.
    bool claimPlanName();

    void report(Concern c, Severity s, std::string message, std::string entry);

    // ---- torch.ao eager quantization: already described by state_dict_tree, here given Quantization.

    static Quantization torchAoQuantization(const Entry& t);

    void torchAo();

    // ---- torchao's flattened safetensors layout

    void loadTorchaoMetadata();

    std::optional<std::string_view> meta(std::string_view key) const;

    // Entries named "<base>:<inner>", by base: torchao's colon spelling.
    void indexColonNames();

    struct TorchaoInfo {
        std::string type; // short class name, "Tensor" for plain tensors
        std::string qualified; // when the file names the module
        std::vector<std::string> dataNames; // _tensor_data_names, when given
        DType dtype = DType::Unknown;
        Shape shape;
        bool haveShape = false;
        std::vector<std::pair<std::string, std::string>> params;
        bool described = false;
    };

    static DType dtypeOfJson(simdjson::dom::element v);

    static bool shapeOfJson(simdjson::dom::element v, Shape& out);

    TorchaoInfo torchaoInfo(const std::string& name);

    // Logical shape of a flattened torchao tensor when the metadata does not state it.
    static bool logicalShapeFromData(std::string_view type, const Entry& primary, Shape& out);

    void torchaoFlattened();

    void torchaoGroup(const std::string& name, const TorchaoInfo& info);

    // ---- bitsandbytes

    struct Bnb4 {
        std::string_view base;
        size_t absmax = npos, quantMap = npos, nestedAbsmax = npos, nestedQuantMap = npos, state = npos;
        std::string_view quantType;
        size_t first = npos;
    };

    void bitsandbytes4();

    void bnb4Group(const Bnb4& b);

    void checkBnb4Sizes(const std::string& name, const QuantState& qs, const Entry& weight, size_t absmax);

    void bitsandbytes8();

    // ---- GPTQ / AWQ

    struct Packed {
        bool ok = false;
        int64_t in = 0, out = 0, bits = 0, groups = 0;
        std::string layout;
    };

    static bool known2d(const Entry* e) { return e && e->shapeKnown && e->shape.size() == 2; }

    // Bits and the logical [out, in] from the int32-packed layouts, when the shapes determine them.
    static Packed derivePacked(const Entry& qw, const Entry* qz, const Entry* sc, const Entry* gi);

    void gptq();

    // ---- FP8 (and int8 with weight_scale, compressed-tensors style)

    // `base` + `suffix` in a buffer reused across calls, for lookups that would otherwise allocate a name each.
    std::string_view withSuffix(std::string_view base, std::string_view suffix);
    // join(prefix, key) in the same buffer.
    std::string_view joinedKey(std::string_view prefix, std::string_view key);

    void fp8();

    // ---- torchao subclasses in torch.save files (described by describeQuantizedSubclass)

    void subclassFindings();

    // ---- The plans become groups, in place of their anchors; the other parts leave the top level.

    void apply();

    Entry buildGroup(Planned& plan);

    void flushFindings();

    Source& m_s;
    std::vector<Entry>& m_e;
    SmallReads m_reads;
    simdjson::dom::parser m_parser;
    NameIndex m_index;
    bool m_indexed = false; // m_index built, or m_sortedNames found true
    bool m_sortedNames = false;
    bool m_sortedKnown = false; // m_sortedNames is up to date (scan() finds it while the names are in cache)
    std::vector<bool> m_claimed; // empty until the first plan
    std::vector<Planned> m_plans;
    std::vector<Shape> m_planShapes;
    std::vector<Part> m_parts;
    std::unordered_set<std::string> m_roles; // role() texts (node-based: views stay valid)
    NameIndex m_planNames; // positions in m_plans by name (with unique names: plans not named after their anchor)
    std::vector<bool> m_namedAfterAnchor; // with unique names: entries whose name a plan anchored there took
    std::string m_key; // scratch for lookups (withSuffix, joinedKey)
    Fp8Layouts m_fp8Layouts;
    std::vector<Finding> m_findings;
    std::array<size_t, static_cast<size_t>(Concern::Count_)> m_counts {};
    std::array<std::string, static_cast<size_t>(Concern::Count_)> m_firstOver {};
    size_t m_bnb4Groups = 0;

    std::unordered_map<std::string_view, std::string_view> m_meta;
    std::vector<std::pair<std::string, std::string>> m_shardMeta;
    std::unordered_map<std::string_view, std::vector<size_t>> m_colon;

    Patterns m_has;
};

} // namespace sl::quant::grouping
