// grammar/json_pattern.cpp: JSON Schema patterns as GBNF (grammar/json_pattern.h).
#include "grammar/json_pattern.h"

#include <algorithm>
#include <cctype>

#include "base/strings.h"
#include "grammar/cfg.h"

namespace paddock::grammar {
namespace {

[[noreturn]] void Bad(const std::string& where, const std::string& what) {
  Fail("json schema: %s%s%s", where.empty() ? "" : where.c_str(), where.empty() ? "" : ": ",
       what.c_str());
}

// A pattern is read by recursive descent: alternatives of sequences of quantified atoms.
std::string PatternAlt(const std::string& re, size_t* i, const std::string& where, int depth);
std::string PatternSeq(const std::string& re, size_t* i, const std::string& where, int depth);
std::string PatternQuantifier(const std::string& re, size_t* i, const std::string& where);
std::string PatternAtom(const std::string& re, size_t* i, const std::string& where, int depth);
std::string PatternClass(const std::string& re, size_t* i, const std::string& where);

std::string PatternAlt(const std::string& re, size_t* i, const std::string& where, int depth) {
  if (depth > 16) Bad(where, "pattern: groups nest too deeply");
  std::string alts = PatternSeq(re, i, where, depth);
  while (*i < re.size() && re[*i] == '|') {
    ++*i;
    alts += " | " + PatternSeq(re, i, where, depth);
  }
  return alts;
}
std::string PatternSeq(const std::string& re, size_t* i, const std::string& where, int depth) {
  std::string seq;
  while (*i < re.size() && re[*i] != '|' && re[*i] != ')') {
    if (re[*i] == '$' && *i + 1 == re.size()) break;
    std::string atom = PatternAtom(re, i, where, depth);
    atom += PatternQuantifier(re, i, where);
    seq += (seq.empty() ? "" : " ") + atom;
  }
  return seq.empty() ? "\"\"" : seq;
}
std::string PatternQuantifier(const std::string& re, size_t* i, const std::string& where) {
  if (*i >= re.size()) return "";
  std::string q;
  const char c = re[*i];
  if (c == '*' || c == '+' || c == '?') {
    q = std::string(1, c);
    ++*i;
  } else if (c == '{') {
    const size_t close = re.find('}', *i);
    if (close == std::string::npos) Bad(where, "pattern: unclosed {");
    const std::string body = re.substr(*i + 1, close - *i - 1);
    if (body.empty() || body.find_first_not_of("0123456789,") != std::string::npos ||
        body[0] == ',' || std::count(body.begin(), body.end(), ',') > 1)
      Bad(where, "pattern: quantifier {" + body + "} is not supported");
    const size_t comma = body.find(',');
    const long lo = std::stol(body.substr(0, comma));
    const long hi = comma == std::string::npos ? lo
                    : comma + 1 == body.size() ? -1
                                               : std::stol(body.substr(comma + 1));
    if (lo > 1000 || hi > 1000 || (hi >= 0 && hi < lo))
      Bad(where, "pattern: quantifier {" + body + "} is out of range (at most 1000)");
    q = "{" + body + "}";
    *i = close + 1;
  } else {
    return "";
  }
  if (*i < re.size() && re[*i] == '?') ++*i;  // lazy: the same strings
  if (*i < re.size() && (re[*i] == '+' || re[*i] == '*' || re[*i] == '{'))
    Bad(where, "pattern: a quantifier after a quantifier is not supported");
  return q;
}
// A class escape's members (inside [...]), or "" when `c` is not one.
std::string ClassEscape(char c) {
  switch (c) {
    case 'd':
      return "0-9";
    case 'w':
      return "a-zA-Z0-9_";
    case 's':
      return " ";  // (space: the whitespace a JSON string needs no escape for)
    default:
      return "";
  }
}
// A character of a class or literal, in GBNF's class syntax.
std::string ClassChar(unsigned char c) {
  if (c == ']' || c == '[' || c == '\\' || c == '^' || c == '-')
    return std::string("\\") + static_cast<char>(c);
  return std::string(1, static_cast<char>(c));
}
// A JSON string's characters a pattern cannot name directly: they are written escaped.
bool MustEscape(unsigned char ch) {
  return ch == '"' || ch == '\\' || ch < 0x20 || ch == 0x7F;
}

// A class [...] (at *i): its members in GBNF's syntax, a negated one without the characters a
// JSON string must escape.
std::string PatternClass(const std::string& re, size_t* i, const std::string& where) {
  auto bad_char = MustEscape;
  ++*i;
  bool negated = false;
  if (*i < re.size() && re[*i] == '^') {
    negated = true;
    ++*i;
  }
  std::string members;
  bool first = true;
  while (*i < re.size() && (re[*i] != ']' || first)) {
    first = false;
    unsigned char m = static_cast<unsigned char>(re[*i]);
    if (m == '\\') {
      if (*i + 1 >= re.size()) Bad(where, "pattern: a trailing \\");
      const char e = re[*i + 1];
      const std::string cls = ClassEscape(e);
      *i += 2;
      if (!cls.empty()) {
        members += cls;
        continue;
      }
      if (std::isalnum(static_cast<unsigned char>(e)))
        Bad(where, std::string("pattern: \\") + e + " is not supported");
      m = static_cast<unsigned char>(e);
    } else {
      ++*i;
    }
    if (bad_char(m)) {
      if (negated) continue;  // excluded below anyway
      Bad(where, "pattern: a class with a character JSON must escape is not supported");
    }
    if (*i + 1 < re.size() && re[*i] == '-' && re[*i + 1] != ']') {
      const unsigned char to = static_cast<unsigned char>(re[*i + 1]);
      if (to == '\\' || to < m) Bad(where, "pattern: class range is not supported");
      members += ClassChar(m) + "-" + ClassChar(to);
      *i += 2;
    } else {
      members += ClassChar(m);
    }
  }
  if (*i >= re.size()) Bad(where, "pattern: unclosed [");
  ++*i;
  if (negated) return "[^" + members + "\"\\\\\\x00-\\x1F\\x7F]";
  if (members.empty()) Bad(where, "pattern: an empty class matches nothing");
  return "[" + members + "]";
}

std::string PatternAtom(const std::string& re, size_t* i, const std::string& where, int depth) {
  const unsigned char c = static_cast<unsigned char>(re[*i]);
  auto bad_char = MustEscape;
  if (c == '(') {
    ++*i;
    if (re.compare(*i, 2, "?:") == 0) {
      *i += 2;
    } else if (*i < re.size() && re[*i] == '?') {
      Bad(where, "pattern: lookaround and named groups are not supported");
    }
    const std::string inner = PatternAlt(re, i, where, depth + 1);
    if (*i >= re.size() || re[*i] != ')') Bad(where, "pattern: unclosed (");
    ++*i;
    return "( " + inner + " )";
  }
  if (c == '.') {
    ++*i;
    return "[^\"\\\\\\x00-\\x1F\\x7F]";
  }
  if (c == '[') return PatternClass(re, i, where);
  if (c == '\\') {
    if (*i + 1 >= re.size()) Bad(where, "pattern: a trailing \\");
    const char e = re[*i + 1];
    *i += 2;
    const std::string cls = ClassEscape(e);
    if (!cls.empty()) return "[" + cls + "]";
    if (std::isalnum(static_cast<unsigned char>(e)))
      Bad(where, std::string("pattern: \\") + e + " is not supported");
    if (bad_char(static_cast<unsigned char>(e)))
      Bad(where, "pattern: a character JSON must escape is not supported");
    return GbnfLiteral(std::string(1, e));
  }
  if (c == '*' || c == '+' || c == '?' || c == '{' || c == ')' || c == '|' || c == '^' || c == '$')
    Bad(where, "pattern: '" + std::string(1, static_cast<char>(c)) + "' at " + std::to_string(*i) +
                   " is not supported");
  if (bad_char(c)) Bad(where, "pattern: a character JSON must escape is not supported");
  // A literal: a UTF-8 sequence whole.
  size_t len = 1;
  if (c >= 0xC0) len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  const std::string lit = re.substr(*i, len);
  *i += len;
  return GbnfLiteral(lit);
}

}  // namespace

// An ECMA-262 pattern (the subset schemas use) as a GBNF expression over the string's
// characters: literals, escapes (\d \w \s \. ...), classes ([a-z], [^...]), ., groups
// ((...), (?:...)), alternation, quantifiers (* + ? {m} {m,} {m,n}, lazy ones as greedy),
// ^ and $ at the ends. The output matches the whole pattern (a pattern is a search, so every
// string that matches whole is valid). Characters a JSON string must escape (", \, controls)
// are left out of classes and '.'; anything else (lookaround, backreferences, \b, flags,
// Unicode classes) is a 400 naming it.
std::string PatternGbnf(const std::string& re, const std::string& where) {
  size_t i = 0;
  if (i < re.size() && re[i] == '^') ++i;
  std::string out = PatternAlt(re, &i, where, 0);
  if (i < re.size() && re[i] == '$') ++i;
  if (i != re.size())
    Bad(where, "pattern: '" + re.substr(i, 1) + "' at " + std::to_string(i) + " is not supported");
  return out;
}

}  // namespace paddock::grammar
