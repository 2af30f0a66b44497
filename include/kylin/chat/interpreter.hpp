// Evaluates a parsed template. Scoping follows Jinja: `for` bodies and macros get their own
// frame per iteration/call, `if` does not; namespace() objects are shared by reference.
// Iterations, macro depth, output size, the bytes of values built and the time are bounded, so
// hostile templates fail by name instead of hanging or exhausting memory.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "kylin/chat/ast.hpp"
#include "kylin/chat/builtins.hpp"

namespace kylin::jinja {

struct Limits {
  std::int64_t max_iterations = 1'000'000;  // loop iterations + macro calls in one render
  int max_call_depth = 64;                  // nested macro calls
  int max_nesting = 128;                    // nested blocks / sub-expressions in the source
  std::size_t max_output_bytes = kMaxStringBytes;
  // Total size of the values built in one render (strings, lists, dicts, copies made for loops),
  // counted as they are made, not freed: a bound on memory and on work. Real chat templates
  // build a few times the size of their messages.
  std::size_t max_memory_bytes = std::size_t{256} << 20;
  std::chrono::milliseconds max_time{10'000};  // CPU time of one render (its thread's)
};

namespace detail {

class Interpreter {
 public:
  Interpreter(const Limits& limits, DictData globals)
      : limits_(limits), budget_(limits.max_memory_bytes, limits.max_time) {
    frames_.push_back({std::move(globals.items), false});
  }

  void render(const Body& body, TaintedText& out) {
    BudgetScope scope(budget_);
    if (exec(body, out) != Flow::normal) fail("'break' or 'continue' outside a loop");
  }
  Budget& budget() { return budget_; }
  int line() const { return line_; }
  void define(std::string name, Value v) {
    for (auto& [k, old] : frames_[0].vars)
      if (k == name) {
        old = std::move(v);
        return;
      }
    frames_[0].vars.emplace_back(std::move(name), std::move(v));
  }
  // Values of `range()` share the iteration budget, so range(10**12) fails instead of allocating.
  void spend(std::int64_t n) {
    if (n > limits_.max_iterations - iterations_)
      fail("template exceeded " + std::to_string(limits_.max_iterations) + " loop iterations");
    iterations_ += n;
    budget_.tick();
  }

 private:
  enum class Flow { normal, break_, continue_ };
  struct Frame {
    std::vector<std::pair<std::string, Value>> vars;
    bool barrier;  // a macro frame: names not found here resolve in the globals only
  };

  Value lookup(const std::string& name) const {
    for (std::size_t i = frames_.size(); i-- > 0;) {
      for (const auto& [k, v] : frames_[i].vars)
        if (k == name) return v;
      if (frames_[i].barrier) i = 1;  // continue with frame 0
    }
    return Undefined{"'" + name + "' is undefined"};
  }
  void assign(const std::string& name, Value v) {
    for (auto& [k, old] : frames_.back().vars)
      if (k == name) {
        old = std::move(v);
        return;
      }
    frames_.back().vars.emplace_back(name, std::move(v));
  }
  void assign_targets(const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) return assign(targets[0], v);
    std::vector<Value> items = iterate(v);
    if (items.size() != targets.size())
      fail(items.size() > targets.size() ? "too many values to unpack" : "not enough values to unpack");
    for (std::size_t i = 0; i < targets.size(); ++i) assign(targets[i], items[i]);
  }
  void check_output(const TaintedText& out, std::size_t more) const {
    if (out.text.size() + more > limits_.max_output_bytes)
      fail("template output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  void append(TaintedText& out, const Value& v) const {
    check_output(out, v.is_string() ? v.as_string().size() : 0);
    out.append_value(v);
    check_output(out, 0);
  }
  // A value the interpreter just built, charged to the render's memory budget.
  Value built(Value v) {
    budget_.charge(value_bytes(v));
    return v;
  }

  Flow exec(const Body& body, TaintedText& out) {
    for (const auto& s : body)
      if (Flow f = exec(*s, out); f != Flow::normal) return f;
    return Flow::normal;
  }

  Flow exec(const Stmt& s, TaintedText& out) {
    line_ = s.line;
    switch (s.kind) {
      case Stmt::Kind::text:
        check_output(out, s.text.size());
        out.append_plain(s.text);
        return Flow::normal;
      case Stmt::Kind::output: {
        const Value v = eval(*s.expr);
        append(out, v);
        return Flow::normal;
      }
      case Stmt::Kind::if_:
        for (const auto& [cond, body] : s.branches)
          if (!cond || truthy(eval(*cond))) return exec(body, out);
        return Flow::normal;
      case Stmt::Kind::for_: return exec_for(s, out);
      case Stmt::Kind::set: exec_set(s); return Flow::normal;
      case Stmt::Kind::set_block: {
        TaintedText captured;
        if (exec(s.body, captured) != Flow::normal) fail("'break' or 'continue' inside a set block");
        assign(s.targets[0], built(std::move(captured).value()));
        return Flow::normal;
      }
      case Stmt::Kind::macro: assign(s.text, make_macro(s)); return Flow::normal;
      case Stmt::Kind::break_: return Flow::break_;
      case Stmt::Kind::continue_: return Flow::continue_;
      case Stmt::Kind::scope: return exec(s.body, out);
    }
    return Flow::normal;
  }

  void exec_set(const Stmt& s) {
    Value v = eval(*s.expr);
    line_ = s.line;
    if (s.attr.empty()) return assign_targets(s.targets, v);
    const Value target = lookup(s.targets[0]);
    if (!target.is_namespace() || target.as_namespace().read_only)
      fail("cannot assign attribute '" + s.attr + "' on '" + s.targets[0] + "': not a namespace() object");
    // A namespace inside a namespace could close a cycle (ns.self = ns) that printing would
    // follow forever and reference counting would never free; no chat template needs one.
    if (v.holds_namespace()) fail("cannot assign a namespace() object into namespace attribute '" + s.attr + "'");
    target.as_namespace().attrs.set(s.attr, std::move(v));
  }

  Flow exec_for(const Stmt& s, TaintedText& out);
  Value loop_object(const std::vector<Value>& items, std::size_t i) const;
  Value make_macro(const Stmt& s);
  Value call_macro(const Stmt& s, CallArgs& call);

  Value eval(const Expr& e);
  Value eval_call(const Expr& e, std::size_t first_arg);
  CallArgs eval_args(const Expr& e, std::size_t first_arg);
  Value eval_compare(const Expr& e);
  Value eval_display(const Expr& e);
  Value eval_slice(const Expr& e);
  Value eval_sign(const Expr& e);

  const Limits& limits_;
  Budget budget_;
  std::vector<Frame> frames_;
  std::int64_t iterations_ = 0;
  int call_depth_ = 0;
  int line_ = 0;
};

inline Interpreter::Flow Interpreter::exec_for(const Stmt& s, TaintedText& out) {
  std::vector<Value> items = iterate(eval(*s.expr));
  if (s.cond) {  // `for x in xs if cond`: loop.* then counts only the kept items, as in Jinja
    std::vector<Value> kept;
    for (auto& item : items) {
      spend(1);
      frames_.push_back({{}, false});
      assign_targets(s.targets, item);
      const bool keep = truthy(eval(*s.cond));
      frames_.pop_back();
      if (keep) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    frames_.push_back({{}, false});
    const Flow f = exec(s.else_body, out);
    frames_.pop_back();
    return f;
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    spend(1);
    frames_.push_back({{}, false});
    assign("loop", loop_object(items, i));
    assign_targets(s.targets, items[i]);
    const Flow f = exec(s.body, out);
    frames_.pop_back();
    if (f == Flow::break_) break;
  }
  return Flow::normal;
}

inline Value Interpreter::loop_object(const std::vector<Value>& items, std::size_t i) const {
  auto ns = std::make_shared<NamespaceData>();
  ns->read_only = true;
  const auto n = static_cast<std::int64_t>(items.size()), k = static_cast<std::int64_t>(i);
  DictData& a = ns->attrs;
  a.items.reserve(12);
  a.set("index0", k);
  a.set("index", k + 1);
  a.set("revindex0", n - k - 1);
  a.set("revindex", n - k);
  a.set("first", k == 0);
  a.set("last", k == n - 1);
  a.set("length", n);
  a.set("depth", 1);
  a.set("depth0", 0);
  a.set("previtem", k > 0 ? items[i - 1] : Value(Undefined{"there is no previous item"}));
  a.set("nextitem", k + 1 < n ? items[i + 1] : Value(Undefined{"there is no next item"}));
  a.set("cycle", Value("loop.cycle", [k](CallArgs& call) -> Value {
          if (call.args.empty()) fail("no items for cycling given");
          return call.args[static_cast<std::size_t>(k) % call.args.size()];
        }));
  return Value(std::move(ns));
}

inline Value Interpreter::make_macro(const Stmt& s) {
  return Value(s.text, [this, &s](CallArgs& call) { return call_macro(s, call); });
}

inline Value Interpreter::call_macro(const Stmt& s, CallArgs& call) {
  spend(1);
  if (call.args.size() > s.params.size())
    fail("macro '" + s.text + "' takes not more than " + std::to_string(s.params.size()) + " argument(s)");
  if (++call_depth_ > limits_.max_call_depth)
    fail("macro calls nested deeper than " + std::to_string(limits_.max_call_depth));
  const int saved_line = line_;
  frames_.push_back({{}, true});
  for (const auto& [k, v] : call.kwargs) {
    bool known = false;
    for (const auto& p : s.params) known |= p.first == k;
    if (!known) fail("macro '" + s.text + "' takes no keyword argument '" + k + "'");
  }
  for (std::size_t i = 0; i < s.params.size(); ++i) {
    const auto& [name, dflt] = s.params[i];
    const Value* given = i < call.args.size() ? &call.args[i] : nullptr;
    for (const auto& [k, v] : call.kwargs)
      if (k == name) given = &v;
    assign(name, given ? *given : dflt ? eval(*dflt) : Value(Undefined{"parameter '" + name + "' was not provided"}));
  }
  TaintedText out;
  if (exec(s.body, out) != Flow::normal) fail("'break' or 'continue' outside a loop");
  frames_.pop_back();
  --call_depth_;
  line_ = saved_line;
  return built(std::move(out).value());
}

}  // namespace detail
}  // namespace kylin::jinja

#include "kylin/chat/eval.hpp"
