// engine/devices.cpp: the devices a model can run on (--device) and the backend for a device
// (the Vulkan backend, src/vulkan/, where the build has it).
#include "base/cpu.h"
#include "base/strings.h"
#include "cpu/transformer.h"
#include "engine/engine_impl.h"
#include "model/split_backend.h"
#include "paddock/engine.h"
#if PADDOCK_HAVE_VULKAN
#include "vulkan/backend.h"
#endif

namespace paddock {

std::vector<DeviceInfo> ListDevices() {
  std::vector<DeviceInfo> out;
  DeviceInfo cpu;
  cpu.id = "cpu";
  cpu.name = CpuModelName();
  cpu.type = "cpu";
  cpu.driver =
      StrFormat("%s kernels (features: %s)", IsaName(ParseIsa("auto")), CpuFeatureList().c_str());
  cpu.memory = AvailableMemoryBytes();
  out.push_back(cpu);
#if PADDOCK_HAVE_VULKAN
  for (const VulkanDeviceInfo& v : ListVulkanDevices()) {
    DeviceInfo d;
    d.id = StrFormat("vulkan:%d", v.index);
    d.name = v.name;
    d.type = v.type;
    d.driver = v.driver + ", Vulkan " + v.api;
    d.memory = v.memory;
    d.subgroup = v.subgroup;
    d.int_dot = v.int_dot;
    d.coop_matrix = v.coop_matrix;
    d.usable = v.usable;
    d.missing = v.missing;
    out.push_back(d);
  }
#endif
  return out;
}

int VulkanDeviceIndex(const std::string& device) {
  if (device == "cpu") return -1;
  if (device == "vulkan") return 0;
  if (device.rfind("vulkan:", 0) == 0) {
    const std::string n = device.substr(7);
    if (!n.empty() && n.size() < 4 && n.find_first_not_of("0123456789") == std::string::npos)
      return std::stoi(n);
  }
  Fail("unknown device '%s' (expected cpu, vulkan or vulkan:N)", device.c_str());
}

SupportQuery SupportOf(const ModelConfig& c, const EngineOptions& o) {
  SupportQuery q;
  const size_t n = static_cast<size_t>(c.n_layers);
  q.k_types.assign(n, ParseKvDtype(o.cache_type_k));
  q.v_types.assign(n, ParseKvDtype(o.cache_type_v));
  if (!o.kv_layer_types.empty())
    ParseKvLayerTypes(o.kv_layer_types, c.n_layers, &q.k_types, &q.v_types);
  q.lora = !o.lora_path.empty();
  return q;
}

std::unique_ptr<Backend> MakeDeviceBackend(const LoadedModel& model, const EngineOptions& o,
                                           const KernelTable& kernels, ThreadPool& pool, int ctx) {
#if PADDOCK_HAVE_VULKAN
  const int n = model.config.n_layers;
  const int on = o.gpu_layers < 0 ? n : o.gpu_layers;
  const bool split = on >= 1 && on < n;
  SupportQuery q = SupportOf(model.config, o);
  if (split) q.layer_end = on;
  CheckSupport(model, VulkanCaps(), q);
  VulkanOptions vo;
  vo.device = VulkanDeviceIndex(o.device);
  vo.max_batch = o.max_batch;
  vo.memory = o.device_memory;
  vo.layers = o.gpu_layers;
  vo.forward = o.forward;
  std::unique_ptr<Backend> b = NewVulkanBackend(model, vo);
  if (split) {  // the other layers and the output head on the CPU, from the device's residual
    ForwardOptions f = o.forward;
    f.bf16_prefill = false;  // (which tokens take another path is the device's choice)
    auto cpu = std::make_unique<Transformer>(model, kernels, pool, o.max_batch, f);
    cpu->SetLayers(on, n);
    q.layer_begin = on;
    q.layer_end = -1;
    CheckSupport(model, cpu->caps(), q);
    b = NewSplitBackend(std::move(b), std::move(cpu));
  }
  b->SetContext(ctx);
  return b;
#else
  Fail(
      "this build of Paddock has no Vulkan backend: build it with Debian's libvulkan-dev and "
      "glslc installed (cmake finds them), or run with --device cpu");
#endif
}

}  // namespace paddock
