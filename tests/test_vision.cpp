// Vision encoders (vision/clip.h) and images (vision/image.h): each projector family against a
// naive reference forward written from the model definitions (plain loops in double, read
// straight from the GGUF), every ISA's kernels against the scalar table, the preprocessing
// against hand-computed pixels, decoding and its limits, and image embeddings in the
// transformer (an image row equal to a token's scaled embedding gives that token's logits;
// Gemma 3's bidirectional span).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "base/base64.h"
#include "base/cpu.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "formats/gguf.h"
#include "kernels/kernels.h"
#include "paddock/error.h"
#include "synth/synth.h"
#include "test_util.h"
#include "vision/clip.h"
#include "vision/image.h"

namespace paddock {
namespace {

// ---- a naive reference forward, independent of clip.cpp ----
struct Ref {
  GgufFile f;
  explicit Ref(const std::string& path) : f(GgufFile::Open(path)) {}
  std::vector<double> T(const std::string& name) const {
    const GgufTensor* t = f.FindTensor(name);
    if (t == nullptr) return {};
    std::vector<double> v(static_cast<size_t>(t->n_elements));
    for (int64_t i = 0; i < t->n_elements; ++i) {
      if (t->type == GgmlType::kF32) {
        float x;
        std::memcpy(&x, t->data + i * 4, 4);
        v[static_cast<size_t>(i)] = x;
      } else {
        uint16_t h;
        std::memcpy(&h, t->data + i * 2, 2);
        v[static_cast<size_t>(i)] = Fp16ToFp32(h);
      }
    }
    return v;
  }
  int I(const char* k, int def = 0) const { return static_cast<int>(f.GetInt(k).value_or(def)); }
};

using Mat = std::vector<std::vector<double>>;  // rows of vectors

// y = x W^T + b for W stored (out rows x in cols).
Mat Linear(const Mat& x, const std::vector<double>& w, const std::vector<double>& b, int out) {
  const size_t in = x[0].size();
  Mat y(x.size(), std::vector<double>(static_cast<size_t>(out)));
  for (size_t t = 0; t < x.size(); ++t)
    for (int o = 0; o < out; ++o) {
      double s = b.empty() ? 0 : b[static_cast<size_t>(o)];
      for (size_t i = 0; i < in; ++i) s += w[static_cast<size_t>(o) * in + i] * x[t][i];
      y[t][static_cast<size_t>(o)] = s;
    }
  return y;
}

void LayerNorm(Mat* x, const std::vector<double>& w, const std::vector<double>& b, double eps) {
  for (auto& r : *x) {
    double m = 0, v = 0;
    for (double e : r) m += e;
    m /= static_cast<double>(r.size());
    for (double e : r) v += (e - m) * (e - m);
    v /= static_cast<double>(r.size());
    for (size_t i = 0; i < r.size(); ++i)
      r[i] = (r[i] - m) / std::sqrt(v + eps) * w[i] + (b.empty() ? 0 : b[i]);
  }
}

double Gelu(double x) {
  return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

// The whole encoder + projector for one normalized tile (3 x S x S planar).
std::vector<float> RefEncode(const std::string& path, const std::vector<float>& tile) {
  Ref r(path);
  const int S = r.I("clip.vision.image_size"), P = r.I("clip.vision.patch_size");
  const int D = r.I("clip.vision.embedding_length"), F = r.I("clip.vision.feed_forward_length");
  const int L = r.I("clip.vision.block_count"), H = r.I("clip.vision.attention.head_count");
  const double eps = r.f.GetFloat("clip.vision.attention.layer_norm_epsilon").value_or(1e-6);
  const std::string proj(*r.f.GetString("clip.projector_type"));
  const bool gelu = r.f.GetBool("clip.use_gelu").value_or(false);
  const int side = S / P, np = side * side;
  const std::vector<double> cls = r.T("v.class_embd");
  const int c0 = cls.empty() ? 0 : 1, n = np + c0;
  // Patches: each a conv over its P x P x 3 pixels.
  const std::vector<double> pw = r.T("v.patch_embd.weight"), pb = r.T("v.patch_embd.bias");
  const std::vector<double> pos = r.T("v.position_embd.weight");
  Mat x(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(D)));
  for (int py = 0; py < side; ++py)
    for (int px = 0; px < side; ++px)
      for (int o = 0; o < D; ++o) {
        double s = pb.empty() ? 0 : pb[static_cast<size_t>(o)];
        for (int c = 0; c < 3; ++c)
          for (int ky = 0; ky < P; ++ky)
            for (int kx = 0; kx < P; ++kx)
              s += pw[static_cast<size_t>(((o * 3 + c) * P + ky) * P + kx)] *
                   tile[static_cast<size_t>(c * S * S + (py * P + ky) * S + px * P + kx)];
        x[static_cast<size_t>(c0 + py * side + px)][static_cast<size_t>(o)] = s;
      }
  if (c0) x[0] = cls;
  for (int t = 0; t < n; ++t)
    for (int d = 0; d < D; ++d)
      x[static_cast<size_t>(t)][static_cast<size_t>(d)] += pos[static_cast<size_t>(t * D + d)];
  if (!r.T("v.pre_ln.weight").empty())
    LayerNorm(&x, r.T("v.pre_ln.weight"), r.T("v.pre_ln.bias"), eps);
  const int hd = D / H;
  for (int l = 0; l < L; ++l) {
    const std::string p = "v.blk." + std::to_string(l) + ".";
    Mat h = x;
    LayerNorm(&h, r.T(p + "ln1.weight"), r.T(p + "ln1.bias"), eps);
    const Mat q = Linear(h, r.T(p + "attn_q.weight"), r.T(p + "attn_q.bias"), D);
    const Mat k = Linear(h, r.T(p + "attn_k.weight"), r.T(p + "attn_k.bias"), D);
    const Mat v = Linear(h, r.T(p + "attn_v.weight"), r.T(p + "attn_v.bias"), D);
    Mat a(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(D)));
    for (int head = 0; head < H; ++head)
      for (int i = 0; i < n; ++i) {
        std::vector<double> s(static_cast<size_t>(n));
        double mx = -1e300;
        for (int j = 0; j < n; ++j) {
          double d = 0;
          for (int e = 0; e < hd; ++e)
            d += q[static_cast<size_t>(i)][static_cast<size_t>(head * hd + e)] *
                 k[static_cast<size_t>(j)][static_cast<size_t>(head * hd + e)];
          s[static_cast<size_t>(j)] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        double z = 0;
        for (double& e : s) z += (e = std::exp(e - mx));
        for (int e = 0; e < hd; ++e) {
          double o = 0;
          for (int j = 0; j < n; ++j)
            o += s[static_cast<size_t>(j)] / z *
                 v[static_cast<size_t>(j)][static_cast<size_t>(head * hd + e)];
          a[static_cast<size_t>(i)][static_cast<size_t>(head * hd + e)] = o;
        }
      }
    const Mat o = Linear(a, r.T(p + "attn_out.weight"), r.T(p + "attn_out.bias"), D);
    for (int t = 0; t < n; ++t)
      for (int d = 0; d < D; ++d)
        x[static_cast<size_t>(t)][static_cast<size_t>(d)] +=
            o[static_cast<size_t>(t)][static_cast<size_t>(d)];
    h = x;
    LayerNorm(&h, r.T(p + "ln2.weight"), r.T(p + "ln2.bias"), eps);
    Mat u = Linear(h, r.T(p + "ffn_up.weight"), r.T(p + "ffn_up.bias"), F);
    for (auto& row : u)
      for (double& e : row) e = gelu ? Gelu(e) : e / (1 + std::exp(-1.702 * e));
    const Mat dn = Linear(u, r.T(p + "ffn_down.weight"), r.T(p + "ffn_down.bias"), D);
    for (int t = 0; t < n; ++t)
      for (int d = 0; d < D; ++d)
        x[static_cast<size_t>(t)][static_cast<size_t>(d)] +=
            dn[static_cast<size_t>(t)][static_cast<size_t>(d)];
  }
  if (!r.T("v.post_ln.weight").empty())
    LayerNorm(&x, r.T("v.post_ln.weight"), r.T("v.post_ln.bias"), eps);
  Mat pt(x.begin() + c0, x.end());  // the patches (class token dropped)
  Mat out;
  if (proj == "mlp") {
    const std::vector<double> w0 = r.T("mm.0.weight");
    const int hid = static_cast<int>(r.T("mm.0.bias").size());
    Mat hh = Linear(pt, w0, r.T("mm.0.bias"), hid);
    for (auto& row : hh)
      for (double& e : row) e = Gelu(e);
    out =
        Linear(hh, r.T("mm.2.weight"), r.T("mm.2.bias"), static_cast<int>(r.T("mm.2.bias").size()));
  } else if (proj == "gemma3") {
    const int m = r.I("clip.vision.projector.scale_factor", 4), o = side / m;
    const std::vector<double> sw = r.T("mm.soft_emb_norm.weight"),
                              W = r.T("mm.input_projection.weight");
    const int Tn = static_cast<int>(W.size()) / D;
    for (int oy = 0; oy < o; ++oy)
      for (int ox = 0; ox < o; ++ox) {
        std::vector<double> avg(static_cast<size_t>(D));
        for (int dy = 0; dy < m; ++dy)
          for (int dx = 0; dx < m; ++dx)
            for (int d = 0; d < D; ++d)
              avg[static_cast<size_t>(d)] +=
                  pt[static_cast<size_t>((oy * m + dy) * side + ox * m + dx)]
                    [static_cast<size_t>(d)] /
                  (m * m);
        double ss = 0;
        for (double e : avg) ss += e * e;
        const double inv = 1 / std::sqrt(ss / D + eps);
        std::vector<double> y(static_cast<size_t>(Tn));
        for (int j = 0; j < Tn; ++j)
          for (int d = 0; d < D; ++d)
            y[static_cast<size_t>(j)] += avg[static_cast<size_t>(d)] * inv *
                                         sw[static_cast<size_t>(d)] *
                                         W[static_cast<size_t>(d * Tn + j)];
        out.push_back(y);
      }
  } else {  // idefics3: Idefics3's pixel_shuffle, then fc
    const int s = r.I("clip.vision.projector.scale_factor", 2), o = side / s;
    const std::vector<double> W = r.T("mm.model.fc.weight");
    Mat sh;
    for (int Y = 0; Y < o; ++Y)
      for (int X = 0; X < o; ++X) {
        std::vector<double> f;
        for (int dy = 0; dy < s; ++dy)
          for (int dx = 0; dx < s; ++dx)
            for (int d = 0; d < D; ++d)
              f.push_back(pt[static_cast<size_t>((Y * s + dy) * side + X * s + dx)]
                            [static_cast<size_t>(d)]);
        sh.push_back(f);
      }
    out = Linear(sh, W, {}, static_cast<int>(W.size() / (static_cast<size_t>(D) * s * s)));
  }
  std::vector<float> flat;
  for (const auto& row : out)
    for (double e : row) flat.push_back(static_cast<float>(e));
  return flat;
}

std::string Projector(const std::string& preset, GgmlType type = GgmlType::kF32) {
  SynthSpec t;
  SynthVisionSpec v;
  EXPECT_TRUE(SynthVisionPreset(preset, &t, &v));
  v.type = type;
  const std::string p = test::TempPath(preset + "-" + TypeName(type) + "-mm.gguf");
  WriteSyntheticMmproj(v, p);
  return p;
}

RgbImage Pattern(int w, int h, int seed) {
  RgbImage img;
  img.width = w;
  img.height = h;
  img.rgb.resize(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        img.rgb[(static_cast<size_t>(y) * w + x) * 3 + c] =
            static_cast<uint8_t>((x * (4 + seed) + y * 2 + c * 60 + seed * 31) % 256);
  return img;
}

class Families : public ::testing::TestWithParam<const char*> {};

TEST_P(Families, EncoderMatchesTheNaiveReference) {
  const std::string path = Projector(GetParam());
  auto m = VisionModel::Load(path);
  const PixelTiles px = m->Preprocess(Pattern(m->config().image_size, m->config().image_size, 1));
  ThreadPool pool(2);
  const int n = m->config().TokensPerTile() * m->config().text_dim;
  for (const Isa isa : {Isa::kScalar, DetectIsa()}) {
    std::vector<float> got(static_cast<size_t>(n));
    m->Encode(px.tiles.back().data(), GetKernels(isa), pool, got.data());
    const std::vector<float> want = RefEncode(path, px.tiles.back());
    ASSERT_EQ(want.size(), got.size());
    EXPECT_LT(test::RelErr(got, want), 2e-4) << GetParam() << " isa " << static_cast<int>(isa);
  }
}

TEST_P(Families, EveryIsaMatchesTheScalarTableAndStepsMatchOneCall) {
  for (const GgmlType type : {GgmlType::kF16, GgmlType::kQ8_0}) {
    auto m = VisionModel::Load(Projector(GetParam(), type));
    const PixelTiles px = m->Preprocess(Pattern(70, 50, 2));
    ThreadPool pool(2);
    const size_t n = static_cast<size_t>(m->config().TokensPerTile()) * m->config().text_dim;
    std::vector<float> ref(n);
    m->Encode(px.tiles[0].data(), GetKernels(Isa::kScalar), pool, ref.data());
    for (int i = 1; i <= static_cast<int>(DetectIsa()); ++i) {
      std::vector<float> got(n);
      m->Encode(px.tiles[0].data(), GetKernels(static_cast<Isa>(i)), pool, got.data());
      EXPECT_LT(test::RelErr(got, ref), type == GgmlType::kQ8_0 ? 2e-2 : 1e-4)
          << GetParam() << " isa " << i;
    }
    // Re-laid for the integer GEMMs (Q8_0) or as BF16 (F16): each table against the scalar one.
    auto relaid = VisionModel::Load(Projector(GetParam(), type));
    if (type == GgmlType::kQ8_0) {
      relaid->RelayoutQuantized();
    } else {
      relaid->SetBf16Weights();
    }
    std::vector<float> rref(n);
    relaid->Encode(px.tiles[0].data(), GetKernels(Isa::kScalar), pool, rref.data());
    EXPECT_LT(test::RelErr(rref, ref), 2e-2) << GetParam();
    for (int i = 1; i <= static_cast<int>(DetectIsa()); ++i) {
      std::vector<float> got(n);
      relaid->Encode(px.tiles[0].data(), GetKernels(static_cast<Isa>(i)), pool, got.data());
      EXPECT_LT(test::RelErr(got, rref), type == GgmlType::kQ8_0 ? 1e-3 : 2e-2)
          << GetParam() << " relaid isa " << i;
    }
    // Stepped one layer at a time (the service's image steps): the same floats.
    const KernelTable& k = GetKernels(DetectIsa());
    std::vector<float> one(n), stepped(n);
    m->Encode(px.tiles[0].data(), k, pool, one.data());
    m->Begin(px.tiles[0].data(), k, pool);
    int steps = 0;
    while (!m->Step(1, stepped.data())) ++steps;
    EXPECT_EQ(steps + 1, 4 * m->config().n_layers);  // quarter layers
    EXPECT_EQ(one, stepped);
  }
}

INSTANTIATE_TEST_SUITE_P(Vision, Families,
                         ::testing::Values("tiny-llava", "tiny-gemma3", "tiny-smolvlm"));

TEST(VisionImage, ResizeMatchesHandComputedPixels) {
  RgbImage a;
  a.width = 2;
  a.height = 2;
  a.rgb = {0, 0, 0, 100, 100, 100, 200, 200, 200, 40, 40, 40};
  // 2x2 -> 1x1: the triangle filter widened to 2 pixels averages all four equally.
  RgbImage one = Resize(a, 1, 1);
  EXPECT_EQ(one.rgb[0], 85);  // (0 + 100 + 200 + 40) / 4 = 85
  // 2x1 -> 4x1 (upsampling, edges clamped): centers at -0.25, 0.25, 0.75, 1.25.
  RgbImage row;
  row.width = 2;
  row.height = 1;
  row.rgb = {0, 0, 0, 100, 100, 100};
  RgbImage up = Resize(row, 4, 1);
  const uint8_t want[4] = {0, 25, 75, 100};
  for (int x = 0; x < 4; ++x) EXPECT_EQ(up.rgb[static_cast<size_t>(x) * 3], want[x]) << x;
  // Padded fit: 4x2 into 4x4 keeps 4x2 in the middle rows, the rest the pad color.
  RgbImage wide;
  wide.width = 4;
  wide.height = 2;
  wide.rgb.assign(24, 9);
  const uint8_t pad[3] = {1, 2, 3};
  RgbImage sq = ResizePadded(wide, 4, 4, pad);
  EXPECT_EQ(sq.At(0, 0)[0], 1);
  EXPECT_EQ(sq.At(0, 0)[2], 3);
  EXPECT_EQ(sq.At(2, 1)[0], 9);
  EXPECT_EQ(sq.At(2, 2)[1], 9);
  EXPECT_EQ(sq.At(3, 3)[1], 2);
}

TEST(VisionImage, NormalizeAndTileOrder) {
  RgbImage px;
  px.width = 1;
  px.height = 1;
  px.rgb = {255, 0, 51};
  const float mean[3] = {0.5f, 0.5f, 0.2f}, sd[3] = {0.5f, 0.25f, 0.1f};
  float out[3];
  Normalize(px, mean, sd, out);
  EXPECT_FLOAT_EQ(out[0], 1.0f);    // (1 - 0.5) / 0.5
  EXPECT_FLOAT_EQ(out[1], -2.0f);   // (0 - 0.5) / 0.25
  EXPECT_NEAR(out[2], 0.0f, 1e-6);  // (0.2 - 0.2) / 0.1
  // SmolVLM: a 64x32 image (longest edge 64, tiles of 32): 2 x 1 tiles, left then right, then
  // the overview; tile 0 is the left half of the image as is (no resize at this size).
  auto m = VisionModel::Load(Projector("tiny-smolvlm"));
  const RgbImage img = Pattern(64, 32, 3);
  const PixelTiles t = m->Preprocess(img);
  ASSERT_EQ(t.tiles.size(), 3u);
  EXPECT_EQ(t.grid_x, 2);
  EXPECT_EQ(t.grid_y, 1);
  const VisionConfig& c = m->config();
  for (int x : {0, 31}) {
    const float want = (img.At(32 + x, 5)[1] / 255.0f - c.mean[1]) / c.std[1];
    EXPECT_FLOAT_EQ(t.tiles[1][static_cast<size_t>(32 * 32 + 5 * 32 + x)], want) << x;
  }
}

// PNG's chunk CRC (CRC-32 of the type and data), so the test's header is one libpng accepts.
uint32_t Crc32(const std::string& bytes) {
  uint32_t c = 0xffffffffu;
  for (const unsigned char b : bytes) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return c ^ 0xffffffffu;
}

TEST(VisionImage, DecodeLimitsAndUrls) {
  // A valid PNG header declaring 100,000 x 100,000 pixels: refused by the limit, before any
  // pixel is allocated.
  const std::string ihdr =
      std::string("IHDR") + std::string("\x00\x01\x86\xa0\x00\x01\x86\xa0\x08\x02\x00\x00\x00", 13);
  const uint32_t crc = Crc32(ihdr);
  std::string bomb = std::string("\x89PNG\r\n\x1a\n", 8) + std::string("\0\0\0\x0d", 4) + ihdr;
  for (int k = 3; k >= 0; --k) bomb += static_cast<char>((crc >> (8 * k)) & 0xff);
  bomb += std::string("\0\0\0\0IDAT\x35\xaf\x06\x1e", 12);  // (libpng reads to the data)
  try {
    DecodeImage(bomb);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("100000 x 100000 pixels; the limit"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(DecodeImage("GIF89a"), Error);
  EXPECT_THROW(DecodeImage(std::string("\xff\xd8\xff\xe0", 4)), Error);
  EXPECT_THROW(DecodeImage("RIFF\x10\0\0\0WEBPVP8 "), Error);
  EXPECT_THROW(DecodeImage(""), Error);
  EXPECT_THROW(ImageBytesFromUrl("https://example.com/a.png", 1 << 20), Error);
  EXPECT_THROW(ImageBytesFromUrl("data:text/plain;base64,aGk=", 1 << 20), Error);
  EXPECT_THROW(ImageBytesFromUrl("data:image/png,raw", 1 << 20), Error);
  EXPECT_THROW(ImageBytesFromUrl("file:///etc/passwd", 1 << 20), Error);
  EXPECT_EQ(ImageBytesFromUrl("data:image/png;base64,aGVsbG8=", 1 << 20), "hello");
  EXPECT_EQ(ImageBytesFromBase64("aGVsbG8", 1 << 20), "hello");
  std::string out;
  EXPECT_FALSE(Base64Decode("aGVs!G8=", &out));
  EXPECT_FALSE(Base64Decode("a", &out));
  EXPECT_TRUE(Base64Decode("aGVsbG8gd29ybGQ=", &out));
  EXPECT_EQ(out, "hello world");
  EXPECT_NE(PixelHash(Pattern(8, 8, 1)), PixelHash(Pattern(8, 8, 2)));
  EXPECT_EQ(PixelHash(Pattern(8, 8, 1)), PixelHash(Pattern(8, 8, 1)));
}

TEST(VisionModelLoad, RefusesWhatItCannotRun) {
  SynthSpec t;
  const std::string text = test::TempPath("vision_text.gguf");
  WriteSyntheticModel(t, text);
  try {
    VisionModel::Load(text);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a vision projector"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace paddock
