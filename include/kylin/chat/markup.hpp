// markupsafe's Markup as transformers' templates meet it (autoescape off): |safe and |escape make
// a Markup string, and `Markup + str` / `str + Markup` escape the plain operand (markupsafe 3's
// __add__/__radd__), so a template that adds to a |safe string renders what Python renders.
#pragma once

#include <string>
#include <string_view>

#include "kylin/chat/value.hpp"

namespace kylin::jinja::detail {

// markupsafe's escape table: & < > " ' (the quotes as &#34; and &#39;).
inline std::string_view html_entity(char c) {
  switch (c) {
    case '&': return "&amp;";
    case '<': return "&lt;";
    case '>': return "&gt;";
    case '"': return "&#34;";
    case '\'': return "&#39;";
    default: return {};
  }
}

// `s` escaped into `out`; an entity that replaces a byte of user data is user data too.
inline void append_escaped(TaintedText& out, const std::string& s, const Taint& taint) {
  std::size_t run = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    const std::string_view entity = i < s.size() ? html_entity(s[i]) : std::string_view();
    if (i < s.size() && entity.empty()) continue;
    out.append(s, taint, run, i);
    if (i == s.size()) break;
    const std::size_t begin = out.text.size();
    out.append_plain(entity);
    if (kylin::detail::overlaps(taint, i, i + 1)) kylin::detail::add_range(out.taint, begin, out.text.size());
    run = i + 1;
  }
}

inline Value as_markup(Value v) {
  if (!v.is_string() || v.is_markup()) return v;
  return Value(v.as_string(), v.taint(), true);
}

// markupsafe.escape(v): a Markup stays as it is; anything else is str(v) escaped.
inline Value escape_html(const Value& v) {
  if (v.is_markup()) return v;
  TaintedText text;
  text.append_value(v);
  TaintedText out;
  append_escaped(out, text.text, text.taint);
  return as_markup(std::move(out).value());
}

// Markup + str, str + Markup, Markup + Markup: the plain side escaped, the result Markup.
inline Value markup_concat(const Value& a, const Value& b) {
  TaintedText out;
  for (const Value* v : {&a, &b}) {
    if (v->is_markup()) out.append(v->as_string(), v->taint());
    else append_escaped(out, v->as_string(), v->taint());
  }
  return as_markup(std::move(out).value());
}

// A str method applied to a Markup gives a Markup (markupsafe wraps them); `from` is the subject.
inline Value like(const Value& from, Value result) { return from.is_markup() ? as_markup(std::move(result)) : result; }

}  // namespace kylin::jinja::detail
