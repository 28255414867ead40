// vulkan/kv_store.cpp: the KV cache's blocks in device memory (vulkan/kv_store.h).
#include "vulkan/kv_store.h"

#include <algorithm>
#include <cstring>

#include "base/strings.h"

namespace paddock::vk {
namespace {

// The KV cache's blocks in device memory: per layer a K and a V buffer of half rows. The views'
// k / v are the buffers' device addresses (handles nothing but this backend's step reads).
class VulkanKvStore final : public KvStore {
 public:
  VulkanKvStore(Device* dev, const KvLayout& layout)
      : dev_(dev), views_(layout.layers), bs_(static_cast<size_t>(layout.block_size)) {
    if (layout.num_states > 0)  // (CheckSupport refuses recurrent layers first)
      Fail("the vulkan backend holds no recurrent states");
    const size_t slots = static_cast<size_t>(layout.num_blocks) * bs_;
    dev_layers_ = views_.size();
    for (size_t l = 0; l < dev_layers_; ++l) {
      KvLayerView& v = views_[l];
      k_.push_back(dev_->Alloc(slots * v.k_row_bytes, false, "the KV cache"));
      v_.push_back(dev_->Alloc(slots * v.v_row_bytes, false, "the KV cache"));
      v.k = reinterpret_cast<uint8_t*>(k_.back().addr);
      v.v = reinterpret_cast<uint8_t*>(v_.back().addr);
      bytes_ += k_.back().size + v_.back().size;
    }
    std::vector<uint8_t> zero(1u << 20, 0);  // never-written slots read as zeros, not NaNs
    for (size_t l = 0; l < dev_layers_; ++l)
      for (const Buffer* b : {&k_[l], &v_[l]})
        for (size_t off = 0; off < b->size; off += zero.size())
          dev_->Upload(*b, off, zero.data(), std::min(zero.size(), b->size - off));
  }
  ~VulkanKvStore() override {
    for (Buffer& b : k_) dev_->Free(&b);
    for (Buffer& b : v_) dev_->Free(&b);
  }
  const KvLayerView* layers() const override { return views_.data(); }
  void CopyBlock(int32_t from, int32_t to) override {
    if (dev_layers_ == 0) return;
    dev_->OneShot([&](VkCommandBuffer cb) {
      for (size_t l = 0; l < dev_layers_; ++l) {
        const KvLayerView& v = views_[l];
        VkBufferCopy ck{static_cast<size_t>(from) * bs_ * v.k_row_bytes,
                        static_cast<size_t>(to) * bs_ * v.k_row_bytes, bs_ * v.k_row_bytes};
        vkCmdCopyBuffer(cb, k_[l].buf, k_[l].buf, 1, &ck);
        VkBufferCopy cv{static_cast<size_t>(from) * bs_ * v.v_row_bytes,
                        static_cast<size_t>(to) * bs_ * v.v_row_bytes, bs_ * v.v_row_bytes};
        vkCmdCopyBuffer(cb, v_[l].buf, v_[l].buf, 1, &cv);
      }
    });
  }
  size_t bytes() const override { return bytes_; }
  size_t block_bytes() const override {
    size_t b = 0;
    for (const KvLayerView& v : views_) b += bs_ * (v.k_row_bytes + v.v_row_bytes);
    return b;
  }
  void ReadBlock(int32_t block, uint8_t* dst) const override {
    for (size_t l = 0; l < dev_layers_; ++l) {
      const KvLayerView& v = views_[l];
      dev_->Download(k_[l], static_cast<size_t>(block) * bs_ * v.k_row_bytes, dst,
                     bs_ * v.k_row_bytes);
      dst += bs_ * v.k_row_bytes;
      dev_->Download(v_[l], static_cast<size_t>(block) * bs_ * v.v_row_bytes, dst,
                     bs_ * v.v_row_bytes);
      dst += bs_ * v.v_row_bytes;
    }
  }
  void WriteBlock(int32_t block, const uint8_t* src) override {
    for (size_t l = 0; l < dev_layers_; ++l) {
      const KvLayerView& v = views_[l];
      dev_->Upload(k_[l], static_cast<size_t>(block) * bs_ * v.k_row_bytes, src,
                   bs_ * v.k_row_bytes);
      src += bs_ * v.k_row_bytes;
      dev_->Upload(v_[l], static_cast<size_t>(block) * bs_ * v.v_row_bytes, src,
                   bs_ * v.v_row_bytes);
      src += bs_ * v.v_row_bytes;
    }
  }

 private:
  Device* dev_;
  std::vector<KvLayerView> views_;
  size_t bs_;
  std::vector<Buffer> k_, v_;
  size_t dev_layers_ = 0;
  size_t bytes_ = 0;
};

}  // namespace

std::unique_ptr<KvStore> NewDeviceKvStore(Device* dev, const KvLayout& layout) {
  return std::make_unique<VulkanKvStore>(dev, layout);
}

}  // namespace paddock::vk
