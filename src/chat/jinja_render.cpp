// chat/jinja_render.cpp: a statement tree evaluated against the chat variables (messages,
// add_generation_prompt, bos_token, eos_token), with bounded work and output.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>

#include "base/strings.h"
#include "chat/jinja_ast.h"

namespace paddock {
namespace jinja {
namespace {

using NodeP = std::unique_ptr<JinjaTemplate::Node>;

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
  std::map<std::string, const JinjaTemplate::Node*> macros;
  int macro_depth = 0;

  // A macro call: its output as a string. The body sees the template's variables and its own
  // parameters (positional, by name, or their defaults), not the caller's loop variables.
  Value CallMacro(const JinjaTemplate::Node& m, const std::vector<Value>& args, size_t n_pos,
                  const std::vector<std::string>& kwnames, const std::string& where) {
    if (++macro_depth > 64) Fail("chat template: macros nested too deeply (%s)", where.c_str());
    const size_t n_params = m.vars.size() - 1;
    if (n_pos > n_params)
      Fail("chat template: macro '%s' takes %zu arguments (%s)", m.vars[0].c_str(), n_params,
           where.c_str());
    std::map<std::string, Value> local;
    for (size_t k = 0; k < n_params; ++k) {
      if (k < n_pos) {
        local[m.vars[k + 1]] = args[k];
      } else if (m.defaults[k]) {
        local[m.vars[k + 1]] = Eval(*m.defaults[k], where);
      }
    }
    for (size_t k = 0; k < kwnames.size(); ++k) {
      if (std::find(m.vars.begin() + 1, m.vars.end(), kwnames[k]) == m.vars.end())
        Fail("chat template: macro '%s' has no parameter '%s' (%s)", m.vars[0].c_str(),
             kwnames[k].c_str(), where.c_str());
      local[kwnames[k]] = args[n_pos + k];
    }
    std::vector<std::map<std::string, Value>> saved;
    saved.swap(scopes);
    scopes.push_back(saved[0]);  // the template's variables (messages, tools, ...)
    if (saved.size() > 1) scopes.push_back(saved[1]);
    scopes.push_back(std::move(local));
    std::string saved_out;
    saved_out.swap(out);
    try {
      Run(m.body);
    } catch (...) {
      scopes.swap(saved);
      out.swap(saved_out);
      --macro_depth;
      throw;
    }
    // Namespaces are shared objects; plain template-level sets made inside stay inside.
    scopes.swap(saved);
    out.swap(saved_out);
    --macro_depth;
    return Value::Str(std::move(saved_out));
  }

  void Exec(const JinjaTemplate::Node& n) {
    using Node = JinjaTemplate::Node;
    // Bounded work and output: a template from a file must not hang or exhaust memory.
    if (++steps > 2000000 || out.size() > (16u << 20))
      Fail("chat template: rendering exceeds the work or size limit (%s)", n.where.c_str());
    switch (n.kind) {
      case Node::kText:
        out += n.text;
        break;
      case Node::kOutput:
        out += ToString(Eval(*n.expr, n.where));
        break;
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
          if (ns.kind != Value::kDict)
            Fail("chat template: '%s' is not a namespace (%s)", n.vars[0].c_str(), n.where.c_str());
          ns.Set(n.vars[1], std::move(v));
        } else {
          scopes.back()[n.vars[0]] = std::move(v);
        }
        break;
      }
      case Node::kMacro:
        macros[n.vars[0]] = &n;
        break;
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
        if (n.filter) items = Filtered(n, std::move(items));
        if (items.empty()) {
          Run(n.else_body);
          break;
        }
        const int64_t len = static_cast<int64_t>(items.size());
        for (int64_t k = 0; k < len; ++k) {
          scopes.emplace_back();
          auto& sc = scopes.back();
          Bind(n, items[static_cast<size_t>(k)]);
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

  // Binds a loop item to the loop's names in the innermost scope.
  void Bind(const JinjaTemplate::Node& n, const Value& item) {
    auto& sc = scopes.back();
    if (n.vars.size() == 1) {
      sc[n.vars[0]] = item;
      return;
    }
    if (item.kind != Value::kList || item.list->size() != n.vars.size())
      Fail("chat template: cannot unpack a loop item into %zu names (%s)", n.vars.size(),
           n.where.c_str());
    for (size_t v = 0; v < n.vars.size(); ++v) sc[n.vars[v]] = (*item.list)[v];
  }

  // The items a loop filter keeps (evaluated with each item bound, before the loop runs).
  List Filtered(const JinjaTemplate::Node& n, List items) {
    List kept;
    for (const Value& item : items) {
      scopes.emplace_back();
      Bind(n, item);
      const bool keep = Eval(*n.filter, n.where).Truthy();
      scopes.pop_back();
      if (keep) kept.push_back(item);
    }
    return kept;
  }

  static int64_t Index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

  Value Eval(const Expr& e, const std::string& where) {
    switch (e.kind) {
      case Expr::kLiteral:
        return e.literal;
      case Expr::kName:
        return Lookup(e.name);
      case Expr::kList: {
        List l;
        for (const auto& a : e.args) l.push_back(Eval(*a, where));
        return Value::MakeList(std::move(l));
      }
      case Expr::kDict: {
        Value d = Value::MakeDict();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2)
          d.Set(ToString(Eval(*e.args[k], where)), Eval(*e.args[k + 1], where));
        return d;
      }
      case Expr::kAttr: {
        const Value o = Eval(*e.args[0], where);
        if (const Value* v = o.Get(e.name)) return *v;
        return Value();
      }
      case Expr::kIndex:
        return IndexOp(e, where);
      case Expr::kSlice:
        return SliceOp(e, where);
      case Expr::kTernary:
        return Eval(*e.args[0], where).Truthy() ? Eval(*e.args[1], where) : Eval(*e.args[2], where);
      case Expr::kUnary: {
        const Value v = Eval(*e.args[0], where);
        if (e.name == "not") return Value::Bool(!v.Truthy());
        if (!v.IsNumber())
          Fail("chat template: unary %s on a non-number (%s)", e.name.c_str(), where.c_str());
        if (e.name == "+") return v;
        return v.kind == Value::kFloat ? Value::Float(-v.f)
                                       : Value::Int(-static_cast<int64_t>(v.Num()));
      }
      case Expr::kBinary:
        return BinaryOp(e, where);
      case Expr::kTest:
        return TestOp(e, where);
      case Expr::kFilter:
        return FilterOp(e, where);
      case Expr::kCall:
        return CallOp(e, where);
    }
    return Value();
  }

  // o[k]: a dict's key, a list's or string's index (negative from the end); undefined when
  // out of range or not indexable.
  Value IndexOp(const Expr& e, const std::string& where) {
    const Value o = Eval(*e.args[0], where);
    const Value k = Eval(*e.args[1], where);
    if (o.kind == Value::kDict) {
      const Value* v = o.Get(ToString(k));
      return v ? *v : Value();
    }
    if ((o.kind == Value::kList || o.kind == Value::kString) && k.kind == Value::kInt) {
      const int64_t n = o.kind == Value::kList ? static_cast<int64_t>(o.list->size())
                                               : static_cast<int64_t>(o.s.size());
      const int64_t i = Index(k.i, n);
      if (i < 0 || i >= n) return Value();
      return o.kind == Value::kList ? (*o.list)[static_cast<size_t>(i)]
                                    : Value::Str(std::string(1, o.s[static_cast<size_t>(i)]));
    }
    return Value();
  }

  // o[lo:hi:step] on a list or string, with Python's clamping and negative steps.
  Value SliceOp(const Expr& e, const std::string& where) {
    const Value o = Eval(*e.args[0], where);
    const int64_t n = o.kind == Value::kList     ? static_cast<int64_t>(o.list->size())
                      : o.kind == Value::kString ? static_cast<int64_t>(o.s.size())
                                                 : -1;
    if (n < 0)
      Fail("chat template: cannot slice %s (%s)", ToString(o, true).c_str(), where.c_str());
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
      if (o.kind == Value::kList)
        l.push_back((*o.list)[static_cast<size_t>(i)]);
      else
        s += o.s[static_cast<size_t>(i)];
    }
    return o.kind == Value::kList ? Value::MakeList(std::move(l)) : Value::Str(s);
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
      if (b.kind == Value::kString)
        found = b.s.find(ToString(a)) != std::string::npos;
      else if (b.kind == Value::kList)
        found = std::any_of(b.list->begin(), b.list->end(),
                            [&](const Value& x) { return Equal(x, a); });
      else if (b.kind == Value::kDict)
        found = b.Get(ToString(a)) != nullptr;
      return Value::Bool(op == "in" ? found : !found);
    }
    if (op == "+" && a.kind == Value::kString && b.kind == Value::kString)
      return Value::Str(a.s + b.s);
    if (op == "+" && a.kind == Value::kList && b.kind == Value::kList) {
      List l = *a.list;
      l.insert(l.end(), b.list->begin(), b.list->end());
      return Value::MakeList(std::move(l));
    }
    if (op == "*" && a.kind == Value::kString && b.kind == Value::kInt) {
      if (b.i > 0 && static_cast<double>(b.i) * static_cast<double>(a.s.size()) > (16u << 20))
        Fail("chat template: string repetition too large (%s)", where.c_str());
      std::string s;
      for (int64_t k = 0; k < b.i; ++k) s += a.s;
      return Value::Str(s);
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int cmp;
      if (a.IsNumber() && b.IsNumber())
        cmp = a.Num() < b.Num() ? -1 : a.Num() > b.Num() ? 1 : 0;
      else if (a.kind == Value::kString && b.kind == Value::kString)
        cmp = a.s.compare(b.s);
      else
        Fail("chat template: cannot compare %s and %s (%s)", ToString(a, true).c_str(),
             ToString(b, true).c_str(), where.c_str());
      return Value::Bool(op == "<"    ? cmp < 0
                         : op == ">"  ? cmp > 0
                         : op == "<=" ? cmp <= 0
                                      : cmp >= 0);
    }
    if (!a.IsNumber() || !b.IsNumber()) {
      Fail("chat template: '%s' between %s and %s is not supported (%s)", op.c_str(),
           ToString(a, true).c_str(), ToString(b, true).c_str(), where.c_str());
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
    const Value arg = e.args.size() > 1 ? Eval(*e.args[1], where) : Value();
    const bool r = Test(e.name, v, e.args.size() > 1 ? &arg : nullptr, where);
    return Value::Bool(e.negate ? !r : r);
  }

  // `v is t` (`v is t arg`).
  static bool Test(const std::string& t, const Value& v, const Value* arg,
                   const std::string& where) {
    if (t == "defined") return v.kind != Value::kUndefined;
    if (t == "undefined") return v.kind == Value::kUndefined;
    if (t == "none") return v.kind == Value::kNone;
    if (t == "string") return v.kind == Value::kString;
    if (t == "number") return v.kind == Value::kInt || v.kind == Value::kFloat;
    if (t == "integer") return v.kind == Value::kInt;
    if (t == "boolean") return v.kind == Value::kBool;
    if (t == "mapping") return v.kind == Value::kDict;
    if (t == "iterable")
      return v.kind == Value::kList || v.kind == Value::kDict || v.kind == Value::kString;
    if (t == "sequence") return v.kind == Value::kList || v.kind == Value::kString;
    if (t == "true") return v.kind == Value::kBool && v.b;
    if (t == "false") return v.kind == Value::kBool && !v.b;
    if (t == "even" || t == "odd") return v.kind == Value::kInt && (v.i % 2 == 0) == (t == "even");
    if (t == "equalto" || t == "eq" || t == "==") return arg != nullptr && Equal(v, *arg);
    if (t == "ne" || t == "!=") return arg == nullptr || !Equal(v, *arg);
    Fail("chat template: the test 'is %s' is not supported (%s)", t.c_str(), where.c_str());
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
      if (how == 0 || (how == 3 && k > 0) || (how == 2 && !start))
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      else if (how == 1 || (how == 3 && k == 0) || (how == 2 && start))
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
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
    const size_t n_pos = e.args.size() - e.kwnames.size();  // the filtered value + positionals
    auto arg = [&](size_t k) { return k < n_pos ? Eval(*e.args[k], where) : Value(); };
    // A keyword argument, or the positional one at `pos` when given that way.
    auto kwarg = [&](const char* name, size_t pos) {
      for (size_t k = 0; k < e.kwnames.size(); ++k)
        if (e.kwnames[k] == name) return Eval(*e.args[n_pos + k], where);
      return arg(pos);
    };
    const std::string& f = e.name;
    if (f == "trim") return Value::Str(Strip(ToString(v), " \t\n\r\f\v", true, true));
    if (f == "upper") return Value::Str(Case(ToString(v), 1));
    if (f == "lower") return Value::Str(Case(ToString(v), 0));
    if (f == "title") return Value::Str(Case(ToString(v), 2));
    if (f == "capitalize") return Value::Str(Case(ToString(v), 3));
    if (f == "string") return Value::Str(ToString(v));
    if (f == "tojson") {
      const Value indent = kwarg("indent", 1);
      return Value::Str(ToJson(v, indent.kind == Value::kInt ? static_cast<int>(indent.i) : 0));
    }
    if (f == "selectattr" || f == "rejectattr") {  // selectattr("role", "equalto", "user")
      const Value targ = arg(3);
      return SelectAttr(v, f == "selectattr", ToString(arg(1)), ToString(arg(2)),
                        e.args.size() > 3 ? &targ : nullptr, where);
    }
    if (f == "map") {  // map(attribute="name")
      const Value attr = kwarg("attribute", 99);
      if (attr.kind != Value::kString)
        Fail("chat template: only map(attribute=...) is supported (%s)", where.c_str());
      return MapAttribute(v, attr.s);
    }
    if (f == "int")
      return Value::Int(v.IsNumber() ? static_cast<int64_t>(v.Num())
                                     : std::atoll(ToString(v).c_str()));
    if (f == "length" || f == "count") {
      if (v.kind == Value::kList) return Value::Int(static_cast<int64_t>(v.list->size()));
      if (v.kind == Value::kDict) return Value::Int(static_cast<int64_t>(v.dict->size()));
      return Value::Int(static_cast<int64_t>(ToString(v).size()));
    }
    if (f == "first" || f == "last") {
      if (v.kind == Value::kList)
        return v.list->empty() ? Value() : (f == "first" ? v.list->front() : v.list->back());
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
    if (f == "list") return ListOf(v);
    if (f == "items") return Items(v);
    Fail("chat template: the filter '%s' is not supported (%s)", f.c_str(), where.c_str());
  }

  // The items of list v whose attribute passes the test (selectattr) or fails it (rejectattr);
  // no test: the attribute's truth.
  Value SelectAttr(const Value& v, bool select, const std::string& attr, const std::string& test,
                   const Value* targ, const std::string& where) {
    if (v.kind != Value::kList) return Value::MakeList();
    List l;
    for (const Value& item : *v.list) {
      const Value* a = item.Get(attr);
      const Value got = a ? *a : Value();
      const bool ok = test.empty() ? got.Truthy() : Test(test, got, targ, where);
      if (ok == select) l.push_back(item);
    }
    return Value::MakeList(std::move(l));
  }

  static Value MapAttribute(const Value& v, const std::string& attr) {
    List l;
    if (v.kind == Value::kList)
      for (const Value& item : *v.list) {
        const Value* a = item.Get(attr);
        l.push_back(a ? *a : Value());
      }
    return Value::MakeList(std::move(l));
  }

  // list(v): a list as is, a dict's keys, a string's characters.
  static Value ListOf(const Value& v) {
    if (v.kind == Value::kList) return v;
    List l;
    if (v.kind == Value::kDict)
      for (const auto& kv : *v.dict) l.push_back(Value::Str(kv.first));
    if (v.kind == Value::kString)
      for (char c : v.s) l.push_back(Value::Str(std::string(1, c)));
    return Value::MakeList(std::move(l));
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
    if (callee.kind == Expr::kName) return CallFunction(callee.name, e, args, n_pos, where);
    if (callee.kind == Expr::kAttr) {  // methods
      const Value o = Eval(*callee.args[0], where);
      const std::string& m = callee.name;
      if (o.kind == Value::kString) {
        if (std::optional<Value> r = StringMethod(o.s, m, args)) return *r;
      } else if (o.kind == Value::kDict) {
        if (std::optional<Value> r = DictMethod(o, m, args)) return *r;
      }
      Fail("chat template: the method '%s' is not supported here (%s)", m.c_str(), where.c_str());
    }
    Fail("chat template: this call is not supported (%s)", where.c_str());
  }

  // fn(args...): a macro of the template, or one of the globals templates call.
  Value CallFunction(const std::string& fn, const Expr& e, const std::vector<Value>& args,
                     size_t n_pos, const std::string& where) {
    if (auto mac = macros.find(fn); mac != macros.end())
      return CallMacro(*mac->second, args, n_pos, e.kwnames, where);
    if (fn == "raise_exception")
      Fail("chat template raised: %s", args.empty() ? "(no message)" : ToString(args[0]).c_str());
    if (fn == "range") return Range(args, where);
    if (fn == "namespace" || fn == "dict") {
      Value d = Value::MakeDict();
      for (size_t k = 0; k < e.kwnames.size(); ++k) d.Set(e.kwnames[k], args[n_pos + k]);
      return d;
    }
    if (fn == "strftime_now") {  // the local time (templates print today's date)
      if (args.size() != 1 || args[0].kind != Value::kString)
        Fail("chat template: strftime_now takes one format string (%s)", where.c_str());
      return Value::Str(FormatLocalTime(args[0].s.c_str()));
    }
    Fail("chat template: the function '%s' is not supported (%s)", fn.c_str(), where.c_str());
  }

  static Value Range(const std::vector<Value>& args, const std::string& where) {
    int64_t lo = 0, hi = 0, step = 1;
    if (args.size() == 1) {
      hi = args[0].i;
    } else if (args.size() >= 2) {
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

  // Python's str methods that templates use; nothing for another name.
  static std::optional<Value> StringMethod(const std::string& s, const std::string& m,
                                           const std::vector<Value>& args) {
    auto a = [&](size_t k) { return k < args.size() ? args[k] : Value(); };
    static const std::string ws = " \t\n\r\f\v";
    const std::string chars = a(0).kind == Value::kString ? a(0).s : ws;
    if (m == "strip") return Value::Str(Strip(s, chars, true, true));
    if (m == "lstrip") return Value::Str(Strip(s, chars, true, false));
    if (m == "rstrip") return Value::Str(Strip(s, chars, false, true));
    if (m == "upper") return Value::Str(Case(s, 1));
    if (m == "lower") return Value::Str(Case(s, 0));
    if (m == "title") return Value::Str(Case(s, 2));
    if (m == "capitalize") return Value::Str(Case(s, 3));
    if (m == "startswith")
      return Value::Bool(s.compare(0, ToString(a(0)).size(), ToString(a(0))) == 0);
    if (m == "endswith") {
      const std::string x = ToString(a(0));
      return Value::Bool(s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0);
    }
    if (m == "replace") return Value::Str(Replace(s, ToString(a(0)), ToString(a(1))));
    if (m == "split") return Split(s, a(0).kind == Value::kString ? a(0).s : "", ws);
    return std::nullopt;
  }

  // s.split(sep), or on runs of whitespace when sep is empty.
  static Value Split(const std::string& s, const std::string& sep, const std::string& ws) {
    List l;
    if (!sep.empty()) {
      size_t i = 0, p;
      while ((p = s.find(sep, i)) != std::string::npos) {
        l.push_back(Value::Str(s.substr(i, p - i)));
        i = p + sep.size();
      }
      l.push_back(Value::Str(s.substr(i)));
    } else {
      size_t i = 0;
      while (i < s.size()) {
        while (i < s.size() && ws.find(s[i]) != std::string::npos) ++i;
        size_t j = i;
        while (j < s.size() && ws.find(s[j]) == std::string::npos) ++j;
        if (j > i) l.push_back(Value::Str(s.substr(i, j - i)));
        i = j;
      }
    }
    return Value::MakeList(std::move(l));
  }

  // Python's dict methods that templates use; nothing for another name.
  std::optional<Value> DictMethod(const Value& o, const std::string& m,
                                  const std::vector<Value>& args) {
    auto a = [&](size_t k) { return k < args.size() ? args[k] : Value(); };
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
    return std::nullopt;
  }
};

}  // namespace
}  // namespace jinja

std::string JinjaTemplate::RenderChat(const std::vector<ChatMessage>& messages,
                                      bool add_generation_prompt, const std::string& bos_token,
                                      const std::string& eos_token,
                                      const std::vector<ChatVar>& vars) const {
  jinja::Renderer r;
  r.scopes.emplace_back();
  jinja::List msgs;
  for (const auto& m : messages) {
    jinja::Value d = jinja::Value::MakeDict();
    d.Set("role", jinja::Value::Str(m.role));
    d.Set("content", jinja::Value::Str(m.content));
    if (!m.tool_calls.empty()) {  // as HF passes them: arguments as an object, not text
      jinja::List calls;
      for (const ChatToolCall& c : m.tool_calls) {
        jinja::Value fn = jinja::Value::MakeDict();
        fn.Set("name", jinja::Value::Str(c.name));
        fn.Set("arguments", jinja::FromJson(c.arguments.empty() ? "{}" : c.arguments));
        jinja::Value call = jinja::Value::MakeDict();
        call.Set("id", jinja::Value::Str(c.id));
        call.Set("type", jinja::Value::Str("function"));
        call.Set("function", fn);
        calls.push_back(call);
      }
      d.Set("tool_calls", jinja::Value::MakeList(std::move(calls)));
    }
    if (m.role == "tool") d.Set("tool_call_id", jinja::Value::Str(m.tool_call_id));
    if (!m.reasoning_content.empty())
      d.Set("reasoning_content", jinja::Value::Str(m.reasoning_content));
    msgs.push_back(d);
  }
  auto& g = r.scopes.back();
  g["messages"] = jinja::Value::MakeList(std::move(msgs));
  g["add_generation_prompt"] = jinja::Value::Bool(add_generation_prompt);
  g["bos_token"] = jinja::Value::Str(bos_token);
  g["eos_token"] = jinja::Value::Str(eos_token);
  for (const ChatVar& v : vars) {
    switch (v.kind) {
      case ChatVar::Kind::kNull:
        g[v.name] = jinja::Value::None();
        break;
      case ChatVar::Kind::kBool:
        g[v.name] = jinja::Value::Bool(v.b);
        break;
      case ChatVar::Kind::kInt:
        g[v.name] = jinja::Value::Int(v.i);
        break;
      case ChatVar::Kind::kNumber:
        g[v.name] = jinja::Value::Float(v.num);
        break;
      case ChatVar::Kind::kString:
        g[v.name] = jinja::Value::Str(v.str);
        break;
      case ChatVar::Kind::kJson:
        g[v.name] = jinja::FromJson(v.str);
        break;
    }
  }
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
