// grammar/json_schema_sets.h: GBNF for the JSON Schema keywords whose plain spelling would make
// masks cost too much or cannot be spelled as alternatives at all: a set of literals (enum) as
// a trie, integers under multipleOf as a digit automaton, arrays of unique items from a finite
// set as the subsets still free. Internal to grammar/ (the converter, json_schema.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace paddock::grammar::schema_detail {

// Where the rules go: a fresh rule name from a base, and a rule's definition.
struct RuleSink {
  std::function<std::string(const std::string& base)> new_name;
  std::function<void(const std::string& name, const std::string& rhs)> rule;
};

// Exactly the given byte strings (valid UTF-8), as a trie: each shared prefix is written once
// and a rule offers one alternative per next character, so a mask walk keeps a handful of
// alternatives open wherever it stands (a 30,000-value enum spelled as 30,000 alternatives
// kept all of them open at its start). Returns a rule name or a literal.
std::string LiteralSet(std::vector<std::string> literals, const std::string& base,
                       const RuleSink& out);

// Decimal spellings (no leading zeros, "-" for negatives, at most 16 digits) of the multiples
// of k (k >= 1) within [lo, hi] (|lo|, |hi| < 10^16), as a digit automaton: one rule per
// (digits left, remainder) pair that can still end on a multiple, and the few states that
// follow a bound's digits. Throws Error (naming `where`) when there are no such integers or
// the automaton would pass max_rules.
std::string IntegerMultiples(int64_t lo, int64_t hi, int64_t k, const std::string& base,
                             const RuleSink& out, const std::string& where, int max_rules = 4096);

// The numerator of a positive decimal in lowest terms, e.g. 1.5 -> 3: an integer is a multiple
// of p/q exactly when it is a multiple of p. `text` is the number as JSON spells it; 0 when it
// is not a positive decimal with at most 15 significant digits.
int64_t MultipleNumerator(const std::string& text);

// Arrays of distinct items, each one of `items` (rule names or literals of distinct values),
// between lo and hi (-1: no bound) items: one rule per set of items already used, so there are
// at most kMaxUniqueItems of them (the caller checks). Returns a rule name.
constexpr size_t kMaxUniqueItems = 8;
std::string UniqueArray(const std::vector<std::string>& items, int64_t lo, int64_t hi,
                        const std::string& base, const RuleSink& out);

// An object whose properties are counted (minProperties / maxProperties; max_p -1: no bound):
// pairs[i] is the rule of the i-th named property's `"key" ws ":" ws value ws`, present always
// when required[i], in order; extra_kv the rule of one further pair ("" : none may follow
// them). One rule per (property, pairs written so far), so properties x bound is held to
// max_rules. Throws Error naming `where` when no object fits or the grammar would be larger.
std::string CountedObject(const std::vector<std::string>& pairs, const std::vector<bool>& required,
                          const std::string& extra_kv, int64_t min_p, int64_t max_p,
                          const std::string& base, const RuleSink& out, const std::string& where,
                          int max_rules = 4096);

}  // namespace paddock::grammar::schema_detail
