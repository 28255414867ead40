// vulkan/backend.h: the Vulkan backend, as the engine sees it: what devices there are, and a
// backend (model/backend.h) over one of them. Everything Vulkan stays in this folder's .cpp
// files (the loader's header is large; this one is all the rest of the code includes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "paddock/forward_options.h"

namespace paddock {

class Backend;
struct BackendCaps;
struct LoadedModel;

struct VulkanDeviceInfo {
  int index = 0;
  std::string name;          // "NVIDIA H100 80GB HBM3", "llvmpipe (LLVM 15.0.6, 256 bits)"
  std::string type;          // "discrete", "integrated", "virtual", "cpu", "other"
  std::string driver;        // the driver's name and version
  std::string api;           // "1.3.230"
  uint64_t memory = 0;       // the largest device-local heap, bytes
  uint32_t subgroup = 0;     // subgroup size
  bool int_dot = false;      // the integer dot product (VK_KHR_shader_integer_dot_product)
  bool coop_matrix = false;  // VK_KHR_cooperative_matrix
  bool usable = false;       // has what Paddock needs (Vulkan 1.2, device addresses)
  std::string missing;       // else what it lacks
};

// The devices the Vulkan loader finds (empty: no driver, no device). Throws Error only when
// the loader itself fails in a way worth naming.
std::vector<VulkanDeviceInfo> ListVulkanDevices();

// How to get a Vulkan device when there is none (the error's advice).
const char* NoVulkanAdvice();

struct VulkanOptions {
  int device = 0;       // index among ListVulkanDevices()
  int max_batch = 512;  // tokens per step
  uint64_t memory = 0;  // a budget below the device's memory for the weights (0: all of it)
  // Partial offload: layers [0, layers) on the device, each step returning the residual stream
  // (StepOutput::kResidual) for the backend of the rest (model/split_backend.h); -1: every
  // layer and the output head.
  int layers = -1;
  ForwardOptions forward;
};

// What the Vulkan backend executes: the engine checks a model against it (CheckSupport, in
// model/backend.h) before creating one.
const BackendCaps& VulkanCaps();

// The backend over device `o.device` for `model`'s weights in their file encodings (not
// re-laid out), which passed CheckSupport against VulkanCaps(). Refuses a model larger than the
// device's memory, naming the --gpu-layers that fits. Throws Error.
std::unique_ptr<Backend> NewVulkanBackend(const LoadedModel& model, const VulkanOptions& o);

}  // namespace paddock
