// grammar/json_schema.cpp: a JSON Schema as GBNF (grammar/cfg.h).
//
// Each schema node becomes a rule. Objects list their properties in the schema's order, the
// required ones always, the optional ones each present or not (a chain of rules, one per
// property, so commas come out right); properties the schema does not name are generated only
// where additionalProperties is true or a schema. Everything JSON leaves unbounded is bounded
// so a small model sampling freely still finishes: whitespace (a space, or a newline and at most
// 20 indentation characters), integer digits (16), fraction digits (16), exponent digits (2).
#include <cctype>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/json_linear.h"
#include "base/strings.h"
#include "grammar/cfg.h"
#include "grammar/json_digits.h"
#include "grammar/json_pattern.h"
#include "grammar/json_schema_merge.h"
#include "grammar/json_schema_sets.h"

namespace paddock::grammar {
namespace {

using schema_detail::CheckDisjoint;
using schema_detail::HasConstraints;
using schema_detail::Merge;
using schema_detail::RuleSink;

using json = nlohmann::ordered_json;

const char* const kPrimitives = R"(ws ::= | " " | "\n" [ \t]{0,20}
boolean ::= "true" | "false"
null ::= "null"
integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
number ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?
char ::= [^"\\\x00-\x1F\x7F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
string ::= "\"" char* "\""
value ::= object | array | string | number | boolean | null
object ::= "{" ws ( pair ( "," ws pair )* )? "}"
pair ::= string ws ":" ws value ws
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
date ::= [0-9]{4} "-" ( "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) | ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) )
time ::= ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )
hex ::= [0-9a-f]
uuid ::= hex{8} "-" hex{4} "-" hex{4} "-" hex{4} "-" hex{12}
octet ::= "25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9]? [0-9]
ipv4 ::= octet "." octet "." octet "." octet
label ::= [a-zA-Z0-9] ( [a-zA-Z0-9-]{0,20} [a-zA-Z0-9] )?
hostname ::= label ( "." label ){0,4}
atom ::= [a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]{1,20}
email ::= atom ( "." atom ){0,2} "@" label ( "." label ){1,4}
urichar ::= [a-zA-Z0-9._~!$&'()*+,;=:@-]
uri ::= [a-zA-Z] [a-zA-Z0-9+.-]{0,9} "://" hostname ( "/" urichar{0,30} ){0,6}
)";

// Limits on what a schema may ask for, so no schema makes its compile or a mask walk
// (grammar/matcher.h) costly: enum values are written as a trie (json_schema_sets.h), so a
// mask costs what one value's does, but every value is a few rules: 100,000 in all.
// anyOf/oneOf branches are whole schemas, each open at the choice: 1000 (OpenAI's limit).
constexpr int kMaxEnumValues = 100000;
constexpr int kMaxBranches = 1000;

struct Budget {
  int enum_values = 0;
  int branches = 0;
};

class Converter {
 public:
  // Rules go to *body; rule names are made unique through *counter (shared by the converters
  // of one grammar); $refs resolve against `root`.
  Converter(const json& root, std::string* body, std::map<std::string, int>* counter,
            Budget* budget)
      : root_(root), rules_{body}, counter_(*counter), budget_(*budget) {}

  // Rule `name` matches the root schema's values.
  void Define(const std::string& name) {
    const std::string top = Visit(root_, name + "-value", "");
    Rule(name, top);
  }

 private:
  struct Out {
    std::string* s;
    Out& operator<<(const std::string& x) {
      *s += x;
      return *this;
    }
  };

  [[noreturn]] static void Bad(const std::string& where, const std::string& what) {
    Fail("json schema: %s%s%s", where.empty() ? "" : where.c_str(), where.empty() ? "" : ": ",
         what.c_str());
  }

  std::string NewName(const std::string& base) {
    std::string n;
    for (char c : base) n += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '-';
    if (n.empty()) n = "r";
    const int k = counter_[n]++;
    return k == 0 ? n + "-s" : n + "-s" + std::to_string(k);
  }

  void Rule(const std::string& name, const std::string& rhs) {
    rules_ << name << " ::= " << rhs << "\n";
  }

  const json& Resolve(const std::string& ref, const std::string& where) {
    if (ref.empty() || ref[0] != '#')
      Bad(where, "$ref '" + ref + "': only references into this schema (#/...) are supported");
    try {
      const json::json_pointer p(ref.substr(1));
      if (!root_.contains(p)) Bad(where, "$ref '" + ref + "' points nowhere");
      return root_.at(p);
    } catch (const json::exception&) {
      Bad(where, "$ref '" + ref + "' is not a valid JSON pointer");
    }
  }

  static void CheckKeywords(const json& s, const std::string& where) {
    static const std::set<std::string> kUsed = {"type",
                                                "properties",
                                                "required",
                                                "additionalProperties",
                                                "items",
                                                "minItems",
                                                "maxItems",
                                                "enum",
                                                "const",
                                                "anyOf",
                                                "oneOf",
                                                "allOf",
                                                "$ref",
                                                "$defs",
                                                "definitions",
                                                "minLength",
                                                "maxLength",
                                                "format",
                                                "pattern",
                                                "prefixItems",
                                                "additionalItems",
                                                "minimum",
                                                "maximum",
                                                "exclusiveMinimum",
                                                "exclusiveMaximum",
                                                "multipleOf",
                                                "minProperties",
                                                "maxProperties",
                                                "uniqueItems"};
    static const std::set<std::string> kAnnotations = {
        "title",   "description", "$schema",    "$id",      "$comment",
        "default", "examples",    "deprecated", "readOnly", "writeOnly"};
    for (const auto& [k, v] : s.items()) {
      if (kUsed.count(k) != 0 || kAnnotations.count(k) != 0) continue;
      Bad(where, "keyword '" + k + "' is not supported (docs/api.md lists what is)");
    }
  }

  // The rule (or inline expression) matching schema `s`.
  std::string Visit(const json& s, const std::string& name, const std::string& where) {
    if (++depth_ > 64) Bad(where, "the schema nests too deeply");
    struct Depth {
      int* d;
      ~Depth() { --*d; }
    } guard{&depth_};
    if (s.is_boolean()) {
      if (!s.get<bool>()) Bad(where, "the schema 'false' matches nothing");
      return "value";
    }
    if (!s.is_object()) Bad(where, "a schema must be an object or a boolean");
    CheckKeywords(s, where);
    if (const auto it = s.find("$ref"); it != s.end()) {
      if (!it->is_string()) Bad(where, "$ref must be a string");
      const std::string ref = it->get<std::string>();
      auto known = refs_.find(ref);
      if (known != refs_.end()) return known->second;
      const std::string rn = NewName("ref-" + ref.substr(ref.rfind('/') + 1));
      refs_[ref] = rn;  // (before visiting: recursive schemas refer to themselves)
      const json& target = Resolve(ref, where);
      Rule(rn, Visit(target, rn, ref));
      return rn;
    }
    if (const auto it = s.find("const"); it != s.end()) return GbnfLiteral(it->dump());
    if (const auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) Bad(where, "enum must be a non-empty array");
      budget_.enum_values += static_cast<int>(it->size());
      if (budget_.enum_values > kMaxEnumValues)
        Bad(where,
            "the schema has more than " + std::to_string(kMaxEnumValues) + " enum values in all");
      std::vector<std::string> values;
      for (const auto& v : *it) values.push_back(v.dump());
      return schema_detail::LiteralSet(std::move(values), name, sink_);
    }
    if (s.contains("allOf")) return Visit(FoldAllOf(s, where), name, where);
    for (const char* key : {"anyOf", "oneOf"})
      if (s.contains(key)) return Alternatives(s, key, name, where);
    const auto type = s.find("type");
    if (type == s.end()) {
      if (s.contains("properties") || s.contains("additionalProperties"))
        return Object(s, name, where);
      if (s.contains("items")) return Array(s, name, where);
      if (!HasConstraints(s)) return "value";
      // Keywords of one type hold only for values of that type: every type, each with its own.
      std::string alts;
      for (const char* t : {"string", "number", "boolean", "null", "object", "array"})
        alts += (alts.empty() ? "" : " | ") + Typed(s, t, name + "-" + t, where, false);
      return Group(name, alts);
    }
    if (type->is_array()) {
      if (type->empty()) Bad(where, "type must not be an empty array");
      std::string alts;
      for (const auto& t : *type) {
        if (!t.is_string()) Bad(where, "type must be a string or an array of strings");
        alts += (alts.empty() ? "" : " | ") + Typed(s, t.get<std::string>(), name, where, false);
      }
      return Group(name, alts);
    }
    if (!type->is_string()) Bad(where, "type must be a string or an array of strings");
    return Typed(s, type->get<std::string>(), name, where);
  }

  // anyOf / oneOf: one of the branches, each merged with the keywords beside it (they hold for
  // every branch); oneOf's branches must not share values.
  std::string Alternatives(const json& s, const char* key, const std::string& name,
                           const std::string& where) {
    const auto it = s.find(key);
    if (!it->is_array() || it->empty()) Bad(where, std::string(key) + " must be a non-empty array");
    budget_.branches += static_cast<int>(it->size());
    if (budget_.branches > kMaxBranches)
      Bad(where, "the schema has more than " + std::to_string(kMaxBranches) +
                     " anyOf/oneOf branches in all");
    // Keywords beside anyOf / oneOf hold for every branch: each branch is merged with them.
    json base = s;
    base.erase(key);
    const bool has_base = HasConstraints(base);
    std::vector<json> branches;
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string bw = where + "/" + key + "/" + std::to_string(i);
      const json& b = Deref((*it)[i], bw);
      branches.push_back(has_base ? Merge(base, b, bw) : b);
    }
    if (std::string(key) == "oneOf") CheckDisjoint(branches, where);
    std::string alts;
    for (size_t i = 0; i < branches.size(); ++i) {
      alts += (i == 0 ? "" : " | ") + Visit(branches[i], name + "-" + std::to_string(i),
                                            where + "/" + key + "/" + std::to_string(i));
    }
    return Group(name, alts);
  }

  // A branch as written, or what its $ref points to (to merge it with other keywords).
  const json& Deref(const json& b, const std::string& where) {
    if (b.is_object() && b.contains("$ref") && b.size() == 1 && b["$ref"].is_string())
      return Resolve(b["$ref"].get<std::string>(), where);
    return b;
  }
  json FoldAllOf(const json& s, const std::string& where) {
    const json& all = s["allOf"];
    if (!all.is_array() || all.empty()) Bad(where, "allOf must be a non-empty array");
    json out = s;
    out.erase("allOf");
    for (size_t i = 0; i < all.size(); ++i) {
      const std::string w = where + "/allOf/" + std::to_string(i);
      out = Merge(out, Deref(all[i], w), w);
    }
    return out;
  }
  std::string Group(const std::string& name, const std::string& alts) {
    const std::string rn = NewName(name);
    Rule(rn, alts);
    return rn;
  }

  static int64_t Count(const json& s, const char* key, int64_t def, const std::string& where) {
    const auto it = s.find(key);
    if (it == s.end()) return def;
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      Bad(where, std::string(key) + " must be a non-negative integer");
    return it->get<int64_t>();
  }

  // Draft 4's exclusiveMinimum / exclusiveMaximum are booleans on minimum / maximum: as the
  // later drafts' numbers.
  static json Draft4Bounds(const json& s) {
    json out = s;
    for (const auto& [ex, bound] :
         {std::pair<const char*, const char*>{"exclusiveMinimum", "minimum"},
          {"exclusiveMaximum", "maximum"}}) {
      const auto it = s.find(ex);
      if (it == s.end() || !it->is_boolean()) continue;
      out.erase(ex);
      if (it->get<bool>() && s.contains(bound)) {
        out[ex] = s[bound];
        out.erase(bound);
      }
    }
    return out;
  }

  // strict: the schema names this one type, so another type's keywords are a mistake (400);
  // with several types each takes the keywords that apply to it.
  std::string Typed(const json& s, const std::string& t, const std::string& name,
                    const std::string& where, bool strict = true) {
    if (strict && t != "number" && t != "integer") {
      for (const char* k :
           {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
        if (s.contains(k)) Bad(where, std::string(k) + " applies to numbers only");
    }
    if (t == "string") return String(s, name, where);
    if (t == "integer") return Integer(Draft4Bounds(s), name, where);
    // (Every multiple of p/q is a multiple of p/q: the integer ones are written.)
    if (t == "number")
      return s.contains("multipleOf") ? Integer(Draft4Bounds(s), name, where)
                                      : Number(Draft4Bounds(s), name, where);
    if (t == "boolean") return "boolean";
    if (t == "null") return "null";
    if (t == "object") return Object(s, name, where);
    if (t == "array") return Array(s, name, where);
    Bad(where, "unknown type '" + t + "'");
  }

  // The formats as rules of the primitives, with the lengths their spellings can take (a
  // schema's minLength / maxLength must admit them all, as Pydantic's HttpUrl (1..2083) does).
  struct Format {
    const char* name;
    const char* rule;
    int min_len, max_len;
  };
  static constexpr Format kFormats[] = {
      {"date", "date", 10, 10},   {"time", "time", 9, 21}, {"date-time", "date \"T\" time", 20, 32},
      {"uuid", "uuid", 36, 36},   {"ipv4", "ipv4", 7, 15}, {"hostname", "hostname", 1, 114},
      {"email", "email", 5, 182}, {"uri", "uri", 5, 320},
  };

  std::string String(const json& s, const std::string& name, const std::string& where) {
    if (const auto pt = s.find("pattern"); pt != s.end()) {
      if (!pt->is_string()) Bad(where, "pattern must be a string");
      if (s.contains("format") || s.contains("minLength") || s.contains("maxLength"))
        Bad(where, "pattern with format, minLength or maxLength is not supported");
      return Group(name,
                   "\"\\\"\" ( " + PatternGbnf(pt->get<std::string>(), where) + " ) \"\\\"\"");
    }
    if (const auto f = s.find("format"); f != s.end()) {
      const std::string fmt = f->is_string() ? f->get<std::string>() : "";
      for (const Format& x : kFormats) {
        if (fmt != x.name) continue;
        const int64_t lo = Count(s, "minLength", 0, where), hi = Count(s, "maxLength", -1, where);
        if (lo > x.min_len || (hi >= 0 && hi < x.max_len))
          Bad(where, "format '" + fmt + "' is written in " + std::to_string(x.min_len) + " to " +
                         std::to_string(x.max_len) +
                         " characters here: minLength / maxLength must admit those");
        return "\"\\\"\" " + std::string(x.rule) + " \"\\\"\"";
      }
      Bad(where,
          "format '" + fmt +
              "' is not supported (date, time, date-time, uuid, ipv4, hostname, email, uri)");
    }
    const int64_t lo = Count(s, "minLength", 0, where);
    const int64_t hi = Count(s, "maxLength", -1, where);
    if (hi >= 0 && hi < lo) Bad(where, "maxLength is below minLength");
    if (lo > 10000 || hi > 10000) Bad(where, "string length bounds above 10000 are not supported");
    if (lo == 0 && hi < 0) return "string";
    const std::string rep =
        hi < 0 ? StrFormat("{%lld,}", static_cast<long long>(lo))
               : StrFormat("{%lld,%lld}", static_cast<long long>(lo), static_cast<long long>(hi));
    return Group(name, "\"\\\"\" char" + rep + " \"\\\"\"");
  }

  // A bound as an exact decimal: its JSON spelling (the shortest that reads back as the same
  // double) split into sign, integer part and fraction digits (no trailing zeros).
  struct Decimal {
    bool negative = false;
    int64_t whole = 0;
    std::string frac;
  };
  static Decimal ParseDecimal(const json& v, const std::string& key, const std::string& where) {
    if (!v.is_number()) Bad(where, key + " must be a number");
    const double d = v.get<double>();
    if (!(std::fabs(d) < 1e15)) Bad(where, key + " is out of range (|x| < 1e15)");
    std::string t = v.is_number_float() ? StrFormat("%.15g", d) : v.dump();
    if (t.find_first_of("eE") != std::string::npos) t = StrFormat("%.15f", d);  // 1e-07
    Decimal x;
    if (!t.empty() && t[0] == '-') {
      x.negative = true;
      t.erase(0, 1);
    }
    const size_t dot = t.find('.');
    x.whole = std::stoll(t.substr(0, dot));
    if (dot != std::string::npos) x.frac = t.substr(dot + 1);
    while (!x.frac.empty() && x.frac.back() == '0') x.frac.pop_back();
    if (x.frac.size() > 15) Bad(where, key + " has more than 15 fraction digits");
    if (x.whole == 0 && x.frac.empty()) x.negative = false;
    return x;
  }
  // Non-negative decimals in [a, b] (strictness per side); b_inf: no upper bound. Plain
  // notation: an integer part and an optional fraction.
  std::string NonNegative(const Decimal& a, bool a_strict, const Decimal& b, bool b_inf,
                          bool b_strict, const std::string& name) {
    const std::string any_frac = "( \".\" [0-9]{1,15} )?";
    std::string alts;
    auto add = [&](const std::string& x) { alts += (alts.empty() ? "" : " | ") + x; };
    const std::string A = std::to_string(a.whole);
    if (!b_inf && a.whole == b.whole && a.frac == b.frac) {  // one value (when not strict)
      return a_strict || b_strict ? "" : GbnfLiteral(a.frac.empty() ? A : A + "." + a.frac);
    }
    if (!b_inf && a.whole == b.whole) {  // one integer part: the fraction between the two
      if (a.frac.empty() && !a_strict) add(GbnfLiteral(A));
      if (b.frac.empty()) return alts.empty() ? "" : Group(name, alts);  // [A, A] or nothing
      add(GbnfLiteral(A + ".") + " ( " + FracBetween(a.frac, a_strict, b.frac, b_strict) + " )");
      return Group(name, alts);
    }
    // A: its fraction at least a's.
    if (a.frac.empty() && !a_strict)
      add(GbnfLiteral(A) + " " + any_frac);
    else
      add(GbnfLiteral(A + ".") + " ( " + FracAtLeast(a.frac, a_strict) + " )");
    // The integers strictly between, any fraction.
    const int64_t kInf = 999999999999999;
    const int64_t hi_whole = b_inf ? kInf : b.whole - 1;
    if (a.whole + 1 <= hi_whole)
      add("( " + Group(name + "-int", Range(a.whole + 1, hi_whole)) + " ) " + any_frac);
    // B: its fraction at most b's.
    if (!b_inf) {
      const std::string B = std::to_string(b.whole);
      if (b.frac.empty()) {
        if (!b_strict) add(GbnfLiteral(B));
      } else {
        const std::string f = FracAtMost(b.frac, b_strict);
        add(GbnfLiteral(B) + " ( \".\" ( " + f + " ) )?");
      }
    }
    return Group(name, alts);
  }

  // Numbers within minimum / maximum / exclusiveMinimum / exclusiveMaximum, exact in decimal
  // (0.1 is 0.1, not the double nearest it): written in plain notation, integer part and
  // fraction (at most 15 fraction digits).
  std::string Number(const json& s, const std::string& name, const std::string& where) {
    bool has_lo = false, has_hi = false, lo_strict = false, hi_strict = false;
    Decimal lo, hi;
    auto value = [](const Decimal& d) {
      return (d.negative ? -1.0 : 1.0) *
             std::stod(std::to_string(d.whole) + "." + (d.frac.empty() ? "0" : d.frac));
    };
    for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      const auto it = s.find(key);
      if (it == s.end()) continue;
      const Decimal d = ParseDecimal(*it, key, where);
      const std::string k = key;
      const bool upper = k == "maximum" || k == "exclusiveMaximum";
      const bool strict = k.rfind("exclusive", 0) == 0;
      bool& has = upper ? has_hi : has_lo;
      Decimal& cur = upper ? hi : lo;
      bool& cur_strict = upper ? hi_strict : lo_strict;
      const double v = value(d), c = has ? value(cur) : 0;
      if (!has || (upper ? v < c || (v == c && strict) : v > c || (v == c && strict))) {
        cur = d;
        cur_strict = strict;
      }
      has = true;
    }
    if (!has_lo && !has_hi) return "number";
    if (has_lo && has_hi &&
        (value(hi) < value(lo) || (value(hi) == value(lo) && (lo_strict || hi_strict))))
      Bad(where, "no number lies within the bounds");
    std::string alts;
    auto add = [&](const std::string& x) {
      if (!x.empty()) alts += (alts.empty() ? "" : " | ") + x;
    };
    const Decimal zero;
    // x >= 0: from max(lo, 0) up to hi (when hi >= 0).
    if (!has_hi || !hi.negative) {
      const bool from_lo = has_lo && !lo.negative;
      add(NonNegative(from_lo ? lo : zero, from_lo && lo_strict, hi, !has_hi, hi_strict,
                      name + "-pos"));
    }
    // x < 0: "-" y with y > 0, from max(-hi, 0) to -lo.
    if (!has_lo || lo.negative) {
      Decimal a = zero, b = lo;
      bool a_strict = true;  // y > 0 (-0 is written as 0)
      if (has_hi && hi.negative) {
        a = hi;
        a_strict = hi_strict;
      }
      a.negative = b.negative = false;
      const std::string neg = NonNegative(a, a_strict, b, !has_lo, lo_strict, name + "-neg");
      if (!neg.empty()) add("\"-\" " + neg);
    }
    if (alts.empty()) Bad(where, "no number lies within the bounds");
    return Group(name, alts);
  }

  // Integers within [minimum, maximum] (either bound optional), as digit-string alternatives:
  // below a bound of d digits, any shorter number; with d digits, digit by digit.
  std::string Integer(const json& s, const std::string& name, const std::string& where) {
    auto bound = [&](const char* k, const char* ek, bool upper, int64_t* out) {
      bool have = false;
      for (const char* key : {k, ek}) {
        const auto it = s.find(key);
        if (it == s.end()) continue;
        if (!it->is_number()) Bad(where, std::string(key) + " must be a number");
        const double v = it->get<double>();
        if (!(std::fabs(v) < 1e15)) Bad(where, std::string(key) + " is out of range");
        int64_t b =
            upper ? static_cast<int64_t>(std::floor(v)) : static_cast<int64_t>(std::ceil(v));
        if (key == ek && static_cast<double>(b) == v) b += upper ? -1 : 1;
        if (!have || (upper ? b < *out : b > *out)) *out = b;
        have = true;
      }
      return have;
    };
    int64_t lo = 0, hi = 0;
    const bool has_lo = bound("minimum", "exclusiveMinimum", false, &lo);
    const bool has_hi = bound("maximum", "exclusiveMaximum", true, &hi);
    int64_t k = 1;
    if (const auto m = s.find("multipleOf"); m != s.end()) {
      k = m->is_number() ? schema_detail::MultipleNumerator(m->dump()) : 0;
      if (k <= 0)
        Bad(where, "multipleOf must be a positive number of at most 15 significant digits");
    }
    if (!has_lo && !has_hi && k == 1) return "integer";
    if (has_lo && has_hi && hi < lo) Bad(where, "no integer lies within minimum and maximum");
    const int64_t kInf = 9999999999999999;  // 16 digits: the unbounded integer's length
    if (k > 1)
      return schema_detail::IntegerMultiples(has_lo ? lo : -kInf, has_hi ? hi : kInf, k, name,
                                             sink_, where);
    // Non-negative part [a, b] and negative part [-b', -a'].
    std::string alts;
    auto add = [&](const std::string& x) { alts += (alts.empty() ? "" : " | ") + x; };
    const int64_t a = has_lo ? std::max<int64_t>(lo, 0) : 0;
    const int64_t b = has_hi ? hi : kInf;
    if (a <= b) add(Range(a, b));
    if (!has_lo || lo < 0) {
      const int64_t na = has_hi ? std::max<int64_t>(-hi, 1) : 1;
      const int64_t nb = has_lo ? -lo : kInf;
      if (na <= nb) add("\"-\" " + Group(name + "-neg", Range(na, nb)));
    }
    return Group(name, alts);
  }

  std::string Object(const json& s, const std::string& name, const std::string& where) {
    std::vector<std::pair<std::string, std::string>> props;  // key literal, value rule
    std::vector<bool> req;
    std::set<std::string> required;
    if (const auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) Bad(where, "required must be an array of strings");
      for (const auto& k : *r) {
        if (!k.is_string()) Bad(where, "required must be an array of strings");
        required.insert(k.get<std::string>());
      }
    }
    std::set<std::string> named;
    if (const auto p = s.find("properties"); p != s.end()) {
      if (!p->is_object()) Bad(where, "properties must be an object");
      for (const auto& [k, v] : p->items()) {
        const std::string pw = where + "/properties/" + k;
        props.emplace_back(GbnfLiteral(json(k).dump()), Visit(v, name + "-" + k, pw));
        req.push_back(required.count(k) != 0);
        named.insert(k);
      }
    }
    for (const std::string& k : required)
      if (named.count(k) == 0) Bad(where, "required property '" + k + "' is not in properties");
    std::string extra;  // the rule for an additional value ("" : none)
    if (const auto a = s.find("additionalProperties"); a != s.end()) {
      if (a->is_boolean()) {
        if (a->get<bool>()) extra = "value";
      } else {
        extra = Visit(*a, name + "-extra", where + "/additionalProperties");
      }
    } else if (!s.contains("properties")) {
      extra = "value";  // {"type": "object"}: any object
    }
    // pairs
    std::vector<std::string> pair;
    for (size_t i = 0; i < props.size(); ++i) {
      pair.push_back(NewName(name + "-kv"));
      Rule(pair.back(), props[i].first + " ws \":\" ws " + props[i].second + " ws");
    }
    std::string kv;
    if (!extra.empty()) {
      kv = NewName(name + "-extra-kv");
      Rule(kv, "string ws \":\" ws " + extra + " ws");
    }
    if (s.contains("minProperties") || s.contains("maxProperties")) {
      const int64_t lo = Count(s, "minProperties", 0, where);
      const int64_t hi = Count(s, "maxProperties", -1, where);
      if (hi >= 0 && hi < lo) Bad(where, "maxProperties is below minProperties");
      if (lo > 1000 || hi > 1000) Bad(where, "property count bounds above 1000 are not supported");
      if (kv.empty() && !s.contains("additionalProperties") &&
          lo > static_cast<int64_t>(props.size())) {  // (JSON Schema allows others: needed)
        kv = NewName(name + "-extra-kv");
        Rule(kv, "string ws \":\" ws value ws");
      }
      return schema_detail::CountedObject(pair, req, kv, lo, hi, name, sink_, where);
    }
    std::string tail_after = "\"\"", tail_first = "\"\"";
    if (!extra.empty()) {
      tail_after = Group(name + "-extra-more", "( \",\" ws " + kv + " )*");
      tail_first = Group(name + "-extra-first", "( " + kv + " " + tail_after + " )?");
    }
    // chain[i][after]: properties i.. with `after` = something already written.
    std::string next_after = tail_after, next_first = tail_first;
    for (size_t i = props.size(); i-- > 0;) {
      const std::string with_after = "\",\" ws " + pair[i] + " " + next_after;
      const std::string with_first = pair[i] + " " + next_after;
      std::string ra, rf;
      if (req[i]) {
        ra = Group(name + "-a", with_after);
        rf = Group(name + "-f", with_first);
      } else {
        ra = Group(name + "-a", with_after + " | " + next_after);
        rf = Group(name + "-f", with_first + " | " + next_first);
      }
      next_after = ra;
      next_first = rf;
    }
    return Group(name, "\"{\" ws " + next_first + " \"}\"");
  }

  // A tuple: prefixItems (or, before 2020-12, items as an array), then items (additionalItems)
  // for any further ones. Written with the tuple's length at most (more only as minItems asks).
  std::string Tuple(const json& s, const json& prefix, const char* rest_key,
                    const std::string& name, const std::string& where) {
    if (!prefix.is_array()) Bad(where, "prefixItems must be an array of schemas");
    const int64_t k = static_cast<int64_t>(prefix.size());
    const int64_t lo = Count(s, "minItems", 0, where), hi = Count(s, "maxItems", -1, where);
    if (hi >= 0 && hi < lo) Bad(where, "maxItems is below minItems");
    if (k > 64 || lo > 64) Bad(where, "tuples of more than 64 items are not supported");
    const int64_t n = hi >= 0 ? std::min(hi, std::max(k, lo)) : std::max(k, lo);
    std::string rest = "value";
    if (const auto r = s.find(rest_key); r != s.end()) {
      if (r->is_boolean() && !r->get<bool>()) {
        if (lo > k) Bad(where, "minItems asks for more items than the tuple allows");
        rest = "";
      } else {
        rest = Visit(*r, name + "-rest", where + "/" + rest_key);
      }
    }
    std::vector<std::string> elems;
    for (int64_t i = 0; i < n; ++i)
      elems.push_back(i < k ? Visit(prefix[static_cast<size_t>(i)], name + "-" + std::to_string(i),
                                    where + "/prefixItems/" + std::to_string(i))
                            : rest);
    // Nested from the back: element i then, optionally (past minItems), the ones after it.
    std::string tail;
    for (int64_t i = n - 1; i >= 0; --i) {
      const std::string sep = i == 0 ? "" : "\",\" ws ";
      std::string cur =
          sep + elems[static_cast<size_t>(i)] + " ws" + (tail.empty() ? "" : " " + tail);
      tail = i >= lo ? "( " + cur + " )?" : "( " + cur + " )";
    }
    return Group(name, "\"[\" ws " + (tail.empty() ? "" : tail + " ") + "\"]\"");
  }

  // The values a schema allows when they are few (enum, const, boolean, null): literals.
  std::vector<std::string> FiniteValues(const json& item, const std::string& where) {
    const json& s = Deref(item, where);
    std::set<std::string> out;
    bool finite = s.is_object();
    if (finite && s.contains("const")) {
      out.insert(s["const"].dump());
    } else if (finite && s.contains("enum") && s["enum"].is_array()) {
      for (const auto& v : s["enum"]) out.insert(v.dump());
    } else if (finite && s.contains("type")) {
      for (const auto& t : s["type"].is_array() ? s["type"] : json::array({s["type"]})) {
        if (t == "boolean") {
          out.insert({"true", "false"});
        } else if (t == "null") {
          out.insert("null");
        } else {
          finite = false;
        }
      }
    }
    if (!finite || out.empty() || out.size() > schema_detail::kMaxUniqueItems)
      Bad(where,
          "uniqueItems is supported where maxItems is at most 1 or the items are one of "
          "at most " +
              std::to_string(schema_detail::kMaxUniqueItems) +
              " values (enum, const, boolean, null)");
    std::vector<std::string> lits;
    for (const std::string& v : out) lits.push_back(GbnfLiteral(v));
    return lits;
  }

  std::string Array(const json& s, const std::string& name, const std::string& where) {
    if (const auto u = s.find("uniqueItems"); u != s.end()) {
      if (!u->is_boolean()) Bad(where, "uniqueItems must be a boolean");
      if (u->get<bool>() && Count(s, "maxItems", -1, where) != 0 &&
          Count(s, "maxItems", -1, where) != 1) {
        if (s.contains("prefixItems") || (s.contains("items") && s["items"].is_array()))
          Bad(where, "uniqueItems with a tuple (prefixItems) is not supported");
        const auto lits = FiniteValues(s.contains("items") ? s["items"] : json(true), where);
        const int64_t lo = Count(s, "minItems", 0, where);
        if (lo > static_cast<int64_t>(lits.size()))
          Bad(where, "minItems asks for more distinct items than the items' values");
        return schema_detail::UniqueArray(lits, lo, Count(s, "maxItems", -1, where), name, sink_);
      }
    }
    if (const auto pi = s.find("prefixItems"); pi != s.end())
      return Tuple(s, *pi, "items", name, where);
    if (const auto it = s.find("items"); it != s.end() && it->is_array())
      return Tuple(s, *it, "additionalItems", name, where);
    // (additionalItems without items as an array says nothing: every item is an "item".)
    std::string item = "value";
    if (const auto it = s.find("items"); it != s.end())
      item = Visit(*it, name + "-item", where + "/items");
    const int64_t lo = Count(s, "minItems", 0, where);
    const int64_t hi = Count(s, "maxItems", -1, where);
    if (hi >= 0 && hi < lo) Bad(where, "maxItems is below minItems");
    if (lo > 1000 || hi > 1000) Bad(where, "array length bounds above 1000 are not supported");
    if (hi == 0) return Group(name, "\"[\" ws \"]\"");
    const std::string more = "( \",\" ws " + item + " ws )";
    const int64_t mlo = lo > 0 ? lo - 1 : 0;
    const std::string rep = hi < 0 ? StrFormat("{%lld,}", static_cast<long long>(mlo))
                                   : StrFormat("{%lld,%lld}", static_cast<long long>(mlo),
                                               static_cast<long long>(hi - 1));
    const std::string items = item + " ws " + more + rep;
    return Group(name, "\"[\" ws " + (lo > 0 ? items : "( " + items + " )?") + " \"]\"");
  }

  const json& root_;
  Out rules_;
  RuleSink sink_{[this](const std::string& b) { return NewName(b); },
                 [this](const std::string& n, const std::string& r) { Rule(n, r); }};
  std::map<std::string, int>& counter_;
  Budget& budget_;
  std::map<std::string, std::string> refs_;
  int depth_ = 0;
};

}  // namespace

std::string JsonSchemaToGbnf(std::string_view schema_json) {
  return JsonSchemaRules({{"root", std::string(schema_json)}});
}

std::string JsonSchemaRules(const std::vector<NamedSchema>& schemas) {
  std::string body;
  std::map<std::string, int> counter;
  Budget budget;
  for (const NamedSchema& s : schemas) {
    const json j = JsonOrDiscarded<json>(s.schema_json);
    if (j.is_discarded()) Fail("json schema: not valid JSON");
    Converter(j, &body, &counter, &budget).Define(s.rule);
  }
  return std::string(kPrimitives) + body;
}

std::string GbnfLiteral(std::string_view bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      out += StrFormat("\\x%02X", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string JsonObjectGbnf() {
  return std::string(kPrimitives) + "root ::= object\n";
}

}  // namespace paddock::grammar
