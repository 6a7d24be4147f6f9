#include "tensor_bytes.h"

#include "distributed/chunk_tiling.h"
#include "formats/dcp_item.h"
#include "util/error.h"
#include "values/element_decode.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <limits>

namespace sl::values {

namespace {

// Views larger than this (in elements) that repeat their stored elements are weighed or refused, not read
// repetition by repetition.
constexpr uint64_t kCollapseFrom = uint64_t(1) << 24;

// A deflated storage is inflated, and a non-contiguous view's span read, whole; beyond this it is refused
// rather than allocated.
constexpr uint64_t kMaxInflated = uint64_t(4) << 30;
constexpr uint64_t kMaxHeld = kMaxInflated;

// Inflates the first `want` bytes of a deflated record. The buffer grows as output arrives, never sized up
// front from what the file claims: a record whose sizes lie would otherwise cost the claimed bytes (1 GB,
// or 4 GiB) for nothing. What arrives is checked against the need.
std::shared_ptr<const std::vector<uint8_t>> inflateRaw(
    const InputFile& file, uint64_t offset, uint64_t want, const std::string& what)
{
    if (want > kMaxInflated)
        throw std::runtime_error(
            what + ": deflated storage of " + std::to_string(want) + " bytes is over the 4 GiB limit");
    auto out = std::make_shared<std::vector<uint8_t>>();
    out->resize(static_cast<size_t>(std::min<uint64_t>(want, uint64_t(1) << 20)));
    struct Stream {
        z_stream z {};
        ~Stream() { inflateEnd(&z); }
    } stream;
    z_stream& z = stream.z;
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK)
        throw std::runtime_error(what + ": zlib failed to start");
    // The compressed bytes are read in windows as zlib takes them; the record runs at most to the end of
    // the file, and zlib stops at the end of its stream.
    const uint64_t inSize = file.size() - std::min(offset, file.size());
    std::vector<uint8_t> window;
    int rc = Z_OK;
    while (rc == Z_OK && z.total_out < want) {
        if (z.total_out == out->size())
            out->resize(static_cast<size_t>(std::min<uint64_t>(want, uint64_t(out->size()) * 2)));
        z.next_out = out->data() + z.total_out;
        z.avail_out
            = static_cast<uInt>(std::min<uint64_t>(out->size() - z.total_out, std::numeric_limits<uInt>::max()));
        if (z.avail_in == 0 && z.total_in < inSize) {
            const Bytes in = file.read(offset + z.total_in, std::min<uint64_t>(inSize - z.total_in, uint64_t(1) << 20), window);
            z.next_in = const_cast<Bytef*>(in.data());
            z.avail_in = static_cast<uInt>(in.size());
        }
        rc = inflate(&z, Z_NO_FLUSH);
        if (rc == Z_BUF_ERROR && z.avail_in == 0 && z.total_in >= inSize)
            break; // the input ran out
        if (rc == Z_BUF_ERROR)
            rc = Z_OK;
    }
    const uint64_t got = z.total_out;
    if (got < want)
        throw std::runtime_error(what + ": the deflated record holds " + std::to_string(got) + " of the "
            + std::to_string(want) + " bytes the tensor needs");
    return out;
}

} // namespace

dcp::ItemData FileCache::locateInItem(const InputFile& file, uint64_t itemOffset, uint64_t itemLength, std::string_view fqn,
    const Shape& offsets, const Shape& sizes, DType dtype, const std::string& where)
{
    std::lock_guard lock(m_blobMutex);
    return dcp::locateInItem(file, itemOffset, itemLength, fqn, offsets, sizes, dtype, where, m_blobs[file.path()]);
}

// A deflated record read as a stream: bytes [at, at + n) are inflated on demand, the stream kept where the
// last read ended, so reading in order inflates the record once with a window of a few MB. A read before
// that point starts the stream again.
class TensorBytes::Inflater {
public:
    Inflater(std::shared_ptr<const InputFile> file, uint64_t offset, uint64_t limit, std::string what)
        : m_file(std::move(file))
        , m_offset(offset)
        , m_limit(limit)
        , m_what(std::move(what))
    {
    }
    ~Inflater()
    {
        if (m_live)
            inflateEnd(&m_z);
    }
    Inflater(const Inflater&) = delete;
    Inflater& operator=(const Inflater&) = delete;

    void read(uint64_t at, uint64_t n, uint8_t* out)
    {
        std::lock_guard lock(m_mutex);
        if (at + n > m_limit)
            throw std::runtime_error(m_what + ": a read past the bytes the tensor needs");
        if (!m_live || at < m_z.total_out)
            restart();
        std::vector<uint8_t> skip;
        while (m_z.total_out < at) { // skipped bytes are inflated and dropped
            skip.resize(static_cast<size_t>(std::min<uint64_t>(at - m_z.total_out, uint64_t(1) << 20)));
            produce(skip.data(), skip.size());
        }
        produce(out, n);
    }

private:
    void restart()
    {
        if (m_live)
            inflateEnd(&m_z);
        m_z = z_stream {};
        m_live = false;
        if (inflateInit2(&m_z, -MAX_WBITS) != Z_OK)
            throw std::runtime_error(m_what + ": zlib failed to start");
        m_live = true;
    }
    // Exactly n more bytes of output into dst, the compressed bytes read in windows as zlib takes them.
    void produce(uint8_t* dst, uint64_t n)
    {
        const uint64_t inSize = m_file->size() - std::min(m_offset, m_file->size());
        const uint64_t target = m_z.total_out + n;
        while (m_z.total_out < target) {
            m_z.next_out = dst + (n - (target - m_z.total_out));
            m_z.avail_out = static_cast<uInt>(std::min<uint64_t>(target - m_z.total_out, std::numeric_limits<uInt>::max()));
            if (m_z.avail_in == 0 && m_z.total_in < inSize) {
                const Bytes in = m_file->read(
                    m_offset + m_z.total_in, std::min<uint64_t>(inSize - m_z.total_in, uint64_t(1) << 20), m_window);
                m_z.next_in = const_cast<Bytef*>(in.data());
                m_z.avail_in = static_cast<uInt>(in.size());
            }
            const int rc = inflate(&m_z, Z_NO_FLUSH);
            // The stream ended, or no progress is possible with the input used up (Z_BUF_ERROR), short of target.
            if ((rc == Z_STREAM_END && m_z.total_out < target)
                || (rc == Z_BUF_ERROR && m_z.avail_in == 0 && m_z.total_in >= inSize))
                throw std::runtime_error(m_what + ": the deflated record ends before the bytes the tensor needs");
            if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
                throw std::runtime_error(m_what + ": the deflated record is corrupt");
        }
    }

    std::mutex m_mutex;
    std::shared_ptr<const InputFile> m_file;
    uint64_t m_offset;
    uint64_t m_limit; // bytes the tensor needs from the record's start
    std::string m_what;
    z_stream m_z {};
    bool m_live = false;
    std::vector<uint8_t> m_window;
};

TensorBytes TensorBytes::open(const Source& source, const Entry& e, FileCache& files)
{
    return open(source, e, files, Mode::Whole);
}

TensorBytes TensorBytes::openCollapsingBroadcasts(const Source& source, const Entry& e, FileCache& files)
{
    return open(source, e, files, Mode::CollapseBroadcasts);
}

TensorBytes TensorBytes::openSequential(const Source& source, const Entry& e, FileCache& files)
{
    return open(source, e, files, Mode::Sequential);
}

TensorBytes TensorBytes::open(const Source& source, const Entry& e, FileCache& files, Mode mode)
{
    const bool collapse = mode == Mode::CollapseBroadcasts;
    auto fail
        = [&](const std::string& why) -> TensorBytes { throw LoadError(source.path, "'" + e.name + "': " + why); };
    TensorBytes t;
    t.m_dtype = e.dtype;
    t.m_item = dtypeItemSize(e.dtype);
    if (e.kind != EntryKind::Tensor)
        return fail(e.kind == EntryKind::Group ? "a group of tensors; its parts have the values" : "not a tensor");
    if (t.m_item == 0)
        return fail(std::string(dtypeName(e.dtype)) + " elements are not whole bytes");
    if (!e.shapeKnown)
        return fail("its shape is not known");
    t.m_numel = e.numel();
    t.m_sizes.assign(e.shape.begin(), e.shape.end());
    // A DCP item stored through stream transforms (zstd, ...) holds other bytes than the elements, whether its
    // one chunk is the whole tensor (then located as the item) or one of several.
    if (e.sharding && e.sharding->kind == Sharding::Kind::DcpChunks)
        for (const ShardChunk& c : e.sharding->chunks)
            if (c.transformed)
                return fail("a chunk is stored through DCP stream transforms, which StateLens does not undo: " + c.label);
    const TensorLocation& loc = e.location;
    switch (loc.kind) {
    case TensorLocation::Kind::Mapped:
    case TensorLocation::Kind::Compressed:
        break;
    case TensorLocation::Kind::Transformed: // refused above, from its chunk, which names the transforms
        return fail("it is stored through DCP stream transforms, which StateLens does not undo");
    case TensorLocation::Kind::Inline:
        return fail("its bytes sit inside the pickle; not read yet");
    case TensorLocation::Kind::Unavailable:
        return fail("the file that holds its bytes is missing or unreadable");
    default:
        if (e.sharding && !e.sharding->chunks.empty()
            && (e.sharding->kind == Sharding::Kind::DcpChunks || e.sharding->kind == Sharding::Kind::PerRankFiles))
            break; // assembled from its chunks below
        if (e.sharding)
            return fail("a sharded tensor whose pieces are not in this source");
        if (!e.parts.empty()) { // a wrapper subclass (TwoTensor, ...): its inner tensors are listed as parts
            std::string names;
            for (const Entry& p : e.parts)
                names += (names.empty() ? "" : ", ") + p.name;
            return fail("a tensor subclass whose values are in its parts (" + names + ")");
        }
        return fail("no bytes in this source (meta or storage-less)");
    }
    if (loc.kind != TensorLocation::Kind::Mapped && loc.kind != TensorLocation::Kind::Compressed) {
        // DCP chunks and the pieces of per-rank files: every chunk must sit inside its file, lie inside the
        // tensor, and the chunks must tile it.
        const size_t nd = t.m_sizes.size();
        uint64_t covered = 0;
        // Pieces that are not boxes of the tensor: partial sums, or rows interleaved by _StridedShard.
        for (const std::string& p : e.sharding->placements)
            if (p.rfind("Partial", 0) == 0 || p.rfind("_StridedShard", 0) == 0)
                return fail("its pieces are not boxes of the tensor (" + p + "); not assembled");
        const auto& all = e.sharding->chunks;
        for (const ShardChunk& c : all)
            if (c.offsets.size() != nd || c.sizes.size() != nd)
                return fail("a chunk's rank differs from the tensor's");
        auto boxOf = [&](size_t i) { return distributed::ChunkBox { all[i].offsets, all[i].sizes }; };
        // Replicas (the same box in several rank files) are read from the first.
        std::vector<size_t> kept;
        if (e.sharding->kind == Sharding::Kind::PerRankFiles) {
            kept = distributed::distinctBoxes(all.size(), boxOf);
        } else {
            kept.resize(all.size());
            for (size_t i = 0; i < kept.size(); ++i)
                kept[i] = i;
        }
        for (size_t k : kept) {
            const ShardChunk& c = all[k];
            if (c.file < 0 || static_cast<size_t>(c.file) >= source.files.size())
                return fail("a chunk's bytes are not located");
            Chunk ch;
            uint64_t elems = 1;
            for (size_t d = 0; d < nd; ++d) {
                if (c.offsets[d] < 0 || c.sizes[d] < 0 || c.offsets[d] > t.m_sizes[d]
                    || c.sizes[d] > t.m_sizes[d] - c.offsets[d])
                    return fail("a chunk lies outside the tensor");
                if (__builtin_mul_overflow(elems, static_cast<uint64_t>(c.sizes[d]), &elems))
                    return fail("a chunk is too large");
            }
            uint64_t chunkBytes = 0;
            if (__builtin_mul_overflow(elems, static_cast<uint64_t>(t.m_item), &chunkBytes))
                return fail("a chunk is too large");
            std::shared_ptr<const InputFile> f;
            try {
                f = files.get(source.files[static_cast<size_t>(c.file)]);
            } catch (const LoadError& err) {
                return fail(err.problem());
            }
            if (c.byteOffset > f->size() || c.byteLength > f->size() - c.byteOffset)
                return fail("a chunk's bytes reach past the end of " + f->path());
            uint64_t byteOffset = c.byteOffset, byteLength = c.byteLength;
            if (c.inItem) {
                // A DCP chunk listed at its item's range: its elements are found in the item now.
                const std::string where = " (" + f->path() + " at " + std::to_string(c.byteOffset) + ")";
                dcp::ItemData d;
                try {
                    const std::string* fqn = e.attribute("dcp_fqn");
                    d = files.locateInItem(
                        *f, c.byteOffset, c.byteLength, fqn ? *fqn : e.name, c.offsets, c.sizes, e.dtype, where);
                } catch (const FormatError& err) {
                    return fail("a chunk's item" + where + " cannot be read: " + err.what());
                }
                if (!d.available)
                    return fail("a chunk's item" + where + ": " + d.why);
                if (!d.raw)
                    return fail("a chunk's elements cannot be found in its item: " + (d.note.empty() ? "it is stored another way" : d.note));
                byteOffset = d.offset;
                byteLength = d.length;
            }
            if (byteLength != chunkBytes)
                return fail("a chunk's byte length does not match its shape");
            ch.file = f.get();
            ch.fileOffset = byteOffset;
            ch.offsets.assign(c.offsets.begin(), c.offsets.end());
            ch.sizes.assign(c.sizes.begin(), c.sizes.end());
            ch.strides.assign(nd, 1);
            for (size_t d = nd; d-- > 1;)
                ch.strides[d - 1] = ch.strides[d] * std::max<int64_t>(ch.sizes[d], 1);
            for (size_t d = 0; d < c.strides.size(); ++d) // a rank's local tensor may be a view
                if (c.strides.size() != nd || (c.sizes[d] > 1 && c.strides[d] != ch.strides[d]))
                    return fail("a piece is stored as a strided view; not assembled");
            if (__builtin_add_overflow(covered, elems, &covered))
                return fail("its chunks do not cover the tensor");
            t.m_chunks.push_back(std::move(ch));
            t.m_chunkFiles.push_back(std::move(f));
        }
        auto tiling = std::make_shared<distributed::ChunkTiling>(
            distributed::ChunkTiling::check(e.shape, t.m_chunks.size(), [&](size_t i) {
                return distributed::ChunkBox { t.m_chunks[i].offsets, t.m_chunks[i].sizes };
            }));
        using V = distributed::ChunkTiling::Verdict;
        if (t.m_numel > 0 && tiling->verdict() == V::Overlap)
            return fail("its chunks overlap");
        if (t.m_numel > 0 && tiling->verdict() == V::Irregular)
            return fail("its chunks are cut irregularly (not a grid, as no sharding writes them); not assembled");
        if (t.m_numel > 0 && tiling->verdict() != V::Tiles)
            return fail("its chunks do not cover the tensor");
        t.m_tiling = std::move(tiling);
        if (covered != t.m_numel)
            return fail("its chunks do not cover the tensor");
        t.m_contiguous = false;
        return t;
    }
    if (loc.file < 0 || static_cast<size_t>(loc.file) >= source.files.size())
        return fail("its location names no file");
    std::shared_ptr<const InputFile> file;
    try {
        file = files.get(source.files[static_cast<size_t>(loc.file)]);
    } catch (const LoadError& err) {
        return fail(err.problem());
    }
    const uint64_t fileSize = file->size();

    // Strides: given by torch.save files (in elements), absent for contiguous formats. Every product below
    // is checked: sizes and strides come from the file, and an overflow must refuse, not wrap.
    const bool strided = !loc.strides.empty();
    if (strided && loc.strides.size() != t.m_sizes.size())
        return fail("strides and shape disagree in length");
    for (int64_t d : t.m_sizes)
        if (d < 0)
            return fail("negative size");
    if (strided) {
        t.m_strides.assign(loc.strides.begin(), loc.strides.end());
    } else {
        t.m_strides.assign(t.m_sizes.size(), 1);
        for (size_t d = t.m_sizes.size(); d-- > 1;)
            if (__builtin_mul_overflow(t.m_strides[d], std::max<int64_t>(t.m_sizes[d], 1), &t.m_strides[d - 1]))
                return fail("its shape is too large");
    }
    // A broadcast view names each stored element many times. Statistics weigh the stored ones instead of
    // reading every repetition (when that saves much: small views keep their exact logical-order hash).
    {
        uint64_t repeats = 1;
        for (size_t d = 0; d < t.m_sizes.size(); ++d)
            if (t.m_strides[d] == 0 && t.m_sizes[d] > 1
                && __builtin_mul_overflow(repeats, static_cast<uint64_t>(t.m_sizes[d]), &repeats))
                repeats = UINT64_MAX;
        // (Saturated counts mean a shape past 2^64 elements: not weighed; the check below refuses it.)
        if (collapse && repeats >= 16 && repeats != UINT64_MAX && t.m_numel > kCollapseFrom
            && t.m_numel != UINT64_MAX) {
            for (size_t d = 0; d < t.m_sizes.size(); ++d)
                if (t.m_strides[d] == 0 && t.m_sizes[d] > 1)
                    t.m_sizes[d] = 1;
            t.m_multiplicity = repeats;
            t.m_numel /= repeats; // exact: repeats is a product of some of the sizes
        }
    }
    // The furthest element a view reaches, in elements from element [0, ..., 0].
    uint64_t reach = 0;
    int64_t expect = 1;
    bool expectValid = true;
    t.m_contiguous = true;
    for (size_t d = t.m_sizes.size(); d-- > 0;) {
        if (t.m_strides[d] < 0)
            return fail("negative stride");
        if (t.m_sizes[d] > 1) {
            uint64_t step = 0;
            if (__builtin_mul_overflow(
                    static_cast<uint64_t>(t.m_sizes[d] - 1), static_cast<uint64_t>(t.m_strides[d]), &step)
                || __builtin_add_overflow(reach, step, &reach))
                return fail("its strides reach past any file");
            if (!expectValid || t.m_strides[d] != expect)
                t.m_contiguous = false;
            if (__builtin_mul_overflow(expect, t.m_sizes[d], &expect))
                expectValid = false;
        }
    }
    uint64_t spanBytes = 0;
    if (t.m_numel != 0 && __builtin_mul_overflow(reach + 1, static_cast<uint64_t>(t.m_item), &spanBytes))
        return fail("its strides reach past any file");
    // A view naming far more elements than it spans (stride 0, or overlapping strides) would be work without
    // information, and a hostile header could make it endless: reading stays within 64 times the stored
    // elements once it is large.
    if (t.m_numel > kCollapseFrom && t.m_numel / 64 > reach + 1)
        return fail("a view of " + std::to_string(t.m_numel) + " elements over " + std::to_string(reach + 1)
            + " stored ones (expanded or overlapping strides); not read");

    if (loc.kind == TensorLocation::Kind::Compressed) {
        // The record is the whole storage; the view starts storageOffset elements in, and only the bytes up
        // to its last element are inflated.
        if (loc.offset > fileSize)
            return fail("its record starts past the end of the file");
        uint64_t start = 0, need = 0;
        if (__builtin_mul_overflow(
                static_cast<uint64_t>(std::max<int64_t>(loc.storageOffset, 0)), static_cast<uint64_t>(t.m_item), &start)
            || __builtin_add_overflow(start, spanBytes, &need) || need > loc.storageNbytes)
            return fail("its view reaches past the end of its storage");
        if (mode == Mode::Sequential && t.m_contiguous) {
            t.m_inflater = std::make_shared<Inflater>(file, loc.offset, need, e.name);
            t.m_file = file; // named in errors
            t.m_fileOffset = start; // element [0, ..., 0] in the inflated record
            return t;
        }
        try {
            t.m_held = inflateRaw(*file, loc.offset, need, e.name);
        } catch (const LoadError&) {
            throw;
        } catch (const std::exception& err) {
            return fail(err.what());
        }
        t.m_base = t.m_held->data() + start;
        return t;
    }
    // Element [0, ..., 0] is the first byte of the span (strides are non-negative).
    const uint64_t start = loc.offset;
    if (start > fileSize || spanBytes > fileSize - start)
        return fail("its bytes reach past the end of " + file->path());
    if (!loc.storageId.empty() && loc.storageNbytes
        && (start < loc.storageByteOffset || start - loc.storageByteOffset + spanBytes > loc.storageNbytes))
        return fail("its view reaches outside its storage");
    if (!t.m_contiguous) {
        // A view that is not contiguous (transposed, sliced) is gathered from its span, read once: bounded
        // per tensor, and far cheaper than a read per element.
        if (spanBytes > kMaxHeld)
            return fail("a non-contiguous view spanning " + std::to_string(spanBytes) + " bytes; over the "
                + std::to_string(kMaxHeld >> 30) + " GiB read for one view");
        auto held = std::make_shared<std::vector<uint8_t>>();
        file->read(start, spanBytes, *held);
        t.m_held = std::move(held);
        t.m_base = t.m_held->data();
        return t;
    }
    t.m_fileOffset = start;
    t.m_file = std::move(file);
    return t;
}

const uint8_t* TensorBytes::chunked(uint64_t first, uint64_t count, std::vector<uint8_t>& scratch) const
{
    // Runs along the last dimension: each run lies in one chunk and is contiguous there.
    scratch.resize(count * m_item);
    const size_t nd = m_sizes.size();
    std::vector<int64_t> index(nd, 0);
    uint64_t done = 0;
    while (done < count) {
        uint64_t rest = first + done;
        for (size_t d = nd; d-- > 0;) {
            index[d] = static_cast<int64_t>(rest % static_cast<uint64_t>(m_sizes[d]));
            rest /= static_cast<uint64_t>(m_sizes[d]);
        }
        const int64_t piece = m_tiling ? m_tiling->pieceAt(index.data()) : -1;
        const Chunk* hit = piece >= 0 ? &m_chunks[static_cast<size_t>(piece)] : nullptr;
        uint64_t run = 1;
        uint64_t local = 0;
        if (hit) { // always, after open()'s tiling check
            for (size_t d = 0; d < nd; ++d)
                local += static_cast<uint64_t>(index[d] - hit->offsets[d]) * static_cast<uint64_t>(hit->strides[d]);
            if (nd > 0)
                run = static_cast<uint64_t>(hit->offsets[nd - 1] + hit->sizes[nd - 1] - index[nd - 1]);
            run = std::min(run, count - done);
            hit->file->readInto(hit->fileOffset + local * m_item, std::span(scratch.data() + done * m_item, run * m_item));
        } else {
            std::memset(scratch.data() + done * m_item, 0, m_item);
        }
        done += run;
    }
    return scratch.data();
}

const uint8_t* TensorBytes::read(uint64_t first, uint64_t count, std::vector<uint8_t>& buffer) const
{
    if (!m_chunks.empty())
        return chunked(first, count, buffer);
    if (m_inflater) {
        buffer.resize(count * m_item);
        try {
            m_inflater->read(m_fileOffset + first * m_item, count * m_item, buffer.data());
        } catch (const std::runtime_error& err) {
            throw LoadError(m_file ? m_file->path() : std::string(), err.what());
        }
        return buffer.data();
    }
    if (m_held)
        return m_contiguous ? m_base + first * m_item : gather(first, count, buffer);
    buffer.resize(count * m_item);
    m_file->readInto(m_fileOffset + first * m_item, std::span(buffer.data(), count * m_item));
    return buffer.data();
}

void TensorBytes::decodeTo(uint64_t first, uint64_t count, std::vector<double>& out) const
{
    thread_local std::vector<uint8_t> scratch;
    out.resize(static_cast<size_t>(count));
    if (count)
        decode(m_dtype, read(first, count, scratch), static_cast<size_t>(count), out.data());
}

const uint8_t* TensorBytes::gather(uint64_t first, uint64_t count, std::vector<uint8_t>& scratch) const
{
    // Gather: unravel `first` into an index, then step an odometer, keeping the byte offset in step.
    scratch.resize(count * m_item);
    const size_t nd = m_sizes.size();
    std::vector<int64_t> index(nd, 0);
    uint64_t rest = first;
    uint64_t offset = 0;
    for (size_t d = nd; d-- > 0;) {
        const auto size = static_cast<uint64_t>(m_sizes[d]);
        index[d] = static_cast<int64_t>(rest % size);
        rest /= size;
        offset += static_cast<uint64_t>(index[d]) * static_cast<uint64_t>(m_strides[d]);
    }
    uint8_t* out = scratch.data();
    for (uint64_t i = 0; i < count; ++i) {
        std::memcpy(out + i * m_item, m_base + offset * m_item, m_item);
        for (size_t d = nd; d-- > 0;) {
            if (++index[d] < m_sizes[d]) {
                offset += static_cast<uint64_t>(m_strides[d]);
                break;
            }
            offset -= static_cast<uint64_t>(m_strides[d]) * static_cast<uint64_t>(m_sizes[d] - 1);
            index[d] = 0;
        }
    }
    return scratch.data();
}

} // namespace sl::values
