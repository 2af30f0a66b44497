// The Jinja tags beyond if/for/set/macro (parser.hpp): {% filter %}, {% call %}, {% with %},
// {% block %} and {% autoescape false %}, after jinja2/parser.py; filter chains for them and for
// filtered {% set %} blocks; the special names (caller, varargs, kwargs) a macro body uses.
#pragma once

#include <string>

#include "kylin/chat/parser.hpp"

namespace kylin::jinja::detail {

// `name(args) | name2 ...` applied to kFilterSubject (jinja2's parse_filter(None, start_inline=True)).
inline ExprPtr Parser::parse_filter_chain(int line) {
  auto e = make(Expr::Kind::name, line);
  e->name = std::string(kFilterSubject);
  do {
    const int at = cur().line;
    std::string name = expect_name();
    while (skip_op(".")) name.append(".").append(expect_name());
    if (!has_filter(name)) throw SyntaxError(at, "unsupported filter '" + name + "'");
    e = make(Expr::Kind::filter, at, std::move(e));
    e->name = std::move(name);
    if (skip_op("(")) parse_call_args(*e);
  } while (skip_op("|"));
  return e;
}

// An end tag's optional name ({% endblock content %}).
inline void Parser::skip_end_name() {
  if (cur().type == Type::name) next();
  expect(Type::block_end, "'%}'");
}

inline std::unique_ptr<Stmt> Parser::parse_filter_block(int line) {
  auto s = make_stmt(Stmt::Kind::filter_block, line);
  s->expr = parse_filter_chain(line);
  expect(Type::block_end, "'%}'");
  s->body = parse_block_body({"endfilter"});
  return s;
}

// {% call(params) macro(args) %}body{% endcall %}: the macro gets `caller`, a macro of the body.
inline std::unique_ptr<Stmt> Parser::parse_call_block(int line) {
  auto s = make_stmt(Stmt::Kind::call_block, line);
  if (skip_op("(")) parse_params(*s);
  s->expr = parse_expression();
  if (s->expr->kind != Expr::Kind::call) throw SyntaxError(line, "expected a call after 'call'");
  expect(Type::block_end, "'%}'");
  s->body = parse_block_body({"endcall"});
  return s;
}

// {% with a = 1, b = x %}: the values are evaluated before the new scope is entered.
inline std::unique_ptr<Stmt> Parser::parse_with(int line) {
  auto s = make_stmt(Stmt::Kind::with_, line);
  while (cur().type != Type::block_end) {
    if (!s->params.empty()) expect_op(",");
    std::string name = expect_name();
    expect_op("=");
    s->params.emplace_back(std::move(name), parse_expression());
  }
  expect(Type::block_end, "'%}'");
  s->body = parse_block_body({"endwith"});
  return s;
}

// Without `extends` a block just renders where it stands (in its own scope).
inline std::unique_ptr<Stmt> Parser::parse_block(int line) {
  auto s = make_stmt(Stmt::Kind::scope, line);
  s->text = expect_name();
  while (skip_name("scoped") || skip_name("required")) {
  }
  expect(Type::block_end, "'%}'");
  std::string ended;
  s->body = parse_body({"endblock"}, ended);
  skip_end_name();
  return s;
}

// Autoescaping stays off (transformers' environment); turning it on is refused by name.
inline std::unique_ptr<Stmt> Parser::parse_autoescape(int line) {
  ExprPtr e = parse_expression();
  if (e->kind != Expr::Kind::literal || !e->value.is_bool())
    throw SyntaxError(line, "unsupported construct: autoescape with a value other than true or false");
  if (e->value.as_bool()) throw SyntaxError(line, "unsupported construct: autoescape true (kylin renders with autoescaping off)");
  auto s = make_stmt(Stmt::Kind::scope, line);
  expect(Type::block_end, "'%}'");
  s->body = parse_block_body({"endautoescape"});
  return s;
}

namespace scan {

inline void names(const Expr* e, Stmt& macro);

inline void names(const Body& body, Stmt& macro) {
  for (const auto& st : body) {
    names(st->expr.get(), macro);
    names(st->cond.get(), macro);
    for (const auto& [cond, b] : st->branches) names(cond.get(), macro), names(b, macro);
    for (const auto& [n, def] : st->params) names(def.get(), macro);
    names(st->body, macro);
    names(st->else_body, macro);
  }
}

inline void names(const Expr* e, Stmt& macro) {
  if (!e) return;
  if (e->kind == Expr::Kind::name) {
    macro.uses_caller |= e->name == "caller";
    macro.uses_varargs |= e->name == "varargs";
    macro.uses_kwargs |= e->name == "kwargs";
  }
  for (const auto& a : e->args) names(a.get(), macro);
  for (const auto& [k, v] : e->kwargs) names(v.get(), macro);
}

}  // namespace scan

// Jinja gives a macro `caller`, `varargs` and `kwargs` only when its body names them; extra
// arguments to any other macro are errors.
inline void Parser::note_special_names(Stmt& macro) { scan::names(macro.body, macro); }

}  // namespace kylin::jinja::detail
