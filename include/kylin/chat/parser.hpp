// Jinja parser: tokens to the syntax tree, following jinja2/parser.py's grammar and precedence.
// Unknown filters, tests and tags are rejected here, at load time, with their line.
#pragma once

#include <algorithm>
#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/chat/ast.hpp"
#include "kylin/chat/builtins.hpp"
#include "kylin/chat/lexer.hpp"

namespace kylin::jinja::detail {

class Parser {
 public:
  Parser(std::vector<Token> tokens, int max_depth) : toks_(std::move(tokens)), max_depth_(max_depth) {}

  Body parse_template() {
    std::string end;
    Body body = parse_body({}, end);
    return body;
  }

 private:
  using Type = Token::Type;

  // Depth of nested blocks and sub-expressions, bounded so that a hostile template cannot
  // exhaust the stack here or in the evaluator.
  struct DepthGuard {
    DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > p_.max_depth_)
        throw SyntaxError(p_.cur().line, "template nesting deeper than " + std::to_string(p_.max_depth_));
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(std::size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  Token next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  bool is_op(std::string_view op) const { return cur().type == Type::op && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == Type::name && cur().text == n; }
  bool skip_op(std::string_view op) { return is_op(op) ? (next(), true) : false; }
  bool skip_name(std::string_view n) { return is_name(n) ? (next(), true) : false; }
  [[noreturn]] void error(const std::string& message) const { throw SyntaxError(cur().line, message); }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Type::eof: return "end of template";
      case Type::block_end: return "'%}'";
      case Type::var_end: return "'}}'";
      case Type::string: return "string literal";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) error("expected '" + std::string(op) + "', got " + describe(cur()));
  }
  void expect(Type type, std::string_view what) {
    if (cur().type != type) error("expected " + std::string(what) + ", got " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().type != Type::name) error("expected a name, got " + describe(cur()));
    return next().text;
  }

  // Statements up to one of `end_tags` (left unconsumed after its '{%'; its name goes to `ended`).
  Body parse_body(std::initializer_list<std::string_view> end_tags, std::string& ended) {
    DepthGuard guard(*this);
    Body body;
    while (cur().type != Type::eof) {
      const Token& t = cur();
      if (t.type == Type::text) {
        body.push_back(make_stmt(Stmt::Kind::text, t.line));
        body.back()->text = next().text;
      } else if (t.type == Type::var_begin) {
        auto s = make_stmt(Stmt::Kind::output, next().line);
        s->expr = parse_tuple();
        expect(Type::var_end, "'}}'");
        body.push_back(std::move(s));
      } else if (t.type == Type::block_begin) {
        const Token& tag = peek();
        for (std::string_view e : end_tags)
          if (tag.type == Type::name && tag.text == e) {
            next();
            ended = next().text;
            return body;
          }
        next();
        body.push_back(parse_statement());
      } else {
        error("unexpected " + describe(t));
      }
    }
    if (end_tags.size() > 0) error("missing '{% " + std::string(*std::prev(end_tags.end())) + " %}'");
    return body;
  }

  static std::unique_ptr<Stmt> make_stmt(Stmt::Kind kind, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = line;
    return s;
  }

  std::unique_ptr<Stmt> parse_statement() {
    const int line = cur().line;
    if (cur().type != Type::name) error("expected a tag name, got " + describe(cur()));
    const std::string tag = next().text;
    if (tag == "if") return parse_if(line);
    if (tag == "for") return parse_for(line);
    if (tag == "set") return parse_set(line);
    if (tag == "macro") return parse_macro(line);
    if (tag == "break" || tag == "continue") {
      expect(Type::block_end, "'%}'");
      return make_stmt(tag == "break" ? Stmt::Kind::break_ : Stmt::Kind::continue_, line);
    }
    if (tag == "generation") {
      auto s = make_stmt(Stmt::Kind::scope, line);
      expect(Type::block_end, "'%}'");
      s->body = parse_block_body({"endgeneration"});
      return s;
    }
    throw SyntaxError(line, "unsupported tag '" + tag + "'");
  }

  // Body of a block closed by `end` (the '{% end %}' tag is consumed).
  Body parse_block_body(std::initializer_list<std::string_view> end) {
    std::string ended;
    Body body = parse_body(end, ended);
    expect(Type::block_end, "'%}'");
    return body;
  }

  std::unique_ptr<Stmt> parse_if(int line) {
    auto s = make_stmt(Stmt::Kind::if_, line);
    ExprPtr cond = parse_expression();
    while (true) {
      expect(Type::block_end, "'%}'");
      std::string ended;
      Body body = parse_body({"elif", "else", "endif"}, ended);
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (ended == "elif") {
        cond = parse_expression();
      } else if (ended == "else") {
        expect(Type::block_end, "'%}'");
        s->branches.emplace_back(nullptr, parse_block_body({"endif"}));
        return s;
      } else {
        expect(Type::block_end, "'%}'");
        return s;
      }
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = skip_op("(");
    do names.push_back(expect_name());
    while (skip_op(","));
    if (paren) expect_op(")");
    return names;
  }

  std::unique_ptr<Stmt> parse_for(int line) {
    auto s = make_stmt(Stmt::Kind::for_, line);
    s->targets = parse_targets();
    if (!skip_name("in")) error("expected 'in', got " + describe(cur()));
    s->expr = parse_tuple(false);
    if (skip_name("if")) s->cond = parse_expression();
    if (is_name("recursive")) error("unsupported construct 'recursive' loop");
    expect(Type::block_end, "'%}'");
    std::string ended;
    s->body = parse_body({"else", "endfor"}, ended);
    expect(Type::block_end, "'%}'");
    if (ended == "else") s->else_body = parse_block_body({"endfor"});
    return s;
  }

  std::unique_ptr<Stmt> parse_set(int line) {
    auto s = make_stmt(Stmt::Kind::set, line);
    if (cur().type == Type::name && peek().type == Type::op && peek().text == ".") {
      s->targets.push_back(next().text);
      next();
      s->attr = expect_name();
    } else {
      s->targets = parse_targets();
    }
    if (skip_op("=")) {
      s->expr = parse_tuple();
      expect(Type::block_end, "'%}'");
      return s;
    }
    if (!s->attr.empty() || s->targets.size() != 1) error("expected '='");
    if (is_op("|")) error("unsupported construct: filtered block set");
    s->kind = Stmt::Kind::set_block;
    expect(Type::block_end, "'%}'");
    s->body = parse_block_body({"endset"});
    return s;
  }

  std::unique_ptr<Stmt> parse_macro(int line) {
    auto s = make_stmt(Stmt::Kind::macro, line);
    s->text = expect_name();
    expect_op("(");
    while (!skip_op(")")) {
      if (!s->params.empty()) expect_op(",");
      std::string name = expect_name();
      ExprPtr def = skip_op("=") ? parse_expression() : nullptr;
      s->params.emplace_back(std::move(name), std::move(def));
    }
    expect(Type::block_end, "'%}'");
    s->body = parse_block_body({"endmacro"});
    return s;
  }

  // --- expressions -------------------------------------------------------------------------------
  static ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  static ExprPtr make_literal(Value v, int line) {
    auto e = make(Expr::Kind::literal, line);
    e->value = std::move(v);
    return e;
  }
  static ExprPtr make(Expr::Kind kind, int line, ExprPtr a, ExprPtr b = nullptr) {
    auto e = make(kind, line);
    e->args.push_back(std::move(a));
    if (b) e->args.push_back(std::move(b));
    return e;
  }

  // A bare tuple "a, b" is allowed where Jinja's parse_tuple is used ({{ }}, set, for ... in).
  ExprPtr parse_tuple(bool with_condexpr = true) {
    const int line = cur().line;
    ExprPtr first = with_condexpr ? parse_expression() : parse_or();
    if (!is_op(",")) return first;
    auto t = make(Expr::Kind::tuple, line, std::move(first));
    while (skip_op(",")) {
      if (cur().type == Type::block_end || cur().type == Type::var_end || is_name("if")) break;
      t->args.push_back(with_condexpr ? parse_expression() : parse_or());
    }
    return t;
  }

  ExprPtr parse_expression() {
    DepthGuard guard(*this);
    const int line = cur().line;
    ExprPtr e = parse_or();
    while (skip_name("if")) {
      ExprPtr cond = parse_or();
      ExprPtr other = skip_name("else") ? parse_expression() : nullptr;
      auto c = make(Expr::Kind::cond, line, std::move(e), std::move(cond));
      c->args.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const int line = next().line;
      e = make(Expr::Kind::or_, line, std::move(e), parse_and());
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const int line = next().line;
      e = make(Expr::Kind::and_, line, std::move(e), parse_not());
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      const int line = next().line;
      return make(Expr::Kind::not_, line, parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare();
  ExprPtr parse_binary(int level);
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_filters(ExprPtr e);
  void parse_call_args(Expr& call);
  ExprPtr parse_subscript(ExprPtr e);

  std::vector<Token> toks_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  int max_depth_;
};

inline ExprPtr Parser::parse_compare() {
  const int line = cur().line;
  ExprPtr first = parse_binary(0);
  ExprPtr e;
  while (true) {
    std::string op;
    if (cur().type == Type::op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                   cur().text == "<=" || cur().text == ">" || cur().text == ">="))
      op = next().text;
    else if (skip_name("in"))
      op = "in";
    else if (is_name("not") && peek().type == Type::name && peek().text == "in")
      op = (next(), next(), "not in");
    else
      break;
    if (!e) e = make(Expr::Kind::compare, line, std::move(first));
    e->ops.push_back(op);
    e->args.push_back(parse_binary(0));
  }
  return e ? std::move(e) : std::move(first);
}

// Levels (loosest first), as in Jinja: + -, then ~, then * / // %, then **.
inline ExprPtr Parser::parse_binary(int level) {
  static const std::vector<std::vector<std::string_view>> levels = {{"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
  if (level == static_cast<int>(levels.size())) return parse_unary(true);
  ExprPtr e = parse_binary(level + 1);
  while (cur().type == Type::op) {
    const auto& ops = levels[static_cast<std::size_t>(level)];
    if (std::find(ops.begin(), ops.end(), cur().text) == ops.end()) break;
    const Token op = next();
    if (op.text == "~") {
      if (e->kind != Expr::Kind::concat) e = make(Expr::Kind::concat, op.line, std::move(e));
      e->args.push_back(parse_binary(level + 1));
    } else {
      e = make(Expr::Kind::binary, op.line, std::move(e), parse_binary(level + 1));
      e->name = op.text;
    }
  }
  return e;
}

inline ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(*this);
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    const Token op = next();
    e = make(op.text == "-" ? Expr::Kind::neg : Expr::Kind::pos, op.line, parse_unary(false));
  } else {
    e = parse_primary();
  }
  e = parse_postfix(std::move(e));
  return with_filter ? parse_filters(std::move(e)) : std::move(e);
}

inline ExprPtr Parser::parse_primary() {
  const Token t = next();
  if (t.type == Type::name) {
    if (t.text == "true" || t.text == "True") return make_literal(true, t.line);
    if (t.text == "false" || t.text == "False") return make_literal(false, t.line);
    if (t.text == "none" || t.text == "None") return make_literal(None{}, t.line);
    auto e = make(Expr::Kind::name, t.line);
    e->name = t.text;
    return e;
  }
  if (t.type == Type::string) {
    std::string s = t.text;
    while (cur().type == Type::string) s += next().text;  // adjacent literals concatenate
    return make_literal(std::move(s), t.line);
  }
  if (t.type == Type::integer) {
    std::int64_t v = 0;
    auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (r.ec != std::errc()) throw SyntaxError(t.line, "integer literal out of range: " + t.text);
    return make_literal(v, t.line);
  }
  if (t.type == Type::floating) return make_literal(std::stod(t.text), t.line);
  if (t.type == Type::op && (t.text == "(" || t.text == "[" || t.text == "{")) {
    const std::string close = t.text == "(" ? ")" : t.text == "[" ? "]" : "}";
    auto e = make(t.text == "(" ? Expr::Kind::tuple : t.text == "[" ? Expr::Kind::list : Expr::Kind::dict, t.line);
    bool trailing_comma = false;
    if (!skip_op(close)) {
      while (true) {
        e->args.push_back(parse_expression());
        if (e->kind == Expr::Kind::dict) {
          expect_op(":");
          e->args.push_back(parse_expression());
        }
        if (skip_op(close)) break;
        expect_op(",");
        if ((trailing_comma = skip_op(close))) break;
      }
    }
    // "(x)" is grouping, "(x,)" and "()" are tuples.
    if (e->kind == Expr::Kind::tuple && e->args.size() == 1 && !trailing_comma) return std::move(e->args[0]);
    return e;
  }
  throw SyntaxError(t.line, "unexpected " + describe(t) + " in expression");
}

inline ExprPtr Parser::parse_postfix(ExprPtr e) {
  while (true) {
    if (is_op(".")) {
      const int line = next().line;
      if (cur().type == Type::integer) {  // x.0 is x[0]
        auto index = make_literal(static_cast<std::int64_t>(std::stoll(next().text)), line);
        e = make(Expr::Kind::item, line, std::move(e), std::move(index));
      } else {
        e = make(Expr::Kind::attr, line, std::move(e));
        e->name = expect_name();
      }
    } else if (is_op("[")) {
      e = parse_subscript(std::move(e));
    } else if (is_op("(")) {
      e = make(Expr::Kind::call, next().line, std::move(e));
      parse_call_args(*e);
    } else {
      return e;
    }
  }
}

inline ExprPtr Parser::parse_subscript(ExprPtr e) {
  const int line = next().line;  // '['
  ExprPtr parts[3];
  int colons = 0;
  while (!is_op("]")) {
    if (skip_op(":")) {
      if (++colons > 2) error("too many ':' in slice");
      continue;
    }
    if (parts[colons]) error("expected ':' or ']', got " + describe(cur()));
    parts[colons] = parse_expression();
    if (is_op(",")) error("unsupported construct: tuple subscript");
  }
  next();
  if (colons == 0) {
    if (!parts[0]) error("empty subscript");
    return make(Expr::Kind::item, line, std::move(e), std::move(parts[0]));
  }
  auto s = make(Expr::Kind::slice, line, std::move(e));
  for (auto& p : parts) s->args.push_back(std::move(p));
  return s;
}

// "(" already consumed: positional and keyword arguments up to ")".
inline void Parser::parse_call_args(Expr& call) {
  for (bool first = true; !skip_op(")"); first = false) {
    if (!first) {
      expect_op(",");
      if (skip_op(")")) return;
    }
    if (is_op("*") || is_op("**")) error("unsupported construct: *args / **kwargs in a call");
    if (cur().type == Type::name && peek().type == Type::op && peek().text == "=") {
      std::string name = next().text;
      next();
      call.kwargs.emplace_back(std::move(name), parse_expression());
    } else {
      if (!call.kwargs.empty()) error("positional argument after keyword argument");
      call.args.push_back(parse_expression());
    }
  }
}

inline ExprPtr Parser::parse_filters(ExprPtr e) {
  while (true) {
    if (is_op("|")) {
      const int line = next().line;
      std::string name = expect_name();
      while (skip_op(".")) name += "." + expect_name();
      if (!has_filter(name)) throw SyntaxError(line, "unsupported filter '" + name + "'");
      e = make(Expr::Kind::filter, line, std::move(e));
      e->name = std::move(name);
      if (skip_op("(")) parse_call_args(*e);
    } else if (is_name("is")) {
      const int line = next().line;
      const bool negated = skip_name("not");
      std::string name = expect_name();
      while (skip_op(".")) name += "." + expect_name();
      if (!has_test(name)) throw SyntaxError(line, "unsupported test '" + name + "'");
      e = make(Expr::Kind::test, line, std::move(e));
      e->name = std::move(name);
      e->negated = negated;
      if (skip_op("(")) {
        parse_call_args(*e);
      } else if ((cur().type == Type::name && !is_name("else") && !is_name("or") && !is_name("and")) ||
                 cur().type == Type::string || cur().type == Type::integer || cur().type == Type::floating ||
                 is_op("[") || is_op("{")) {
        if (is_name("is")) error("cannot chain tests with 'is'");
        e->args.push_back(parse_postfix(parse_primary()));  // `x is divisibleby 3`
      }
    } else if (is_op("(")) {
      e = make(Expr::Kind::call, next().line, std::move(e));
      parse_call_args(*e);
    } else {
      return e;
    }
  }
}

}  // namespace kylin::jinja::detail
