// grammar/json_schema_merge.h: combining JSON Schemas for the converter (json_schema.cpp):
// allOf and a branch with its parent's keywords merged into one schema, and the check that
// oneOf's branches cannot match the same value. Internal to grammar/.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace paddock::grammar::schema_detail {

using json = nlohmann::ordered_json;

// Whether a schema says anything about its values (annotations do not).
bool HasConstraints(const json& s);
// Both schemas at once; throws Error naming a keyword they set differently.
json Merge(const json& a, const json& b, const std::string& where);
// Throws Error unless no value can match two of the branches.
void CheckDisjoint(const std::vector<json>& branches, const std::string& where);

}  // namespace paddock::grammar::schema_detail
