#pragma once
// bitsandbytes 4-bit: the few bytes of a weight's quant_state tensor (JSON of its original shape and dtype),
// read through the entry's location, and their parsing. Private to quant/ (grouper.h, scheme_bitsandbytes.cpp).

#include "grouper_names.h"

namespace sl::quant::grouping {

// The few bytes of a bitsandbytes quant_state tensor, read through the entry's location.

class SmallReads {
public:
    explicit SmallReads(const Source& s)
        : m_s(s)
    {
    }

    // The bytes at [offset, offset+length) of files[file], or the reason they cannot be had.
    std::optional<std::string> read(int32_t file, uint64_t offset, uint64_t length, std::string& why)
    {
        if (file < 0 || static_cast<size_t>(file) >= m_s.files.size()) {
            why = "its file is not known";
            return std::nullopt;
        }
        if (length > kMaxQuantStateBytes) {
            why = "larger than " + std::to_string(kMaxQuantStateBytes) + " bytes; not read";
            return std::nullopt;
        }
        std::shared_ptr<const InputFile> f;
        try {
            f = m_files.get(m_s.files[static_cast<size_t>(file)]);
        } catch (const LoadError&) {
            why = "its file cannot be opened";
            return std::nullopt;
        }
        if (offset > f->size() || length > f->size() - offset) {
            why = "its bytes lie past the end of the file";
            return std::nullopt;
        }
        std::string out(length, '\0');
        try {
            f->readInto(offset, std::span<uint8_t>(reinterpret_cast<uint8_t*>(out.data()), out.size()));
        } catch (const std::exception&) {
            why = "reading its bytes failed";
            return std::nullopt;
        }
        return out;
    }

private:
    const Source& m_s;
    OpenFiles m_files;
};

struct QuantState {
    std::string quantType;
    int64_t blocksize = 0;
    DType dtype = DType::Unknown;
    std::string dtypeText;
    Shape shape;
    bool nested = false;
    int64_t nestedBlocksize = 0;
    std::string nestedDtype;
    std::optional<double> nestedOffset; // added back to the dequantized absmax (values need it)
};

inline DType dtypeFromText(std::string_view t)
{
    if (t.starts_with("torch."))
        t.remove_prefix(6);
    auto d = dtypeFromName(t);
    return d ? *d : DType::Unknown;
}

// QuantState.as_dict(packed=True)'s JSON: {"quant_type", "blocksize", "dtype", "shape", ["nested_blocksize",
// "nested_dtype", "nested_offset"]}. Returns the reason when it is not that.
inline std::optional<QuantState> parseQuantState(simdjson::dom::parser& parser, const std::string& bytes, std::string& why)
{
    simdjson::dom::element doc;
    simdjson::dom::object obj;
    if (parser.parse(bytes.data(), bytes.size(), true).get(doc) || doc.get_object().get(obj)) {
        why = "its bytes are not a JSON object";
        return std::nullopt;
    }
    QuantState qs;
    bool haveShape = false;
    for (auto [key, value] : obj) {
        std::string_view s;
        int64_t i = 0;
        if (key == "quant_type" && !value.get_string().get(s)) {
            qs.quantType = std::string(s.substr(0, 32));
        } else if (key == "blocksize" && !value.get_int64().get(i)) {
            qs.blocksize = i;
        } else if (key == "dtype" && !value.get_string().get(s)) {
            qs.dtypeText = std::string(s.substr(0, 32));
            qs.dtype = dtypeFromText(s);
        } else if (key == "nested_blocksize" && !value.get_int64().get(i)) {
            qs.nested = true;
            qs.nestedBlocksize = i;
        } else if (key == "nested_dtype" && !value.get_string().get(s)) {
            qs.nested = true;
            qs.nestedDtype = std::string(s.substr(0, 32));
        } else if (key == "nested_offset") {
            double d = 0; // simdjson reads an integer as a double too
            if (!value.get_double().get(d)) {
                qs.nested = true;
                qs.nestedOffset = d;
            }
        } else if (key == "shape") {
            simdjson::dom::array dims;
            if (value.get_array().get(dims) || dims.size() > 64) {
                why = "its \"shape\" is not a list of at most 64 sizes";
                return std::nullopt;
            }
            uint64_t numel = 1;
            for (auto d : dims) {
                if (d.get_int64().get(i) || i < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(i), &numel)
                    || numel > (uint64_t(1) << 62)) {
                    why = "its \"shape\" holds a size that is not a small non-negative integer";
                    return std::nullopt;
                }
                qs.shape.push_back(i);
            }
            haveShape = true;
        }
    }
    if (!haveShape) {
        why = "its JSON has no \"shape\"";
        return std::nullopt;
    }
    return qs;
}

} // namespace sl::quant::grouping
