// engine/images.cpp: prompts with images (markers, spans, placeholder ids) and the encoder's
// cache.
#include "engine/images.h"

#include <algorithm>

#include "base/strings.h"
#include "base/timer.h"
#include "model/tokenizer.h"
#include "paddock/error.h"

namespace paddock {

namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The image's tile `tile`: its identity in the encoder's cache and the seed of its
// placeholder ids.
uint64_t TileKey(const PixelTiles& px, int tile) {
  return Mix(px.hash ^ (static_cast<uint64_t>(tile) << 48));
}

// The id whose text is exactly `s` (as llama.cpp's mtmd looks its markers up; a newline: the
// SentencePiece byte token or byte-level BPE's), or -1.
int32_t FindPiece(const Tokenizer& tok, std::string_view s) {
  for (int id = 0; id < tok.vocab_size(); ++id)
    if (tok.Piece(id) == s) return id;
  if (s == "\n") {
    for (int id = 0; id < tok.vocab_size(); ++id)
      if (tok.Piece(id) == "<0x0A>" || tok.Piece(id) == "\xc4\x8a") return id;
  }
  return -1;
}

}  // namespace

ImageEncoder::ImageEncoder(std::unique_ptr<VisionModel> model, const Tokenizer& tok,
                           size_t cache_bytes)
    : model_(std::move(model)), cache_cap_(cache_bytes) {
  // The family's marker tokens must be in the text model's vocabulary (once, here).
  const Projector proj = model_->config().projector;
  std::vector<std::string_view> markers;
  if (proj == Projector::kGemma3) markers = {"<start_of_image>", "<end_of_image>"};
  if (proj == Projector::kIdefics3)
    markers = {"<fake_token_around_image>", "<global-img>", "<row_1_col_1>", "\n"};
  for (const std::string_view mk : markers) {
    const int32_t id = FindPiece(tok, mk);
    if (id < 0)
      Fail(
          "the projector %s (%s) marks images with '%.*s', which the model's vocabulary lacks: "
          "a projector for another model",
          model_->path().c_str(), ProjectorName(proj), static_cast<int>(mk.size()), mk.data());
    if (mk == "\n") newline_ = id;
  }
}

std::vector<int32_t> ImageEncoder::Tokenize(const Tokenizer& tok, std::string_view text,
                                            bool add_bos,
                                            const std::vector<std::pair<size_t, size_t>>* text_only,
                                            std::vector<std::shared_ptr<const PixelTiles>> images,
                                            std::shared_ptr<const PromptImages>* out) const {
  auto p = std::make_shared<PromptImages>();
  p->images = std::move(images);
  std::vector<int32_t> ids;
  const VisionConfig& c = model_->config();
  const int per_tile = c.TokensPerTile();
  const auto text_piece = [&](size_t b, size_t e) {
    if (e <= b && !(add_bos && ids.empty())) return;
    std::vector<std::pair<size_t, size_t>> spans;
    if (text_only != nullptr)
      for (const auto& [sb, se] : *text_only) {
        const size_t lo = std::max(sb, b), hi = std::min(se, e);
        if (lo < hi) spans.emplace_back(lo - b, hi - b);
      }
    const std::vector<int32_t> t =
        tok.Encode(text.substr(b, e - b), add_bos && ids.empty(), true, &spans);
    ids.insert(ids.end(), t.begin(), t.end());
  };
  const auto special = [&](std::string_view s) {
    const std::vector<int32_t> t = tok.Encode(s, false, true);
    ids.insert(ids.end(), t.begin(), t.end());
  };
  const auto span = [&](int image, int tile) {
    PromptImages::Span s;
    s.start = static_cast<int>(ids.size());
    s.n = per_tile;
    s.image = image;
    s.tile = tile;
    s.bidirectional = c.projector == Projector::kGemma3;
    const uint64_t h = TileKey(*p->images[static_cast<size_t>(image)], tile);
    for (int i = 0; i < per_tile; ++i)
      ids.push_back(static_cast<int32_t>(Mix(h + static_cast<uint64_t>(i)) %
                                         static_cast<uint64_t>(tok.vocab_size())));
    p->spans.push_back(s);
  };
  size_t at = 0;
  int image = 0;
  for (;;) {
    const size_t m = text.find(kImageMarker, at);
    if (m == std::string_view::npos) break;
    if (image >= static_cast<int>(p->images.size()))
      Fail("the prompt has more image markers than images (%zu)", p->images.size());
    text_piece(at, m);
    const PixelTiles& px = *p->images[static_cast<size_t>(image)];
    switch (c.projector) {
      case Projector::kMlp:
        span(image, 0);
        break;
      case Projector::kGemma3:
        special("<start_of_image>");
        span(image, 0);
        special("<end_of_image>");
        break;
      case Projector::kIdefics3: {
        // llama.cpp's mtmd layout (after transformers' Idefics3 processor): the tiles row by
        // row, each after <fake_token_around_image><row_Y_col_X>, a newline between rows, then
        // the overview after "\n<fake_token_around_image><global-img>".
        const int32_t nl = newline_;
        special("<fake_token_around_image>");
        int tile = 0;
        for (int y = 0; y < px.grid_y; ++y) {
          for (int x = 0; x < px.grid_x; ++x) {
            special(StrFormat("<fake_token_around_image><row_%d_col_%d>", y + 1, x + 1));
            span(image, tile++);
          }
          if (y + 1 < px.grid_y) ids.push_back(nl);
        }
        ids.push_back(nl);
        special("<fake_token_around_image><global-img>");
        span(image, tile);
        special("<fake_token_around_image>");
        break;
      }
    }
    ++image;
    at = m + kImageMarker.size();
  }
  if (image != static_cast<int>(p->images.size()))
    Fail("the prompt has %d image markers for %zu images", image, p->images.size());
  text_piece(at, text.size());
  p->n_prompt = static_cast<int>(ids.size());
  *out = std::move(p);
  return ids;
}

uint64_t ImageEncoder::Key(const PromptImages& p, const PromptImages::Span& s) {
  return TileKey(*p.images[static_cast<size_t>(s.image)], s.tile);
}

std::shared_ptr<const std::vector<float>> ImageEncoder::Cached(const PromptImages& p,
                                                               const PromptImages::Span& s) {
  const auto it = index_.find(Key(p, s));
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void ImageEncoder::Put(uint64_t key, std::shared_ptr<const std::vector<float>> v) {
  if (index_.count(key) != 0) return;
  cache_bytes_ += v->size() * sizeof(float);
  lru_.emplace_front(key, std::move(v));
  index_[key] = lru_.begin();
  while (cache_bytes_ > cache_cap_ && lru_.size() > 1) {
    cache_bytes_ -= lru_.back().second->size() * sizeof(float);
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

std::shared_ptr<const std::vector<float>> ImageEncoder::EncodeNow(const PromptImages& p,
                                                                  const PromptImages::Span& s,
                                                                  const KernelTable& k,
                                                                  ThreadPool& pool) {
  Start(p, s, k, pool);
  for (;;)
    if (auto v = Continue(1 << 20)) return v;
}

void ImageEncoder::Start(const PromptImages& p, const PromptImages::Span& s, const KernelTable& k,
                         ThreadPool& pool) {
  const VisionConfig& c = model_->config();
  job_key_ = Key(p, s);
  job_out_ = std::make_shared<std::vector<float>>(static_cast<size_t>(s.n) * c.text_dim);
  job_start_ = NowSeconds();
  const PixelTiles& px = *p.images[static_cast<size_t>(s.image)];
  model_->Begin(px.tiles[static_cast<size_t>(s.tile)].data(), k, pool);
}

std::shared_ptr<const std::vector<float>> ImageEncoder::Continue(int units) {
  if (!model_->Step(units, job_out_->data())) return nullptr;
  encode_seconds_ += NowSeconds() - job_start_;
  ++encoded_;
  std::shared_ptr<const std::vector<float>> v = std::move(job_out_);
  Put(job_key_, v);
  return v;
}

ImageRows ImageEncoder::RowsNow(const PromptImages& p, const KernelTable& k, ThreadPool& pool) {
  std::vector<std::shared_ptr<const std::vector<float>>> e;
  for (const auto& s : p.spans) {
    auto v = Cached(p, s);
    e.push_back(v != nullptr ? v : EncodeNow(p, s, k, pool));
  }
  return Rows(p, std::move(e));
}

ImageRows ImageEncoder::Rows(const PromptImages& p,
                             std::vector<std::shared_ptr<const std::vector<float>>> embeds) {
  ImageRows r;
  r.rows.assign(static_cast<size_t>(p.n_prompt), nullptr);
  bool bidir = false;
  for (size_t i = 0; i < p.spans.size(); ++i) {
    const auto& s = p.spans[i];
    const size_t dim = embeds[i]->size() / static_cast<size_t>(s.n);
    for (int t = 0; t < s.n; ++t)
      r.rows[static_cast<size_t>(s.start + t)] = embeds[i]->data() + static_cast<size_t>(t) * dim;
    bidir = bidir || s.bidirectional;
  }
  if (bidir) {
    r.attend_end.assign(static_cast<size_t>(p.n_prompt), 0);
    for (const auto& s : p.spans)
      if (s.bidirectional)
        for (int t = 0; t < s.n; ++t)
          r.attend_end[static_cast<size_t>(s.start + t)] = s.start + s.n;
  }
  r.keep = std::move(embeds);
  return r;
}

}  // namespace paddock
