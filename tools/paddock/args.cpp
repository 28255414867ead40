#include "args.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "paddock/error.h"

namespace paddock::cli {

Args::Args(const std::string& command, const std::vector<OptionSpec>& specs, int argc, char** argv)
    : command_(command) {
  std::map<std::string, const OptionSpec*> by_name;
  for (const auto& s : specs) {
    for (const auto& n : s.names) {
      by_name[n] = &s;
      canonical_[n] = s.names[0];
    }
  }
  bool only_positional = false;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (only_positional || a.size() < 2 || a[0] != '-') {
      positional_.push_back(a);
      continue;
    }
    if (a == "--") {
      only_positional = true;
      continue;
    }
    std::string value;
    bool has_inline = false;
    if (a.rfind("--", 0) == 0) {
      const size_t eq = a.find('=');
      if (eq != std::string::npos) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
        has_inline = true;
      }
    }
    auto it = by_name.find(a);
    if (it == by_name.end())
      throw Error("unknown option '" + a + "' for '" + command_ + "' (see 'paddock " + command_ +
                  " --help')");
    const OptionSpec& s = *it->second;
    if (s.takes_value) {
      if (!has_inline) {
        if (i + 1 >= argc) throw Error("option '" + a + "' needs a value");
        value = argv[++i];
      }
    } else if (has_inline) {
      throw Error("option '" + a + "' takes no value");
    }
    auto& slot = values_[s.names[0]];
    if (!slot.empty() && !s.repeatable) throw Error("option '" + a + "' given more than once");
    slot.push_back(value);
  }
}

bool Args::Has(const std::string& name) const {
  auto c = canonical_.find(name);
  return c != canonical_.end() && values_.count(c->second) != 0;
}

std::string Args::Str(const std::string& name, const std::string& dflt) const {
  auto c = canonical_.find(name);
  if (c == canonical_.end()) return dflt;
  auto it = values_.find(c->second);
  return it == values_.end() ? dflt : it->second.back();
}

std::vector<std::string> Args::All(const std::string& name) const {
  auto c = canonical_.find(name);
  if (c == canonical_.end()) return {};
  auto it = values_.find(c->second);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

int64_t Args::Int(const std::string& name, int64_t dflt, int64_t lo, int64_t hi) const {
  if (!Has(name)) return dflt;
  const std::string s = Str(name);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size())
    throw Error("invalid value '" + s + "' for " + name + ": expected an integer");
  if (v < lo || v > hi)
    throw Error("value " + s + " for " + name + " is out of range [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "]");
  return v;
}

uint64_t Args::U64(const std::string& name, uint64_t dflt) const {
  if (!Has(name)) return dflt;
  const std::string s = Str(name);
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size())
    throw Error("invalid value '" + s + "' for " + name + ": expected a non-negative integer");
  return v;
}

double Args::Float(const std::string& name, double dflt, double lo, double hi) const {
  if (!Has(name)) return dflt;
  const std::string s = Str(name);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v))
    throw Error("invalid value '" + s + "' for " + name + ": expected a number");
  if (v < lo || v > hi)
    throw Error("value " + s + " for " + name + " is out of range [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "]");
  return v;
}

std::string Usage(const std::string& command, const std::string& synopsis,
                  const std::vector<OptionSpec>& specs) {
  std::string u = "usage: paddock " + command + " " + synopsis + "\n\noptions:\n";
  for (const auto& s : specs) {
    std::string n;
    for (const auto& x : s.names) n += (n.empty() ? "" : ", ") + x;
    if (s.takes_value) n += " V";
    u += "  " + n + std::string(n.size() < 28 ? 28 - n.size() : 1, ' ') + s.help + "\n";
  }
  return u;
}

}  // namespace paddock::cli
