// engine/jinja.cpp: a small Jinja interpreter for chat templates (see jinja.h for the subset).
//
// Three stages: the source is cut into text and tags (applying {%- -%} and HF's trim_blocks /
// lstrip_blocks), tags are parsed into a tree of statements over expression trees, and the tree
// is evaluated against the chat variables. Values are Python-like: undefined, none, bool, int,
// float, string, list, dict (insertion-ordered; namespaces are dicts shared by reference).
#include "engine/jinja.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <functional>
#include <map>

#include "base/strings.h"

namespace paddock {
namespace {

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

  static Value None() { Value v; v.kind = kNone; return v; }
  static Value Bool(bool x) { Value v; v.kind = kBool; v.b = x; return v; }
  static Value Int(int64_t x) { Value v; v.kind = kInt; v.i = x; return v; }
  static Value Float(double x) { Value v; v.kind = kFloat; v.f = x; return v; }
  static Value Str(std::string x) { Value v; v.kind = kString; v.s = std::move(x); return v; }
  static Value MakeList(List l = {}) { Value v; v.kind = kList; v.list = std::make_shared<List>(std::move(l)); return v; }
  static Value MakeDict(Dict d = {}) { Value v; v.kind = kDict; v.dict = std::make_shared<Dict>(std::move(d)); return v; }

  bool Truthy() const {
    switch (kind) {
      case kUndefined: case kNone: return false;
      case kBool: return b;
      case kInt: return i != 0;
      case kFloat: return f != 0;
      case kString: return !s.empty();
      case kList: return !list->empty();
      case kDict: return !dict->empty();
    }
    return false;
  }
  bool IsNumber() const { return kind == kInt || kind == kFloat || kind == kBool; }
  double Num() const { return kind == kFloat ? f : kind == kBool ? (b ? 1 : 0) : static_cast<double>(i); }
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

std::string JsonEscape(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      default:
        if (c < 0x20) o += StrFormat("\\u%04x", c);
        else o.push_back(static_cast<char>(c));
    }
  }
  return o + "\"";
}

std::string ToString(const Value& v, bool repr = false);

std::string ToJson(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined: case Value::kNone: return "null";
    case Value::kBool: return v.b ? "true" : "false";
    case Value::kString: return JsonEscape(v.s);
    case Value::kList: {
      std::string o = "[";
      for (size_t k = 0; k < v.list->size(); ++k) o += (k ? ", " : "") + ToJson((*v.list)[k]);
      return o + "]";
    }
    case Value::kDict: {
      std::string o = "{";
      for (size_t k = 0; k < v.dict->size(); ++k) o += (k ? ", " : "") + JsonEscape((*v.dict)[k].first) + ": " + ToJson((*v.dict)[k].second);
      return o + "}";
    }
    default: return ToString(v);
  }
}

std::string ToString(const Value& v, bool repr) {
  switch (v.kind) {
    case Value::kUndefined: return "";
    case Value::kNone: return "None";
    case Value::kBool: return v.b ? "True" : "False";
    case Value::kInt: return std::to_string(v.i);
    case Value::kFloat: {
      std::string s = StrFormat("%.15g", v.f);
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
      return s;
    }
    case Value::kString: return repr ? "'" + v.s + "'" : v.s;
    case Value::kList: {
      std::string o = "[";
      for (size_t k = 0; k < v.list->size(); ++k) o += (k ? ", " : "") + ToString((*v.list)[k], true);
      return o + "]";
    }
    case Value::kDict: {
      std::string o = "{";
      for (size_t k = 0; k < v.dict->size(); ++k) o += (k ? ", " : "") + ("'" + (*v.dict)[k].first + "': ") + ToString((*v.dict)[k].second, true);
      return o + "}";
    }
  }
  return "";
}

bool Equal(const Value& a, const Value& b) {
  if (a.IsNumber() && b.IsNumber()) return a.Num() == b.Num();
  if (a.kind != b.kind) return (a.kind == Value::kUndefined || a.kind == Value::kNone) && (b.kind == Value::kUndefined || b.kind == Value::kNone);
  switch (a.kind) {
    case Value::kString: return a.s == b.s;
    case Value::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k) {
        if (!Equal((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    case Value::kDict: return a.dict == b.dict;
    default: return true;
  }
}

// ---- expression lexer -----------------------------------------------------------------------

struct Tok {
  enum Kind { kName, kString, kInt, kFloat, kOp, kEnd } kind;
  std::string text;
};

std::vector<Tok> Lex(const std::string& src, const std::string& where) {
  std::vector<Tok> out;
  size_t i = 0;
  while (i < src.size()) {
    const char c = src[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < src.size() && (std::isalnum(static_cast<unsigned char>(src[j])) || src[j] == '_')) ++j;
      out.push_back({Tok::kName, src.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < src.size() && (std::isdigit(static_cast<unsigned char>(src[j])) || (src[j] == '.' && !is_float && j + 1 < src.size() && std::isdigit(static_cast<unsigned char>(src[j + 1]))))) {
        if (src[j] == '.') is_float = true;
        ++j;
      }
      out.push_back({is_float ? Tok::kFloat : Tok::kInt, src.substr(i, j - i)});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string s;
      size_t j = i + 1;
      for (; j < src.size() && src[j] != c; ++j) {
        if (src[j] == '\\' && j + 1 < src.size()) {
          const char e = src[++j];
          switch (e) {
            case 'n': s += '\n'; break;
            case 't': s += '\t'; break;
            case 'r': s += '\r'; break;
            default: s += e;
          }
        } else {
          s += src[j];
        }
      }
      if (j >= src.size()) Fail("chat template: unterminated string in %s", where.c_str());
      out.push_back({Tok::kString, s});
      i = j + 1;
    } else {
      static const char* two[] = {"==", "!=", "<=", ">=", "//", "**"};
      bool matched = false;
      for (const char* t : two) {
        if (src.compare(i, 2, t) == 0) {
          out.push_back({Tok::kOp, t});
          i += 2;
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (std::string("()[]{},.:|+-*/%~<>=").find(c) == std::string::npos) Fail("chat template: unexpected character '%c' in %s", c, where.c_str());
      out.push_back({Tok::kOp, std::string(1, c)});
      ++i;
    }
  }
  out.push_back({Tok::kEnd, ""});
  return out;
}

// ---- expressions ----------------------------------------------------------------------------

struct Expr {
  enum Kind { kLiteral, kName, kList, kDict, kAttr, kIndex, kSlice, kCall, kFilter, kTest, kUnary, kBinary, kTernary } kind;
  Value literal;
  std::string name;  // variable, attribute, filter, test or operator
  std::vector<std::unique_ptr<Expr>> args;  // operands / elements / call arguments
  std::vector<std::string> kwnames;         // keyword argument names (calls), aligned with trailing args
  bool negate = false;                      // `is not`
};
using ExprP = std::unique_ptr<Expr>;

ExprP Make(Expr::Kind k, std::string name = "") {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->name = std::move(name);
  return e;
}

class Parser {
 public:
  Parser(std::vector<Tok> toks, std::string where) : t_(std::move(toks)), where_(std::move(where)) {}

  ExprP Expression() { return Ternary(); }
  bool AtEnd() const { return t_[p_].kind == Tok::kEnd; }
  const Tok& Peek(size_t ahead = 0) const { return t_[std::min(p_ + ahead, t_.size() - 1)]; }
  bool IsName(const char* n, size_t ahead = 0) const { return Peek(ahead).kind == Tok::kName && Peek(ahead).text == n; }
  bool IsOp(const char* o) const { return Peek().kind == Tok::kOp && Peek().text == o; }
  std::string Name() {
    if (Peek().kind != Tok::kName) Error("a name");
    return t_[p_++].text;
  }
  void Expect(const char* op) {
    if (!IsOp(op)) Error(StrFormat("'%s'", op));
    ++p_;
  }
  void ExpectName(const char* n) {
    if (!IsName(n)) Error(StrFormat("'%s'", n));
    ++p_;
  }
  [[noreturn]] void Error(const std::string& wanted) const {
    Fail("chat template: expected %s, found '%s' in %s", wanted.c_str(), Peek().text.c_str(), where_.c_str());
  }
  void Skip() { ++p_; }

 private:
  ExprP Ternary() {
    // Templates come from model files: bound the nesting so hostile input cannot exhaust the stack.
    struct Depth {
      int& d;
      explicit Depth(int& x) : d(x) { ++d; }
      ~Depth() { --d; }
    } guard(depth_);
    if (depth_ > 64) Fail("chat template: expression nested too deeply in %s", where_.c_str());
    ExprP a = Or();
    if (IsName("if")) {
      ++p_;
      ExprP cond = Or();
      ExprP other;
      if (IsName("else")) {
        ++p_;
        other = Ternary();
      } else {
        other = Make(Expr::kLiteral);  // undefined
      }
      auto e = Make(Expr::kTernary);
      e->args.push_back(std::move(cond));
      e->args.push_back(std::move(a));
      e->args.push_back(std::move(other));
      return e;
    }
    return a;
  }
  ExprP Binary(const char* op, ExprP a, ExprP b) {
    auto e = Make(Expr::kBinary, op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }
  ExprP Or() {
    ExprP a = And();
    while (IsName("or")) {
      ++p_;
      a = Binary("or", std::move(a), And());
    }
    return a;
  }
  ExprP And() {
    ExprP a = Not();
    while (IsName("and")) {
      ++p_;
      a = Binary("and", std::move(a), Not());
    }
    return a;
  }
  ExprP Not() {
    if (++chain_ > 256) Fail("chat template: too many prefix operators in %s", where_.c_str());
    if (IsName("not")) {
      ++p_;
      auto e = Make(Expr::kUnary, "not");
      e->args.push_back(Not());
      return e;
    }
    return Compare();
  }
  ExprP Compare() {
    ExprP a = Concat();
    for (;;) {
      if (Peek().kind == Tok::kOp && (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp(">") || IsOp("<=") || IsOp(">="))) {
        const std::string op = t_[p_++].text;
        a = Binary(op.c_str(), std::move(a), Concat());
      } else if (IsName("in")) {
        ++p_;
        a = Binary("in", std::move(a), Concat());
      } else if (IsName("not") && IsName("in", 1)) {
        p_ += 2;
        a = Binary("not in", std::move(a), Concat());
      } else if (IsName("is")) {
        ++p_;
        auto e = Make(Expr::kTest);
        if (IsName("not")) {
          ++p_;
          e->negate = true;
        }
        e->name = Name();
        e->args.push_back(std::move(a));
        if (IsOp("(")) {
          ++p_;
          while (!IsOp(")")) {
            e->args.push_back(Expression());
            if (IsOp(",")) ++p_;
          }
          ++p_;
        }
        a = std::move(e);
      } else {
        return a;
      }
    }
  }
  ExprP Concat() {
    ExprP a = Additive();
    while (IsOp("~")) {
      ++p_;
      a = Binary("~", std::move(a), Additive());
    }
    return a;
  }
  ExprP Additive() {
    ExprP a = Multiplicative();
    while (IsOp("+") || IsOp("-")) {
      const std::string op = t_[p_++].text;
      a = Binary(op.c_str(), std::move(a), Multiplicative());
    }
    return a;
  }
  ExprP Multiplicative() {
    ExprP a = Unary();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const std::string op = t_[p_++].text;
      a = Binary(op.c_str(), std::move(a), Unary());
    }
    return a;
  }
  ExprP Unary() {
    if (++chain_ > 256) Fail("chat template: too many prefix operators in %s", where_.c_str());
    if (IsOp("-") || IsOp("+")) {
      const std::string op = t_[p_++].text;
      auto e = Make(Expr::kUnary, op);
      e->args.push_back(Unary());
      return e;
    }
    return Filtered();
  }
  void CallArgs(Expr* e) {
    Expect("(");
    while (!IsOp(")")) {
      if (Peek().kind == Tok::kName && Peek(1).kind == Tok::kOp && Peek(1).text == "=") {
        e->kwnames.push_back(Name());
        ++p_;
      } else if (!e->kwnames.empty()) {
        Error("a keyword argument (positional after keyword)");
      }
      e->args.push_back(Expression());
      if (!IsOp(")")) Expect(",");
    }
    ++p_;
  }
  ExprP Filtered() {
    ExprP a = Postfix();
    while (IsOp("|")) {
      ++p_;
      auto e = Make(Expr::kFilter, Name());
      e->args.push_back(std::move(a));
      if (IsOp("(")) CallArgs(e.get());
      a = std::move(e);
    }
    return a;
  }
  ExprP Postfix() {
    ExprP a = Primary();
    for (;;) {
      if (IsOp(".")) {
        ++p_;
        auto e = Make(Expr::kAttr, Name());
        e->args.push_back(std::move(a));
        a = std::move(e);
      } else if (IsOp("[")) {
        ++p_;
        ExprP lo, hi, step;
        bool slice = false;
        if (!IsOp(":")) lo = Expression();
        if (IsOp(":")) {
          slice = true;
          ++p_;
          if (!IsOp("]") && !IsOp(":")) hi = Expression();
          if (IsOp(":")) {
            ++p_;
            if (!IsOp("]")) step = Expression();
          }
        }
        Expect("]");
        auto e = Make(slice ? Expr::kSlice : Expr::kIndex);
        e->args.push_back(std::move(a));
        if (slice) {
          e->args.push_back(lo ? std::move(lo) : nullptr);
          e->args.push_back(hi ? std::move(hi) : nullptr);
          e->args.push_back(step ? std::move(step) : nullptr);
        } else {
          e->args.push_back(std::move(lo));
        }
        a = std::move(e);
      } else if (IsOp("(")) {
        auto e = Make(Expr::kCall);
        e->args.push_back(std::move(a));
        CallArgs(e.get());
        a = std::move(e);
      } else {
        return a;
      }
    }
  }
  ExprP Primary() {
    const Tok& t = Peek();
    if (t.kind == Tok::kString) {
      std::string s = t_[p_++].text;
      while (Peek().kind == Tok::kString) s += t_[p_++].text;  // adjacent literals concatenate
      auto e = Make(Expr::kLiteral);
      e->literal = Value::Str(s);
      return e;
    }
    if (t.kind == Tok::kInt || t.kind == Tok::kFloat) {
      auto e = Make(Expr::kLiteral);
      errno = 0;
      if (t.kind == Tok::kInt) {
        const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
        if (errno == ERANGE) Fail("chat template: integer %s is out of range in %s", t.text.c_str(), where_.c_str());
        e->literal = Value::Int(v);
      } else {
        e->literal = Value::Float(std::strtod(t.text.c_str(), nullptr));
      }
      ++p_;
      return e;
    }
    if (t.kind == Tok::kName) {
      const std::string n = t_[p_++].text;
      auto e = Make(Expr::kLiteral);
      if (n == "true" || n == "True") e->literal = Value::Bool(true);
      else if (n == "false" || n == "False") e->literal = Value::Bool(false);
      else if (n == "none" || n == "None") e->literal = Value::None();
      else return Make(Expr::kName, n);
      return e;
    }
    if (IsOp("(")) {
      ++p_;
      ExprP e = Expression();
      if (IsOp(",")) Error("')' (tuples are not supported)");
      Expect(")");
      return e;
    }
    if (IsOp("[")) {
      ++p_;
      auto e = Make(Expr::kList);
      while (!IsOp("]")) {
        e->args.push_back(Expression());
        if (!IsOp("]")) Expect(",");
      }
      ++p_;
      return e;
    }
    if (IsOp("{")) {
      ++p_;
      auto e = Make(Expr::kDict);
      while (!IsOp("}")) {
        e->args.push_back(Expression());
        Expect(":");
        e->args.push_back(Expression());
        if (!IsOp("}")) Expect(",");
      }
      ++p_;
      return e;
    }
    Error("an expression");
  }

  std::vector<Tok> t_;
  size_t p_ = 0;
  int depth_ = 0;
  int chain_ = 0;  // prefix operators seen (a flat bound: each call may recurse once per operator)
  std::string where_;
};

}  // namespace

// ---- statements -----------------------------------------------------------------------------

struct JinjaTemplate::Node {
  enum Kind { kText, kOutput, kIf, kFor, kSet } kind;
  std::string text;                                  // kText
  ExprP expr;                                        // kOutput, kSet value, kFor iterable
  std::vector<std::pair<ExprP, std::vector<std::unique_ptr<Node>>>> branches;  // kIf (null cond: else)
  std::vector<std::string> vars;                     // kFor targets; kSet: name[, attribute]
  std::vector<std::unique_ptr<Node>> body, else_body;  // kFor
  std::string where;
};

namespace {

using NodeP = std::unique_ptr<JinjaTemplate::Node>;

struct Chunk {
  enum Kind { kText, kExpr, kStmt, kComment } kind;
  std::string content;
  bool trim_left = false, trim_right = false;  // '-' at the tag's start / end
  size_t line = 1;
};

std::vector<Chunk> Cut(const std::string& src) {
  std::vector<Chunk> out;
  size_t i = 0, line = 1;
  while (i < src.size()) {
    size_t open = std::string::npos;
    for (size_t j = i; j + 1 < src.size(); ++j) {
      if (src[j] == '{' && (src[j + 1] == '{' || src[j + 1] == '%' || src[j + 1] == '#')) {
        open = j;
        break;
      }
    }
    if (open == std::string::npos) open = src.size();
    if (open > i) out.push_back({Chunk::kText, src.substr(i, open - i), false, false, line});
    for (size_t j = i; j < open; ++j) line += src[j] == '\n';
    if (open >= src.size()) break;
    const char t = src[open + 1];
    const std::string close = t == '{' ? "}}" : t == '%' ? "%}" : "#}";
    // Find the close, skipping quoted strings inside expressions and statements.
    size_t j = open + 2;
    char quote = 0;
    for (; j + 1 < src.size(); ++j) {
      if (t != '#') {
        if (quote) {
          if (src[j] == '\\') ++j;
          else if (src[j] == quote) quote = 0;
          continue;
        }
        if (src[j] == '\'' || src[j] == '"') {
          quote = src[j];
          continue;
        }
      }
      if (src.compare(j, 2, close) == 0) break;
    }
    if (j + 1 >= src.size()) Fail("chat template: unclosed tag starting on line %zu", line);
    Chunk c{t == '{' ? Chunk::kExpr : t == '%' ? Chunk::kStmt : Chunk::kComment, "", false, false, line};
    size_t b = open + 2, e = j;
    if (b < e && src[b] == '-') {
      c.trim_left = true;
      ++b;
    } else if (b < e && src[b] == '+') {
      ++b;
    }
    if (e > b && src[e - 1] == '-') {
      c.trim_right = true;
      --e;
    }
    c.content = src.substr(b, e - b);
    for (size_t k = open; k < j; ++k) line += src[k] == '\n';
    out.push_back(std::move(c));
    i = j + 2;
  }
  // Whitespace control: '-' strips all whitespace on that side; HF templates render with
  // trim_blocks (drop the newline after a block tag) and lstrip_blocks (drop spaces and tabs
  // before a block tag at the start of a line).
  auto is_ws = [](char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; };
  for (size_t k = 0; k < out.size(); ++k) {
    if (out[k].kind != Chunk::kText) continue;
    std::string& s = out[k].content;
    if (k + 1 < out.size()) {
      const Chunk& next = out[k + 1];
      if (next.trim_left) {
        while (!s.empty() && is_ws(s.back())) s.pop_back();
      } else if (next.kind == Chunk::kStmt || next.kind == Chunk::kComment) {
        size_t e = s.size();
        while (e > 0 && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
        if (e == 0 ? k == 0 || out[k - 1].kind != Chunk::kText : s[e - 1] == '\n') s.resize(e);
      }
    }
    if (k > 0) {
      const Chunk& prev = out[k - 1];
      if (prev.trim_right) {
        size_t b = 0;
        while (b < s.size() && is_ws(s[b])) ++b;
        s.erase(0, b);
      } else if (prev.kind == Chunk::kStmt || prev.kind == Chunk::kComment) {
        if (s.compare(0, 2, "\r\n") == 0) s.erase(0, 2);
        else if (!s.empty() && s[0] == '\n') s.erase(0, 1);
      }
    }
  }
  return out;
}

}  // namespace

JinjaTemplate::JinjaTemplate(const std::string& source) {
  try {
    Parse(source);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // e.g. allocation limits: still one clear error
    Fail("chat template: cannot be parsed (%s)", e.what());
  }
}

void JinjaTemplate::Parse(const std::string& source) {
  const std::vector<Chunk> chunks = Cut(source);
  // Open blocks: the node and which list statements go into.
  struct Open {
    Node* node;
    std::vector<NodeP>* into;
  };
  std::vector<Open> stack;
  std::vector<NodeP>* into = &body_;
  for (const Chunk& c : chunks) {
    const std::string where = StrFormat("the tag on line %zu", c.line);
    if (c.kind == Chunk::kComment) continue;
    if (c.kind == Chunk::kText) {
      if (c.content.empty()) continue;
      auto n = std::make_unique<Node>();
      n->kind = Node::kText;
      n->text = c.content;
      into->push_back(std::move(n));
      continue;
    }
    Parser p(Lex(c.content, where), where);
    if (c.kind == Chunk::kExpr) {
      auto n = std::make_unique<Node>();
      n->kind = Node::kOutput;
      n->expr = p.Expression();
      if (!p.AtEnd()) p.Error("'}}'");
      n->where = where;
      into->push_back(std::move(n));
      continue;
    }
    const std::string kw = p.Name();
    if (kw == "if") {
      auto n = std::make_unique<Node>();
      n->kind = Node::kIf;
      n->where = where;
      n->branches.emplace_back(p.Expression(), std::vector<NodeP>());
      Node* raw = n.get();
      into->push_back(std::move(n));
      stack.push_back({raw, into});
      into = &raw->branches.back().second;
      if (stack.size() > 64) Fail("chat template: blocks nested too deeply (%s)", where.c_str());
    } else if (kw == "elif" || kw == "else") {
      if (stack.empty()) Fail("chat template: '%s' outside a block in %s", kw.c_str(), where.c_str());
      Node* top = stack.back().node;
      if (top->kind == Node::kFor && kw == "else") {
        into = &top->else_body;
      } else if (top->kind == Node::kIf) {
        top->branches.emplace_back(kw == "elif" ? p.Expression() : nullptr, std::vector<NodeP>());
        into = &top->branches.back().second;
      } else {
        Fail("chat template: unexpected '%s' in %s", kw.c_str(), where.c_str());
      }
    } else if (kw == "endif" || kw == "endfor") {
      if (stack.empty() || (stack.back().node->kind == Node::kIf) != (kw == "endif")) Fail("chat template: unexpected '%s' in %s", kw.c_str(), where.c_str());
      into = stack.back().into;
      stack.pop_back();
    } else if (kw == "for") {
      auto n = std::make_unique<Node>();
      n->kind = Node::kFor;
      n->where = where;
      n->vars.push_back(p.Name());
      while (p.IsOp(",")) {
        p.Skip();
        n->vars.push_back(p.Name());
      }
      p.ExpectName("in");
      n->expr = p.Expression();
      if (p.IsName("if")) Fail("chat template: loop filters ('for ... if') are not supported (%s)", where.c_str());
      if (p.IsName("recursive")) Fail("chat template: recursive loops are not supported (%s)", where.c_str());
      Node* raw = n.get();
      into->push_back(std::move(n));
      stack.push_back({raw, into});
      into = &raw->body;
      if (stack.size() > 64) Fail("chat template: blocks nested too deeply (%s)", where.c_str());
    } else if (kw == "set") {
      auto n = std::make_unique<Node>();
      n->kind = Node::kSet;
      n->where = where;
      n->vars.push_back(p.Name());
      if (p.IsOp(".")) {
        p.Skip();
        n->vars.push_back(p.Name());
      }
      if (!p.IsOp("=")) Fail("chat template: block assignments ('{%% set x %%}...{%% endset %%}') are not supported (%s)", where.c_str());
      p.Skip();
      n->expr = p.Expression();
      into->push_back(std::move(n));
    } else {
      Fail("chat template: the '%s' statement is not supported (%s)", kw.c_str(), where.c_str());
    }
    if (!p.AtEnd() && kw != "else" && kw != "endif" && kw != "endfor") p.Error("'%}'");
  }
  if (!stack.empty()) Fail("chat template: '%s' opened in %s is never closed", stack.back().node->kind == Node::kIf ? "if" : "for", stack.back().node->where.c_str());
}

JinjaTemplate::~JinjaTemplate() = default;

namespace {

// ---- evaluation -----------------------------------------------------------------------------

class Renderer {
 public:
  std::vector<std::map<std::string, Value>> scopes;
  std::string out;

  Value Lookup(const std::string& n) const {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
      auto f = it->find(n);
      if (f != it->end()) return f->second;
    }
    return Value();
  }

  void Run(const std::vector<NodeP>& nodes) {
    for (const auto& n : nodes) Exec(*n);
  }

  size_t steps = 0;
  void Exec(const JinjaTemplate::Node& n) {
    using Node = JinjaTemplate::Node;
    // Bounded work and output: a template from a file must not hang or exhaust memory.
    if (++steps > 2000000 || out.size() > (16u << 20)) Fail("chat template: rendering exceeds the work or size limit (%s)", n.where.c_str());
    switch (n.kind) {
      case Node::kText: out += n.text; break;
      case Node::kOutput: out += ToString(Eval(*n.expr, n.where)); break;
      case Node::kIf:
        for (const auto& [cond, body] : n.branches) {
          if (cond == nullptr || Eval(*cond, n.where).Truthy()) {
            Run(body);
            break;
          }
        }
        break;
      case Node::kSet: {
        Value v = Eval(*n.expr, n.where);
        if (n.vars.size() == 2) {
          Value ns = Lookup(n.vars[0]);
          if (ns.kind != Value::kDict) Fail("chat template: '%s' is not a namespace (%s)", n.vars[0].c_str(), n.where.c_str());
          ns.Set(n.vars[1], std::move(v));
        } else {
          scopes.back()[n.vars[0]] = std::move(v);
        }
        break;
      }
      case Node::kFor: {
        const Value it = Eval(*n.expr, n.where);
        List items;
        if (it.kind == Value::kList) {
          items = *it.list;
        } else if (it.kind == Value::kDict) {
          for (const auto& kv : *it.dict) items.push_back(Value::Str(kv.first));
        } else if (it.kind == Value::kString) {
          for (char ch : it.s) items.push_back(Value::Str(std::string(1, ch)));
        } else if (it.kind != Value::kUndefined && it.kind != Value::kNone) {
          Fail("chat template: cannot loop over a %s (%s)", ToString(it).c_str(), n.where.c_str());
        }
        if (items.empty()) {
          Run(n.else_body);
          break;
        }
        const int64_t len = static_cast<int64_t>(items.size());
        for (int64_t k = 0; k < len; ++k) {
          scopes.emplace_back();
          auto& sc = scopes.back();
          if (n.vars.size() == 1) {
            sc[n.vars[0]] = items[static_cast<size_t>(k)];
          } else {
            const Value& item = items[static_cast<size_t>(k)];
            if (item.kind != Value::kList || item.list->size() != n.vars.size()) Fail("chat template: cannot unpack a loop item into %zu names (%s)", n.vars.size(), n.where.c_str());
            for (size_t v = 0; v < n.vars.size(); ++v) sc[n.vars[v]] = (*item.list)[v];
          }
          Value loop = Value::MakeDict();
          loop.Set("index", Value::Int(k + 1));
          loop.Set("index0", Value::Int(k));
          loop.Set("revindex", Value::Int(len - k));
          loop.Set("revindex0", Value::Int(len - k - 1));
          loop.Set("first", Value::Bool(k == 0));
          loop.Set("last", Value::Bool(k == len - 1));
          loop.Set("length", Value::Int(len));
          loop.Set("previtem", k > 0 ? items[static_cast<size_t>(k - 1)] : Value());
          loop.Set("nextitem", k + 1 < len ? items[static_cast<size_t>(k + 1)] : Value());
          sc["loop"] = loop;
          Run(n.body);
          scopes.pop_back();
        }
        break;
      }
    }
  }

  static int64_t Index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

  Value Eval(const Expr& e, const std::string& where) {
    switch (e.kind) {
      case Expr::kLiteral: return e.literal;
      case Expr::kName: return Lookup(e.name);
      case Expr::kList: {
        List l;
        for (const auto& a : e.args) l.push_back(Eval(*a, where));
        return Value::MakeList(std::move(l));
      }
      case Expr::kDict: {
        Value d = Value::MakeDict();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) d.Set(ToString(Eval(*e.args[k], where)), Eval(*e.args[k + 1], where));
        return d;
      }
      case Expr::kAttr: {
        const Value o = Eval(*e.args[0], where);
        if (const Value* v = o.Get(e.name)) return *v;
        return Value();
      }
      case Expr::kIndex: {
        const Value o = Eval(*e.args[0], where);
        const Value k = Eval(*e.args[1], where);
        if (o.kind == Value::kDict) {
          const Value* v = o.Get(ToString(k));
          return v ? *v : Value();
        }
        if ((o.kind == Value::kList || o.kind == Value::kString) && k.kind == Value::kInt) {
          const int64_t n = o.kind == Value::kList ? static_cast<int64_t>(o.list->size()) : static_cast<int64_t>(o.s.size());
          const int64_t i = Index(k.i, n);
          if (i < 0 || i >= n) return Value();
          return o.kind == Value::kList ? (*o.list)[static_cast<size_t>(i)] : Value::Str(std::string(1, o.s[static_cast<size_t>(i)]));
        }
        return Value();
      }
      case Expr::kSlice: {
        const Value o = Eval(*e.args[0], where);
        const int64_t n = o.kind == Value::kList ? static_cast<int64_t>(o.list->size()) : o.kind == Value::kString ? static_cast<int64_t>(o.s.size()) : -1;
        if (n < 0) Fail("chat template: cannot slice %s (%s)", ToString(o, true).c_str(), where.c_str());
        const int64_t step = e.args[3] ? Eval(*e.args[3], where).i : 1;
        if (step == 0) Fail("chat template: slice step 0 (%s)", where.c_str());
        int64_t lo = e.args[1] ? Index(Eval(*e.args[1], where).i, n) : (step > 0 ? 0 : n - 1);
        int64_t hi = e.args[2] ? Index(Eval(*e.args[2], where).i, n) : (step > 0 ? n : -1);
        List l;
        std::string s;
        if (step > 0) {
          lo = std::clamp<int64_t>(lo, 0, n);
          hi = std::clamp<int64_t>(hi, 0, n);
        } else {
          lo = std::clamp<int64_t>(lo, -1, n - 1);
          hi = std::clamp<int64_t>(hi, -1, n - 1);
        }
        for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
          if (o.kind == Value::kList) l.push_back((*o.list)[static_cast<size_t>(i)]);
          else s += o.s[static_cast<size_t>(i)];
        }
        return o.kind == Value::kList ? Value::MakeList(std::move(l)) : Value::Str(s);
      }
      case Expr::kTernary: return Eval(*e.args[0], where).Truthy() ? Eval(*e.args[1], where) : Eval(*e.args[2], where);
      case Expr::kUnary: {
        const Value v = Eval(*e.args[0], where);
        if (e.name == "not") return Value::Bool(!v.Truthy());
        if (!v.IsNumber()) Fail("chat template: unary %s on a non-number (%s)", e.name.c_str(), where.c_str());
        if (e.name == "+") return v;
        return v.kind == Value::kFloat ? Value::Float(-v.f) : Value::Int(-static_cast<int64_t>(v.Num()));
      }
      case Expr::kBinary: return BinaryOp(e, where);
      case Expr::kTest: return TestOp(e, where);
      case Expr::kFilter: return FilterOp(e, where);
      case Expr::kCall: return CallOp(e, where);
    }
    return Value();
  }

  Value BinaryOp(const Expr& e, const std::string& where) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = Eval(*e.args[0], where);
      return a.Truthy() ? Eval(*e.args[1], where) : a;
    }
    if (op == "or") {
      Value a = Eval(*e.args[0], where);
      return a.Truthy() ? a : Eval(*e.args[1], where);
    }
    const Value a = Eval(*e.args[0], where), b = Eval(*e.args[1], where);
    if (op == "==") return Value::Bool(Equal(a, b));
    if (op == "!=") return Value::Bool(!Equal(a, b));
    if (op == "~") return Value::Str(ToString(a) + ToString(b));
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.kind == Value::kString) found = b.s.find(ToString(a)) != std::string::npos;
      else if (b.kind == Value::kList) found = std::any_of(b.list->begin(), b.list->end(), [&](const Value& x) { return Equal(x, a); });
      else if (b.kind == Value::kDict) found = b.Get(ToString(a)) != nullptr;
      return Value::Bool(op == "in" ? found : !found);
    }
    if (op == "+" && a.kind == Value::kString && b.kind == Value::kString) return Value::Str(a.s + b.s);
    if (op == "+" && a.kind == Value::kList && b.kind == Value::kList) {
      List l = *a.list;
      l.insert(l.end(), b.list->begin(), b.list->end());
      return Value::MakeList(std::move(l));
    }
    if (op == "*" && a.kind == Value::kString && b.kind == Value::kInt) {
      if (b.i > 0 && static_cast<double>(b.i) * static_cast<double>(a.s.size()) > (16u << 20)) Fail("chat template: string repetition too large (%s)", where.c_str());
      std::string s;
      for (int64_t k = 0; k < b.i; ++k) s += a.s;
      return Value::Str(s);
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int cmp;
      if (a.IsNumber() && b.IsNumber()) cmp = a.Num() < b.Num() ? -1 : a.Num() > b.Num() ? 1 : 0;
      else if (a.kind == Value::kString && b.kind == Value::kString) cmp = a.s.compare(b.s);
      else Fail("chat template: cannot compare %s and %s (%s)", ToString(a, true).c_str(), ToString(b, true).c_str(), where.c_str());
      return Value::Bool(op == "<" ? cmp < 0 : op == ">" ? cmp > 0 : op == "<=" ? cmp <= 0 : cmp >= 0);
    }
    if (!a.IsNumber() || !b.IsNumber()) {
      Fail("chat template: '%s' between %s and %s is not supported (%s)", op.c_str(), ToString(a, true).c_str(), ToString(b, true).c_str(), where.c_str());
    }
    const bool ints = a.kind != Value::kFloat && b.kind != Value::kFloat;
    if (op == "/") {
      if (b.Num() == 0) Fail("chat template: division by zero (%s)", where.c_str());
      return Value::Float(a.Num() / b.Num());
    }
    if (op == "//" || op == "%") {
      if (b.Num() == 0) Fail("chat template: division by zero (%s)", where.c_str());
      if (ints) {
        const int64_t x = static_cast<int64_t>(a.Num()), y = static_cast<int64_t>(b.Num());
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) {  // Python floors
          --q;
          r += y;
        }
        return Value::Int(op == "//" ? q : r);
      }
      const double q = std::floor(a.Num() / b.Num());
      return Value::Float(op == "//" ? q : a.Num() - q * b.Num());
    }
    const double x = a.Num(), y = b.Num();
    const double r = op == "+" ? x + y : op == "-" ? x - y : x * y;
    return ints ? Value::Int(static_cast<int64_t>(r)) : Value::Float(r);
  }

  Value TestOp(const Expr& e, const std::string& where) {
    const Value v = Eval(*e.args[0], where);
    bool r;
    const std::string& t = e.name;
    if (t == "defined") r = v.kind != Value::kUndefined;
    else if (t == "undefined") r = v.kind == Value::kUndefined;
    else if (t == "none") r = v.kind == Value::kNone;
    else if (t == "string") r = v.kind == Value::kString;
    else if (t == "number") r = v.kind == Value::kInt || v.kind == Value::kFloat;
    else if (t == "integer") r = v.kind == Value::kInt;
    else if (t == "boolean") r = v.kind == Value::kBool;
    else if (t == "mapping") r = v.kind == Value::kDict;
    else if (t == "iterable") r = v.kind == Value::kList || v.kind == Value::kDict || v.kind == Value::kString;
    else if (t == "sequence") r = v.kind == Value::kList || v.kind == Value::kString;
    else if (t == "true") r = v.kind == Value::kBool && v.b;
    else if (t == "false") r = v.kind == Value::kBool && !v.b;
    else if (t == "even" || t == "odd") r = v.kind == Value::kInt && (v.i % 2 == 0) == (t == "even");
    else if (t == "equalto" || t == "eq") r = e.args.size() > 1 && Equal(v, Eval(*e.args[1], where));
    else Fail("chat template: the test 'is %s' is not supported (%s)", t.c_str(), where.c_str());
    return Value::Bool(e.negate ? !r : r);
  }

  static std::string Strip(std::string s, const std::string& chars, bool left, bool right) {
    if (right) {
      while (!s.empty() && chars.find(s.back()) != std::string::npos) s.pop_back();
    }
    if (left) {
      size_t b = 0;
      while (b < s.size() && chars.find(s[b]) != std::string::npos) ++b;
      s.erase(0, b);
    }
    return s;
  }
  static std::string Case(std::string s, int how) {  // 0 lower, 1 upper, 2 title, 3 capitalize
    bool start = true;
    for (size_t k = 0; k < s.size(); ++k) {
      char& c = s[k];
      const bool alpha = std::isalpha(static_cast<unsigned char>(c)) != 0;
      if (how == 0 || (how == 3 && k > 0) || (how == 2 && !start)) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      else if (how == 1 || (how == 3 && k == 0) || (how == 2 && start)) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      start = !alpha;
    }
    return s;
  }
  static std::string Replace(std::string s, const std::string& from, const std::string& to) {
    if (from.empty()) return s;
    std::string o;
    size_t i = 0, p;
    while ((p = s.find(from, i)) != std::string::npos) {
      o += s.substr(i, p - i) + to;
      i = p + from.size();
    }
    return o + s.substr(i);
  }

  Value FilterOp(const Expr& e, const std::string& where) {
    const Value v = Eval(*e.args[0], where);
    auto arg = [&](size_t k) { return k < e.args.size() ? Eval(*e.args[k], where) : Value(); };
    const std::string& f = e.name;
    if (f == "trim") return Value::Str(Strip(ToString(v), " \t\n\r\f\v", true, true));
    if (f == "upper") return Value::Str(Case(ToString(v), 1));
    if (f == "lower") return Value::Str(Case(ToString(v), 0));
    if (f == "title") return Value::Str(Case(ToString(v), 2));
    if (f == "capitalize") return Value::Str(Case(ToString(v), 3));
    if (f == "string") return Value::Str(ToString(v));
    if (f == "tojson") return Value::Str(ToJson(v));
    if (f == "int") return Value::Int(v.IsNumber() ? static_cast<int64_t>(v.Num()) : std::atoll(ToString(v).c_str()));
    if (f == "length" || f == "count") {
      if (v.kind == Value::kList) return Value::Int(static_cast<int64_t>(v.list->size()));
      if (v.kind == Value::kDict) return Value::Int(static_cast<int64_t>(v.dict->size()));
      return Value::Int(static_cast<int64_t>(ToString(v).size()));
    }
    if (f == "first" || f == "last") {
      if (v.kind == Value::kList) return v.list->empty() ? Value() : (f == "first" ? v.list->front() : v.list->back());
      const std::string s = ToString(v);
      return s.empty() ? Value() : Value::Str(std::string(1, f == "first" ? s.front() : s.back()));
    }
    if (f == "default" || f == "d") {
      const bool boolean = arg(2).Truthy();
      return (v.kind == Value::kUndefined || (boolean && !v.Truthy())) ? arg(1) : v;
    }
    if (f == "join") {
      std::string o;
      const std::string sep = ToString(arg(1));
      if (v.kind == Value::kList) {
        for (size_t k = 0; k < v.list->size(); ++k) o += (k ? sep : "") + ToString((*v.list)[k]);
      }
      return Value::Str(o);
    }
    if (f == "replace") return Value::Str(Replace(ToString(v), ToString(arg(1)), ToString(arg(2))));
    if (f == "list") {
      if (v.kind == Value::kList) return v;
      List l;
      if (v.kind == Value::kDict) for (const auto& kv : *v.dict) l.push_back(Value::Str(kv.first));
      if (v.kind == Value::kString) for (char c : v.s) l.push_back(Value::Str(std::string(1, c)));
      return Value::MakeList(std::move(l));
    }
    if (f == "items") return Items(v);
    Fail("chat template: the filter '%s' is not supported (%s)", f.c_str(), where.c_str());
  }

  static Value Items(const Value& v) {
    List l;
    if (v.kind == Value::kDict) {
      for (const auto& [k, x] : *v.dict) l.push_back(Value::MakeList({Value::Str(k), x}));
    }
    return Value::MakeList(std::move(l));
  }

  Value CallOp(const Expr& e, const std::string& where) {
    const Expr& callee = *e.args[0];
    std::vector<Value> args;
    const size_t n_pos = e.args.size() - 1 - e.kwnames.size();
    for (size_t k = 1; k < e.args.size(); ++k) args.push_back(Eval(*e.args[k], where));
    if (callee.kind == Expr::kName) {
      const std::string& fn = callee.name;
      if (fn == "raise_exception") Fail("chat template raised: %s", args.empty() ? "(no message)" : ToString(args[0]).c_str());
      if (fn == "range") {
        int64_t lo = 0, hi = 0, step = 1;
        if (args.size() == 1) hi = args[0].i;
        else if (args.size() >= 2) {
          lo = args[0].i;
          hi = args[1].i;
          if (args.size() > 2) step = args[2].i;
        }
        if (step == 0) Fail("chat template: range step 0 (%s)", where.c_str());
        List l;
        for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
          l.push_back(Value::Int(i));
          if (l.size() > 1000000) Fail("chat template: range too long (%s)", where.c_str());
        }
        return Value::MakeList(std::move(l));
      }
      if (fn == "namespace" || fn == "dict") {
        Value d = Value::MakeDict();
        for (size_t k = 0; k < e.kwnames.size(); ++k) d.Set(e.kwnames[k], args[n_pos + k]);
        return d;
      }
      if (fn == "strftime_now") Fail("chat template: strftime_now is not supported (%s)", where.c_str());
      Fail("chat template: the function '%s' is not supported (%s)", fn.c_str(), where.c_str());
    }
    if (callee.kind == Expr::kAttr) {  // methods
      const Value o = Eval(*callee.args[0], where);
      const std::string& m = callee.name;
      auto a = [&](size_t k) { return k < args.size() ? args[k] : Value(); };
      if (o.kind == Value::kString) {
        const std::string ws = " \t\n\r\f\v";
        const std::string chars = a(0).kind == Value::kString ? a(0).s : ws;
        if (m == "strip") return Value::Str(Strip(o.s, chars, true, true));
        if (m == "lstrip") return Value::Str(Strip(o.s, chars, true, false));
        if (m == "rstrip") return Value::Str(Strip(o.s, chars, false, true));
        if (m == "upper") return Value::Str(Case(o.s, 1));
        if (m == "lower") return Value::Str(Case(o.s, 0));
        if (m == "title") return Value::Str(Case(o.s, 2));
        if (m == "capitalize") return Value::Str(Case(o.s, 3));
        if (m == "startswith") return Value::Bool(o.s.compare(0, ToString(a(0)).size(), ToString(a(0))) == 0);
        if (m == "endswith") {
          const std::string x = ToString(a(0));
          return Value::Bool(o.s.size() >= x.size() && o.s.compare(o.s.size() - x.size(), x.size(), x) == 0);
        }
        if (m == "replace") return Value::Str(Replace(o.s, ToString(a(0)), ToString(a(1))));
        if (m == "split") {
          List l;
          if (a(0).kind == Value::kString && !a(0).s.empty()) {
            const std::string sep = a(0).s;
            size_t i = 0, p;
            while ((p = o.s.find(sep, i)) != std::string::npos) {
              l.push_back(Value::Str(o.s.substr(i, p - i)));
              i = p + sep.size();
            }
            l.push_back(Value::Str(o.s.substr(i)));
          } else {
            size_t i = 0;
            while (i < o.s.size()) {
              while (i < o.s.size() && ws.find(o.s[i]) != std::string::npos) ++i;
              size_t j = i;
              while (j < o.s.size() && ws.find(o.s[j]) == std::string::npos) ++j;
              if (j > i) l.push_back(Value::Str(o.s.substr(i, j - i)));
              i = j;
            }
          }
          return Value::MakeList(std::move(l));
        }
      }
      if (o.kind == Value::kDict) {
        if (m == "items") return Items(o);
        if (m == "keys" || m == "values") {
          List l;
          for (const auto& [k, x] : *o.dict) l.push_back(m == "keys" ? Value::Str(k) : x);
          return Value::MakeList(std::move(l));
        }
        if (m == "get") {
          const Value* v = o.Get(ToString(a(0)));
          return v ? *v : a(1);
        }
      }
      Fail("chat template: the method '%s' is not supported here (%s)", m.c_str(), where.c_str());
    }
    Fail("chat template: this call is not supported (%s)", where.c_str());
  }
};

}  // namespace

std::string JinjaTemplate::RenderChat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                      const std::string& bos_token, const std::string& eos_token) const {
  Renderer r;
  r.scopes.emplace_back();
  List msgs;
  for (const auto& m : messages) {
    Value d = Value::MakeDict();
    d.Set("role", Value::Str(m.role));
    d.Set("content", Value::Str(m.content));
    msgs.push_back(d);
  }
  auto& g = r.scopes.back();
  g["messages"] = Value::MakeList(std::move(msgs));
  g["add_generation_prompt"] = Value::Bool(add_generation_prompt);
  g["bos_token"] = Value::Str(bos_token);
  g["eos_token"] = Value::Str(eos_token);
  r.scopes.emplace_back();  // template-level sets
  try {
    r.Run(body_);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    Fail("chat template: cannot be rendered (%s)", e.what());
  }
  return r.out;
}

}  // namespace paddock
