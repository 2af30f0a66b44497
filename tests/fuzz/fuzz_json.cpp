// libFuzzer target: json::parse over arbitrary text either throws kylin::Error or gives a value
// that every dump style (compact, Python-spaced, indented, ensure_ascii) writes back as text that
// parses to the same value; compact dump is a fixed point and ensure_ascii output is pure ASCII.
// A crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kylin/core/json.hpp"

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kylin::json::Value v;
  try {
    v = kylin::json::parse(text, "fuzz input");
  } catch (const kylin::Error&) {
    return 0;
  }
  const std::string compact = kylin::json::dump(v);
  const kylin::json::Value again = kylin::json::parse(compact);
  require(again == v);
  require(kylin::json::dump(again) == compact);

  kylin::json::DumpOptions python{.item_separator = ", ", .key_separator = ": "};
  require(kylin::json::parse(kylin::json::dump(v, python)) == v);
  kylin::json::DumpOptions ascii{.indent = 2, .ensure_ascii = true};
  const std::string escaped = kylin::json::dump(v, ascii);
  for (char c : escaped) require(static_cast<unsigned char>(c) < 0x80);
  require(kylin::json::parse(escaped) == v);
  return 0;
}
