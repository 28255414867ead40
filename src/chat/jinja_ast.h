// chat/jinja_ast.h: the Jinja interpreter's inner types (private to src/chat): values, tokens,
// expression trees and statement nodes, shared by the lexer (jinja_lexer.cpp), the parser
// (jinja_parser.cpp) and the renderer (jinja_render.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja.h"

namespace paddock::jinja {

// ---- values ---------------------------------------------------------------------------------

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;

struct Value {
  enum Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict };
  Kind kind = kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;

  static Value None() {
    Value v;
    v.kind = kNone;
    return v;
  }
  static Value Bool(bool x) {
    Value v;
    v.kind = kBool;
    v.b = x;
    return v;
  }
  static Value Int(int64_t x) {
    Value v;
    v.kind = kInt;
    v.i = x;
    return v;
  }
  static Value Float(double x) {
    Value v;
    v.kind = kFloat;
    v.f = x;
    return v;
  }
  static Value Str(std::string x) {
    Value v;
    v.kind = kString;
    v.s = std::move(x);
    return v;
  }
  static Value MakeList(List l = {}) {
    Value v;
    v.kind = kList;
    v.list = std::make_shared<List>(std::move(l));
    return v;
  }
  static Value MakeDict(Dict d = {}) {
    Value v;
    v.kind = kDict;
    v.dict = std::make_shared<Dict>(std::move(d));
    return v;
  }

  bool Truthy() const {
    switch (kind) {
      case kUndefined:
      case kNone:
        return false;
      case kBool:
        return b;
      case kInt:
        return i != 0;
      case kFloat:
        return f != 0;
      case kString:
        return !s.empty();
      case kList:
        return !list->empty();
      case kDict:
        return !dict->empty();
    }
    return false;
  }
  bool IsNumber() const { return kind == kInt || kind == kFloat || kind == kBool; }
  double Num() const {
    return kind == kFloat ? f : kind == kBool ? (b ? 1 : 0) : static_cast<double>(i);
  }
  const Value* Get(const std::string& key) const {
    if (kind != kDict) return nullptr;
    for (const auto& [k, v] : *dict) {
      if (k == key) return &v;
    }
    return nullptr;
  }
  void Set(const std::string& key, Value v) {
    for (auto& [k, old] : *dict) {
      if (k == key) {
        old = std::move(v);
        return;
      }
    }
    dict->emplace_back(key, std::move(v));
  }
};

std::string JsonEscape(const std::string& s);
std::string ToJson(const Value& v, int indent = 0, int level = 0);
// A JSON text as a value (objects keep their key order); throws Error if it does not parse.
Value FromJson(const std::string& text);
std::string ToString(const Value& v, bool repr = false);
bool Equal(const Value& a, const Value& b);

// ---- tokens: an expression's lexemes, and the source cut into text and tags ----------------

struct Tok {
  enum Kind { kName, kString, kInt, kFloat, kOp, kEnd } kind;
  std::string text;
};
// The tokens of one tag's content; `where` names the tag in errors.
std::vector<Tok> Lex(const std::string& src, const std::string& where);

struct Chunk {
  enum Kind { kText, kExpr, kStmt, kComment } kind;
  std::string content;
  bool trim_left = false, trim_right = false;  // '-' at the tag's start / end
  size_t line = 1;
};

// The source as text and tags, with {%- -%} and HF's trim_blocks / lstrip_blocks applied.
std::vector<Chunk> Cut(const std::string& src);

// ---- expression trees ---------------------------------------------------------------------

struct Expr {
  enum Kind {
    kLiteral,
    kName,
    kList,
    kDict,
    kAttr,
    kIndex,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kUnary,
    kBinary,
    kTernary
  } kind;
  Value literal;
  std::string name;                         // variable, attribute, filter, test or operator
  std::vector<std::unique_ptr<Expr>> args;  // operands / elements / call arguments
  std::vector<std::string> kwnames;  // keyword argument names (calls), aligned with trailing args
  bool negate = false;               // `is not`
};
using ExprP = std::unique_ptr<Expr>;

}  // namespace paddock::jinja

namespace paddock {

// A statement (text, output, if, for, set, macro) with its nested statements.
struct JinjaTemplate::Node {
  enum Kind { kText, kOutput, kIf, kFor, kSet, kMacro } kind;
  std::string text;     // kText
  jinja::ExprP expr;    // kOutput, kSet value, kFor iterable
  jinja::ExprP filter;  // kFor: the loop filter (`for x in xs if cond`), or null
  std::vector<std::pair<jinja::ExprP, std::vector<std::unique_ptr<Node>>>>
      branches;                   // kIf (null cond: else)
  std::vector<std::string> vars;  // kFor targets; kSet: name[, attribute]; kMacro: name, params
  std::vector<jinja::ExprP> defaults;                  // kMacro: per parameter, or null
  std::vector<std::unique_ptr<Node>> body, else_body;  // kFor; kMacro: body
  std::string where;
};

}  // namespace paddock
