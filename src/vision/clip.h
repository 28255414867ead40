// vision/clip.h: vision encoders from llama.cpp's mmproj GGUF layout (`clip.*` metadata,
// `v.*` / `mm.*` tensors) and the projectors that map their patches into a text model's
// embedding space.
//
// One ViT (patch embedding as a matmul over flattened patches, learned positions, an optional
// class token, pre-norm blocks with LayerNorm, GELU / quick-GELU MLPs, optional pre- and
// post-layernorm), and three projector families:
//   mlp       LLaVA: two linears with GELU between (class token first, dropped after the ViT)
//   gemma3    Gemma 3: average pooling of the patch grid (n_merge x n_merge), RMS norm
//             (soft_emb_norm), one projection: 256 tokens from 896 x 896
//   idefics3  SmolVLM / Idefics3: pixel shuffle (scale_factor^2 patches into one), a linear;
//             large images as tiles plus a downscaled overview
// Each with its processor's preprocessing (resize policy, padding or tiles, the file's mean
// and std). The matmuls run on the engine's kernel table (F32, F16, BF16, Q8_0 and the other
// GEMM types); attention on the tiled kernel over the whole patch sequence (no causal mask).
// A scalar path (same code, the reference kernel table) is the tests' reference.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vision/image.h"

namespace paddock {

struct KernelTable;
class ThreadPool;

enum class Projector { kMlp, kGemma3, kIdefics3 };
const char* ProjectorName(Projector p);

struct VisionConfig {
  Projector projector = Projector::kMlp;
  int image_size = 0;  // the encoder's square input
  int patch_size = 0;
  int dim = 0;  // ViT width
  int ffn_dim = 0;
  int n_layers = 0;  // layers run (the file's block count, or up to its feature layer)
  int n_heads = 0;
  float eps = 1e-6f;
  float mean[3] = {0.5f, 0.5f, 0.5f};
  float std[3] = {0.5f, 0.5f, 0.5f};
  enum class Act { kGeluQuick, kGelu, kSilu } act = Act::kGeluQuick;
  int merge = 1;         // gemma3: pooling kernel; idefics3: pixel-shuffle scale factor
  int longest_edge = 0;  // idefics3: images are first resized so their longer side is this
  int text_dim = 0;      // the projector's output width (the text model's dim)
  bool class_token = false;
  int patches_side() const { return image_size / patch_size; }
  // Embeddings one encoded tile gives the text model.
  int TokensPerTile() const;
};

// A preprocessed image: the tiles the encoder runs (each 3 x image_size x image_size floats,
// channel-planar) and how they are laid out (idefics3: a grid of tiles, then the overview).
struct PixelTiles {
  std::vector<std::vector<float>> tiles;
  int grid_x = 0, grid_y = 0;  // idefics3 tile grid (0: one tile, no grid)
  uint64_t hash = 0;           // PixelHash of the decoded image
  int width = 0, height = 0;   // the decoded image's size
};

class VisionModel {
 public:
  // Maps and validates an mmproj file. Throws Error naming what is missing or unsupported.
  static std::unique_ptr<VisionModel> Load(const std::string& path);
  ~VisionModel();

  const VisionConfig& config() const;
  const std::string& path() const;
  size_t weight_bytes() const;

  // F32 and F16 matrices re-encoded as BF16 (the same bytes as F16), so the matmuls take the
  // BF16 dot product (AVX-512 BF16: 32 products an instruction, activations rounded to bf16)
  // where the kernel table has it: ~2x the F16 GEMM's rate, results within ~3e-3 of it.
  void SetBf16Weights();

  // Quantized matrices (Q8_0, Q4_0, ...) re-laid into the 16-row interleaved layouts of the
  // text model's integer GEMMs (formats/x16_layout.h), the same bytes per row.
  void RelayoutQuantized();

  // The processor's preprocessing of a decoded image.
  PixelTiles Preprocess(const RgbImage& img) const;
  // Embeddings the text model gets for an image (all tiles).
  int TokensFor(const PixelTiles& px) const {
    return static_cast<int>(px.tiles.size()) * config().TokensPerTile();
  }

  // Encodes one tile: out receives TokensPerTile() x text_dim floats. Threads from `pool`;
  // the matmuls from `k`. Scratch is planned at load and reused: one Encode at a time.
  void Encode(const float* tile, const KernelTable& k, ThreadPool& pool, float* out);

  // The same encode cut into steps (the service interleaves them with decoding): Begin, then
  // Step until it returns true, each running `units` quarter layers (a layer's four phases:
  // norm and Q/K/V, attention, output projection and the FFN's up projection, the down
  // projection; the projector runs with the last), the result in out (as Encode's).
  void Begin(const float* tile, const KernelTable& k, ThreadPool& pool);
  bool Step(int units, float* out);
  // The work of one ViT layer in multiply-adds.
  double LayerFlops() const;

  struct Impl;

 private:
  VisionModel();
  std::unique_ptr<Impl> impl_;
};

}  // namespace paddock
