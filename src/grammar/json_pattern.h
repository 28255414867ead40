// grammar/json_pattern.h: a JSON Schema `pattern` (the ECMA-262 subset schemas use) as a GBNF
// expression over a JSON string's characters (json_schema.cpp's String).
#pragma once

#include <string>

namespace paddock::grammar {

// The expression matching the whole pattern; throws Error ("json schema: WHERE: pattern: ...")
// naming what is not supported.
std::string PatternGbnf(const std::string& re, const std::string& where);

}  // namespace paddock::grammar
