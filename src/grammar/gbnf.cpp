// grammar/gbnf.cpp: llama.cpp's GBNF, parsed into a byte-level Cfg (grammar/cfg.h).
#include <algorithm>
#include <map>
#include <utility>

#include "base/strings.h"
#include "base/utf8.h"
#include "grammar/cfg.h"

namespace paddock::grammar {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive code point ranges

// The byte-range sequences whose concatenations are exactly the UTF-8 encodings of [lo, hi]
// (surrogates excluded): split until every sequence is a product of byte ranges.
void Utf8Sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<int, int>>>* out) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {
    if (lo < 0xD800) Utf8Sequences(lo, 0xD7FF, out);
    if (hi > 0xDFFF) Utf8Sequences(0xE000, hi, out);
    return;
  }
  static const uint32_t kMax[] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t m : kMax) {
    if (lo <= m && hi > m) {
      Utf8Sequences(lo, m, out);
      Utf8Sequences(m + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    out->push_back({{static_cast<int>(lo), static_cast<int>(hi)}});
    return;
  }
  const int n = hi <= 0x7FF ? 2 : hi <= 0xFFFF ? 3 : 4;
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        Utf8Sequences(lo, lo | m, out);
        Utf8Sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        Utf8Sequences(lo, (hi & ~m) - 1, out);
        Utf8Sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  auto encode = [n](uint32_t c, int* b) {
    if (n == 2) {
      b[0] = 0xC0 | static_cast<int>(c >> 6);
      b[1] = 0x80 | static_cast<int>(c & 0x3F);
    } else if (n == 3) {
      b[0] = 0xE0 | static_cast<int>(c >> 12);
      b[1] = 0x80 | static_cast<int>((c >> 6) & 0x3F);
      b[2] = 0x80 | static_cast<int>(c & 0x3F);
    } else {
      b[0] = 0xF0 | static_cast<int>(c >> 18);
      b[1] = 0x80 | static_cast<int>((c >> 12) & 0x3F);
      b[2] = 0x80 | static_cast<int>((c >> 6) & 0x3F);
      b[3] = 0x80 | static_cast<int>(c & 0x3F);
    }
  };
  int a[4], z[4];
  encode(lo, a);
  encode(hi, z);
  std::vector<std::pair<int, int>> seq;
  for (int i = 0; i < n; ++i) seq.emplace_back(a[i], z[i]);
  out->push_back(std::move(seq));
}

Ranges Normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [a, b] : r) {
    if (!out.empty() && a <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, b);
    } else {
      out.emplace_back(a, b);
    }
  }
  return out;
}

Ranges Complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& [a, b] : r) {
    if (a > next) out.emplace_back(next, a - 1);
    next = b + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

class Parser {
 public:
  Parser(std::string_view text, size_t max_elems) : s_(text), max_elems_(max_elems) {}

  Cfg Run() {
    Space(true);
    while (i_ < s_.size()) {
      const size_t name_at = i_;
      const std::string name = Name();
      Space(false);
      if (!Eat("::=")) Error("expected '::=' after rule name '" + name + "'");
      const uint32_t r = RuleId(name);
      if (defined_[r]) Error("rule '" + name + "' is defined twice", name_at);
      defined_[r] = true;
      Space(true);
      SetAlts(r, Alternates(name, false));
      if (i_ < s_.size() && s_[i_] != '\n' && s_[i_] != '\r') Error("expected the end of the rule");
      Space(true);
    }
    for (uint32_t r = 0; r < rules_.size(); ++r)
      if (!defined_[r]) Fail("grammar: undefined rule '%s'", names_[r].c_str());
    auto root = ids_.find("root");
    if (root == ids_.end()) Fail("grammar: no 'root' rule");
    return Build(root->second);
  }

 private:
  using Seq = std::vector<Elem>;

  [[noreturn]] void Error(const std::string& what, size_t at = std::string::npos) const {
    if (at == std::string::npos) at = i_;
    int line = 1, col = 1;
    for (size_t k = 0; k < at && k < s_.size(); ++k) {
      if (s_[k] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    Fail("grammar: %s at line %d, column %d", what.c_str(), line, col);
  }

  bool Eat(std::string_view tok) {
    if (s_.substr(i_, tok.size()) != tok) return false;
    i_ += tok.size();
    return true;
  }

  // Blanks and comments; newlines only where `newlines` (inside parentheses, after | or ::=).
  void Space(bool newlines) {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t') {
        ++i_;
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else if (newlines && (c == '\n' || c == '\r')) {
        ++i_;
      } else {
        break;
      }
    }
  }

  static bool NameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  }
  std::string Name() {
    const size_t b = i_;
    while (i_ < s_.size() && NameChar(s_[i_])) ++i_;
    if (i_ == b) Error("expected a rule name");
    return std::string(s_.substr(b, i_ - b));
  }

  uint32_t RuleId(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const uint32_t r = NewRule(name);
    ids_[name] = r;
    return r;
  }
  uint32_t NewRule(const std::string& name) {
    rules_.emplace_back();
    names_.push_back(name);
    defined_.push_back(false);
    return static_cast<uint32_t>(rules_.size() - 1);
  }
  uint32_t Helper(const std::string& base, std::vector<Seq> alts) {
    const uint32_t r = NewRule(base + "-" + std::to_string(rules_.size()));
    defined_[r] = true;
    SetAlts(r, std::move(alts));
    return r;
  }
  void SetAlts(uint32_t r, std::vector<Seq> alts) {
    for (const Seq& a : alts) size_ += a.size() + 1;
    if (size_ > max_elems_)
      Fail("grammar: more than %zu elements (bounded repetitions are unrolled: lower the bounds)",
           max_elems_);
    rules_[r] = std::move(alts);
  }

  uint32_t SetId(const ByteSet& b) {
    auto it = set_ids_.find(b);
    if (it != set_ids_.end()) return it->second;
    const uint32_t id = static_cast<uint32_t>(sets_.size());
    sets_.push_back(b);
    set_ids_[b] = id;
    return id;
  }
  Elem ByteElem(int lo, int hi) {
    ByteSet b{};
    for (int c = lo; c <= hi; ++c) b[static_cast<size_t>(c) >> 6] |= 1ull << (c & 63);
    return {Elem::kBytes, SetId(b)};
  }

  // A mask walk (matcher.h) tries the alternatives open at a point one by one: a 30,000-way
  // choice took 0.25 s for one mask on Llama 2's vocabulary, stalling every stream sharing the
  // engine step. A rule's own are held to kMaxAlternatives here; the ones open at once through
  // nested rules, to TokenGrammar::kMaxWidth; the total bounds the grammar's size (a JSON
  // Schema's 100,000-value enum is a trie of about as many alternatives).
  static constexpr size_t kMaxAlternatives = 2048, kMaxTotalAlternatives = 1 << 18;

  std::vector<Seq> Alternates(const std::string& name, bool nested) {
    std::vector<Seq> alts;
    alts.push_back(Sequence(name, nested));
    while (i_ < s_.size() && s_[i_] == '|') {
      ++i_;
      Space(true);
      alts.push_back(Sequence(name, nested));
      if (alts.size() > kMaxAlternatives)
        Error("rule '" + name + "' has more than " + std::to_string(kMaxAlternatives) +
              " alternatives (a mask over them would stall the other streams)");
    }
    total_alternatives_ += alts.size();
    if (total_alternatives_ > kMaxTotalAlternatives)
      Error("the grammar has more than " + std::to_string(kMaxTotalAlternatives) +
            " alternatives in all (a mask over them would stall the other streams)");
    return alts;
  }

  uint32_t ParseChar() {
    if (i_ >= s_.size()) Error("unexpected end of the grammar");
    const unsigned char c = static_cast<unsigned char>(s_[i_]);
    if (c == '\\') {
      if (i_ + 1 >= s_.size()) Error("unexpected end after '\\'");
      const char e = s_[i_ + 1];
      i_ += 2;
      auto hex = [&](int digits) {
        uint32_t v = 0;
        for (int k = 0; k < digits; ++k) {
          if (i_ >= s_.size()) Error("expected a hex digit");
          const char h = s_[i_++];
          int d = h >= '0' && h <= '9'   ? h - '0'
                  : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                         : -1;
          if (d < 0) Error("expected a hex digit");
          v = v * 16 + static_cast<uint32_t>(d);
        }
        if (v > kMaxCodePoint) Error("code point out of range");
        return v;
      };
      switch (e) {
        case 'x':
          return hex(2);
        case 'u':
          return hex(4);
        case 'U':
          return hex(8);
        case 't':
          return '\t';
        case 'r':
          return '\r';
        case 'n':
          return '\n';
        case 'f':
          return '\f';
        case 'b':
          return '\b';
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
          return static_cast<uint32_t>(e);
        default:
          i_ -= 1;
          Error(std::string("unknown escape '\\") + e + "'");
      }
    }
    // One UTF-8 character of the grammar text.
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + static_cast<size_t>(n) > s_.size()) Error("invalid UTF-8 in the grammar");
    uint32_t v = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s_[i_ + static_cast<size_t>(k)]);
      if ((d & 0xC0) != 0x80) Error("invalid UTF-8 in the grammar");
      v = (v << 6) | (d & 0x3F);
    }
    i_ += static_cast<size_t>(n);
    return v;
  }

  // A character class as elements: one byte set when it is ASCII only, else a helper rule
  // (one alternative per UTF-8 byte-range sequence), shared by equal classes.
  Seq ClassElems(const Ranges& r) {
    if (r.empty()) Error("empty character class");
    if (r.back().second < 0x80) {
      ByteSet b{};
      for (const auto& [lo, hi] : r)
        for (uint32_t c = lo; c <= hi; ++c) b[c >> 6] |= 1ull << (c & 63);
      return {{Elem::kBytes, SetId(b)}};
    }
    auto it = class_rules_.find(r);
    if (it != class_rules_.end()) return {{Elem::kRule, it->second}};
    std::vector<std::vector<std::pair<int, int>>> seqs;
    for (const auto& [lo, hi] : r) Utf8Sequences(lo, hi, &seqs);
    std::vector<Seq> alts;
    ByteSet ascii{};
    bool any_ascii = false;
    for (const auto& q : seqs) {
      if (q.size() == 1) {
        for (int c = q[0].first; c <= q[0].second; ++c)
          ascii[static_cast<size_t>(c) >> 6] |= 1ull << (c & 63);
        any_ascii = true;
        continue;
      }
      Seq a;
      for (const auto& [lo, hi] : q) a.push_back(ByteElem(lo, hi));
      alts.push_back(std::move(a));
    }
    if (any_ascii) alts.insert(alts.begin(), Seq{{Elem::kBytes, SetId(ascii)}});
    const uint32_t rule = Helper("char", std::move(alts));
    class_rules_[r] = rule;
    return {{Elem::kRule, rule}};
  }

  Seq Repeat(const std::string& name, const Seq& x, int min, int max /* -1: unbounded */) {
    Seq out;
    for (int k = 0; k < min; ++k) {
      out.insert(out.end(), x.begin(), x.end());
      if (out.size() > max_elems_)
        Fail("grammar: more than %zu elements (bounded repetitions are unrolled: lower the bounds)",
             max_elems_);
    }
    if (max < 0) {
      // R ::= x R | ""
      const uint32_t r = NewRule(name + "-" + std::to_string(rules_.size()));
      defined_[r] = true;
      Seq a = x;
      a.push_back({Elem::kRule, r});
      SetAlts(r, {a, Seq{}});
      out.push_back({Elem::kRule, r});
    } else if (max > min) {
      // R1 ::= x | "" ; Rk ::= x R(k-1) | ""
      uint32_t prev = 0;
      for (int k = 1; k <= max - min; ++k) {
        Seq a = x;
        if (k > 1) a.push_back({Elem::kRule, prev});
        prev = Helper(name, {a, Seq{}});
      }
      out.push_back({Elem::kRule, prev});
    }
    return out;
  }

  int Count() {
    const size_t b = i_;
    long v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      v = v * 10 + (s_[i_] - '0');
      if (v > 100000) Error("repetition count too large");
      ++i_;
    }
    if (i_ == b) Error("expected a number");
    return static_cast<int>(v);
  }

  // "literal": its bytes.
  Seq Literal() {
    ++i_;
    std::string bytes;
    while (i_ < s_.size() && s_[i_] != '"') AppendUtf8(ParseChar(), &bytes);
    if (!Eat("\"")) Error("unterminated literal");
    Seq seq;
    for (unsigned char b : bytes) seq.push_back(ByteElem(b, b));
    return seq;
  }

  // [class] or [^class]: its code points as byte-set sequences.
  Seq Class() {
    ++i_;
    const bool negate = Eat("^");
    Ranges r;
    while (i_ < s_.size() && s_[i_] != ']') {
      const uint32_t a = ParseChar();
      uint32_t b = a;
      if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
        ++i_;
        b = ParseChar();
        if (b < a) Error("range out of order in character class");
      }
      r.emplace_back(a, b);
    }
    if (!Eat("]")) Error("unterminated character class");
    r = Normalize(std::move(r));
    if (negate) r = Complement(r);
    return ClassElems(r);
  }

  // *, +, ?, {m}, {m,}, {m,n} (i_ at the operator): the bounds.
  void RepeatBounds(char c, int* min, int* max) {
    *min = 0;
    *max = -1;
    ++i_;
    if (c == '+') *min = 1;
    if (c == '?') *max = 1;
    if (c != '{') return;
    Space(false);
    *min = Count();
    Space(false);
    if (Eat(",")) {
      Space(false);
      if (i_ < s_.size() && s_[i_] != '}') {
        *max = Count();
        if (*max < *min) Error("repetition {m,n} with n < m");
      }
    } else {
      *max = *min;
    }
    Space(false);
    if (!Eat("}")) Error("expected '}'");
  }

  // One item at i_ appended to *seq: a literal, a class, '.', a rule reference or a
  // parenthesized group. False at the end of the sequence (`name ::=` starts the next rule: a
  // rule may span lines only inside parentheses or after |, as in llama.cpp).
  bool Item(const std::string& name, Seq* seq) {
    const char c = s_[i_];
    Seq e;
    if (c == '"') {
      e = Literal();  // (an empty literal "" is an empty item)
    } else if (c == '[') {
      e = Class();
    } else if (c == '.') {
      ++i_;
      e = ClassElems({{0, kMaxCodePoint}});
    } else if (NameChar(c)) {
      const size_t at = i_;
      const std::string ref = Name();
      size_t j = i_;
      while (j < s_.size() && (s_[j] == ' ' || s_[j] == '\t')) ++j;
      if (s_.substr(j, 3) == "::=") {
        i_ = at;
        return false;
      }
      e.push_back({Elem::kRule, RuleId(ref)});
    } else if (c == '(') {
      ++i_;
      Space(true);
      std::vector<Seq> alts = Alternates(name, true);
      if (!Eat(")")) Error("expected ')'");
      if (alts.size() == 1) {
        e = std::move(alts[0]);
      } else {
        e.push_back({Elem::kRule, Helper(name, std::move(alts))});
      }
    } else {
      return false;
    }
    seq->insert(seq->end(), e.begin(), e.end());
    return true;
  }

  Seq Sequence(const std::string& name, bool nested) {
    Seq seq;
    size_t last = 0;  // where the last item starts (repetition applies to it)
    bool have_last = false;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      const size_t start = seq.size();
      if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_last) Error(std::string("'") + c + "' without anything before it");
        int min = 0, max = -1;
        RepeatBounds(c, &min, &max);
        const Seq x(seq.begin() + static_cast<long>(last), seq.end());
        seq.resize(last);
        const Seq r = Repeat(name, x, min, max);
        seq.insert(seq.end(), r.begin(), r.end());
        have_last = false;
      } else if (Item(name, &seq)) {
        last = start;
        have_last = true;
      } else {
        break;
      }
      Space(nested);
    }
    return seq;
  }

  Cfg Build(uint32_t root) {
    CheckLeftRecursion();
    Cfg g;
    g.sets = sets_;
    g.names = names_;
    g.root = root;
    g.alts.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Seq& a : rules_[r]) {
        g.alts[r].push_back(static_cast<uint32_t>(g.elems.size()));
        g.elems.insert(g.elems.end(), a.begin(), a.end());
        g.elems.push_back({Elem::kEnd, 0});
      }
    }
    // The root must match some finite string (else generation could never end).
    const std::vector<bool> productive = Closure(true);
    if (!productive[root]) Fail("grammar: 'root' matches no finite string");
    return g;
  }

  // The rules with an alternative whose elements all hold: a rule element holds when its rule
  // is in the set, a byte set when `bytes` (true: the rules matching some finite string;
  // false: the rules matching the empty string). A worklist over the references, so linear in
  // the grammar's size whatever the order of its rules (a fixpoint over passes was quadratic
  // for a chain written leaves last).
  std::vector<bool> Closure(bool bytes) const {
    const size_t n = rules_.size();
    std::vector<bool> in(n, false);
    std::vector<uint32_t> owner, pending;         // per alternative
    std::vector<std::vector<uint32_t>> users(n);  // per rule: its alternatives, per occurrence
    std::vector<uint32_t> queue;
    auto add = [&](uint32_t r) {
      if (!in[r]) {
        in[r] = true;
        queue.push_back(r);
      }
    };
    for (uint32_t r = 0; r < n; ++r) {
      for (const Seq& a : rules_[r]) {
        const uint32_t id = static_cast<uint32_t>(owner.size());
        uint32_t count = 0;
        bool blocked = false;
        for (const Elem& e : a) {
          if (e.kind == Elem::kRule) {
            users[e.arg].push_back(id);
            ++count;
          } else if (!bytes) {
            blocked = true;
          }
        }
        owner.push_back(r);
        pending.push_back(blocked ? UINT32_MAX : count);
        if (!blocked && count == 0) add(r);
      }
    }
    for (size_t q = 0; q < queue.size(); ++q) {
      for (uint32_t alt : users[queue[q]]) {
        if (pending[alt] != UINT32_MAX && --pending[alt] == 0) add(owner[alt]);
      }
    }
    return in;
  }

  void CheckLeftRecursion() {
    const size_t n = rules_.size();
    const std::vector<bool> nullable = Closure(false);
    // Left corners: rules reachable at the start of an alternative (past nullable rules).
    std::vector<std::vector<uint32_t>> left(n);
    for (size_t r = 0; r < n; ++r) {
      for (const Seq& a : rules_[r]) {
        for (const Elem& e : a) {
          if (e.kind != Elem::kRule) break;
          left[r].push_back(e.arg);
          if (!nullable[e.arg]) break;
        }
      }
    }
    std::vector<int> color(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, size_t>> stack;
    for (uint32_t s = 0; s < n; ++s) {
      if (color[s] != 0) continue;
      stack.push_back({s, 0});
      color[s] = 1;
      while (!stack.empty()) {
        auto& [r, k] = stack.back();
        if (k < left[r].size()) {
          const uint32_t next = left[r][k++];
          if (color[next] == 1)
            Fail("grammar: rule '%s' is left-recursive (possibly through an empty repetition)",
                 names_[next].c_str());
          if (color[next] == 0) {
            color[next] = 1;
            stack.push_back({next, 0});
          }
        } else {
          color[r] = 2;
          stack.pop_back();
        }
      }
    }
  }

  std::string_view s_;
  size_t i_ = 0;
  size_t total_alternatives_ = 0;  // over every rule so far (Alternates)
  size_t max_elems_;
  size_t size_ = 0;
  std::vector<std::vector<Seq>> rules_;
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  std::map<std::string, uint32_t> ids_;
  std::vector<ByteSet> sets_;
  std::map<ByteSet, uint32_t> set_ids_;
  std::map<Ranges, uint32_t> class_rules_;
};

}  // namespace

Cfg ParseGbnf(std::string_view text, size_t max_elems) {
  return Parser(text, max_elems).Run();
}

}  // namespace paddock::grammar
