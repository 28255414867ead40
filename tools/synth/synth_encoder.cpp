// synth/synth_encoder.cpp: synthetic encoders (BERT, NomicBERT) in llama.cpp's layout, with a
// WordPiece vocabulary: the retrieval models' shapes for tests, agreement with llama.cpp and
// speed work (`paddock synth --shape bge-base`).
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "base/strings.h"
#include "base/utf8.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "synth/synth.h"
#include "synth/synth_rng.h"

namespace paddock {

namespace {

constexpr std::string_view kMarker = "\xE2\x96\x81";

// BERT's layout: [PAD] 0, [unused0..98], [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103; then
// each character a word can start with or continue (ASCII, Latin-1 and Cyrillic letters, some
// CJK), common English words whole, then two- and three-letter pieces in both forms until n.
void WordPieceVocab(int n, std::vector<std::string>* pieces, std::vector<int32_t>* types) {
  if (n < 1000) Fail("a synthetic WordPiece vocabulary needs at least 1000 tokens (got %d)", n);
  std::set<std::string> seen;  // each entry once
  auto add = [&](std::string p, int type) {
    if (static_cast<int>(pieces->size()) < n && seen.insert(p).second) {
      pieces->push_back(std::move(p));
      types->push_back(type);
    }
  };
  add("[PAD]", 3);
  for (int i = 0; i < 99; ++i) add(StrFormat("[unused%d]", i), 3);
  add("[UNK]", 2);
  add("[CLS]", 3);
  add("[SEP]", 3);
  add("[MASK]", 3);
  auto both = [&](const std::string& s) {
    add(std::string(kMarker) + s, 1);
    add(s, 1);
  };
  for (char c = 33; c < 127; ++c)
    if (c < 'A' || c > 'Z') both(std::string(1, c));
  // Code points [first, last]: each a word start and a continuation, or (CJK) a word alone.
  auto chars = [&](uint32_t first, uint32_t last, bool alone) {
    for (uint32_t c = first; c <= last; ++c) {
      std::string s;
      AppendUtf8(c, &s);
      if (alone) {
        add(std::string(kMarker) + s, 1);
      } else {
        both(s);
      }
    }
  };
  chars(0xDF, 0xFF, false);          // Latin-1 lower case
  chars(0x430, 0x44F, false);        // Cyrillic lower case
  chars(0x4E00, 0x4E00 + 63, true);  // CJK: words of their own
  for (const char* w :
       {"the",    "of",         "and",     "to",     "in",       "is",       "was",
        "for",    "that",       "on",      "with",   "as",       "it",       "by",
        "at",     "from",       "his",     "an",     "are",      "were",     "which",
        "this",   "be",         "or",      "has",    "had",      "not",      "but",
        "first",  "one",        "their",   "its",    "new",      "after",    "who",
        "they",   "have",       "her",     "she",    "two",      "been",     "other",
        "when",   "there",      "all",     "during", "into",     "school",   "time",
        "may",    "years",      "more",    "most",   "only",     "over",     "city",
        "some",   "world",      "would",   "where",  "later",    "up",       "such",
        "used",   "many",       "can",     "state",  "about",    "national", "out",
        "known",  "university", "united",  "then",   "made",     "hello",    "how",
        "you",    "what",       "model",   "memory", "engine",   "query",    "document",
        "search", "retrieval",  "passage", "answer", "question", "paris",    "capital",
        "france", "river",      "ing",     "ed",     "er",       "ly",       "ion",
        "ation",  "es",         "s"})
    both(w);
  for (int len = 2; len <= 3; ++len) {
    const int count = len == 2 ? 26 * 26 : 26 * 26 * 26;
    for (int i = 0; i < count && static_cast<int>(pieces->size()) < n; ++i) {
      std::string s;
      for (int k = 0, v = i; k < len; ++k, v /= 26)
        s.insert(s.begin(), static_cast<char>('a' + v % 26));
      both(s);
    }
  }
  for (int i = 0; static_cast<int>(pieces->size()) < n; ++i) add(StrFormat("[pad%d]", i), 5);
}

// XLM-RoBERTa's layout: <s> 0, <pad> 1, </s> 2, <unk> 3, then pieces with log-probability
// scores (the word-start form of each character and common word, continuations, two- and
// three-letter pieces), <mask> last.
void UnigramVocab(int n, std::vector<std::string>* pieces, std::vector<float>* scores,
                  std::vector<int32_t>* types) {
  WordPieceVocab(n - 1, pieces, types);  // the same pieces after BERT's 104 specials
  pieces->erase(pieces->begin(), pieces->begin() + 104);
  types->erase(types->begin(), types->begin() + 104);
  const std::vector<std::string> specials = {"<s>", "<pad>", "</s>", "<unk>"};
  pieces->insert(pieces->begin(), specials.begin(), specials.end());
  types->insert(types->begin(), {3, 3, 3, 2});
  for (char c = 'A'; c <= 'Z'; ++c) {  // cased, as XLM-R is
    for (const std::string& p : {std::string(kMarker) + c, std::string(1, c)}) {
      pieces->push_back(p);
      types->push_back(1);
    }
  }
  synth_detail::Rng rng(17);
  scores->assign(pieces->size(), 0.0f);
  for (size_t i = 4; i < pieces->size(); ++i)
    (*scores)[i] = -std::log(static_cast<float>(i)) - 0.5f * (1.0f + rng.Uniform());
  while (static_cast<int>(pieces->size()) < n - 1) {
    pieces->push_back(StrFormat("<extra%zu>", pieces->size()));
    types->push_back(5);
    scores->push_back(0);
  }
  pieces->push_back("<mask>");
  types->push_back(4);
  scores->push_back(0);
}

// A trie of byte strings, each key ending in its replacement's offset.
struct CharTrie {
  struct Node {
    std::map<unsigned char, int> next;
    int value = -1;  // offset of the replacement
  };
  std::vector<Node> nodes{1};
  void Add(const std::string& key, int value) {
    int at = 0;
    for (unsigned char c : key) {
      auto& next = nodes[static_cast<size_t>(at)].next;
      auto it = next.find(c);
      if (it == next.end()) {
        it = next.emplace(c, static_cast<int>(nodes.size())).first;
        nodes.push_back({});  // (after the insertion: `next` may move)
      }
      at = it->second;
    }
    nodes[static_cast<size_t>(at)].value = value;
  }
};

// The trie as SentencePiece's XOR-compressed double array: node t at index n has its children
// (and its value, at byte 0) at m ^ c for the first m where all are free; BASE(n) = n ^ m.
class XcdaBuilder {
 public:
  explicit XcdaBuilder(const CharTrie& t) : t_(t) { Place(0, 0); }
  // Sized so every index a lookup can reach (a node's m XOR any byte) is inside, as real maps.
  std::vector<uint32_t> Array() {
    size_t size = 256;
    while (size < a_.size()) size *= 2;
    a_.resize(size, 0);
    return a_;
  }

 private:
  bool Free(size_t i) const { return i != 0 && !(i < used_.size() && used_[i]); }
  uint32_t& Slot(size_t i) {
    if (i >= a_.size()) {
      a_.resize(i + 1, 0);
      used_.resize(i + 1, false);
    }
    used_[i] = true;
    return a_[i];
  }
  void Place(int t, size_t n) {
    const CharTrie::Node& node = t_.nodes[static_cast<size_t>(t)];
    size_t m = 1;
    for (;; ++m) {
      bool ok = node.value < 0 || Free(m);
      for (const auto& [c, child] : node.next) ok = ok && Free(m ^ c);
      if (ok) break;
    }
    Slot(n) |= static_cast<uint32_t>(n ^ m) << 10;
    if (node.value >= 0) Slot(m) = (1u << 31) | static_cast<uint32_t>(node.value);
    for (const auto& [c, child] : node.next)
      Slot(m ^ c) = c | (t_.nodes[static_cast<size_t>(child)].value >= 0 ? 1u << 8 : 0);
    for (const auto& [c, child] : node.next) Place(child, m ^ c);
  }
  const CharTrie& t_;
  std::vector<uint32_t> a_ = {0};
  std::vector<bool> used_ = {true};
};

// SentencePiece's precompiled character map for a few NFKC mappings (fullwidth letters, a
// ligature, a circled digit, the trademark sign, no-break and ideographic spaces, a fullwidth
// comma): the array's byte size, the array, then the replacement strings.
std::string Charsmap() {
  const std::vector<std::pair<std::string, std::string>> maps = {
      {"\xEF\xBC\xA1", "A"},  {"\xEF\xBD\x82", "b"}, {"\xEF\xAC\x81", "fi"}, {"\xE2\x91\xA0", "1"},
      {"\xE2\x84\xA2", "TM"}, {"\xC2\xA0", " "},     {"\xE3\x80\x80", " "},  {"\xEF\xBC\x8C", ","}};
  CharTrie trie;
  std::string repl;
  for (const auto& [key, to] : maps) {
    trie.Add(key, static_cast<int>(repl.size()));
    repl += to;
    repl.push_back('\0');
  }
  const std::vector<uint32_t> a = XcdaBuilder(trie).Array();
  std::string blob(4, '\0');
  const auto bytes = static_cast<uint32_t>(a.size() * 4);
  std::memcpy(&blob[0], &bytes, 4);
  blob.append(reinterpret_cast<const char*>(a.data()), a.size() * 4);
  return blob + repl;
}

// The vocabulary of another GGUF file (a real BERT vocabulary: llama.cpp's
// ggml-vocab-bert-bge.gguf), with its token types.
void CopyVocab(const std::string& path, std::vector<std::string>* pieces,
               std::vector<int32_t>* types) {
  const GgufFile g = GgufFile::Open(path, false);
  const auto model = g.GetString("tokenizer.ggml.model");
  if (!model || *model != "bert")
    Fail("%s: not a WordPiece vocabulary (tokenizer.ggml.model is not 'bert')", path.c_str());
  const auto* tokens = g.GetStringArray("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->empty()) Fail("%s: no tokenizer.ggml.tokens", path.c_str());
  for (auto t : *tokens) pieces->emplace_back(t);
  for (int64_t t : g.GetIntArray("tokenizer.ggml.token_type"))
    types->push_back(static_cast<int32_t>(t));
  if (types->size() != pieces->size()) types->assign(pieces->size(), 1);
}

class EncoderTensors {
 public:
  EncoderTensors(const SynthSpec& s, GgufWriter* w) : s_(s), w_(w), rng_(s.seed) {}

  void Write() {
    const int d = s_.dim;
    Matrix("token_embd.weight", d, s_.n_vocab, 1.0f);
    Matrix("token_types.weight", d, s_.tokenizer == "t5" ? 1 : 2, 0.3f, true);
    if (s_.arch == "bert") Matrix("position_embd.weight", d, s_.context, 0.5f);
    Vec("token_embd_norm.weight", d, 1.0f, 0.1f);
    Vec("token_embd_norm.bias", d, 0.0f, 0.1f);
    for (int l = 0; l < s_.n_layers; ++l) Layer(StrFormat("blk.%d.", l));
    if (s_.rank_head) {
      Matrix("cls.weight", d, d, 0);
      Vec("cls.bias", d, 0.0f, 0.1f);
      Matrix("cls.output.weight", d, 1, 0, true);
      Vec("cls.output.bias", 1, 0.0f, 0.5f);
    }
  }

 private:
  void Layer(const std::string& p) {
    const int d = s_.dim;
    const bool bert = s_.arch == "bert";
    if (bert) {
      for (const char* m : {"attn_q", "attn_k", "attn_v"}) {
        Matrix(p + m + ".weight", d, d, 0);
        Vec(p + m + ".bias", d, 0.0f, 0.3f);
      }
    } else {
      Matrix(p + "attn_qkv.weight", d, 3 * d, 0);
    }
    Matrix(p + "attn_output.weight", d, d, 0);
    if (bert) Vec(p + "attn_output.bias", d, 0.0f, 0.1f);
    Vec(p + "attn_output_norm.weight", d, 1.0f, 0.1f);
    Vec(p + "attn_output_norm.bias", d, 0.0f, 0.1f);
    if (!bert) Matrix(p + "ffn_gate.weight", d, s_.ffn_dim, 0);
    Matrix(p + "ffn_up.weight", d, s_.ffn_dim, 0);
    if (bert) Vec(p + "ffn_up.bias", s_.ffn_dim, 0.0f, 0.3f);
    Matrix(p + "ffn_down.weight", s_.ffn_dim, d, 0);
    if (bert) Vec(p + "ffn_down.bias", d, 0.0f, 0.1f);
    Vec(p + "layer_output_norm.weight", d, 1.0f, 0.1f);
    Vec(p + "layer_output_norm.bias", d, 0.0f, 0.1f);
  }
  // scale 0: unit-variance outputs; f32: kept in F32 (small tables).
  void Matrix(const std::string& name, int cols, int rows, float scale, bool f32 = false) {
    buf_.resize(static_cast<size_t>(cols) * static_cast<size_t>(rows));
    const float k = scale > 0 ? scale : std::sqrt(3.0f / static_cast<float>(cols));
    for (float& v : buf_) v = rng_.Uniform() * k;
    w_->AddTensorF32(name, {cols, rows}, f32 ? GgmlType::kF32 : s_.type, buf_.data());
  }
  void Vec(const std::string& name, int n, float base, float jitter) {
    buf_.resize(static_cast<size_t>(n));
    for (float& v : buf_) v = base + jitter * rng_.Uniform();
    w_->AddTensorF32(name, {n}, GgmlType::kF32, buf_.data());
  }

  const SynthSpec& s_;
  GgufWriter* w_;
  synth_detail::Rng rng_;
  std::vector<float> buf_;
};

}  // namespace

namespace {

// How a reranker's pairs are formed, where the spec says.
void PairFlags(const SynthSpec& s, GgufWriter* w) {
  if (s.add_eos >= 0) w->SetBool("tokenizer.ggml.add_eos_token", s.add_eos != 0);
  if (s.add_sep >= 0) w->SetBool("tokenizer.ggml.add_sep_token", s.add_sep != 0);
}

void WriteEncoderMetadata(const SynthSpec& s, GgufWriter* w) {
  const std::string a = s.arch;
  w->SetString("general.architecture", a);
  w->SetString("general.name", "paddock synthetic " + a);
  w->SetU32(a + ".context_length", static_cast<uint32_t>(s.context));
  w->SetU32(a + ".embedding_length", static_cast<uint32_t>(s.dim));
  w->SetU32(a + ".block_count", static_cast<uint32_t>(s.n_layers));
  w->SetU32(a + ".feed_forward_length", static_cast<uint32_t>(s.ffn_dim));
  w->SetU32(a + ".attention.head_count", static_cast<uint32_t>(s.n_heads));
  w->SetF32(a + ".attention.layer_norm_epsilon", 1e-12f);
  w->SetBool(a + ".attention.causal", false);
  if (s.pooling >= 0) w->SetU32(a + ".pooling_type", static_cast<uint32_t>(s.pooling));
  if (a == "nomic-bert") w->SetF32(a + ".rope.freq_base", s.rope_base);
  w->SetU32("general.file_type", s.type == GgmlType::kF16 ? 1 : 0);
}

// XLM-RoBERTa's special tokens and options: <s> text </s>; pairs <s> a </s></s> b </s>.
void WriteUnigramVocab(const SynthSpec& s, GgufWriter* w) {
  std::vector<std::string> pieces;
  std::vector<int32_t> types;
  std::vector<float> scores;
  UnigramVocab(s.n_vocab, &pieces, &scores, &types);
  w->SetU32("tokenizer.ggml.token_type_count", 1);
  w->SetString("tokenizer.ggml.model", "t5");
  w->SetStringArray("tokenizer.ggml.tokens", pieces);
  w->SetI32Array("tokenizer.ggml.token_type", types);
  w->SetF32Array("tokenizer.ggml.scores", scores);
  for (const auto& [key, id] : {std::pair<const char*, uint32_t>{"bos", 0},
                                {"eos", 2},
                                {"unknown", 3},
                                {"seperator", 2},
                                {"padding", 1},
                                {"cls", 0}})
    w->SetU32(StrFormat("tokenizer.ggml.%s_token_id", key), id);
  w->SetU32("tokenizer.ggml.mask_token_id", static_cast<uint32_t>(pieces.size() - 1));
  for (const char* key :
       {"add_bos_token", "add_eos_token", "add_space_prefix", "remove_extra_whitespaces"})
    w->SetBool(std::string("tokenizer.ggml.") + key, true);
  const std::string cm = Charsmap();
  std::string payload(12, '\0');
  const uint32_t u8 = static_cast<uint32_t>(GgufType::kU8);
  const uint64_t count = cm.size();
  std::memcpy(&payload[0], &u8, 4);
  std::memcpy(&payload[4], &count, 8);
  w->SetRaw("tokenizer.ggml.precompiled_charsmap", GgufType::kArray, payload + cm);
  PairFlags(s, w);
}

// BERT's: [CLS] text [SEP]; a reranker's pair is [CLS] a [EOS] [SEP] b [EOS] in llama.cpp, so
// [SEP] is also its EOS. Returns the vocabulary's size.
int WriteWordPieceVocab(const SynthSpec& s, GgufWriter* w) {
  std::vector<std::string> pieces;
  std::vector<int32_t> types;
  if (!s.vocab_from.empty()) {
    CopyVocab(s.vocab_from, &pieces, &types);
  } else {
    WordPieceVocab(s.n_vocab, &pieces, &types);
  }
  w->SetU32("tokenizer.ggml.token_type_count", 2);
  w->SetString("tokenizer.ggml.model", "bert");
  w->SetStringArray("tokenizer.ggml.tokens", pieces);
  w->SetI32Array("tokenizer.ggml.token_type", types);
  for (const auto& [key, id] : {std::pair<const char*, uint32_t>{"unknown", 100},
                                {"seperator", 102},
                                {"padding", 0},
                                {"cls", 101},
                                {"mask", 103}})
    w->SetU32(StrFormat("tokenizer.ggml.%s_token_id", key), id);
  if (s.rank_head) w->SetU32("tokenizer.ggml.eos_token_id", 102);
  PairFlags(s, w);
  return static_cast<int>(pieces.size());
}

}  // namespace

void BuildSyntheticEncoder(const SynthSpec& s, GgufWriter* w) {
  if (s.n_heads <= 0 || s.dim % s.n_heads != 0 || s.n_kv_heads != s.n_heads)
    Fail("synthetic encoder: %d heads do not divide the width %d", s.n_heads, s.dim);
  WriteEncoderMetadata(s, w);
  SynthSpec spec = s;
  if (s.tokenizer == "t5") {
    WriteUnigramVocab(s, w);
  } else {
    spec.n_vocab = WriteWordPieceVocab(s, w);
  }
  EncoderTensors(spec, w).Write();
}

}  // namespace paddock
