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
    frames_.push_back({std::move(globals.items), false, 0});
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
    bool barrier = false;  // a macro frame: names not found here resolve from frame `parent` down
    std::size_t parent = 0;  // the globals for a macro, the {% call %} site's frame for caller()
  };

  Value lookup(const std::string& name) const {
    for (std::size_t i = frames_.size(); i-- > 0;) {
      for (const auto& [k, v] : frames_[i].vars)
        if (k == name) return v;
      if (frames_[i].barrier) i = frames_[i].parent + 1;  // the loop's i-- lands on parent
    }
    return Undefined{"'" + name + "' is undefined"};
  }
  // A body in a frame of its own: for, with, block, generation, and filter chains.
  Flow exec_scoped(const Body& body, TaintedText& out, std::vector<std::pair<std::string, Value>> vars = {}) {
    frames_.push_back({std::move(vars)});
    const Flow f = exec(body, out);
    frames_.pop_back();
    return f;
  }
  // `chain` (a filter chain over kFilterSubject) applied to `subject`.
  Value apply_filters(const Expr& chain, Value subject) {
    frames_.push_back({{{std::string(kFilterSubject), std::move(subject)}}});
    Value v = eval(chain);
    frames_.pop_back();
    return v;
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
        Value v = capture(s);
        if (s.expr) v = built(apply_filters(*s.expr, std::move(v)));
        if (s.attr.empty()) assign(s.targets[0], std::move(v));
        else set_attribute(s, std::move(v));
        return Flow::normal;
      }
      case Stmt::Kind::filter_block: {
        Value v = capture(s);
        append(out, built(apply_filters(*s.expr, std::move(v))));
        return Flow::normal;
      }
      case Stmt::Kind::macro: assign(s.text, make_macro(s)); return Flow::normal;
      case Stmt::Kind::break_: return Flow::break_;
      case Stmt::Kind::continue_: return Flow::continue_;
      case Stmt::Kind::scope: return exec_scoped(s.body, out);
      case Stmt::Kind::call_block: exec_call_block(s, out); return Flow::normal;
      case Stmt::Kind::with_: {
        std::vector<std::pair<std::string, Value>> vars;
        for (const auto& [name, e] : s.params) vars.emplace_back(name, eval(*e));
        return exec_scoped(s.body, out, std::move(vars));
      }
    }
    return Flow::normal;
  }

  // The rendered body of a set or filter block, in its own frame, as Jinja renders them.
  Value capture(const Stmt& s) {
    TaintedText captured;
    if (exec_scoped(s.body, captured) != Flow::normal) fail("'break' or 'continue' inside a set or filter block");
    line_ = s.line;
    return built(std::move(captured).value());
  }

  void exec_set(const Stmt& s) {
    Value v = eval(*s.expr);
    line_ = s.line;
    if (s.attr.empty()) return assign_targets(s.targets, v);
    set_attribute(s, std::move(v));
  }

  // {% set ns.attr = v %} and its block form.
  void set_attribute(const Stmt& s, Value v) {
    const Value target = lookup(s.targets[0]);
    if (!target.is_namespace() || target.as_namespace().read_only)
      fail("cannot assign attribute '" + s.attr + "' on '" + s.targets[0] + "': not a namespace() object");
    // A namespace inside a namespace could close a cycle (ns.self = ns) that printing would
    // follow forever and reference counting would never free; no chat template needs one.
    if (v.holds_namespace()) fail("cannot assign a namespace() object into namespace attribute '" + s.attr + "'");
    target.as_namespace().attrs.set(s.attr, std::move(v));
  }

  struct LoopState;
  Flow exec_for(const Stmt& s, TaintedText& out);
  Flow run_loop(const Stmt& s, const Value& iterable, int depth, TaintedText& out);
  Value loop_object(const Stmt& s, const std::vector<Value>& items, std::size_t i, int depth,
                    const std::shared_ptr<LoopState>& state);
  Value make_macro(const Stmt& s);
  Value call_macro(const Stmt& s, CallArgs& call, std::size_t parent);
  void exec_call_block(const Stmt& s, TaintedText& out);
  static Value invoke(const Value& callee, CallArgs& call);

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

}  // namespace detail
}  // namespace kylin::jinja

#include "kylin/chat/eval.hpp"
#include "kylin/chat/interpreter_blocks.hpp"
