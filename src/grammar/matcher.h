// grammar/matcher.h: which tokens a grammar allows next, fast enough to run before every
// sampled token.
//
// The automaton is a pushdown automaton over bytes: a state is a set of stacks of grammar
// positions (grammar/cfg.h), the top of each a byte set. The vocabulary is a byte trie
// (TokenTrie, built once per vocabulary), so a mask is one depth-first walk of the trie from the
// state: a byte is tried once for every token sharing the prefix, and a subtree whose first
// byte no stack accepts is skipped whole, so most tokens are decided without being looked at.
// Stacks in a walk are persistent (frames in an arena point to their parent), so advancing
// copies nothing. Masks are memoized per grammar by state (the stacks, exactly), and states
// recur: inside a string, after a comma, at every element of an array: the cache answers most
// steps with a copy. The scalar reference (tests) checks every token on its own.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/cfg.h"

namespace paddock::grammar {

// The vocabulary as bytes: tokens[i] is what token i appends to the text ("" for control
// tokens: never allowed by a grammar), end_tokens end the generation.
class TokenTrie {
 public:
  TokenTrie(std::vector<std::string> tokens, std::vector<int32_t> end_tokens);
  int n_vocab() const { return static_cast<int>(tokens_.size()); }
  const std::string& token(int id) const { return tokens_[static_cast<size_t>(id)]; }
  const std::vector<int32_t>& end_tokens() const { return end_; }

  struct Node {
    uint32_t end = 0;        // index after this node's subtree (children follow the node)
    uint32_t tok_begin = 0;  // tokens spelled exactly by this node: ids_[tok_begin, tok_end)
    uint32_t tok_end = 0;
    uint8_t byte = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  void Build(uint32_t lo, uint32_t hi, size_t depth, uint8_t byte);
  std::vector<std::string> tokens_;
  std::vector<int32_t> end_;
  std::vector<int32_t> sorted_;  // token ids by their bytes (non-empty ones)
  std::vector<Node> nodes_;      // preorder; node 0 is the root (empty prefix)
  std::vector<int32_t> ids_;
};

// A bitmask over the vocabulary: bit i set = token i allowed.
using Mask = std::vector<uint64_t>;
inline bool Allowed(const Mask& m, int id) {
  return (m[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1;
}

// A grammar bound to a vocabulary: immutable but for the mask cache (thread-safe), shared by
// every request using the same schema or grammar.
class TokenGrammar {
 public:
  // Throws Error for a grammar whose masks would cost too much: more than kMaxWidth
  // alternatives open at one position (each is tried by the walk), kMaxEntries in all, or rules
  // nested more than kMaxNesting deep before a byte.
  TokenGrammar(Cfg cfg, std::shared_ptr<const TokenTrie> trie, size_t cache_entries = 4096);
  static constexpr size_t kMaxWidth = 8192, kMaxEntries = size_t{1} << 21;
  static constexpr int kMaxNesting = 2000;
  const Cfg& cfg() const { return cfg_; }
  const TokenTrie& trie() const { return *trie_; }

  struct CacheStats {
    uint64_t hits = 0, misses = 0;
    size_t entries = 0;
  };
  CacheStats cache_stats() const;

 private:
  friend class Matcher;
  std::shared_ptr<const Mask> Lookup(const std::string& key) const;
  void Store(const std::string& key, std::shared_ptr<const Mask> mask) const;

  Cfg cfg_;
  // rest_[pos]: the fewest bytes that complete the alternative from position pos.
  std::vector<uint32_t> rest_;
  // Expansions, precomputed per position: continuing at `pos` (without returning below it)
  // reaches the byte sets entries of exp_[pos..] (each: the terminal, and the return positions
  // pushed on the way, bottom first), and reaches the end of its alternative when pops_[pos].
  // first_[pos]: the union of those terminals' byte sets. The walk keeps one lazy top per
  // position instead of one per reachable terminal and pushes frames only for a byte's match.
  struct Entry {
    uint32_t terminal;
    uint32_t chain_begin, chain_len;  // into chains_
  };
  std::vector<uint32_t> exp_begin_;  // entries of pos: exp_[exp_begin_[pos], exp_begin_[pos+1])
  std::vector<Entry> exp_;
  std::vector<uint32_t> chains_;
  std::vector<uint8_t> pops_;
  std::vector<ByteSet> first_;
  void BuildExpansions();
  std::shared_ptr<const TokenTrie> trie_;
  size_t cache_entries_;
  mutable std::mutex mu_;
  mutable std::list<std::pair<std::string, std::shared_ptr<const Mask>>> lru_;
  mutable std::unordered_map<
      std::string, std::list<std::pair<std::string, std::shared_ptr<const Mask>>>::iterator>
      index_;
  mutable CacheStats stats_;
};

// One generation's position in a grammar.
class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const TokenGrammar> g);
  // Back to the start of the grammar.
  void Reset();
  // The tokens allowed next: those whose bytes the grammar can continue with, and the end
  // tokens where the grammar can end here; once it is complete, only the end tokens.
  // `mask` has (n_vocab + 63) / 64 words.
  // budget: the bytes that may follow the token, at most (the tokens left after it: each is a
  // byte at least). Once the budget comes within kSlack bytes of the shortest completion, only
  // tokens after which the grammar can still complete within the budget are allowed, so a
  // generation under a grammar ends complete before max_tokens (if it is reachable at all)
  // even when the model would write on (a string, a recursive schema).
  static constexpr uint32_t kNoBudget = 0xffffffffu;
  static constexpr uint32_t kSlack = 64;
  void FillMask(uint64_t* mask, uint32_t budget = kNoBudget);
  // The fewest bytes that complete the grammar from here.
  uint32_t Distance() const;
  // Advances over `bytes` (a token's text); false (state unchanged) when the grammar refuses.
  bool Accept(std::string_view bytes);
  bool AcceptToken(int32_t id) { return Accept(g_->trie().token(id)); }
  bool CanEnd() const;  // the text so far is a complete match
  bool Done() const;    // ... and nothing can follow it
  bool Dead() const { return stacks_.empty(); }
  // Scalar reference: whether the token is allowed, checked on its own.
  bool AllowsRef(int32_t id) const;
  // Steps whose mask came from the cache / was computed, for this matcher.
  uint64_t cache_hits() const { return hits_; }
  uint64_t cache_misses() const { return misses_; }

 private:
  using Stack = std::vector<uint32_t>;  // bottom .. top positions; empty = complete
  std::vector<Stack> Advance(const std::vector<Stack>& from, uint8_t byte) const;
  void Expand(Stack st, uint32_t pos, std::vector<Stack>* out) const;
  std::string Key() const;

  std::shared_ptr<const TokenGrammar> g_;
  std::vector<Stack> stacks_;
  uint64_t hits_ = 0, misses_ = 0;
  // Walk scratch (reused).
  struct Frame {
    uint32_t pos;
    int32_t parent;
    uint32_t dist;  // fewest bytes completing the grammar from this frame down
  };
  std::vector<Frame> frames_;
  std::vector<int32_t> tops_;
  uint32_t limit_ = kNoBudget;  // the walk's budget (tokens completing farther are refused)
  void Walk(uint64_t* mask);
  int32_t Push(uint32_t pos, int32_t parent);
  void ExpandFrame(int32_t parent, uint32_t pos, size_t seg, bool* accept);
  void WalkNode(uint32_t node, size_t seg_begin, uint64_t* mask);
};

}  // namespace paddock::grammar
