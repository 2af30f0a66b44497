// The syntax tree of a parsed Jinja template: expressions and statements, each with its line.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kylin/chat/value.hpp"

namespace kylin::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,  // value
    name,     // name
    list,     // args: items
    tuple,    // args: items
    dict,     // args: key, value, key, value, ...
    attr,     // args[0].name
    item,     // args[0][args[1]]
    slice,    // args[0][args[1]:args[2]:args[3]], missing parts are null
    call,     // args[0](args[1..], kwargs)
    filter,   // args[0] | name(args[1..], kwargs)
    test,     // args[0] is [not] name(args[1..])
    not_,     // not args[0]
    neg,      // -args[0]
    pos,      // +args[0]
    binary,   // args[0] name args[1], name one of + - * / // % **
    compare,  // args[0] ops[0] args[1] ops[1] args[2] ... (chained, like Python)
    and_,
    or_,
    concat,   // args[0] ~ args[1] ~ ...
    cond,     // args[0] if args[1] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 0;
  std::string name;
  Value value;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    text,       // text
    output,     // {{ expr }}
    if_,        // branches (an else branch has a null condition)
    for_,       // for targets in expr [if cond] body [else else_body]
    set,        // set targets = expr, or set targets[0].attr = expr when attr is non-empty
    set_block,  // set targets[0][.attr] [| filters in expr] %}body{% endset
    macro,      // macro text(params) body
    break_,
    continue_,
    scope,         // body in its own frame: {% generation %} (transformers' assistant-mask marker),
                   // {% block %} (no template inheritance here), {% autoescape false %}
    filter_block,  // expr (a filter chain applied to kFilterSubject) over the rendered body
    call_block,    // expr: a call; params: the caller's parameters; body: caller()
    with_,         // params: name = value assignments; body in its own frame
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::string> targets;
  std::string attr;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;
  bool recursive = false;  // for_: `recursive` loop, whose loop(...) renders the body again
  // macro: the special names its body uses (Jinja passes extra arguments only to those)
  bool uses_caller = false, uses_varargs = false, uses_kwargs = false;
};

// The name a {% filter %} chain or a filtered {% set %} block applies its filters to (not an
// identifier, so no template can spell it).
inline constexpr std::string_view kFilterSubject = "\x1f";

}  // namespace kylin::jinja
