// synth/synth_vision.cpp: vision-language presets and their projector files (mmproj) with
// random weights at real shapes (synth/synth.h).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/strings.h"
#include "formats/gguf_writer.h"
#include "synth/synth.h"
#include "synth/synth_rng.h"

namespace paddock {

using synth_detail::Rng;

// ---- vision-language presets ----------------------------------------------------------------

namespace {

struct VisionPreset {
  const char* name;
  const char* text;  // the text preset it starts from
  void (*apply)(SynthSpec& t, SynthVisionSpec& v);
};

std::vector<std::string> SmolControls() {
  std::vector<std::string> c = {"<fake_token_around_image>", "<global-img>", "<image>"};
  for (int r = 1; r <= 6; ++r)
    for (int k = 1; k <= 6; ++k) c.push_back(StrFormat("<row_%d_col_%d>", r, k));
  return c;
}

const VisionPreset kVisionPresets[] = {
    {"tiny-llava", "tiny",
     [](SynthSpec&, SynthVisionSpec& v) {
       v.projector = "mlp";  // 4 x 4 patches + the class token
     }},
    {"tiny-gemma3", "tiny",
     [](SynthSpec& t, SynthVisionSpec& v) {
       t.arch = "gemma3";
       t.qk_norm = true;
       t.sliding_window = 64;
       t.n_vocab = 512;
       t.control_tokens = {"<start_of_image>", "<end_of_image>", "<start_of_turn>",
                           "<end_of_turn>"};
       v.projector = "gemma3";
       v.image_size = 64;  // 8 x 8 patches pooled 2 x 2: 16 tokens
       v.merge = 2;
     }},
    {"tiny-smolvlm", "tiny",
     [](SynthSpec& t, SynthVisionSpec& v) {
       t.n_vocab = 512;
       t.control_tokens = SmolControls();
       v.projector = "idefics3";  // 4 x 4 patches shuffled by 2: 4 tokens a tile
       v.longest_edge = 64;       // up to 2 x 2 tiles + the overview
     }},
    {"llava-1.5-7b", "llama2-7b",  // CLIP ViT-L/14-336 (23 of 24 layers, as converted)
     [](SynthSpec&, SynthVisionSpec& v) {
       v.projector = "mlp";
       v.image_size = 336;
       v.patch_size = 14;
       v.dim = 1024;
       v.ffn_dim = 4096;
       v.n_layers = 23;
       v.n_heads = 16;
       v.mlp_hidden = 4096;
     }},
    {"gemma3-4b", "tiny",  // SigLIP So400m/14-896, 256 tokens an image
     [](SynthSpec& t, SynthVisionSpec& v) {
       t.arch = "gemma3";
       t.dim = 2560;
       t.n_layers = 34;
       t.n_heads = 8;
       t.n_kv_heads = 4;
       t.head_dim = 256;
       t.ffn_dim = 10240;
       t.n_vocab = 262144;
       t.context = 8192;
       t.qk_norm = true;
       t.sliding_window = 1024;
       t.control_tokens = {"<start_of_image>", "<end_of_image>", "<start_of_turn>",
                           "<end_of_turn>"};
       v.projector = "gemma3";
       v.image_size = 896;
       v.patch_size = 14;
       v.dim = 1152;
       v.ffn_dim = 4304;
       v.n_layers = 27;
       v.n_heads = 16;
       v.merge = 4;
     }},
    {"smolvlm-256m", "tiny",  // SigLIP base/16-512, pixel shuffle 4: 64 tokens a tile
     [](SynthSpec& t, SynthVisionSpec& v) {
       t.dim = 576;
       t.n_layers = 30;
       t.n_heads = 9;
       t.n_kv_heads = 3;
       t.ffn_dim = 1536;
       t.n_vocab = 49280;
       t.context = 8192;
       t.rope_base = 100000;
       t.control_tokens = SmolControls();
       v.projector = "idefics3";
       v.image_size = 512;
       v.patch_size = 16;
       v.dim = 768;
       v.ffn_dim = 3072;
       v.n_layers = 12;
       v.n_heads = 12;
       v.merge = 4;
       v.longest_edge = 2048;
     }},
};

}  // namespace

bool SynthVisionPreset(const std::string& name, SynthSpec* text, SynthVisionSpec* vision) {
  for (const VisionPreset& p : kVisionPresets) {
    if (name != p.name) continue;
    *text = SynthPreset(p.text);
    *vision = SynthVisionSpec();
    p.apply(*text, *vision);
    vision->text_dim = text->dim;
    return true;
  }
  return false;
}

std::vector<std::string> SynthVisionPresetNames() {
  std::vector<std::string> n;
  for (const VisionPreset& p : kVisionPresets) n.push_back(p.name);
  return n;
}

void WriteSyntheticMmproj(const SynthVisionSpec& v, const std::string& path) {
  const bool mlp = v.projector == "mlp", gemma3 = v.projector == "gemma3";
  const bool idefics3 = v.projector == "idefics3";
  if (!mlp && !gemma3 && !idefics3)
    Fail("synthetic projector: unknown type '%s'", v.projector.c_str());
  if (v.patch_size <= 0 || v.image_size % v.patch_size != 0 || v.dim % v.n_heads != 0)
    Fail("synthetic projector: impossible shape");
  GgufWriter w;
  w.SetString("general.architecture", "clip");
  w.SetString("general.name", "paddock synthetic " + v.projector + " projector");
  w.SetU32("general.file_type", v.type == GgmlType::kF32 ? 0 : 1);
  w.SetBool("clip.has_vision_encoder", true);
  w.SetBool("clip.has_text_encoder", false);
  w.SetBool("clip.has_llava_projector", mlp);
  w.SetString("clip.projector_type", v.projector);
  w.SetBool("clip.use_gelu", !mlp);  // CLIP: quick GELU; SigLIP: GELU (tanh)
  w.SetU32("clip.vision.image_size", static_cast<uint32_t>(v.image_size));
  w.SetU32("clip.vision.patch_size", static_cast<uint32_t>(v.patch_size));
  w.SetU32("clip.vision.embedding_length", static_cast<uint32_t>(v.dim));
  w.SetU32("clip.vision.feed_forward_length", static_cast<uint32_t>(v.ffn_dim));
  w.SetU32("clip.vision.block_count", static_cast<uint32_t>(v.n_layers));
  w.SetU32("clip.vision.attention.head_count", static_cast<uint32_t>(v.n_heads));
  w.SetU32("clip.vision.projection_dim", static_cast<uint32_t>(v.text_dim));
  w.SetF32("clip.vision.attention.layer_norm_epsilon", 1e-6f);
  w.SetF32Array("clip.vision.image_mean",
                mlp ? std::vector<float>{0.48145466f, 0.4578275f, 0.40821073f}
                    : std::vector<float>{0.5f, 0.5f, 0.5f});
  w.SetF32Array("clip.vision.image_std",
                mlp ? std::vector<float>{0.26862954f, 0.26130258f, 0.27577711f}
                    : std::vector<float>{0.5f, 0.5f, 0.5f});
  if (!mlp) w.SetU32("clip.vision.projector.scale_factor", static_cast<uint32_t>(v.merge));
  if (idefics3)
    w.SetU32("clip.vision.preproc_image_size",
             static_cast<uint32_t>(v.longest_edge > 0 ? v.longest_edge : 2 * v.image_size));
  Rng rng(v.seed);
  std::vector<float> buf;
  const auto fill = [&](size_t n, float scale, float base) {
    buf.resize(n);
    for (float& x : buf) x = base + rng.Uniform() * scale;
  };
  const auto mat = [&](const std::string& name, int cols, int rows, GgmlType type) {
    fill(static_cast<size_t>(cols) * rows, std::sqrt(3.0f / static_cast<float>(cols)), 0);
    w.AddTensorF32(name, {cols, rows}, type, buf.data());
  };
  const auto vec = [&](const std::string& name, int n, float base, float jitter) {
    fill(static_cast<size_t>(n), jitter, base);
    w.AddTensorF32(name, {n}, GgmlType::kF32, buf.data());
  };
  const int D = v.dim, P = v.patch_size, side = v.image_size / v.patch_size;
  fill(static_cast<size_t>(P) * P * 3 * D, std::sqrt(3.0f / (3.0f * P * P)), 0);
  w.AddTensorF32("v.patch_embd.weight", {P, P, 3, D}, GgmlType::kF16, buf.data());
  vec("v.patch_embd.bias", D, 0, 0.1f);
  const int n_pos = side * side + (mlp ? 1 : 0);
  if (mlp) vec("v.class_embd", D, 0, 0.5f);
  fill(static_cast<size_t>(n_pos) * D, 0.5f, 0);
  w.AddTensorF32("v.position_embd.weight", {D, n_pos}, GgmlType::kF32, buf.data());
  if (mlp) {
    vec("v.pre_ln.weight", D, 1, 0.1f);
    vec("v.pre_ln.bias", D, 0, 0.1f);
  }
  for (int l = 0; l < v.n_layers; ++l) {
    const std::string p = StrFormat("v.blk.%d.", l);
    vec(p + "ln1.weight", D, 1, 0.1f);
    vec(p + "ln1.bias", D, 0, 0.1f);
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_out"}) {
      mat(p + m + ".weight", D, D, v.type);
      vec(p + m + ".bias", D, 0, 0.1f);
    }
    vec(p + "ln2.weight", D, 1, 0.1f);
    vec(p + "ln2.bias", D, 0, 0.1f);
    mat(p + "ffn_up.weight", D, v.ffn_dim, v.type);
    vec(p + "ffn_up.bias", v.ffn_dim, 0, 0.1f);
    mat(p + "ffn_down.weight", v.ffn_dim, D, v.type);
    vec(p + "ffn_down.bias", D, 0, 0.1f);
  }
  if (!mlp) {
    vec("v.post_ln.weight", D, 1, 0.1f);
    vec("v.post_ln.bias", D, 0, 0.1f);
  }
  if (mlp) {
    const int hid = v.mlp_hidden > 0 ? v.mlp_hidden : v.text_dim;
    mat("mm.0.weight", D, hid, v.type);
    vec("mm.0.bias", hid, 0, 0.1f);
    mat("mm.2.weight", hid, v.text_dim, v.type);
    vec("mm.2.bias", v.text_dim, 0, 0.1f);
  } else if (gemma3) {
    // Stored as HF keeps it, (dim rows, text cols): x @ W.
    fill(static_cast<size_t>(D) * v.text_dim, std::sqrt(3.0f / static_cast<float>(D)), 0);
    w.AddTensorF32("mm.input_projection.weight", {v.text_dim, D}, GgmlType::kF32, buf.data());
    vec("mm.soft_emb_norm.weight", D, 1, 0.1f);
  } else {
    mat("mm.model.fc.weight", D * v.merge * v.merge, v.text_dim, v.type);
  }
  w.Write(path);
}

}  // namespace paddock
