#include "dcp_item.h"

#include "formats/dcp_metadata.h"
#include "formats/safetensors_reader.h"
#include "io/zip_archive.h"
#include "util/error.h"

#include <algorithm>
#include <vector>

namespace sl::dcp {

namespace {

constexpr size_t kEndRecordSize = 22;

bool spend(SpendCheck maySpend, void* context, size_t cost) { return !maySpend || maySpend(context, cost); }

ItemData inTorchSave(const InputFile& file, uint64_t itemOffset, uint64_t itemLength, bool needKnown, uint64_t need,
    const std::string& where)
{
    ItemData at;
    at.format = ItemData::Format::TorchSave;
    at.offset = itemOffset;
    at.length = itemLength;
    try {
        ZipArchive zip(file, itemOffset, itemLength);
        const ZipEntry* data = nullptr;
        size_t candidates = 0;
        for (const ZipEntry& e : zip.entries()) {
            std::string_view n = e.name;
            const size_t slash = n.find('/');
            if (slash == std::string_view::npos || n.substr(slash + 1, 5) != "data/")
                continue;
            std::string_view key = n.substr(slash + 6);
            if (key.empty() || key.find('/') != std::string_view::npos)
                continue;
            ++candidates;
            if (!data || key == "0")
                data = &e;
        }
        if (!data) {
            if (needKnown && need == 0) {
                at.length = 0;
                return at;
            }
            at.noteSeverity = Severity::Warning;
            at.note = "its torch.save item has no tensor data record" + where;
            return at;
        }
        if (data->method != 0) {
            at.note = "its tensor data record is compressed" + where + "; the byte range is the whole item";
            return at;
        }
        at.offset = itemOffset + zip.dataOffset(*data);
        at.length = data->size;
        at.raw = true;
        if (at.offset - itemOffset > itemLength || at.length > itemLength - (at.offset - itemOffset)) {
            at.available = false;
            at.why = "its data record runs past the item";
            return at;
        }
        if (candidates > 1)
            at.note = "its torch.save item holds " + std::to_string(candidates) + " storages" + where
                + "; the range is storage " + std::string(data->name.substr(data->name.rfind('/') + 1));
        if (needKnown && data->size < need) {
            at.noteSeverity = Severity::Warning;
            at.note = "its data record holds " + std::to_string(data->size) + " bytes but the chunk needs "
                + std::to_string(need) + where;
        }
    } catch (const FormatError& e) {
        at.offset = itemOffset;
        at.length = itemLength;
        at.raw = false;
        at.noteSeverity = Severity::Warning;
        at.note = "its item is not a readable torch.save archive" + where + ": " + e.what();
    }
    return at;
}

} // namespace

bool chunkBytes(const Shape& sizes, DType dtype, uint64_t& out)
{
    uint64_t n = 1;
    for (int64_t d : sizes)
        if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n))
            return false;
    const unsigned bits = dtypeBits(dtype);
    uint64_t b = 0;
    if (bits == 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(bits), &b) || b > UINT64_MAX - 7)
        return false;
    out = (b + 7) / 8;
    return true;
}

bool itemLooksLikeZip(const InputFile& file, uint64_t itemOffset, uint64_t itemLength)
{
    uint8_t head[4];
    if (itemLength < sizeof head)
        return false;
    file.readInto(itemOffset, head);
    return looksLikeZip(Bytes(head));
}

size_t zipScanCost(const InputFile& file, uint64_t itemOffset, uint64_t n)
{
    uint8_t end[4] = {};
    if (n >= kEndRecordSize)
        file.readInto(itemOffset + n - kEndRecordSize, end);
    const bool atEnd = n >= kEndRecordSize && end[0] == 'P' && end[1] == 'K' && end[2] == 5 && end[3] == 6;
    return 256 + (atEnd ? 0 : static_cast<size_t>(std::min<uint64_t>(n, 0x10000 + kEndRecordSize)));
}

ItemData locateInItem(const InputFile& file, uint64_t itemOffset, uint64_t itemLength, std::string_view fqn,
    const Shape& offsets, const Shape& sizes, DType dtype, const std::string& where, BlobCache& blobs, SpendCheck maySpend, void* context)
{
    ItemData at;
    at.offset = itemOffset;
    at.length = itemLength;
    uint64_t need = 0;
    const bool needKnown = chunkBytes(sizes, dtype, need);
    if (itemLooksLikeZip(file, itemOffset, itemLength)) {
        if (!spend(maySpend, context, zipScanCost(file, itemOffset, itemLength)))
            return at;
        return inTorchSave(file, itemOffset, itemLength, needKnown, need, where);
    }
    // SerializationFormat.SAFETENSORS: the item's offset is where the file's blob starts.
    std::vector<uint8_t> headBuffer;
    const Bytes rest = file.read(itemOffset, std::min<uint64_t>(file.size() - itemOffset, 4096), headBuffer);
    if (!looksLikeSafetensors(rest, file.size() - itemOffset)) {
        at.noteSeverity = Severity::Warning;
        at.note = "its item is neither a torch.save archive nor a safetensors blob" + where;
        return at;
    }
    at.format = ItemData::Format::Safetensors;
    at.length = 0;
    BlobCache::Slot& slot = blobs.at(itemOffset);
    if (!slot.parsed) {
        uint64_t headerLength = 0;
        for (int i = 7; i >= 0; --i)
            headerLength = headerLength << 8 | rest[static_cast<size_t>(i)];
        if (!spend(maySpend, context, static_cast<size_t>(headerLength)))
            return at; // not parsed: asked again next time
        slot.parsed = true;
        try {
            slot.blob = parseBlob(file, itemOffset);
        } catch (const FormatError& e) {
            slot.error = e.what();
        }
    }
    if (!slot.blob) {
        at.noteSeverity = Severity::Warning;
        at.note = "the safetensors blob" + where + " cannot be read: " + slot.error;
        return at;
    }
    auto it = slot.blob->tensors.find(std::string(fqn));
    if (it == slot.blob->tensors.end()) {
        at.noteSeverity = Severity::Warning;
        at.note = "the safetensors blob" + where + " has no tensor named after it";
        return at;
    }
    const BlobTensor& t = it->second;
    const uint64_t room = file.size() - itemOffset;
    if (slot.blob->dataStart > room || t.end > room - slot.blob->dataStart) {
        at.available = false;
        at.shortFile = true;
        at.why = "its file is too short";
        return at;
    }
    at.offset = itemOffset + slot.blob->dataStart + t.begin;
    at.length = t.end - t.begin;
    at.raw = true;
    if (t.shape != sizes || (t.dtype && *t.dtype != dtype)) {
        at.noteSeverity = Severity::Warning;
        at.note = "the safetensors blob" + where + " holds it as " + t.dtypeName + " " + dimsText(t.shape)
            + ", but the chunk is " + std::string(dtypeName(dtype)) + " " + dimsText(sizes);
    } else if (t.hasSavedOffsets && t.savedOffsets != offsets) {
        at.noteSeverity = Severity::Warning;
        at.note = "DCP_SHARDING_INFO" + where + " puts it at offsets " + dimsText(t.savedOffsets) + ", but the chunk is at "
            + dimsText(offsets);
    } else if (needKnown && at.length != need) {
        at.noteSeverity = Severity::Warning;
        at.note = "the safetensors blob" + where + " holds " + std::to_string(at.length) + " bytes for it, the chunk needs "
            + std::to_string(need);
    }
    return at;
}

} // namespace sl::dcp
