// vision/clip.cpp: the mmproj loader, preprocessing, and the ViT + projector forward pass.
#include "vision/clip.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>

#include "base/half.h"
#include "base/strings.h"
#include "base/thread_pool.h"
#include "formats/gguf.h"
#include "kernels/kernels.h"
#include "paddock/error.h"

namespace paddock {

const char* ProjectorName(Projector p) {
  switch (p) {
    case Projector::kMlp:
      return "mlp";
    case Projector::kGemma3:
      return "gemma3";
    case Projector::kIdefics3:
      return "idefics3";
  }
  return "?";
}

int VisionConfig::TokensPerTile() const {
  const int side = patches_side();
  switch (projector) {
    case Projector::kMlp:
      return side * side;
    case Projector::kGemma3:
      return (side / merge) * (side / merge);
    case Projector::kIdefics3: {
      const int s = (side + merge - 1) / merge;
      return s * s;
    }
  }
  return 0;
}

namespace {

// A weight matrix: rows x cols in its file encoding (in place), or expanded to F32 at load for
// types without a float or integer GEMM path here.
struct Mat {
  GgmlType type = GgmlType::kF32;
  int64_t rows = 0, cols = 0;
  size_t row_bytes = 0;
  const uint8_t* data = nullptr;
  std::vector<float> owned;
  std::vector<uint16_t> owned16;  // re-encoded as BF16 (SetBf16Weights)
  explicit operator bool() const { return data != nullptr; }
};

// The matrix as BF16 (from F32 or F16; others unchanged): what the BF16 dot product reads.
void ToBf16(Mat* m) {
  if (!*m || (m->type != GgmlType::kF32 && m->type != GgmlType::kF16)) return;
  std::vector<uint16_t> b(static_cast<size_t>(m->rows * m->cols));
  for (int64_t r = 0; r < m->rows; ++r) {
    const uint8_t* row = m->data + static_cast<size_t>(r) * m->row_bytes;
    for (int64_t c = 0; c < m->cols; ++c) {
      float v;
      if (m->type == GgmlType::kF32) {
        std::memcpy(&v, row + c * 4, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, row + c * 2, 2);
        v = Fp16ToFp32(h);
      }
      b[static_cast<size_t>(r * m->cols + c)] = Fp32ToBf16(v);
    }
  }
  m->owned.clear();
  m->owned.shrink_to_fit();
  m->owned16 = std::move(b);
  m->type = GgmlType::kBF16;
  m->data = reinterpret_cast<const uint8_t*>(m->owned16.data());
  m->row_bytes = static_cast<size_t>(m->cols) * 2;
}

constexpr int kRowBlock = 64;   // weight rows per matmul task
constexpr int kTokBlock = 256;  // tokens per matmul task

}  // namespace

struct VisionModel::Impl {
  GgufFile file;
  std::string path;
  VisionConfig cfg;
  size_t bytes = 0;
  // Weights.
  Mat patch;                                    // (dim, 3 * p * p)
  std::vector<float> patch_b, class_embd, pos;  // pos: (n_pos, dim)
  std::vector<float> pre_w, pre_b, post_w, post_b;
  struct Layer {
    std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b;
    Mat q, k, v, o, up, down, gate;
    std::vector<float> q_b, k_b, v_b, o_b, up_b, down_b, gate_b;
  };
  std::vector<Layer> layers;
  Mat mm0, mm2;  // mlp
  std::vector<float> mm0_b, mm2_b;
  Mat proj;                   // gemma3 (transposed to text_dim x dim), idefics3 fc
  std::vector<float> soft_w;  // gemma3
  // Scratch (planned at load).
  int n_pos = 0, n_patches = 0;
  std::vector<float> x, h, q, k, v, att, u, g, pix, tmp;
  std::vector<int8_t> qs;
  std::vector<float> qd, qds;
  std::vector<float> attn_scratch;
  // A stepped encode.
  const KernelTable* kt = nullptr;
  ThreadPool* pool = nullptr;
  int next_unit = 0;  // the next phase to run: layer * 4 + phase

  // Load: the metadata, the encoder's tensors, the projector's, the scratch for one tile.
  void Load();
  void LoadConfig();
  void LoadFeatures();
  void LoadEncoder();
  void LoadLayer(int l);
  void LoadProjector();
  void AllocScratch();
  int MetaInt(const char* key, bool required, int def) const;
  Mat GetMat(const std::string& name, bool required, int64_t cols = -1);
  std::vector<float> GetVec(const std::string& name, bool required, int64_t n);
  void MatMul(const Mat& w, const float* in, int n, float* out, const std::vector<float>* bias);
  void LayerNorm(float* rows, int n, const std::vector<float>& w, const std::vector<float>& b);
  void RunPhase(int l, int phase);
  void Embed(const float* tile);
  void Project(float* out);
};

namespace {

std::vector<float> ToFloats(const GgufTensor& t) {
  const TypeTraits* tr = FindTypeTraits(static_cast<uint32_t>(t.type));
  if (tr == nullptr || tr->to_float == nullptr)
    Fail("tensor '%s' has a type Paddock cannot read", t.name.c_str());
  std::vector<float> v(static_cast<size_t>(t.n_elements));
  const int64_t rows = t.n_elements / t.ne[0];
  const size_t row_bytes = t.nbytes / static_cast<size_t>(rows);
  for (int64_t r = 0; r < rows; ++r)
    tr->to_float(t.data + static_cast<size_t>(r) * row_bytes, v.data() + r * t.ne[0], t.ne[0]);
  return v;
}

}  // namespace

Mat VisionModel::Impl::GetMat(const std::string& name, bool required, int64_t cols) {
  Mat m;
  const GgufTensor* t = file.FindTensor(name);
  if (t == nullptr) {
    if (required) Fail("%s: the projector file lacks tensor '%s'", path.c_str(), name.c_str());
    return m;
  }
  m.cols = cols > 0 ? cols : t->ne[0];
  if (t->n_elements % m.cols != 0)
    Fail("%s: tensor '%s' cannot be read as rows of %lld", path.c_str(), name.c_str(),
         static_cast<long long>(m.cols));
  m.rows = t->n_elements / m.cols;
  bytes += t->nbytes;
  const bool direct = t->type == GgmlType::kF32 || t->type == GgmlType::kF16 ||
                      t->type == GgmlType::kBF16 || t->type == GgmlType::kQ8_0;
  if (direct && (t->type != GgmlType::kQ8_0 || m.cols % 32 == 0) && cols <= 0) {
    m.type = t->type;
    m.data = t->data;
    m.row_bytes = t->nbytes / static_cast<size_t>(m.rows);
    return m;
  }
  m.owned = ToFloats(*t);  // other types: expanded once
  m.type = GgmlType::kF32;
  m.data = reinterpret_cast<const uint8_t*>(m.owned.data());
  m.row_bytes = static_cast<size_t>(m.cols) * sizeof(float);
  return m;
}

std::vector<float> VisionModel::Impl::GetVec(const std::string& name, bool required, int64_t n) {
  const GgufTensor* t = file.FindTensor(name);
  if (t == nullptr) {
    if (required) Fail("%s: the projector file lacks tensor '%s'", path.c_str(), name.c_str());
    return {};
  }
  if (n >= 0 && t->n_elements != n)
    Fail("%s: tensor '%s' has %lld elements, expected %lld", path.c_str(), name.c_str(),
         static_cast<long long>(t->n_elements), static_cast<long long>(n));
  bytes += t->nbytes;
  return ToFloats(*t);
}

// A metadata integer in [0, 2^24] (absent: def, or an error when required).
int VisionModel::Impl::MetaInt(const char* key, bool required, int def) const {
  const auto v = file.GetInt(key);
  if (!v) {
    if (required) Fail("%s: the projector's metadata lacks '%s'", path.c_str(), key);
    return def;
  }
  if (*v < 0 || *v > (1 << 24))
    Fail("%s: '%s' = %lld is out of range", path.c_str(), key, static_cast<long long>(*v));
  return static_cast<int>(*v);
}

void VisionModel::Impl::Load() {
  LoadConfig();
  LoadFeatures();
  LoadEncoder();
  LoadProjector();
  AllocScratch();
}

// The encoder's shape, normalization and projector type from the clip.* metadata.
void VisionModel::Impl::LoadConfig() {
  const auto u32 = [&](const char* key, bool required, int def) {
    return MetaInt(key, required, def);
  };
  if (auto v = file.GetBool("clip.has_vision_encoder"); v && !*v)
    Fail("%s has no vision encoder (an audio projector?)", path.c_str());
  if (!file.Find("clip.vision.image_size")) {
    auto arch = file.GetString("general.architecture");
    Fail("%s is not a vision projector (mmproj) file: it has no 'clip.vision.*' metadata%s%s",
         path.c_str(), arch ? "; its architecture is " : "",
         arch ? std::string(*arch).c_str() : "");
  }
  auto ptype = file.GetString("clip.vision.projector_type");
  if (!ptype) ptype = file.GetString("clip.projector_type");
  const std::string pt = ptype ? std::string(*ptype) : "mlp";
  if (pt == "mlp")
    cfg.projector = Projector::kMlp;
  else if (pt == "gemma3")
    cfg.projector = Projector::kGemma3;
  else if (pt == "idefics3")
    cfg.projector = Projector::kIdefics3;
  else
    Fail(
        "%s: projector type '%s' is not supported (supported: mlp (LLaVA), gemma3, idefics3 "
        "(SmolVLM))",
        path.c_str(), pt.c_str());
  cfg.image_size = u32("clip.vision.image_size", true, 0);
  cfg.patch_size = u32("clip.vision.patch_size", true, 0);
  cfg.dim = u32("clip.vision.embedding_length", true, 0);
  cfg.ffn_dim = u32("clip.vision.feed_forward_length", true, 0);
  cfg.n_layers = u32("clip.vision.block_count", true, 0);
  cfg.n_heads = u32("clip.vision.attention.head_count", true, 0);
  cfg.eps =
      static_cast<float>(file.GetFloat("clip.vision.attention.layer_norm_epsilon").value_or(1e-6));
  if (cfg.patch_size <= 0 || cfg.image_size < cfg.patch_size || cfg.image_size % cfg.patch_size)
    Fail("%s: image size %d is not a multiple of the patch size %d", path.c_str(), cfg.image_size,
         cfg.patch_size);
  if (cfg.dim <= 0 || cfg.n_heads <= 0 || cfg.dim % cfg.n_heads || cfg.n_layers <= 0 ||
      cfg.ffn_dim <= 0)
    Fail("%s: impossible encoder shape (dim %d, heads %d, layers %d, ffn %d)", path.c_str(),
         cfg.dim, cfg.n_heads, cfg.n_layers, cfg.ffn_dim);
  if (cfg.image_size > 4096) Fail("%s: image size %d is too large", path.c_str(), cfg.image_size);
  const std::vector<float> mean = file.GetFloatArray("clip.vision.image_mean");
  const std::vector<float> sd = file.GetFloatArray("clip.vision.image_std");
  if (mean.size() != 3 || sd.size() != 3)
    Fail("%s: clip.vision.image_mean and image_std must hold 3 values each", path.c_str());
  for (int c = 0; c < 3; ++c) {
    cfg.mean[c] = mean[static_cast<size_t>(c)];
    cfg.std[c] = sd[static_cast<size_t>(c)];
    if (!(std::fabs(cfg.std[c]) > 1e-6f)) Fail("%s: image_std[%d] is zero", path.c_str(), c);
  }
}

// The activation, the feature layer (the encoder cut there) and the projector's pooling.
void VisionModel::Impl::LoadFeatures() {
  const auto u32 = [&](const char* key, bool required, int def) {
    return MetaInt(key, required, def);
  };
  const bool gelu = file.GetBool("clip.use_gelu").value_or(false);
  const bool silu = file.GetBool("clip.use_silu").value_or(false);
  if (gelu && silu) Fail("%s: both clip.use_gelu and clip.use_silu are set", path.c_str());
  cfg.act = gelu ? VisionConfig::Act::kGelu
                 : (silu ? VisionConfig::Act::kSilu : VisionConfig::Act::kGeluQuick);
  const std::vector<int64_t> feature = file.GetIntArray("clip.vision.feature_layer");
  if (!feature.empty()) {  // hidden state k = the output of layer k - 1 (0: the embeddings)
    const int64_t deepest = *std::max_element(feature.begin(), feature.end());
    if (feature.size() > 1)
      Fail("%s: several vision feature layers (Granite Vision) are not supported", path.c_str());
    if (deepest < 1 || deepest > cfg.n_layers)
      Fail("%s: feature layer %lld outside 1..%d", path.c_str(), static_cast<long long>(deepest),
           cfg.n_layers);
    cfg.n_layers = static_cast<int>(deepest);
  }
  const int side = cfg.patches_side();
  if (cfg.projector == Projector::kGemma3) {
    cfg.merge = u32("clip.vision.projector.scale_factor", false, 4);
    if (cfg.merge <= 0 || side % cfg.merge)
      Fail("%s: the %d x %d patch grid does not pool by %d", path.c_str(), side, side, cfg.merge);
  } else if (cfg.projector == Projector::kIdefics3) {
    cfg.merge = u32("clip.vision.projector.scale_factor", false, 2);
    cfg.longest_edge = u32("clip.vision.preproc_image_size", false, cfg.image_size);
    if (cfg.merge < 2) Fail("%s: pixel-shuffle scale factor %d", path.c_str(), cfg.merge);
    if (cfg.longest_edge < cfg.image_size) cfg.longest_edge = cfg.image_size;
  }
}

// The patch and position embeddings, the pre/post norms and every layer's tensors.
void VisionModel::Impl::LoadEncoder() {
  const int D = cfg.dim, P = cfg.patch_size;
  const int side = cfg.patches_side();
  patch = GetMat("v.patch_embd.weight", true, 3 * P * P);
  if (patch.rows != D)
    Fail("%s: v.patch_embd.weight has %lld outputs, expected %d", path.c_str(),
         static_cast<long long>(patch.rows), D);
  patch_b = GetVec("v.patch_embd.bias", false, D);
  class_embd = GetVec("v.class_embd", false, D);
  cfg.class_token = !class_embd.empty();
  n_patches = side * side;
  n_pos = n_patches + (cfg.class_token ? 1 : 0);
  pos = GetVec("v.position_embd.weight", true, static_cast<int64_t>(n_pos) * D);
  pre_w = GetVec("v.pre_ln.weight", false, D);
  pre_b = GetVec("v.pre_ln.bias", false, D);
  post_w = GetVec("v.post_ln.weight", false, D);
  post_b = GetVec("v.post_ln.bias", false, D);
  layers.resize(static_cast<size_t>(cfg.n_layers));
  for (int l = 0; l < cfg.n_layers; ++l) LoadLayer(l);
}

void VisionModel::Impl::LoadLayer(int l) {
  const int D = cfg.dim;
  Layer& L = layers[static_cast<size_t>(l)];
  const auto n = [&](const char* what) { return StrFormat("v.blk.%d.%s", l, what); };
  L.ln1_w = GetVec(n("ln1.weight"), true, D);
  L.ln1_b = GetVec(n("ln1.bias"), false, D);
  L.ln2_w = GetVec(n("ln2.weight"), true, D);
  L.ln2_b = GetVec(n("ln2.bias"), false, D);
  L.q = GetMat(n("attn_q.weight"), true);
  L.k = GetMat(n("attn_k.weight"), true);
  L.v = GetMat(n("attn_v.weight"), true);
  L.o = GetMat(n("attn_out.weight"), true);
  for (const Mat* m : {&L.q, &L.k, &L.v, &L.o})
    if (m->rows != D || m->cols != D)
      Fail("%s: layer %d's attention matrices must be %d x %d", path.c_str(), l, D, D);
  L.q_b = GetVec(n("attn_q.bias"), false, D);
  L.k_b = GetVec(n("attn_k.bias"), false, D);
  L.v_b = GetVec(n("attn_v.bias"), false, D);
  L.o_b = GetVec(n("attn_out.bias"), false, D);
  L.up = GetMat(n("ffn_up.weight"), true);
  L.down = GetMat(n("ffn_down.weight"), true);
  L.gate = GetMat(n("ffn_gate.weight"), false);
  L.up_b = GetVec(n("ffn_up.bias"), false, -1);
  L.down_b = GetVec(n("ffn_down.bias"), false, -1);
  L.gate_b = GetVec(n("ffn_gate.bias"), false, -1);
  if (L.down.cols == D && L.up.cols != D) {  // older converters swapped the names
    std::swap(L.up, L.down);
    std::swap(L.up_b, L.down_b);
  }
  if (L.up.cols != D || L.up.rows != cfg.ffn_dim || L.down.rows != D || L.down.cols != cfg.ffn_dim)
    Fail("%s: layer %d's FFN is not %d -> %d -> %d", path.c_str(), l, D, cfg.ffn_dim, D);
}

// The projector's tensors (MLP, Gemma 3's pooled projection, SmolVLM's pixel shuffle); the
// text model's width they give.
void VisionModel::Impl::LoadProjector() {
  const int D = cfg.dim;
  switch (cfg.projector) {
    case Projector::kMlp:
      mm0 = GetMat("mm.0.weight", true);
      mm0_b = GetVec("mm.0.bias", false, mm0.rows);
      mm2 = GetMat("mm.2.weight", true);
      mm2_b = GetVec("mm.2.bias", false, mm2.rows);
      if (mm0.cols != D || mm2.cols != mm0.rows)
        Fail("%s: the MLP projector's shapes do not chain (%lld -> %lld, %lld -> %lld)",
             path.c_str(), static_cast<long long>(mm0.cols), static_cast<long long>(mm0.rows),
             static_cast<long long>(mm2.cols), static_cast<long long>(mm2.rows));
      if (file.FindTensor("mm.3.weight") != nullptr)
        Fail("%s: the normalized MLP projector (Yi-VL) is not supported", path.c_str());
      cfg.text_dim = static_cast<int>(mm2.rows);
      break;
    case Projector::kGemma3: {
      const GgufTensor* t = file.FindTensor("mm.input_projection.weight");
      if (t == nullptr)
        Fail("%s: the projector file lacks 'mm.input_projection.weight'", path.c_str());
      if (t->ne[1] != D)
        Fail("%s: mm.input_projection.weight is not (%d x text dim)", path.c_str(), D);
      const std::vector<float> w = GetVec("mm.input_projection.weight", true, -1);
      const int64_t T = t->ne[0];  // stored (dim rows, text cols): x @ W
      proj.owned.resize(w.size());
      for (int64_t i = 0; i < D; ++i)
        for (int64_t j = 0; j < T; ++j)
          proj.owned[static_cast<size_t>(j * D + i)] = w[static_cast<size_t>(i * T + j)];
      proj.type = GgmlType::kF32;
      proj.rows = T;
      proj.cols = D;
      proj.row_bytes = static_cast<size_t>(D) * sizeof(float);
      proj.data = reinterpret_cast<const uint8_t*>(proj.owned.data());
      soft_w = GetVec("mm.soft_emb_norm.weight", true, D);
      cfg.text_dim = static_cast<int>(T);
      break;
    }
    case Projector::kIdefics3:
      proj = GetMat("mm.model.fc.weight", true);
      if (proj.cols != static_cast<int64_t>(D) * cfg.merge * cfg.merge)
        Fail("%s: mm.model.fc.weight takes %lld inputs, expected %d (dim x scale factor^2)",
             path.c_str(), static_cast<long long>(proj.cols), D * cfg.merge * cfg.merge);
      cfg.text_dim = static_cast<int>(proj.rows);
      break;
  }
}

// Scratch for one tile.
void VisionModel::Impl::AllocScratch() {
  const int D = cfg.dim, P = cfg.patch_size;
  const size_t np = static_cast<size_t>(n_pos), d = static_cast<size_t>(D);
  for (auto* b : {&x, &h, &q, &k, &v, &att}) b->assign(np * d, 0);
  size_t wide = static_cast<size_t>(cfg.ffn_dim);
  if (cfg.projector == Projector::kMlp) wide = std::max(wide, static_cast<size_t>(mm0.rows));
  if (cfg.projector == Projector::kIdefics3) wide = std::max(wide, d * cfg.merge * cfg.merge);
  u.assign(np * wide, 0);
  if (std::any_of(layers.begin(), layers.end(), [](const Layer& L) { return bool(L.gate); }))
    g.assign(np * wide, 0);
  pix.assign(static_cast<size_t>(n_patches) * 3 * P * P, 0);
  tmp.assign(np * std::max(wide, d), 0);
  const size_t qcols = std::max({wide, d, static_cast<size_t>(3 * P * P)});
  qs.assign(np * (qcols + 32), 0);
  qd.assign(np * (qcols / 32 + 2), 0);
  qds.assign(qd.size(), 0);
}

// out (n x w.rows) = in (n x w.cols) W^T (+ bias): tasks over row blocks x token blocks.
void VisionModel::Impl::MatMul(const Mat& w, const float* in, int n, float* out,
                               const std::vector<float>* bias) {
  const KernelTable& K = *kt;
  const int ti = static_cast<int>(w.type);
  const GemmQ8Fn q8 = K.gemm_q8[ti];
  const bool int8 = q8 != nullptr && w.cols % 32 == 0 && w.type != GgmlType::kF32 &&
                    w.type != GgmlType::kF16 && w.type != GgmlType::kBF16;
  // BF16 weights: the BF16 dot product where the CPU has it (activations rounded to bf16).
  const GemmFn gemm =
      w.type == GgmlType::kBF16 && K.gemm_bf16_dot != nullptr ? K.gemm_bf16_dot : K.gemm[ti];
  const GemvFn gemv = K.gemv[ti];
  const GemvQ8Fn gemv_q8 = K.gemv_q8[ti];
  if (!int8 && gemm == nullptr && gemv == nullptr && gemv_q8 == nullptr)
    Fail("no kernel for %s weights in the vision encoder", TypeName(w.type));
  const bool quantize = int8 || (gemm == nullptr && gemv == nullptr);
  const int64_t cols = w.cols;
  if (quantize) {  // once per input, threads over tokens
    pool->ParallelFor(n, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t)
        K.quantize_act(in + t * cols, cols, qs.data() + t * cols, qd.data() + t * (cols / 32),
                       qds.data() + t * (cols / 32));
    });
  }
  ActQ8 a;
  a.qs = qs.data();
  a.d = qd.data();
  a.ds = qds.data();
  const int64_t rb = (w.rows + kRowBlock - 1) / kRowBlock;
  const int64_t tb = (n + kTokBlock - 1) / kTokBlock;
  pool->ParallelFor(rb * tb, [&](int64_t b, int64_t e, int) {
    for (int64_t task = b; task < e; ++task) {
      const int64_t r0 = (task % rb) * kRowBlock, t0 = (task / rb) * kTokBlock;
      const int64_t nr = std::min<int64_t>(kRowBlock, w.rows - r0);
      const int nt = static_cast<int>(std::min<int64_t>(kTokBlock, n - t0));
      const uint8_t* wr = w.data + static_cast<size_t>(r0) * w.row_bytes;
      float* y = out + t0 * w.rows + r0;
      if (quantize && int8) {
        ActQ8 at = a.Token(t0, cols);
        q8(wr, w.row_bytes, cols, nr, at, nt, y, w.rows);
      } else if (quantize) {
        for (int j = 0; j < nt; ++j)
          gemv_q8(wr, w.row_bytes, cols, nr, a.Token(t0 + j, cols), y + j * w.rows);
      } else if (gemm != nullptr) {
        gemm(wr, w.row_bytes, cols, nr, in + t0 * cols, nt, y, w.rows);
      } else {
        for (int j = 0; j < nt; ++j)
          gemv(wr, w.row_bytes, cols, nr, in + (t0 + j) * cols, y + j * w.rows);
      }
      if (bias != nullptr && !bias->empty())
        for (int j = 0; j < nt; ++j)
          for (int64_t r = 0; r < nr; ++r)
            y[j * w.rows + r] += (*bias)[static_cast<size_t>(r0 + r)];
    }
  });
}

void VisionModel::Impl::LayerNorm(float* rows, int n, const std::vector<float>& w,
                                  const std::vector<float>& b) {
  const int D = cfg.dim;
  pool->ParallelFor(n, [&](int64_t s, int64_t e, int) {
    for (int64_t t = s; t < e; ++t)
      kt->layernorm(rows + t * D, rows + t * D, w.data(), b.empty() ? nullptr : b.data(), D,
                    cfg.eps);
  });
}

void VisionModel::Impl::Embed(const float* tile) {
  const int P = cfg.patch_size, S = cfg.image_size, side = cfg.patches_side(), D = cfg.dim;
  const size_t plane = static_cast<size_t>(S) * S;
  const int pp = 3 * P * P;
  for (int py = 0; py < side; ++py)
    for (int px = 0; px < side; ++px) {
      float* row = pix.data() + static_cast<size_t>(py * side + px) * pp;
      for (int c = 0; c < 3; ++c)
        for (int ky = 0; ky < P; ++ky)
          std::memcpy(row + (c * P + ky) * P,
                      tile + c * plane + static_cast<size_t>(py * P + ky) * S + px * P,
                      sizeof(float) * P);
    }
  const int c0 = cfg.class_token ? 1 : 0;  // HF CLIP: the class token first, position 0
  MatMul(patch, pix.data(), n_patches, x.data() + static_cast<size_t>(c0) * D, &patch_b);
  if (cfg.class_token) std::memcpy(x.data(), class_embd.data(), sizeof(float) * D);
  for (int t = 0; t < n_pos; ++t)
    kt->add(x.data() + static_cast<size_t>(t) * D, pos.data() + static_cast<size_t>(t) * D, D);
  if (!pre_w.empty()) LayerNorm(x.data(), n_pos, pre_w, pre_b);
}

// Phase `phase` (0..3) of layer l: 0 the attention's input norm and Q/K/V, 1 attention, 2 its
// output projection and residual, the FFN's norm and up projection (and activation), 3 the down
// projection and residual. About a quarter of the layer's work each: the service's unit.
void VisionModel::Impl::RunPhase(int l, int phase) {
  const Layer& L = layers[static_cast<size_t>(l)];
  const int D = cfg.dim, n = n_pos, H = cfg.n_heads, hd = D / H;
  if (phase == 0) {
    std::memcpy(h.data(), x.data(), sizeof(float) * n * D);
    LayerNorm(h.data(), n, L.ln1_w, L.ln1_b);
    MatMul(L.q, h.data(), n, q.data(), &L.q_b);
    MatMul(L.k, h.data(), n, k.data(), &L.k_b);
    MatMul(L.v, h.data(), n, v.data(), &L.v_b);
    return;
  }
  if (phase == 1) {
    // Every position attends to every position (no mask): tasks over heads x row blocks.
    static const int32_t kTable[1] = {0};
    KvRowsRef kr, vr;
    kr.base = reinterpret_cast<const uint8_t*>(k.data());
    vr.base = reinterpret_cast<const uint8_t*>(v.data());
    kr.row_bytes = vr.row_bytes = sizeof(float) * D;
    kr.table = vr.table = kTable;
    kr.block_size = vr.block_size = n;
    kr.type = vr.type = KvDtype::kF32;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const int blocks = (n + kAttnMaxRows - 1) / kAttnMaxRows;
    const size_t per_thread = AttendScratchFloats(hd);
    if (attn_scratch.size() < per_thread * pool->size())
      attn_scratch.assign(per_thread * pool->size(), 0);
    pool->ParallelFor(static_cast<int64_t>(H) * blocks, [&](int64_t b, int64_t e, int th) {
      const float* qr[kAttnMaxRows];
      float* orow[kAttnMaxRows];
      int lo[kAttnMaxRows], hi[kAttnMaxRows];
      for (int64_t task = b; task < e; ++task) {
        const int head = static_cast<int>(task % H), r0 = static_cast<int>(task / H) * kAttnMaxRows;
        const int cnt = std::min(kAttnMaxRows, n - r0);
        for (int r = 0; r < cnt; ++r) {
          qr[r] = q.data() + static_cast<size_t>(r0 + r) * D + head * hd;
          orow[r] = att.data() + static_cast<size_t>(r0 + r) * D + head * hd;
          lo[r] = 0;
          hi[r] = n;
        }
        kt->attend_rows(qr, orow, cnt, lo, hi, kr, vr, head, H, hd, scale, 0.0f,
                        attn_scratch.data() + per_thread * th, nullptr);
      }
    });
    return;
  }
  const int F = cfg.ffn_dim;
  float* act = L.gate ? g.data() : u.data();  // the activation's input (gated: the gate)
  if (phase == 3) {
    MatMul(L.down, act, n, h.data(), &L.down_b);
    for (int t = 0; t < n; ++t)
      kt->add(x.data() + static_cast<size_t>(t) * D, h.data() + static_cast<size_t>(t) * D, D);
    return;
  }
  MatMul(L.o, att.data(), n, h.data(), &L.o_b);
  for (int t = 0; t < n; ++t)
    kt->add(x.data() + static_cast<size_t>(t) * D, h.data() + static_cast<size_t>(t) * D, D);
  std::memcpy(h.data(), x.data(), sizeof(float) * n * D);
  LayerNorm(h.data(), n, L.ln2_w, L.ln2_b);
  MatMul(L.up, h.data(), n, u.data(), &L.up_b);
  if (L.gate) MatMul(L.gate, h.data(), n, g.data(), &L.gate_b);
  const VisionConfig::Act kind = cfg.act;
  pool->ParallelFor(n, [&](int64_t s, int64_t e, int) {
    for (int64_t t = s; t < e; ++t) {
      float* a = act + t * F;
      if (kind == VisionConfig::Act::kGelu) {
        kt->gelu_mul(a, nullptr, F);
      } else if (kind == VisionConfig::Act::kGeluQuick) {
        for (int i = 0; i < F; ++i) a[i] = a[i] / (1.0f + std::exp(-1.702f * a[i]));
      } else {
        for (int i = 0; i < F; ++i) a[i] = a[i] / (1.0f + std::exp(-a[i]));
      }
      if (L.gate)
        for (int i = 0; i < F; ++i) a[i] *= u[static_cast<size_t>(t * F + i)];
    }
  });
}

void VisionModel::Impl::Project(float* out) {
  const int D = cfg.dim, side = cfg.patches_side();
  if (!post_w.empty()) LayerNorm(x.data(), n_pos, post_w, post_b);
  const float* patches = x.data() + (cfg.class_token ? D : 0);  // the class token dropped
  switch (cfg.projector) {
    case Projector::kMlp:
      MatMul(mm0, patches, n_patches, u.data(), &mm0_b);
      pool->ParallelFor(n_patches, [&](int64_t s, int64_t e, int) {
        for (int64_t t = s; t < e; ++t) kt->gelu_mul(u.data() + t * mm0.rows, nullptr, mm0.rows);
      });
      MatMul(mm2, u.data(), n_patches, out, &mm2_b);
      break;
    case Projector::kGemma3: {
      const int m = cfg.merge, o = side / m;
      const float inv = 1.0f / static_cast<float>(m * m);
      for (int oy = 0; oy < o; ++oy)
        for (int ox = 0; ox < o; ++ox) {
          float* dst = tmp.data() + static_cast<size_t>(oy * o + ox) * D;
          std::fill(dst, dst + D, 0.0f);
          for (int dy = 0; dy < m; ++dy)
            for (int dx = 0; dx < m; ++dx)
              kt->add(dst, patches + static_cast<size_t>((oy * m + dy) * side + ox * m + dx) * D,
                      D);
          for (int i = 0; i < D; ++i) dst[i] *= inv;
          kt->rmsnorm(dst, dst, soft_w.data(), D, cfg.eps);
        }
      MatMul(proj, tmp.data(), o * o, out, nullptr);
      break;
    }
    case Projector::kIdefics3: {
      // Pixel shuffle (llama.cpp's, = Idefics3's): token (Y, X) of the merged grid holds
      // patches (Y*s + dy, X*s + dx) at feature offset D * (dx + s * dy); the grid padded with
      // zeros to a multiple of s.
      const int s = cfg.merge, o = (side + s - 1) / s;
      const int F = D * s * s;
      std::fill(u.begin(), u.begin() + static_cast<size_t>(o) * o * F, 0.0f);
      for (int Y = 0; Y < o; ++Y)
        for (int X = 0; X < o; ++X)
          for (int dy = 0; dy < s; ++dy)
            for (int dx = 0; dx < s; ++dx) {
              const int py = Y * s + dy, px = X * s + dx;
              if (py >= side || px >= side) continue;
              std::memcpy(u.data() + static_cast<size_t>(Y * o + X) * F + D * (dx + s * dy),
                          patches + static_cast<size_t>(py * side + px) * D, sizeof(float) * D);
            }
      MatMul(proj, u.data(), o * o, out, nullptr);
      break;
    }
  }
}

VisionModel::VisionModel() : impl_(std::make_unique<Impl>()) {}
VisionModel::~VisionModel() = default;

std::unique_ptr<VisionModel> VisionModel::Load(const std::string& path) {
  std::unique_ptr<VisionModel> m(new VisionModel());
  m->impl_->path = path;
  m->impl_->file = GgufFile::Open(path, false);
  m->impl_->Load();
  return m;
}

const VisionConfig& VisionModel::config() const {
  return impl_->cfg;
}
const std::string& VisionModel::path() const {
  return impl_->path;
}
size_t VisionModel::weight_bytes() const {
  return impl_->bytes;
}

void VisionModel::RelayoutQuantized() {
  Impl& s = *impl_;
  const auto relay = [](Mat* m) {
    GgmlType to;
    X16RepackFn repack = nullptr;
    if (!*m || m->rows % kX16Rows != 0 || !X16RelayoutOf(m->type, &to, &repack)) return;
    std::vector<float> buf(m->row_bytes * static_cast<size_t>(m->rows) / sizeof(float) + 1);
    repack(m->data, buf.data(), m->rows, m->cols);
    m->owned = std::move(buf);
    m->data = reinterpret_cast<const uint8_t*>(m->owned.data());
    m->type = to;
  };
  for (auto& L : s.layers)
    for (Mat* m : {&L.q, &L.k, &L.v, &L.o, &L.up, &L.down, &L.gate}) relay(m);
  for (Mat* m : {&s.mm0, &s.mm2, &s.proj}) relay(m);
}

void VisionModel::SetBf16Weights() {
  Impl& s = *impl_;
  ToBf16(&s.patch);
  for (auto& L : s.layers)
    for (Mat* m : {&L.q, &L.k, &L.v, &L.o, &L.up, &L.down, &L.gate}) ToBf16(m);
  for (Mat* m : {&s.mm0, &s.mm2, &s.proj}) ToBf16(m);
}

double VisionModel::LayerFlops() const {
  const double n = impl_->n_pos, d = impl_->cfg.dim, f = impl_->cfg.ffn_dim;
  return n * (4 * d * d + 2 * d * f) + 2 * n * n * d;
}

PixelTiles VisionModel::Preprocess(const RgbImage& img) const {
  const VisionConfig& c = impl_->cfg;
  const int S = c.image_size;
  PixelTiles px;
  px.hash = PixelHash(img);
  px.width = img.width;
  px.height = img.height;
  const auto add = [&](const RgbImage& im) {
    px.tiles.emplace_back(static_cast<size_t>(3) * S * S);
    Normalize(im, c.mean, c.std, px.tiles.back().data());
  };
  switch (c.projector) {
    case Projector::kMlp: {  // LLaVA 1.5: pad to a square of the mean color
      static const uint8_t kPad[3] = {122, 116, 104};
      add(ResizePadded(img, S, S, kPad));
      break;
    }
    case Projector::kGemma3: {  // fit into S x S (black bars), as llama.cpp's resize does
      static const uint8_t kBlack[3] = {0, 0, 0};
      add(ResizePadded(img, S, S, kBlack));
      break;
    }
    case Projector::kIdefics3: {
      // The longer side scaled to longest_edge, both sides rounded up to multiples of S
      // (bicubic), cut into S x S tiles row by row; then the whole image stretched to S x S
      // (bilinear) as the overview, which comes last.
      const float scale = std::min(static_cast<float>(c.longest_edge) / img.width,
                                   static_cast<float>(c.longest_edge) / img.height);
      const auto up = [&](float v) {
        return static_cast<int>(std::ceil(v / static_cast<float>(S))) * S;
      };
      const int rw = std::max(S, up(img.width * scale)), rh = std::max(S, up(img.height * scale));
      px.grid_x = rw / S;
      px.grid_y = rh / S;
      const RgbImage refined = Resize(img, rw, rh, ResizeFilter::kCatmullRom);
      for (int y = 0; y < rh; y += S)
        for (int x = 0; x < rw; x += S) add(Crop(refined, x, y, S, S));
      add(Resize(img, S, S, ResizeFilter::kTriangle));
      break;
    }
  }
  return px;
}

void VisionModel::Begin(const float* tile, const KernelTable& k, ThreadPool& pool) {
  impl_->kt = &k;
  impl_->pool = &pool;
  impl_->Embed(tile);
  impl_->next_unit = 0;
}

bool VisionModel::Step(int units, float* out) {
  Impl& s = *impl_;
  const int total = 4 * s.cfg.n_layers;
  for (int i = 0; i < std::max(1, units) && s.next_unit < total; ++i, ++s.next_unit)
    s.RunPhase(s.next_unit / 4, s.next_unit % 4);
  if (s.next_unit < total) return false;
  s.Project(out);
  return true;
}

void VisionModel::Encode(const float* tile, const KernelTable& k, ThreadPool& pool, float* out) {
  Begin(tile, k, pool);
  while (!Step(4 * impl_->cfg.n_layers, out)) {
  }
}

}  // namespace paddock
