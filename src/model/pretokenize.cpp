// model/pretokenize.cpp
#define PCRE2_CODE_UNIT_WIDTH 8
#include "model/pretokenize.h"

#include <pcre2.h>

#include <algorithm>

#include "base/strings.h"
#include "base/utf8.h"

namespace paddock {
namespace {

// The expressions per pre-tokenizer (the tokenizers' own, as llama.cpp lists them), kept
// verbatim: not reflowed by the formatter. In deepseek-llm's letter class, the code points
// that Unicode normalization would change (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126, U+212A:
// Greek letters with oxia, the ohm and kelvin signs) are written as \x{...} escapes: as plain
// text they were normalized to other letters, which put ranges out of order ("range out of
// order in character class") and dropped the pre-tokenizer.
// clang-format off
constexpr const char* kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
constexpr const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// o200k (gpt-4o, gpt-oss), from its tokenizer.json: case-aware words with their contractions.
constexpr const char* kO200k =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct PreSpec {
  std::vector<std::string> names;
  std::vector<std::string> regexes;
};

const std::vector<PreSpec>& Specs() {
  static const std::vector<PreSpec> specs = {
      {{"default", "gpt2", "gpt-2", "olmo", "jais", "phi-2", "mpt"}, {kGpt2}},
      {{"llama3", "llama-bpe", "llama-v3", "smaug-bpe", "dbrx", "falcon3"}, {kLlama3}},
      {{"qwen2", "qwen2.5", "qwen-2.5", "deepseek-r1-qwen", "megrez", "stablelm2"}, {kQwen2}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell"}, {"\\p{N}", kGpt2}},
      {{"gpt-4o", "minimax-m2"}, {kO200k}},
      {{"falcon"}, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", "[0-9][0-9][0-9]"}},
      {{"deepseek-coder"}, {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}"}},
      {{"deepseek-llm"},
       {"[\\r\\n]",
        "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-"
        "ὗὙὛὝὟ-\\x{1F7D}ᾀ-ᾴᾶ-ᾼ\\x{1FBE}ῂ-ῄῆ-ῌῐ-\\x{1FD3}ῖ-\\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\\x{2126}ℨ\\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-"
        "ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
        "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}+"}},
  };
  return specs;
}
// clang-format on

// Length of the valid UTF-8 sequence at s[i], or 0 if the bytes there are not one.
size_t ValidUtf8At(std::string_view s, size_t i) {
  const auto c = static_cast<uint8_t>(s[i]);
  const int n = Utf8SequenceLength(c);
  if (n == 0 || i + static_cast<size_t>(n) > s.size()) return 0;
  for (int k = 1; k < n; ++k) {
    if ((static_cast<uint8_t>(s[i + static_cast<size_t>(k)]) & 0xC0) != 0x80) return 0;
  }
  if (n == 3) {
    const auto c1 = static_cast<uint8_t>(s[i + 1]);
    if (c == 0xE0 && c1 < 0xA0) return 0;   // overlong
    if (c == 0xED && c1 >= 0xA0) return 0;  // surrogate
  }
  if (n == 4) {
    const auto c1 = static_cast<uint8_t>(s[i + 1]);
    if (c == 0xF0 && c1 < 0x90) return 0;
    if (c == 0xF4 && c1 >= 0x90) return 0;
  }
  return static_cast<size_t>(n);
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const std::string& name) : name_(name.empty() ? "default" : name) {
  const PreSpec* spec = nullptr;
  for (const auto& s : Specs()) {
    if (std::find(s.names.begin(), s.names.end(), name_) != s.names.end()) spec = &s;
  }
  if (spec == nullptr)
    Fail("pre-tokenizer '%s' is not supported (known: %s)", name_.c_str(),
         Join(KnownNames(), ", ").c_str());
  for (const auto& re : spec->regexes) {
    int err = 0;
    PCRE2_SIZE off = 0;
    auto r = std::make_unique<Regex>();
    r->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re.c_str()), re.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off, nullptr);
    if (r->code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      Fail("pre-tokenizer '%s': bad expression at %zu: %s", name_.c_str(), static_cast<size_t>(off),
           reinterpret_cast<char*>(msg));
    }
    pcre2_jit_compile(r->code,
                      PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
    regexes_.push_back(std::move(r));
  }
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

const std::vector<std::string>& PreTokenizer::KnownNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& s : Specs()) n.insert(n.end(), s.names.begin(), s.names.end());
    return n;
  }();
  return names;
}

void PreTokenizer::Split(std::string_view text, std::vector<std::string_view>* out) const {
  // Valid UTF-8 runs go through the expressions; each invalid byte stands alone.
  std::vector<std::string_view> cur, next;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    size_t n;
    while (j < text.size() && (n = ValidUtf8At(text, j)) > 0) j += n;
    if (j > i) cur.push_back(text.substr(i, j - i));
    if (j < text.size()) {
      cur.push_back(text.substr(j, 1));
      ++j;
    }
    i = j;
  }
  pcre2_match_data* md = nullptr;
  for (size_t ri = 0; ri < regexes_.size(); ++ri) {
    pcre2_code* code = regexes_[ri]->code;
    if (md == nullptr) md = pcre2_match_data_create(16, nullptr);
    next.clear();
    for (std::string_view piece : cur) {
      if (piece.size() == 1 && static_cast<uint8_t>(piece[0]) >= 0x80) {  // an invalid byte
        next.push_back(piece);
        continue;
      }
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t pos = 0, last = 0;
      while (pos < piece.size()) {
        const int rc =
            pcre2_match(code, subject, piece.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc < 0) break;
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t b = ov[0], e = ov[1];
        if (e == b) {  // empty match (cannot happen with these expressions): step one character
          pos = b + std::max<size_t>(1, ValidUtf8At(piece, b));
          continue;
        }
        if (b > last) next.push_back(piece.substr(last, b - last));
        next.push_back(piece.substr(b, e - b));
        last = pos = e;
      }
      if (last < piece.size()) next.push_back(piece.substr(last));
    }
    cur.swap(next);
  }
  if (md != nullptr) pcre2_match_data_free(md);
  out->insert(out->end(), cur.begin(), cur.end());
}

}  // namespace paddock
