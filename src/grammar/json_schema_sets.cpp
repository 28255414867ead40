// grammar/json_schema_sets.cpp: literal tries, integer multiples and unique arrays as GBNF
// (json_schema_sets.h).
#include "grammar/json_schema_sets.h"

#include <algorithm>
#include <bit>
#include <map>
#include <numeric>
#include <utility>

#include "base/strings.h"
#include "grammar/cfg.h"

namespace paddock::grammar::schema_detail {
namespace {

std::string Join(const std::vector<std::string>& alts) {
  std::string out;
  for (const std::string& a : alts) out += (out.empty() ? "" : " | ") + a;
  return out;
}

size_t CharLength(unsigned char lead) {
  return lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : 4;
}

}  // namespace

std::string LiteralSet(std::vector<std::string> lits, const std::string& base,
                       const RuleSink& out) {
  std::sort(lits.begin(), lits.end());
  lits.erase(std::unique(lits.begin(), lits.end()), lits.end());
  if (lits.size() == 1) return GbnfLiteral(lits[0]);
  // Nodes of the trie, parents first (no recursion: a chain of prefixes can be long). A node
  // holds the literals [lo, hi), which share their first `depth` bytes.
  struct Node {
    size_t lo, hi, depth;
    std::string name;
  };
  std::vector<Node> todo = {{0, lits.size(), 0, out.new_name(base)}};
  const std::string root = todo[0].name;
  while (!todo.empty()) {
    const Node n = todo.back();
    todo.pop_back();
    const std::string& first = lits[n.lo];
    const std::string& last = lits[n.hi - 1];  // (sorted: the pair's common prefix is all's)
    size_t p = n.depth;
    while (p < first.size() && p < last.size() && first[p] == last[p]) ++p;
    while (p > n.depth && p < last.size() && (static_cast<unsigned char>(last[p]) & 0xC0) == 0x80)
      --p;  // (not inside a character)
    std::vector<std::string> alts;
    size_t i = n.lo;
    if (first.size() == p) {  // a literal ends here (only the first can: they are distinct)
      alts.push_back("\"\"");
      ++i;
    }
    while (i < n.hi) {  // one alternative per next character
      const size_t len = CharLength(static_cast<unsigned char>(lits[i][p]));
      size_t j = i + 1;
      while (j < n.hi && lits[j].compare(p, len, lits[i], p, len) == 0) ++j;
      if (j - i == 1) {
        alts.push_back(GbnfLiteral(std::string_view(lits[i]).substr(p)));
      } else {
        todo.push_back({i, j, p, out.new_name(base)});
        alts.push_back(todo.back().name);
      }
      i = j;
    }
    const std::string prefix = first.substr(n.depth, p - n.depth);
    out.rule(n.name, prefix.empty() ? Join(alts) : GbnfLiteral(prefix) + " ( " + Join(alts) + " )");
  }
  return root;
}

namespace {

// The digit automaton of IntegerMultiples for non-negative spellings.
class Multiples {
 public:
  Multiples(int64_t k, const std::string& base, const RuleSink& out, const std::string& where,
            int max_rules)
      : k_(k), base_(base), out_(out), where_(where), max_rules_(max_rules) {}

  // Spellings of the multiples in [a, b], 0 <= a <= b; "" when there are none.
  std::string Range(int64_t a, int64_t b) {
    std::vector<std::string> alts;
    if (a == 0) {
      alts.push_back("\"0\"");
      a = 1;
    }
    for (int64_t lo = a; lo <= b;) {  // by digit count
      int64_t p = 10;
      while (p <= lo) p *= 10;
      const int64_t hi = std::min(b, p - 1);
      lo_ = std::to_string(lo);
      hi_ = std::to_string(hi);
      tight_.clear();
      const std::string r = Tight(0, true, true, 0);
      if (!r.empty()) alts.push_back(r);
      lo = hi + 1;
    }
    return alts.empty() ? "" : Rule(Join(alts));
  }

 private:
  // The digits at position i of the current length's spellings, the ones so far equal to the
  // lower (tl) / upper (th) bound's, with remainder r: a rule, "" when no multiple follows.
  std::string Tight(size_t i, bool tl, bool th, int64_t r) {
    if (!tl && !th) return Free(lo_.size() - i, r);
    const std::pair<size_t, int64_t> key{i << 2 | (tl ? 2 : 0) | (th ? 1 : 0), r};
    if (const auto it = tight_.find(key); it != tight_.end()) return it->second;
    std::map<std::string, std::string> by_next;  // next rule -> digits
    const char dlo = tl ? lo_[i] : '0', dhi = th ? hi_[i] : '9';
    for (char d = dlo; d <= dhi; ++d) {
      const int64_t nr = (r * 10 + (d - '0')) % k_;
      if (i + 1 == lo_.size()) {
        if (nr == 0) by_next[""] += d;
        continue;
      }
      const std::string next = Tight(i + 1, tl && d == lo_[i], th && d == hi_[i], nr);
      if (!next.empty()) by_next[next] += d;
    }
    return tight_[key] = Alternatives(by_next);
  }

  // m more digits (any, leading zeros too) after remainder r, ending on a multiple.
  std::string Free(size_t m, int64_t r) {
    const std::pair<size_t, int64_t> key{m, r};
    if (const auto it = free_.find(key); it != free_.end()) return it->second;
    std::map<std::string, std::string> by_next;
    for (char d = '0'; d <= '9'; ++d) {
      const int64_t nr = (r * 10 + (d - '0')) % k_;
      if (m == 1) {
        if (nr == 0) by_next[""] += d;
        continue;
      }
      const std::string next = Free(m - 1, nr);
      if (!next.empty()) by_next[next] += d;
    }
    return free_[key] = Alternatives(by_next);
  }

  std::string Alternatives(const std::map<std::string, std::string>& by_next) {
    if (by_next.empty()) return "";
    std::vector<std::string> alts;
    for (const auto& [next, digits] : by_next)
      alts.push_back("[" + digits + "]" + (next.empty() ? "" : " " + next));
    return Rule(Join(alts));
  }

  std::string Rule(const std::string& rhs) {
    if (++rules_ > max_rules_)
      Fail(
          "json schema: %s%smultipleOf %lld within these bounds needs more than %d grammar "
          "rules",
          where_.c_str(), where_.empty() ? "" : ": ", static_cast<long long>(k_), max_rules_);
    const std::string name = out_.new_name(base_);
    out_.rule(name, rhs);
    return name;
  }

  int64_t k_;
  std::string base_;
  const RuleSink& out_;
  std::string where_;
  int max_rules_;
  int rules_ = 0;
  std::string lo_, hi_;  // the bounds of the current digit count, spelled
  std::map<std::pair<size_t, int64_t>, std::string> tight_, free_;
};

}  // namespace

std::string IntegerMultiples(int64_t lo, int64_t hi, int64_t k, const std::string& base,
                             const RuleSink& out, const std::string& where, int max_rules) {
  Multiples m(k, base, out, where, max_rules);
  std::vector<std::string> alts;
  if (hi >= 0) {
    const std::string pos = m.Range(std::max<int64_t>(lo, 0), hi);
    if (!pos.empty()) alts.push_back(pos);
  }
  if (lo < 0) {  // -y for y in [max(-hi, 1), -lo]
    const std::string neg = m.Range(std::max<int64_t>(hi > -1 ? 1 : -hi, 1), -lo);
    if (!neg.empty()) alts.push_back("\"-\" " + neg);
  }
  if (alts.empty())
    Fail("json schema: %s%sno multiple of %lld lies within minimum and maximum", where.c_str(),
         where.empty() ? "" : ": ", static_cast<long long>(k));
  const std::string name = out.new_name(base);
  out.rule(name, Join(alts));
  return name;
}

int64_t MultipleNumerator(const std::string& text) {
  int64_t num = 0, den = 1;
  bool frac = false, digit = false;
  int digits = 0;
  for (char c : text) {
    if (c == '.' && !frac) {
      frac = true;
      continue;
    }
    if (c < '0' || c > '9') return 0;  // (a sign, an exponent)
    digit = true;
    if (num == 0 && c == '0') {
      if (frac) den *= 10;
      if (den > 1000000000000000) return 0;
      continue;
    }
    if (++digits > 15) return 0;
    num = num * 10 + (c - '0');
    if (frac) den *= 10;
  }
  if (!digit || num == 0) return 0;
  return num / std::gcd(num, den);
}

std::string UniqueArray(const std::vector<std::string>& items, int64_t lo, int64_t hi,
                        const std::string& base, const RuleSink& out) {
  const size_t n = items.size();
  const uint32_t full = (1u << n) - 1;
  if (hi < 0 || hi > static_cast<int64_t>(n)) hi = static_cast<int64_t>(n);
  // after[used]: the rest of an array whose items so far are `used` (at least one).
  std::vector<std::string> after(full + 1);
  for (uint32_t used = 1; used <= full; ++used) after[used] = out.new_name(base);
  auto next = [&](uint32_t used, const char* sep) {
    std::vector<std::string> alts;
    const int64_t count = std::popcount(used);
    if (count >= lo) alts.push_back("\"]\"");
    if (count < hi) {
      for (size_t i = 0; i < n; ++i)
        if ((used >> i & 1) == 0) alts.push_back(sep + items[i] + " ws " + after[used | 1u << i]);
    }
    return alts.empty() ? std::string("\"]\"") : Join(alts);  // (lo > n: refused by the caller)
  };
  for (uint32_t used = 1; used <= full; ++used) out.rule(after[used], next(used, "\",\" ws "));
  const std::string name = out.new_name(base);
  out.rule(name, "\"[\" ws ( " + next(0, "") + " )");
  return name;
}

namespace {

class Counted {
 public:
  Counted(const std::vector<std::string>& pairs, const std::vector<bool>& required,
          const std::string& extra, int64_t min_p, int64_t max_p, const std::string& base,
          const RuleSink& out, const std::string& where, int max_rules)
      : pairs_(pairs),
        req_(required),
        extra_(extra),
        min_(min_p),
        max_(max_p),
        base_(base),
        out_(out),
        where_(where),
        max_rules_(max_rules) {}

  // Properties i.. after c pairs: a rule, "" when no object can be completed.
  std::string From(size_t i, int64_t c) {
    if (max_ >= 0 && c > max_) return "";
    if (i == pairs_.size()) return Tail(c);
    // Without a maximum, counts past the minimum are alike (but for the comma).
    const int64_t key_c = max_ >= 0 ? c : std::min(c, min_ + 1);
    const std::pair<size_t, int64_t> key{i, key_c};
    if (const auto it = memo_.find(key); it != memo_.end()) return it->second;
    std::vector<std::string> alts;
    if (const std::string take = From(i + 1, c + 1); !take.empty())
      alts.push_back((c > 0 ? "\",\" ws " : "") + pairs_[i] + " " + take);
    if (!req_[i]) {
      if (const std::string skip = From(i + 1, c); !skip.empty()) alts.push_back(skip);
    }
    return memo_[key] = alts.empty() ? "" : Rule(Join(alts));
  }

 private:
  // Further pairs after the named ones, c written.
  std::string Tail(int64_t c) {
    const int64_t lo = std::max<int64_t>(0, min_ - c), hi = max_ >= 0 ? max_ - c : -1;
    if (extra_.empty() || hi == 0) return lo == 0 ? "\"\"" : "";
    auto rep = [](int64_t a, int64_t b) {
      return b < 0 ? StrFormat("{%lld,}", static_cast<long long>(a))
                   : StrFormat("{%lld,%lld}", static_cast<long long>(a), static_cast<long long>(b));
    };
    const std::string more = "( \",\" ws " + extra_ + " )";
    if (c > 0) return Rule(more + rep(lo, hi));
    const std::string some =
        extra_ + " " + more + rep(std::max<int64_t>(lo - 1, 0), hi < 0 ? -1 : hi - 1);
    return Rule(lo > 0 ? some : "( " + some + " )?");
  }

  std::string Rule(const std::string& rhs) {
    if (++rules_ > max_rules_)
      Fail(
          "json schema: %s%sminProperties / maxProperties over these properties need more "
          "than %d grammar rules",
          where_.c_str(), where_.empty() ? "" : ": ", max_rules_);
    const std::string name = out_.new_name(base_);
    out_.rule(name, rhs);
    return name;
  }

  const std::vector<std::string>& pairs_;
  const std::vector<bool>& req_;
  std::string extra_;
  int64_t min_, max_;
  std::string base_;
  const RuleSink& out_;
  std::string where_;
  int max_rules_;
  int rules_ = 0;
  std::map<std::pair<size_t, int64_t>, std::string> memo_;
};

}  // namespace

std::string CountedObject(const std::vector<std::string>& pairs, const std::vector<bool>& required,
                          const std::string& extra_kv, int64_t min_p, int64_t max_p,
                          const std::string& base, const RuleSink& out, const std::string& where,
                          int max_rules) {
  Counted c(pairs, required, extra_kv, min_p, max_p, base, out, where, max_rules);
  const std::string inside = c.From(0, 0);
  if (inside.empty())
    Fail(
        "json schema: %s%sno object has between minProperties and maxProperties properties "
        "here",
        where.c_str(), where.empty() ? "" : ": ");
  const std::string name = out.new_name(base);
  out.rule(name, "\"{\" ws " + inside + " \"}\"");
  return name;
}

}  // namespace paddock::grammar::schema_detail
