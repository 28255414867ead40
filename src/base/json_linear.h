// base/json_linear.h: JSON text into an nlohmann::ordered_json in time linear in its size.
//
// nlohmann's own parser inserts each key of an object with ordered_map::emplace, which scans the
// keys already there: an object of n keys costs O(n^2) (100,000 keys: seconds on an event
// thread, before any field is checked). This builds the same value through the SAX interface,
// appending each member directly and finding repeated names with a hash set per open object; a
// repeated name is an error (RFC 8259 leaves its meaning open, so no reading of it is guessed),
// and so is an object of more than `max_members` members (the parse stops there).
// Include it only where nlohmann/json.hpp is included already.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

namespace paddock {

template <class Json>
class LinearJsonBuilder : public nlohmann::json_sax<Json> {
 public:
  using number_integer_t = typename Json::number_integer_t;
  using number_unsigned_t = typename Json::number_unsigned_t;
  using number_float_t = typename Json::number_float_t;
  using string_t = typename Json::string_t;
  using binary_t = typename Json::binary_t;

  LinearJsonBuilder(Json* root, size_t max_members) : root_(root), max_members_(max_members) {}
  const std::string& error() const { return error_; }

  bool null() override { return Put(Json(nullptr)); }
  bool boolean(bool v) override { return Put(Json(v)); }
  bool number_integer(number_integer_t v) override { return Put(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return Put(Json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return Put(Json(v)); }
  bool string(string_t& v) override { return Put(Json(std::move(v))); }
  bool binary(binary_t& v) override { return Put(Json::binary(std::move(v))); }
  bool start_object(std::size_t) override { return Open(Json::object()); }
  bool start_array(std::size_t) override { return Open(Json::array()); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }
  bool key(string_t& k) override {
    Frame& f = stack_.back();
    if (f.keys.size() >= max_members_) {
      error_ = "the object " + (f.path.empty() ? std::string("at the top") : "'" + f.path + "'") +
               " has more than " + std::to_string(max_members_) + " members";
      return false;
    }
    if (!f.keys.insert(k).second) {
      error_ = "the name '" + k.substr(0, 64) + "' appears twice in one object";
      return false;
    }
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error_ = e.what();
    return false;
  }

 private:
  struct Frame {
    Json* value;
    std::string path;                   // e.g. "logit_bias", "messages[2].content"
    std::unordered_set<string_t> keys;  // an object's names so far
  };
  // The path of the value about to be placed (before Slot() takes the pending key).
  std::string NextPath() const {
    if (stack_.empty()) return "";
    const Frame& f = stack_.back();
    if (f.value->is_array()) return f.path + "[" + std::to_string(f.value->size()) + "]";
    return f.path.empty() ? std::string(key_.substr(0, 64)) : f.path + "." + key_.substr(0, 64);
  }
  // The slot the next value goes to: the root, the end of the open array, or the open object's
  // member under the pending key (appended: the names are unique, checked in key()).
  Json* Slot() {
    if (stack_.empty()) return root_;
    Json& c = *stack_.back().value;
    if (c.is_array()) return &c.template get_ref<typename Json::array_t&>().emplace_back();
    auto& members = static_cast<std::vector<std::pair<const string_t, Json>>&>(
        c.template get_ref<typename Json::object_t&>());
    return &members.emplace_back(std::move(key_), Json()).second;
  }
  bool Put(Json&& v) {
    *Slot() = std::move(v);
    return true;
  }
  bool Open(Json&& v) {
    std::string path = NextPath();
    Json* slot = Slot();
    *slot = std::move(v);
    stack_.push_back({slot, std::move(path), {}});
    return true;
  }
  bool Close() {
    stack_.pop_back();
    return true;
  }

  Json* root_;
  size_t max_members_;
  std::vector<Frame> stack_;
  string_t key_;
  std::string error_;
};

// Parses `text` into *out; false with *error set (nlohmann's message, the repeated name, or the
// object over the limit).
template <class Json>
bool ParseJsonLinear(std::string_view text, Json* out, std::string* error,
                     size_t max_members = static_cast<size_t>(-1)) {
  *out = Json();
  LinearJsonBuilder<Json> b(out, max_members);
  const bool ok = Json::sax_parse(text.begin(), text.end(), &b);
  if (!ok && error != nullptr) *error = b.error().empty() ? "invalid JSON" : b.error();
  return ok;
}

// The same as a drop-in for Json::parse(text, nullptr, false): a discarded value on error.
template <class Json>
Json JsonOrDiscarded(std::string_view text) {
  Json j;
  if (!ParseJsonLinear(text, &j, nullptr)) return Json(Json::value_t::discarded);
  return j;
}

}  // namespace paddock
