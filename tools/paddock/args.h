// tools/paddock/args.h: a small strict command-line parser for the paddock subcommands.
//
// Each subcommand declares its options; anything undeclared, a missing value, or a value that
// does not parse fully is an Error with a one-line message naming the flag.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace paddock::cli {

struct OptionSpec {
  std::vector<std::string> names;  // e.g. {"-n", "--n-predict"}
  bool takes_value;
  std::string help;
  bool repeatable = false;
};

class Args {
 public:
  // Parses argv (after the subcommand) against `specs`. Throws Error.
  Args(const std::string& command, const std::vector<OptionSpec>& specs, int argc, char** argv);

  bool Has(const std::string& name) const;
  std::string Str(const std::string& name, const std::string& dflt = "") const;
  std::vector<std::string> All(const std::string& name) const;
  int64_t Int(const std::string& name, int64_t dflt, int64_t lo, int64_t hi) const;
  uint64_t U64(const std::string& name, uint64_t dflt) const;
  double Float(const std::string& name, double dflt, double lo, double hi) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::string command_;
  std::map<std::string, std::vector<std::string>> values_;  // keyed by the first name
  std::map<std::string, std::string> canonical_;
  std::vector<std::string> positional_;
};

std::string Usage(const std::string& command, const std::string& synopsis,
                  const std::vector<OptionSpec>& specs);

}  // namespace paddock::cli
