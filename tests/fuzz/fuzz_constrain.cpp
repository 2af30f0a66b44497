// libFuzzer target: grammar compilation and matching. First byte even: the text up to the first
// NUL is a JSON schema; odd: a GBNF grammar. Either it is refused with kylin::Error, or it compiles
// (under small limits) and the bytes after the NUL run through the parser; every byte string a
// schema's grammar accepts as complete must parse as JSON. A crash, hang or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kylin/constrain/gbnf.hpp"
#include "kylin/constrain/json_schema.hpp"
#include "kylin/constrain/parser.hpp"

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool schema = (data[0] & 1) == 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::size_t nul = rest.find('\0');
  const std::string_view source = rest.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
  const kylin::constrain::GrammarLimits limits{.max_elements = 20000, .max_rules = 4000, .max_depth = 16, .max_repeat = 64,
                                               .max_pattern_states = 512, .max_multiple_of = 64};
  kylin::constrain::Grammar g;
  try {
    g = schema ? kylin::constrain::json_schema_grammar(kylin::json::parse(source, "fuzz schema"), limits)
               : kylin::constrain::parse_gbnf(source, limits);
  } catch (const kylin::Error&) {
    return 0;
  }
  const auto result = kylin::constrain::match_bytes(g, text, {.max_stacks = 64, .max_stack_depth = 64, .max_nodes = 1u << 16});
  if (schema && result.complete) {
    try {
      kylin::json::parse(text, "accepted text");
    } catch (const kylin::Error&) {
      require(false);  // the schema grammar accepted something that is not JSON
    }
  }
  return 0;
}
