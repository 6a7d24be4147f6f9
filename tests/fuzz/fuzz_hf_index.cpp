// libFuzzer target: Hugging Face index JSON (weight_map, metadata.total_size), parsed from memory with
// parseHfIndex so no shard is opened, plus the shard-name check that keeps shards inside the folder.

#include "fuzz_common.h"

#include "formats/hf_index_reader.h"

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string name = "fuzz/model.safetensors.index.json";
    sl::fuzz::expectOnlyLoadError(name, [&] {
        sl::HfIndexFile index = sl::parseHfIndex(name, sl::Bytes(data, size));
        for (const auto& [tensor, shard] : index.weightMap)
            if (shard >= index.shards.size())
                sl::fuzz::die("weight_map points past the shard list", std::string(tensor).c_str());
        for (const auto& shard : index.shards) {
            bool safe = sl::isSafeShardName(shard);
            // Whatever it accepts must not climb out of the folder.
            if (safe && (shard.empty() || shard.front() == '/' || shard == ".." || shard.rfind("../", 0) == 0
                            || shard.find("/../") != std::string::npos
                            || (shard.size() >= 3 && shard.compare(shard.size() - 3, 3, "/..") == 0)))
                sl::fuzz::die("an unsafe shard name was accepted", shard.c_str());
        }
    });
    return 0;
}
