// kylin::Model: a Hugging Face directory loaded on the backend ModelOptions::backend names, through
// the registry of backends (backends/registry.hpp), behind one small virtual interface, so the
// engine, server and CLI are written once. BasicModel<B> (basic_model.hpp) is the model on one B.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/backends/cpu/backend.hpp"
#include "kylin/backends/cpu/kernel_set.hpp"
#include "kylin/backends/registry.hpp"
#include "kylin/kernels/probes.hpp"
#include "kylin/model/basic_model.hpp"
#include "kylin/version.hpp"

namespace kylin {

namespace detail {

// What every BasicModel<B> offers, whatever B: Model holds one behind this interface, so the
// generation, server and CLI code is written once and a backend is picked at run time.
class AnyModel {
 public:
  virtual ~AnyModel() = default;
  virtual const ModelConfig& config() const = 0;
  virtual const json::Value& generation_config() const = 0;
  virtual const io::Checkpoint& checkpoint() const = 0;
  virtual std::string_view backend_name() const = 0;
  virtual std::string_view kernel_set() const = 0;
  virtual int threads() const = 0;
  virtual double load_seconds() const = 0;
  virtual std::int64_t max_pass_rows() const = 0;
  virtual DType kv_dtype() const = 0;
  virtual WeightFormat weight_format() const = 0;
  virtual const QuantizedWeights& quantized() const = 0;
  virtual WeightLayout weight_layout() const = 0;
  virtual ExpertMemory expert_memory() const = 0;
  virtual kernels::PrefillActivations prefill_activations() const = 0;
  virtual bool has_lm_head() const = 0;
  virtual const ModelWeights& weights() const = 0;
  virtual KVCache new_cache(std::optional<std::int64_t> context_length) const = 0;
  virtual void forward(std::span<const SequenceInput> batch) = 0;
  virtual bool has_mtp() const = 0;
  virtual KVCache new_mtp_cache(std::int64_t n) const = 0;
  virtual void forward_mtp(std::span<const SequenceInput> batch) = 0;
  virtual bool has_vision() const = 0;
  virtual const VisionConfig* vision_config() const = 0;
  virtual vision::ImageEmbedding encode_image(const vision::PixelValues& px) = 0;
};

template <Backend B>
class ModelOn final : public AnyModel {
 public:
  ModelOn(const std::filesystem::path& dir, const ModelOptions& o) : m_(BasicModel<B>::load(dir, o)) {}
  const ModelConfig& config() const override { return m_.config(); }
  const json::Value& generation_config() const override { return m_.generation_config(); }
  const io::Checkpoint& checkpoint() const override { return m_.checkpoint(); }
  std::string_view backend_name() const override {
    if constexpr (requires { B::name; }) return B::name;
    else return "cpu";
  }
  // What the backend computes with where its name alone does not say (the CPU's instruction set).
  std::string_view kernel_set() const override {
    if constexpr (requires { B::kernel_set(); }) return B::kernel_set();
    else return backend_name();
  }
  int threads() const override { return m_.threads(); }
  double load_seconds() const override { return m_.load_seconds(); }
  std::int64_t max_pass_rows() const override { return m_.max_pass_rows(); }
  DType kv_dtype() const override { return m_.kv_dtype(); }
  WeightFormat weight_format() const override { return m_.weight_format(); }
  const QuantizedWeights& quantized() const override { return m_.quantized(); }
  WeightLayout weight_layout() const override { return m_.weight_layout(); }
  ExpertMemory expert_memory() const override { return m_.expert_memory(); }
  kernels::PrefillActivations prefill_activations() const override { return m_.prefill_activations(); }
  bool has_lm_head() const override { return m_.has_lm_head(); }
  const ModelWeights& weights() const override { return m_.weights(); }
  KVCache new_cache(std::optional<std::int64_t> n) const override { return m_.new_cache(n); }
  void forward(std::span<const SequenceInput> batch) override { m_.forward(batch); }
  bool has_mtp() const override { return m_.has_mtp(); }
  KVCache new_mtp_cache(std::int64_t n) const override { return m_.new_mtp_cache(n); }
  void forward_mtp(std::span<const SequenceInput> batch) override { m_.forward_mtp(batch); }
  bool has_vision() const override { return m_.has_vision(); }
  const VisionConfig* vision_config() const override { return m_.vision_config(); }
  vision::ImageEmbedding encode_image(const vision::PixelValues& px) override { return m_.encode_image(px); }

 private:
  BasicModel<B> m_;
};

// The CPU model behind Model::load, and the kernel set it runs (cpu_kernels below). Inline by
// default (header-only): the kernels of the translation unit's own flags. A program with many
// translation units can compile the CPU engine once: define KYLIN_EXTERN_CPU_MODEL in every one
// and include kylin/model/cpu_model_instance.hpp in exactly one. kylin's portable build defines
// them in its dispatcher instead, which loads the best kernel-set module (docs/ARCHITECTURE.md).
#if defined(KYLIN_EXTERN_CPU_MODEL)
std::unique_ptr<AnyModel> make_cpu_model(const std::filesystem::path& dir, const ModelOptions& o);
#else
inline std::unique_ptr<AnyModel> make_cpu_model(const std::filesystem::path& dir, const ModelOptions& o) {
  return std::make_unique<ModelOn<CpuBackend>>(dir, o);
}
#endif

// The kernel set this translation unit compiles, under `name`.
inline CpuKernelSet compiled_kernel_set(std::string_view name) {
  return {name, kernels::simd_arch_name(), &make_cpu_model, [](int threads) { return kernels::measure_read_bandwidth(threads); },
          [](int threads) { return kernels::measure_fma_gflops(threads); },
          [](int threads) { return kernels::measure_bf16_dot_gflops(threads); }};
}

}  // namespace detail

// The kernel set the "cpu" backend runs in this program (may load its module: throws naming it).
#if defined(KYLIN_EXTERN_CPU_MODEL)
const CpuKernelSet& cpu_kernels();
#else
inline const CpuKernelSet& cpu_kernels() {
  static const CpuKernelSet set = detail::compiled_kernel_set("built-in");
  return set;
}
#endif

// The backends this program has: the CPU, those linked in, and modules beside the program.
inline BackendRegistry& backends() {
  static BackendRegistry registry(BackendEntry{"cpu", "the CPU: kernels/ on a thread pool", &detail::make_cpu_model});
  return registry;
}

// A backend linked into a program registers itself with one of these at namespace scope.
struct BackendRegistration {
  explicit BackendRegistration(const BackendEntry& e) { backends().add(e); }
};

// What `--version` prints: the program and kylin's version, the CPU kernel set, the backends.
inline std::string version_string(std::string_view program) {
  std::string out = std::string(program) + " " + std::string(version) + "\ncpu kernels: ";
  try {
    out += describe(cpu_kernels());
  } catch (const Error& e) {
    out += std::string("none: ") + e.what();
  }
  out += "\nbackends:";
  for (const std::string& name : backends().names()) out += " " + name;
  return out;
}

// A model on the backend ModelOptions::backend names; the same calls as BasicModel<B>.
class Model {
 public:
  static Model load(const std::filesystem::path& dir, const ModelOptions& o = {}) {
    return Model(backends().factory(o.backend)(dir, o));
  }

  const ModelConfig& config() const { return m_->config(); }
  const json::Value& generation_config() const { return m_->generation_config(); }
  const io::Checkpoint& checkpoint() const { return m_->checkpoint(); }
  std::string_view backend_name() const { return m_->backend_name(); }
  std::string_view kernel_set() const { return m_->kernel_set(); }
  int threads() const { return m_->threads(); }
  double load_seconds() const { return m_->load_seconds(); }
  std::int64_t vocab_size() const { return config().vocab_size; }
  std::int64_t hidden_size() const { return config().hidden_size; }
  std::int64_t max_pass_rows() const { return m_->max_pass_rows(); }
  DType kv_dtype() const { return m_->kv_dtype(); }
  WeightFormat weight_format() const { return m_->weight_format(); }
  const QuantizedWeights& quantized() const { return m_->quantized(); }
  WeightLayout weight_layout() const { return m_->weight_layout(); }
  ExpertMemory expert_memory() const { return m_->expert_memory(); }
  kernels::PrefillActivations prefill_activations() const { return m_->prefill_activations(); }
  bool has_lm_head() const { return m_->has_lm_head(); }
  // The weights the forward reads, in the form it reads them (packed, quantized or as stored).
  const ModelWeights& weights() const { return m_->weights(); }
  KVCache new_cache(std::optional<std::int64_t> context_length = std::nullopt) const { return m_->new_cache(context_length); }

  void forward(std::span<const SequenceInput> batch) { m_->forward(batch); }
  // The checkpoint's MTP head (ModelOptions::mtp; BasicModel::forward_mtp) and its one-layer caches.
  bool has_mtp() const { return m_->has_mtp(); }
  KVCache new_mtp_cache(std::int64_t n) const { return m_->new_mtp_cache(n); }
  void forward_mtp(std::span<const SequenceInput> batch) { m_->forward_mtp(batch); }
  // The vision tower (vision/tower.hpp): an image's embeddings for SequenceInput::images.
  bool has_vision() const { return m_->has_vision(); }
  // config.json's vision_config, also when the backend loads no tower (null without one).
  const VisionConfig* vision_config() const { return m_->vision_config(); }
  vision::ImageEmbedding encode_image(const vision::PixelValues& px) { return m_->encode_image(px); }
  void forward(std::span<const int> tokens, KVCache& cache, const ForwardOutputs& out) {
    const SequenceInput one{tokens, cache, out};
    forward(std::span<const SequenceInput>(&one, 1));
  }
  void forward(std::span<const int> tokens, KVCache& cache, std::span<float> logits, Positions which = Positions::last) {
    forward(tokens, cache, ForwardOutputs{.logits = logits, .hidden = {}, .positions = which});
  }
  std::vector<float> logits_last(std::span<const int> tokens, KVCache& cache) {
    std::vector<float> out(static_cast<std::size_t>(vocab_size()));
    forward(tokens, cache, out);
    return out;
  }

 private:
  explicit Model(std::unique_ptr<detail::AnyModel> m) : m_(std::move(m)) {}
  std::unique_ptr<detail::AnyModel> m_;
};

}  // namespace kylin
