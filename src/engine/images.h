// engine/images.h: images in a prompt: where their embeddings go, and the encoder with its
// cache (internal to engine/).
//
// A prompt with images is tokens as usual, the family's marker tokens around each image
// (Gemma 3: <start_of_image> ... <end_of_image>; SmolVLM: its tile grid markers; LLaVA: none),
// and for each encoded tile a span of placeholder ids drawn from a hash of the image's pixels.
// The placeholders key the KV prefix cache (a second turn about the same image finds its K/V)
// and never reach the embedding table: the batch item carries the tile's embeddings for them.
// Encoded tiles are kept in an LRU cache by pixel hash, so a conversation about one image
// encodes it once even after its KV blocks are gone.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "paddock/engine.h"
#include "vision/clip.h"

namespace paddock {

class Tokenizer;
struct KernelTable;
class ThreadPool;

struct PromptImages {
  struct Span {
    int start = 0;               // first prompt position
    int n = 0;                   // tokens (= the tile's embeddings)
    int image = 0;               // index into images
    int tile = 0;                // the image's tile
    bool bidirectional = false;  // its tokens see the whole span (Gemma 3)
  };
  std::vector<std::shared_ptr<const PixelTiles>> images;
  std::vector<Span> spans;
  int n_prompt = 0;
};

// A prompt's image rows once encoded: per prompt position its embedding row (null: a token),
// and per position the attention end (empty when no span is bidirectional).
struct ImageRows {
  std::vector<std::shared_ptr<const std::vector<float>>> keep;  // the tiles' embeddings
  std::vector<const float*> rows;
  std::vector<int32_t> attend_end;
};

class ImageEncoder {
 public:
  // Throws Error if the text model's vocabulary (tok) lacks the family's marker tokens.
  ImageEncoder(std::unique_ptr<VisionModel> model, const Tokenizer& tok, size_t cache_bytes);
  const VisionModel& model() const { return *model_; }

  // Splits `text` at kImageMarker: text pieces tokenized one by one (as llama.cpp's mtmd does,
  // add_bos before the first), each image's family markers and spans in place. text_only as
  // Tokenizer::Encode's (offsets in `text`). Throws Error if the markers and images differ in
  // number.
  std::vector<int32_t> Tokenize(const Tokenizer& tok, std::string_view text, bool add_bos,
                                const std::vector<std::pair<size_t, size_t>>* text_only,
                                std::vector<std::shared_ptr<const PixelTiles>> images,
                                std::shared_ptr<const PromptImages>* out) const;

  // The cached embeddings of a span's tile, or null.
  std::shared_ptr<const std::vector<float>> Cached(const PromptImages& p,
                                                   const PromptImages::Span& s);
  // Encodes a whole tile now (run, sync paths) and caches it.
  std::shared_ptr<const std::vector<float>> EncodeNow(const PromptImages& p,
                                                      const PromptImages::Span& s,
                                                      const KernelTable& k, ThreadPool& pool);
  // A stepped encode of one tile (the service's image steps): Start, then Continue until it
  // returns the embeddings (each call runs `units` quarter layers: VisionModel::Step).
  void Start(const PromptImages& p, const PromptImages::Span& s, const KernelTable& k,
             ThreadPool& pool);
  std::shared_ptr<const std::vector<float>> Continue(int units);
  // Every span's rows, encoding what the cache lacks now.
  ImageRows RowsNow(const PromptImages& p, const KernelTable& k, ThreadPool& pool);
  // The rows once every span is in `embeds` (one per span).
  static ImageRows Rows(const PromptImages& p,
                        std::vector<std::shared_ptr<const std::vector<float>>> embeds);

  uint64_t encoded_tiles() const { return encoded_; }
  double encode_seconds() const { return encode_seconds_; }

 private:
  static uint64_t Key(const PromptImages& p, const PromptImages::Span& s);
  void Put(uint64_t key, std::shared_ptr<const std::vector<float>> v);
  std::unique_ptr<VisionModel> model_;
  int32_t newline_ = -1;  // SmolVLM's row separator
  size_t cache_cap_, cache_bytes_ = 0;
  std::list<std::pair<uint64_t, std::shared_ptr<const std::vector<float>>>> lru_;
  std::unordered_map<uint64_t, decltype(lru_)::iterator> index_;
  // The stepped encode in progress.
  uint64_t job_key_ = 0;
  std::shared_ptr<std::vector<float>> job_out_;
  double job_start_ = 0;
  uint64_t encoded_ = 0;
  double encode_seconds_ = 0;
};

}  // namespace paddock
