// A throwaway probe, kept so its figure can be reproduced: the least a C++ program can do to list case a
// (a torch.save zip with 76,800 small tensors) in one thread. It reads the zip's central directory, then
// data.pkl, and runs a minimal pickle machine over it: 16-byte values, strings as views into the pickle,
// tuples in one flat arena, memo slots by number, tensors as flat records, no object graph. It prints one
// line per tensor (name, dtype, shape, storage key, its record's local header offset). No load-safety scan,
// no checks, no findings, no container search, no error handling: for the benchmark's own file only.
// What StateLens does beyond this is what its time buys.
//   g++ -O2 -std=c++20 tests/bench/probes/a_lean_unpickler.cpp -o /tmp/a_lean_unpickler
//   /tmp/a_lean_unpickler BENCH_WORK_DIR/small-76800.bin > /dev/null
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <string_view>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_map>
#include <vector>

namespace {

uint16_t u16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
uint32_t u32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }

enum Tag : uint8_t { None, Bool, Int, Str, Tuple, Rebuild, OrderedDictCls, StorageType, Storage, Tensor, Dict, Other };
struct Value {
    Tag tag = None;
    uint32_t a = 0; // Str: length; Tuple: size; StorageType/Storage: dtype id
    uint64_t b = 0; // Int: value; Str: offset in the pickle; Tuple: arena start; Tensor/Dict: index; Storage: key (as Str offset)
};
struct TensorRec {
    uint32_t keyOff, keyLen;
    uint32_t dtype;
    uint8_t rank;
    int64_t shape[8];
    int64_t stride[8];
    int64_t offset;
};
const char* kDtypes[] = { "float32", "float16", "bfloat16", "int64", "int32", "int8", "uint8", "bool", "float64", "?" };
uint32_t dtypeOf(std::string_view storage)
{
    if (storage == "FloatStorage") return 0;
    if (storage == "HalfStorage") return 1;
    if (storage == "BFloat16Storage") return 2;
    if (storage == "LongStorage") return 3;
    if (storage == "IntStorage") return 4;
    if (storage == "CharStorage") return 5;
    if (storage == "ByteStorage") return 6;
    if (storage == "BoolStorage") return 7;
    if (storage == "DoubleStorage") return 8;
    return 9;
}

} // namespace

int main(int argc, char** argv)
{
    const auto t0 = std::chrono::steady_clock::now();
    const auto ms = [&] { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); };
    const int fd = open(argv[1], O_RDONLY);
    struct stat st;
    fstat(fd, &st);
    const uint64_t size = st.st_size;
    // The file mapped (no copies; tensor pages are never touched). End of central directory (torch writes
    // zip64 only past 4 GiB; this file is 64 MB).
    const auto* file = static_cast<const uint8_t*>(mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0));
    const uint8_t* tail = file + size - std::min<uint64_t>(size, 65536 + 22);
    size_t eocd = (file + size - tail) - 22;
    while (u32(&tail[eocd]) != 0x06054b50)
        --eocd;
    const uint32_t cdSize = u32(&tail[eocd + 12]), cdOffset = u32(&tail[eocd + 16]);
    const std::basic_string_view<uint8_t> cd(file + cdOffset, cdSize);
    // Record names -> local header offsets, names as views into the directory. torch names its storages
    // 0, 1, 2, ...: a record "<prefix>/data/<n>" goes to slot n, anything else to a hash map.
    std::vector<uint32_t> byNumber;
    std::unordered_map<std::string_view, uint32_t> records;
    std::string_view pklName;
    uint32_t pklHeader = 0, pklSize = 0;
    for (size_t p = 0; p + 46 <= cd.size();) {
        const uint16_t n = u16(&cd[p + 28]), extra = u16(&cd[p + 30]), comment = u16(&cd[p + 32]);
        const std::string_view name(reinterpret_cast<const char*>(&cd[p + 46]), n);
        const size_t slash = name.rfind('/');
        uint32_t number = 0;
        bool numeric = name.substr(0, slash).ends_with("/data") && slash + 1 < name.size();
        for (size_t i = slash + 1; numeric && i < name.size(); ++i) {
            numeric = name[i] >= '0' && name[i] <= '9';
            number = number * 10 + (name[i] - '0');
        }
        if (numeric) {
            if (byNumber.size() <= number)
                byNumber.resize(number + 1 + byNumber.size() / 2, UINT32_MAX);
            byNumber[number] = u32(&cd[p + 42]);
        } else {
            records.emplace(name, u32(&cd[p + 42]));
        }
        if (name.ends_with("/data.pkl")) {
            pklName = name;
            pklHeader = u32(&cd[p + 42]);
            pklSize = u32(&cd[p + 20]);
        }
        p += 46 + n + extra + comment;
    }
    const double tDir = ms();
    const uint8_t* lh = file + pklHeader;
    const std::basic_string_view<uint8_t> pkl(lh + 30 + u16(lh + 26) + u16(lh + 28), pklSize);
    const std::string_view prefix = pklName.substr(0, pklName.size() - 8); // "name/"
    const double tRead = ms();

    // The machine.
    std::vector<Value> stack, memo, arena;
    std::vector<size_t> marks;
    std::vector<TensorRec> tensors;
    std::vector<std::vector<std::pair<Value, Value>>> dicts;
    stack.reserve(64);
    arena.reserve(1 << 20);
    tensors.reserve(1 << 17);
    const uint8_t* p = pkl.data();
    const uint8_t* end = p + pkl.size();
    const auto str = [&](Value v) { return std::string_view(reinterpret_cast<const char*>(pkl.data()) + v.b, v.a); };
    memo.reserve(1 << 16);
    const auto put = [&](uint32_t i) {
        if (i == memo.size())
            memo.push_back(stack.back()); // pickle numbers its memo 0, 1, 2, ...
        else {
            if (memo.size() < i)
                memo.resize(i + 1);
            memo[i] = stack.back();
        }
    };
    const auto tuple = [&](size_t from) {
        Value t { Tuple, static_cast<uint32_t>(stack.size() - from), arena.size() };
        arena.insert(arena.end(), stack.begin() + from, stack.end());
        stack.resize(from);
        stack.push_back(t);
    };
    bool done = false;
    while (p < end && !done) {
        const uint8_t op = *p++;
        switch (op) {
        case 0x80: ++p; break; // PROTO
        case 0x95: p += 8; break; // FRAME
        case '}': stack.push_back({ Dict, 0, dicts.size() }); dicts.emplace_back(); break;
        case ')': stack.push_back({ Tuple, 0, 0 }); break;
        case 'N': stack.push_back({}); break;
        case 0x88: stack.push_back({ Bool, 0, 1 }); break;
        case 0x89: stack.push_back({ Bool, 0, 0 }); break;
        case 'K': stack.push_back({ Int, 0, *p++ }); break;
        case 'M': stack.push_back({ Int, 0, u16(p) }); p += 2; break;
        case 'J': stack.push_back({ Int, 0, static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(u32(p)))) }); p += 4; break;
        case 0x8a: { const uint8_t n = *p++; int64_t v = 0; std::memcpy(&v, p, n > 8 ? 8 : n); p += n; stack.push_back({ Int, 0, static_cast<uint64_t>(v) }); break; }
        case 'X': { const uint32_t n = u32(p); p += 4; stack.push_back({ Str, n, static_cast<uint64_t>(p - pkl.data()) }); p += n; break; }
        case 0x8c: { const uint8_t n = *p++; stack.push_back({ Str, n, static_cast<uint64_t>(p - pkl.data()) }); p += n; break; }
        case 'q': put(*p++); break;
        case 'r': put(u32(p)); p += 4; break;
        case 0x94: put(static_cast<uint32_t>(memo.size())); break;
        case 'h': stack.push_back(memo[*p++]); break;
        case 'j': stack.push_back(memo[u32(p)]); p += 4; break;
        case '(': marks.push_back(stack.size()); break;
        case 't': tuple(marks.back()); marks.pop_back(); break;
        case 0x85: tuple(stack.size() - 1); break;
        case 0x86: tuple(stack.size() - 2); break;
        case 0x87: tuple(stack.size() - 3); break;
        case 'c': {
            const auto* nl = static_cast<const uint8_t*>(std::memchr(p, '\n', end - p));
            const std::string_view module(reinterpret_cast<const char*>(p), nl - p);
            p = nl + 1;
            const auto* nl2 = static_cast<const uint8_t*>(std::memchr(p, '\n', end - p));
            const std::string_view name(reinterpret_cast<const char*>(p), nl2 - p);
            p = nl2 + 1;
            if (name == "_rebuild_tensor_v2")
                stack.push_back({ Rebuild });
            else if (name == "OrderedDict")
                stack.push_back({ OrderedDictCls });
            else if (module == "torch" && name.ends_with("Storage"))
                stack.push_back({ StorageType, dtypeOf(name) });
            else
                stack.push_back({ Other });
            break;
        }
        case 'Q': { // BINPERSID: ('storage', type, key, location, numel)
            const Value pid = stack.back();
            const Value* items = &arena[pid.b];
            stack.back() = { Storage, items[1].a, items[2].b | (uint64_t(items[2].a) << 40) };
            break;
        }
        case 'R': {
            const Value args = stack.back();
            stack.pop_back();
            const Value fn = stack.back();
            if (fn.tag == Rebuild) {
                const Value* a = &arena[args.b];
                TensorRec t {};
                t.keyOff = static_cast<uint32_t>(a[0].b & ((uint64_t(1) << 40) - 1));
                t.keyLen = static_cast<uint32_t>(a[0].b >> 40);
                t.dtype = a[0].a;
                t.offset = static_cast<int64_t>(a[1].b);
                t.rank = static_cast<uint8_t>(a[2].a);
                for (uint32_t d = 0; d < a[2].a && d < 8; ++d) {
                    t.shape[d] = static_cast<int64_t>(arena[a[2].b + d].b);
                    t.stride[d] = static_cast<int64_t>(arena[a[3].b + d].b);
                }
                stack.back() = { Tensor, 0, tensors.size() };
                tensors.push_back(t);
            } else if (fn.tag == OrderedDictCls) {
                stack.back() = { Dict, 0, dicts.size() };
                dicts.emplace_back();
            } else {
                stack.back() = { Other };
            }
            break;
        }
        case 'u': { // SETITEMS
            const size_t m = marks.back();
            marks.pop_back();
            auto& d = dicts[stack[m - 1].b];
            for (size_t i = m; i + 1 < stack.size(); i += 2)
                d.emplace_back(stack[i], stack[i + 1]);
            stack.resize(m);
            break;
        }
        case 's': { auto& d = dicts[stack[stack.size() - 3].b]; d.emplace_back(stack[stack.size() - 2], stack.back()); stack.resize(stack.size() - 2); break; }
        case 'b': stack.pop_back(); break; // BUILD: the state (metadata) is dropped
        case '.': done = true; break;
        default: std::fprintf(stderr, "opcode 0x%02x not handled\n", op); return 1;
        }
    }
    const double tPickle = ms();

    // One line per tensor, written into one buffer.
    std::string out;
    out.reserve(tensors.size() * 96);
    char line[512];
    std::string recordName(prefix);
    for (const auto& [k, v] : dicts[stack.back().b]) {
        if (v.tag != Tensor)
            continue;
        const TensorRec& t = tensors[v.b];
        const std::string_view key(reinterpret_cast<const char*>(pkl.data()) + t.keyOff, t.keyLen);
        uint32_t at = UINT32_MAX, number = 0;
        bool numeric = !key.empty();
        for (char c : key) {
            numeric = numeric && c >= '0' && c <= '9';
            number = number * 10 + (c - '0');
        }
        if (numeric && number < byNumber.size()) {
            at = byNumber[number];
        } else {
            recordName.resize(prefix.size());
            recordName.append("data/").append(key);
            if (const auto it = records.find(recordName); it != records.end())
                at = it->second;
        }
        int n = std::snprintf(line, sizeof line, "%.*s  %s  [", static_cast<int>(k.a), str(k).data(), kDtypes[t.dtype]);
        for (int d = 0; d < t.rank; ++d)
            n += std::snprintf(line + n, sizeof line - n, d ? ", %lld" : "%lld", static_cast<long long>(t.shape[d]));
        n += std::snprintf(line + n, sizeof line - n, "]  storage %.*s  at %u\n", static_cast<int>(key.size()), key.data(),
            at);
        out.append(line, n);
    }
    fwrite(out.data(), 1, out.size(), stdout);
    std::fprintf(stderr, "%zu tensors: directory %.1f read pickle %.1f pickle %.1f total %.1f ms\n", tensors.size(), tDir,
        tRead, tPickle, ms());
    return 0;
}
