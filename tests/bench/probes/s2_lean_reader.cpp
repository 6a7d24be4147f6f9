// A throwaway probe, kept so its figure can be reproduced: the least a C++ program can do to list case s2
// (a safetensors index and its shard headers) in one thread. simdjson On-Demand, names as views into the
// texts, one flat record per tensor, an open-addressing table for weight_map order, one line printed per
// tensor. No grouping, no checks, no findings, no error handling (for the benchmark's own files only): what
// StateLens does beyond this is what its time buys.
//   g++ -O2 -std=c++20 tests/bench/probes/s2_lean_reader.cpp -lsimdjson -o /tmp/s2_lean_reader
//   /tmp/s2_lean_reader BENCH_WORK_DIR/s2-deepseek-v3-61layers > /dev/null
#include <simdjson.h>
#include <cstdio>
#include <string>
#include <vector>
#include <fcntl.h>
#include <unistd.h>
#include <chrono>
#include <cstring>
#include <charconv>
struct T { std::string_view name; std::string_view dtype; int64_t shape[5]; uint8_t rank; uint64_t b, e; int shard; };
static uint64_t h(std::string_view s){ uint64_t x=1469598103934665603ull; for(char c: s){x^=(unsigned char)c; x*=1099511628211ull;} return x; }
int main(int argc, char** argv) {
    auto t0 = std::chrono::steady_clock::now();
    auto ms = [&]{ return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); };
    std::string dir = argv[1];
    auto idx = simdjson::padded_string::load(dir + "/model.safetensors.index.json");
    simdjson::ondemand::parser p;
    auto doc = p.iterate(idx.value());
    std::vector<std::string_view> shards;
    std::vector<std::pair<std::string_view,int>> wm; wm.reserve(1<<17);
    std::string_view last; int lastId=-1;
    for (auto f : doc["weight_map"].get_object()) {
        std::string_view k = f.unescaped_key().value(); std::string_view v = f.value().get_string().value();
        int id;
        if (v == last) id = lastId; else { id = -1; for (size_t i=0;i<shards.size();++i) if (shards[i]==v) {id=i;break;} if (id<0){shards.push_back(v); id=shards.size()-1;} last=v; lastId=id; }
        wm.emplace_back(k, id);
    }
    double tIndex = ms();
    std::vector<T> ts; ts.reserve(wm.size());
    std::vector<simdjson::padded_string> bufs(shards.size());
    simdjson::ondemand::parser hp;
    for (size_t s = 0; s < shards.size(); ++s) {
        int fd = open((dir + "/" + std::string(shards[s])).c_str(), O_RDONLY);
        uint64_t n; pread(fd, &n, 8, 0);
        bufs[s] = simdjson::padded_string(n); pread(fd, bufs[s].data(), n, 8); close(fd);
        auto hd = hp.iterate(bufs[s]);
        for (auto f : hd.get_object()) {
            std::string_view k = f.unescaped_key().value();
            if (k == "__metadata__") continue;
            T t{}; t.name = k; t.shard = s;
            auto o = f.value().get_object();
            for (auto g : o) {
                std::string_view gk = g.unescaped_key().value();
                if (gk == "dtype") t.dtype = g.value().get_string().value();
                else if (gk == "shape") { for (auto d : g.value().get_array()) t.shape[t.rank++] = d.get_int64().value(); }
                else if (gk == "data_offsets") { auto a = g.value().get_array(); auto i = a.begin().value(); t.b = (*i).get_uint64().value(); ++i; t.e = (*i).get_uint64().value(); }
            }
            ts.push_back(t);
        }
    }
    double tHeaders = ms();
    size_t cap = 1; while (cap < ts.size()*2) cap <<= 1;
    std::vector<uint32_t> table(cap, UINT32_MAX);
    for (uint32_t i = 0; i < ts.size(); ++i) { size_t j = h(ts[i].name) & (cap-1); while (table[j] != UINT32_MAX) j = (j+1)&(cap-1); table[j] = i; }
    double tTable = ms();
    std::string out; out.reserve(1 << 21);
    char num[32];
    for (auto& [name, s] : wm) {
        size_t j = h(name) & (cap-1); uint32_t at = UINT32_MAX;
        while (table[j] != UINT32_MAX) { if (ts[table[j]].name == name) { at = table[j]; break; } j = (j+1)&(cap-1); }
        if (at == UINT32_MAX) continue;
        const T& t = ts[at];
        out += t.name; out += "  "; out += t.dtype; out += "  [";
        for (int i = 0; i < t.rank; ++i) { if (i) out += ", "; auto r = std::to_chars(num, num+32, t.shape[i]); out.append(num, r.ptr); }
        out += "]  "; out += shards[t.shard]; out += '\n';
        if (out.size() > (1 << 20)) { fwrite(out.data(), 1, out.size(), stdout); out.clear(); }
    }
    fwrite(out.data(), 1, out.size(), stdout);
    fprintf(stderr, "%zu tensors: index %.1f headers %.1f table %.1f total %.1f ms\n", ts.size(), tIndex, tHeaders, tTable, ms());
}
