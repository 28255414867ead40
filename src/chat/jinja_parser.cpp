// chat/jinja_parser.cpp: tags into a tree of statements over expression trees (recursive
// descent, nesting bounded so hostile templates cannot exhaust the stack).
#include <algorithm>

#include "base/strings.h"
#include "chat/jinja_ast.h"

namespace paddock {
namespace jinja {
namespace {

ExprP Make(Expr::Kind k, std::string name = "") {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->name = std::move(name);
  return e;
}

class Parser {
 public:
  Parser(std::vector<Tok> toks, std::string where)
      : t_(std::move(toks)), where_(std::move(where)) {}

  ExprP Expression() { return Ternary(); }
  // An expression without a trailing `if ... else` (a loop's iterable: `if` there is a filter).
  ExprP PlainExpression() { return Or(); }
  bool AtEnd() const { return t_[p_].kind == Tok::kEnd; }
  const Tok& Peek(size_t ahead = 0) const { return t_[std::min(p_ + ahead, t_.size() - 1)]; }
  bool IsName(const char* n, size_t ahead = 0) const {
    return Peek(ahead).kind == Tok::kName && Peek(ahead).text == n;
  }
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
    Fail("chat template: expected %s, found '%s' in %s", wanted.c_str(), Peek().text.c_str(),
         where_.c_str());
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
      if (Peek().kind == Tok::kOp &&
          (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp(">") || IsOp("<=") || IsOp(">="))) {
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
        if (errno == ERANGE)
          Fail("chat template: integer %s is out of range in %s", t.text.c_str(), where_.c_str());
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
      if (n == "true" || n == "True")
        e->literal = Value::Bool(true);
      else if (n == "false" || n == "False")
        e->literal = Value::Bool(false);
      else if (n == "none" || n == "None")
        e->literal = Value::None();
      else
        return Make(Expr::kName, n);
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
}  // namespace jinja

using jinja::Chunk;
using jinja::Cut;
using jinja::Lex;
using jinja::Parser;
using Node = JinjaTemplate::Node;
using NodeP = std::unique_ptr<Node>;

JinjaTemplate::JinjaTemplate(const std::string& source) {
  try {
    Parse(source);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // e.g. allocation limits: still one clear error
    Fail("chat template: cannot be parsed (%s)", e.what());
  }
}

namespace {

NodeP NewNode(Node::Kind kind, const std::string& where) {
  auto n = std::make_unique<Node>();
  n->kind = kind;
  n->where = where;
  return n;
}

// {% for a, b in items if cond %}
NodeP ParseFor(Parser& p, const std::string& where) {
  NodeP n = NewNode(Node::kFor, where);
  n->vars.push_back(p.Name());
  while (p.IsOp(",")) {
    p.Skip();
    n->vars.push_back(p.Name());
  }
  p.ExpectName("in");
  n->expr = p.PlainExpression();
  if (p.IsName("if")) {  // a loop filter: items it rejects are skipped (and not counted)
    p.Skip();
    n->filter = p.Expression();
  }
  if (p.IsName("recursive"))
    Fail("chat template: recursive loops are not supported (%s)", where.c_str());
  return n;
}

// {% macro name(a, b=default) %}
NodeP ParseMacro(Parser& p, const std::string& where) {
  NodeP n = NewNode(Node::kMacro, where);
  n->vars.push_back(p.Name());
  if (!p.IsOp("(")) p.Error("'(' after the macro's name");
  p.Skip();
  while (!p.IsOp(")")) {
    if (!n->defaults.empty()) {
      if (!p.IsOp(",")) p.Error("',' or ')'");
      p.Skip();
    }
    n->vars.push_back(p.Name());
    if (p.IsOp("=")) {
      p.Skip();
      n->defaults.push_back(p.Expression());
    } else {
      n->defaults.push_back(nullptr);
    }
  }
  p.Skip();
  return n;
}

// {% set x = expr %} or {% set ns.x = expr %}
NodeP ParseSet(Parser& p, const std::string& where) {
  NodeP n = NewNode(Node::kSet, where);
  n->vars.push_back(p.Name());
  if (p.IsOp(".")) {
    p.Skip();
    n->vars.push_back(p.Name());
  }
  if (!p.IsOp("="))
    Fail(
        "chat template: block assignments ('{%% set x %%}...{%% endset %%}') are not supported "
        "(%s)",
        where.c_str());
  p.Skip();
  n->expr = p.Expression();
  return n;
}

// The blocks open while parsing: each node and the list statements went into before it.
class OpenBlocks {
 public:
  explicit OpenBlocks(std::vector<NodeP>* body) : into_(body) {}
  std::vector<NodeP>* into() const { return into_; }
  void Add(NodeP n) { into_->push_back(std::move(n)); }
  // Adds n and makes `inner` (a list of n's) where statements go until it closes.
  void Open(NodeP n, std::vector<NodeP>* inner, const std::string& where) {
    stack_.push_back({n.get(), into_});
    into_->push_back(std::move(n));
    into_ = inner;
    if (stack_.size() > 64) Fail("chat template: blocks nested too deeply (%s)", where.c_str());
  }
  void Continue(std::vector<NodeP>* inner) { into_ = inner; }
  Node* top() const { return stack_.empty() ? nullptr : stack_.back().node; }
  void Close(Node::Kind want, const std::string& kw, const std::string& where) {
    if (stack_.empty() || stack_.back().node->kind != want)
      Fail("chat template: unexpected '%s' in %s", kw.c_str(), where.c_str());
    into_ = stack_.back().into;
    stack_.pop_back();
  }
  void CheckClosed() const {
    if (stack_.empty()) return;
    const Node::Kind k = stack_.back().node->kind;
    Fail("chat template: '%s' opened in %s is never closed",
         k == Node::kIf    ? "if"
         : k == Node::kFor ? "for"
                           : "macro",
         stack_.back().node->where.c_str());
  }

 private:
  struct Open_ {
    Node* node;
    std::vector<NodeP>* into;
  };
  std::vector<Open_> stack_;
  std::vector<NodeP>* into_;
};

// A {% ... %} tag whose keyword is kw.
void ParseStatement(Parser& p, const std::string& kw, const std::string& where, OpenBlocks* b) {
  if (kw == "if") {
    NodeP n = NewNode(Node::kIf, where);
    n->branches.emplace_back(p.Expression(), std::vector<NodeP>());
    auto* inner = &n->branches.back().second;
    b->Open(std::move(n), inner, where);
  } else if (kw == "elif" || kw == "else") {
    Node* top = b->top();
    if (top == nullptr)
      Fail("chat template: '%s' outside a block in %s", kw.c_str(), where.c_str());
    if (top->kind == Node::kFor && kw == "else") {
      b->Continue(&top->else_body);
    } else if (top->kind == Node::kIf) {
      top->branches.emplace_back(kw == "elif" ? p.Expression() : nullptr, std::vector<NodeP>());
      b->Continue(&top->branches.back().second);
    } else {
      Fail("chat template: unexpected '%s' in %s", kw.c_str(), where.c_str());
    }
  } else if (kw == "endif" || kw == "endfor" || kw == "endmacro") {
    b->Close(kw == "endif" ? Node::kIf : kw == "endfor" ? Node::kFor : Node::kMacro, kw, where);
  } else if (kw == "for") {
    NodeP n = ParseFor(p, where);
    auto* inner = &n->body;
    b->Open(std::move(n), inner, where);
  } else if (kw == "macro") {
    if (b->top() != nullptr)
      Fail("chat template: a macro must be defined at the top level (%s)", where.c_str());
    NodeP n = ParseMacro(p, where);
    auto* inner = &n->body;
    b->Open(std::move(n), inner, where);
  } else if (kw == "set") {
    b->Add(ParseSet(p, where));
  } else {
    Fail("chat template: the '%s' statement is not supported (%s)", kw.c_str(), where.c_str());
  }
  if (!p.AtEnd() && kw != "else" && kw != "endif" && kw != "endfor" && kw != "endmacro")
    p.Error("'%}'");
}

}  // namespace

void JinjaTemplate::Parse(const std::string& source) {
  const std::vector<Chunk> chunks = Cut(source);
  OpenBlocks blocks(&body_);
  for (const Chunk& c : chunks) {
    const std::string where = StrFormat("the tag on line %zu", c.line);
    if (c.kind == Chunk::kComment) continue;
    if (c.kind == Chunk::kText) {
      if (c.content.empty()) continue;
      NodeP n = NewNode(Node::kText, "");
      n->text = c.content;
      blocks.Add(std::move(n));
      continue;
    }
    Parser p(Lex(c.content, where), where);
    if (c.kind == Chunk::kExpr) {
      NodeP n = NewNode(Node::kOutput, where);
      n->expr = p.Expression();
      if (!p.AtEnd()) p.Error("'}}'");
      blocks.Add(std::move(n));
      continue;
    }
    const std::string kw = p.Name();
    ParseStatement(p, kw, where, &blocks);
  }
  blocks.CheckClosed();
}

JinjaTemplate::~JinjaTemplate() = default;

}  // namespace paddock
