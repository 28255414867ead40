// vulkan/device.cpp: instance, device, memory, pipelines and submission (vulkan/device.h).
#include "vulkan/device.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "base/strings.h"

namespace paddock {
namespace vk {
namespace {

// The SPIR-V of each shader, compiled by glslc at build time (CMakeLists.txt).
const uint32_t k_matvec_f32[] =
#include "shaders/matvec_f32.spv.inc"
    ;
const uint32_t k_matvec_f16[] =
#include "shaders/matvec_f16.spv.inc"
    ;
const uint32_t k_matvec_bf16[] =
#include "shaders/matvec_bf16.spv.inc"
    ;
const uint32_t k_matvec_q8_0[] =
#include "shaders/matvec_q8_0.spv.inc"
    ;
const uint32_t k_matvec_q4_0[] =
#include "shaders/matvec_q4_0.spv.inc"
    ;
const uint32_t k_matvec_q4_k[] =
#include "shaders/matvec_q4_k.spv.inc"
    ;
const uint32_t k_matvec_q5_k[] =
#include "shaders/matvec_q5_k.spv.inc"
    ;
const uint32_t k_matvec_q6_k[] =
#include "shaders/matvec_q6_k.spv.inc"
    ;
const uint32_t k_matvec_shared_f32[] =
#include "shaders/matvec_shared_f32.spv.inc"
    ;
const uint32_t k_matvec_shared_f16[] =
#include "shaders/matvec_shared_f16.spv.inc"
    ;
const uint32_t k_matvec_shared_bf16[] =
#include "shaders/matvec_shared_bf16.spv.inc"
    ;
const uint32_t k_matvec_shared_q8_0[] =
#include "shaders/matvec_shared_q8_0.spv.inc"
    ;
const uint32_t k_matvec_shared_q4_0[] =
#include "shaders/matvec_shared_q4_0.spv.inc"
    ;
const uint32_t k_matvec_shared_q4_k[] =
#include "shaders/matvec_shared_q4_k.spv.inc"
    ;
const uint32_t k_matvec_shared_q5_k[] =
#include "shaders/matvec_shared_q5_k.spv.inc"
    ;
const uint32_t k_matvec_shared_q6_k[] =
#include "shaders/matvec_shared_q6_k.spv.inc"
    ;
const uint32_t k_matmul_f32[] =
#include "shaders/matmul_f32.spv.inc"
    ;
const uint32_t k_matmul_f16[] =
#include "shaders/matmul_f16.spv.inc"
    ;
const uint32_t k_matmul_bf16[] =
#include "shaders/matmul_bf16.spv.inc"
    ;
const uint32_t k_matmul_q8_0[] =
#include "shaders/matmul_q8_0.spv.inc"
    ;
const uint32_t k_matmul_q4_0[] =
#include "shaders/matmul_q4_0.spv.inc"
    ;
const uint32_t k_matmul_q4_k[] =
#include "shaders/matmul_q4_k.spv.inc"
    ;
const uint32_t k_matmul_q5_k[] =
#include "shaders/matmul_q5_k.spv.inc"
    ;
const uint32_t k_matmul_q6_k[] =
#include "shaders/matmul_q6_k.spv.inc"
    ;
const uint32_t kNormSpv[] =
#include "shaders/norm.spv.inc"
    ;
const uint32_t kRopeSpv[] =
#include "shaders/rope.spv.inc"
    ;
const uint32_t kKvStoreSpv[] =
#include "shaders/kv_store.spv.inc"
    ;
const uint32_t kAttentionSpv[] =
#include "shaders/attention.spv.inc"
    ;
const uint32_t kGluSpv[] =
#include "shaders/glu.spv.inc"
    ;
const uint32_t kAddSpv[] =
#include "shaders/add.spv.inc"
    ;
const uint32_t kReadProbeSpv[] =
#include "shaders/read_probe.spv.inc"
    ;

struct ShaderCode {
  const char* name;
  const uint32_t* code;
  size_t bytes;
};
#define PADDOCK_SHADER(name, arr) \
  { name, arr, sizeof(arr) }
const ShaderCode kShaders[] = {
    PADDOCK_SHADER("matvec_f32", k_matvec_f32),
    PADDOCK_SHADER("matvec_f16", k_matvec_f16),
    PADDOCK_SHADER("matvec_bf16", k_matvec_bf16),
    PADDOCK_SHADER("matvec_q8_0", k_matvec_q8_0),
    PADDOCK_SHADER("matvec_q4_0", k_matvec_q4_0),
    PADDOCK_SHADER("matvec_q4_k", k_matvec_q4_k),
    PADDOCK_SHADER("matvec_q5_k", k_matvec_q5_k),
    PADDOCK_SHADER("matvec_q6_k", k_matvec_q6_k),
    PADDOCK_SHADER("matvec_shared_f32", k_matvec_shared_f32),
    PADDOCK_SHADER("matvec_shared_f16", k_matvec_shared_f16),
    PADDOCK_SHADER("matvec_shared_bf16", k_matvec_shared_bf16),
    PADDOCK_SHADER("matvec_shared_q8_0", k_matvec_shared_q8_0),
    PADDOCK_SHADER("matvec_shared_q4_0", k_matvec_shared_q4_0),
    PADDOCK_SHADER("matvec_shared_q4_k", k_matvec_shared_q4_k),
    PADDOCK_SHADER("matvec_shared_q5_k", k_matvec_shared_q5_k),
    PADDOCK_SHADER("matvec_shared_q6_k", k_matvec_shared_q6_k),
    PADDOCK_SHADER("matmul_f32", k_matmul_f32),
    PADDOCK_SHADER("matmul_f16", k_matmul_f16),
    PADDOCK_SHADER("matmul_bf16", k_matmul_bf16),
    PADDOCK_SHADER("matmul_q8_0", k_matmul_q8_0),
    PADDOCK_SHADER("matmul_q4_0", k_matmul_q4_0),
    PADDOCK_SHADER("matmul_q4_k", k_matmul_q4_k),
    PADDOCK_SHADER("matmul_q5_k", k_matmul_q5_k),
    PADDOCK_SHADER("matmul_q6_k", k_matmul_q6_k),
    PADDOCK_SHADER("norm", kNormSpv),
    PADDOCK_SHADER("rope", kRopeSpv),
    PADDOCK_SHADER("kv_store", kKvStoreSpv),
    PADDOCK_SHADER("attention", kAttentionSpv),
    PADDOCK_SHADER("glu", kGluSpv),
    PADDOCK_SHADER("add", kAddSpv),
    PADDOCK_SHADER("read_probe", kReadProbeSpv),
};
#undef PADDOCK_SHADER
static_assert(sizeof(kShaders) / sizeof(kShaders[0]) == static_cast<size_t>(Shader::kCount));

constexpr uint32_t kPushBytes = 128;  // the minimum every device gives

const char* VkResultName(VkResult r) {
  switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY:
      return "out of host memory";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
      return "out of device memory";
    case VK_ERROR_DEVICE_LOST:
      return "device lost";
    case VK_ERROR_INITIALIZATION_FAILED:
      return "initialization failed";
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return "no compatible driver";
    case VK_ERROR_FEATURE_NOT_PRESENT:
      return "feature not present";
    case VK_ERROR_EXTENSION_NOT_PRESENT:
      return "extension not present";
    case VK_TIMEOUT:
      return "timeout";
    default:
      return "error";
  }
}

VkInstance NewInstance() {
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "paddock";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  VkInstance inst = VK_NULL_HANDLE;
  if (vkCreateInstance(&ci, nullptr, &inst) != VK_SUCCESS) return VK_NULL_HANDLE;
  return inst;
}

std::vector<VkPhysicalDevice> PhysicalDevices(VkInstance inst) {
  uint32_t n = 0;
  vkEnumeratePhysicalDevices(inst, &n, nullptr);
  std::vector<VkPhysicalDevice> devs(n);
  if (n > 0) vkEnumeratePhysicalDevices(inst, &n, devs.data());
  devs.resize(n);
  return devs;
}

bool HasExtension(VkPhysicalDevice d, const char* name) {
  uint32_t n = 0;
  vkEnumerateDeviceExtensionProperties(d, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> ext(n);
  vkEnumerateDeviceExtensionProperties(d, nullptr, &n, ext.data());
  for (const auto& e : ext)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

VulkanDeviceInfo Describe(VkPhysicalDevice d, int index) {
  VulkanDeviceInfo info;
  info.index = index;
  VkPhysicalDeviceSubgroupProperties sub{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  sub.pNext = &drv;
  VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  props.pNext = &sub;
  vkGetPhysicalDeviceProperties2(d, &props);
  const VkPhysicalDeviceProperties& p = props.properties;
  info.name = p.deviceName;
  switch (p.deviceType) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      info.type = "discrete";
      break;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      info.type = "integrated";
      break;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      info.type = "virtual";
      break;
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      info.type = "cpu";
      break;
    default:
      info.type = "other";
  }
  info.driver = StrFormat("%s %s", drv.driverName, drv.driverInfo);
  info.api = StrFormat("%u.%u.%u", VK_API_VERSION_MAJOR(p.apiVersion),
                       VK_API_VERSION_MINOR(p.apiVersion), VK_API_VERSION_PATCH(p.apiVersion));
  info.subgroup = sub.subgroupSize;
  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceMemoryProperties(d, &mem);
  for (uint32_t h = 0; h < mem.memoryHeapCount; ++h)
    if ((mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0)
      info.memory = std::max<uint64_t>(info.memory, mem.memoryHeaps[h].size);
  info.int_dot = HasExtension(d, "VK_KHR_shader_integer_dot_product") ||
                 VK_API_VERSION_MINOR(p.apiVersion) >= 3;
  info.coop_matrix = HasExtension(d, "VK_KHR_cooperative_matrix");
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceFeatures2 f{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  f.pNext = &f12;
  if (VK_API_VERSION_MINOR(p.apiVersion) >= 2 || VK_API_VERSION_MAJOR(p.apiVersion) > 1)
    vkGetPhysicalDeviceFeatures2(d, &f);
  if (VK_API_VERSION_MAJOR(p.apiVersion) == 1 && VK_API_VERSION_MINOR(p.apiVersion) < 2)
    info.missing = "Vulkan 1.2";
  else if (!f12.bufferDeviceAddress)
    info.missing = "buffer device addresses";
  else if (!f.features.shaderInt64)
    info.missing = "64-bit integers in shaders";
  info.usable = info.missing.empty();
  return info;
}

}  // namespace

const char* ShaderName(Shader s) {
  return kShaders[static_cast<int>(s)].name;
}

Device::Device(int index) {
  instance_ = NewInstance();
  std::vector<VkPhysicalDevice> devs;
  if (instance_ != VK_NULL_HANDLE) devs = PhysicalDevices(instance_);
  if (devs.empty()) {
    if (instance_ != VK_NULL_HANDLE) vkDestroyInstance(instance_, nullptr);
    Fail("no Vulkan device: %s", NoVulkanAdvice());
  }
  if (index < 0 || index >= static_cast<int>(devs.size())) {
    vkDestroyInstance(instance_, nullptr);
    Fail("no Vulkan device %d: there %s %zu (paddock info --devices lists them)", index,
         devs.size() == 1 ? "is" : "are", devs.size());
  }
  phys_ = devs[static_cast<size_t>(index)];
  info_ = Describe(phys_, index);
  if (!info_.usable) {
    vkDestroyInstance(instance_, nullptr);
    Fail("Vulkan device %d (%s) lacks %s, which Paddock's shaders need", index, info_.name.c_str(),
         info_.missing.c_str());
  }
  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, qf.data());
  family_ = UINT32_MAX;
  for (uint32_t i = 0; i < nq; ++i)
    if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) != 0) {
      family_ = i;
      break;
    }
  if (family_ == UINT32_MAX) {
    vkDestroyInstance(instance_, nullptr);
    Fail("Vulkan device %d (%s) has no compute queue", index, info_.name.c_str());
  }
  const float prio = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = family_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &prio;
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  f12.bufferDeviceAddress = VK_TRUE;
  VkPhysicalDeviceFeatures2 f{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  f.pNext = &f12;
  f.features.shaderInt64 = VK_TRUE;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.pNext = &f;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  const VkResult r = vkCreateDevice(phys_, &dci, nullptr, &dev_);
  if (r != VK_SUCCESS) {
    vkDestroyInstance(instance_, nullptr);
    Fail("Vulkan device %d (%s): creating it failed (%s)", index, info_.name.c_str(),
         VkResultName(r));
  }
  vkGetDeviceQueue(dev_, family_, 0, &queue_);
  vkGetPhysicalDeviceMemoryProperties(phys_, &mem_props_);
  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = family_;
  Check(vkCreateCommandPool(dev_, &pci, nullptr, &pool_), "a command pool");
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  Check(vkCreateFence(dev_, &fci, nullptr, &fence_), "a fence");
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes};
  VkPipelineLayoutCreateInfo lci{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  lci.pushConstantRangeCount = 1;
  lci.pPushConstantRanges = &range;
  Check(vkCreatePipelineLayout(dev_, &lci, nullptr, &layout_), "the pipeline layout");
  VkPhysicalDeviceSubgroupProperties sub{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  props.pNext = &sub;
  vkGetPhysicalDeviceProperties2(phys_, &props);
  subgroup_arith_ = (sub.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) != 0 &&
                    (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0 &&
                    std::getenv("PADDOCK_VULKAN_NO_SUBGROUPS") == nullptr;
  for (size_t i = 0; i < std::size(kShaders); ++i) {
    const bool matvec = i < static_cast<size_t>(kWeightTypes);  // (MatKind::kMatvec first)
    pipelines_.push_back(matvec && !subgroup_arith_ ? VK_NULL_HANDLE : MakePipeline(i));
  }
}

// Shader i's pipeline (matvec.comp with its workgroup size as specialization constant 0).
VkPipeline Device::MakePipeline(size_t i) {
  const ShaderCode& s = kShaders[i];
  VkShaderModuleCreateInfo mci{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  mci.codeSize = s.bytes;
  mci.pCode = s.code;
  VkShaderModule mod = VK_NULL_HANDLE;
  Check(vkCreateShaderModule(dev_, &mci, nullptr, &mod), s.name);
  const VkSpecializationMapEntry entry{0, 0, sizeof(uint32_t)};
  VkSpecializationInfo spec{1, &entry, sizeof(uint32_t), &matvec_wg_};
  VkComputePipelineCreateInfo cci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  cci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  cci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  cci.stage.module = mod;
  cci.stage.pName = "main";
  if (i < static_cast<size_t>(kWeightTypes)) cci.stage.pSpecializationInfo = &spec;
  cci.layout = layout_;
  VkPipeline pipe = VK_NULL_HANDLE;
  const VkResult pr = vkCreateComputePipelines(dev_, VK_NULL_HANDLE, 1, &cci, nullptr, &pipe);
  vkDestroyShaderModule(dev_, mod, nullptr);
  Check(pr, s.name);
  return pipe;
}

void Device::SetMatvecWorkgroup(uint32_t invocations) {
  const uint32_t sub = std::max<uint32_t>(1, info_.subgroup);
  if (invocations < 32 || invocations > 1024 || invocations % sub != 0)
    Fail(
        "a matrix-vector workgroup of %u invocations: 32 to 1024, a multiple of the device's "
        "subgroup of %u",
        invocations, sub);
  if (invocations == matvec_wg_ || !subgroup_arith_) {
    matvec_wg_ = invocations;
    return;
  }
  std::lock_guard<std::recursive_mutex> lock(mu_);
  vkDeviceWaitIdle(dev_);
  matvec_wg_ = invocations;
  for (size_t i = 0; i < static_cast<size_t>(kWeightTypes); ++i) {
    vkDestroyPipeline(dev_, pipelines_[i], nullptr);
    pipelines_[i] = VK_NULL_HANDLE;
    pipelines_[i] = MakePipeline(i);
  }
}

Device::~Device() {
  if (dev_ != VK_NULL_HANDLE) {
    vkDeviceWaitIdle(dev_);
    for (VkPipeline p : pipelines_)
      if (p != VK_NULL_HANDLE) vkDestroyPipeline(dev_, p, nullptr);
    if (layout_ != VK_NULL_HANDLE) vkDestroyPipelineLayout(dev_, layout_, nullptr);
    if (fence_ != VK_NULL_HANDLE) vkDestroyFence(dev_, fence_, nullptr);
    if (pool_ != VK_NULL_HANDLE) vkDestroyCommandPool(dev_, pool_, nullptr);
    vkDestroyDevice(dev_, nullptr);
  }
  if (instance_ != VK_NULL_HANDLE) vkDestroyInstance(instance_, nullptr);
}

void Device::Check(VkResult r, const char* what) {
  if (r == VK_SUCCESS) return;
  if (r == VK_ERROR_DEVICE_LOST)
    fault_ = StrFormat("Vulkan device %d (%s) was lost (%s failed)", info_.index,
                       info_.name.c_str(), what);
  Fail("Vulkan device %d (%s): %s failed (%s)", info_.index, info_.name.c_str(), what,
       VkResultName(r));
}

uint32_t Device::MemoryType(uint32_t bits, VkMemoryPropertyFlags want,
                            VkMemoryPropertyFlags avoid) {
  for (uint32_t i = 0; i < mem_props_.memoryTypeCount; ++i) {
    const VkMemoryPropertyFlags f = mem_props_.memoryTypes[i].propertyFlags;
    if ((bits & (1u << i)) != 0 && (f & want) == want && (f & avoid) == 0) return i;
  }
  return UINT32_MAX;
}

Buffer Device::Alloc(size_t bytes, bool host, const char* what) {
  Buffer b;
  b.size = std::max<size_t>(bytes, 16);
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = b.size;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
              VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  Check(vkCreateBuffer(dev_, &bci, nullptr, &b.buf), what);
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(dev_, b.buf, &req);
  const VkMemoryPropertyFlags hv =
      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  uint32_t type = UINT32_MAX;
  if (host) {
    type = MemoryType(req.memoryTypeBits, hv | VK_MEMORY_PROPERTY_HOST_CACHED_BIT, 0);
    if (type == UINT32_MAX) type = MemoryType(req.memoryTypeBits, hv, 0);
  } else {
    type = MemoryType(req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
    if (type == UINT32_MAX) type = MemoryType(req.memoryTypeBits, 0, 0);
  }
  VkMemoryAllocateFlagsInfo flags{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
  flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.pNext = &flags;
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = type;
  const VkResult r = type == UINT32_MAX ? VK_ERROR_OUT_OF_DEVICE_MEMORY
                                        : vkAllocateMemory(dev_, &ai, nullptr, &b.mem);
  if (r != VK_SUCCESS) {
    vkDestroyBuffer(dev_, b.buf, nullptr);
    Fail("Vulkan device %d (%s): %s of %s could not be allocated (%s; %s allocated so far)",
         info_.index, info_.name.c_str(), what, FormatBytes(b.size).c_str(), VkResultName(r),
         FormatBytes(allocated_).c_str());
  }
  Check(vkBindBufferMemory(dev_, b.buf, b.mem, 0), what);
  if ((mem_props_.memoryTypes[type].propertyFlags & hv) == hv)
    Check(vkMapMemory(dev_, b.mem, 0, VK_WHOLE_SIZE, 0, reinterpret_cast<void**>(&b.map)), what);
  VkBufferDeviceAddressInfo di{VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
  di.buffer = b.buf;
  b.addr = vkGetBufferDeviceAddress(dev_, &di);
  allocated_ += req.size;
  return b;
}

void Device::Free(Buffer* b) {
  if (b->buf == VK_NULL_HANDLE) return;
  if (b->map != nullptr) vkUnmapMemory(dev_, b->mem);
  vkDestroyBuffer(dev_, b->buf, nullptr);
  vkFreeMemory(dev_, b->mem, nullptr);
  *b = Buffer{};
}

void Device::OneShot(const std::function<void(VkCommandBuffer)>& fn) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  VkCommandBuffer cb = NewCommands();
  fn(cb);
  End(cb);
  SubmitWait(cb);
  FreeCommands(cb);
}

void Device::CopyBuffer(const Buffer& src, size_t so, const Buffer& dst, size_t dof, size_t bytes) {
  OneShot([&](VkCommandBuffer cb) {
    VkBufferCopy c{so, dof, bytes};
    vkCmdCopyBuffer(cb, src.buf, dst.buf, 1, &c);
  });
}

void Device::Upload(const Buffer& b, size_t offset, const void* src, size_t bytes) {
  if (b.map != nullptr) {
    std::memcpy(b.map + offset, src, bytes);
    return;
  }
  const size_t chunk = std::min<size_t>(bytes, 64u << 20);
  Buffer staging = Alloc(chunk, true, "a staging buffer");
  for (size_t done = 0; done < bytes; done += chunk) {
    const size_t n = std::min(chunk, bytes - done);
    std::memcpy(staging.map, static_cast<const uint8_t*>(src) + done, n);
    CopyBuffer(staging, 0, b, offset + done, n);
  }
  Free(&staging);
}

void Device::Download(const Buffer& b, size_t offset, void* dst, size_t bytes) {
  if (b.map != nullptr) {
    std::memcpy(dst, b.map + offset, bytes);
    return;
  }
  Buffer staging = Alloc(bytes, true, "a staging buffer");
  CopyBuffer(b, offset, staging, 0, bytes);
  std::memcpy(dst, staging.map, bytes);
  Free(&staging);
}

VkCommandBuffer Device::NewCommands() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkCommandBuffer cb = VK_NULL_HANDLE;
  Check(vkAllocateCommandBuffers(dev_, &ai, &cb), "a command buffer");
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  Check(vkBeginCommandBuffer(cb, &bi), "recording");
  return cb;
}

void Device::FreeCommands(VkCommandBuffer cb) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  vkFreeCommandBuffers(dev_, pool_, 1, &cb);
}

void Device::End(VkCommandBuffer cb) {
  Check(vkEndCommandBuffer(cb), "recording");
}

void Device::Dispatch(VkCommandBuffer cb, Shader s, const void* push, uint32_t push_bytes,
                      uint32_t gx, uint32_t gy) {
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipelines_[static_cast<size_t>(s)]);
  vkCmdPushConstants(cb, layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
  vkCmdDispatch(cb, gx, gy, 1);
}

void Device::Barrier(VkCommandBuffer cb) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                     VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT;
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_HOST_BIT |
                           VK_PIPELINE_STAGE_TRANSFER_BIT,
                       0, 1, &mb, 0, nullptr, 0, nullptr);
}

void Device::SubmitWait(VkCommandBuffer cb) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (!fault_.empty()) Fail("%s", fault_.c_str());
  if (lose_after_ > 0 && ++submits_ >= lose_after_) Check(VK_ERROR_DEVICE_LOST, "a step");
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  Check(vkResetFences(dev_, 1, &fence_), "resetting the fence");
  Check(vkQueueSubmit(queue_, 1, &si, fence_), "a step's submission");
  Check(vkWaitForFences(dev_, 1, &fence_, VK_TRUE, UINT64_MAX), "a step");
}

double Device::ReadBandwidth(size_t bytes, int passes) {
  constexpr uint32_t kGroups = 4096;
  Buffer src = Alloc(bytes, false, "the bandwidth probe");
  Buffer dst = Alloc(size_t{kGroups} * 64 * sizeof(uint32_t), false, "the bandwidth probe");
  ReadProbePush p{src.addr, dst.addr, static_cast<uint32_t>(bytes / 16)};
  VkCommandBuffer cb = NewCommands();
  Dispatch(cb, Shader::kReadProbe, &p, sizeof(p), kGroups);
  Barrier(cb);
  End(cb);
  SubmitWait(cb);  // (first touch)
  double best = 0;
  for (int i = 0; i < passes; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    SubmitWait(cb);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(bytes) / s / 1e9);
  }
  FreeCommands(cb);
  Free(&src);
  Free(&dst);
  return best;
}

}  // namespace vk

const char* NoVulkanAdvice() {
  return "install a GPU's Vulkan driver, or Mesa's software device (Debian: apt-get install "
         "mesa-vulkan-drivers), or run with --device cpu";
}

std::vector<VulkanDeviceInfo> ListVulkanDevices() {
  std::vector<VulkanDeviceInfo> out;
  VkInstance inst = vk::NewInstance();
  if (inst == VK_NULL_HANDLE) return out;
  int i = 0;
  for (VkPhysicalDevice d : vk::PhysicalDevices(inst)) out.push_back(vk::Describe(d, i++));
  vkDestroyInstance(inst, nullptr);
  return out;
}

}  // namespace paddock
