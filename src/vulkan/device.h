// vulkan/device.h: one Vulkan device as the backend uses it: buffers reached by device address
// (device-local, or host-visible for what the host writes and reads each step), the compute
// pipelines (one layout: push constants only), and a queue with one fence.
#pragma once

#include <vulkan/vulkan.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "vulkan/backend.h"

namespace paddock::vk {

struct Buffer {
  VkBuffer buf = VK_NULL_HANDLE;
  VkDeviceMemory mem = VK_NULL_HANDLE;
  uint8_t* map = nullptr;  // host-visible: mapped for the buffer's life
  uint64_t addr = 0;       // device address
  size_t size = 0;
};

// The weight types with matrix shaders, in their order below (vk_backend.cpp maps GgmlType).
constexpr int kWeightTypes = 8;  // F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K

// The three matrix shaders, each compiled per weight type: matvec.comp (a few tokens, subgroup
// sums), matvec_shared.comp (the same without subgroup arithmetic), matmul.comp (tiles of 32
// rows x 32 tokens: prefill and batches).
enum class MatKind : int { kMatvec = 0, kMatvecShared = 1, kTiled = 2 };

// The shaders (vulkan/shaders/*.comp), one pipeline each: kWeightTypes per MatKind first.
enum class Shader : int {
  kNorm = 3 * kWeightTypes,
  kRope,
  kKvStore,
  kAttention,
  kGlu,
  kAdd,
  kReadProbe,
  kCount
};
inline Shader MatShader(MatKind kind, int type) {
  return static_cast<Shader>(static_cast<int>(kind) * kWeightTypes + type);
}
const char* ShaderName(Shader s);

// The push constants of each shader (their layouts in the .comp files).
struct MatmulPush {
  uint64_t w, x, y, bias;
  uint32_t rows, cols, n, row_bytes, x_stride, y_stride;
};
struct NormPush {
  uint64_t x, y, w, b, res, idx;
  uint32_t cols, x_stride, y_stride, layer;
  float eps;
};
struct RopePush {
  uint64_t q, k, cos, sin;
  uint32_t n, nq, nkv, hd, half, neox, q_stride, k_stride;
};
struct KvStorePush {
  uint64_t k, v, kc, vc, slots;
  uint32_t n, kv_dim;
};
struct AttentionPush {
  uint64_t q, o, kc, vc, info, tables;
  uint32_t nq, nkv, hd, kv_dim, block, windowed;
  float scale, softcap;
};
struct GluPush {
  uint64_t g, u, o;
  uint32_t count, act;
};
struct ReadProbePush {
  uint64_t src, dst;
  uint32_t count;
};
struct AddPush {
  uint64_t x, y;
  uint32_t count;
};
constexpr uint32_t kMatvecTokens = 8;                 // matvec*.comp's TT: tokens per workgroup
constexpr uint32_t kTileRows = 32, kTileTokens = 32;  // matmul.comp's TR x TN

class Device {
 public:
  // Opens device `index` of ListVulkanDevices(); throws Error naming what is missing.
  explicit Device(int index);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const VulkanDeviceInfo& info() const { return info_; }
  // Subgroup arithmetic in compute shaders (matvec.comp; else matvec_shared.comp).
  bool subgroup_arith() const { return subgroup_arith_; }
  // matvec.comp's workgroup size (a specialization constant: its pipelines are made again);
  // a multiple of the subgroup size, 32 to 1024.
  void SetMatvecWorkgroup(uint32_t invocations);
  uint32_t matvec_workgroup() const { return matvec_wg_; }
  // host: host-visible and coherent (mapped); else device-local (filled through Upload).
  Buffer Alloc(size_t bytes, bool host, const char* what);
  void Free(Buffer* b);
  // src into b at offset (through a staging buffer when b is not mapped).
  void Upload(const Buffer& b, size_t offset, const void* src, size_t bytes);
  void Download(const Buffer& b, size_t offset, void* dst, size_t bytes);
  void CopyBuffer(const Buffer& src, size_t so, const Buffer& dst, size_t dof, size_t bytes);
  size_t allocated() const { return allocated_; }
  // The device's read bandwidth, GB/s: the best of `passes` passes of read_probe.comp over a
  // device-local buffer of `bytes` (allocated for the call).
  double ReadBandwidth(size_t bytes, int passes);

  // Command buffers: Begin a new one (or re-record none: a recorded one is submitted again).
  VkCommandBuffer NewCommands();
  void FreeCommands(VkCommandBuffer cb);
  void Dispatch(VkCommandBuffer cb, Shader s, const void* push, uint32_t push_bytes, uint32_t gx,
                uint32_t gy = 1);
  void End(VkCommandBuffer cb);
  // Records fn's commands, submits them and waits (copies between steps).
  void OneShot(const std::function<void(VkCommandBuffer)>& fn);
  // Every write of a dispatch before every read of the next.
  void Barrier(VkCommandBuffer cb);
  // Submits and waits (one host wait). Throws Error on a lost device.
  void SubmitWait(VkCommandBuffer cb);
  // Why the device can no longer run (lost), or empty.
  const std::string& fault() const { return fault_; }
  // A fault test's switch (PADDOCK_VULKAN_LOSE_AFTER=N: the N-th step's submission, counted
  // from 1) fails as a lost device's would.
  void LoseAfter(int steps) { lose_after_ = steps; }

 private:
  void Check(VkResult r, const char* what);
  uint32_t MemoryType(uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags avoid);

  VulkanDeviceInfo info_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkPhysicalDevice phys_ = VK_NULL_HANDLE;
  VkDevice dev_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t family_ = 0;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  std::vector<VkPipeline> pipelines_;
  VkPhysicalDeviceMemoryProperties mem_props_{};
  size_t allocated_ = 0;
  std::string fault_;
  bool subgroup_arith_ = false;
  uint32_t matvec_wg_ = 64;
  VkPipeline MakePipeline(size_t shader);
  int lose_after_ = 0, submits_ = 0;
  // The queue and the command pool are used from the step's thread and, for the KV disk
  // tier's block reads, another one.
  std::recursive_mutex mu_;
};

}  // namespace paddock::vk
