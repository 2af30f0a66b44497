// Expression evaluation for the Jinja interpreter (interpreter.hpp).
#pragma once

#include <string>

#include "kylin/chat/interpreter.hpp"

namespace kylin::jinja::detail {

inline CallArgs Interpreter::eval_args(const Expr& e, std::size_t first_arg) {
  CallArgs call;
  for (std::size_t i = first_arg; i < e.args.size(); ++i) call.args.push_back(eval(*e.args[i]));
  for (const auto& [k, v] : e.kwargs) {
    Value x = eval(*v);
    if (k == "*") {  // f(*xs): the items as positional arguments
      for (Value& item : iterate(x)) call.args.push_back(std::move(item));
    } else if (k == "**") {  // f(**d): the mapping's items as keyword arguments
      require_defined(x);
      if (!x.is_dict()) fail("argument after ** must be a mapping, not " + std::string(x.type_name()));
      for (const auto& [name, item] : x.as_dict().items) call.kwargs.emplace_back(name, item);
    } else {
      call.kwargs.emplace_back(k, std::move(x));
    }
  }
  return call;
}

inline Value Interpreter::eval_call(const Expr& e, std::size_t first_arg) {
  const Value callee = eval(*e.args[0]);
  CallArgs call = eval_args(e, first_arg);
  line_ = e.line;
  return invoke(callee, call);
}

inline Value Interpreter::eval_compare(const Expr& e) {
  Value left = eval(*e.args[0]);
  for (std::size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1]);
    line_ = e.line;
    if (!compare(e.ops[i], left, right)) return false;
    left = std::move(right);
  }
  return true;
}

// [a, b], (a, b) and {'k': v} displays.
inline Value Interpreter::eval_display(const Expr& e) {
  if (e.kind != Expr::Kind::dict) {
    std::vector<Value> items;
    for (const auto& a : e.args) items.push_back(eval(*a));
    return built(Value(std::move(items), e.kind == Expr::Kind::tuple));
  }
  DictData d;
  for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) {
    const Value key = eval(*e.args[i]);
    if (!key.is_string()) fail("unsupported construct: dict literal with a non-string key");
    d.tainted_keys |= !key.taint().empty();
    d.set(key.as_string(), eval(*e.args[i + 1]));
  }
  return built(Value(std::move(d)));
}

inline Value Interpreter::eval_slice(const Expr& e) {
  const Value obj = eval(*e.args[0]);
  Value part[3] = {None{}, None{}, None{}};
  for (std::size_t i = 0; i < 3; ++i)
    if (e.args[i + 1]) part[i] = eval(*e.args[i + 1]);
  line_ = e.line;
  return built(slice(obj, part[0], part[1], part[2]));
}

inline Value Interpreter::eval_sign(const Expr& e) {
  const bool neg = e.kind == Expr::Kind::neg;
  const Value v = eval(*e.args[0]);
  line_ = e.line;
  require_defined(v);
  if (!v.is_number())
    fail("bad operand type for unary " + std::string(neg ? "-" : "+") + ": '" + std::string(v.type_name()) + "'");
  if (!neg) return v.is_bool() ? Value(v.as_int()) : v;
  return v.is_float() ? Value(-v.as_double()) : binary("-", std::int64_t{0}, v);
}

inline Value Interpreter::eval(const Expr& e) {
  using K = Expr::Kind;
  line_ = e.line;
  switch (e.kind) {
    case K::literal: return e.value;
    case K::name: return lookup(e.name);
    case K::list:
    case K::tuple:
    case K::dict: return eval_display(e);
    case K::attr: {
      const Value obj = eval(*e.args[0]);
      line_ = e.line;
      return get_attr(obj, e.name);
    }
    case K::item: {
      const Value obj = eval(*e.args[0]), key = eval(*e.args[1]);
      line_ = e.line;
      return get_item(obj, key);
    }
    case K::slice: return eval_slice(e);
    case K::call: return built(eval_call(e, 1));
    case K::filter: {
      const Value subject = eval(*e.args[0]);
      CallArgs call = eval_args(e, 1);
      line_ = e.line;
      return built(run_filter(e.name, subject, call));
    }
    case K::test: {
      const Value subject = eval(*e.args[0]);
      CallArgs call = eval_args(e, 1);
      line_ = e.line;
      return run_test(e.name, subject, call) != e.negated;
    }
    case K::not_: return !truthy(eval(*e.args[0]));
    case K::neg:
    case K::pos: return eval_sign(e);
    case K::binary: {
      const Value a = eval(*e.args[0]), b = eval(*e.args[1]);
      line_ = e.line;
      return built(binary(e.name, a, b));
    }
    case K::compare: return eval_compare(e);
    case K::and_: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    case K::or_: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    case K::concat: {
      TaintedText out;
      for (const auto& a : e.args) {
        out.append_value(eval(*a));
        if (out.text.size() > kMaxStringBytes) fail("string result too large");
      }
      return built(std::move(out).value());
    }
    case K::cond: {
      if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
      return e.args[2] ? eval(*e.args[2]) : Value(Undefined{"the inline if-expression evaluated to false and no else section was defined"});
    }
  }
  return Undefined{};
}

}  // namespace kylin::jinja::detail
