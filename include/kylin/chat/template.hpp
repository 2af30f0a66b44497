// jinja::Template: a Jinja template parsed once, rendered many times with transformers' chat
// template environment (trim_blocks, lstrip_blocks, loop controls, raise_exception, ...).
// Every failure is a kylin::Error (category chat_template) naming the template line.
#pragma once

// Supported (checked against Python jinja2 by tests/data/reference/chat-jinja-unit.jsonl and the
// Hub templates of chat-hub-templates.jsonl):
//   tags      if/elif/else, for (tuple targets, `if` filter, else, recursive, loop.* with cycle and
//             changed), set (names, tuples, ns.attr, block set, filtered block set), macro
//             (defaults, keyword args, varargs/kwargs/caller), call (with caller args), filter,
//             with, block (rendered in place), autoescape false, break, continue, raw, generation
//             (rendered as its body); comments; -/+ whitespace control.
//   exprs     literals, lists, tuples, dicts, and/or/not, chained comparisons, in/not in, is [not],
//             + - * / // % ** ~, unary -/+, x.attr, x[i], slices, calls with *args/**kwargs,
//             inline if/else; `str % args` printf-style formatting.
//   filters   jinja2's builtin list (filters() in filters.hpp) but wordwrap and urlize;
//   tests     jinja2's builtin list (tests() in builtins.hpp);
//   methods   str (str_methods.hpp: the ones templates use, format included), list/tuple count/index,
//             dict items/keys/values/get/copy; the sandbox's refusals (mutating methods, dunder
//             attributes) as its SecurityError text.
//   globals   raise_exception, namespace, range, dict, cycler, joiner, strftime_now.
// Known differences from Python jinja2: case mapping is ASCII-only (isalpha/isnumeric use Unicode
// tables); select/reject/map/batch/slice/unique/items() give lists and range() a list (Python prints
// a generator, dict_items or range object if they are output unconverted); integers are 64-bit
// (overflow is an error); dict literal keys must be strings; lists and dicts nest at most 2048
// deep; a namespace() cannot be stored inside a namespace; pprint only for values that fit on one
// line; a Markup's methods do not escape their arguments. Each render is bounded (Limits): loop
// iterations, output bytes, bytes of values built, CPU time. Rejected by name: include/extends/
// import/from (no loader), autoescape true, do (an extension transformers does not load),
// wordwrap, urlize, lipsum.

#include <ctime>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "kylin/chat/interpreter.hpp"
#include "kylin/chat/parser.hpp"
#include "kylin/core/error.hpp"

namespace kylin::jinja {

namespace detail {

inline Value make_namespace(CallArgs& call) {
  auto ns = std::make_shared<NamespaceData>();
  for (const auto& a : call.args) {
    if (!a.is_dict()) fail("namespace() positional arguments must be mappings");
    for (const auto& [k, v] : a.as_dict().items) ns->attrs.set(k, v);
    ns->attrs.tainted_keys |= a.as_dict().tainted_keys;
  }
  for (const auto& [k, v] : call.kwargs) ns->attrs.set(k, v);
  return Value(std::move(ns));
}

// Python's len(range(start, stop, step)), computed without overflow (the span of two int64s
// needs 65 bits).
inline std::uint64_t range_length(std::int64_t start, std::int64_t stop, std::int64_t step) {
  if (step > 0 ? start >= stop : start <= stop) return 0;
  const std::uint64_t span = step > 0 ? static_cast<std::uint64_t>(stop) - static_cast<std::uint64_t>(start)
                                      : static_cast<std::uint64_t>(start) - static_cast<std::uint64_t>(stop);
  const std::uint64_t by = step > 0 ? static_cast<std::uint64_t>(step) : std::uint64_t{0} - static_cast<std::uint64_t>(step);
  return (span - 1) / by + 1;
}

inline Value make_range(Interpreter& interp, CallArgs& call) {
  if (call.args.empty() || call.args.size() > 3 || !call.kwargs.empty()) fail("range() takes 1 to 3 positional arguments");
  std::int64_t v[3] = {0, 0, 1};
  for (std::size_t i = 0; i < call.args.size(); ++i) v[call.args.size() == 1 ? 1 : i] = to_index(call.args[i]);
  if (v[2] == 0) fail("range() arg 3 must not be zero");
  // Values of range() share the iteration budget; counted first, so range(-2**63, 2**63-1) fails
  // before it allocates, and x += step below never passes the last element (no overflow).
  const std::uint64_t n = range_length(v[0], v[1], v[2]);
  if (n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    fail("range() of more than 2^63 items");
  interp.spend(static_cast<std::int64_t>(n));
  std::vector<Value> items;
  items.reserve(static_cast<std::size_t>(n));
  std::int64_t x = v[0];
  for (std::uint64_t i = 0; i < n; ++i, x = i < n ? x + v[2] : x) items.emplace_back(x);
  return Value(std::move(items));
}

// dict(mapping_or_pairs, **kwargs), as Python's dict().
inline Value make_dict(CallArgs& call) {
  if (call.args.size() > 1) fail("dict expected at most 1 argument, got " + std::to_string(call.args.size()));
  DictData d;
  if (!call.args.empty()) {
    const Value& src = call.args[0];
    if (src.is_dict()) {
      d = src.as_dict();
    } else {
      std::size_t index = 0;
      for (const Value& pair : iterate(src)) {
        const std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2)
          fail("dictionary update sequence element #" + std::to_string(index) + " has length " + std::to_string(kv.size()) + "; 2 is required");
        ++index;
        if (!kv[0].is_string()) fail("unsupported construct: dict() with a non-string key");
        d.tainted_keys |= !kv[0].taint().empty();
        d.set(kv[0].as_string(), kv[1]);
      }
    }
  }
  for (auto& [k, v] : call.kwargs) d.set(k, v);
  return Value(std::move(d));
}

// jinja2.utils.Cycler: next() returns the current item and advances; reset(); current.
inline Value make_cycler(CallArgs& call) {
  if (call.args.empty()) fail("at least one item has to be provided");
  auto ns = std::make_shared<NamespaceData>();
  ns->read_only = true;
  const std::vector<Value> items = call.args;
  auto pos = std::make_shared<std::size_t>(0);
  std::weak_ptr<NamespaceData> self = ns;
  const bool holds = Value(items).holds_namespace();  // see Interpreter::exec_set: no cycles
  ns->attrs.set("items", Value(items, true));
  ns->attrs.set("current", items[0]);
  ns->attrs.set("next", Value("cycler.next", [items, pos, self](CallArgs&) -> Value {
                  const Value now = items[*pos];
                  *pos = (*pos + 1) % items.size();
                  if (auto ns = self.lock()) ns->attrs.set("current", items[*pos]);
                  return now;
                }, holds));
  ns->attrs.set("reset", Value("cycler.reset", [items, pos, self](CallArgs&) -> Value {
                  *pos = 0;
                  if (auto ns = self.lock()) ns->attrs.set("current", items[0]);
                  return None{};
                }, holds));
  return Value(std::move(ns));
}

// jinja2.utils.Joiner: "" the first time it is called, then the separator.
inline Value make_joiner(CallArgs& call) {
  Args a{call, "joiner"};
  const Value sep = a.get(0, "sep") ? str_arg(a, 0, "sep") : Value(", ");
  auto used = std::make_shared<bool>(false);
  return Value("joiner", [sep, used](CallArgs&) -> Value {
    if (!*used) return *used = true, Value("");
    return sep;
  });
}

inline Value strftime_now(CallArgs& call) {
  Args a{call, "strftime_now"};
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[256];
  const std::size_t n = std::strftime(buf, sizeof buf, a.str(0, "format").c_str(), &local);
  return std::string(buf, n);
}

}  // namespace detail

class Template {
 public:
  // `name` prefixes error contexts: "<name> line 12".
  explicit Template(std::string source, std::string name = "chat template", Limits limits = {})
      : name_(std::move(name)), limits_(limits) {
    try {
      body_ = detail::Parser(detail::Lexer(std::move(source)).run(), limits_.max_nesting).parse_template();
    } catch (const SyntaxError& e) {
      throw Error(ErrorCategory::chat_template, context(e.line), e.what());
    } catch (const EvalError& e) {  // e.g. a bad escape found while lexing
      throw Error(ErrorCategory::chat_template, name_, e.what());
    }
  }

  // Renders with `variables` (template-visible names) on top of the builtin globals.
  std::string render(const DictData& variables) const { return render_marked(variables).text; }

  // render() plus the byte ranges of the output that came from user data: strings marked as
  // tainted in `variables` (see from_json), followed through the template's string operations.
  TaintedText render_marked(const DictData& variables) const {
    DictData globals;
    globals.set("namespace", Value("namespace", detail::make_namespace));
    globals.set("dict", Value("dict", detail::make_dict));
    globals.set("cycler", Value("cycler", detail::make_cycler));
    globals.set("joiner", Value("joiner", detail::make_joiner));
    globals.set("lipsum", Value("lipsum", [](CallArgs&) -> Value { fail("lipsum() (random lorem ipsum) is not supported"); }));
    globals.set("raise_exception", Value("raise_exception", [](CallArgs& c) -> Value {
                  throw TemplateException(c.args.empty() ? std::string() : to_str(c.args[0]));
                }));
    globals.set("strftime_now", Value("strftime_now", detail::strftime_now));
    detail::Interpreter run(limits_, std::move(globals));
    run.define("range", Value("range", [&run](CallArgs& c) { return detail::make_range(run, c); }));
    for (const auto& [k, v] : variables.items) run.define(k, v);
    TaintedText out;
    try {
      run.render(body_, out);
    } catch (const TemplateException& e) {
      throw Error(ErrorCategory::chat_template, context(run.line()), e.what());
    } catch (const EvalError& e) {
      throw Error(ErrorCategory::chat_template, context(run.line()), e.what());
    } catch (const std::bad_alloc&) {
      throw Error(ErrorCategory::chat_template, context(run.line()), "out of memory while rendering");
    } catch (const std::length_error&) {
      throw Error(ErrorCategory::chat_template, context(run.line()), "a value grew beyond the maximum size");
    }
    return out;
  }

  const Limits& limits() const { return limits_; }
  void set_limits(const Limits& limits) { limits_ = limits; }

  const std::string& name() const { return name_; }

 private:
  std::string context(int line) const { return name_ + " line " + std::to_string(line); }

  std::string name_;
  Limits limits_;
  Body body_;
};

}  // namespace kylin::jinja
