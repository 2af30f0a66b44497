// libFuzzer target: any text given to json::parse + parse_model_config either throws kylin::Error
// or yields a config whose invariants hold; parsed JSON survives a dump/parse round trip, and
// preset matching runs on every accepted config. A crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kylin/core/json.hpp"
#include "kylin/io/config.hpp"
#include "kylin/model/descriptors.hpp"

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kylin::json::Value root;
  try {
    root = kylin::json::parse(text, "config.json", kylin::ErrorCategory::config);
  } catch (const kylin::Error&) {
    return 0;
  }
  require(kylin::json::parse(kylin::json::dump(root)) == root);
  kylin::json::DumpOptions ascii;
  ascii.ensure_ascii = true;
  ascii.indent = 1;
  require(kylin::json::parse(kylin::json::dump(root, ascii)) == root);
  try {
    const kylin::ModelConfig c = kylin::parse_model_config(root);
    require(c.hidden_size > 0 && c.num_hidden_layers > 0 && c.intermediate_size > 0 && c.vocab_size > 0);
    require(c.num_key_value_heads > 0 && c.num_attention_heads % c.num_key_value_heads == 0);
    require(c.head_dim > 0 && c.head_dim % 2 == 0);
    require(c.model_type == "qwen3" || c.model_type == "qwen2");
    require(!c.rope_scaling || c.rope_scaling->factor > 0);
    (void)kylin::describe_preset_match(c);
  } catch (const kylin::Error&) {
  }
  return 0;
}
