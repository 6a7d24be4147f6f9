#pragma once
// A safetensors header in the layout its writers use, read without a general JSON parser. safetensors'
// serializer (serde_json) and the Python and JS writers lay every header out the same way: an object whose
// members are `"name":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}` and `"__metadata__":{"k":"v"}`.
// simdjson On-Demand walks such a header at about 0.8 GB/s (16 ms for the 13 MB header of 100,000 tensors,
// most of it per-field dispatch); this scanner, which accepts nothing else, reads it several times faster.
//
// It accepts a strict subset of JSON: a text of printable ASCII without escapes (spaces between tokens, no
// tabs or line breaks), the three tensor fields each once in any order, shapes of at most 64 dimensions up
// to INT64_MAX, and offsets of at most 19 digits. Anything else (escapes, UTF-8, other keys, errors) stops it,
// and the text from the first member it has not handed over is read by simdjson instead
// (safetensors_reader.cpp), which reports any error as it would for the whole header. So what it accepts
// reads exactly as simdjson reads it (fuzz_safetensors compares the two on every input).

#include "model/dims.h"

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace sl {

class SafetensorsScan {
public:
    // A member as read: a tensor's fields as written (not yet checked against each other), or __metadata__.
    struct Member {
        std::string_view name; // a view into the text
        bool isMetadata = false;
        std::string_view dtype;
        Dims shape;
        uint64_t begin = 0;
        uint64_t end = 0;
        uint32_t metadataFirst = 0; // __metadata__'s pairs in metadata()
        uint32_t metadataCount = 0;
    };
    enum class Step {
        Batch, // members() holds the next members; more follow
        End, // members() holds the last members; the object closed and only whitespace follows
        Other, // the text from resumeAt() on is not in the layout (or not JSON); members() is empty
    };

    // text[0, length): one JSON document (a header, or one chunk of one written as an object).
    SafetensorsScan(const char* text, size_t length);

    // Reads up to `batch` (at least 1) members after those already returned. A batch is returned only once
    // each of its members, and the separator or the object's end after them, has been read (a ',' only where
    // a member's '"' follows it).
    Step next(size_t batch);
    const std::vector<Member>& members() const { return m_members; }
    const std::vector<std::pair<std::string_view, std::string_view>>& metadata() const { return m_metadata; }

    // After Step::Other: where the members not returned start, as the offset of the ',' before the first of
    // them (a JSON parser reads from there with a '{' written over it); npos when no member was returned.
    static constexpr size_t npos = static_cast<size_t>(-1);
    size_t resumeAt() const { return m_resume; }

private:
    void skipSpace();
    bool literal(char c);
    bool string(std::string_view& out);
    bool number(uint64_t& out);
    bool member();
    bool writerLayout(Member& m);
    bool tensorFields(Member& m);
    bool metadataPairs(Member& m);
    Step fail();

    const char* const m_text;
    const char* m_p;
    const char* const m_end;
    const bool m_plain; // the whole text is printable ASCII without escapes (else nothing is read here)
    bool m_started = false;
    size_t m_resume = npos;
    std::vector<Member> m_members;
    std::vector<std::pair<std::string_view, std::string_view>> m_metadata;
};

} // namespace sl
