// `kylin inspect --model DIR`: what a model directory holds, without running it: the parsed
// config.json, which preset descriptor it matches (or the closest and why not), every tensor, and
// whether the weights bind as loading binds them (exit 1 when loading would fail).
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "kylin/cli.hpp"
#include "kylin/io/checkpoint.hpp"
#include "kylin/io/config.hpp"
#include "kylin/model/descriptors.hpp"
#include "kylin/model/kv_cache.hpp"
#include "kylin/model/weights.hpp"

namespace cmd_inspect {

// 1000000.0 rather than the shortest round-trip "1e+06", as config.json writers print it.
std::string number_text(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v)) + ".0";
  return kylin::json::dump(kylin::json::Value(v));
}

std::string rope_scaling_text(const kylin::ModelConfig& c) {
  if (!c.rope_scaling) return "null";
  const auto& y = *c.rope_scaling;
  std::string s = y.rope_type;
  s += " factor=" + number_text(y.factor);
  s += " original_max_position_embeddings=" + std::to_string(y.original_max_position_embeddings);
  return s;
}

// "linear x3, full, linear x3, full": layer_types in runs.
std::string layer_pattern(const kylin::ModelConfig& c) {
  std::string out;
  for (std::int64_t l = 0; l < c.num_hidden_layers;) {
    std::int64_t n = 1;
    while (l + n < c.num_hidden_layers && c.is_linear_layer(l + n) == c.is_linear_layer(l)) ++n;
    out += (out.empty() ? "" : ", ") + std::string(c.is_linear_layer(l) ? "linear" : "full") + (n > 1 ? " x" + std::to_string(n) : "");
    l += n;
  }
  return out;
}

// The hybrid stack: which layers are gated attention, the Gated DeltaNet shapes, what a sequence carries.
template <class Row>
void print_hybrid(const kylin::ModelConfig& c, Row&& row) {
  const kylin::LinearAttentionConfig& g = *c.linear;
  row("layer_types", layer_pattern(c));
  row("linear_conv_kernel_dim", std::to_string(g.linear_conv_kernel_dim));
  row("linear_num_key_heads", std::to_string(g.linear_num_key_heads));
  row("linear_num_value_heads", std::to_string(g.linear_num_value_heads));
  row("linear_key_head_dim", std::to_string(g.linear_key_head_dim));
  row("linear_value_head_dim", std::to_string(g.linear_value_head_dim));
  if (c.moe && c.moe->shared_expert_intermediate_size > 0) row("shared_expert_intermediate_size", std::to_string(c.moe->shared_expert_intermediate_size));
  if (c.mtp_num_hidden_layers > 0) row("mtp_num_hidden_layers", std::to_string(c.mtp_num_hidden_layers) + " (not part of the forward)");
  std::cout << "derived: " << c.attention_layers() << " of " << c.num_hidden_layers << " layers gated attention (RoPE on " << c.rotary_dim
            << " of " << c.head_dim << " dims), " << c.linear_layers() << " Gated DeltaNet; KV "
            << number_text(static_cast<double>(kylin::KVCache::bytes_per_token(c)) / 1024.0) << " KiB per position (f32), recurrent state "
            << number_text(static_cast<double>(kylin::KVCache::state_bytes(c)) / 1048576.0) << " MiB per sequence\n";
}

void print_config(const kylin::ModelConfig& c) {
  auto row = [](const char* field, const std::string& value) {
    std::cout << "  " << std::left << std::setw(26) << field << value << '\n';
  };
  kylin::json::Array eos(c.eos_token_id.begin(), c.eos_token_id.end());
  std::cout << "config.json:\n";
  row("model_type", c.model_type);
  row("hidden_size", std::to_string(c.hidden_size));
  row("num_hidden_layers", std::to_string(c.num_hidden_layers));
  row("num_attention_heads", std::to_string(c.num_attention_heads));
  row("num_key_value_heads", std::to_string(c.num_key_value_heads));
  row("head_dim", std::to_string(c.head_dim));
  row("intermediate_size", std::to_string(c.intermediate_size));
  row("vocab_size", std::to_string(c.vocab_size));
  row("max_position_embeddings", std::to_string(c.max_position_embeddings));
  row("rms_norm_eps", number_text(c.rms_norm_eps));
  row("rope_theta", number_text(c.rope_theta));
  row("rope_scaling", rope_scaling_text(c));
  row("tie_word_embeddings", c.tie_word_embeddings ? "true" : "false");
  row("attention_bias", c.attention_bias ? "true" : "false");
  row("hidden_act", c.hidden_act);
  row("torch_dtype", c.torch_dtype.empty() ? "(absent)" : c.torch_dtype);
  row("bos_token_id", c.bos_token_id ? std::to_string(*c.bos_token_id) : "(absent)");
  row("eos_token_id", kylin::json::dump(kylin::json::Value(std::move(eos)), {.item_separator = ", "}));
  if (c.moe) {
    kylin::json::Array dense(c.moe->mlp_only_layers.begin(), c.moe->mlp_only_layers.end());
    row("num_experts", std::to_string(c.moe->num_experts));
    row("num_experts_per_tok", std::to_string(c.moe->num_experts_per_tok));
    row("moe_intermediate_size", std::to_string(c.moe->moe_intermediate_size));
    row("norm_topk_prob", c.moe->norm_topk_prob ? "true" : "false");
    row("decoder_sparse_step", std::to_string(c.moe->decoder_sparse_step));
    row("mlp_only_layers", kylin::json::dump(kylin::json::Value(std::move(dense)), {.item_separator = ", "}));
    std::int64_t sparse = 0;
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) sparse += c.is_sparse_layer(l);
    std::cout << "derived: " << sparse << " of " << c.num_hidden_layers << " layers sparse\n";
  }
  if (c.linear) print_hybrid(c, row);
  std::cout << "derived: q_dim " << c.q_dim() << ", kv_dim " << c.kv_dim() << ", " << c.n_groups()
            << " query heads per kv head, qk_norm " << (c.has_qk_norm() ? "yes" : "no") << '\n';
}

void print_tensors(const kylin::io::Checkpoint& ckpt) {
  const auto tensors = ckpt.tensors();
  std::size_t name_width = 4;
  for (const auto* t : tensors) name_width = std::max(name_width, t->name.size());
  std::cout << "tensors:\n  " << std::left << std::setw(static_cast<int>(name_width)) << "name" << "  " << std::setw(8)
            << "dtype" << std::setw(16) << "shape" << std::right << std::setw(12) << "bytes" << '\n';
  std::size_t total_bytes = 0;
  std::int64_t total_elements = 0;
  std::map<std::string, std::size_t> per_dtype;
  for (const auto* t : tensors) {
    std::cout << "  " << std::left << std::setw(static_cast<int>(name_width)) << t->name << "  " << std::setw(8)
              << kylin::dtype_name(t->dtype) << std::setw(16) << kylin::io::shape_string(t->shape) << std::right
              << std::setw(12) << t->nbytes << '\n';
    total_bytes += t->nbytes;
    total_elements += t->numel();
    ++per_dtype[std::string(kylin::dtype_name(t->dtype))];
  }
  std::cout << "total: " << tensors.size() << " tensors in " << ckpt.files().size() << " file(s), " << total_elements
            << " parameters, " << total_bytes << " bytes of tensor data (" << ckpt.total_bytes() << " bytes on disk); dtypes:";
  for (const auto& [dtype, count] : per_dtype) std::cout << ' ' << dtype << " x" << count;
  std::cout << '\n';
}

// The binder's verdict. Unexpected tensors are reported but do not fail: loading ignores them,
// as transformers does (it warns about unused checkpoint weights and loads the model).
bool print_weight_check(const kylin::io::Checkpoint& ckpt, const kylin::ModelConfig& config) {
  const kylin::WeightCheck check = kylin::check_weights(ckpt, config);
  if (check.loads())
    std::cout << "weights: ok, every tensor the model binds is present with its shape and a supported dtype\n";
  else
    std::cout << "weights: " << check.problems.size() << " problem(s), loading would fail:\n";
  for (const auto& p : check.problems) std::cout << "  " << p << '\n';
  for (const auto& [prefix, count] : check.skipped)
    std::cout << "weights: " << count << " tensor(s) under " << prefix << " are not part of the text forward: skipped, never read\n";
  if (!check.unexpected.empty())
    std::cout << "weights: " << check.unexpected.size() << " unexpected tensor(s), ignored by loading:\n";
  for (const auto& name : check.unexpected) std::cout << "  " << name << ": unexpected (nothing binds it)\n";
  return check.loads();
}

void run_inspect(const std::string& dir) {
  const kylin::io::Checkpoint ckpt(dir);  // first: it names a missing or empty directory
  const kylin::ModelConfig config = kylin::load_model_config(dir);
  std::cout << "model: " << dir << '\n';
  print_config(config);
  const kylin::json::Value generation = kylin::load_generation_config(dir);
  std::cout << "generation_config.json: " << (generation.is_null() ? "(absent)" : kylin::json::dump(generation)) << '\n';
  std::cout << "descriptor: " << kylin::describe_preset_match(config) << '\n';
  print_tensors(ckpt);
  if (!print_weight_check(ckpt, config)) kylin::cli::exit_code() = 1;
}

const kylin::cli::Registrar inspect_command("inspect", [](CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("inspect", "Print a model directory's config, matched preset and tensor table; check that its weights load");
  cmd->add_option("--model", *dir, "Model directory (config.json + safetensors)")->required();
  cmd->callback([dir] { run_inspect(*dir); });
});

}  // namespace cmd_inspect
