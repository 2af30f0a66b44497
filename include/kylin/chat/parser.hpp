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
    if (tag == "filter") return parse_filter_block(line);
    if (tag == "call") return parse_call_block(line);
    if (tag == "with") return parse_with(line);
    if (tag == "block") return parse_block(line);
    if (tag == "autoescape") return parse_autoescape(line);
    if (tag == "include" || tag == "import" || tag == "from" || tag == "extends")
      throw SyntaxError(line, "unsupported tag '" + tag + "': a chat template cannot load other templates");
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
    s->recursive = skip_name("recursive");
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
    if (s->targets.size() != 1) error("expected '='");  // a block set takes one name or ns.attr
    if (skip_op("|")) s->expr = parse_filter_chain(line);  // {% set x | upper %}...{% endset %}
    s->kind = Stmt::Kind::set_block;
    expect(Type::block_end, "'%}'");
    s->body = parse_block_body({"endset"});
    return s;
  }

  // (name, name=default, ...) of a macro or a call block's caller; "(" already consumed.
  void parse_params(Stmt& s) {
    while (!skip_op(")")) {
      if (!s.params.empty()) expect_op(",");
      std::string name = expect_name();
      ExprPtr def = skip_op("=") ? parse_expression() : nullptr;
      s.params.emplace_back(std::move(name), std::move(def));
    }
  }

  std::unique_ptr<Stmt> parse_macro(int line) {
    auto s = make_stmt(Stmt::Kind::macro, line);
    s->text = expect_name();
    expect_op("(");
    parse_params(*s);
    expect(Type::block_end, "'%}'");
    s->body = parse_block_body({"endmacro"});
    note_special_names(*s);
    return s;
  }

  std::unique_ptr<Stmt> parse_filter_block(int line);
  std::unique_ptr<Stmt> parse_call_block(int line);
  std::unique_ptr<Stmt> parse_with(int line);
  std::unique_ptr<Stmt> parse_block(int line);
  std::unique_ptr<Stmt> parse_autoescape(int line);
  ExprPtr parse_filter_chain(int line);
  void skip_end_name();
  static void note_special_names(Stmt& macro);

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

}  // namespace kylin::jinja::detail

#include "kylin/chat/parser_expr.hpp"
#include "kylin/chat/parser_tags.hpp"
