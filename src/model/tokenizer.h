// model/tokenizer.h: the two vocabulary kinds of GGUF files.
//
// SentencePiece-style BPE (tokenizer.ggml.model "llama": Llama 2, TinyLlama, tinyllamas):
// merges adjacent symbols by the highest vocabulary score (ties: leftmost first), after
// replacing spaces with U+2581 and adding the dummy prefix; characters missing from the
// vocabulary fall back to <0xXX> byte tokens.
// Byte-level BPE (tokenizer.ggml.model "gpt2": GPT-2, Llama 3, Qwen, Mistral Nemo, SmolLM...):
// the text is split by the pre-tokenizer `tokenizer.ggml.pre` names (model/pretokenize.h), each
// piece's bytes become GPT-2's printable byte characters, and adjacent symbols merge in the
// order of `tokenizer.ggml.merges` (lowest rank first, ties leftmost).
// WordPiece (tokenizer.ggml.model "bert": BERT, bge, MiniLM, e5, nomic-embed): model/wordpiece.cpp.
// Unigram (tokenizer.ggml.model "t5": XLM-RoBERTa's bge-m3, multilingual-e5): model/unigram.cpp.
// All reproduce llama.cpp's tokenizers, so its test vectors apply. Control and user-defined
// tokens are matched whole in the text before either. Decoding maps every id to the exact
// bytes it stands for, prepared once at load, so the per-token path only appends.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace paddock {

class GgufFile;
class PreTokenizer;
struct Llama2cVocab;

enum class TokenAttr : uint8_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

class Tokenizer {
 public:
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;  // lookup_ points into pieces_
  Tokenizer& operator=(const Tokenizer&) = delete;
  // From GGUF `tokenizer.ggml.*` metadata; throws Error if absent or of an unsupported kind.
  static Tokenizer FromGguf(const GgufFile& gguf);
  // From a llama2.c tokenizer.bin (token kinds inferred from the conventional ids/spellings).
  static Tokenizer FromLlama2c(const Llama2cVocab& vocab);

  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  bool byte_level() const { return bpe_; }  // byte-level BPE (else SentencePiece)
  int bos() const { return bos_; }
  int eos() const { return eos_; }
  // The separator between a rerank pair's texts (BERT's [SEP], XLM-R's </s>); -1: none.
  int sep() const { return sep_; }
  bool wordpiece() const { return wpm_; }
  bool add_bos_default() const { return add_bos_; }
  // The vocabulary's tokenizer.ggml.add_eos_token / add_sep_token (llama.cpp's defaults per
  // vocabulary: WordPiece adds [SEP], not EOS; Unigram adds EOS): how specials and a
  // reranker's pairs are formed.
  bool add_eos_default() const { return add_eos_; }
  bool add_sep_default() const { return add_sep_; }
  // True for tokens that end a generation: EOS, the GGUF end-of-turn token, and the
  // conventional end-of-turn control tokens (<|im_end|>, <|eot_id|>, <end_of_turn>, <|end|>,
  // <|endoftext|>) when the vocabulary has them as control tokens. A harmony vocabulary
  // (gpt-oss) ends at <|return|> and <|call|>, not at <|end|>, and renders its header markers.
  bool IsEndOfGeneration(int id) const {
    for (int e : eog_) {
      if (e == id) return true;
    }
    return false;
  }
  const std::vector<int32_t>& end_of_generation() const { return eog_; }

  // Tokenizes `text`. parse_special: control tokens written in the text (e.g. "</s>") become
  // those tokens instead of being spelled out; user-defined tokens are always matched whole.
  // text_only: byte ranges [begin, end) where control tokens are never matched, even with
  // parse_special (a chat message's content inside a rendered template: a user typing "</s>"
  // must not end a turn). Sorted, not overlapping.
  using Spans = std::vector<std::pair<size_t, size_t>>;
  std::vector<int32_t> Encode(std::string_view text, bool add_bos, bool parse_special = false,
                              const Spans* text_only = nullptr) const;

  // The vocabulary entry of `id` as stored (e.g. "▁the", "<0x0A>").
  std::string_view Piece(int id) const { return pieces_[static_cast<size_t>(id)]; }
  TokenAttr Attr(int id) const { return attrs_[static_cast<size_t>(id)]; }
  // The bytes `id` decodes to: "" for control, unknown and unused tokens (as llama.cpp renders
  // them without `special`), unless RenderSpecial(true) made them show their stored text
  // (e.g. "<|im_end|>", a padding token's "[PAD32049]"). After BOS (or at the very start, when
  // `prev` < 0) a leading space is dropped, as SentencePiece decoders do.
  std::string_view Decode(int prev, int id) const;
  void RenderSpecial(bool on);

 private:
  Tokenizer() = default;
  void Finish();  // builds the lookup tables once pieces/scores/attrs are set
  void EncodeSpm(std::string_view text, std::vector<int32_t>* out) const;
  void EncodeBpe(std::string_view text, std::vector<int32_t>* out) const;
  void EncodeBpeWord(std::string_view word, std::vector<int32_t>* out) const;
  // WordPiece (model/wordpiece.cpp), once the pieces and special ids are set.
  void SetUpWordPiece();
  void EncodeWpm(std::string_view text, std::vector<int32_t>* out) const;
  // Unigram (model/unigram.cpp): its options, [UNK]'s score, the character map.
  void SetUpUnigram(const GgufFile& g);
  void EncodeUgm(std::string_view text, std::vector<int32_t>* out) const;
  std::string NormalizeUgm(std::string_view text) const;
  void SetUnigramCharsmap(std::string blob);
  std::string_view NormalizePrefix(std::string_view text, size_t i, size_t* used) const;
  int ByteToken(uint8_t b) const;

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<TokenAttr> attrs_;
  std::vector<std::string> decoded_;
  std::unordered_map<std::string_view, int32_t> lookup_;
  std::vector<int32_t> specials_;  // matched whole in text, longest first
  int byte_tokens_[256];
  // Byte-level BPE: pre-tokenizer, merges by token pair (left << 32 | right) -> (rank, merged
  // token), the token of each byte's printable character.
  bool bpe_ = false;
  bool ignore_merges_ = false;  // Llama 3 family: a piece that is itself a token is taken whole
  std::unique_ptr<PreTokenizer> pre_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  int32_t byte_char_token_[256];
  std::vector<int32_t> eog_;
  int eot_ = -1;
  int bos_ = 1, eos_ = 2, unk_ = 0;
  bool add_bos_ = true;
  bool add_sep_ = false;  // tokenizer.ggml.add_sep_token
  bool add_eos_ =
      false;  // tokenizer.ggml.add_eos_token: EOS after the text when specials are added
  bool add_space_prefix_ = true;
  // WordPiece (tokenizer.ggml.model "bert"): BERT's word split, then the longest vocabulary
  // entries left to right (a word's first piece spelled with U+2581, as llama.cpp converts
  // them); "add specials" puts [CLS] (bos_) in front and [SEP] (sep_) behind.
  bool wpm_ = false;
  int sep_ = -1;
  size_t max_piece_ = 0;
  // Unigram (tokenizer.ggml.model "t5"): Viterbi over the scores after the precompiled
  // character map's normalization (model/unigram.cpp).
  bool ugm_ = false;
  bool remove_extra_ws_ = false;
  float ugm_unk_score_ = 0;
  std::string charsmap_;  // tokenizer.ggml.precompiled_charsmap, as stored
  size_t xcda_bytes_ = 0;
};

}  // namespace paddock
