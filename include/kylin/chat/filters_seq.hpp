// Jinja's filters over sequences and mappings, after jinja2/filters.py (3.1): attribute paths
// (make_attrgetter), select/reject/map (empty over none, as `if value:` makes them), sort, unique,
// min/max, sum, dictsort, groupby, batch, slice, first/last, join, reverse, items, random.
// Python returns generators for some of them; kylin returns the list they would give.
#pragma once

#include <algorithm>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "kylin/chat/builtins.hpp"

namespace kylin::jinja {
inline Value run_filter(std::string_view name, const Value& v, CallArgs& call);  // filters.hpp
}

namespace kylin::jinja::detail {

inline Value lowered(const Value& v) { return v.is_string() ? recase_value(v, py_lower) : v; }

// make_attrgetter: "a.b.0" looks up a, b, then index 0; an int attribute is an index; `fallback`
// replaces an Undefined met on the way (jinja2 checks after each part).
inline Value attribute_of(const Value& item, const Value& attribute, const Value& fallback = Undefined{}) {
  if (attribute.is_none() || attribute.is_undefined()) return item;
  if (!attribute.is_string()) return get_item(item, attribute);
  const std::string& path = attribute.as_string();
  Value cur = item;
  std::size_t pos = 0;
  while (true) {
    const std::size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    std::int64_t index = 0;
    const bool is_index = digits && std::from_chars(part.data(), part.data() + part.size(), index).ec == std::errc();
    cur = is_index ? get_item(cur, Value(index)) : get_item(cur, Value(part));
    if (cur.is_undefined() && !fallback.is_undefined() && !fallback.is_none()) cur = fallback;
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

// The sort key of `item`: one attribute path, or several ("age,name", make_multi_attrgetter) as a list.
inline Value sort_key(const Value& item, const Value& attribute, bool case_sensitive) {
  auto one = [&](const Value& attr) {
    const Value k = attribute_of(item, attr);
    return case_sensitive ? k : lowered(k);
  };
  if (!attribute.is_string() || attribute.as_string().find(',') == std::string::npos) return one(attribute);
  std::vector<Value> keys;
  for (const auto& [b, e] : split_bounds(attribute.as_string(), std::string(","), -1))
    keys.push_back(one(Value(attribute.as_string().substr(b, e - b))));
  return Value(std::move(keys));
}

// Python's sorted(items, key=..., reverse=...): stable, `<` on the keys (mixed types fail by name).
inline std::vector<Value> sorted_by(std::vector<Value> items, const std::vector<Value>& keys, bool reverse) {
  std::vector<std::size_t> order_of(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) order_of[i] = i;
  std::stable_sort(order_of.begin(), order_of.end(), [&](std::size_t a, std::size_t b) {
    return reverse ? order(keys[b], keys[a], "<") < 0 : order(keys[a], keys[b], "<") < 0;
  });
  std::vector<Value> out;
  out.reserve(items.size());
  for (std::size_t i : order_of) out.push_back(std::move(items[i]));
  return out;
}

inline Value sort(const Value& v, Args& a) {
  const bool reverse = truthy(a.value(0, "reverse", false)), case_sensitive = truthy(a.value(1, "case_sensitive", false));
  const Value attribute = a.value(2, "attribute", None{});
  std::vector<Value> items = iterate(v), keys;
  for (const Value& item : items) keys.push_back(sort_key(item, attribute, case_sensitive));
  return Value(sorted_by(std::move(items), keys, reverse));
}

// A hashable value's identity for a set (Python: 1 == 1.0 == True hash alike); lists and dicts
// are unhashable, as in Python.
inline std::string hash_key(const Value& v) {
  if (v.is_string()) return "s" + v.as_string();
  if (v.is_none()) return "N";
  if (v.is_number()) {
    const double d = v.as_double();
    if (v.is_float() && (d != std::floor(d) || !std::isfinite(d) || std::fabs(d) >= 9.2e18)) return "f" + python_float(d);
    return "i" + std::to_string(v.is_float() ? static_cast<std::int64_t>(d) : v.as_int());
  }
  if (v.is_list() && v.as_list().tuple) {
    std::string k = "t(";
    for (const Value& x : v.as_list().items) k += hash_key(x) + "\x1f";
    return k + ")";
  }
  if (v.is_undefined()) return "U";
  fail("unhashable type: '" + std::string(v.type_name()) + "'");
}

inline Value unique(const Value& v, Args& a) {
  const bool case_sensitive = truthy(a.value(0, "case_sensitive", false));
  const Value attribute = a.value(1, "attribute", None{});
  std::unordered_set<std::string> seen;
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    const Value key = attribute_of(item, attribute);
    if (seen.insert(hash_key(case_sensitive ? key : lowered(key))).second) out.push_back(item);
  }
  return Value(std::move(out));
}

// min/max: the first item whose key is smallest/largest, as Python's min() and max() pick.
inline Value min_or_max(const Value& v, Args& a, bool max) {
  const bool case_sensitive = truthy(a.value(0, "case_sensitive", false));
  const Value attribute = a.value(1, "attribute", None{});
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Undefined{"No aggregated item, sequence was empty."};
  std::size_t best = 0;
  Value best_key = sort_key(items[0], attribute, case_sensitive);
  for (std::size_t i = 1; i < items.size(); ++i) {
    Value k = sort_key(items[i], attribute, case_sensitive);
    if (max ? order(best_key, k, "<") < 0 : order(k, best_key, "<") < 0) best = i, best_key = std::move(k);
  }
  return items[best];
}

inline Value sum(const Value& v, Args& a) {
  const Value attribute = a.value(0, "attribute", None{});
  Value total = a.value(1, "start", std::int64_t{0});
  if (total.is_string()) fail("sum() can't sum strings [use ''.join(seq) instead]");
  for (const Value& item : iterate(v)) total = binary("+", total, attribute_of(item, attribute));
  return total;
}

inline Value dictsort(const Value& v, Args& a) {
  require_defined(v);
  if (!v.is_dict()) fail("'" + std::string(v.type_name()) + "' object has no attribute 'items'");
  const bool case_sensitive = truthy(a.value(0, "case_sensitive", false)), reverse = truthy(a.value(2, "reverse", false));
  const Value by = a.value(1, "by", "key");
  if (!by.is_string() || (by.as_string() != "key" && by.as_string() != "value"))
    fail("You can only sort by either \"key\" or \"value\"");
  const std::size_t pos = by.as_string() == "key" ? 0 : 1;
  std::vector<Value> items, keys;
  for (const auto& [k, x] : v.as_dict().items) {
    items.push_back(Value(std::vector<Value>{string_value(k, v.as_dict().tainted_keys), x}, true));
    const Value& key = items.back().as_list().items[pos];
    keys.push_back(case_sensitive ? key : lowered(key));
  }
  return Value(sorted_by(std::move(items), keys, reverse));
}

// groupby: sorted by the key, then runs of equal keys; each group is a (grouper, list) tuple whose
// grouper is the first item's own key (not lower-cased) unless case_sensitive.
inline Value groupby(const Value& v, Args& a) {
  const Value attribute = a.value(0, "attribute"), fallback = a.value(1, "default", None{});
  const bool case_sensitive = truthy(a.value(2, "case_sensitive", false));
  std::vector<Value> items = iterate(v), keys;
  for (const Value& item : items) {
    const Value k = attribute_of(item, attribute, fallback);
    keys.push_back(case_sensitive ? k : lowered(k));
  }
  std::vector<Value> sorted_keys = keys;
  std::vector<std::size_t> idx(items.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t x, std::size_t y) { return order(keys[x], keys[y], "<") < 0; });
  std::vector<Value> groups;
  for (std::size_t i = 0; i < idx.size();) {
    std::vector<Value> members;
    std::size_t j = i;
    for (; j < idx.size() && equal(keys[idx[j]], keys[idx[i]]); ++j) members.push_back(items[idx[j]]);
    Value grouper = case_sensitive ? keys[idx[i]] : attribute_of(items[idx[i]], attribute, fallback);
    groups.push_back(Value(std::vector<Value>{std::move(grouper), Value(std::move(members))}, true, true));
    i = j;
  }
  return Value(std::move(groups));
}

// batch(linecount, fill_with): rows of `linecount` items, the last padded with fill_with.
inline Value batch(const Value& v, Args& a) {
  const std::int64_t count = a.integer(0, "linecount", 0);
  const Value fill = a.value(1, "fill_with", None{});
  std::vector<Value> rows, row;
  for (const Value& item : iterate(v)) {
    if (static_cast<std::int64_t>(row.size()) == count) rows.push_back(Value(std::move(row))), row.clear();
    row.push_back(item);
  }
  if (!row.empty()) {
    if (!fill.is_none() && static_cast<std::int64_t>(row.size()) < count) {
      charge(static_cast<std::size_t>(count) * sizeof(Value));
      row.resize(static_cast<std::size_t>(count), fill);
    }
    rows.push_back(Value(std::move(row)));
  }
  return Value(std::move(rows));
}

// slice(slices, fill_with): `slices` columns, the first len % slices of them one item longer.
inline Value slice_filter(const Value& v, Args& a) {
  const std::int64_t slices = a.integer(0, "slices", 0);
  const Value fill = a.value(1, "fill_with", None{});
  if (slices == 0) fail("integer division or modulo by zero");
  const std::vector<Value> seq = iterate(v);
  std::vector<Value> out;
  if (slices < 0) return Value(std::move(out));
  if (slices > static_cast<std::int64_t>(kMaxStringBytes / sizeof(Value))) fail("slice() count too large");
  charge(static_cast<std::size_t>(slices) * 2 * sizeof(Value));  // the columns, each at least empty
  const auto n = static_cast<std::int64_t>(seq.size());
  const std::int64_t per = n / slices, extra = n % slices;
  std::int64_t offset = 0;
  for (std::int64_t k = 0; k < slices; ++k) {
    const std::int64_t start = offset + k * per;
    if (k < extra) ++offset;
    const std::int64_t end = offset + (k + 1) * per;
    std::vector<Value> part(seq.begin() + start, seq.begin() + end);
    if (!fill.is_none() && k >= extra) part.push_back(fill);
    out.push_back(Value(std::move(part)));
  }
  return Value(std::move(out));
}

inline Value join(const Value& v, Args& a) {
  const Value sep = a.get(0, "d") ? str_value(*a.get(0, "d")) : Value("");
  const Value attribute = a.value(1, "attribute", None{});
  TaintedText out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out.append(sep.as_string(), sep.taint());
    out.append_value(attribute_of(item, attribute));
    first = false;
  }
  return std::move(out).value();
}

// select/reject (by_attr false) and selectattr/rejectattr (by_attr true). Jinja's `if value:`
// makes them empty over none, undefined, 0 and empty values.
inline Value select(const Value& v, Args& a, bool by_attr, bool keep) {
  std::vector<Value> out;
  if (!truthy(v)) return Value(std::move(out));
  const std::size_t first_test_arg = by_attr ? 1 : 0;
  if (by_attr && a.call.args.empty()) fail("Missing parameter for attribute name");
  const Value attr = by_attr ? a.call.args[0] : Value(None{});
  const Value* test = first_test_arg < a.call.args.size() ? &a.call.args[first_test_arg] : nullptr;
  CallArgs test_args;
  for (std::size_t i = first_test_arg + 1; i < a.call.args.size(); ++i) test_args.args.push_back(a.call.args[i]);
  test_args.kwargs = a.call.kwargs;
  for (const auto& item : iterate(v)) {
    const Value subject = by_attr ? attribute_of(item, attr) : item;
    CallArgs args = test_args;
    const bool ok = test ? run_test(to_str(*test), subject, args) : truthy(subject);
    if (ok == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

// map(attribute='x', default=...) or map('filter', args...); empty over falsy values, like select.
inline Value map(const Value& v, Args& a) {
  std::vector<Value> out;
  if (!truthy(v)) return Value(std::move(out));
  const Value* attr = a.call.args.empty() ? a.get(99, "attribute") : nullptr;
  if (attr) {
    const Value fallback = a.value(99, "default", None{});
    for (const auto& [k, x] : a.call.kwargs)
      if (k != "attribute" && k != "default") fail("Unexpected keyword argument '" + k + "'");
    for (const auto& item : iterate(v)) out.push_back(attribute_of(item, *attr, fallback));
    return Value(std::move(out));
  }
  if (a.call.args.empty()) fail("map requires a filter argument");
  const std::string name = to_str(a.call.args[0]);
  CallArgs rest;
  rest.args.assign(a.call.args.begin() + 1, a.call.args.end());
  rest.kwargs = a.call.kwargs;
  for (const auto& item : iterate(v)) {
    CallArgs args = rest;
    out.push_back(run_filter(name, item, args));
  }
  return Value(std::move(out));
}

inline Value first_or_last(const Value& v, bool last) {
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Undefined{last ? "No last item, sequence was empty." : "No first item, sequence was empty."};
  return last ? items.back() : items.front();
}

inline Value reverse(const Value& v, Args&) {
  if (v.is_string()) return slice(v, None{}, None{}, std::int64_t{-1});
  std::vector<Value> items = iterate(v);
  return Value(std::vector<Value>(items.rbegin(), items.rend()));
}

inline Value items(const Value& v, Args&) {
  if (v.is_undefined()) return Value(std::vector<Value>{});
  if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.as_dict().items)
    out.push_back(Value(std::vector<Value>{string_value(k, v.as_dict().tainted_keys), x}, true));
  return Value(std::move(out));
}

inline Value random_item(const Value& v, Args&) {
  const std::vector<Value> items = v.is_dict() ? std::vector<Value>{} : iterate(v);
  if (v.is_dict()) fail("random() of a mapping is not supported");
  if (items.empty()) return Undefined{"No random item, sequence was empty."};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return items[std::uniform_int_distribution<std::size_t>(0, items.size() - 1)(rng)];
}

// attr(name): the attribute only (methods, a namespace's or groupby tuple's fields), never the item.
inline Value attr(const Value& v, Args& a) {
  const std::string name = a.str(0, "name");
  if (v.is_dict() && !bound_method(v, name).is_undefined()) return get_attr(v, name);
  if (v.is_dict() || v.is_undefined()) return undefined_attr(v, name);
  return get_attr(v, name);
}

}  // namespace kylin::jinja::detail
