// Every optimized kernel against the scalar reference, on every ISA this CPU runs, with
// lengths that hit loop tails. Tolerances scale with the data (sum of |terms|).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/cpu.h"
#include "formats/ggml_types.h"
#include "kernels/kernels.h"
#include "paddock/error.h"

namespace paddock {
namespace {

// Every SIMD level this CPU runs (x86-64: AVX2, AVX-512, AMX; AArch64: NEON, dotprod, i8mm).
std::vector<Isa> FastIsas() {
  std::vector<Isa> v = RunnableIsas();
  v.erase(v.begin());  // scalar: the reference
  return v;
}

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

const int kLengths[] = {1, 3, 17, 31, 33, 257};

// Activations quantized by the reference (blocks of 32), with the view the kernels take.
struct QuantizedActs {
  std::vector<int8_t> qs;
  std::vector<float> d, ds;
  explicit QuantizedActs(const std::vector<float>& x)
      : qs(x.size()), d(x.size() / 32), ds(x.size() / 32) {
    ReferenceKernels().quantize_act(x.data(), static_cast<int64_t>(x.size()), qs.data(), d.data(),
                                    ds.data());
  }
  ActQ8 act() const {
    ActQ8 a;
    a.qs = qs.data();
    a.d = d.data();
    a.ds = ds.data();
    return a;
  }
};

TEST(Kernels, DispatchRefusesWhatTheCpuCannotRun) {
  EXPECT_EQ(GetKernels(Isa::kScalar).isa, Isa::kScalar);
  EXPECT_EQ(GetKernels(DetectIsa()).isa, DetectIsa());
  // Every level this CPU runs by its name; the other architecture's and unknown names refused.
  for (Isa isa : RunnableIsas()) {
    EXPECT_EQ(ParseIsa(IsaName(isa)), isa);
    EXPECT_EQ(GetKernels(isa).isa, isa);
  }
  const bool arm = static_cast<int>(DetectIsa()) >= static_cast<int>(Isa::kNeon);
  EXPECT_THROW(ParseIsa(arm ? "avx2" : "neon"), Error);
  EXPECT_THROW(GetKernels(arm ? Isa::kAvx512 : Isa::kDotprod), Error);
  EXPECT_THROW(ParseIsa("sve"), Error);
}

TEST(Kernels, GemvEveryTypeMatchesReference) {
  const KernelTable& ref = ReferenceKernels();
  const GgmlType types[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0,
                            GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                            GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};
  for (Isa isa : FastIsas()) {
    const KernelTable& k = GetKernels(isa);
    for (GgmlType t : types) {
      const TypeTraits& tr = Traits(t);
      std::vector<int> col_sizes;
      if (tr.block_size == 1)
        col_sizes.assign(std::begin(kLengths), std::end(kLengths));
      else if (tr.block_size == 32)
        col_sizes = {32, 96, 288};
      else
        col_sizes = {256, 768};
      for (int cols : col_sizes) {
        for (int rows : {1, 3, 17}) {
          const auto wf = Random(static_cast<size_t>(cols) * rows, 11 + cols + rows);
          std::string w(RowBytes(tr, cols) * rows, '\0');
          tr.from_float(wf.data(), w.data(), static_cast<int64_t>(cols) * rows);
          const auto x = Random(static_cast<size_t>(cols), 5 + cols);
          std::vector<float> y_ref(rows), y(rows), wd(static_cast<size_t>(cols) * rows);
          tr.to_float(w.data(), wd.data(), static_cast<int64_t>(cols) * rows);
          ASSERT_NE(k.gemv[static_cast<int>(t)], nullptr) << tr.name;
          ref.gemv[static_cast<int>(t)](w.data(), RowBytes(tr, cols), cols, rows, x.data(),
                                        y_ref.data());
          k.gemv[static_cast<int>(t)](w.data(), RowBytes(tr, cols), cols, rows, x.data(), y.data());
          for (int r = 0; r < rows; ++r) {
            double mag = 0;
            for (int c = 0; c < cols; ++c)
              mag += std::fabs(wd[static_cast<size_t>(r) * cols + c] * x[c]);
            ASSERT_NEAR(y[r], y_ref[r], 1e-5 * mag + 1e-6)
                << IsaName(isa) << " " << tr.name << " cols=" << cols << " row=" << r;
          }
        }
      }
    }
  }
}

TEST(Kernels, VectorOpsMatchReference) {
  const KernelTable& ref = ReferenceKernels();
  for (Isa isa : FastIsas()) {
    const KernelTable& k = GetKernels(isa);
    for (int n : kLengths) {
      const auto a = Random(n, 1 + n), b = Random(n, 2 + n), w = Random(n, 3 + n);
      double mag = 0;
      for (int i = 0; i < n; ++i) mag += std::fabs(a[i] * b[i]);
      EXPECT_NEAR(k.dot(a.data(), b.data(), n), ref.dot(a.data(), b.data(), n), 1e-6 * mag + 1e-7);

      std::vector<float> o1(n), o2(n);
      ref.rmsnorm(o1.data(), a.data(), w.data(), n, 1e-5f);
      k.rmsnorm(o2.data(), a.data(), w.data(), n, 1e-5f);
      for (int i = 0; i < n; ++i) ASSERT_NEAR(o2[i], o1[i], 1e-5f * (1 + std::fabs(o1[i]))) << n;
      ref.layernorm(o1.data(), a.data(), w.data(), b.data(), n, 1e-5f);
      k.layernorm(o2.data(), a.data(), w.data(), b.data(), n, 1e-5f);
      for (int i = 0; i < n; ++i)
        ASSERT_NEAR(o2[i], o1[i], 1e-5f * (1 + std::fabs(o1[i]))) << "layernorm " << n;
      ref.layernorm(o1.data(), a.data(), w.data(), nullptr, n, 1e-5f);
      k.layernorm(o2.data(), a.data(), w.data(), nullptr, n, 1e-5f);
      for (int i = 0; i < n; ++i)
        ASSERT_NEAR(o2[i], o1[i], 1e-5f * (1 + std::fabs(o1[i]))) << "layernorm, no bias " << n;

      auto s1 = Random(n, 9 + n, 20.0f), s2 = s1;
      ref.softmax(s1.data(), n);
      k.softmax(s2.data(), n);
      float sum = 0;
      for (int i = 0; i < n; ++i) {
        ASSERT_NEAR(s2[i], s1[i], 1e-6f + 1e-5f * s1[i]);
        sum += s2[i];
      }
      EXPECT_NEAR(sum, 1.0f, 1e-5f);

      auto g1 = Random(n, 4 + n, 8.0f), g2 = g1;
      ref.silu_mul(g1.data(), b.data(), n);
      k.silu_mul(g2.data(), b.data(), n);
      for (int i = 0; i < n; ++i) ASSERT_NEAR(g2[i], g1[i], 1e-5f * (1 + std::fabs(g1[i])));
      auto e1 = Random(n, 5 + n, 8.0f), e2 = e1, e3 = e1, e4 = e1;
      ref.gelu_mul(e1.data(), b.data(), n);
      k.gelu_mul(e2.data(), b.data(), n);
      for (int i = 0; i < n; ++i)
        ASSERT_NEAR(e2[i], e1[i], 1e-5f * (1 + std::fabs(e1[i]))) << "gelu_mul";
      ref.gelu_mul(e3.data(), nullptr, n);
      k.gelu_mul(e4.data(), nullptr, n);
      for (int i = 0; i < n; ++i)
        ASSERT_NEAR(e4[i], e3[i], 1e-5f * (1 + std::fabs(e3[i]))) << "gelu";

      auto c1 = Random(n, 6 + n, 60.0f), c2 = c1;  // logits of +-60 under a cap of 30
      ref.softcap(c1.data(), n, 30.0f);
      k.softcap(c2.data(), n, 30.0f);
      for (int i = 0; i < n; ++i) ASSERT_NEAR(c2[i], c1[i], 2e-6f * 30) << "softcap " << n;

      auto y1 = a, y2 = a;
      ref.axpy(y1.data(), 0.37f, b.data(), n);
      k.axpy(y2.data(), 0.37f, b.data(), n);
      for (int i = 0; i < n; ++i) ASSERT_NEAR(y2[i], y1[i], 1e-6f);
      ref.add(y1.data(), b.data(), n);
      k.add(y2.data(), b.data(), n);
      for (int i = 0; i < n; ++i) ASSERT_NEAR(y2[i], y1[i], 1e-6f);
    }
  }
}

// The gated delta rule's step against the scalar reference: head sizes with SIMD tails, the
// state carried over several tokens (decays from fast to slow).
TEST(Kernels, DeltaStepMatchesReference) {
  const KernelTable& ref = ReferenceKernels();
  for (Isa isa : FastIsas()) {
    const KernelTable& k = GetKernels(isa);
    for (int d : {1, 7, 16, 33, 128}) {
      auto m1 = Random(static_cast<size_t>(d) * d, 11 + d, 0.3f), m2 = m1;
      std::vector<float> o1(d), o2(d);
      for (int t = 0; t < 5; ++t) {
        const auto q = Random(d, 20 + t), kk = Random(d, 30 + t), v = Random(d, 40 + t);
        const float decay = 0.2f + 0.15f * static_cast<float>(t), beta = 0.9f - 0.1f * t;
        ref.delta_step(m1.data(), q.data(), kk.data(), v.data(), decay, beta, 0.25f, o1.data(), d);
        k.delta_step(m2.data(), q.data(), kk.data(), v.data(), decay, beta, 0.25f, o2.data(), d);
        for (int j = 0; j < d; ++j)
          ASSERT_NEAR(o2[j], o1[j], 1e-5f * (1 + std::fabs(o1[j]))) << d << " token " << t;
      }
      for (size_t i = 0; i < m1.size(); ++i)
        ASSERT_NEAR(m2[i], m1[i], 1e-5f * (1 + std::fabs(m1[i])));
    }
  }
}

// The chunked delta rule against the step taken token by token (the reference's), every table
// including the reference's own chunk: chunks of 1, odd and whole, strided rows, decays from
// near 0 to near 1; the outputs and the state after the chunk.
TEST(Kernels, DeltaChunkMatchesTheStepByStepRule) {
  const KernelTable& ref = ReferenceKernels();
  std::vector<const KernelTable*> tables = {&ref};
  for (Isa isa : FastIsas()) tables.push_back(&GetKernels(isa));
  for (int d : {5, 16, 33}) {
    for (int n : {1, 7, kDeltaChunk}) {
      const int ld = 3 * d + 1;  // q | k | v rows of a wider row, as the convolved channels are
      auto rows = Random(static_cast<size_t>(n) * ld, 50 + n + d, 0.5f);
      auto m0 = Random(static_cast<size_t>(d) * d, 60 + d, 0.3f);
      std::vector<float> g(n), beta(n);
      for (int t = 0; t < n; ++t) {
        g[t] = -0.02f - 2.0f * static_cast<float>((t * 7) % 11) / 11.0f;
        beta[t] = 0.1f + 0.8f * static_cast<float>((t * 5) % 9) / 9.0f;
      }
      std::vector<float> want_m = m0, want_o(static_cast<size_t>(n) * d);
      for (int t = 0; t < n; ++t) {
        const float* r = rows.data() + static_cast<size_t>(t) * ld;
        ref.delta_step(want_m.data(), r, r + d, r + 2 * d, std::exp(g[t]), beta[t], 0.3f,
                       want_o.data() + static_cast<size_t>(t) * d, d);
      }
      std::vector<float> scratch(DeltaChunkScratch(d));
      for (const KernelTable* k : tables) {
        auto m = m0;
        std::vector<float> o(static_cast<size_t>(n) * d);
        k->delta_chunk(m.data(), rows.data(), rows.data() + d, ld, rows.data() + 2 * d, ld,
                       g.data(), beta.data(), 0.3f, o.data(), d, n, d, scratch.data());
        for (size_t i = 0; i < o.size(); ++i)
          ASSERT_NEAR(o[i], want_o[i], 2e-4f * (1 + std::fabs(want_o[i])))
              << IsaName(k->isa) << " d " << d << " n " << n << " out " << i;
        for (size_t i = 0; i < m.size(); ++i)
          ASSERT_NEAR(m[i], want_m[i], 2e-4f * (1 + std::fabs(want_m[i])))
              << IsaName(k->isa) << " d " << d << " n " << n << " state " << i;
      }
    }
  }
}

// A causal convolution's token against the scalar reference: widths of 2 to 4 taps, channel
// counts with SIMD tails, a tap stride wider than the channels (a block of a wider row), silu.
TEST(Kernels, ConvTokenMatchesReference) {
  const KernelTable& ref = ReferenceKernels();
  for (Isa isa : FastIsas()) {
    const KernelTable& k = GetKernels(isa);
    for (int K : {2, 3, 4}) {
      for (int ch : {1, 17, 64, 257}) {
        const int ld = ch + 5;
        const auto taps = Random(static_cast<size_t>(K) * ld, 70 + K + ch);
        std::vector<std::vector<float>> rows;
        std::vector<const float*> in;
        for (int r = 0; r < K; ++r) rows.push_back(Random(ch, 80 + r + ch, 2.0f));
        for (const auto& r : rows) in.push_back(r.data());
        for (bool silu : {false, true}) {
          std::vector<float> y1(ch), y2(ch);
          ref.conv_token(y1.data(), in.data(), taps.data(), ld, K, ch, silu);
          k.conv_token(y2.data(), in.data(), taps.data(), ld, K, ch, silu);
          for (int c = 0; c < ch; ++c)
            ASSERT_NEAR(y2[c], y1[c], 1e-5f * (1 + std::fabs(y1[c])))
                << IsaName(isa) << " K " << K << " ch " << ch << " silu " << silu;
        }
      }
    }
  }
}

TEST(Kernels, SoftmaxIsStableForHugeLogits) {
  for (Isa isa : {Isa::kScalar, DetectIsa()}) {
    std::vector<float> s = {1000.0f, 1000.0f, -1000.0f, 999.0f};
    GetKernels(isa).softmax(s.data(), 4);
    for (float v : s) ASSERT_TRUE(std::isfinite(v));
    EXPECT_NEAR(s[0], s[1], 1e-7);
    EXPECT_NEAR(s[0] + s[1] + s[2] + s[3], 1.0f, 1e-6);
  }
}

TEST(Kernels, RopeMatchesReferenceInBothLayouts) {
  const KernelTable& ref = ReferenceKernels();
  for (Isa isa : FastIsas()) {
    for (bool half_split : {false, true}) {
      for (int head_dim : {8, 64, 80, 128}) {
        for (int rope_dim : {head_dim, head_dim / 2}) {
          const int heads = 3, half = rope_dim / 2;
          auto x1 = Random(static_cast<size_t>(heads) * head_dim, head_dim + rope_dim);
          auto x2 = x1;
          std::vector<float> c(half), s(half);
          for (int i = 0; i < half; ++i) {
            c[i] = std::cos(0.1f * (i + 1));
            s[i] = std::sin(0.1f * (i + 1));
          }
          ref.rope(x1.data(), heads, head_dim, rope_dim, c.data(), s.data(), half_split);
          GetKernels(isa).rope(x2.data(), heads, head_dim, rope_dim, c.data(), s.data(),
                               half_split);
          for (size_t i = 0; i < x1.size(); ++i) ASSERT_NEAR(x2[i], x1[i], 1e-6f);
        }
      }
    }
  }
}

TEST(Kernels, RopeRotatesTheRightPairs) {
  // One head of 4 dims, angle 90 degrees for pair 0 and 0 for pair 1.
  const float c[2] = {0.0f, 1.0f}, s[2] = {1.0f, 0.0f};
  float adj[4] = {1, 2, 3, 4};
  ReferenceKernels().rope(adj, 1, 4, 4, c, s, false);  // pairs (0,1), (2,3)
  EXPECT_FLOAT_EQ(adj[0], -2);
  EXPECT_FLOAT_EQ(adj[1], 1);
  EXPECT_FLOAT_EQ(adj[2], 3);
  float neox[4] = {1, 2, 3, 4};
  ReferenceKernels().rope(neox, 1, 4, 4, c, s, true);  // pairs (0,2), (1,3)
  EXPECT_FLOAT_EQ(neox[0], -3);
  EXPECT_FLOAT_EQ(neox[2], 1);
  EXPECT_FLOAT_EQ(neox[1], 2);
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

TEST(Kernels, ActivationQuantizationIsIdenticalOnEveryIsa) {
  const auto x = Random(32 * 9, 77, 3.0f);
  std::vector<int8_t> q_ref(x.size()), q(x.size());
  std::vector<float> d_ref(9), d(9), s_ref(9), s(9);
  ReferenceKernels().quantize_act(x.data(), 32 * 9, q_ref.data(), d_ref.data(), s_ref.data());
  for (Isa isa : FastIsas()) {
    GetKernels(isa).quantize_act(x.data(), 32 * 9, q.data(), d.data(), s.data());
    EXPECT_EQ(q, q_ref) << IsaName(isa);
    EXPECT_EQ(d, d_ref) << IsaName(isa);
    EXPECT_EQ(s, s_ref) << IsaName(isa);
  }
  // d is amax / 127 rounded to fp16 (ActScale: 2^-11 relative), q = x / (amax / 127) rounded:
  // q d is x within half a step plus 127 times d's rounding.
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(d_ref[i / 32], Fp16ToFp32(Fp32ToFp16(d_ref[i / 32])));
    ASSERT_NEAR(q_ref[i] * d_ref[i / 32], x[i], d_ref[i / 32] * (0.5f + 127.0f / 2048) + 1e-7f);
  }
  // Below fp16's normal range (and above it) d stays fp32, on every ISA.
  for (float scale : {1e-4f, 1e9f}) {
    const auto y = Random(32, 78, scale);
    float amax = 0;
    for (float v : y) amax = std::max(amax, std::fabs(v));
    ReferenceKernels().quantize_act(y.data(), 32, q.data(), d.data(), s.data());
    EXPECT_EQ(d[0], amax / 127.0f) << scale;
    for (Isa isa : FastIsas()) {
      GetKernels(isa).quantize_act(y.data(), 32, q.data(), d.data(), s.data());
      EXPECT_EQ(d[0], amax / 127.0f) << IsaName(isa) << " " << scale;
    }
  }
}

TEST(Kernels, IntegerGemvMatchesReferenceAndFloatPath) {
  const KernelTable& ref = ReferenceKernels();
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    const TypeTraits& tr = Traits(t);
    for (int cols : {32, 96, 256, 288, 2048}) {
      if (cols % tr.block_size != 0) continue;
      for (int rows : {1, 3, 17}) {
        const auto wf = Random(static_cast<size_t>(cols) * rows, 3 + cols + rows);
        std::string w(RowBytes(tr, cols) * rows, '\0');
        tr.from_float(wf.data(), w.data(), static_cast<int64_t>(cols) * rows);
        const auto x = Random(static_cast<size_t>(cols), 9 + cols);
        const QuantizedActs quantized(x);
        const ActQ8 xq = quantized.act();
        std::vector<float> y_ref(rows), y(rows), y_float(rows);
        ref.gemv_q8[static_cast<int>(t)](w.data(), RowBytes(tr, cols), cols, rows, xq,
                                         y_ref.data());
        ref.gemv[static_cast<int>(t)](w.data(), RowBytes(tr, cols), cols, rows, x.data(),
                                      y_float.data());
        for (int r = 0; r < rows; ++r) {
          // int8 activations vs float activations: within the activation quantization error.
          ASSERT_NEAR(y_ref[r], y_float[r], 0.02 * std::sqrt(static_cast<double>(cols)) * 0.3)
              << tr.name;
        }
        for (Isa isa : FastIsas()) {
          GetKernels(isa).gemv_q8[static_cast<int>(t)](w.data(), RowBytes(tr, cols), cols, rows, xq,
                                                       y.data());
          for (int r = 0; r < rows; ++r) {
            ASSERT_NEAR(y[r], y_ref[r], 1e-5 * (std::fabs(y_ref[r]) + cols * 0.01))
                << IsaName(isa) << " " << tr.name << " cols " << cols;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

TEST(Kernels, IntegerGemmMatchesReferenceOnTileRemainders) {
  const KernelTable& ref = ReferenceKernels();
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_0}) {
    const TypeTraits& tr = Traits(t);
    for (int cols : {32, 64, 96, 288}) {
      for (int rows : {1, 3, 4, 5, 9}) {
        for (int n_tok : {1, 2, 3, 4, 5, 7, 9}) {
          const auto wf = Random(static_cast<size_t>(cols) * rows, 5 + cols + rows);
          std::string w(RowBytes(tr, cols) * rows, '\0');
          tr.from_float(wf.data(), w.data(), static_cast<int64_t>(cols) * rows);
          const auto x = Random(static_cast<size_t>(cols) * n_tok, 7 + cols + n_tok);
          const QuantizedActs quantized(x);
          const ActQ8 xq = quantized.act();
          const int64_t ldy = rows + 3;
          std::vector<float> y_ref(static_cast<size_t>(ldy) * n_tok, -1.0f), y(y_ref);
          ref.gemm_q8[static_cast<int>(t)](w.data(), RowBytes(tr, cols), cols, rows, xq, n_tok,
                                           y_ref.data(), ldy);
          for (Isa isa : FastIsas()) {
            std::fill(y.begin(), y.end(), -1.0f);
            GetKernels(isa).gemm_q8[static_cast<int>(t)](w.data(), RowBytes(tr, cols), cols, rows,
                                                         xq, n_tok, y.data(), ldy);
            for (size_t i = 0; i < y.size(); ++i) {
              ASSERT_NEAR(y[i], y_ref[i], 1e-5 * (std::fabs(y_ref[i]) + cols * 0.01))
                  << IsaName(isa) << " " << tr.name << " cols " << cols << " rows " << rows
                  << " tokens " << n_tok << " at " << i;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// Q4_0 re-laid out at load (Q4_0R) computes exactly what Q4_0 does, on every ISA and path.
TEST(Kernels, RelaidQ4_0AndQ8_0MatchTheFileLayouts) {
  const KernelTable& ref = ReferenceKernels();
  for (bool is_q4 : {true, false}) {
    const TypeTraits& tr = Traits(is_q4 ? GgmlType::kQ4_0 : GgmlType::kQ8_0);
    const int q4 = static_cast<int>(is_q4 ? GgmlType::kQ4_0 : GgmlType::kQ8_0);
    const int q4r = static_cast<int>(is_q4 ? GgmlType::kQ4_0R : GgmlType::kQ8_0R);
    for (int cols : {32, 96, 512, 544, 2048}) {
      for (int rows : {1, 5, 9}) {
        for (int n_tok : {1, 3, 6}) {
          const auto wf = Random(static_cast<size_t>(cols) * rows, 11 + cols + rows);
          std::string w(RowBytes(tr, cols) * rows, '\0'), wr(w.size(), '\0');
          tr.from_float(wf.data(), w.data(), static_cast<int64_t>(cols) * rows);
          if (is_q4)
            RepackQ4_0Rows(w.data(), wr.data(), rows, cols);
          else
            RepackQ8_0Rows(w.data(), wr.data(), rows, cols);
          // Row-level dequantization agrees.
          std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
          tr.to_float(w.data(), a.data(), cols);
          Traits(static_cast<GgmlType>(q4r)).to_float(wr.data(), b.data(), cols);
          ASSERT_EQ(a, b);
          const auto x = Random(static_cast<size_t>(cols) * n_tok, 13 + cols);
          const QuantizedActs quantized(x);
          const ActQ8 xq = quantized.act();
          const size_t rb = RowBytes(tr, cols);
          std::vector<float> want(static_cast<size_t>(rows) * n_tok), got(want.size()), fwant(rows),
              fgot(rows);
          ref.gemm_q8[q4](w.data(), rb, cols, rows, xq, n_tok, want.data(), rows);
          ref.gemv[q4](w.data(), rb, cols, rows, x.data(), fwant.data());
          std::vector<Isa> isas = FastIsas();
          isas.push_back(Isa::kScalar);
          for (Isa isa : isas) {
            const KernelTable& k = GetKernels(isa);
            k.gemm_q8[q4r](wr.data(), rb, cols, rows, xq, n_tok, got.data(), rows);
            for (size_t i = 0; i < got.size(); ++i)
              ASSERT_NEAR(got[i], want[i], 1e-5 * (std::fabs(want[i]) + cols * 0.01))
                  << IsaName(isa) << " gemm";
            k.gemv_q8[q4r](wr.data(), rb, cols, rows, xq, got.data());
            for (int r = 0; r < rows; ++r)
              ASSERT_NEAR(got[r], want[r], 1e-5 * (std::fabs(want[r]) + cols * 0.01))
                  << IsaName(isa) << " gemv_q8 cols " << cols;
            k.gemv[q4r](wr.data(), rb, cols, rows, x.data(), fgot.data());
            for (int r = 0; r < rows; ++r)
              ASSERT_NEAR(fgot[r], fwant[r], 1e-5 * (std::fabs(fwant[r]) + cols * 0.01))
                  << IsaName(isa) << " gemv";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// Batch invariance at the kernel level: a token's row sums from the one-token GEMV are
// bit-identical to the same token's in a batched GEMM (any batch size, any tile remainder),
// on every ISA, for every type with an integer GEMM and its re-laid-out form.
TEST(Kernels, IntegerGemvIsBitIdenticalToGemm) {
  for (bool is_q4 : {true, false}) {
    const GgmlType base = is_q4 ? GgmlType::kQ4_0 : GgmlType::kQ8_0;
    const GgmlType relaid = is_q4 ? GgmlType::kQ4_0R : GgmlType::kQ8_0R;
    const TypeTraits& tr = Traits(base);
    for (int cols : {32, 64, 96, 544, 2048, 5632}) {
      const int rows = 7;
      const auto wf = Random(static_cast<size_t>(cols) * rows, 17 + cols);
      std::string w(RowBytes(tr, cols) * rows, '\0'), wr(w.size(), '\0');
      tr.from_float(wf.data(), w.data(), static_cast<int64_t>(cols) * rows);
      if (is_q4)
        RepackQ4_0Rows(w.data(), wr.data(), rows, cols);
      else
        RepackQ8_0Rows(w.data(), wr.data(), rows, cols);
      const size_t rb = RowBytes(tr, cols);
      for (int n_tok : {2, 5, 9}) {
        const auto x = Random(static_cast<size_t>(cols) * n_tok, 19 + cols + n_tok);
        const QuantizedActs quantized(x);
        const ActQ8 xq = quantized.act();
        std::vector<Isa> isas = FastIsas();
        isas.push_back(Isa::kScalar);
        for (Isa isa : isas) {
          const KernelTable& k = GetKernels(isa);
          for (GgmlType t : {base, relaid}) {
            const std::string& wt = t == base ? w : wr;
            std::vector<float> batched(static_cast<size_t>(rows) * n_tok),
                alone(static_cast<size_t>(rows));
            k.gemm_q8[static_cast<int>(t)](wt.data(), rb, cols, rows, xq, n_tok, batched.data(),
                                           rows);
            for (int j = 0; j < n_tok; ++j) {
              k.gemv_q8[static_cast<int>(t)](wt.data(), rb, cols, rows, xq.Token(j, cols),
                                             alone.data());
              ASSERT_EQ(0, std::memcmp(alone.data(), batched.data() + static_cast<size_t>(j) * rows,
                                       sizeof(float) * rows))
                  << IsaName(isa) << " " << Traits(t).name << " cols " << cols << " token " << j
                  << " of " << n_tok;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// GELU (tanh form) at known points, and attention soft-capping on every ISA against the
// reference (and that the cap changes the result when scores exceed it).
TEST(Kernels, GeluKnownValuesAndAttentionSoftcap) {
  float g[4] = {0.0f, 1.0f, -1.0f, 3.0f};
  ReferenceKernels().gelu_mul(g, nullptr, 4);
  EXPECT_NEAR(g[0], 0.0f, 1e-7f);
  EXPECT_NEAR(g[1], 0.841192f, 1e-5f);  // 0.5 (1 + tanh(0.79788 * 1.044715))
  EXPECT_NEAR(g[2], -0.158808f, 1e-5f);
  EXPECT_NEAR(g[3], 2.996363f, 1e-5f);

  const int hd = 32, n_kv = 2, n_q = 2, len = 19;
  const auto q = Random(static_cast<size_t>(n_q) * hd, 31, 3.0f);
  const auto kf = Random(static_cast<size_t>(len) * n_kv * hd, 32, 3.0f),
             vf = Random(static_cast<size_t>(len) * n_kv * hd, 33);
  std::vector<int32_t> table = {0, 1, 2};
  KvRowsRef k, v;
  k.base = reinterpret_cast<const uint8_t*>(kf.data());
  v.base = reinterpret_cast<const uint8_t*>(vf.data());
  k.row_bytes = v.row_bytes = sizeof(float) * n_kv * hd;
  k.table = v.table = table.data();
  k.block_size = v.block_size = 8;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> want(static_cast<size_t>(n_q) * hd), got(want.size()), uncapped(want.size());
  std::vector<float> scratch(AttendScratchFloats(hd));
  const int lo[2] = {0, 0}, hi[2] = {len, len};
  auto attend = [&](const KernelTable& kt, float cap, std::vector<float>* out) {
    const float* qr[2] = {q.data(), q.data() + hd};
    float* orow[2] = {out->data(), out->data() + hd};
    kt.attend_rows(qr, orow, n_q, lo, hi, k, v, 1, n_kv, hd, scale, cap, scratch.data(), nullptr);
  };
  attend(ReferenceKernels(), 2.0f, &want);
  attend(ReferenceKernels(), 0.0f, &uncapped);
  double diff = 0;
  for (size_t i = 0; i < want.size(); ++i) diff += std::fabs(want[i] - uncapped[i]);
  EXPECT_GT(diff, 1e-3) << "a soft cap of 2 must change attention over scores well above 2";
  for (Isa isa : FastIsas()) {
    attend(GetKernels(isa), 2.0f, &got);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f) << IsaName(isa);
  }
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// Every fast ISA's GEMM of interleaved type `x16` against `want` (n_tok x rows), and each
// token alone through the GEMV bit-identical to its row of the batch.
void ExpectFastIsasMatch(GgmlType x16, const void* w, size_t rb, int cols, int rows,
                         const ActQ8& xq, int n_tok, const std::vector<float>& want,
                         const char* name) {
  std::vector<float> got(want.size()), alone(static_cast<size_t>(rows));
  for (Isa isa : FastIsas()) {
    const KernelTable& k = GetKernels(isa);
    k.gemm_q8[static_cast<int>(x16)](w, rb, cols, rows, xq, n_tok, got.data(), rows);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-5 * (std::fabs(want[i]) + cols * 0.01))
          << IsaName(isa) << " " << name << " cols " << cols << " i " << i;
    }
    for (int j = 0; j < n_tok; ++j) {
      k.gemv_q8[static_cast<int>(x16)](w, rb, cols, rows, xq.Token(j, cols), alone.data());
      ASSERT_EQ(0, std::memcmp(alone.data(), got.data() + static_cast<size_t>(j) * rows,
                               sizeof(float) * rows))
          << IsaName(isa) << " " << name << " cols " << cols << " token " << j << " of " << n_tok;
    }
  }
}

// The 16-row interleaved layouts: every element in its place, the reference kernels equal the
// file layouts' (rounding only), every ISA's GEMV/GEMM equal the reference, and a token alone
// bit-identical to the same token in any batch (tiles of 1..8 tokens and remainders).
TEST(Kernels, Interleaved16RowLayoutsMatchTheFileLayouts) {
  const KernelTable& ref = ReferenceKernels();
  for (bool is_q4 : {true, false}) {
    const GgmlType base = is_q4 ? GgmlType::kQ4_0 : GgmlType::kQ8_0;
    const GgmlType x16 = is_q4 ? GgmlType::kQ4_0X16 : GgmlType::kQ8_0X16;
    const TypeTraits& tr = Traits(base);
    for (int cols : {32, 96, 544, 2048}) {
      for (int rows : {16, 48}) {
        const auto wf = Random(static_cast<size_t>(cols) * rows, 23 + cols + rows);
        std::string w(RowBytes(tr, cols) * rows, '\0'), wx(w.size(), '\0');
        tr.from_float(wf.data(), w.data(), static_cast<int64_t>(cols) * rows);
        if (is_q4)
          RepackQ4_0X16(w.data(), wx.data(), rows, cols);
        else
          RepackQ8_0X16(w.data(), wx.data(), rows, cols);
        const size_t rb = RowBytes(tr, cols);
        std::vector<float> row(static_cast<size_t>(cols));
        for (int r = 0; r < rows; ++r) {
          tr.to_float(w.data() + r * rb, row.data(), cols);
          const auto* grp = reinterpret_cast<const uint8_t*>(wx.data()) + (r / 16) * 16 * rb;
          for (int c = 0; c < cols; ++c)
            ASSERT_EQ(row[c], X16Element(x16, grp, cols, r % 16, c)) << r << " " << c;
        }
        for (int n_tok : {1, 3, 8, 11, 16, 35}) {  // 35: whole AMX tiles + a remainder
          const auto x = Random(static_cast<size_t>(cols) * n_tok, 29 + cols + n_tok);
          const QuantizedActs quantized(x);
          const ActQ8 xq = quantized.act();
          std::vector<float> want(static_cast<size_t>(rows) * n_tok), got(want.size());
          ref.gemm_q8[static_cast<int>(base)](w.data(), rb, cols, rows, xq, n_tok, want.data(),
                                              rows);
          ref.gemm_q8[static_cast<int>(x16)](wx.data(), rb, cols, rows, xq, n_tok, got.data(),
                                             rows);
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(got[i], want[i], 1e-6 * (std::fabs(want[i]) + 1));
          std::vector<float> fwant(rows), fgot(rows);
          ref.gemv[static_cast<int>(base)](w.data(), rb, cols, rows, x.data(), fwant.data());
          ref.gemv[static_cast<int>(x16)](wx.data(), rb, cols, rows, x.data(), fgot.data());
          for (int r = 0; r < rows; ++r)
            ASSERT_NEAR(fgot[r], fwant[r], 1e-5 * (std::fabs(fwant[r]) + 1));
          ASSERT_NO_FATAL_FAILURE(
              ExpectFastIsasMatch(x16, wx.data(), rb, cols, rows, xq, n_tok, want, tr.name));
        }
      }
    }
  }
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// Tiled attention over query rows (the rows are the SIMD lanes) against the reference, for every
// K/V encoding, every ISA, row counts below, at and above the lane count, rows that see
// different ranges (causal ends, sliding-window starts, one that sees nothing), and soft-capping.
// Few rows (a decode token's group: positions and head dimension as the lanes) and many (rows
// as the lanes) give each row the same bits.
void AttendRowsCase(int hd, const std::vector<int>& row_counts) {
  const int n_kv = 2, len = 77, g = 1;
  const auto kf = Random(static_cast<size_t>(len) * n_kv * hd, 41, 2.0f),
             vf = Random(static_cast<size_t>(len) * n_kv * hd, 42);
  std::vector<int32_t> table;
  const int bs = 16;
  for (int b = 0; b < (len + bs - 1) / bs; ++b) table.push_back((b * 3) % 5);  // scattered blocks
  for (int kt = 0; kt < kKvDtypeCount; ++kt) {
    const KvDtype type = static_cast<KvDtype>(kt);
    const size_t rb = KvRowBytes(type, n_kv, hd);
    std::vector<uint8_t> kc(rb * bs * 5), vc(rb * bs * 5);
    for (int t = 0; t < len; ++t) {
      const size_t slot = static_cast<size_t>(table[t / bs]) * bs + t % bs;
      ReferenceKernels().kv_store[kt](kc.data() + slot * rb,
                                      kf.data() + static_cast<size_t>(t) * n_kv * hd, n_kv, hd);
      ReferenceKernels().kv_store[kt](vc.data() + slot * rb,
                                      vf.data() + static_cast<size_t>(t) * n_kv * hd, n_kv, hd);
    }
    KvRowsRef k, v;
    k.base = kc.data();
    v.base = vc.data();
    k.row_bytes = v.row_bytes = rb;
    k.table = v.table = table.data();
    k.block_size = v.block_size = bs;
    k.type = v.type = type;
    for (int n_rows : row_counts) {
      const auto q = Random(static_cast<size_t>(n_rows) * hd, 43 + n_rows, 2.0f);
      std::vector<int> lo(n_rows), hi(n_rows);
      for (int r = 0; r < n_rows; ++r) {
        hi[r] = len - (r % 7) * 3;            // causal ends
        lo[r] = r % 4 == 3 ? hi[r] - 20 : 0;  // a window
      }
      if (n_rows > 4) lo[4] = hi[4];  // sees nothing: zeros
      std::vector<float> want(static_cast<size_t>(n_rows) * hd), got(want.size());
      std::vector<const float*> qr(n_rows);
      std::vector<float*> wr(n_rows), gr(n_rows);
      for (int r = 0; r < n_rows; ++r) {
        qr[r] = q.data() + r * hd;
        wr[r] = want.data() + r * hd;
        gr[r] = got.data() + r * hd;
      }
      std::vector<float> scratch(AttendScratchFloats(hd));
      for (float softcap : {0.0f, 3.0f}) {
        ReferenceKernels().attend_rows(qr.data(), wr.data(), n_rows, lo.data(), hi.data(), k, v, g,
                                       n_kv, hd, 0.125f, softcap, scratch.data(), nullptr);
        for (Isa isa : FastIsas()) {
          std::fill(got.begin(), got.end(), 1e9f);
          GetKernels(isa).attend_rows(qr.data(), gr.data(), n_rows, lo.data(), hi.data(), k, v, g,
                                      n_kv, hd, 0.125f, softcap, scratch.data(), nullptr);
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_NEAR(got[i], want[i], 2e-5f)
                << IsaName(isa) << " " << KvDtypeName(type) << " rows " << n_rows << " softcap "
                << softcap << " at " << i;
          }
          // Each row alone: bit-identical to its result among the others (batch invariance).
          for (int r = 0; r < n_rows; ++r) {
            std::vector<float> alone(hd);
            float* ar = alone.data();
            GetKernels(isa).attend_rows(&qr[r], &ar, 1, &lo[r], &hi[r], k, v, g, n_kv, hd, 0.125f,
                                        softcap, scratch.data(), nullptr);
            for (int d = 0; d < hd; ++d)
              ASSERT_EQ(alone[d], got[static_cast<size_t>(r) * hd + d])
                  << IsaName(isa) << " " << KvDtypeName(type) << " row " << r << " of " << n_rows;
          }
        }
        // Split over the positions (three parts, merged) equals the whole, on every table.
        std::vector<Isa> all = FastIsas();
        all.push_back(Isa::kScalar);
        for (Isa isa : all) {
          std::vector<std::vector<float>> part_out(3, std::vector<float>(want.size()));
          std::vector<std::vector<float>> part_ml(
              3, std::vector<float>(2 * static_cast<size_t>(n_rows)));
          for (int part = 0; part < 3; ++part) {
            const int c0 = len * part / 3, c1 = len * (part + 1) / 3;
            std::vector<int> plo(n_rows), phi(n_rows);
            std::vector<float*> pr(n_rows);
            for (int r = 0; r < n_rows; ++r) {
              plo[r] = std::max(lo[r], c0);
              phi[r] = std::max(plo[r], std::min(hi[r], c1));
              pr[r] = part_out[part].data() + r * hd;
            }
            GetKernels(isa).attend_rows(qr.data(), pr.data(), n_rows, plo.data(), phi.data(), k, v,
                                        g, n_kv, hd, 0.125f, softcap, scratch.data(),
                                        part_ml[part].data());
          }
          for (int r = 0; r < n_rows; ++r) {
            const float* outs[3] = {part_out[0].data() + r * hd, part_out[1].data() + r * hd,
                                    part_out[2].data() + r * hd};
            const float* mls[3] = {part_ml[0].data() + 2 * r, part_ml[1].data() + 2 * r,
                                   part_ml[2].data() + 2 * r};
            MergeAttention(outs, mls, 3, hd, got.data() + r * hd);
          }
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_NEAR(got[i], want[i], 2e-5f) << IsaName(isa) << " split, " << KvDtypeName(type)
                                                << " rows " << n_rows << " at " << i;
          }
        }
        if (n_rows > 4) {
          for (int d = 0; d < hd; ++d) ASSERT_EQ(want[4 * hd + d], 0.0f);
        }
      }
    }
  }
}

TEST(Kernels, AttendRowsMatchesTheReference) {
  for (int hd : {8, 64, 128}) {  // (8: stories260K's, a head smaller than AVX-512's lanes)
    SCOPED_TRACE(testing::Message() << "head dim " << hd);
    AttendRowsCase(hd, hd == 64 ? std::vector<int>{1, 2, 3, 4, 5, 8, 12, 16, 19, 37, 64, 70, 300}
                                : std::vector<int>{1, 2, 3, 8, 9, 16});
  }
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

double Rmse(const std::vector<float>& a, const std::vector<float>& b,
            const std::vector<float>* w = nullptr) {
  double s = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double wi = w != nullptr ? (*w)[i % w->size()] : 1.0;
    s += wi * (a[i] - b[i]) * (a[i] - b[i]);
    n += wi;
  }
  return std::sqrt(s / n);
}

// The Paddock file types: quantize -> dequantize within RMSE bounds (data of unit variance),
// PQ4_G32 round-to-nearest identical to Q4_0, activation-weighted quantization never worse in
// the weighted error than round-to-nearest, and every ISA's GEMV/GEMM against the reference
// (and a token alone bit-identical to the same token in a batch).
TEST(Kernels, PaddockTypesQuantizeAndMultiply) {
  const int rows = 32, cols = 512;
  const auto wf = Random(static_cast<size_t>(rows) * cols, 51, 1.0f);
  // Random() is uniform in [-1, 1] times the scale: rms 1/sqrt(3).
  double rms = 0;
  for (float v : wf) rms += v * v;
  rms = std::sqrt(rms / wf.size());
  std::vector<float> importance(cols);
  for (int c = 0; c < cols; ++c) importance[c] = c % 7 == 0 ? 20.0f : 0.5f;  // a few loud channels
  const struct {
    GgmlType type;
    double max_rel_rmse;
  } cases[] = {{GgmlType::kPS8_C, 0.75},     {GgmlType::kPQ8_C, 0.006},
               {GgmlType::kPQ4_G32, 0.09},   {GgmlType::kPQ4_G64, 0.09},
               {GgmlType::kPQ4_G128, 0.09},  {GgmlType::kPQ4_G32Z, 0.075},
               {GgmlType::kPQ4_G64Z, 0.075}, {GgmlType::kPQ4_G128Z, 0.075}};
  const KernelTable& ref = ReferenceKernels();
  for (const auto& tc : cases) {
    const TypeTraits& tr = Traits(tc.type);
    const size_t rb = RowBytes(tr, cols);
    std::string q(rb * rows, '\0'), qi(q.size(), '\0');
    QuantizeX16(tc.type, wf.data(), rows, cols, nullptr, q.data());
    QuantizeX16(tc.type, wf.data(), rows, cols, importance.data(), qi.data());
    std::vector<float> back(wf.size()), back_i(wf.size());
    DequantizeMatrix(tc.type, reinterpret_cast<const uint8_t*>(q.data()), rows, cols, back.data());
    DequantizeMatrix(tc.type, reinterpret_cast<const uint8_t*>(qi.data()), rows, cols,
                     back_i.data());
    EXPECT_LT(Rmse(back, wf) / rms, tc.max_rel_rmse) << tr.name;
    EXPECT_LE(Rmse(back_i, wf, &importance), Rmse(back, wf, &importance) * 1.0001)
        << tr.name << ": weighted search worse than RTN";
    if (tc.type == GgmlType::kPS8_C) {  // 2:4: exactly the two largest of every four survive
      for (size_t g4 = 0; g4 < wf.size() / 4; ++g4) {
        int zeros = 0;
        float kept_min = 1e9f, pruned_max = 0;
        for (int p = 0; p < 4; ++p) {
          const size_t i = 4 * g4 + p;
          if (back[i] == 0.0f) {
            ++zeros;
            pruned_max = std::max(pruned_max, std::fabs(wf[i]));
          } else {
            kept_min = std::min(kept_min, std::fabs(wf[i]));
          }
        }
        ASSERT_EQ(zeros, 2) << "group " << g4;
        ASSERT_LE(pruned_max, kept_min) << "group " << g4;
      }
    }
    if (tc.type == GgmlType::kPQ4_G32Z) {  // Q4_1 re-laid out is exactly this type
      std::string q41(RowBytes(Traits(GgmlType::kQ4_1), cols) * rows, '\0'), rel(q41.size(), '\0');
      Traits(GgmlType::kQ4_1).from_float(wf.data(), q41.data(), static_cast<int64_t>(rows) * cols);
      RepackQ4_1X16(q41.data(), rel.data(), rows, cols);
      std::vector<float> a(wf.size()), b(wf.size());
      DequantizeMatrix(GgmlType::kQ4_1, reinterpret_cast<const uint8_t*>(q41.data()), rows, cols,
                       a.data());
      DequantizeMatrix(GgmlType::kPQ4_G32Z, reinterpret_cast<const uint8_t*>(rel.data()), rows,
                       cols, b.data());
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_EQ(a[i], b[i]) << "Q4_1 re-laid as PQ4_G32Z, element " << i;
    }
    if (tc.type == GgmlType::kPQ4_G32) {
      std::string q40(RowBytes(Traits(GgmlType::kQ4_0), cols) * rows, '\0');
      Traits(GgmlType::kQ4_0).from_float(wf.data(), q40.data(), static_cast<int64_t>(rows) * cols);
      std::vector<float> b40(wf.size());
      DequantizeMatrix(GgmlType::kQ4_0, reinterpret_cast<const uint8_t*>(q40.data()), rows, cols,
                       b40.data());
      for (size_t i = 0; i < back.size(); ++i)
        ASSERT_EQ(back[i], b40[i]) << "PQ4_G32 round-to-nearest must equal Q4_0, element " << i;
    }
    for (int n_tok : {1, 3, 8, 11, 16, 35}) {  // 35: whole AMX tiles + a remainder
      const auto x = Random(static_cast<size_t>(cols) * n_tok, 53 + n_tok);
      const QuantizedActs quantized(x);
      const ActQ8 xq = quantized.act();
      std::vector<float> want(static_cast<size_t>(rows) * n_tok), got(want.size()), alone(rows),
          fwant(rows), fexact(rows);
      ref.gemm_q8[static_cast<int>(tc.type)](qi.data(), rb, cols, rows, xq, n_tok, want.data(),
                                             rows);
      // The integer reference agrees with float math on the dequantized weights and activations.
      std::vector<float> xdq(static_cast<size_t>(cols));
      for (int c = 0; c < cols; ++c) xdq[c] = xq.qs[c] * xq.d[c / 32];
      ref.gemv[static_cast<int>(tc.type)](qi.data(), rb, cols, rows, xdq.data(), fwant.data());
      for (int r = 0; r < rows; ++r)
        ASSERT_NEAR(want[r], fwant[r], 1e-4 * (std::fabs(fwant[r]) + 1)) << tr.name;
      for (Isa isa : FastIsas()) {
        const KernelTable& k = GetKernels(isa);
        k.gemm_q8[static_cast<int>(tc.type)](qi.data(), rb, cols, rows, xq, n_tok, got.data(),
                                             rows);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-5 * (std::fabs(want[i]) + cols * 0.01))
              << IsaName(isa) << " " << tr.name;
        for (int j = 0; j < n_tok; ++j) {
          k.gemv_q8[static_cast<int>(tc.type)](qi.data(), rb, cols, rows, xq.Token(j, cols),
                                               alone.data());
          ASSERT_EQ(0, std::memcmp(alone.data(), got.data() + static_cast<size_t>(j) * rows,
                                   sizeof(float) * rows))
              << IsaName(isa) << " " << tr.name;
        }
      }
    }
  }
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// Q4_K, Q5_K, Q6_K, Q5_0 and Q5_1 re-laid in 16-row groups (their load-time layouts): the same
// values element for element, the interleaved reference equal to the file layout's (integer
// where it has one, float math within the activations' rounding), every ISA's GEMM against it,
// and one token alone bit-identical to the same token in a batch.
TEST(Kernels, InterleavedKQuantsMatchTheFileLayouts) {
  const KernelTable& ref = ReferenceKernels();
  using Repack = void (*)(const void*, void*, int64_t, int64_t);
  const struct {
    GgmlType base, x16;
    Repack repack;
  } cases[] = {{GgmlType::kQ4_K, GgmlType::kQ4_KX16, RepackQ4_KX16},
               {GgmlType::kQ6_K, GgmlType::kQ6_KX16, RepackQ6_KX16},
               {GgmlType::kQ5_K, GgmlType::kQ5_KX16, RepackQ5_KX16},
               {GgmlType::kQ5_0, GgmlType::kQ5_0X16, RepackQ5_0X16},
               {GgmlType::kQ5_1, GgmlType::kQ5_1X16, RepackQ5_1X16},
               {GgmlType::kIQ4_NL, GgmlType::kIQ4_NLX16, RepackIQ4_NLX16},
               {GgmlType::kIQ4_XS, GgmlType::kIQ4_XSX16, RepackIQ4_XSX16},
               {GgmlType::kMXFP4, GgmlType::kMXFP4X16, RepackMXFP4X16},
               {GgmlType::kQ3_K, GgmlType::kQ3_KX16, RepackQ3_KX16},
               {GgmlType::kQ2_K, GgmlType::kQ2_KX16, RepackQ2_KX16}};
  for (const auto& tc : cases) {
    const GgmlType base = tc.base, x16 = tc.x16;
    const TypeTraits& tr = Traits(base);
    for (int cols : {256, 768}) {
      for (int rows : {16, 48}) {
        // Rows of different magnitudes and a shifted mean, so the scales, minimums and signed
        // sub-block scales all vary.
        auto wf = Random(static_cast<size_t>(cols) * rows, 61 + cols + rows);
        for (int r = 0; r < rows; ++r) {
          for (int c = 0; c < cols; ++c)
            wf[static_cast<size_t>(r) * cols + c] =
                wf[static_cast<size_t>(r) * cols + c] * (1 + r % 5) + (c % 300 < 40 ? 0.5f : 0.0f);
        }
        const size_t rb = RowBytes(tr, cols);
        std::string w(rb * rows, '\0'), wx(w.size(), '\x55');
        tr.from_float(wf.data(), w.data(), static_cast<int64_t>(cols) * rows);
        tc.repack(w.data(), wx.data(), rows, cols);
        std::vector<float> row(static_cast<size_t>(cols));
        for (int r = 0; r < rows; ++r) {
          tr.to_float(w.data() + r * rb, row.data(), cols);
          const auto* grp = reinterpret_cast<const uint8_t*>(wx.data()) + (r / 16) * 16 * rb;
          for (int c = 0; c < cols; ++c)
            ASSERT_EQ(row[c], X16Element(x16, grp, cols, r % 16, c))
                << tr.name << " " << r << " " << c;
        }
        for (int n_tok : {1, 3, 6, 8, 13, 16, 35}) {  // 35: whole AMX tiles + a remainder
          const auto x = Random(static_cast<size_t>(cols) * n_tok, 67 + cols + n_tok);
          const QuantizedActs quantized(x);
          const ActQ8 xq = quantized.act();
          std::vector<float> want(static_cast<size_t>(rows) * n_tok), got(want.size());
          ref.gemm_q8[static_cast<int>(x16)](wx.data(), rb, cols, rows, xq, n_tok, want.data(),
                                             rows);
          if (ref.gemv_q8[static_cast<int>(base)] !=
              nullptr) {  // the file layout's integer reference
            for (int t = 0; t < n_tok; ++t)
              ref.gemv_q8[static_cast<int>(base)](w.data(), rb, cols, rows, xq.Token(t, cols),
                                                  got.data() + t * rows);
            for (size_t i = 0; i < got.size(); ++i)
              ASSERT_NEAR(got[i], want[i], 1e-6 * (std::fabs(want[i]) + 1));
          }
          // Against float math on the file layout's values: only the activations' int8 rounding
          // (a sum of cols independent errors; the bound is about 3 sigma for these weights).
          std::vector<float> fwant(rows);
          for (int t = 0; t < n_tok; ++t) {
            ref.gemv[static_cast<int>(base)](
                w.data(), rb, cols, rows, x.data() + static_cast<size_t>(t) * cols, fwant.data());
            for (int r = 0; r < rows; ++r)
              ASSERT_NEAR(want[t * rows + r], fwant[r],
                          0.03 * std::sqrt(static_cast<double>(cols)) + 0.01 * std::fabs(fwant[r]))
                  << tr.name;
          }
          ASSERT_NO_FATAL_FAILURE(
              ExpectFastIsasMatch(x16, wx.data(), rb, cols, rows, xq, n_tok, want, tr.name));
        }
      }
    }
  }
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// Float-activation GEMM (F32, F16, BF16 weights) on every ISA against the reference, with row
// and column counts that leave remainders; one token alone bit-identical to the same token in
// a batch (the GEMV is the GEMM's one-token case). The BF16 dot product (where the CPU has
// it) against its reference: activations rounded to bf16, exact products.
TEST(Kernels, FloatGemmAndBf16DotMatchTheReference) {
  const KernelTable& ref = ReferenceKernels();
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16}) {
    const TypeTraits& tr = Traits(type);
    for (int cols : {16, 100, 2048}) {
      for (int rows : {1, 7, 33}) {
        const auto wf = Random(static_cast<size_t>(cols) * rows, 71 + cols + rows);
        const size_t rb = RowBytes(tr, cols);
        std::string w(rb * rows, '\0');
        tr.from_float(wf.data(), w.data(), static_cast<int64_t>(cols) * rows);
        for (int n_tok : {1, 3, 4, 9}) {
          const auto x = Random(static_cast<size_t>(cols) * n_tok, 73 + cols + n_tok);
          std::vector<float> want(static_cast<size_t>(rows) * n_tok), got(want.size()), alone(rows);
          ref.gemm[static_cast<int>(type)](w.data(), rb, cols, rows, x.data(), n_tok, want.data(),
                                           rows);
          std::vector<const KernelTable*> tables;
          for (Isa isa : FastIsas()) tables.push_back(&GetKernels(isa));
          for (const KernelTable* k : tables) {
            k->gemm[static_cast<int>(type)](w.data(), rb, cols, rows, x.data(), n_tok, got.data(),
                                            rows);
            for (size_t i = 0; i < got.size(); ++i)
              ASSERT_NEAR(got[i], want[i], 1e-4 * (std::fabs(want[i]) + 1))
                  << IsaName(k->isa) << " " << tr.name;
            for (int j = 0; j < n_tok; ++j) {
              k->gemv[static_cast<int>(type)](
                  w.data(), rb, cols, rows, x.data() + static_cast<size_t>(j) * cols, alone.data());
              ASSERT_EQ(0, std::memcmp(alone.data(), got.data() + static_cast<size_t>(j) * rows,
                                       sizeof(float) * rows))
                  << IsaName(k->isa) << " " << tr.name;
            }
          }
          if (type != GgmlType::kBF16) continue;
          ref.gemm_bf16_dot(w.data(), rb, cols, rows, x.data(), n_tok, want.data(), rows);
          // bf16-rounded activations: within ~2^-8 relative of each product, averaged over cols.
          std::vector<float> exact(want.size());
          ref.gemm[static_cast<int>(type)](w.data(), rb, cols, rows, x.data(), n_tok, exact.data(),
                                           rows);
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_NEAR(want[i], exact[i], 0.01 * std::sqrt(static_cast<double>(cols)));
          for (const KernelTable* k : tables) {
            if (k->gemm_bf16_dot == nullptr) continue;
            k->gemm_bf16_dot(w.data(), rb, cols, rows, x.data(), n_tok, got.data(), rows);
            for (size_t i = 0; i < got.size(); ++i)
              ASSERT_NEAR(got[i], want[i], 1e-4 * (std::fabs(want[i]) + 1)) << "bf16 dot";
            for (int j = 0; j < n_tok; ++j) {
              k->gemm_bf16_dot(w.data(), rb, cols, rows, x.data() + static_cast<size_t>(j) * cols,
                               1, alone.data(), rows);
              ASSERT_EQ(0, std::memcmp(alone.data(), got.data() + static_cast<size_t>(j) * rows,
                                       sizeof(float) * rows))
                  << "bf16 dot";
            }
          }
        }
      }
    }
  }
  if (CpuHasAvx512Bf16()) {
    EXPECT_NE(GetKernels(Isa::kAvx512).gemm_bf16_dot, nullptr);
  }
  if (CpuHasArmBf16()) {  // every AArch64 level, on BFMLALB/T
    for (Isa isa : FastIsas()) EXPECT_NE(GetKernels(isa).gemm_bf16_dot, nullptr) << IsaName(isa);
  }
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// The prefill GEMM on bf16 tiles (AMX-BF16) against its reference for every type it has, with
// token counts around the 16-token tiles and odd group counts, through a slot -> row map; and
// each token's row bit-identical to the same token alone (its result does not depend on the
// others in the call).
TEST(Kernels, Bf16TileGemmMatchesTheReferenceAndIsBatchInvariant) {
  if (DetectIsa() != Isa::kAmx || !CpuHasAmxBf16()) GTEST_SKIP() << "no AMX-BF16 here";
  const KernelTable& k = GetKernels(Isa::kAmx);
  struct Case {
    GgmlType file, x16;
  };
  const Case cases[] = {
      {GgmlType::kQ4_0, GgmlType::kQ4_0X16},      {GgmlType::kQ8_0, GgmlType::kQ8_0X16},
      {GgmlType::kQ4_K, GgmlType::kQ4_KX16},      {GgmlType::kQ6_K, GgmlType::kQ6_KX16},
      {GgmlType::kPQ4_G64Z, GgmlType::kPQ4_G64Z},  // Paddock types:
      {GgmlType::kPQ4_G128, GgmlType::kPQ4_G128},  // quantized as they are
      {GgmlType::kPQ8_C, GgmlType::kPQ8_C}};
  int tested = 0;
  for (const Case& c : cases) {
    ASSERT_NE(k.gemm_bf16_tiles[static_cast<int>(c.x16)], nullptr) << TypeName(c.x16);
    for (int cols : {256, 768}) {
      for (int rows : {16, 48}) {
        const auto wf = Random(static_cast<size_t>(cols) * rows, 41 + cols + rows);
        const TypeTraits& tx = Traits(c.x16);
        const bool relaid = c.file != c.x16;
        const size_t rb = relaid ? RowBytes(Traits(c.file), cols) : RowBytes(tx, cols);
        std::string w(rb * rows, '\0');
        if (relaid) {
          std::string file(w.size(), '\0');
          Traits(c.file).from_float(wf.data(), file.data(), static_cast<int64_t>(cols) * rows);
          GgmlType to;
          X16RepackFn repack;
          ASSERT_TRUE(X16RelayoutOf(c.file, &to, &repack));
          ASSERT_EQ(to, c.x16);
          repack(file.data(), w.data(), rows, cols);
        } else {
          QuantizeX16(c.x16, wf.data(), rows, cols, nullptr, w.data());
        }
        // Per (token, row): the sum of |w x| bounds the rounding.
        std::vector<float> elem(static_cast<size_t>(cols) * rows);
        for (int r = 0; r < rows; ++r)
          for (int i = 0; i < cols; ++i)
            elem[static_cast<size_t>(r) * cols + i] =
                X16Element(c.x16, reinterpret_cast<const uint8_t*>(w.data()) + (r / 16) * 16 * rb,
                           cols, r % 16, i);
        for (int n_tok : {1, 15, 16, 17, 33, 50}) {
          const auto x = Random(static_cast<size_t>(cols) * n_tok, 43 + cols + n_tok);
          const int tiles = (n_tok + 15) / 16;
          std::vector<uint16_t> xa(static_cast<size_t>(tiles) * cols * 16, 0x7fc0);  // NaN pad
          std::vector<int32_t> out_rows(static_cast<size_t>(n_tok));
          for (int s = 0; s < n_tok; ++s) {  // slots in reverse token order
            const int tok = n_tok - 1 - s;
            k.pack_bf16_token(x.data() + static_cast<size_t>(tok) * cols, cols, s, xa.data());
            out_rows[static_cast<size_t>(s)] = tok;
          }
          const int64_t ldy = rows + 5;
          std::vector<float> want(static_cast<size_t>(ldy) * n_tok, -1.0f), got(want);
          RefGemmBf16Tiles(c.x16, w.data(), rb, cols, rows, x.data(), n_tok, want.data(), ldy);
          k.gemm_bf16_tiles[static_cast<int>(c.x16)](w.data(), rb, cols, rows, xa.data(), n_tok,
                                                     out_rows.data(), got.data(), ldy);
          for (int t = 0; t < n_tok; ++t) {
            for (int64_t r = 0; r < ldy; ++r) {
              const size_t i = static_cast<size_t>(t) * ldy + r;
              if (r >= rows) {
                ASSERT_EQ(got[i], -1.0f) << "wrote past the rows";
                continue;
              }
              double abs_sum = 0;
              for (int e = 0; e < cols; ++e)
                abs_sum += std::fabs(elem[static_cast<size_t>(r) * cols + e] *
                                     x[static_cast<size_t>(t) * cols + e]);
              // A weight may round to the neighbouring bf16 (its float is formed in another
              // order): 2^-8 of a term; fp32 sums: far less.
              ASSERT_NEAR(got[i], want[i], 4e-3 * abs_sum / std::sqrt(cols) + 1e-5 * abs_sum)
                  << TypeName(c.x16) << " cols " << cols << " rows " << rows << " tokens " << n_tok
                  << " token " << t << " row " << r;
            }
          }
          // Token t alone in slot 0 of its own call: bit-identical.
          std::vector<uint16_t> one(static_cast<size_t>(cols) * 16, 0);
          std::vector<float> alone(static_cast<size_t>(rows));
          for (int t : {0, n_tok / 2, n_tok - 1}) {
            k.pack_bf16_token(x.data() + static_cast<size_t>(t) * cols, cols, 0, one.data());
            k.gemm_bf16_tiles[static_cast<int>(c.x16)](w.data(), rb, cols, rows, one.data(), 1,
                                                       nullptr, alone.data(), rows);
            ASSERT_EQ(0, std::memcmp(alone.data(), got.data() + static_cast<size_t>(t) * ldy,
                                     sizeof(float) * rows))
                << TypeName(c.x16) << " token " << t << " of " << n_tok;
          }
          ++tested;
        }
      }
    }
  }
  EXPECT_EQ(tested, 7 * 2 * 2 * 6);
}

}  // namespace
}  // namespace paddock
