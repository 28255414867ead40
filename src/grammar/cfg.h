// grammar/cfg.h: context-free grammars over bytes, from llama.cpp's GBNF or a JSON Schema.
//
// A grammar is a list of rules; a rule is a list of alternatives; an alternative is a sequence
// of elements, each a byte set (one byte from a set of 256) or a reference to a rule. All of it
// sits in one flat array: every alternative ends with a kEnd element, so a position (an index
// into `elems`) says where a match stands and position + 1 is what follows. Characters are
// UTF-8: a class of code points becomes byte-set sequences (one per run of equal-length
// encodings), so the automaton never decodes UTF-8 and a token ending inside a character works.
// Repetition (*, +, ?, {m,n}) becomes right-recursive helper rules, so nothing is
// left-recursive (left recursion is refused: the matcher would not terminate).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace paddock::grammar {

struct Elem {
  enum Kind : uint8_t { kEnd, kBytes, kRule };
  Kind kind = kEnd;
  uint32_t arg = 0;  // kBytes: index into sets; kRule: rule index
};

using ByteSet = std::array<uint64_t, 4>;
inline bool Has(const ByteSet& s, uint8_t b) {
  return (s[b >> 6] >> (b & 63)) & 1;
}

struct Cfg {
  std::vector<Elem> elems;
  std::vector<std::vector<uint32_t>> alts;  // per rule: start positions of its alternatives
  std::vector<std::string> names;           // per rule (helpers: "name-N")
  std::vector<ByteSet> sets;
  uint32_t root = 0;
};

// Parses llama.cpp's GBNF (rules `name ::= ...`, "literals", [classes], [^negated], `.`, ( ),
// |, *, +, ?, {m}, {m,}, {m,n}, # comments; the start rule is `root`). Throws Error naming the
// line and column of the problem, an undefined rule, left recursion, or a grammar over
// max_elems elements (bounded repetition is unrolled).
Cfg ParseGbnf(std::string_view text, size_t max_elems = 1 << 20);

// GBNF for a JSON Schema (the subset applications use; docs/api.md "Structured output" lists
// it). Throws Error naming any keyword it does not support or a schema that cannot be
// satisfied. Output is compact JSON: whitespace is bounded, numbers have at most 16 digits
// before and after the point.
std::string JsonSchemaToGbnf(std::string_view schema_json);
// Several JSON Schemas in one grammar, for a caller that writes the syntax around them (a tool
// call's name and brackets): the primitives once, then per schema the rule `rule` matching its
// values, its $refs resolved against that schema. No `root` rule unless one is named so: the
// caller adds it. Rule names must not be the primitives' (ws, value, object, string, ...) nor
// end in "-s" or "-sN" (the generated rules' names).
struct NamedSchema {
  std::string rule;
  std::string schema_json;
};
std::string JsonSchemaRules(const std::vector<NamedSchema>& schemas);
// A GBNF literal ("...") matching exactly `bytes` (quotes, backslashes and control bytes escaped).
std::string GbnfLiteral(std::string_view bytes);
// GBNF for any JSON object (response_format json_object).
std::string JsonObjectGbnf();

}  // namespace paddock::grammar
