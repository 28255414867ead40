// base/half.h: scalar IEEE fp16 and bfloat16 conversions (reference semantics, RNE).
#pragma once

#include <cstdint>
#include <cstring>

namespace paddock {

static inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
static inline uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

static inline float Fp16ToFp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return BitsToFloat(sign);
    // subnormal: normalize
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return BitsToFloat(sign | static_cast<uint32_t>(127 - 15 - e) << 23 | mant << 13);
  }
  if (exp == 31) return BitsToFloat(sign | 0x7f800000u | mant << 13);
  return BitsToFloat(sign | (exp + 112) << 23 | mant << 13);
}

static inline uint16_t Fp32ToFp16(float f) {
  const uint32_t x = FloatToBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  }
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absx < 0x38800000u) {  // subnormal or zero in fp16
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // value = m * 2^(e-150) = q * 2^-24
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    uint32_t q = m >> shift;
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t h = ((absx - 0x38000000u) >> 13);
  const uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

static inline float Bf16ToFp32(uint16_t b) {
  return BitsToFloat(static_cast<uint32_t>(b) << 16);
}

static inline uint16_t Fp32ToBf16(float f) {
  uint32_t x = FloatToBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // nan
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace paddock
