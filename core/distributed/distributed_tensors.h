#pragma once
// Distributed tensor subclasses inside torch.save pickles: DTensor (torch.distributed.tensor and
// torch.distributed._tensor), ShardedTensor (torch.distributed._shard), and FSDP1 flat parameters.
// Called while a tensor becomes an entry; fills Entry::sharding and the entry's global shape.

#include "model/entry.h"
#include "pickle/value.h"

namespace sl::distributed {

// Returns true when `t` is a distributed tensor it described (the generic subclass description is then
// skipped).
bool describeDistributedTensor(const pickle::TensorValue& t, Entry& e);

} // namespace sl::distributed
