// `kylin quantize`: load a checkpoint with --weights q8|q4 and save what loading made of it, so
// that the next load maps the quantized weights as they are. Every tensor loading quantized becomes
// an I8 (Q8_0) or U8 (packed Q4_0) tensor followed by its F16 scales (docs/QUANTIZATION.md); the
// others and the config and tokenizer files are copied unchanged; fused experts are saved per expert.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kylin/cli.hpp"
#include "kylin/io/safetensors_writer.hpp"
#include "kylin/model/model.hpp"

namespace cmd_quantize {

namespace fs = std::filesystem;

struct Options {
  std::string model, out, weights = "q8";
  int threads = 0;
};

// How a quantized copy is saved: its values' tensor dtype and shape, and its scales' name.
struct Saved {
  kylin::DType dtype;
  std::vector<std::int64_t> shape;
  std::string scale_name;
  std::size_t value_bytes;
};

Saved saved_as(const std::string& name, const kylin::MatRef& q) {
  return kylin::kernels::visit_quant(q.dtype, q.data, q.rows, q.cols, [&]<class W>(const W&) {
    const std::int64_t row_bytes = kylin::kernels::row_value_bytes<W>(q.cols);
    if constexpr (std::same_as<W, kylin::kernels::Q8View>)
      return Saved{kylin::DType::i8, {q.rows, row_bytes}, kylin::q8_scale_name(name), static_cast<std::size_t>(q.rows * row_bytes)};
    else
      return Saved{kylin::DType::u8, {q.rows, row_bytes}, kylin::q4_scale_name(name), static_cast<std::size_t>(q.rows * row_bytes)};
  });
}

// A tensor of the saved file before quantization: a checkpoint tensor, or one expert's matrix of a
// fused expert tensor (saved per expert: a quantized copy is one matrix with its scales after it).
struct Piece {
  std::string name;
  const std::byte* data;
  std::size_t nbytes;
  kylin::DType dtype;
  std::vector<std::int64_t> shape;
};

std::vector<Piece> pieces(const kylin::io::Checkpoint& ckpt) {
  std::vector<Piece> out;
  for (const auto* t : ckpt.tensors()) {
    const auto parts = kylin::fused_expert_parts(*t);
    if (parts.empty()) out.push_back({t->name, t->data, t->nbytes, t->dtype, t->shape});
    for (const auto& p : parts)
      out.push_back({p.name, t->data + p.offset, static_cast<std::size_t>(p.rows * p.cols) * kylin::dtype_size(t->dtype), t->dtype, {p.rows, p.cols}});
  }
  return out;
}

// The tensors of the saved file in checkpoint order; a quantized one is followed by its scales.
std::vector<kylin::io::TensorSpec> saved_specs(const kylin::Model& m, const std::vector<Piece>& all) {
  std::vector<kylin::io::TensorSpec> specs;
  for (const Piece& t : all) {
    if (const kylin::MatRef* q = m.quantized().copy_of(t.data)) {
      const Saved s = saved_as(t.name, *q);
      specs.push_back({t.name, s.dtype, s.shape});
      specs.push_back({s.scale_name, kylin::DType::f16, {q->rows, q->cols / kylin::kernels::q8_block}});
    } else {
      specs.push_back({t.name, t.dtype, t.shape});
    }
  }
  return specs;
}

int run(const Options& o) {
  const fs::path in(o.model), out(o.out);
  if (fs::exists(out) && fs::equivalent(in, out))
    throw kylin::Error(kylin::ErrorCategory::request, "--out", "must not be the model directory");
  if (kylin::load_model_config(in).fp8)  // the copied config.json would still describe F8_E4M3 tensors the saved file lacks
    throw kylin::Error(kylin::ErrorCategory::request, in.string(), "an FP8 checkpoint loads with --weights q8 or q4 directly; kylin quantize takes BF16/F16/F32 ones");
  const kylin::Model model = kylin::Model::load(in, {.threads = o.threads, .weights = *kylin::parse_weight_format(o.weights),
                                                           .weight_layout = kylin::WeightLayout::stored});  // nothing runs: nothing to pack
  fs::create_directories(out);
  const std::string format = o.weights == "q8" ? "q8_0" : "q4_0";
  const std::vector<Piece> all = pieces(model.checkpoint());
  kylin::io::SafetensorsWriter writer(out / "model.safetensors", saved_specs(model, all), {{"format", "pt"}, {"kylin.weights", format}});
  for (const Piece& t : all) {
    if (const kylin::MatRef* q = model.quantized().copy_of(t.data)) {  // values, then the f16 scales right after them
      const Saved s = saved_as(t.name, *q);
      const auto* bytes = static_cast<const std::byte*>(q->data);
      const std::size_t scales = static_cast<std::size_t>(q->rows * (q->cols / kylin::kernels::q8_block));
      writer.write(t.name, std::span<const std::byte>(bytes, s.value_bytes));
      writer.write(s.scale_name, std::span<const std::uint16_t>(reinterpret_cast<const std::uint16_t*>(bytes + s.value_bytes), scales));
    } else {
      writer.write(t.name, std::span<const std::byte>(t.data, t.nbytes));
    }
  }
  writer.close();
  for (const auto& entry : fs::directory_iterator(in)) {  // config, generation config, tokenizer, template
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name.ends_with(".safetensors") || name.ends_with(".safetensors.index.json")) continue;
    fs::copy_file(entry.path(), out / name, fs::copy_options::overwrite_existing);
  }
  std::printf("wrote %s: %.1f MB of %s weights for %.1f MB as stored\n", out.string().c_str(),
              static_cast<double>(model.quantized().bytes()) / 1e6, o.weights == "q8" ? "Q8_0" : "Q4_0",
              static_cast<double>(model.quantized().replaced_bytes()) / 1e6);
  return 0;
}

const kylin::cli::Registrar registrar{"quantize", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("quantize", "Save a checkpoint with its weights quantized as --weights quantizes them at load");
  cmd->add_option("--model", o->model, "Model directory")->required();
  cmd->add_option("--weights", o->weights, "Weight format")->check(CLI::IsMember({"q8", "q4"}));
  cmd->add_option("--out", o->out, "Output directory (model.safetensors, config and tokenizer files)")->required();
  cmd->add_option("-t,--threads", o->threads, "Threads (0: all cores)");
  cmd->callback([o] { kylin::cli::exit_code() = run(*o); });
}};

}  // namespace cmd_quantize
