// grammar/json_schema_merge.cpp: merging schemas and oneOf's disjointness
// (grammar/json_schema_merge.h).
#include "grammar/json_schema_merge.h"

#include <algorithm>

#include "base/strings.h"

namespace paddock::grammar::schema_detail {
namespace {

[[noreturn]] void Bad(const std::string& where, const std::string& what) {
  Fail("json schema: %s%s%s", where.empty() ? "" : where.c_str(), where.empty() ? "" : ": ",
       what.c_str());
}

}  // namespace

// Whether a schema says anything about its values (annotations do not).
bool HasConstraints(const json& s) {
  static const std::set<std::string> kAnnotations = {
      "title",    "description", "$schema",  "$id",       "$comment", "default",
      "examples", "deprecated",  "readOnly", "writeOnly", "$defs",    "definitions"};
  for (const auto& [k, v] : s.items())
    if (kAnnotations.count(k) == 0) return true;
  return false;
}
std::set<std::string> TypesOf(const json& t) {
  std::set<std::string> out;
  if (t.is_string()) out.insert(t.get<std::string>());
  if (t.is_array())
    for (const auto& x : t)
      if (x.is_string()) out.insert(x.get<std::string>());
  return out;
}
// Both schemas at once (allOf, or a branch with its parent's keywords): keywords of one only
// are kept; shared ones combine (types intersected, required joined, properties merged,
// bounds tightened); a keyword both set differently otherwise is a 400 naming it.
json Merge(const json& a, const json& b, const std::string& where) {
  if (b.is_boolean()) {
    if (!b.get<bool>()) Bad(where, "the schema 'false' matches nothing");
    return a;
  }
  if (!b.is_object() || !a.is_object()) Bad(where, "a schema must be an object or a boolean");
  if (b.contains("$ref"))
    Bad(where, "$ref beside other keywords in allOf/anyOf/oneOf is not supported");
  json out = a;
  for (const auto& [k, v] : b.items()) {
    if (!out.contains(k) || out[k] == v) {
      out[k] = v;
      continue;
    }
    if (k == "type") {
      std::set<std::string> x = TypesOf(out[k]), y = TypesOf(v), both;
      for (const std::string& t : x) {
        if (y.count(t))
          both.insert(t);
        else if (t == "number" && y.count("integer"))
          both.insert("integer");
        else if (t == "integer" && y.count("number"))
          both.insert("integer");
      }
      if (both.empty()) Bad(where, "no type satisfies both schemas");
      out[k] = json(std::vector<std::string>(both.begin(), both.end()));
    } else if (k == "required" && v.is_array() && out[k].is_array()) {
      for (const auto& r : v)
        if (std::find(out[k].begin(), out[k].end(), r) == out[k].end()) out[k].push_back(r);
    } else if (k == "properties" && v.is_object() && out[k].is_object()) {
      for (const auto& [pk, pv] : v.items())
        out[k][pk] = out[k].contains(pk) ? Merge(out[k][pk], pv, where + "/properties/" + pk) : pv;
    } else if ((k == "minimum" || k == "minLength" || k == "minItems") && v.is_number()) {
      if (v > out[k]) out[k] = v;
    } else if ((k == "maximum" || k == "maxLength" || k == "maxItems") && v.is_number()) {
      if (v < out[k]) out[k] = v;
    } else if (HasConstraints(json{{k, v}})) {
      Bad(where, "two schemas set '" + k + "' differently; they cannot be combined here");
    }
  }
  return out;
}
// oneOf asks for exactly one branch: the output is one branch's value, so the branches must
// not share values. Disjoint here: different types (integer within number), different
// const/enum values, or objects told apart by a required property's const/enum values (a
// discriminator). Anything else may overlap: a 400 (anyOf says "at least one").
void CheckDisjoint(const std::vector<json>& branches, const std::string& where) {
  auto values = [](const json& b, json* out) {
    if (!b.is_object()) return false;
    if (b.contains("const")) {
      *out = json::array({b["const"]});
      return true;
    }
    if (b.contains("enum") && b["enum"].is_array()) {
      *out = b["enum"];
      return true;
    }
    return false;
  };
  auto types = [&](const json& b) {
    std::set<std::string> t;
    json vs;
    if (values(b, &vs)) {
      for (const auto& v : vs)
        t.insert(v.is_string()    ? "string"
                 : v.is_boolean() ? "boolean"
                 : v.is_null()    ? "null"
                 : v.is_number()  ? "number"
                 : v.is_object()  ? "object"
                                  : "array");
    } else if (b.is_object() && b.contains("type")) {
      t = TypesOf(b["type"]);
      if (t.count("integer")) t.insert("number");
    }
    return t;  // empty: any type
  };
  auto discriminated = [&](const json& a, const json& b) {
    if (!a.is_object() || !b.is_object() || !a.contains("properties") || !b.contains("properties"))
      return false;
    for (const auto& [name, pa] : a["properties"].items()) {
      const std::string p = name;  // (a lambda may not capture a structured binding)
      if (!b["properties"].contains(p)) continue;
      auto req = [&](const json& s) {
        return s.contains("required") && s["required"].is_array() &&
               std::find(s["required"].begin(), s["required"].end(), p) != s["required"].end();
      };
      json va, vb;
      if (!req(a) || !req(b) || !values(pa, &va) || !values(b["properties"][p], &vb)) continue;
      bool shared = false;
      for (const auto& x : va)
        for (const auto& y : vb) shared = shared || x == y;
      if (!shared) return true;
    }
    return false;
  };
  for (size_t i = 0; i < branches.size(); ++i) {
    for (size_t j = i + 1; j < branches.size(); ++j) {
      const json &a = branches[i], &b = branches[j];
      json va, vb;
      if (values(a, &va) && values(b, &vb)) {
        bool shared = false;
        for (const auto& x : va)
          for (const auto& y : vb) shared = shared || x == y;
        if (!shared) continue;
      }
      const std::set<std::string> ta = types(a), tb = types(b);
      bool overlap = ta.empty() || tb.empty();
      for (const std::string& t : ta) overlap = overlap || tb.count(t) != 0;
      if (!overlap || discriminated(a, b)) continue;
      Bad(where, "oneOf branches " + std::to_string(i) + " and " + std::to_string(j) +
                     " can match the same value (exactly one must): tell them apart by type, "
                     "const or a required discriminator property, or use anyOf");
    }
  }
}

}  // namespace paddock::grammar::schema_detail
