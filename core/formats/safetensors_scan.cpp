#include "safetensors_scan.h"

#include "util/json_space.h"

#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace sl {

namespace {

// Whether text[0, n) is printable ASCII without '\\' (spaces allowed): then no string in it holds an
// escape, a control byte or UTF-8, and a string ends at the next '"'. 16 bytes a step where SSE2 is (every
// x86-64), else 8.
bool plainAscii(const char* text, size_t n)
{
    size_t i = 0;
    bool other = false;
#if defined(__SSE2__)
    __m128i found = _mm_setzero_si128();
    for (; i + 16 <= n; i += 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(text + i));
        // Signed bytes: below 0x20 also catches 0x80-0xff (negative).
        found = _mm_or_si128(found,
            _mm_or_si128(_mm_cmplt_epi8(v, _mm_set1_epi8(0x20)),
                _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(0x7f)), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\')))));
    }
    other = _mm_movemask_epi8(found) != 0;
#else
    constexpr uint64_t kOnes = 0x0101010101010101, kHigh = 0x8080808080808080;
    uint64_t found = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x;
        std::memcpy(&x, text + i, 8);
        const uint64_t slash = x ^ (kOnes * '\\');
        found |= ((x - kOnes * 0x20) & ~x) // a byte below 0x20
            | ((x + kOnes) | x) // a byte above 0x7e
            | ((slash - kOnes) & ~slash); // a '\\'
    }
    other = (found & kHigh) != 0;
#endif
    for (; i < n; ++i) {
        const auto u = static_cast<unsigned char>(text[i]);
        other = other || u < 0x20 || u > 0x7e || u == '\\';
    }
    return !other;
}

constexpr size_t kMaxDims = 64; // as the JSON path refuses more
constexpr size_t kMaxDigits = 19; // below 2^64 whatever the digits

// A JSON integer of at most kMaxDigits digits at p, which moves past it. No leading zero ("01" is not JSON);
// a fraction or exponent fails where the caller wants ',' or ']'.
bool digits(const char*& p, const char* end, uint64_t& out)
{
    const char* const first = p;
    uint64_t v = 0;
    while (p < end && *p >= '0' && *p <= '9' && p - first <= static_cast<ptrdiff_t>(kMaxDigits))
        v = v * 10 + static_cast<uint64_t>(*p++ - '0');
    const size_t n = static_cast<size_t>(p - first);
    out = v;
    return n != 0 && n <= kMaxDigits && (*first != '0' || n == 1);
}

// A shape's next dimension, as the JSON path accepts it.
bool addDim(Dims& shape, uint64_t d)
{
    if (d > static_cast<uint64_t>(INT64_MAX) || shape.size() >= kMaxDims)
        return false;
    shape.push_back(static_cast<int64_t>(d));
    return true;
}

} // namespace

SafetensorsScan::SafetensorsScan(const char* text, size_t length)
    : m_text(text)
    , m_p(text)
    , m_end(text + length)
    , m_plain(plainAscii(text, length))
{
}

void SafetensorsScan::skipSpace()
{
    while (m_p < m_end && isJsonSpace(*m_p))
        ++m_p;
}

bool SafetensorsScan::literal(char c)
{
    skipSpace();
    if (m_p < m_end && *m_p == c) {
        ++m_p;
        return true;
    }
    return false;
}

bool SafetensorsScan::string(std::string_view& out)
{
    skipSpace();
    if (m_p >= m_end || *m_p != '"')
        return false;
    // The text is plain (plainAscii): the next '"' closes the string.
    const char* const first = m_p + 1;
    const auto* close = static_cast<const char*>(std::memchr(first, '"', static_cast<size_t>(m_end - first)));
    if (!close)
        return false;
    out = std::string_view(first, static_cast<size_t>(close - first));
    m_p = close + 1;
    return true;
}

bool SafetensorsScan::number(uint64_t& out)
{
    skipSpace();
    return digits(m_p, m_end, out);
}

// `{"dtype":"D","shape":[..],"data_offsets":[b,e]}` byte for byte, as serde_json writes it: a few comparisons
// where the general path (tensorFields) takes a call per token.
bool SafetensorsScan::writerLayout(Member& m)
{
    const char* p = m_p;
    const auto take = [&](std::string_view literal) {
        if (static_cast<size_t>(m_end - p) < literal.size() || std::memcmp(p, literal.data(), literal.size()) != 0)
            return false;
        p += literal.size();
        return true;
    };
    if (!take("{\"dtype\":\""))
        return false;
    const auto* close = static_cast<const char*>(std::memchr(p, '"', static_cast<size_t>(m_end - p)));
    if (!close)
        return false;
    m.dtype = std::string_view(p, static_cast<size_t>(close - p));
    p = close + 1;
    if (!take(",\"shape\":["))
        return false;
    if (p < m_end && *p == ']') {
        ++p;
    } else {
        while (true) {
            uint64_t d = 0;
            if (!digits(p, m_end, d) || !addDim(m.shape, d))
                return false;
            if (p < m_end && *p == ',') {
                ++p;
                continue;
            }
            if (p < m_end && *p == ']') {
                ++p;
                break;
            }
            return false;
        }
    }
    if (!take(",\"data_offsets\":[") || !digits(p, m_end, m.begin) || !take(",") || !digits(p, m_end, m.end)
        || !take("]}"))
        return false;
    m_p = p;
    return true;
}

bool SafetensorsScan::tensorFields(Member& m)
{
    if (writerLayout(m))
        return true;
    m.shape.clear();
    if (!literal('{'))
        return false;
    bool dtype = false, shape = false, offsets = false;
    for (int field = 0; field < 3; ++field) {
        std::string_view key;
        if ((field && !literal(',')) || !string(key) || !literal(':'))
            return false;
        if (key == "dtype" && !dtype) {
            if (!string(m.dtype))
                return false;
            dtype = true;
        } else if (key == "shape" && !shape) {
            if (!literal('['))
                return false;
            if (!literal(']')) {
                do {
                    uint64_t d = 0;
                    if (!number(d) || !addDim(m.shape, d))
                        return false;
                } while (literal(','));
                if (!literal(']'))
                    return false;
            }
            shape = true;
        } else if (key == "data_offsets" && !offsets) {
            if (!literal('[') || !number(m.begin) || !literal(',') || !number(m.end) || !literal(']'))
                return false;
            offsets = true;
        } else {
            return false;
        }
    }
    return literal('}');
}

bool SafetensorsScan::metadataPairs(Member& m)
{
    m.isMetadata = true;
    m.metadataFirst = static_cast<uint32_t>(m_metadata.size());
    if (!literal('{'))
        return false;
    if (!literal('}')) {
        do {
            std::string_view key, value;
            if (!string(key) || !literal(':') || !string(value))
                return false;
            m_metadata.emplace_back(key, value);
        } while (literal(','));
        if (!literal('}'))
            return false;
    }
    m.metadataCount = static_cast<uint32_t>(m_metadata.size() - m.metadataFirst);
    return true;
}

bool SafetensorsScan::member()
{
    Member& m = m_members.emplace_back();
    if (!string(m.name) || !literal(':'))
        return false;
    return m.name == "__metadata__" ? metadataPairs(m) : tensorFields(m);
}

SafetensorsScan::Step SafetensorsScan::fail()
{
    m_members.clear();
    m_metadata.clear();
    return Step::Other;
}

SafetensorsScan::Step SafetensorsScan::next(size_t batch)
{
    m_members.clear();
    m_metadata.clear();
    if (!m_started) {
        m_started = true;
        if (!m_plain)
            return fail();
        if (!literal('{'))
            return fail();
        if (literal('}')) {
            skipSpace();
            return m_p == m_end ? Step::End : fail();
        }
    } else {
        ++m_p; // the ',' the last batch stopped at
    }
    while (true) {
        if (!member())
            return fail();
        skipSpace();
        if (m_p < m_end && *m_p == ',') {
            if (m_members.size() >= batch) {
                // Hand over only at a ',' a member follows: from one before `}` or another ',', simdjson
                // would resume at a text that reads as a different error than the whole header's (a
                // superfluous comma read as an object's end). Else this batch is re-read by simdjson.
                const char* next = m_p + 1;
                while (next < m_end && isJsonSpace(*next))
                    ++next;
                if (next == m_end || *next != '"')
                    return fail();
                m_resume = static_cast<size_t>(m_p - m_text);
                return Step::Batch;
            }
            ++m_p;
            continue;
        }
        if (m_p < m_end && *m_p == '}') {
            ++m_p;
            skipSpace();
            return m_p == m_end ? Step::End : fail();
        }
        return fail();
    }
}

} // namespace sl
