// base/hash64.h: a fast 64-bit hash of bytes (four independent lanes of multiply-rotate over
// 32-byte stripes, then a final mix): for checksums of KV blocks on disk and content identities
// of model files. Not cryptographic: it detects torn, truncated and flipped bytes, not attacks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace paddock {

namespace hash64_detail {
constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP3 = 0x165667B19E3779F9ull, kP4 = 0x85EBCA77C2B2AE63ull;
inline uint64_t Rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}
inline uint64_t Load(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint64_t Round(uint64_t acc, uint64_t in) {
  return Rotl(acc + in * kP2, 31) * kP1;
}
inline uint64_t Mix(uint64_t h) {
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  return h ^ (h >> 32);
}
}  // namespace hash64_detail

// Streaming form: Update in pieces of any size gives the same value as one call over the
// concatenation only when every piece but the last is a multiple of 32 bytes.
class Hash64 {
 public:
  explicit Hash64(uint64_t seed = 0) {
    using namespace hash64_detail;
    v_[0] = seed + kP1 + kP2;
    v_[1] = seed + kP2;
    v_[2] = seed;
    v_[3] = seed - kP1;
  }
  void Update(const void* data, size_t n) {
    using namespace hash64_detail;
    const uint8_t* p = static_cast<const uint8_t*>(data);
    total_ += n;
    for (; n >= 32; n -= 32, p += 32)
      for (int i = 0; i < 4; ++i) v_[i] = Round(v_[i], Load(p + 8 * i));
    for (; n >= 8; n -= 8, p += 8) tail_ = Rotl(tail_ ^ Round(0, Load(p)), 27) * kP1 + kP4;
    for (; n > 0; --n, ++p) tail_ = Rotl(tail_ ^ (*p * kP3 + 1), 11) * kP1;
  }
  uint64_t Digest() const {
    using namespace hash64_detail;
    uint64_t h = Rotl(v_[0], 1) + Rotl(v_[1], 7) + Rotl(v_[2], 12) + Rotl(v_[3], 18);
    h = (h ^ tail_) * kP1 + total_;
    return Mix(h);
  }

 private:
  uint64_t v_[4];
  uint64_t tail_ = 0, total_ = 0;
};

inline uint64_t HashBytes(const void* data, size_t n, uint64_t seed = 0) {
  Hash64 h(seed);
  h.Update(data, n);
  return h.Digest();
}

}  // namespace paddock
