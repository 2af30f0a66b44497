// Expression grammar of the Jinja parser (parser.hpp): comparisons, binary operators, unary,
// primaries, postfix (attributes, subscripts, calls), filters and tests.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string>

#include "kylin/chat/parser.hpp"

namespace kylin::jinja::detail {

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
  if (t.type == Type::floating) return make_literal(std::strtod(t.text.c_str(), nullptr), t.line);  // 1e999: inf
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
        const Token digits = next();
        std::int64_t i = 0;
        if (std::from_chars(digits.text.data(), digits.text.data() + digits.text.size(), i).ec != std::errc())
          throw SyntaxError(line, "integer literal out of range: " + digits.text);
        auto index = make_literal(i, line);
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
    if (is_op("*") || is_op("**")) {  // f(*args, **kwargs): kept as the keywords "*" and "**"
      const std::string star = next().text;
      call.kwargs.emplace_back(star, parse_expression());
      continue;
    }
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
      while (skip_op(".")) name.append(".").append(expect_name());  // not "." + str: GCC 12 -Wrestrict false positive
      if (!has_filter(name)) throw SyntaxError(line, "unsupported filter '" + name + "'");
      e = make(Expr::Kind::filter, line, std::move(e));
      e->name = std::move(name);
      if (skip_op("(")) parse_call_args(*e);
    } else if (is_name("is")) {
      const int line = next().line;
      const bool negated = skip_name("not");
      std::string name = expect_name();
      while (skip_op(".")) name.append(".").append(expect_name());  // not "." + str: GCC 12 -Wrestrict false positive
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
