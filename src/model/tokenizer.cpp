#include "model/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <queue>

#include "base/strings.h"
#include "base/utf8.h"
#include "formats/gguf.h"
#include "formats/llama2c.h"
#include "model/pretokenize.h"

namespace paddock {

namespace {
constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581

bool ParseByteToken(std::string_view p, uint8_t* b) {
  if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return false;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int h = hex(p[3]), l = hex(p[4]);
  if (h < 0 || l < 0) return false;
  *b = static_cast<uint8_t>(h * 16 + l);
  return true;
}

// GPT-2's byte -> printable character map: bytes that are printable Latin-1 stand for
// themselves, the other 68 map to U+0100 onwards, in byte order.
uint32_t ByteToCodepoint(uint8_t b) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (int c = 0; c < 256; ++c) {
      const bool printable =
          (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
      t[static_cast<size_t>(c)] = printable ? static_cast<uint32_t>(c) : next++;
    }
    return t;
  }();
  return table[b];
}

// A byte-level piece ("Ġthe") back to its bytes (" the"); false if it holds a character that
// is not a byte character.
bool ByteLevelDecode(std::string_view piece, std::string* out) {
  static const auto inverse = [] {
    std::array<int16_t, 512> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b)
      t[ByteToCodepoint(static_cast<uint8_t>(b))] = static_cast<int16_t>(b);
    return t;
  }();
  size_t i = 0;
  while (i < piece.size()) {
    const auto c = static_cast<uint8_t>(piece[i]);
    uint32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < piece.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<uint8_t>(piece[i + 1]) & 0x3Fu);
      i += 2;
    } else {
      return false;
    }
    if (cp >= inverse.size() || inverse[cp] < 0) return false;
    out->push_back(static_cast<char>(inverse[cp]));
  }
  return true;
}

std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (s.substr(i, from.size()) == from) {
      out.append(to);
      i += from.size();
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}
}  // namespace

Tokenizer Tokenizer::FromGguf(const GgufFile& g) {
  auto model = g.GetString("tokenizer.ggml.model");
  if (!model) Fail("model file has no tokenizer (tokenizer.ggml.model missing); pass one with -z");
  if (*model != "llama" && *model != "gpt2" && *model != "bert" && *model != "t5") {
    Fail(
        "tokenizer type '%.*s' is not supported (supported: llama (SentencePiece), gpt2 "
        "(byte-level BPE), bert (WordPiece), t5 (Unigram))",
        (int)model->size(), model->data());
  }
  const bool bpe = *model == "gpt2";
  const bool wpm = *model == "bert";
  const bool ugm = *model == "t5";
  const auto* tokens = g.GetStringArray("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->empty()) Fail("tokenizer.ggml.tokens is missing or empty");
  Tokenizer t;
  const size_t n = tokens->size();
  t.pieces_.reserve(n);
  for (auto s : *tokens) t.pieces_.emplace_back(s);
  t.scores_ = g.GetFloatArray("tokenizer.ggml.scores");
  if (t.scores_.empty()) t.scores_.assign(n, 0.0f);
  if (t.scores_.size() != n) Fail("tokenizer has %zu tokens but %zu scores", n, t.scores_.size());
  const auto types = g.GetIntArray("tokenizer.ggml.token_type");
  if (!types.empty() && types.size() != n)
    Fail("tokenizer has %zu tokens but %zu token types", n, types.size());
  t.attrs_.resize(n, TokenAttr::kNormal);
  for (size_t i = 0; i < types.size(); ++i) {
    const int64_t ty = types[i];
    t.attrs_[i] = (ty >= 1 && ty <= 6) ? static_cast<TokenAttr>(ty) : TokenAttr::kNormal;
  }
  if (types.empty()) {
    for (size_t i = 0; i < n; ++i) {
      uint8_t b;
      if (ParseByteToken(t.pieces_[i], &b)) t.attrs_[i] = TokenAttr::kByte;
    }
  }
  auto id = [&](const char* key, int dflt) {
    auto v = g.GetInt(key);
    if (!v) return dflt;
    if (*v < 0 || static_cast<size_t>(*v) >= n)
      Fail("%s = %lld is not a token id", key, (long long)*v);
    return static_cast<int>(*v);
  };
  // WordPiece: BERT's [CLS] 101, [SEP] 102, [UNK] 100 unless the file says (llama.cpp's
  // defaults; its converter writes the separator as "seperator_token_id").
  t.bos_ = id("tokenizer.ggml.bos_token_id", wpm   ? id("tokenizer.ggml.cls_token_id", 101)
                                             : ugm ? -1
                                                   : 1);
  t.eos_ = id("tokenizer.ggml.eos_token_id", wpm ? -1 : ugm ? 1 : 2);
  t.unk_ = id("tokenizer.ggml.unknown_token_id", wpm ? 100 : ugm ? 2 : 0);
  t.sep_ = wpm || ugm ? id("tokenizer.ggml.seperator_token_id", wpm ? 102 : -1) : -1;
  if (wpm) t.SetUpWordPiece();
  t.eot_ = id("tokenizer.ggml.eot_token_id", -1);
  t.add_bos_ = g.GetBool("tokenizer.ggml.add_bos_token").value_or((!bpe || wpm) && !ugm);
  t.add_eos_ = g.GetBool("tokenizer.ggml.add_eos_token").value_or(ugm && !wpm);
  t.add_sep_ = g.GetBool("tokenizer.ggml.add_sep_token").value_or(wpm);
  t.add_space_prefix_ = g.GetBool("tokenizer.ggml.add_space_prefix").value_or(!bpe && !wpm);
  if (ugm) t.SetUpUnigram(g);
  if (bpe) {
    t.bpe_ = true;
    const auto pre = g.GetString("tokenizer.ggml.pre");
    t.pre_ = std::make_unique<PreTokenizer>(pre ? std::string(*pre) : "default");
    // As the reference tokenizers of these vocabularies (llama.cpp sets the same flag for them).
    const std::string pn = pre ? std::string(*pre) : "";
    t.ignore_merges_ = pn == "llama3" || pn == "llama-v3" || pn == "llama-bpe" || pn == "falcon3" ||
                       g.GetBool("tokenizer.ggml.ignore_merges").value_or(false);
    const auto* merges = g.GetStringArray("tokenizer.ggml.merges");
    if (merges == nullptr) Fail("byte-level BPE vocabulary without tokenizer.ggml.merges");
    std::unordered_map<std::string_view, int32_t> ids;
    ids.reserve(n * 2);
    for (size_t i = 0; i < n; ++i) ids.emplace(t.pieces_[i], static_cast<int32_t>(i));
    t.merges_.reserve(merges->size() * 2);
    for (size_t r = 0; r < merges->size(); ++r) {
      const std::string_view m = (*merges)[r];
      const size_t sp = m.find(' ', 1);
      if (sp == std::string_view::npos)
        Fail("BPE merge %zu ('%.*s') is not 'left right'", r, (int)m.size(), m.data());
      const std::string_view left = m.substr(0, sp), right = m.substr(sp + 1);
      auto l = ids.find(left), rr = ids.find(right);
      std::string joined(left);
      joined.append(right);
      auto j = ids.find(joined);
      if (l == ids.end() || rr == ids.end() || j == ids.end())
        continue;  // a merge whose result is not a token can never apply
      const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(l->second)) << 32) |
                           static_cast<uint32_t>(rr->second);
      t.merges_.emplace(
          key, std::make_pair(static_cast<int32_t>(r), j->second));  // first (lowest) rank wins
    }
  }
  t.Finish();
  return t;
}

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::FromLlama2c(const Llama2cVocab& v) {
  Tokenizer t;
  // llama2.c's exporter wrote U+2581 as a plain space and the specials as "\n<s>\n"; restore
  // the SentencePiece spellings so both file formats tokenize identically.
  t.pieces_.reserve(v.pieces.size());
  for (const auto& p : v.pieces) t.pieces_.push_back(ReplaceAll(p, " ", kSpaceMarker));
  if (t.pieces_.size() > 2 && t.pieces_[1] == "\n<s>\n") t.pieces_[1] = "<s>";
  if (t.pieces_.size() > 2 && t.pieces_[2] == "\n</s>\n") t.pieces_[2] = "</s>";
  t.scores_ = v.scores;
  const size_t n = t.pieces_.size();
  if (n < 3) Fail("llama2.c tokenizer has only %zu tokens", n);
  t.attrs_.assign(n, TokenAttr::kNormal);
  t.attrs_[0] = TokenAttr::kUnknown;
  t.attrs_[1] = TokenAttr::kControl;
  t.attrs_[2] = TokenAttr::kControl;
  for (size_t i = 3; i < n; ++i) {
    uint8_t b;
    if (ParseByteToken(t.pieces_[i], &b)) t.attrs_[i] = TokenAttr::kByte;
  }
  t.Finish();
  return t;
}

void Tokenizer::Finish() {
  const size_t n = pieces_.size();
  lookup_.clear();
  lookup_.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) lookup_.emplace(pieces_[i], static_cast<int32_t>(i));
  auto control = [&](const char* name) {
    auto it = lookup_.find(name);
    return it != lookup_.end() && attrs_[static_cast<size_t>(it->second)] == TokenAttr::kControl
               ? it->second
               : -1;
  };
  // gpt-oss's harmony vocabulary: a reply is several messages, so <|end|> ends a message, not
  // the generation (<|return|> and <|call|> do); the header markers are text the chat layer
  // parses (HarmonyParser), rendered and matched as user-defined tokens, as llama.cpp does.
  const int h_return = control("<|return|>"), h_call = control("<|call|>");
  const bool harmony = h_return >= 0 && h_call >= 0 && control("<|channel|>") >= 0 &&
                       control("<|message|>") >= 0 && control("<|start|>") >= 0;
  if (harmony) {
    for (const char* name : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
      const int id = control(name);
      if (id >= 0) attrs_[static_cast<size_t>(id)] = TokenAttr::kUserDefined;
    }
  }
  for (int& b : byte_tokens_) b = -1;
  decoded_.assign(n, std::string());
  for (size_t i = 0; i < n; ++i) {
    uint8_t b;
    switch (attrs_[i]) {
      case TokenAttr::kByte:
        if (ParseByteToken(pieces_[i], &b)) {
          if (byte_tokens_[b] < 0) byte_tokens_[b] = static_cast<int>(i);
          decoded_[i].assign(1, static_cast<char>(b));
        }
        break;
      case TokenAttr::kControl:
      case TokenAttr::kUnused:
      case TokenAttr::kUnknown:  // (as llama.cpp: not text unless asked; see RenderSpecial)
        break;
      case TokenAttr::kUserDefined:
        decoded_[i] = bpe_ ? pieces_[i] : ReplaceAll(pieces_[i], kSpaceMarker, " ");
        break;
      default:
        if (!bpe_) {
          decoded_[i] = ReplaceAll(pieces_[i], kSpaceMarker, " ");
        } else if (!ByteLevelDecode(pieces_[i], &decoded_[i])) {
          decoded_[i] = pieces_[i];  // not byte-level text: shown as stored
        }
        break;
    }
    if (attrs_[i] == TokenAttr::kControl || attrs_[i] == TokenAttr::kUserDefined) {
      if (!pieces_[i].empty()) specials_.push_back(static_cast<int32_t>(i));
    }
  }
  std::sort(specials_.begin(), specials_.end(), [&](int a, int b) {
    return pieces_[static_cast<size_t>(a)].size() > pieces_[static_cast<size_t>(b)].size();
  });
  if (bpe_) {
    for (int b = 0; b < 256; ++b) {
      std::string ch;
      AppendUtf8(ByteToCodepoint(static_cast<uint8_t>(b)), &ch);
      auto it = lookup_.find(ch);
      byte_char_token_[b] = it != lookup_.end() ? it->second : unk_;
    }
  }
  eog_.clear();
  auto add_eog = [&](int id) {
    if (id >= 0 && static_cast<size_t>(id) < n &&
        std::find(eog_.begin(), eog_.end(), id) == eog_.end())
      eog_.push_back(id);
  };
  add_eog(eos_);
  add_eog(eot_);
  for (const char* name :
       {"<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>", "<|eom_id|>"})
    add_eog(control(name));
  if (harmony) {
    add_eog(h_return);
    add_eog(h_call);
    const int end = control("<|end|>");
    eog_.erase(std::remove(eog_.begin(), eog_.end(), end), eog_.end());
  }
}

void Tokenizer::RenderSpecial(bool on) {
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const TokenAttr a = attrs_[i];
    if (a == TokenAttr::kControl || a == TokenAttr::kUnused || a == TokenAttr::kUnknown)
      decoded_[i] = on ? pieces_[i] : std::string();
  }
}

std::string_view Tokenizer::Decode(int prev, int id) const {
  if (id < 0 || id >= vocab_size()) return {};
  std::string_view s = decoded_[static_cast<size_t>(id)];
  if (!bpe_ && (prev < 0 || prev == bos_) && !s.empty() && s[0] == ' ') s.remove_prefix(1);
  return s;
}

int Tokenizer::ByteToken(uint8_t b) const {
  if (byte_tokens_[b] >= 0) return byte_tokens_[b];
  const char c = static_cast<char>(b);
  auto it = lookup_.find(std::string_view(&c, 1));
  return it != lookup_.end() ? it->second : unk_;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos, bool parse_special,
                                       const Spans* text_only) const {
  std::vector<int32_t> out;
  if (add_bos && bos_ >= 0) out.push_back(bos_);
  bool prev_special = true;  // the dummy prefix goes before the first text fragment
  size_t start = 0;
  auto emit_text = [&](std::string_view frag) {
    if (frag.empty()) return;
    if (bpe_) {
      EncodeBpe(frag, &out);
      return;
    }
    if (wpm_) {
      EncodeWpm(frag, &out);
      return;
    }
    if (ugm_) {
      EncodeUgm(frag, &out);
      return;
    }
    std::string s;
    if (add_space_prefix_ && prev_special) s.push_back(' ');
    s.append(frag);
    EncodeSpm(ReplaceAll(s, " ", kSpaceMarker), &out);
    prev_special = false;
  };
  // Whether [b, e) overlaps a text-only range (span_i: the first range that may still).
  size_t span_i = 0;
  auto protected_at = [&](size_t b, size_t e) {
    if (text_only == nullptr) return false;
    while (span_i < text_only->size() && (*text_only)[span_i].second <= b) ++span_i;
    return span_i < text_only->size() && (*text_only)[span_i].first < e;
  };
  size_t i = 0;
  while (i < text.size()) {
    int match = -1;
    for (int32_t id : specials_) {
      const TokenAttr a = attrs_[static_cast<size_t>(id)];
      if (a == TokenAttr::kControl && !parse_special) continue;
      const std::string& p = pieces_[static_cast<size_t>(id)];
      if (a == TokenAttr::kControl && protected_at(i, i + p.size())) continue;
      if (text.compare(i, p.size(), p) == 0) {
        match = id;
        break;
      }
    }
    if (match < 0) {
      ++i;
      continue;
    }
    emit_text(text.substr(start, i - start));
    out.push_back(match);
    prev_special = true;
    i += pieces_[static_cast<size_t>(match)].size();
    start = i;
  }
  emit_text(text.substr(start));
  if (add_bos && wpm_ && add_sep_ && sep_ >= 0) {
    out.push_back(sep_);  // BERT: [CLS] text [SEP]
  } else if (add_bos && add_eos_ && eos_ >= 0) {
    out.push_back(eos_);  // "add specials": both ends, as the vocabulary asks
  }
  return out;
}

void Tokenizer::EncodeBpe(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<std::string_view> words;
  pre_->Split(text, &words);
  for (std::string_view w : words) EncodeBpeWord(w, out);
}

// Merges one pre-tokenized piece: symbols start as the tokens of its bytes' characters; the
// adjacent pair with the lowest merge rank (leftmost on ties) merges until none applies.
void Tokenizer::EncodeBpeWord(std::string_view word, std::vector<int32_t>* out) const {
  const size_t n = word.size();
  if (n == 0) return;
  if (ignore_merges_ && n > 1) {
    thread_local std::string chars;
    chars.clear();
    for (char c : word) AppendUtf8(ByteToCodepoint(static_cast<uint8_t>(c)), &chars);
    auto it = lookup_.find(chars);
    if (it != lookup_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  thread_local std::vector<int32_t> sym;
  sym.resize(n);
  for (size_t i = 0; i < n; ++i) sym[i] = byte_char_token_[static_cast<uint8_t>(word[i])];
  size_t len = n;
  auto rank_of = [&](size_t i, int32_t* merged) {
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(sym[i])) << 32) |
                         static_cast<uint32_t>(sym[i + 1]);
    auto it = merges_.find(key);
    if (it == merges_.end()) return INT32_MAX;
    *merged = it->second.second;
    return it->second.first;
  };
  if (len > 1) {
    // Pieces are short (words, number groups, whitespace runs): a linear scan per merge beats
    // a heap here; ranks of untouched pairs are cached.
    thread_local std::vector<int32_t> rank, merged;
    rank.resize(len);
    merged.resize(len);
    for (size_t i = 0; i + 1 < len; ++i) rank[i] = rank_of(i, &merged[i]);
    for (;;) {
      size_t best = SIZE_MAX;
      int32_t best_rank = INT32_MAX;
      for (size_t i = 0; i + 1 < len; ++i) {
        if (rank[i] < best_rank) {
          best_rank = rank[i];
          best = i;
        }
      }
      if (best == SIZE_MAX) break;
      sym[best] = merged[best];
      for (size_t i = best + 1; i + 1 < len; ++i) {
        sym[i] = sym[i + 1];
        rank[i] = rank[i + 1];
        merged[i] = merged[i + 1];
      }
      --len;
      if (best + 1 < len) rank[best] = rank_of(best, &merged[best]);
      if (best > 0) rank[best - 1] = rank_of(best - 1, &merged[best - 1]);
    }
  }
  out->insert(out->end(), sym.begin(), sym.begin() + static_cast<std::ptrdiff_t>(len));
}

void Tokenizer::EncodeSpm(std::string_view text, std::vector<int32_t>* out) const {
  struct Symbol {
    int prev, next;
    size_t off, n;
  };
  struct Bigram {
    int left, right;
    float score;
    size_t size;
  };
  struct Cmp {
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };
  std::vector<Symbol> sym;
  for (size_t off = 0; off < text.size();) {
    // Character length by the lead byte's high bits, as SentencePiece/llama.cpp split.
    static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    const size_t len =
        std::min<size_t>(kLen[static_cast<uint8_t>(text[off]) >> 4], text.size() - off);
    const int idx = static_cast<int>(sym.size());
    sym.push_back({idx - 1, idx + 1, off, len});
    off += len;
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  std::priority_queue<Bigram, std::vector<Bigram>, Cmp> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t n = sym[left].n + sym[right].n;
    auto it = lookup_.find(text.substr(sym[left].off, n));
    if (it == lookup_.end()) return;
    queue.push({left, right, scores_[static_cast<size_t>(it->second)], n});
  };
  for (size_t k = 1; k < sym.size(); ++k) try_add(static_cast<int>(k) - 1, static_cast<int>(k));

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int k = 0; k >= 0; k = sym[k].next) {
    const std::string_view piece = text.substr(sym[k].off, sym[k].n);
    auto it = lookup_.find(piece);
    if (it != lookup_.end()) {
      out->push_back(it->second);
    } else {
      for (char c : piece) out->push_back(ByteToken(static_cast<uint8_t>(c)));
    }
  }
}

}  // namespace paddock
