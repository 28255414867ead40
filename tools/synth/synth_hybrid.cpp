// synth/synth_hybrid.cpp: synthetic hybrid recurrent models in llama.cpp's layout (its loader
// and graphs for qwen35, qwen35moe and lfm2 were read for the names, shapes and metadata):
// Qwen3.5's Gated DeltaNet layers between gated-attention layers, LFM2's short convolutions
// between attention layers. llama.cpp loads these files, so both engines run the same bytes.
#include <cmath>

#include "base/strings.h"
#include "formats/gguf_writer.h"
#include "synth/synth.h"
#include "synth/synth_rng.h"

namespace paddock {

namespace {

bool IsLfm2(const SynthSpec& s) {
  return s.arch == "lfm2";
}

bool AttnLayer(const SynthSpec& s, int l) {
  if (IsLfm2(s)) {
    for (int a : s.attn_layers)
      if (a == l) return true;
    return false;
  }
  return (l + 1) % s.attn_every == 0;
}

class HybridTensors {
 public:
  HybridTensors(const SynthSpec& s, int hd, GgufWriter* w)
      : s_(s), w_(w), rng_(s.seed), hd_(hd), qd_(s.n_heads * hd), kvd_(s.n_kv_heads * hd) {}

  void Write() {
    Matrix("token_embd.weight", s_.dim, s_.n_vocab, 1.0f);
    for (int l = 0; l < s_.n_layers; ++l) {
      const std::string p = StrFormat("blk.%d.", l);
      Vec(p + "attn_norm.weight", s_.dim, 1.0f, 0.1f);
      if (!AttnLayer(s_, l)) {
        IsLfm2(s_) ? ShortConv(p) : DeltaNet(p);
      } else {
        Attention(p);
      }
      Vec(p + (IsLfm2(s_) ? "ffn_norm.weight" : "post_attention_norm.weight"), s_.dim, 1.0f, 0.1f);
      Ffn(p);
    }
    Vec(IsLfm2(s_) ? "token_embd_norm.weight" : "output_norm.weight", s_.dim, 1.0f, 0.1f);
    if (!s_.tied_embeddings) Matrix("output.weight", s_.dim, s_.n_vocab);
    for (int l = s_.n_layers; l < s_.n_layers + s_.nextn_layers; ++l) Mtp(StrFormat("blk.%d.", l));
  }

 private:
  // llama.cpp's Q4_K_M mix where asked: Q6_K for the output and attn_v / ffn_down of the
  // first and last eighth and every third layer between; Q4_K else.
  GgmlType TypeOf(const std::string& name) const {
    return s_.q4_k_m ? Q4KMixType(name, s_.n_layers) : s_.type;
  }
  // rows of cols, unit-variance outputs (times gain); depth > 0: a 3-D expert tensor.
  void Matrix(const std::string& name, int cols, int rows, float gain = 1.0f, int depth = 0) {
    buf_.resize(static_cast<size_t>(cols) * rows * static_cast<size_t>(std::max(depth, 1)));
    const float scale = gain * std::sqrt(3.0f / static_cast<float>(cols));
    for (float& v : buf_) v = rng_.Uniform() * scale;
    std::vector<int64_t> ne = {cols, rows};
    if (depth > 0) ne.push_back(depth);
    w_->AddTensorF32(name, ne,
                     name == "token_embd.weight" && s_.q4_k_m ? GgmlType::kQ4_K : TypeOf(name),
                     buf_.data());
  }
  void F32(const std::string& name, std::vector<int64_t> ne, float base, float jitter) {
    size_t n = 1;
    for (int64_t d : ne) n *= static_cast<size_t>(d);
    buf_.resize(n);
    for (float& v : buf_) v = base + jitter * rng_.Uniform();
    w_->AddTensorF32(name, ne, GgmlType::kF32, buf_.data());
  }
  void Vec(const std::string& name, int n, float base, float jitter) {
    F32(name, {n}, base, jitter);
  }

  void Attention(const std::string& p) {
    // Qwen3.5: each head's query rows then its gate rows.
    Matrix(p + "attn_q.weight", s_.dim, IsLfm2(s_) ? qd_ : 2 * qd_);
    Matrix(p + "attn_k.weight", s_.dim, kvd_);
    Matrix(p + "attn_v.weight", s_.dim, kvd_);
    Matrix(p + "attn_output.weight", qd_, s_.dim, s_.mixer_scale);
    Vec(p + "attn_q_norm.weight", hd_, 1.0f, 0.5f);
    Vec(p + "attn_k_norm.weight", hd_, 1.0f, 0.5f);
  }
  // A prediction block (llama.cpp's qwen35 load_block_mtp): an attention layer and its FFN,
  // the input projection of [embedding ; hidden] and their norms, the head's norm.
  void Mtp(const std::string& p) {
    Vec(p + "attn_norm.weight", s_.dim, 1.0f, 0.1f);
    Attention(p);
    Vec(p + "post_attention_norm.weight", s_.dim, 1.0f, 0.1f);
    Ffn(p);
    Matrix(p + "nextn.eh_proj.weight", 2 * s_.dim, s_.dim);
    Vec(p + "nextn.enorm.weight", s_.dim, 1.0f, 0.1f);
    Vec(p + "nextn.hnorm.weight", s_.dim, 1.0f, 0.1f);
    Vec(p + "nextn.shared_head_norm.weight", s_.dim, 1.0f, 0.1f);
  }
  void ShortConv(const std::string& p) {
    F32(p + "shortconv.conv.weight", {s_.conv_kernel, s_.dim}, 0.0f,
        1.0f / std::sqrt(static_cast<float>(s_.conv_kernel)));
    Matrix(p + "shortconv.in_proj.weight", s_.dim, 3 * s_.dim);
    Matrix(p + "shortconv.out_proj.weight", s_.dim, s_.dim, s_.mixer_scale);
  }
  void DeltaNet(const std::string& p) {
    const int kd = s_.ssm_k_heads * s_.ssm_state, vd = s_.ssm_v_heads * s_.ssm_state;
    const int hv = s_.ssm_v_heads;
    Matrix(p + "attn_qkv.weight", s_.dim, 2 * kd + vd);
    Matrix(p + "attn_gate.weight", s_.dim, vd);
    F32(p + "ssm_conv1d.weight", {s_.conv_kernel, 2 * kd + vd}, 0.0f,
        1.0f / std::sqrt(static_cast<float>(s_.conv_kernel)));
    F32(p + "ssm_dt.bias", {hv}, -2.5f, 1.5f);  // softplus: decays from fast to slow
    buf_.resize(static_cast<size_t>(hv));
    for (float& v : buf_) v = -std::exp(1.2f * rng_.Uniform());  // -exp(A_log)
    w_->AddTensorF32(p + "ssm_a", {hv}, GgmlType::kF32, buf_.data());
    Matrix(p + "ssm_beta.weight", s_.dim, hv);
    Matrix(p + "ssm_alpha.weight", s_.dim, hv);
    Vec(p + "ssm_norm.weight", s_.ssm_state, 1.0f, 0.1f);
    Matrix(p + "ssm_out.weight", vd, s_.dim, s_.mixer_scale);
  }
  void Ffn(const std::string& p) {
    if (s_.n_experts == 0) {
      Matrix(p + "ffn_gate.weight", s_.dim, s_.ffn_dim);
      Matrix(p + "ffn_up.weight", s_.dim, s_.ffn_dim);
      Matrix(p + "ffn_down.weight", s_.ffn_dim, s_.dim);
      return;
    }
    const int E = s_.n_experts, F = s_.expert_ffn_dim, S = s_.shared_ffn_dim;
    buf_.resize(static_cast<size_t>(s_.dim) * E);
    for (float& v : buf_) v = rng_.Uniform() * std::sqrt(3.0f / static_cast<float>(s_.dim));
    w_->AddTensorF32(p + "ffn_gate_inp.weight", {s_.dim, E}, GgmlType::kF32, buf_.data());
    Matrix(p + "ffn_gate_exps.weight", s_.dim, F, 1.0f, E);
    Matrix(p + "ffn_up_exps.weight", s_.dim, F, 1.0f, E);
    Matrix(p + "ffn_down_exps.weight", F, s_.dim, 1.0f, E);
    Vec(p + "ffn_gate_inp_shexp.weight", s_.dim, 0.0f,
        std::sqrt(3.0f / static_cast<float>(s_.dim)));
    Matrix(p + "ffn_gate_shexp.weight", s_.dim, S);
    Matrix(p + "ffn_up_shexp.weight", s_.dim, S);
    Matrix(p + "ffn_down_shexp.weight", S, s_.dim);
  }

  const SynthSpec& s_;
  GgufWriter* w_;
  Rng rng_;
  std::vector<float> buf_;
  int hd_, qd_, kvd_;
};

// The tiny Qwen3.5 preset: 8 layers of 64 (3 and 7 attention, heads of 32 rotating 8 dims),
// DeltaNet heads of 16 (2 key, 4 value heads), a convolution of 4.
void TinyQwen35(SynthSpec& s) {
  s.arch = "qwen35";
  s.n_layers = 8;
  s.head_dim = 32;
  s.rope_dim = 8;
  s.rope_sections = {2, 1, 1, 0};
  s.qk_norm = true;
}

// The hybrid shapes `paddock synth --shape` knows (synth.cpp has the others).
struct HybridShape {
  const char* name;
  void (*apply)(SynthSpec& s);
};

constexpr HybridShape kHybridShapes[] = {
    {"tiny-qwen35",  // tests: Qwen3.5's Gated DeltaNet (layers 3 and 7 attention)
     [](SynthSpec& s) { TinyQwen35(s); }},
    {"tiny-qwen35moe",  // tests: the same with 8 experts of 64 (2 per token) and a shared one
     [](SynthSpec& s) {
       TinyQwen35(s);
       s.arch = "qwen35moe";
       s.n_experts = 8;
       s.n_experts_used = 2;
       s.expert_ffn_dim = 64;
       s.shared_ffn_dim = 64;
     }},
    {"tiny-qwen35-mtp",  // tests: tiny-qwen35 and a multi-token-prediction block (--spec mtp)
     [](SynthSpec& s) {
       TinyQwen35(s);
       s.nextn_layers = 1;
     }},
    {"tiny-qwen35moe-mtp",  // tests: tiny-qwen35moe and a prediction block with its experts
     [](SynthSpec& s) {
       HybridPreset("tiny-qwen35moe", &s);
       s.nextn_layers = 1;
     }},
    {"tiny-lfm2",  // tests: LFM2's short convolutions (layers 2 and 4 attention)
     [](SynthSpec& s) {
       s.arch = "lfm2";
       s.n_layers = 6;
       s.attn_layers = {2, 4};
       s.conv_kernel = 3;
       s.head_dim = 16;
       s.qk_norm = true;
     }},
    {"qwen3.5-0.8b",  // Qwen3.5 0.8B: 24 layers (every 4th attention), heads of 256, 64 rotated
     [](SynthSpec& s) {
       s.arch = "qwen35";
       s.dim = 1024;
       s.n_layers = 24;
       s.n_heads = 8;
       s.n_kv_heads = 2;
       s.head_dim = 256;
       s.rope_dim = 64;
       s.rope_sections = {11, 11, 10, 0};
       s.ffn_dim = 3584;
       s.ssm_state = 128;
       s.ssm_k_heads = 16;
       s.ssm_v_heads = 16;
       s.n_vocab = 248320;
       s.context = 262144;
       s.rope_base = 10000000.0f;
       s.tied_embeddings = true;
     }},
    {"qwen3.5-0.8b-mtp",  // the same with the published prediction block
     [](SynthSpec& s) {
       HybridPreset("qwen3.5-0.8b", &s);
       s.nextn_layers = 1;
     }},
    {"lfm2-350m",  // LFM2 350M: 16 layers, attention on 6, convolutions of 3
     [](SynthSpec& s) {
       s.arch = "lfm2";
       s.dim = 1024;
       s.n_layers = 16;
       s.attn_layers = {2, 5, 8, 10, 12, 14};
       s.conv_kernel = 3;
       s.n_heads = 16;
       s.n_kv_heads = 8;
       s.ffn_dim = 4608;
       s.n_vocab = 65536;
       s.context = 128000;
       s.rope_base = 1000000.0f;
       s.tied_embeddings = true;
       s.qk_norm = true;
     }},
};

}  // namespace

bool HybridPreset(const std::string& name, SynthSpec* s) {
  for (const HybridShape& h : kHybridShapes) {
    if (name != h.name) continue;
    h.apply(*s);
    return true;
  }
  return false;
}

std::string HybridPresetNames() {
  std::string names;
  for (const HybridShape& h : kHybridShapes)
    names += std::string(names.empty() ? "" : ", ") + h.name;
  return names;
}

GgmlType Q4KMixType(const std::string& name, int n_layers) {
  int layer = -1;
  std::sscanf(name.c_str(), "blk.%d.", &layer);
  const int n = n_layers;
  const bool more_bits =
      layer >= 0 && (layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2);
  const bool wide =
      name == "output.weight" || (more_bits && (name.find("attn_v.") != std::string::npos ||
                                                name.find("ffn_down") != std::string::npos));
  return wide ? GgmlType::kQ6_K : GgmlType::kQ4_K;
}

bool IsHybridArch(const std::string& arch) {
  return arch == "qwen35" || arch == "qwen35moe" || arch == "lfm2";
}

void WriteHybridMetadata(const SynthSpec& s, int hd, GgufWriter* w) {
  const std::string a = s.arch + ".";
  if (s.n_experts > 0 && (s.expert_ffn_dim <= 0 || s.shared_ffn_dim <= 0))
    Fail("synthetic model: a hybrid mixture of experts needs expert and shared widths");
  w->SetString("general.architecture", s.arch);
  w->SetString("general.name", "paddock synthetic " + s.arch);
  w->SetU32(a + "context_length", static_cast<uint32_t>(s.context));
  w->SetU32(a + "embedding_length", static_cast<uint32_t>(s.dim));
  w->SetU32(a + "block_count", static_cast<uint32_t>(s.n_layers + s.nextn_layers));
  if (s.nextn_layers > 0) {
    if (IsLfm2(s)) Fail("synthetic model: LFM2 has no prediction layers");
    w->SetU32(a + "nextn_predict_layers", static_cast<uint32_t>(s.nextn_layers));
  }
  w->SetU32(a + "feed_forward_length", static_cast<uint32_t>(s.ffn_dim));
  w->SetU32(a + "attention.head_count", static_cast<uint32_t>(s.n_heads));
  w->SetU32(a + "attention.key_length", static_cast<uint32_t>(hd));
  w->SetU32(a + "attention.value_length", static_cast<uint32_t>(hd));
  w->SetU32(a + "rope.dimension_count", static_cast<uint32_t>(s.rope_dim > 0 ? s.rope_dim : hd));
  w->SetF32(a + "rope.freq_base", s.rope_base);
  w->SetF32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  if (IsLfm2(s)) {
    std::vector<int32_t> kv;
    for (int l = 0; l < s.n_layers; ++l) kv.push_back(AttnLayer(s, l) ? s.n_kv_heads : 0);
    w->SetI32Array(a + "attention.head_count_kv", kv);
    w->SetU32(a + "shortconv.l_cache", static_cast<uint32_t>(s.conv_kernel));
  } else {
    w->SetU32(a + "attention.head_count_kv", static_cast<uint32_t>(s.n_kv_heads));
    std::vector<int32_t> sec(s.rope_sections.begin(), s.rope_sections.end());
    sec.resize(4, 0);
    w->SetI32Array(a + "rope.dimension_sections", sec);
    w->SetU32(a + "ssm.conv_kernel", static_cast<uint32_t>(s.conv_kernel));
    w->SetU32(a + "ssm.state_size", static_cast<uint32_t>(s.ssm_state));
    w->SetU32(a + "ssm.group_count", static_cast<uint32_t>(s.ssm_k_heads));
    w->SetU32(a + "ssm.time_step_rank", static_cast<uint32_t>(s.ssm_v_heads));
    w->SetU32(a + "ssm.inner_size", static_cast<uint32_t>(s.ssm_v_heads * s.ssm_state));
    w->SetU32(a + "full_attention_interval", static_cast<uint32_t>(s.attn_every));
  }
  if (s.n_experts > 0) {
    w->SetU32(a + "expert_count", static_cast<uint32_t>(s.n_experts));
    w->SetU32(a + "expert_used_count", static_cast<uint32_t>(s.n_experts_used));
    w->SetU32(a + "expert_feed_forward_length", static_cast<uint32_t>(s.expert_ffn_dim));
    w->SetU32(a + "expert_shared_feed_forward_length", static_cast<uint32_t>(s.shared_ffn_dim));
  }
  w->SetU32("general.file_type", 0);
}

void WriteHybridTensors(const SynthSpec& s, int hd, GgufWriter* w) {
  HybridTensors(s, hd, w).Write();
}

}  // namespace paddock
