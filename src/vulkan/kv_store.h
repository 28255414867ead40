// vulkan/kv_store.h: the KV cache's blocks in device memory (model/backend.h's KvStore): per
// layer a K and a V buffer of f16 rows; a partial offload's CPU layers in host memory.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "model/backend.h"
#include "vulkan/device.h"

namespace paddock::vk {

// Blocks of `layout`; layers [0, device_layers) in device memory (the views' k / v are the
// buffers' device addresses, read by nothing but the backend's shaders), the others in host
// memory (the CPU kernels' views). CopyBlock, ReadBlock and WriteBlock go through the queue.
// Refuses a KV type other than f16 for a device layer, by name.
std::unique_ptr<KvStore> NewDeviceKvStore(Device* dev, const KvLayout& layout,
                                          size_t device_layers);

}  // namespace paddock::vk
