// The Interpreter's loops and calls (interpreter.hpp): for loops with the `loop` object
// (recursive loops, loop.changed, loop.cycle), macros with Jinja's argument rules (varargs,
// kwargs and caller only for bodies that name them), and {% call %} blocks.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kylin/chat/interpreter.hpp"

namespace kylin::jinja::detail {

// What one loop's iterations share: the last arguments of loop.changed().
struct Interpreter::LoopState {
  std::optional<Value> last_changed;
};

inline Value Interpreter::invoke(const Value& callee, CallArgs& call) {
  require_defined(callee);
  if (callee.is_function()) return callee.as_function().fn(call);
  if (callee.is_namespace() && callee.as_namespace().call) return callee.as_namespace().call(call);
  fail("'" + std::string(callee.type_name()) + "' object is not callable");
}

inline Interpreter::Flow Interpreter::exec_for(const Stmt& s, TaintedText& out) { return run_loop(s, eval(*s.expr), 0, out); }

inline Interpreter::Flow Interpreter::run_loop(const Stmt& s, const Value& iterable, int depth, TaintedText& out) {
  std::vector<Value> items = iterate(iterable);
  if (s.cond) {  // `for x in xs if cond`: loop.* then counts only the kept items, as in Jinja
    std::vector<Value> kept;
    for (auto& item : items) {
      spend(1);
      frames_.push_back({});
      assign_targets(s.targets, item);
      const bool keep = truthy(eval(*s.cond));
      frames_.pop_back();
      if (keep) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec_scoped(s.else_body, out);
  auto state = std::make_shared<LoopState>();
  for (std::size_t i = 0; i < items.size(); ++i) {
    spend(1);
    frames_.push_back({});
    assign("loop", loop_object(s, items, i, depth, state));
    assign_targets(s.targets, items[i]);
    const Flow f = exec(s.body, out);
    frames_.pop_back();
    if (f == Flow::break_) break;
  }
  return Flow::normal;
}

inline Value Interpreter::loop_object(const Stmt& s, const std::vector<Value>& items, std::size_t i, int depth,
                                      const std::shared_ptr<LoopState>& state) {
  auto ns = std::make_shared<NamespaceData>();
  ns->read_only = true;
  const auto n = static_cast<std::int64_t>(items.size()), k = static_cast<std::int64_t>(i);
  DictData& a = ns->attrs;
  a.items.reserve(13);
  a.set("index0", k);
  a.set("index", k + 1);
  a.set("revindex0", n - k - 1);
  a.set("revindex", n - k);
  a.set("first", k == 0);
  a.set("last", k == n - 1);
  a.set("length", n);
  a.set("depth", depth + 1);
  a.set("depth0", depth);
  a.set("previtem", k > 0 ? items[i - 1] : Value(Undefined{"there is no previous item"}));
  a.set("nextitem", k + 1 < n ? items[i + 1] : Value(Undefined{"there is no next item"}));
  a.set("cycle", Value("loop.cycle", [k](CallArgs& call) -> Value {
          if (call.args.empty()) fail("no items for cycling given");
          return call.args[static_cast<std::size_t>(k) % call.args.size()];
        }));
  a.set("changed", Value("loop.changed", [state](CallArgs& call) -> Value {
          Value now(call.args, true);
          // kept across iterations: a loop or namespace object kept there could close a cycle
          if (now.holds_namespace()) fail("loop.changed() of a namespace or loop object is not supported");
          if (state->last_changed && equal(*state->last_changed, now)) return false;
          state->last_changed = std::move(now);
          return true;
        }));
  // loop(items) in a recursive loop renders the body over `items` one level deeper.
  ns->call = [this, &s, depth](CallArgs& call) -> Value {
    if (!s.recursive) fail("The loop must have the 'recursive' marker to be called recursively.");
    if (call.args.size() != 1 || !call.kwargs.empty()) fail("loop() takes exactly one argument");
    if (++call_depth_ > limits_.max_call_depth)
      fail("recursive loop calls nested deeper than " + std::to_string(limits_.max_call_depth));
    TaintedText out;
    const int saved_line = line_;
    (void)run_loop(s, call.args[0], depth + 1, out);
    line_ = saved_line;
    --call_depth_;
    return built(std::move(out).value());
  };
  return Value(std::move(ns));
}

inline Value Interpreter::make_macro(const Stmt& s) {
  return Value(s.text, [this, &s](CallArgs& call) { return call_macro(s, call, 0); });
}

// A macro (or a call block's caller) called with `call`, its names resolved in its own frame and
// then from frame `parent` down. Argument rules follow jinja2.runtime.Macro.
inline Value Interpreter::call_macro(const Stmt& s, CallArgs& call, std::size_t parent) {
  spend(1);
  const std::string name = s.kind == Stmt::Kind::macro ? s.text : "caller";
  const std::size_t n = s.params.size();
  if (parent >= frames_.size()) fail("caller() called outside its {% call %} block");
  if (call.args.size() > n && !s.uses_varargs)
    fail("macro '" + name + "' takes not more than " + std::to_string(n) + " argument(s)");
  if (++call_depth_ > limits_.max_call_depth) fail("macro calls nested deeper than " + std::to_string(limits_.max_call_depth));
  std::vector<const Value*> given(n, nullptr);
  for (std::size_t i = 0; i < std::min(n, call.args.size()); ++i) given[i] = &call.args[i];
  DictData extra;
  Value caller = Undefined{"No caller defined"};
  for (const auto& [k, v] : call.kwargs) {
    std::size_t p = 0;
    while (p < n && s.params[p].first != k) ++p;
    if (p < n && p >= call.args.size()) given[p] = &v;
    else if (k == "caller" && s.uses_caller) caller = v;
    else if (s.uses_kwargs) extra.set(k, v);
    else fail("macro '" + name + "' takes no keyword argument '" + k + "'");
  }
  const int saved_line = line_;
  frames_.push_back({{}, true, parent});
  for (std::size_t i = 0; i < n; ++i) {
    const auto& [param, dflt] = s.params[i];
    assign(param, given[i] ? *given[i] : dflt ? eval(*dflt) : Value(Undefined{"parameter '" + param + "' was not provided"}));
  }
  if (s.uses_varargs)
    assign("varargs", Value(std::vector<Value>(call.args.begin() + static_cast<std::ptrdiff_t>(std::min(n, call.args.size())), call.args.end()), true));
  if (s.uses_kwargs) assign("kwargs", Value(std::move(extra)));
  if (s.uses_caller) assign("caller", caller);
  TaintedText out;
  if (exec(s.body, out) != Flow::normal) fail("'break' or 'continue' outside a loop");
  frames_.pop_back();
  --call_depth_;
  line_ = saved_line;
  return built(std::move(out).value());
}

// {% call(params) m(args) %}body{% endcall %}: m(args, caller=<the body as a macro>), printed.
inline void Interpreter::exec_call_block(const Stmt& s, TaintedText& out) {
  const Expr& call = *s.expr;
  const Value callee = eval(*call.args[0]);
  CallArgs args = eval_args(call, 1);
  const std::size_t parent = frames_.size() - 1;
  args.kwargs.emplace_back("caller", Value("caller", [this, &s, parent](CallArgs& c) { return call_macro(s, c, parent); }));
  line_ = s.line;
  append(out, built(invoke(callee, args)));
}

}  // namespace kylin::jinja::detail
