// chat/jinja_json.cpp: JSON text as Jinja values, for what reaches a template from the API
// (tools, tool-call arguments, chat_template_kwargs). Kept apart so that only this file of the
// interpreter includes the JSON parser.
#include <nlohmann/json.hpp>

#include "base/json_linear.h"
#include "base/strings.h"
#include "chat/jinja_ast.h"

namespace paddock::jinja {
namespace {

using Json = nlohmann::ordered_json;

Value Convert(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return Value::None();
    case Json::value_t::boolean:
      return Value::Bool(j.get<bool>());
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return Value::Int(j.get<int64_t>());
    case Json::value_t::number_float:
      return Value::Float(j.get<double>());
    case Json::value_t::string:
      return Value::Str(j.get<std::string>());
    case Json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& x : j) l.push_back(Convert(x));
      return Value::MakeList(std::move(l));
    }
    case Json::value_t::object: {
      Dict d;
      d.reserve(j.size());
      for (const auto& [k, x] : j.items()) d.emplace_back(k, Convert(x));
      return Value::MakeDict(std::move(d));
    }
    default:
      return Value();
  }
}

}  // namespace

Value FromJson(const std::string& text) {
  const Json j = JsonOrDiscarded<Json>(text);
  if (j.is_discarded()) Fail("chat template input: not valid JSON");
  return Convert(j);
}

}  // namespace paddock::jinja
