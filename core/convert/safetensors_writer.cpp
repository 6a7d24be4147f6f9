#include "safetensors_writer.h"

#include "convert/dtype_cast.h"
#include "formats/loader.h"
#include "formats/safetensors_reader.h"
#include "io/input_file.h"
#include "util/error.h"
#include "util/load_control.h"
#include "values/tensor_bytes.h"
#include "values/torch_ao_dequant.h"
#include "values/value_reader.h"

#include <algorithm>
#include <optional>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <sys/stat.h>
#include <unistd.h>

namespace sl::convert {

namespace {

namespace fs = std::filesystem;

// The safetensors library's Dtype enum order (safetensors/src/tensor.rs): it writes the larger dtypes
// first, so each tensor stays aligned to its element size, and within a dtype by name.
int dtypeRank(std::string_view st)
{
    static constexpr std::string_view kOrder[] = { "BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2",
        "F8_E4M3", "F8_E8M0", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64", "F64", "I64", "U64" };
    for (size_t i = 0; i < std::size(kOrder); ++i)
        if (kOrder[i] == st)
            return static_cast<int>(i);
    return 4; // the fnuz float8 variants: bytes, beside U8
}

// serde_json's compact string: '"', '\\' and control characters escaped, everything else (UTF-8) as is.
void appendJsonString(std::string& out, std::string_view s)
{
    static constexpr char kHex[] = "0123456789abcdef";
    out += '"';
    for (char c : s) {
        const auto u = static_cast<unsigned char>(c);
        switch (c) {
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        case '\b':
            out += "\\b";
            break;
        case '\f':
            out += "\\f";
            break;
        case '\n':
            out += "\\n";
            break;
        case '\r':
            out += "\\r";
            break;
        case '\t':
            out += "\\t";
            break;
        default:
            if (u < 0x20) {
                out += "\\u00";
                out += kHex[u >> 4];
                out += kHex[u & 15];
            } else {
                out += c;
            }
        }
    }
    out += '"';
}

// Python's json.dumps(ensure_ascii=True) string, as transformers writes the index: non-ASCII as \uXXXX
// (surrogate pairs above the BMP).
void appendPythonJsonString(std::string& out, std::string_view s)
{
    static constexpr char kHex[] = "0123456789abcdef";
    auto u16 = [&](uint32_t v) {
        out += "\\u";
        for (int shift = 12; shift >= 0; shift -= 4)
            out += kHex[(v >> shift) & 15];
    };
    out += '"';
    for (size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c < 0x80) {
            if (c == '"')
                out += "\\\"";
            else if (c == '\\')
                out += "\\\\";
            else if (c == '\n')
                out += "\\n";
            else if (c == '\r')
                out += "\\r";
            else if (c == '\t')
                out += "\\t";
            else if (c == '\b')
                out += "\\b";
            else if (c == '\f')
                out += "\\f";
            else if (c < 0x20 || c == 0x7f)
                u16(c);
            else
                out += static_cast<char>(c);
            ++i;
            continue;
        }
        // Names were checked to be valid UTF-8 by the plan.
        const size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        uint32_t cp = c & (n == 4 ? 0x07 : n == 3 ? 0x0F : 0x1F);
        for (size_t k = 1; k < n && i + k < s.size(); ++k)
            cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
        if (cp >= 0x10000) {
            cp -= 0x10000;
            u16(0xD800 + (cp >> 10));
            u16(0xDC00 + (cp & 0x3FF));
        } else {
            u16(cp);
        }
        i += n;
    }
    out += '"';
}

[[noreturn]] void failOutput(const std::string& path, const std::string& what, int err = 0)
{
    throw LoadError(path, what + (err ? std::string(": ") + std::strerror(err) : std::string()) + "; nothing was written");
}

class Descriptor {
public:
    Descriptor(const std::string& path, const std::string& label)
        : m_label(label)
    {
        m_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (m_fd < 0)
            failOutput(label, "cannot create " + path, errno);
    }
    ~Descriptor()
    {
        if (m_fd >= 0)
            ::close(m_fd);
    }
    void write(const uint8_t* p, size_t n)
    {
        while (n) {
            const ssize_t w = ::write(m_fd, p, n);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                failOutput(m_label, "cannot write", errno);
            }
            p += w;
            n -= static_cast<size_t>(w);
            m_written += static_cast<uint64_t>(w);
        }
        // Start writing back what is written so far while the copy goes on, so that finish()'s fsync waits
        // for the last stretch only, not for the whole file (b's 1.9 GB: the wait was half of convert's time,
        // bench/probes/copy_floor.py). A hint to the kernel: fsync still makes the file durable.
        if (m_written - m_flushed >= kWritebackStep) {
            ::sync_file_range(m_fd, static_cast<off_t>(m_flushed), static_cast<off_t>(m_written - m_flushed),
                SYNC_FILE_RANGE_WRITE);
            m_flushed = m_written;
        }
    }
    void write(std::string_view s) { write(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }
    void finish()
    {
        if (::fsync(m_fd) != 0)
            failOutput(m_label, "cannot flush", errno);
        const int fd = m_fd;
        m_fd = -1;
        if (::close(fd) != 0)
            failOutput(m_label, "cannot close", errno);
    }

private:
    static constexpr uint64_t kWritebackStep = uint64_t(32) << 20;
    std::string m_label;
    int m_fd = -1;
    uint64_t m_written = 0;
    uint64_t m_flushed = 0; // bytes whose writeback was started
};

// The temporary folder beside the output: removed with everything in it unless released.
class TemporaryFolder {
public:
    TemporaryFolder(const std::string& output)
    {
        const fs::path out = fs::path(output).lexically_normal();
        fs::path parent = out.parent_path();
        if (parent.empty())
            parent = ".";
        std::string name = out.filename().string();
        if (name.empty() || name == "." || name == "..")
            failOutput(output, "not a name to write to");
        std::string pattern = (parent / ("." + name + ".tmp-XXXXXX")).string();
        if (!::mkdtemp(pattern.data()))
            failOutput(output, "cannot create a temporary folder beside it", errno);
        m_path = pattern;
    }
    ~TemporaryFolder()
    {
        if (m_path.empty())
            return;
        std::error_code ec;
        fs::remove_all(m_path, ec);
    }
    const std::string& path() const { return m_path; }
    void release() { m_path.clear(); }

private:
    std::string m_path;
};

void syncFolder(const std::string& path)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
    }
}

struct ShardFile {
    std::string name; // inside the output folder
    std::vector<size_t> tensors; // plan indices, in the state dict's order
    std::vector<size_t> order; // the same, in file order
    std::vector<std::pair<uint64_t, uint64_t>> offsets; // by position in `tensors`
    std::vector<std::pair<std::string, std::string>> metadata;
    std::string header;
    uint64_t bytes = 0;
};

// Re-reads a written file's header with StateLens's own reader and checks it against the plan: every key,
// dtype, shape and byte range, the metadata, no refusal of the reference reader, and the file's size.
void verifyShard(const std::string& path, const std::string& label, const ConvertPlan& plan, const ShardFile& shard)
{
    const auto file = InputFile::open(path);
    SafetensorsHeader header;
    std::map<std::string, size_t> want; // name -> position in shard.tensors
    for (size_t i = 0; i < shard.tensors.size(); ++i)
        want.emplace(plan.tensors[shard.tensors[i]].name, i);
    size_t seen = 0;
    auto mismatch = [&](const std::string& what) { failOutput(label, "verification failed: " + what); };
    readSafetensorsHeader(*file, OpenOptions {}, header, [&](const SafetensorsTensor& t) {
        const auto it = want.find(std::string(t.name));
        if (it == want.end())
            mismatch("'" + std::string(t.name) + "' was not planned for " + shard.name);
        const PlannedTensor& p = plan.tensors[shard.tensors[it->second]];
        if (t.dtype != p.dtype || t.shape != p.shape)
            mismatch("'" + p.name + "' reads back as " + std::string(dtypeName(t.dtype)) + " " + shapeToString(t.shape)
                + ", planned " + std::string(dtypeName(p.dtype)) + " " + shapeToString(p.shape));
        if (t.begin != shard.offsets[it->second].first || t.end != shard.offsets[it->second].second)
            mismatch("'" + p.name + "' reads back at other offsets");
        ++seen;
    });
    if (seen != want.size())
        mismatch(shard.name + " holds " + std::to_string(seen) + " tensors, planned " + std::to_string(want.size()));
    if (!header.findings.empty())
        mismatch(shard.name + ": " + header.findings.front().message);
    auto sortedMetadata = [](std::vector<std::pair<std::string, std::string>> m) {
        std::sort(m.begin(), m.end());
        return m;
    };
    if (sortedMetadata(header.metadata) != sortedMetadata(shard.metadata))
        mismatch(shard.name + ": __metadata__ differs from the plan");
    if (file->size() != header.bufferStart + shard.bytes)
        mismatch(shard.name + " is " + std::to_string(file->size()) + " bytes, planned "
            + std::to_string(header.bufferStart + shard.bytes));
}

} // namespace

std::optional<uint64_t> parseByteSize(std::string_view text)
{
    while (!text.empty() && text.front() == ' ')
        text.remove_prefix(1);
    while (!text.empty() && text.back() == ' ')
        text.remove_suffix(1);
    size_t digits = 0;
    while (digits < text.size() && ((text[digits] >= '0' && text[digits] <= '9') || text[digits] == '.'))
        ++digits;
    if (digits == 0)
        return std::nullopt;
    std::string number(text.substr(0, digits));
    std::string_view suffix = text.substr(digits);
    while (!suffix.empty() && suffix.front() == ' ')
        suffix.remove_prefix(1);
    std::string unit;
    for (char c : suffix)
        unit += static_cast<char>(c >= 'a' && c <= 'z' ? c - 32 : c);
    static const std::pair<const char*, double> kUnits[] = { { "", 1 }, { "B", 1 }, { "KB", 1e3 }, { "MB", 1e6 },
        { "GB", 1e9 }, { "TB", 1e12 }, { "KIB", 1024.0 }, { "MIB", 1048576.0 }, { "GIB", 1073741824.0 },
        { "TIB", 1099511627776.0 } };
    for (const auto& [name, scale] : kUnits) {
        if (unit != name)
            continue;
        char* end = nullptr;
        const double v = std::strtod(number.c_str(), &end);
        if (end != number.c_str() + number.size() || !(v > 0) || v * scale >= 1.8e19)
            return std::nullopt;
        const auto bytes = static_cast<uint64_t>(v * scale); // int(value * multiplier), as huggingface_hub
        return bytes ? std::optional<uint64_t>(bytes) : std::nullopt;
    }
    return std::nullopt;
}

std::vector<std::vector<size_t>> splitIntoShards(const ConvertPlan& plan, uint64_t maxShardBytes)
{
    std::vector<std::vector<size_t>> shards;
    std::vector<size_t> current;
    uint64_t currentBytes = 0;
    for (size_t i = 0; i < plan.tensors.size(); ++i) {
        const uint64_t size = plan.tensors[i].nbytes;
        if (maxShardBytes && size > maxShardBytes) { // alone, in its own shard (the current one goes on)
            shards.push_back({ i });
            continue;
        }
        if (maxShardBytes && currentBytes + size > maxShardBytes) {
            shards.push_back(std::move(current));
            current.clear();
            currentBytes = 0;
        }
        current.push_back(i);
        currentBytes += size;
    }
    if (!current.empty())
        shards.push_back(std::move(current));
    return shards;
}

std::string safetensorsHeader(const ConvertPlan& plan, const std::vector<size_t>& tensors,
    const std::vector<std::pair<std::string, std::string>>& metadata, std::vector<std::pair<uint64_t, uint64_t>>* offsets,
    std::vector<size_t>* fileOrder)
{
    std::vector<size_t> order(tensors.size());
    for (size_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        const PlannedTensor& x = plan.tensors[tensors[a]];
        const PlannedTensor& y = plan.tensors[tensors[b]];
        const int rx = dtypeRank(dtypeSafetensorsName(x.dtype)), ry = dtypeRank(dtypeSafetensorsName(y.dtype));
        return rx != ry ? rx > ry : x.name < y.name;
    });
    std::string json = "{";
    if (!metadata.empty()) {
        json += "\"__metadata__\":{";
        for (size_t i = 0; i < metadata.size(); ++i) {
            if (i)
                json += ',';
            appendJsonString(json, metadata[i].first);
            json += ':';
            appendJsonString(json, metadata[i].second);
        }
        json += '}';
    }
    if (offsets)
        offsets->assign(tensors.size(), {});
    uint64_t at = 0;
    for (size_t k = 0; k < order.size(); ++k) {
        const PlannedTensor& t = plan.tensors[tensors[order[k]]];
        if (k || !metadata.empty())
            json += ',';
        appendJsonString(json, t.name);
        json += ":{\"dtype\":";
        appendJsonString(json, dtypeSafetensorsName(t.dtype));
        json += ",\"shape\":[";
        for (size_t d = 0; d < t.shape.size(); ++d)
            json += (d ? "," : "") + std::to_string(t.shape[d]);
        json += "],\"data_offsets\":[" + std::to_string(at) + "," + std::to_string(at + t.nbytes) + "]}";
        if (offsets)
            (*offsets)[order[k]] = { at, at + t.nbytes };
        at += t.nbytes;
    }
    json += '}';
    json.append((8 - json.size() % 8) % 8, ' ');
    std::string out(8, '\0');
    uint64_t n = json.size();
    for (int i = 0; i < 8; ++i)
        out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
    if (fileOrder) {
        fileOrder->clear();
        for (size_t k : order)
            fileOrder->push_back(tensors[k]);
    }
    return out + json;
}

WriteReport writeSafetensors(const Source& source, const ConvertPlan& plan, const WriteOptions& options)
{
    std::string output = options.output;
    while (output.size() > 1 && output.back() == '/')
        output.pop_back();
    const bool oneFile = output.size() > 12 && output.ends_with(".safetensors");
    if (oneFile && options.shardBytes)
        failOutput(output, "shards are written into a folder; name a folder, not a .safetensors file, with --shard-size");
    // What is at the output now: a file is replaced (as -o replaces), a folder only when it is empty.
    struct stat st { };
    if (::lstat(output.c_str(), &st) == 0) {
        if (oneFile && !S_ISREG(st.st_mode))
            failOutput(output, "exists and is not a regular file");
        if (!oneFile) {
            std::error_code ec;
            if (!S_ISDIR(st.st_mode))
                failOutput(output, "exists and is not a folder (name a .safetensors file to write one file)");
            if (!fs::is_empty(output, ec))
                failOutput(output, "is a folder that is not empty");
        }
    } else if (errno != ENOENT) {
        failOutput(output, "cannot be written", errno);
    }

    // The shards, their names and headers.
    const auto cut = splitIntoShards(plan, options.shardBytes);
    std::vector<ShardFile> shards(cut.size());
    // Which shard holds each kept tensor: its tied names' metadata goes with it.
    std::map<std::string, size_t> shardOfName;
    for (size_t s = 0; s < cut.size(); ++s) {
        shards[s].tensors = cut[s];
        for (size_t i : cut[s])
            shardOfName[plan.tensors[i].name] = s;
        char name[64];
        if (cut.size() == 1)
            std::snprintf(name, sizeof name, "model.safetensors");
        else
            std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, cut.size());
        shards[s].name = name;
    }
    for (const auto& [key, value] : plan.metadata) {
        // A tied name's record lives in the shard of the tensor it names; the rest in every shard.
        const auto it = shardOfName.find(value);
        if (key != "format" && it != shardOfName.end())
            shards[it->second].metadata.emplace_back(key, value);
        else
            for (ShardFile& f : shards)
                f.metadata.emplace_back(key, value);
    }
    uint64_t total = 0;
    for (ShardFile& f : shards) {
        f.header = safetensorsHeader(plan, f.tensors, f.metadata, &f.offsets, &f.order);
        for (size_t i : f.tensors)
            f.bytes += plan.tensors[i].nbytes;
        total += f.bytes;
    }
    if (options.control)
        options.control->addTotal(total);

    TemporaryFolder temp(output);
    WriteReport report;
    values::FileCache files;
    std::vector<uint8_t> in, cast;
    uint64_t done = 0;
    for (ShardFile& f : shards) {
        const std::string path = temp.path() + "/" + f.name;
        Descriptor out(path, output);
        out.write(f.header);
        for (size_t i : f.order) {
            const PlannedTensor& t = plan.tensors[i];
            // Where the elements come from: the bytes as stored, read once and in order (a deflated record is
            // inflated as the copy advances, not whole); or, under --dtype, a quantized weight's values, float32
            // results held as float64 and narrowed to float32 exactly, then cast as torch's .to() casts a
            // float32 tensor. Groups go through the value reader; a torch.ao tensor's integers through ATen's
            // affine dequantization.
            const uint64_t numel = t.entry->numel();
            std::optional<values::TensorBytes> bytes;
            std::unique_ptr<const values::ValueReader> reader;
            values::TorchAoDequant affine;
            if (!t.dequantize) {
                bytes.emplace(values::TensorBytes::openSequential(source, *t.entry, files));
                if (bytes->numel() != numel || bytes->itemSize() != dtypeItemSize(t.sourceDType))
                    throw LoadError(source.path, "'" + t.sourceName + "': its elements cannot be read as listed; nothing was written");
            } else {
                std::string why;
                bool readable = false;
                if (t.entry->kind == EntryKind::Group) {
                    reader = values::ValueReader::open(source, *t.entry, files, why);
                    readable = reader && reader->numel() == numel;
                } else {
                    affine = values::torchAoDequant(source, *t.entry, files, why);
                    bytes.emplace(values::TensorBytes::openSequential(source, *t.entry, files));
                    readable = affine.active && bytes->numel() == numel;
                }
                if (!readable)
                    throw LoadError(source.path, "'" + t.sourceName + "': cannot be dequantized (" + why + "); nothing was written");
            }
            const uint64_t perRead = std::max<uint64_t>(1,
                options.bufferBytes / (t.dequantize ? sizeof(double) : std::max(1u, dtypeItemSize(t.sourceDType))));
            std::vector<double> values;
            std::vector<float> narrowed;
            for (uint64_t first = 0; first < numel; first += perRead) {
                if (options.control)
                    options.control->checkpoint(output);
                const uint64_t count = std::min(perRead, numel - first);
                const uint8_t* p = nullptr;
                if (!t.dequantize) {
                    p = bytes->read(first, count, in);
                } else {
                    values.resize(static_cast<size_t>(count));
                    if (reader) {
                        reader->read(first, count, values.data());
                    } else {
                        bytes->decodeTo(first, count, values);
                        affine.apply(first, values.data(), values.size());
                    }
                    narrowed.assign(values.begin(), values.end()); // each value is a float32 result: exact
                    p = reinterpret_cast<const uint8_t*>(narrowed.data());
                }
                // As read, or cast to the dtype written.
                if (t.dtype == t.sourceDType) {
                    out.write(p, static_cast<size_t>(count * dtypeItemSize(t.dtype)));
                } else {
                    cast.resize(static_cast<size_t>(count * dtypeItemSize(t.dtype)));
                    castElements(t.sourceDType, p, t.dtype, cast.data(), static_cast<size_t>(count));
                    out.write(cast.data(), cast.size());
                }
                done += count * dtypeItemSize(t.dtype);
                if (options.control)
                    options.control->advance(count * dtypeItemSize(t.dtype));
                if (options.progress)
                    options.progress(done, total, t.name);
            }
            ++report.tensorsWritten;
            report.bytesWritten += t.nbytes;
        }
        out.finish();
        report.fileBytes += f.header.size() + f.bytes;
        verifyShard(path, output, plan, f);
    }

    std::string indexName;
    if (shards.size() > 1) {
        // transformers: json.dumps({"metadata": {"total_size": ...}, "weight_map": ...}, indent=2, sort_keys=True) + "\n"
        std::vector<std::pair<std::string, std::string>> weightMap;
        for (const ShardFile& f : shards)
            for (size_t i : f.tensors)
                weightMap.emplace_back(plan.tensors[i].name, f.name);
        std::sort(weightMap.begin(), weightMap.end());
        std::string index = "{\n  \"metadata\": {\n    \"total_size\": " + std::to_string(total) + "\n  },\n  \"weight_map\": {\n";
        for (size_t i = 0; i < weightMap.size(); ++i) {
            index += "    ";
            appendPythonJsonString(index, weightMap[i].first);
            index += ": ";
            appendPythonJsonString(index, weightMap[i].second);
            index += i + 1 < weightMap.size() ? ",\n" : "\n";
        }
        index += "  }\n}\n";
        indexName = "model.safetensors.index.json";
        Descriptor out(temp.path() + "/" + indexName, output);
        out.write(index);
        out.finish();
        report.fileBytes += index.size();
        // The index re-opened by the loader, as a user's next `statelens ls` would: every planned key in it,
        // with its dtype and shape, and nothing else.
        OpenOptions open;
        open.groupQuantized = false;
        const Source back = openSource(temp.path() + "/" + indexName, open);
        std::map<std::string, const Entry*> got;
        for (const Entry& e : back.entries)
            got.emplace(e.name, &e);
        bool same = got.size() == plan.tensors.size();
        for (const PlannedTensor& t : plan.tensors) {
            const auto it = got.find(t.name);
            same = same && it != got.end() && it->second->dtype == t.dtype && it->second->shape == t.shape;
        }
        if (!same || back.countFindings(Severity::Danger))
            failOutput(output, "verification failed: the index does not read back as planned");
    }

    // Into place: one file renamed over the output, or the whole folder renamed onto it.
    if (options.control)
        options.control->checkpoint(output);
    if (oneFile) {
        if (::rename((temp.path() + "/" + shards[0].name).c_str(), output.c_str()) != 0)
            failOutput(output, "cannot be replaced", errno);
        report.files.push_back(output);
    } else {
        syncFolder(temp.path());
        if (::rename(temp.path().c_str(), output.c_str()) != 0)
            failOutput(output, "cannot be put in place", errno);
        temp.release();
        for (const ShardFile& f : shards)
            report.files.push_back((fs::path(output) / f.name).string());
        if (!indexName.empty())
            report.files.push_back((fs::path(output) / indexName).string());
    }
    const fs::path parent = fs::path(output).lexically_normal().parent_path();
    syncFolder(parent.empty() ? std::string(".") : parent.string());
    report.shards = shards.size();
    return report;
}

} // namespace sl::convert
