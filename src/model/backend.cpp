// model/backend.cpp: the KV cache's block memory in host memory, and what every backend
// has by default (model/backend.h).
#include "model/backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "base/strings.h"

namespace paddock {

namespace {

class HostKvStore final : public KvStore {
 public:
  explicit HostKvStore(const KvLayout& layout) : layers_(layout.layers), bs_(layout.block_size) {
    const size_t slots = static_cast<size_t>(layout.num_blocks) * static_cast<size_t>(bs_);
    std::vector<size_t> offs;
    size_t offset = 0;
    for (const KvLayerView& L : layers_) {
      offs.push_back(offset);
      offset += (slots * L.k_row_bytes + 63) / 64 * 64;
      offs.push_back(offset);
      offset += (slots * L.v_row_bytes + 63) / 64 * 64;
    }
    bytes_ = offset;
    // On transparent huge pages where the kernel grants them: touching a pool of hundreds of
    // MiB once (outside the hot loop) then takes a fault per 2 MiB, not per 4 KiB (190 MiB:
    // 0.4 s -> a few ms), and attention's reads miss the TLB less.
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t size = (bytes_ + 64 + kHuge - 1) / kHuge * kHuge;
    void* p = nullptr;
    if (posix_memalign(&p, kHuge, size) != 0) throw std::bad_alloc();
    madvise(p, size, MADV_HUGEPAGE);  // advice only: no error if the kernel declines
    storage_.reset(static_cast<uint8_t*>(p));
    std::memset(storage_.get(), 0, bytes_ + 64);  // touch once, outside the hot loop
    uint8_t* base = storage_.get();
    for (size_t l = 0; l < layers_.size(); ++l) {
      layers_[l].k = base + offs[2 * l];
      layers_[l].v = base + offs[2 * l + 1];
    }
  }
  const KvLayerView* layers() const override { return layers_.data(); }
  void CopyBlock(int32_t from, int32_t to) override {
    const size_t bs = static_cast<size_t>(bs_);
    for (const KvLayerView& L : layers_) {
      std::memcpy(L.k + static_cast<size_t>(to) * bs * L.k_row_bytes,
                  L.k + static_cast<size_t>(from) * bs * L.k_row_bytes, bs * L.k_row_bytes);
      std::memcpy(L.v + static_cast<size_t>(to) * bs * L.v_row_bytes,
                  L.v + static_cast<size_t>(from) * bs * L.v_row_bytes, bs * L.v_row_bytes);
    }
  }
  size_t bytes() const override { return bytes_; }
  size_t block_bytes() const override {
    size_t b = 0;
    for (const KvLayerView& L : layers_)
      b += static_cast<size_t>(bs_) * (L.k_row_bytes + L.v_row_bytes);
    return b;
  }
  void ReadBlock(int32_t block, uint8_t* dst) const override {
    const size_t bs = static_cast<size_t>(bs_), at = static_cast<size_t>(block) * bs;
    for (const KvLayerView& L : layers_) {
      std::memcpy(dst, L.k + at * L.k_row_bytes, bs * L.k_row_bytes);
      dst += bs * L.k_row_bytes;
      std::memcpy(dst, L.v + at * L.v_row_bytes, bs * L.v_row_bytes);
      dst += bs * L.v_row_bytes;
    }
  }
  void WriteBlock(int32_t block, const uint8_t* src) override {
    const size_t bs = static_cast<size_t>(bs_), at = static_cast<size_t>(block) * bs;
    for (const KvLayerView& L : layers_) {
      std::memcpy(L.k + at * L.k_row_bytes, src, bs * L.k_row_bytes);
      src += bs * L.k_row_bytes;
      std::memcpy(L.v + at * L.v_row_bytes, src, bs * L.v_row_bytes);
      src += bs * L.v_row_bytes;
    }
  }

 private:
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::vector<KvLayerView> layers_;
  int bs_;
  std::unique_ptr<uint8_t, FreeDeleter> storage_;  // 2 MiB aligned, on huge pages (advice)
  size_t bytes_ = 0;
};

}  // namespace

std::unique_ptr<KvStore> NewHostKvStore(const KvLayout& layout) {
  return std::make_unique<HostKvStore>(layout);
}

const float* Backend::Forward(const int32_t* tokens, int n, int pos, const KvView& kv,
                              int prompt_len, const float* const* embeds,
                              const int32_t* attend_end) {
  if (n <= 0) Fail("Forward: no tokens");
  const float* logits = nullptr;
  for (int done = 0; done < n;) {
    int m = std::min(step_tokens(), n - done);
    if (attend_end != nullptr && done + m < n) {  // keep a bidirectional span whole
      const int end = attend_end[done + m - 1] - pos;
      if (end > done + m) {
        int st = done + m - 1;
        while (st > done && attend_end[st - 1] == attend_end[done + m - 1]) --st;
        m = st > done ? st - done : end - done;
        if (m > max_batch())
          Fail("an image span of %d tokens exceeds the batch limit %d", m, max_batch());
      }
    }
    StepItem item{tokens + done, m, pos + done, &kv};
    item.prompt_len = prompt_len;
    if (embeds != nullptr) item.embeds = embeds + done;
    if (attend_end != nullptr) item.attend_end = attend_end + done;
    Step(&item, 1, StepOutput::kLogits, &logits);
    done += m;
  }
  return logits;
}

void Backend::Launch(const StepItem*, int, int lane) {
  Fail("%s: no steps in flight (lane %d)", name().c_str(), lane);
}
void Backend::Complete(int lane, const float**) {
  Fail("%s: no steps in flight (lane %d)", name().c_str(), lane);
}

}  // namespace paddock
