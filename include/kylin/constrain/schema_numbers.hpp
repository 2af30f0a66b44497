// Numeric JSON-schema keywords as digit automata: an integer range [lo, hi] (minimum, maximum,
// exclusive bounds) and multipleOf m, written as rules over the decimal digits (no leading zeros,
// no "-0"), plus bounded "number"s (the integers of the range, or I.F with fraction digits
// ending in 1-9 where every such value lies inside the bounds).
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "kylin/constrain/grammar.hpp"
#include "kylin/core/json.hpp"

namespace kylin::constrain::detail {

// What the schema's numbers hold: 15 digits, as json_schema.hpp's integer rule (int64/double safe).
inline constexpr long long kMaxDigits = 15;
inline constexpr long long kMaxMagnitude = 999'999'999'999'999;

struct IntegerRange {
  long long lo = -kMaxMagnitude;
  long long hi = kMaxMagnitude;
  long long multiple = 1;  // multipleOf (> 0)
};

// Rules for fixed-length digit strings x in [L, H] with (r * 10^d + x) % m == 0; the range and
// residue state is memoized, so an unconstrained tail (L = 0, H = 10^d - 1) is one rule per
// (d, r) shared by every length: about kMaxDigits * m rules at most.
class DigitAutomaton {
 public:
  DigitAutomaton(GrammarBuilder& b, std::string name, long long m) : b_(b), name_(std::move(name)), m_(m) {}

  // Decimal magnitudes in [a, b] (0 <= a <= b <= kMaxMagnitude), multiples of m, no leading zero;
  // -1 when there is none.
  int magnitudes(long long a, long long b) {
    std::vector<std::vector<Element>> alts;
    for (int len = 1; len <= kMaxDigits; ++len) {
      const long long lo = std::max(a, len == 1 ? 0 : pow10(len - 1)), hi = std::min(b, pow10(len) - 1);
      if (lo <= hi && nonempty(len, lo, hi, 0)) alts.push_back({Element::ref(node(len, lo, hi, 0))});
    }
    return alts.empty() ? -1 : b_.rule_of(name_, alts);
  }

  static long long pow10(int d) {
    long long p = 1;
    while (d-- > 0) p *= 10;
    return p;
  }

 private:
  // Some x in [L, H] has (r * 10^d + x) % m == 0.
  bool nonempty(int d, long long L, long long H, long long r) const {
    long long p = 1 % m_;
    for (int i = 0; i < d; ++i) p = p * 10 % m_;
    const long long want = (m_ - r * p % m_) % m_;                // x % m must be this
    const long long first = L + ((want - L % m_) % m_ + m_) % m_;  // the least such x >= L
    return first <= H;
  }

  int node(int d, long long L, long long H, long long r) {
    const auto key = std::make_tuple(d, L, H, r);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    const int rule = b_.new_rule(name_);
    memo_[key] = rule;
    if (d == 0) {
      b_.add_alt(rule, {});
      return rule;
    }
    const long long p = pow10(d - 1);
    std::map<int, ByteSet> by_target;  // digits leading to the same state share one alternative
    for (long long c = 0; c <= 9; ++c) {
      const long long lo = std::max(L, c * p), hi = std::min(H, c * p + p - 1);
      const long long next_r = (r * 10 + c) % m_;
      if (lo > hi || !nonempty(d - 1, lo - c * p, hi - c * p, next_r)) continue;
      by_target[node(d - 1, lo - c * p, hi - c * p, next_r)].add(static_cast<unsigned char>('0' + c));
    }
    for (const auto& [target, digits] : by_target) b_.add_alt(rule, {Element::byte_set(digits), Element::ref(target)});
    return rule;
  }

  GrammarBuilder& b_;
  std::string name_;
  long long m_;
  std::map<std::tuple<int, long long, long long, long long>, int> memo_;
};

// The integers of the range (multiples of range.multiple), e.g. [-12, 7]: "-12".."-1", "0".."7";
// -1 when the range holds none.
inline int integer_range_rule(GrammarBuilder& b, const IntegerRange& range, const std::string& name) {
  DigitAutomaton digits(b, name, range.multiple);
  std::vector<std::vector<Element>> alts;
  if (range.hi >= 0) {
    if (const int pos = digits.magnitudes(std::max(range.lo, 0LL), range.hi); pos >= 0) alts.push_back({Element::ref(pos)});
  }
  if (range.lo < 0) {
    if (const int neg = digits.magnitudes(std::max(-range.hi, 1LL), -range.lo); neg >= 0)
      alts.push_back({Element::byte('-'), Element::ref(neg)});
  }
  return alts.empty() ? -1 : b.rule_of(name, alts);
}

// A bounded JSON number: an integer of [ceil lo, floor hi] (the exclusive bounds moved inwards),
// or I.F / -I.F with 1-15 fraction digits, the last one 1-9 (so the value is strictly between I
// and I+1), for the I whose whole open interval lies inside the bounds. No exponents.
struct NumberBounds {
  double lo = -1e300, hi = 1e300;
  bool lo_exclusive = false, hi_exclusive = false;
};

inline int bounded_number_rule(GrammarBuilder& b, const NumberBounds& n, const std::string& name) {
  auto clip = [](double v) { return static_cast<long long>(std::clamp(v, -1e15, 1e15)); };
  IntegerRange ints;
  ints.lo = std::max(-kMaxMagnitude, clip(n.lo_exclusive ? std::floor(n.lo) + 1 : std::ceil(n.lo)));
  ints.hi = std::min(kMaxMagnitude, clip(n.hi_exclusive ? std::ceil(n.hi) - 1 : std::floor(n.hi)));
  std::vector<std::vector<Element>> alts;
  if (ints.lo <= ints.hi)
    if (const int r = integer_range_rule(b, ints, name); r >= 0) alts.push_back({Element::ref(r)});
  // I.F lies in (I, I+1): inside [lo, hi] (either bound open or closed) when I >= lo and I + 1 <= hi.
  const long long pos_lo = std::max(0LL, clip(std::ceil(n.lo))), pos_hi = std::min(kMaxMagnitude, clip(std::floor(n.hi)) - 1);
  const long long neg_lo = std::max(0LL, clip(std::ceil(-n.hi))), neg_hi = std::min(kMaxMagnitude, clip(std::floor(-n.lo)) - 1);
  const int tail = b.repeat(name + "/fraction", {Element::byte_set(ByteSet::of('0', '9'))}, {}, 0, kMaxDigits - 1);
  const std::vector<Element> fraction = {Element::byte('.'), Element::ref(tail), Element::byte_set(ByteSet::of('1', '9'))};
  DigitAutomaton digits(b, name, 1);
  if (pos_lo <= pos_hi) {
    std::vector<Element> seq = {Element::ref(digits.magnitudes(pos_lo, pos_hi))};
    seq.insert(seq.end(), fraction.begin(), fraction.end());
    alts.push_back(seq);
  }
  if (neg_lo <= neg_hi) {
    std::vector<Element> seq = {Element::byte('-'), Element::ref(digits.magnitudes(neg_lo, neg_hi))};
    seq.insert(seq.end(), fraction.begin(), fraction.end());
    alts.push_back(seq);
  }
  return alts.empty() ? -1 : b.rule_of(name, alts);
}

// The rule of an integer or number schema with minimum, maximum, exclusiveMinimum,
// exclusiveMaximum or (integers only) multipleOf; -1 when it has none of them.
inline int numeric_keywords_rule(GrammarBuilder& b, const json::Value& s, const std::string& path, bool integer) {
  auto error = [&](const std::string& key, const std::string& message) { return grammar_error("json schema " + path + "/" + key, message); };
  NumberBounds n;
  bool any = false;
  for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
    const json::Value* v = s.find(key);
    if (!v) continue;
    if (!v->is_number()) throw error(key, std::string(key) + " must be a number (the draft-4 boolean form is unsupported)");
    const double x = v->as_double();
    const bool exclusive = key[0] == 'e', lower = std::string_view(key).find("inimum") != std::string_view::npos;
    any = true;
    if (lower && (x > n.lo || (x == n.lo && exclusive))) n.lo = x, n.lo_exclusive = exclusive;
    if (!lower && (x < n.hi || (x == n.hi && exclusive))) n.hi = x, n.hi_exclusive = exclusive;
  }
  long long multiple = 1;
  if (const json::Value* m = s.find("multipleOf")) {
    if (!integer) throw error("multipleOf", "multipleOf is supported on integer schemas only");
    if (!m->is_int() || m->as_int() <= 0)
      throw error("multipleOf", "multipleOf must be a positive integer on an integer schema");
    if (static_cast<std::size_t>(m->as_int()) > b.limits().max_multiple_of)
      throw error("multipleOf", "multipleOf " + std::to_string(m->as_int()) + " is above the limit of " +
                                    std::to_string(b.limits().max_multiple_of) + " (its digit automaton has ~15 rules per unit)");
    multiple = m->as_int();
    any = true;
  }
  if (!any) return -1;
  int rule = -1;
  if (integer) {
    auto clip = [](double v) { return static_cast<long long>(std::clamp(v, -1e15, 1e15)); };
    IntegerRange range;
    range.lo = std::max(range.lo, clip(n.lo_exclusive ? std::floor(n.lo) + 1 : std::ceil(n.lo)));
    range.hi = std::min(range.hi, clip(n.hi_exclusive ? std::ceil(n.hi) - 1 : std::floor(n.hi)));
    range.multiple = multiple;
    if (range.lo <= range.hi) rule = integer_range_rule(b, range, path);
  } else {
    rule = bounded_number_rule(b, n, path);
  }
  if (rule < 0)
    throw grammar_error("json schema " + path, std::string("no ") + (integer ? "integer" : "number") +
                                                   " of at most 15 digits satisfies minimum/maximum/exclusiveMinimum/exclusiveMaximum" +
                                                   (multiple > 1 ? "/multipleOf" : ""));
  return rule;
}

}  // namespace kylin::constrain::detail
