// grammar/matcher.cpp: the token trie, the mask walk and its cache (grammar/matcher.h).
#include "grammar/matcher.h"

#include <algorithm>
#include <queue>

#include "base/strings.h"

namespace paddock::grammar {

TokenTrie::TokenTrie(std::vector<std::string> tokens, std::vector<int32_t> end_tokens)
    : tokens_(std::move(tokens)), end_(std::move(end_tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (!tokens_[i].empty()) sorted_.push_back(static_cast<int32_t>(i));
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    const std::string& x = tokens_[static_cast<size_t>(a)];
    const std::string& y = tokens_[static_cast<size_t>(b)];
    return x != y ? x < y : a < b;
  });
  nodes_.reserve(sorted_.size() * 3);
  ids_.reserve(sorted_.size());
  Build(0, static_cast<uint32_t>(sorted_.size()), 0, 0);
  std::vector<int32_t>().swap(sorted_);
}

// The node for the prefix of length `depth` shared by sorted_[lo, hi): the tokens equal to it
// come first (sorted), then one child per next byte.
void TokenTrie::Build(uint32_t lo, uint32_t hi, size_t depth, uint8_t byte) {
  const uint32_t me = static_cast<uint32_t>(nodes_.size());
  nodes_.push_back({});
  nodes_[me].byte = byte;
  nodes_[me].tok_begin = static_cast<uint32_t>(ids_.size());
  uint32_t i = lo;
  auto tok = [&](uint32_t k) -> const std::string& {
    return tokens_[static_cast<size_t>(sorted_[k])];
  };
  while (i < hi && tok(i).size() == depth) ids_.push_back(sorted_[i++]);
  nodes_[me].tok_end = static_cast<uint32_t>(ids_.size());
  while (i < hi) {
    const uint8_t b = static_cast<uint8_t>(tok(i)[depth]);
    uint32_t j = i;
    while (j < hi && static_cast<uint8_t>(tok(j)[depth]) == b) ++j;
    Build(i, j, depth + 1, b);
    i = j;
  }
  nodes_[me].end = static_cast<uint32_t>(nodes_.size());
}

TokenGrammar::TokenGrammar(Cfg cfg, std::shared_ptr<const TokenTrie> trie, size_t cache_entries)
    : cfg_(std::move(cfg)), trie_(std::move(trie)), cache_entries_(cache_entries) {
  // Shortest match of each rule (Knuth's generalization of Dijkstra's algorithm: an
  // alternative's length is known once its rules' are; the shortest known one is final), then
  // of each alternative's suffix. O(size log size) whatever the order of the rules.
  constexpr uint32_t kInf = 1u << 30;
  const size_t n_rules = cfg_.alts.size();
  std::vector<uint32_t> rule_min(n_rules, kInf);
  {
    std::vector<uint32_t> owner, pending;
    std::vector<uint64_t> sum;
    std::vector<std::vector<uint32_t>> users(n_rules);
    using Item = std::pair<uint64_t, uint32_t>;  // (length, rule)
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
    for (uint32_t r = 0; r < n_rules; ++r) {
      for (uint32_t a : cfg_.alts[r]) {
        const uint32_t id = static_cast<uint32_t>(owner.size());
        uint32_t count = 0;
        uint64_t bytes = 0;
        for (uint32_t pos = a; cfg_.elems[pos].kind != Elem::kEnd; ++pos) {
          if (cfg_.elems[pos].kind == Elem::kBytes) {
            ++bytes;
          } else {
            users[cfg_.elems[pos].arg].push_back(id);
            ++count;
          }
        }
        owner.push_back(r);
        pending.push_back(count);
        sum.push_back(bytes);
        if (count == 0) heap.push({bytes, r});
      }
    }
    std::vector<bool> final(n_rules, false);
    while (!heap.empty()) {
      const auto [len, r] = heap.top();
      heap.pop();
      if (final[r]) continue;
      final[r] = true;
      rule_min[r] = static_cast<uint32_t>(std::min<uint64_t>(len, kInf));
      for (uint32_t alt : users[r]) {
        sum[alt] += rule_min[r];
        if (--pending[alt] == 0 && !final[owner[alt]]) heap.push({sum[alt], owner[alt]});
      }
    }
  }
  rest_.resize(cfg_.elems.size());
  for (size_t p = cfg_.elems.size(); p-- > 0;) {
    const Elem& e = cfg_.elems[p];
    rest_[p] = e.kind == Elem::kEnd     ? 0
               : e.kind == Elem::kBytes ? 1 + rest_[p + 1]
                                        : std::min(kInf, rule_min[e.arg] + rest_[p + 1]);
  }
  BuildExpansions();
}

// Per position, what continuing there reaches (see matcher.h), by memoized recursion over the
// rules (terminates: no left recursion).
void TokenGrammar::BuildExpansions() {
  const size_t n = cfg_.elems.size();
  struct Local {
    std::vector<std::pair<uint32_t, std::vector<uint32_t>>> entries;
    bool pops = false;
    bool done = false;
  };
  std::vector<Local> memo(n);
  int depth = 0;
  size_t total = 0;
  auto rule_at = [&](uint32_t pos) {  // (for the error message)
    size_t best = 0;
    uint32_t best_start = 0;
    for (size_t r = 0; r < cfg_.alts.size(); ++r)
      for (uint32_t a : cfg_.alts[r])
        if (a <= pos && a >= best_start) best = r, best_start = a;
    return cfg_.names.empty() ? std::string("?") : cfg_.names[best];
  };
  auto exp = [&](auto& self, uint32_t pos) -> const Local& {
    Local& m = memo[pos];
    if (m.done) return m;
    if (++depth > kMaxNesting)
      Fail("grammar: rules nest more than %d deep before their first byte", kMaxNesting);
    Local out;
    const Elem e = cfg_.elems[pos];
    if (e.kind == Elem::kBytes) {
      out.entries.push_back({pos, {}});
    } else if (e.kind == Elem::kEnd) {
      out.pops = true;
    } else {
      const uint32_t ret = pos + 1;
      const bool tail = cfg_.elems[ret].kind == Elem::kEnd;
      bool nullable = false;
      for (uint32_t a : cfg_.alts[e.arg]) {
        const Local& sub = self(self, a);
        for (const auto& [t, chain] : sub.entries) {
          std::vector<uint32_t> c;
          if (!tail) c.push_back(ret);
          c.insert(c.end(), chain.begin(), chain.end());
          out.entries.push_back({t, std::move(c)});
        }
        nullable = nullable || sub.pops;
      }
      if (nullable) {  // the rule can end at once: what follows it, at this level
        const Local& after = self(self, ret);
        out.entries.insert(out.entries.end(), after.entries.begin(), after.entries.end());
        out.pops = after.pops;
      }
    }
    std::sort(out.entries.begin(), out.entries.end());
    out.entries.erase(std::unique(out.entries.begin(), out.entries.end()), out.entries.end());
    // The walk tries these one by one wherever a match stands here: the cost of a mask.
    if (out.entries.size() > kMaxWidth)
      Fail(
          "grammar: more than %zu alternatives are open at once (in rule '%s'): a mask over "
          "them would stall the other streams",
          kMaxWidth, rule_at(pos).c_str());
    total += out.entries.size();
    if (total > kMaxEntries)
      Fail(
          "grammar: more than %zu open alternatives over all its positions (a mask cost "
          "bound)",
          kMaxEntries);
    --depth;
    out.done = true;
    memo[pos] = std::move(out);
    return memo[pos];
  };
  exp_begin_.assign(n + 1, 0);
  pops_.assign(n, 0);
  first_.assign(n, ByteSet{});
  for (uint32_t p = 0; p < n; ++p) {
    const Local& m = exp(exp, p);
    exp_begin_[p] = static_cast<uint32_t>(exp_.size());
    pops_[p] = m.pops ? 1 : 0;
    for (const auto& [t, chain] : m.entries) {
      exp_.push_back(
          {t, static_cast<uint32_t>(chains_.size()), static_cast<uint32_t>(chain.size())});
      chains_.insert(chains_.end(), chain.begin(), chain.end());
      const ByteSet& b = cfg_.sets[cfg_.elems[t].arg];
      for (int w = 0; w < 4; ++w) first_[p][static_cast<size_t>(w)] |= b[static_cast<size_t>(w)];
    }
  }
  exp_begin_[n] = static_cast<uint32_t>(exp_.size());
  // The start opens every alternative of the root rule at once.
  size_t at_start = 0;
  for (uint32_t a : cfg_.alts[cfg_.root]) at_start += exp_begin_[a + 1] - exp_begin_[a];
  if (at_start > kMaxWidth)
    Fail(
        "grammar: more than %zu alternatives are open at once (at the start): a mask over "
        "them would stall the other streams",
        kMaxWidth);
}

std::shared_ptr<const Mask> TokenGrammar::Lookup(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    stats_.misses++;
    return nullptr;
  }
  stats_.hits++;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void TokenGrammar::Store(const std::string& key, std::shared_ptr<const Mask> mask) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(key) != 0 || cache_entries_ == 0) return;
  lru_.emplace_front(key, std::move(mask));
  index_[key] = lru_.begin();
  if (lru_.size() > cache_entries_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

TokenGrammar::CacheStats TokenGrammar::cache_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CacheStats s = stats_;
  s.entries = lru_.size();
  return s;
}

Matcher::Matcher(std::shared_ptr<const TokenGrammar> g) : g_(std::move(g)) {
  frames_.reserve(1 << 16);
  tops_.reserve(1 << 12);
  Reset();
}

void Matcher::Reset() {
  stacks_.clear();
  for (uint32_t alt : g_->cfg().alts[g_->cfg().root]) Expand({}, alt, &stacks_);
  std::sort(stacks_.begin(), stacks_.end());
  stacks_.erase(std::unique(stacks_.begin(), stacks_.end()), stacks_.end());
}

// Continues a stack at `pos`: to the byte sets it can reach next (or to the empty stack when
// the grammar completes). Tail calls push no return position.
void Matcher::Expand(Stack st, uint32_t pos, std::vector<Stack>* out) const {
  const Cfg& c = g_->cfg();
  for (;;) {
    const Elem e = c.elems[pos];
    if (e.kind == Elem::kBytes) {
      st.push_back(pos);
      out->push_back(std::move(st));
      return;
    }
    if (e.kind == Elem::kEnd) {
      if (st.empty()) {
        out->push_back({});
        return;
      }
      pos = st.back();
      st.pop_back();
      continue;
    }
    if (c.elems[pos + 1].kind != Elem::kEnd) st.push_back(pos + 1);
    const auto& alts = c.alts[e.arg];
    for (size_t k = 0; k + 1 < alts.size(); ++k) Expand(st, alts[k], out);
    pos = alts.back();
  }
}

std::vector<Matcher::Stack> Matcher::Advance(const std::vector<Stack>& from, uint8_t byte) const {
  const Cfg& c = g_->cfg();
  std::vector<Stack> out;
  for (const Stack& st : from) {
    if (st.empty()) continue;
    const uint32_t top = st.back();
    if (!Has(c.sets[c.elems[top].arg], byte)) continue;
    Stack rest(st.begin(), st.end() - 1);
    Expand(std::move(rest), top + 1, &out);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool Matcher::Accept(std::string_view bytes) {
  std::vector<Stack> st = stacks_;
  for (char ch : bytes) {
    st = Advance(st, static_cast<uint8_t>(ch));
    if (st.empty()) return false;
  }
  stacks_ = std::move(st);
  return true;
}

bool Matcher::CanEnd() const {
  for (const Stack& s : stacks_)
    if (s.empty()) return true;
  return false;
}

bool Matcher::Done() const {
  if (stacks_.empty()) return false;
  for (const Stack& s : stacks_)
    if (!s.empty()) return false;
  return true;
}

bool Matcher::AllowsRef(int32_t id) const {
  const auto& ends = g_->trie().end_tokens();
  if (std::find(ends.begin(), ends.end(), id) != ends.end()) return CanEnd();
  const std::string& bytes = g_->trie().token(id);
  if (bytes.empty()) return false;
  std::vector<Stack> st = stacks_;
  for (char ch : bytes) {
    st = Advance(st, static_cast<uint8_t>(ch));
    if (st.empty()) return false;
  }
  return true;
}

std::string Matcher::Key() const {
  std::string k;
  for (const Stack& s : stacks_) {  // (sorted: equal states give equal keys)
    k.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(uint32_t));
    k.append(4, '\xff');
  }
  return k;
}

uint32_t Matcher::Distance() const {
  uint32_t best = kNoBudget;
  for (const Stack& s : stacks_) {
    uint64_t d = 0;
    for (uint32_t p : s) d += g_->rest_[p];
    best = static_cast<uint32_t>(std::min<uint64_t>(best, d));
  }
  return best;
}

void Matcher::FillMask(uint64_t* mask, uint32_t budget) {
  const size_t words = (static_cast<size_t>(g_->trie().n_vocab()) + 63) / 64;
  std::string key = Key();
  limit_ = kNoBudget;
  if (budget != kNoBudget) {
    const uint32_t d = Distance();
    if (budget < d + kSlack) {
      // Within reach of the budget: the mask depends on how much is left beyond the shortest
      // completion (the same slack at the same state recurs, so it is cached too).
      limit_ = budget;
      const int32_t slack = static_cast<int32_t>(budget) - static_cast<int32_t>(d);
      key.append(reinterpret_cast<const char*>(&slack), sizeof(slack));
      key.push_back('b');
    }
  }
  if (auto m = g_->Lookup(key)) {
    std::copy(m->begin(), m->end(), mask);
    hits_++;
    return;
  }
  misses_++;
  std::fill(mask, mask + words, 0);
  Walk(mask);
  if (limit_ != kNoBudget) {
    bool any = false;
    for (size_t w = 0; w < words && !any; ++w) any = mask[w] != 0;
    if (!any && !CanEnd()) {  // the budget cannot be met: the grammar alone decides
      limit_ = kNoBudget;
      Walk(mask);
    }
  }
  if (CanEnd()) {
    for (int32_t id : g_->trie().end_tokens())
      mask[static_cast<size_t>(id) >> 6] |= 1ull << (id & 63);
  }
  g_->Store(key, std::make_shared<const Mask>(mask, mask + words));
}

// The walk: the state's stacks as persistent frames (a frame is a position and the index of
// the frame below it; a top is a frame at a byte set), then the trie depth first. tops_ holds
// one segment of tops per trie depth; frames and tops made under a node are dropped on return.
void Matcher::Walk(uint64_t* mask) {
  frames_.clear();
  tops_.clear();
  for (const Stack& s : stacks_) {
    if (s.empty()) continue;
    int32_t parent = -1;
    for (uint32_t p : s) parent = Push(p, parent);
    tops_.push_back(parent);
  }
  if (tops_.empty()) return;
  WalkNode(0, 0, mask);
}

int32_t Matcher::Push(uint32_t pos, int32_t parent) {
  const uint32_t below = parent < 0 ? 0 : frames_[static_cast<size_t>(parent)].dist;
  frames_.push_back({pos, parent, std::min<uint32_t>(kNoBudget - 1, below + g_->rest_[pos])});
  return static_cast<int32_t>(frames_.size() - 1);
}

// Continues at `pos` above `parent`: one lazy top for what the position reaches (if anything),
// and, where it can end its alternative, the same for the parent's return position.
void Matcher::ExpandFrame(int32_t parent, uint32_t pos, size_t seg, bool* accept) {
  const TokenGrammar& g = *g_;
  for (;;) {
    if (g.exp_begin_[pos] != g.exp_begin_[pos + 1]) {
      bool dup = false;
      for (size_t k = seg; k < tops_.size() && !dup; ++k) {
        const Frame& f = frames_[static_cast<size_t>(tops_[k])];
        dup = f.pos == pos && f.parent == parent;
      }
      if (!dup) tops_.push_back(Push(pos, parent));
    }
    if (!g.pops_[pos]) return;
    if (parent < 0) {
      *accept = true;
      return;
    }
    const Frame f = frames_[static_cast<size_t>(parent)];
    parent = f.parent;
    pos = f.pos;
  }
}

void Matcher::WalkNode(uint32_t node, size_t seg_begin, uint64_t* mask) {
  const TokenGrammar& g = *g_;
  const Cfg& c = g.cfg_;
  const auto& nodes = g.trie().nodes();
  const auto& ids = g.trie().ids();
  const size_t seg_end = tops_.size();
  // The bytes any top here accepts: children outside them are skipped unvisited.
  ByteSet any{};
  for (size_t k = seg_begin; k < seg_end; ++k) {
    const ByteSet& s = g.first_[frames_[static_cast<size_t>(tops_[k])].pos];
    for (int w = 0; w < 4; ++w) any[static_cast<size_t>(w)] |= s[static_cast<size_t>(w)];
  }
  for (uint32_t ch = node + 1; ch < nodes[node].end; ch = nodes[ch].end) {
    const uint8_t b = nodes[ch].byte;
    if (!Has(any, b)) continue;
    const size_t frames_mark = frames_.size();
    const size_t next = tops_.size();
    bool accept = false;
    for (size_t k = seg_begin; k < seg_end; ++k) {
      const Frame f = frames_[static_cast<size_t>(tops_[k])];
      if (!Has(g.first_[f.pos], b)) continue;
      for (uint32_t x = g.exp_begin_[f.pos]; x < g.exp_begin_[f.pos + 1]; ++x) {
        const TokenGrammar::Entry& e = g.exp_[x];
        if (!Has(c.sets[c.elems[e.terminal].arg], b)) continue;
        int32_t parent = f.parent;
        for (uint32_t i = 0; i < e.chain_len; ++i)
          parent = Push(g.chains_[e.chain_begin + i], parent);
        ExpandFrame(parent, e.terminal + 1, next, &accept);
      }
    }
    const bool live = tops_.size() > next;
    bool within = accept || limit_ == kNoBudget;
    for (size_t k = next; k < tops_.size() && !within; ++k)
      within = frames_[static_cast<size_t>(tops_[k])].dist <= limit_;
    if ((live || accept) && within) {
      for (uint32_t t = nodes[ch].tok_begin; t < nodes[ch].tok_end; ++t) {
        const int32_t id = ids[t];
        mask[static_cast<size_t>(id) >> 6] |= 1ull << (id & 63);
      }
    }
    if (live && ch + 1 < nodes[ch].end) WalkNode(ch, next, mask);
    tops_.resize(next);
    frames_.resize(frames_mark);
  }
}

}  // namespace paddock::grammar
