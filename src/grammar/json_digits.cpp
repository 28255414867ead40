// grammar/json_digits.cpp: digit strings within bounds as GBNF (json_digits.h).
#include "grammar/json_digits.h"

#include <algorithm>

#include "base/strings.h"

namespace paddock::grammar {

std::string Digits(char from, char to) {  // a class of the digits from..to
  if (from > to) return "";
  if (from == to) return StrFormat("\"%c\"", from);
  return StrFormat("[%c-%c]", from, to);
}
// Fraction digit strings s (non-empty) with 0.s >= 0.f (> when strict); f without trailing
// zeros. After the prefix equal to f, anything (strict: a tail with a non-zero digit).
std::string FracAtLeast(const std::string& f, bool strict) {
  if (f.empty()) return strict ? "[0-9]{0,14} [1-9]" : "[0-9]{1,15}";
  std::string alts;
  auto add = [&](const std::string& x) { alts += (alts.empty() ? "" : " | ") + x; };
  if (f[0] < '9') add(Digits(static_cast<char>(f[0] + 1), '9') + " [0-9]{0,14}");
  const std::string rest = f.substr(1);
  if (rest.empty())
    add(StrFormat("\"%c\"", f[0]) + (strict ? " [0-9]{0,13} [1-9]" : " [0-9]{0,14}"));
  else
    add(StrFormat("\"%c\" ( ", f[0]) + FracAtLeast(rest, strict) + " )");
  return alts;
}
// Fraction digit strings s (non-empty) with 0.s <= 0.f (< when strict).
std::string FracAtMost(const std::string& f, bool strict) {
  std::string alts;
  auto add = [&](const std::string& x) { alts += (alts.empty() ? "" : " | ") + x; };
  if (f[0] > '0') add(Digits('0', static_cast<char>(f[0] - 1)) + " [0-9]{0,14}");
  const std::string rest = f.substr(1);
  if (rest.empty()) {
    if (!strict) add(StrFormat("\"%c\" \"0\"{0,14}", f[0]));
  } else {
    add(StrFormat("\"%c\" ( ", f[0]) + FracAtMost(rest, strict) + " )?");
  }
  return alts.empty() ? "" : alts;
}
// Fraction strings s with 0.lo <= 0.s <= 0.hi (strictness per side), lo < hi.
std::string FracBetween(const std::string& lo, bool lo_strict, const std::string& hi,
                        bool hi_strict) {
  const char x = lo.empty() ? '0' : lo[0], y = hi[0];
  const std::string lrest = lo.empty() ? "" : lo.substr(1), hrest = hi.substr(1);
  if (x == y)
    return StrFormat("\"%c\" ( ", x) + FracBetween(lrest, lo_strict, hrest, hi_strict) + " )";
  std::string alts;
  auto add = [&](const std::string& a) { alts += (alts.empty() ? "" : " | ") + a; };
  // First digit x: the rest at least lo's (none needed when lo ends here and is not strict).
  if (lrest.empty())
    add(StrFormat("\"%c\"", x) + (lo_strict ? " [0-9]{0,13} [1-9]" : " [0-9]{0,14}"));
  else
    add(StrFormat("\"%c\" ( ", x) + FracAtLeast(lrest, lo_strict) + " )");
  if (y - x > 1) add(Digits(static_cast<char>(x + 1), static_cast<char>(y - 1)) + " [0-9]{0,14}");
  if (hrest.empty()) {
    if (!hi_strict) add(StrFormat("\"%c\" \"0\"{0,14}", y));
  } else {
    add(StrFormat("\"%c\" ( ", y) + FracAtMost(hrest, hi_strict) + " )?");
  }
  return alts;
}
// Decimal spellings (no leading zeros) of the integers in [a, b], a >= 0.
std::string Range(int64_t a, int64_t b) {
  std::string out;
  auto add = [&](const std::string& x) { out += (out.empty() ? "" : " | ") + x; };
  if (a == 0) {
    add("\"0\"");
    a = 1;
    if (b < 1) return out;
  }
  // Split by digit count, then each same-length range digit by digit.
  for (int64_t lo = a; lo <= b;) {
    int64_t p = 10;
    while (p <= lo) p *= 10;
    const int64_t hi = std::min(b, p - 1);
    add("( " + SameLength(std::to_string(lo), std::to_string(hi)) + " )");
    lo = hi + 1;
  }
  return out;
}
std::string SameLength(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "\"\"";
  if (lo.find_first_not_of('0') == std::string::npos &&
      hi.find_first_not_of('9') == std::string::npos)
    return StrFormat("[0-9]{%zu}", lo.size());  // every string of this length
  if (lo[0] == hi[0]) {
    const std::string rest = SameLength(lo.substr(1), hi.substr(1));
    return "\"" + lo.substr(0, 1) + "\" ( " + rest + " )";
  }
  const size_t n = lo.size() - 1;
  const std::string nines(n, '9'), zeros(n, '0');
  std::string out;
  auto add = [&](const std::string& x) { out += (out.empty() ? "" : " | ") + x; };
  // lo[0] followed by [lo.rest, 9..9]; digits strictly between with anything; hi[0] followed
  // by [0..0, hi.rest].
  add("\"" + lo.substr(0, 1) + "\" ( " + SameLength(lo.substr(1), nines) + " )");
  if (hi[0] - lo[0] > 1) {
    add(StrFormat("[%c-%c]", lo[0] + 1, hi[0] - 1) + (n > 0 ? StrFormat(" [0-9]{%zu}", n) : ""));
  }
  add("\"" + hi.substr(0, 1) + "\" ( " + SameLength(zeros, hi.substr(1)) + " )");
  return out;
}

}  // namespace paddock::grammar
