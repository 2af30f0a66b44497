// Jinja lexer with transformers' settings (trim_blocks, lstrip_blocks, no trailing newline kept):
// splits a template into text and tag tokens following jinja2/lexer.py's whitespace rules.
#pragma once

#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/chat/value.hpp"

namespace kylin::jinja {

struct Token {
  enum class Type { text, block_begin, block_end, var_begin, var_end, name, string, integer, floating, op, eof };
  Type type;
  std::string text;  // text data, name, decoded string literal, number spelling, operator
  int line;
};

// A syntax error with the line it was found on; the template wraps it into kylin::Error.
struct SyntaxError : std::runtime_error {
  SyntaxError(int line_, const std::string& message) : std::runtime_error(message), line(line_) {}
  int line;
};

namespace detail {

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(normalize(std::move(source))) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      const std::size_t start = find_tag(pos_);
      std::string text = src_.substr(pos_, start - pos_);
      if (start == src_.size()) {
        emit_text(std::move(text), pos_);
        break;
      }
      const char kind = src_[start + 1];  // '{', '%' or '#'
      const char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
      if (sign == '-') {
        text.erase(rstrip_length(text));
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks: blocks and comments only
        const std::size_t l_pos = text.rfind('\n') + 1;  // npos + 1 == 0
        if ((l_pos > 0 || line_starting) && text.find_first_not_of(" \t", l_pos) == std::string::npos)
          text.erase(l_pos);
      }
      emit_text(std::move(text), pos_);
      pos_ = start + 2 + (sign == '-' || sign == '+');
      if (kind == '#') {
        lex_comment(start);
      } else if (kind == '%' && is_raw_begin()) {
        lex_raw(start);
      } else {
        lex_tag(kind == '%', start);
      }
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    tokens_.push_back({Token::Type::eof, "", line_at(src_.size())});
    return std::move(tokens_);
  }

 private:
  // \r\n and \r become \n (Jinja's newline_sequence); one trailing newline is dropped.
  static std::string normalize(std::string s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\r') {
        out += '\n';
        if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
      } else {
        out += s[i];
      }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

  std::size_t find_tag(std::size_t from) const {
    for (std::size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return src_.size();
  }

  int line_at(std::size_t offset) {
    for (; line_pos_ < offset && line_pos_ < src_.size(); ++line_pos_) line_ += src_[line_pos_] == '\n';
    return line_;
  }

  // Bytes of trailing whitespace (Python str.rstrip()) removed: returns the new length.
  static std::size_t rstrip_length(std::string_view text) {
    std::u32string cps = decode_utf8(text);
    std::size_t n = cps.size();
    while (n > 0 && is_space(cps[n - 1])) --n;
    return encode_utf8(std::u32string_view(cps).substr(0, n)).size();
  }
  std::size_t skip_space(std::size_t p) const {
    char32_t cp = 0;
    while (p < src_.size()) {
      const std::size_t len = next_codepoint(src_, p, cp);
      if (!is_space(cp)) break;
      p += len;
    }
    return p;
  }

  void emit_text(std::string text, std::size_t at) {
    if (!text.empty()) tokens_.push_back({Token::Type::text, std::move(text), line_at(at)});
  }

  // After a block or comment end: `-` strips all whitespace, otherwise trim_blocks eats one \n.
  void after_end(bool minus, bool plus) {
    if (minus) pos_ = skip_space(pos_);
    else if (!plus && pos_ < src_.size() && src_[pos_] == '\n') ++pos_;
  }

  void lex_comment(std::size_t start) {
    const std::size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) throw SyntaxError(line_at(start), "unterminated comment");
    const bool minus = end > pos_ && src_[end - 1] == '-';
    const bool plus = end > pos_ && src_[end - 1] == '+';
    pos_ = end + 2;
    after_end(minus, plus);
  }

  bool is_raw_begin() const {
    std::size_t p = pos_;
    while (p < src_.size() && std::isspace(static_cast<unsigned char>(src_[p]))) ++p;
    return src_.compare(p, 3, "raw") == 0 && p + 3 < src_.size() &&
           !std::isalnum(static_cast<unsigned char>(src_[p + 3])) && src_[p + 3] != '_';
  }

  // {% raw %}...{% endraw %}: the body is text, whitespace control applies at both ends.
  void lex_raw(std::size_t start) {
    const std::size_t close = src_.find("%}", pos_);
    if (close == std::string::npos) throw SyntaxError(line_at(start), "unterminated raw tag");
    pos_ = close + 2;
    after_end(src_[close - 1] == '-', src_[close - 1] == '+');
    for (std::size_t p = src_.find("{%", pos_); p != std::string::npos; p = src_.find("{%", p + 2)) {
      std::size_t q = p + 2 + (p + 2 < src_.size() && (src_[p + 2] == '-' || src_[p + 2] == '+'));
      while (q < src_.size() && std::isspace(static_cast<unsigned char>(src_[q]))) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      std::string body = src_.substr(pos_, p - pos_);
      if (src_[p + 2] == '-') body.erase(rstrip_length(body));
      emit_text(std::move(body), pos_);
      const std::size_t end = src_.find("%}", q);
      if (end == std::string::npos) break;
      pos_ = end + 2;
      after_end(src_[end - 1] == '-', src_[end - 1] == '+');
      return;
    }
    throw SyntaxError(line_at(start), "missing {% endraw %}");
  }

  void lex_tag(bool block, std::size_t start) {
    tokens_.push_back({block ? Token::Type::block_begin : Token::Type::var_begin, "", line_at(start)});
    int balance = 0;  // end delimiters inside (), [], {} do not close the tag, as in Jinja
    while (true) {
      pos_ = skip_space(pos_);
      if (pos_ >= src_.size()) throw SyntaxError(line_at(start), block ? "unclosed '{%' tag" : "unclosed '{{' tag");
      if (balance == 0 && lex_end(block)) return;
      lex_token(balance);
    }
  }

  bool lex_end(bool block) {
    const std::string_view rest = std::string_view(src_).substr(pos_);
    const std::string_view close = block ? "%}" : "}}";
    const bool minus = rest.substr(0, 1) == "-" && rest.substr(1, 2) == close;
    const bool plus = block && rest.substr(0, 1) == "+" && rest.substr(1, 2) == close;
    if (!minus && !plus && rest.substr(0, 2) != close) return false;
    tokens_.push_back({block ? Token::Type::block_end : Token::Type::var_end, "", line_at(pos_)});
    pos_ += (minus || plus) + 2;
    if (block || minus) after_end(minus, plus);
    return true;
  }

  void lex_token(int& balance);
  void lex_number();
  void lex_string();

  std::string src_;
  std::size_t pos_ = 0;
  std::size_t line_pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

inline void Lexer::lex_token(int& balance) {
  const char c = src_[pos_];
  const int line = line_at(pos_);
  if (std::isdigit(static_cast<unsigned char>(c))) return lex_number();
  if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
    std::size_t end = pos_;
    while (end < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) ++end;
    tokens_.push_back({Token::Type::name, src_.substr(pos_, end - pos_), line});
    pos_ = end;
    return;
  }
  if (c == '\'' || c == '"') return lex_string();
  static constexpr std::string_view two[] = {"//", "**", "==", "!=", "<=", ">="};
  for (std::string_view op : two)
    if (std::string_view(src_).substr(pos_, 2) == op) {
      tokens_.push_back({Token::Type::op, std::string(op), line});
      pos_ += 2;
      return;
    }
  if (std::string_view("+-/*%~[](){}<>=.:|,;").find(c) == std::string_view::npos)
    throw SyntaxError(line, std::string("unexpected character '") + c + "'");
  if (c == '(' || c == '[' || c == '{') ++balance;
  if (c == ')' || c == ']' || c == '}') {
    if (balance == 0) throw SyntaxError(line, std::string("unexpected '") + c + "'");
    --balance;
  }
  tokens_.push_back({Token::Type::op, std::string(1, c), line});
  ++pos_;
}

inline void Lexer::lex_number() {
  const int line = line_at(pos_);
  auto digits = [&](std::size_t p) {
    while (p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
    return p;
  };
  std::size_t end = digits(pos_);
  bool is_float = false;
  if (end + 1 < src_.size() && src_[end] == '.' && std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
    end = digits(end + 1);
    is_float = true;
  }
  if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
    std::size_t p = end + 1;
    if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
    if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
      end = digits(p);
      is_float = true;
    }
  }
  std::string text;
  for (std::size_t i = pos_; i < end; ++i)
    if (src_[i] != '_') text += src_[i];
  tokens_.push_back({is_float ? Token::Type::floating : Token::Type::integer, text, line});
  pos_ = end;
}

// Python string-literal escapes (Jinja decodes literals with "unicode-escape").
inline void Lexer::lex_string() {
  const int line = line_at(pos_);
  const char quote = src_[pos_];
  std::string out;
  std::size_t p = pos_ + 1;
  auto hex = [&](std::size_t n) {
    if (p + n > src_.size()) throw SyntaxError(line, "truncated escape in string literal");
    unsigned v = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const char h = src_[p + k];
      if (!std::isxdigit(static_cast<unsigned char>(h))) throw SyntaxError(line, "bad escape in string literal");
      v = v * 16 + static_cast<unsigned>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    p += n;
    const char32_t cp = v;
    out += encode_utf8(std::u32string_view(&cp, 1));
  };
  for (; p < src_.size() && src_[p] != quote;) {
    if (src_[p] != '\\' || p + 1 >= src_.size()) {
      out += src_[p++];
      continue;
    }
    const char e = src_[p + 1];
    p += 2;
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case 'a': out += '\a'; break;
      case '0': out += '\0'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case '\n': break;  // line continuation
      case 'x': hex(2); break;
      case 'u': hex(4); break;
      case 'U': hex(8); break;
      default: out += '\\'; out += e; break;  // unknown escapes stay as written, as in Python
    }
  }
  if (p >= src_.size()) throw SyntaxError(line, "unterminated string literal");
  tokens_.push_back({Token::Type::string, std::move(out), line});
  pos_ = p + 1;
}

}  // namespace detail
}  // namespace kylin::jinja
