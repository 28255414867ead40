// vulkan/kv_store.h: the KV cache's blocks in device memory (model/backend.h's KvStore): per
// layer a K and a V buffer of f16 rows.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "model/backend.h"
#include "vulkan/device.h"

namespace paddock::vk {

// Blocks of `layout`'s layers (f16 rows: CheckSupport refused other types) in device memory: the
// views' k / v are the buffers' device addresses, read by nothing but the backend's shaders.
// CopyBlock, ReadBlock and WriteBlock go through the queue.
std::unique_ptr<KvStore> NewDeviceKvStore(Device* dev, const KvLayout& layout);

}  // namespace paddock::vk
