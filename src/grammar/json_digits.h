// grammar/json_digits.h: digit strings within bounds as GBNF alternatives, for the JSON
// Schema converter's numbers (json_schema.cpp): integers in a range written digit by digit,
// and fraction digits above, below or between exact decimal bounds. Pure string functions.
#pragma once

#include <cstdint>
#include <string>

namespace paddock::grammar {

// A class of the digits from..to ("" when from > to).
std::string Digits(char from, char to);
// Fraction digit strings s (non-empty) with 0.s >= 0.f (> when strict); f without trailing
// zeros.
std::string FracAtLeast(const std::string& f, bool strict);
// Fraction digit strings s (non-empty) with 0.s <= 0.f (< when strict).
std::string FracAtMost(const std::string& f, bool strict);
// Fraction strings s with 0.lo <= 0.s <= 0.hi (strictness per side), lo < hi.
std::string FracBetween(const std::string& lo, bool lo_strict, const std::string& hi,
                        bool hi_strict);
// Decimal spellings (no leading zeros) of the integers in [a, b], a >= 0.
std::string Range(int64_t a, int64_t b);
// The digit strings of one length from lo to hi (lo <= hi, same length).
std::string SameLength(const std::string& lo, const std::string& hi);

}  // namespace paddock::grammar
