// chat/jinja_lexer.cpp: the source cut into text and tags (whitespace control applied), and a
// tag's content into tokens.
#include <cctype>

#include "base/strings.h"
#include "chat/jinja_ast.h"

namespace paddock::jinja {

std::vector<Tok> Lex(const std::string& src, const std::string& where) {
  std::vector<Tok> out;
  size_t i = 0;
  while (i < src.size()) {
    const char c = src[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < src.size() && (std::isalnum(static_cast<unsigned char>(src[j])) || src[j] == '_'))
        ++j;
      out.push_back({Tok::kName, src.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < src.size() && (std::isdigit(static_cast<unsigned char>(src[j])) ||
                                (src[j] == '.' && !is_float && j + 1 < src.size() &&
                                 std::isdigit(static_cast<unsigned char>(src[j + 1]))))) {
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
            case 'n':
              s += '\n';
              break;
            case 't':
              s += '\t';
              break;
            case 'r':
              s += '\r';
              break;
            default:
              s += e;
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
      if (std::string("()[]{},.:|+-*/%~<>=").find(c) == std::string::npos)
        Fail("chat template: unexpected character '%c' in %s", c, where.c_str());
      out.push_back({Tok::kOp, std::string(1, c)});
      ++i;
    }
  }
  out.push_back({Tok::kEnd, ""});
  return out;
}

namespace {

// The next "{{", "{%" or "{#" at or after i, or src.size().
size_t FindOpen(const std::string& src, size_t i) {
  for (size_t j = i; j + 1 < src.size(); ++j) {
    if (src[j] == '{' && (src[j + 1] == '{' || src[j + 1] == '%' || src[j + 1] == '#')) return j;
  }
  return src.size();
}

// The close of the tag opened at `open` (kind t: '{', '%' or '#'), skipping quoted strings
// inside expressions and statements; as Jinja's lexer does, a close inside open brackets is
// not one ({{ {'a': {'b': 1}} }}). Returns src.size() - 1 or more when there is none.
size_t FindClose(const std::string& src, size_t open, char t) {
  const std::string close = t == '{' ? "}}" : t == '%' ? "%}" : "#}";
  size_t j = open + 2;
  char quote = 0;
  int depth = 0;
  for (; j + 1 < src.size(); ++j) {
    if (t != '#') {
      if (quote) {
        if (src[j] == '\\')
          ++j;
        else if (src[j] == quote)
          quote = 0;
        continue;
      }
      if (src[j] == '\'' || src[j] == '"') {
        quote = src[j];
        continue;
      }
    }
    if (depth == 0 && src.compare(j, 2, close) == 0) break;
    if (t == '#') continue;
    if (src[j] == '(' || src[j] == '[' || src[j] == '{') {
      ++depth;
    } else if ((src[j] == ')' || src[j] == ']' || src[j] == '}') && depth > 0) {
      --depth;
    }
  }
  return j;
}

// The tag between `open` and its close at j, with its '-' / '+' whitespace markers.
Chunk TagChunk(const std::string& src, size_t open, size_t j, size_t line) {
  const char t = src[open + 1];
  Chunk c{t == '{'   ? Chunk::kExpr
          : t == '%' ? Chunk::kStmt
                     : Chunk::kComment,
          "", false, false, line};
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
  return c;
}

// Whitespace control: '-' strips all whitespace on that side; HF templates render with
// trim_blocks (drop the newline after a block tag) and lstrip_blocks (drop spaces and tabs
// before a block tag at the start of a line).
void ApplyWhitespaceControl(std::vector<Chunk>& out) {
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
        if (s.compare(0, 2, "\r\n") == 0)
          s.erase(0, 2);
        else if (!s.empty() && s[0] == '\n')
          s.erase(0, 1);
      }
    }
  }
}

}  // namespace

std::vector<Chunk> Cut(const std::string& src) {
  std::vector<Chunk> out;
  size_t i = 0, line = 1;
  auto count_lines = [&](size_t from, size_t to) {
    for (size_t k = from; k < to; ++k) line += src[k] == '\n';
  };
  while (i < src.size()) {
    const size_t open = FindOpen(src, i);
    if (open > i) out.push_back({Chunk::kText, src.substr(i, open - i), false, false, line});
    count_lines(i, open);
    if (open >= src.size()) break;
    const size_t j = FindClose(src, open, src[open + 1]);
    if (j + 1 >= src.size()) Fail("chat template: unclosed tag starting on line %zu", line);
    out.push_back(TagChunk(src, open, j, line));
    count_lines(open, j);
    i = j + 2;
  }
  ApplyWhitespaceControl(out);
  return out;
}

}  // namespace paddock::jinja
