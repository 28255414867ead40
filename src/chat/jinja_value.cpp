// chat/jinja_value.cpp: Jinja values as text: str(), repr, tojson, and equality.
#include <cmath>
#include <cstdio>

#include "base/strings.h"
#include "chat/jinja_ast.h"

namespace paddock::jinja {

std::string JsonEscape(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        o += "\\\"";
        break;
      case '\\':
        o += "\\\\";
        break;
      case '\n':
        o += "\\n";
        break;
      case '\r':
        o += "\\r";
        break;
      case '\t':
        o += "\\t";
        break;
      default:
        if (c < 0x20)
          o += StrFormat("\\u%04x", c);
        else
          o.push_back(static_cast<char>(c));
    }
  }
  return o + "\"";
}

// Python's json.dumps as HF's tojson calls it: ", " and ": " separators; with an indent, one
// item per line indented by `indent` spaces per level (and "," at line ends).
std::string ToJson(const Value& v, int indent, int level) {
  const std::string nl =
      indent > 0 ? "\n" + std::string(static_cast<size_t>(indent * (level + 1)), ' ') : "";
  const std::string end =
      indent > 0 ? "\n" + std::string(static_cast<size_t>(indent * level), ' ') : "";
  const char* sep = indent > 0 ? "," : ", ";
  switch (v.kind) {
    case Value::kUndefined:
    case Value::kNone:
      return "null";
    case Value::kBool:
      return v.b ? "true" : "false";
    case Value::kString:
      return JsonEscape(v.s);
    case Value::kList: {
      if (v.list->empty()) return "[]";
      std::string o = "[";
      for (size_t k = 0; k < v.list->size(); ++k)
        o += (k ? sep : "") + nl + ToJson((*v.list)[k], indent, level + 1);
      return o + end + "]";
    }
    case Value::kDict: {
      if (v.dict->empty()) return "{}";
      std::string o = "{";
      for (size_t k = 0; k < v.dict->size(); ++k)
        o += (k ? sep : "") + nl + JsonEscape((*v.dict)[k].first) + ": " +
             ToJson((*v.dict)[k].second, indent, level + 1);
      return o + end + "}";
    }
    default:
      return ToString(v);
  }
}

std::string ToString(const Value& v, bool repr) {
  switch (v.kind) {
    case Value::kUndefined:
      return "";
    case Value::kNone:
      return "None";
    case Value::kBool:
      return v.b ? "True" : "False";
    case Value::kInt:
      return std::to_string(v.i);
    case Value::kFloat: {
      std::string s = StrFormat("%.15g", v.f);
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
      return s;
    }
    case Value::kString:
      return repr ? "'" + v.s + "'" : v.s;
    case Value::kList: {
      std::string o = "[";
      for (size_t k = 0; k < v.list->size(); ++k)
        o += (k ? ", " : "") + ToString((*v.list)[k], true);
      return o + "]";
    }
    case Value::kDict: {
      std::string o = "{";
      for (size_t k = 0; k < v.dict->size(); ++k)
        o += (k ? ", " : "") + ("'" + (*v.dict)[k].first + "': ") +
             ToString((*v.dict)[k].second, true);
      return o + "}";
    }
  }
  return "";
}

bool Equal(const Value& a, const Value& b) {
  if (a.IsNumber() && b.IsNumber()) return a.Num() == b.Num();
  if (a.kind != b.kind)
    return (a.kind == Value::kUndefined || a.kind == Value::kNone) &&
           (b.kind == Value::kUndefined || b.kind == Value::kNone);
  switch (a.kind) {
    case Value::kString:
      return a.s == b.s;
    case Value::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k) {
        if (!Equal((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    case Value::kDict:
      return a.dict == b.dict;
    default:
      return true;
  }
}

}  // namespace paddock::jinja
