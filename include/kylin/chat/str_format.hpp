// str.format(*args, **kwargs): replacement fields ({}, {0}, {name}, {0.attr}, {0[key]}, !r/!s/!a,
// nested {} in a spec) and the format-spec mini-language for str, int and float, as Python's
// string.Formatter runs it under jinja2's sandbox (attribute lookups go through get_attr).
#pragma once

#include <string>
#include <string_view>

#include "kylin/chat/format.hpp"

namespace kylin::jinja::detail {

// [[fill]align][sign][z][#][0][width][grouping][.precision][type]
inline FormatSpec parse_format_spec(std::string_view s) {
  FormatSpec spec;
  std::size_t p = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  const std::vector<std::size_t> at = codepoint_offsets(s);
  if (at.size() > 2 && is_align(s[at[1]]) && at[1] == 1) {
    spec.fill = s[0];
    spec.align = s[1];
    p = 2;
  } else if (at.size() > 2 && at[1] > 1 && is_align(s[at[1]])) {
    fail("fill characters other than ASCII are not supported in format specs");
  } else if (!s.empty() && is_align(s[0])) {
    spec.align = s[0];
    p = 1;
  }
  if (p < s.size() && (s[p] == '+' || s[p] == '-' || s[p] == ' ')) spec.sign = s[p++];
  if (p < s.size() && s[p] == 'z') ++p;
  if (p < s.size() && s[p] == '#') spec.alternate = true, ++p;
  if (p < s.size() && s[p] == '0') {
    spec.zero = true;
    ++p;
  }
  for (; p < s.size() && s[p] >= '0' && s[p] <= '9'; ++p) {
    spec.width = spec.width * 10 + (s[p] - '0');
    check_width(spec.width);
  }
  if (p < s.size() && (s[p] == ',' || s[p] == '_')) spec.grouping = s[p++];
  if (p < s.size() && s[p] == '.') {
    ++p;
    if (p >= s.size() || s[p] < '0' || s[p] > '9') fail("Format specifier missing precision");
    spec.precision = 0;
    for (; p < s.size() && s[p] >= '0' && s[p] <= '9'; ++p) {
      spec.precision = spec.precision * 10 + (s[p] - '0');
      check_width(spec.precision);
    }
  }
  if (p < s.size()) spec.type = s[p++];
  if (p < s.size()) fail("Invalid format specifier '" + std::string(s) + "'");
  return spec;
}

[[noreturn]] inline void unknown_code(char type, const Value& v) {
  fail("Unknown format code '" + std::string(1, type) + "' for object of type '" + std::string(v.type_name()) + "'");
}

// format(v, spec) for one field, after its conversion.
inline void format_field(TaintedText& out, const Value& v, std::string_view spec_text, bool markup) {
  if (spec_text.empty()) return append_converted(out, v, 's', FormatSpec{}, markup);
  FormatSpec spec = parse_format_spec(spec_text);
  if (v.is_string()) {
    if (spec.type && spec.type != 's') unknown_code(spec.type, v);
    if (spec.align == '=') fail("'=' alignment not allowed in string format specifier");
    return append_converted(out, v, 's', spec, markup);
  }
  if (v.is_int() || v.is_bool()) {
    if (std::string_view("bdoxXn").find(spec.type ? spec.type : 'd') != std::string_view::npos) {
      if (spec.precision >= 0) fail("Precision not allowed in integer format specifier");
      if (spec.type == 'n') spec.type = 'd';
      return out.append_plain(format_int(v.as_int(), spec, false));
    }
    if (spec.type == 'c') {
      std::string ch;
      if (v.as_int() < 0 || v.as_int() >= 0x110000) fail("%c arg not in range(0x110000)");
      kylin::detail::append_utf8(ch, static_cast<char32_t>(v.as_int()));
      return out.append_plain(pad("", ch, spec, false));
    }
  }
  if (v.is_number()) {
    if (std::string_view("eEfFgG%n").find(spec.type ? spec.type : 'g') == std::string_view::npos) unknown_code(spec.type, v);
    if (spec.type == 'n') spec.type = 'g';
    return out.append_plain(format_float(v.as_double(), spec));
  }
  fail("unsupported format string passed to " + std::string(v.type_name()) + ".__format__");
}

struct FormatCall {
  const Value& format;
  CallArgs& call;
  bool markup;
  std::size_t auto_index = 0;
  int numbering = 0;  // 1: automatic, 2: manual (Python refuses to mix them)

  // The value of a field name: index or keyword, then .attr and [key] parts.
  Value lookup(std::string_view name) {
    std::size_t end = name.find_first_of(".[");
    const std::string_view first = name.substr(0, end);
    Value v;
    if (first.empty() || first.find_first_not_of("0123456789") == std::string_view::npos) {
      const int mode = first.empty() ? 1 : 2;
      if (numbering && numbering != mode)
        fail(mode == 1 ? "cannot switch from manual field specification to automatic field numbering"
                       : "cannot switch from automatic field numbering to manual field specification");
      numbering = mode;
      std::size_t index = auto_index;
      if (first.empty()) ++auto_index;
      else index = static_cast<std::size_t>(std::stoull(std::string(first.substr(0, 18))));
      if (index >= call.args.size()) fail("tuple index out of range");  // what jinja2's sandboxed formatter says
      v = call.args[index];
    } else {
      const Value* hit = nullptr;
      for (const auto& [k, x] : call.kwargs)
        if (k == first) hit = &x;
      if (!hit) fail(python_string_repr(first));
      v = *hit;
    }
    while (end < name.size()) {
      if (name[end] == '.') {
        const std::size_t next = name.find_first_of(".[", end + 1);
        v = get_attr(v, name.substr(end + 1, next - end - 1));
        end = next;
      } else {
        const std::size_t close = name.find(']', end);
        if (close == std::string_view::npos) fail("Missing ']' in format string");
        const std::string key(name.substr(end + 1, close - end - 1));
        const bool digits = !key.empty() && key.find_first_not_of("0123456789") == std::string::npos;
        v = get_item(v, digits ? Value(static_cast<std::int64_t>(std::stoll(key.substr(0, 18)))) : Value(key));
        end = close + 1;
        if (end < name.size() && name[end] != '.' && name[end] != '[') fail("Only '.' or '[' may follow ']' in format field specifier");
      }
    }
    return v;
  }

  void field(TaintedText& out, std::string_view inner, int depth) {
    std::size_t colon = std::string_view::npos, bang = std::string_view::npos;
    for (std::size_t k = 0, bracket = 0; k < inner.size(); ++k) {
      if (inner[k] == '[') ++bracket;
      else if (inner[k] == ']' && bracket) --bracket;
      else if (!bracket && inner[k] == '!' && bang == std::string_view::npos && colon == std::string_view::npos) bang = k;
      else if (!bracket && inner[k] == ':') {
        colon = k;
        break;
      }
    }
    const std::string_view name = inner.substr(0, std::min(bang, colon));
    const Value v = lookup(name);
    std::string spec;
    if (colon != std::string_view::npos) {
      TaintedText nested;  // a spec may hold fields of its own: {:{width}}
      render(nested, inner.substr(colon + 1), depth + 1);
      spec = nested.text;
    }
    char conv = 0;
    if (bang != std::string_view::npos) {
      const std::size_t conv_end = std::min(colon, inner.size());
      if (conv_end != bang + 2) fail("expected ':' after conversion specifier");
      conv = inner[bang + 1];
      if (conv != 's' && conv != 'r' && conv != 'a') fail("Unknown conversion specifier " + std::string(1, conv));
    }
    if (conv == 'r' || conv == 'a') {
      bool tainted = false;
      const std::string text = conv == 'r' ? repr(v, &tainted) : python_ascii(v);
      if (conv == 'a') (void)repr(v, &tainted);
      return format_field(out, string_value(text, tainted), spec, markup);
    }
    format_field(out, conv == 's' ? str_value(v) : v, spec, markup);
  }

  void render(TaintedText& out, std::string_view f, int depth) {
    if (depth > 2) fail("Max string recursion exceeded");
    std::size_t i = 0;
    while (i < f.size()) {
      const std::size_t brace = f.find_first_of("{}", i);
      if (brace == std::string_view::npos) {
        out.append_plain(f.substr(i));
        break;
      }
      out.append_plain(f.substr(i, brace - i));
      if (brace + 1 < f.size() && f[brace + 1] == f[brace]) {
        out.append_plain(f.substr(brace, 1));
        i = brace + 2;
        continue;
      }
      if (f[brace] == '}') fail("Single '}' encountered in format string");
      std::size_t close = brace + 1;
      for (int open = 1; close < f.size(); ++close) {
        if (f[close] == '{') ++open;
        else if (f[close] == '}' && --open == 0) break;
      }
      if (close >= f.size()) fail("expected '}' before end of string");
      field(out, f.substr(brace + 1, close - brace - 1), depth);
      i = close + 1;
    }
  }
};

// str.format; the format string's own text is copied without its user-data marks only when it
// has none (a template literal), else wholly marked, as other untracked operations are.
inline Value str_format(const Value& format, CallArgs& call) {
  FormatCall fc{format, call, format.is_markup()};
  TaintedText out;
  fc.render(out, format.as_string(), 0);
  if (!format.taint().empty()) out.taint_all();
  Value result = std::move(out).value();
  return format.is_markup() ? as_markup(std::move(result)) : result;
}

}  // namespace kylin::jinja::detail
