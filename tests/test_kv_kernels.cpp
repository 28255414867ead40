// tests/test_kv_kernels.cpp: the KV cache's row kernels (kernels/kv_rows.h: encodings, the
// Hadamard rotation, dot and axpy on encoded rows) at every ISA this CPU runs, against the
// reference table. Kernel-only (no KV manager): part of the kernel tests the AArch64 build
// runs under emulation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/cpu.h"
#include "kernels/kernels.h"
#include "kernels/kv_rows.h"

namespace paddock {
namespace {

TEST(KvKernels, HadamardIsOrthogonalAndSelfInverse) {
  std::vector<float> x = {1, -2, 3, 0.5f, 4, 0, -1, 2}, y = x;
  Hadamard(y.data(), 8);
  double nx = 0, ny = 0;
  for (int i = 0; i < 8; ++i) {
    nx += x[i] * x[i];
    ny += y[i] * y[i];
  }
  EXPECT_NEAR(nx, ny, 1e-4);
  EXPECT_FLOAT_EQ(y[0], (1 - 2 + 3 + 0.5f + 4 + 0 - 1 + 2) / std::sqrt(8.0f));
  Hadamard(y.data(), 8);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(y[i], x[i], 1e-6);
  EXPECT_TRUE(KvRotated(KvDtype::kI8, 64));
  EXPECT_FALSE(KvRotated(KvDtype::kI8, 80));
  EXPECT_FALSE(KvRotated(KvDtype::kF16, 64));
}

TEST(KvKernels, EveryDtypeAndIsaMatchesTheReference) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const KernelTable& ref = ReferenceKernels();
  const std::vector<Isa> isas = RunnableIsas();
  for (int t = 0; t < kKvDtypeCount; ++t) {
    for (int hd : {8, 34, 64, 80, 128}) {
      for (int nh : {1, 3}) {
        const KvDtype dt = static_cast<KvDtype>(t);
        if (dt == KvDtype::kI4 && KvI4Group(hd) == 0) continue;
        std::vector<float> src(static_cast<size_t>(nh * hd)), q(static_cast<size_t>(hd));
        for (float& x : src) x = nd(rng);
        for (float& x : q) x = nd(rng);
        std::vector<uint8_t> row(KvRowBytes(dt, nh, hd));
        ref.kv_store[t](row.data(), src.data(), nh, hd);
        for (int h = 0; h < nh; ++h) {
          // Encoding error band per type (relative RMS of the decoded head).
          std::vector<float> y(static_cast<size_t>(hd), 0.0f);
          ref.kv_axpy[t](y.data(), 1.0f, row.data(), h, nh, hd);
          if (KvRotated(dt, hd)) Hadamard(y.data(), hd);  // stored rotated; H is its own inverse
          double se = 0, ss = 0, mag = 0;
          for (int i = 0; i < hd; ++i) {
            const float x = src[static_cast<size_t>(h * hd + i)];
            se += (y[i] - x) * (y[i] - x);
            ss += x * x;
            mag += std::fabs(x * q[i]);
          }
          const double band = dt == KvDtype::kF32    ? 1e-7
                              : dt == KvDtype::kF16  ? 1e-3
                              : dt == KvDtype::kBF16 ? 6e-3
                              : dt == KvDtype::kI8   ? 0.012
                                                     : 0.15;
          EXPECT_LE(std::sqrt(se / ss), band) << KvDtypeName(dt) << " hd=" << hd;
          const float d_ref = ref.kv_dot[t](q.data(), row.data(), h, nh, hd);
          for (Isa isa : isas) {
            const KernelTable& k = GetKernels(isa);
            EXPECT_NEAR(k.kv_dot[t](q.data(), row.data(), h, nh, hd), d_ref, 1e-5 * mag + 1e-6)
                << IsaName(isa) << " " << KvDtypeName(dt) << " hd=" << hd;
            std::vector<float> y1(static_cast<size_t>(hd), 0.5f), y2 = y1;
            ref.kv_axpy[t](y1.data(), -0.7f, row.data(), h, nh, hd);
            k.kv_axpy[t](y2.data(), -0.7f, row.data(), h, nh, hd);
            for (int i = 0; i < hd; ++i)
              ASSERT_NEAR(y2[i], y1[i], 1e-5f) << IsaName(isa) << " " << KvDtypeName(dt);
          }
        }
      }
    }
  }
}

// Each ISA's encoder writes the reference's bytes, for ordinary values and for the edges of
// the 16-bit formats: ties, subnormals, overflow to infinity, infinities and NaNs.
TEST(KvKernels, EveryIsaStoresTheReferenceBytes) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const KernelTable& ref = ReferenceKernels();
  std::vector<Isa> isas = RunnableIsas();
  isas.erase(isas.begin());  // the scalar table is the reference
  const float inf = std::numeric_limits<float>::infinity();
  const float edges[] = {0.0f,
                         -0.0f,
                         1.0f + 1.0f / 2048,
                         1.0f + 3.0f / 2048,
                         65504.0f,
                         65520.0f,
                         1e6f,
                         -1e6f,
                         inf,
                         -inf,
                         std::nanf(""),
                         6e-8f,
                         3e-8f,
                         1e-5f,
                         -2.9802322e-8f,
                         1.00390625f,
                         1e-40f,
                         1e38f,
                         std::bit_cast<float>(0x7f7fffffu),
                         -1e-45f};
  for (int t = 0; t < kKvDtypeCount; ++t) {
    const KvDtype dt = static_cast<KvDtype>(t);
    for (int hd : {8, 34, 64, 128}) {
      for (int nh : {1, 3}) {
        if (dt == KvDtype::kI4 && KvI4Group(hd) == 0) continue;
        std::vector<float> src(static_cast<size_t>(nh * hd));
        for (float& x : src) x = nd(rng);
        if (dt == KvDtype::kF16 || dt == KvDtype::kBF16 || dt == KvDtype::kF32) {
          for (size_t i = 0; i < src.size(); ++i)
            if (i % 3 == 0) src[i] = edges[(i / 3) % std::size(edges)];
        }
        std::vector<uint8_t> want(KvRowBytes(dt, nh, hd));
        ref.kv_store[t](want.data(), src.data(), nh, hd);
        for (Isa isa : isas) {
          std::vector<uint8_t> got(want.size(), 0xAB);
          GetKernels(isa).kv_store[t](got.data(), src.data(), nh, hd);
          EXPECT_EQ(got, want) << IsaName(isa) << " " << KvDtypeName(dt) << " hd=" << hd
                               << " nh=" << nh;
        }
      }
    }
  }
}

}  // namespace
}  // namespace paddock
