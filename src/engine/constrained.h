// engine/constrained.h: grammars bound to an engine's vocabulary (paddock::Grammar), compiled
// once and cached, and the per-generation state the engine and the service keep for them.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/matcher.h"
#include "paddock/engine.h"

namespace paddock {

class Tokenizer;

class Grammar {
 public:
  std::shared_ptr<const grammar::TokenGrammar> g;
  std::string gbnf;  // what it was compiled from (a JSON Schema's translation)
  double compile_seconds = 0;
};

// The vocabulary as the grammar sees it: each token's bytes (control, unknown and unused tokens
// none: a grammar never allows them) and the end-of-generation tokens.
std::shared_ptr<const grammar::TokenTrie> TokenTrieOf(const Tokenizer& tok);

// Compiled grammars by kind and text (least recently used dropped past `capacity`);
// thread-safe. The trie is built on first use.
class GrammarCache {
 public:
  GrammarCache(const Tokenizer* tok, size_t capacity) : tok_(tok), capacity_(capacity) {}
  std::shared_ptr<const Grammar> Compile(GrammarKind kind, std::string_view text);

 private:
  const Tokenizer* tok_;
  size_t capacity_;
  std::mutex mu_;
  std::shared_ptr<const grammar::TokenTrie> trie_;
  std::list<std::pair<std::string, std::shared_ptr<const Grammar>>> lru_;
};

// One generation under a grammar: the matcher and its mask buffer.
struct Constraint {
  explicit Constraint(const Grammar& gr)
      : matcher(gr.g), mask((static_cast<size_t>(gr.g->trie().n_vocab()) + 63) / 64) {}
  // The mask for the next token, `remaining` tokens (this one included) being left before the
  // length limit: the grammar is steered to complete within them (grammar/matcher.h). Adds
  // the time taken to *seconds.
  const uint64_t* Mask(double* seconds, int remaining);
  grammar::Matcher matcher;
  std::vector<uint64_t> mask;
};

}  // namespace paddock
