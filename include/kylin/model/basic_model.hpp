// BasicModel<B>: a Hugging Face directory loaded for one backend type B, and the forward pass over
// one sequence or a batch of them. Reads config.json, maps the safetensors, binds weights, picks the
// Transformer for model_type, and sizes every buffer once. kylin::Model (model.hpp) picks B by name.
#pragma once

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>
#include <type_traits>
#include <variant>

#include "kylin/model/memory_check.hpp"
#include "kylin/model/packed_weights.hpp"
#include "kylin/model/quantized_weights.hpp"
#include "kylin/model/transformer.hpp"
#include "kylin/vision/tower.hpp"

namespace kylin {

struct ModelOptions {
  std::string backend = "cpu";     // a name in backends() (backends/registry.hpp): "cpu", "cuda" where built
  int threads = 0;                 // 0: all hardware threads
  std::int64_t max_pass_rows = 512;  // rows of one batched pass (activation buffers scale with it)
  DType kv_dtype = DType::f32;     // KV cache element type of new_cache(); f16 halves long-context decode reads
  WeightFormat weights = WeightFormat::stored;  // q8/q4: projections quantized at load (quantized_weights.hpp)
  WeightLayout weight_layout = WeightLayout::packed;  // stored: matmuls read the checkpoint's bytes in place (packed_weights.hpp)
  io::FileMemory checkpoint_memory = io::FileMemory::mapped;  // copied: read into huge pages at load (`--no-mmap`, stored layout)
  kernels::PrefillActivations prefill_activations = kernels::PrefillActivations::f32;  // bf16: BF16 weights' prefill GEMM on rounded activations (opt-in)
  ExpertMemory experts = ExpertMemory::held;  // mapped: routed experts read in place from the mapped file (larger-than-memory MoE)
  MtpHead mtp = MtpHead::skipped;  // loaded: the checkpoint's MTP head too (forward_mtp, the `--mtp` speculative draft)
  // > 0: the MTP head's logits cover token ids [0, mtp_vocab) only (rounded up to 16), the rest -inf: its LM head
  // reads those rows, the lowest BPE ids (the earliest, most frequent merges). 0: the whole vocabulary.
  std::int64_t mtp_vocab = 0;
};

// Default KV cache length: max_position_embeddings, capped so the cache stays within
// `default_kv_budget_bytes` (2 GiB), rounded down to a multiple of 256 positions.
inline constexpr std::size_t default_kv_budget_bytes = std::size_t{2} << 30;

inline std::int64_t default_context_length(const ModelConfig& c, DType kv_dtype = DType::f32) {
  const auto per_token = static_cast<std::int64_t>(KVCache::bytes_per_token(c, kv_dtype));
  if (per_token == 0) return std::max<std::int64_t>(1, c.max_position_embeddings);  // linear layers only: no keys to hold
  std::int64_t fit = static_cast<std::int64_t>(default_kv_budget_bytes) / per_token;
  if (fit >= 256) fit = fit / 256 * 256;
  return std::max<std::int64_t>(1, std::min(c.max_position_embeddings, fit));
}

enum class Positions { last, all };

// What a forward call hands back: logits [rows, vocab] and/or final hidden states (after the
// final norm, what transformers calls last_hidden_state) [rows, hidden], for the last token
// (rows = 1) or every token. An empty span skips that output.
// greedy [rows]: each row's greedy token, kernels::argmax of its logits over ids below pick_end
// (0: the whole row), -1 where none is above -inf. top [rows, top_k]: each row's top_k best logits
// and their ids over the same ids, best first (kernels::top_k). drawn [rows]: each row's token
// drawn over the same ids as kernels::draw_row draws it under draws[i] (-1 as greedy's). All are
// picked where the logits are, so a device backend sends back one int (or top_k pairs) a row
// instead of the row: greedy decoding, top-k sampling (Sampler::candidates_from_top) and sampling
// by temperature, top-p and min-p (Sampler::row_draw), without the logits. One of them a sequence: greedy
// before top before drawn.
// hidden_positions, when set, picks the hidden states' rows apart from the logits' (every row's hidden state
// for the MTP head beside the last row's logits).
struct ForwardOutputs {
  std::span<float> logits = {};
  std::span<float> hidden = {};
  Positions positions = Positions::last;
  std::optional<Positions> hidden_positions = std::nullopt;
  std::span<int> greedy = {};
  std::int64_t pick_end = 0;
  std::span<kernels::RankedLogit> top = {};
  std::int64_t top_k = 0;
  std::span<int> drawn = {};
  std::span<const kernels::RowDraw> draws = {};
};

// One sequence of a batched forward: its new tokens, fed at positions cache.size().. of its own
// cache, and where its outputs go.
struct SequenceInput {
  std::span<const int> tokens;
  KVCache& cache;
  ForwardOutputs out;
  // Every token takes the kernels of a one-token decode step instead of the prefill GEMM, so each
  // row's outputs equal those of feeding the tokens one step at a time, bit for bit, while the
  // weights are still read once for all of them (speculative decoding's verification pass).
  bool decode_rows = false;
  // Positions in (cache.size(), cache.size() + tokens.size()] whose recurrent states (hybrid models) the cache
  // keeps as snapshots (KVCache::keep_state), computed inside the passes without cutting them.
  std::span<const std::int64_t> keep_states = {};
  // [tokens, hidden]: the MTP head's second input, the target's final hidden state at each token's position
  // (forward_mtp only).
  std::span<const float> hidden_in = {};
  // Image tokens among `tokens` (model/image_rows.hpp): their rows hold image keys, their embeddings are the
  // vision tower's (encode_image), their positions M-RoPE's.
  std::span<const ImageRows> images = {};
};

namespace detail {
// std::variant<unique_ptr<ArchTransformer<A>>...> with each Transformer type once (two Archs may share one).
template <class V, class T>
struct add_unique;
template <class... Ts, class T>
struct add_unique<std::variant<Ts...>, T> {
  using type = std::conditional_t<(std::is_same_v<Ts, T> || ...), std::variant<Ts...>, std::variant<Ts..., T>>;
};
template <class V, class... A>
struct net_of {
  using type = V;
};
template <class V, class A, class... Rest>
struct net_of<V, A, Rest...> : net_of<typename add_unique<V, std::unique_ptr<ArchTransformer<A>>>::type, Rest...> {};
template <class List>
struct net_of_list;
template <class... A>
struct net_of_list<ArchList<A...>> : net_of<std::variant<>, A...> {};
template <class List>
using NetOf = typename net_of_list<List>::type;
}  // namespace detail

// A model loaded for one backend type B: weights, B's workspace, caches from B's memory.
template <Backend B>
class BasicModel {
 public:
  static BasicModel load(const std::filesystem::path& dir, const ModelOptions& options = {}) { return BasicModel(dir, options); }

  const ModelConfig& config() const { return impl_->config; }
  const json::Value& generation_config() const { return impl_->generation_config; }
  const io::Checkpoint& checkpoint() const { return *impl_->checkpoint; }
  int threads() const { return impl_->backend.threads(); }
  double load_seconds() const { return impl_->load_seconds; }
  std::int64_t vocab_size() const { return impl_->config.vocab_size; }
  std::int64_t hidden_size() const { return impl_->config.hidden_size; }
  std::int64_t max_pass_rows() const { return impl_->workspace.max_pass_rows; }
  DType kv_dtype() const { return impl_->kv_dtype; }
  WeightFormat weight_format() const { return impl_->weight_format; }
  // The weights quantized at load (none for WeightFormat::stored).
  const QuantizedWeights& quantized() const { return impl_->quantized; }
  // packed when any weight was repacked into the backend's layout at load (packed_weights.hpp).
  WeightLayout weight_layout() const { return impl_->packed.bytes() > 0 ? WeightLayout::packed : WeightLayout::stored; }
  kernels::PrefillActivations prefill_activations() const { return impl_->prefill_activations; }
  // mapped when the routed experts are read in place from the mapped file (--experts mapped).
  ExpertMemory expert_memory() const {
    for (const LayerWeights& L : weights().layers)
      if (L.experts_mapped) return ExpertMemory::mapped;
    return ExpertMemory::held;
  }
  // False for an embedding model saved without lm_head: it gives hidden states, never logits.
  bool has_lm_head() const { return impl_->lm_head != LmHead::none; }
  B& backend() { return impl_->backend; }
  // The weights the forward reads, in the form it reads them (packed, quantized or as stored).
  const ModelWeights& weights() const {
    return std::visit([](const auto& net) -> const ModelWeights& { return net->weights(); }, impl_->net);
  }

  // Whether the checkpoint's vision tower was loaded (a vision_config, on a backend reading host memory): then
  // SequenceInput::images take encode_image's embeddings. Callers on several threads take turns on the tower
  // (its own buffers and backend), while forward() runs beside them.
  bool has_vision() const { return impl_->tower.has_value(); }
  const VisionConfig* vision_config() const { return impl_->config.vision ? &*impl_->config.vision : nullptr; }
  vision::ImageEmbedding encode_image(const vision::PixelValues& px) {
    if (!has_vision()) throw Error(ErrorCategory::request, "images", "this model has no vision tower (vision_config): it takes no images");
    std::lock_guard lock(impl_->tower_mutex);
    return impl_->tower->encode(px);
  }

  // Whether the MTP head was loaded (ModelOptions::mtp).
  bool has_mtp() const { return impl_->mtp_net.has_value(); }

  // A cache in the backend's memory (its recurrent states too, allocated as they are first kept); it must
  // not outlive this model.
  KVCache new_cache(std::optional<std::int64_t> context_length = std::nullopt) const {
    const ModelConfig& c = impl_->config;
    const std::int64_t n = context_length ? *context_length : default_context_length(c, impl_->kv_dtype);
    const std::size_t bytes = KVCache::bytes_needed(c, n, impl_->kv_dtype);
    RecurrentStates states;
    if (c.linear) states = RecurrentStates(c.linear_layers(), c.linear->state_floats(), [&b = impl_->backend](std::size_t m) { return b.allocate(m); });
    return KVCache(c, n, impl_->kv_dtype, impl_->backend.allocate(bytes), std::move(states));
  }

  // The MTP head's cache: keys and values of its one layer for n positions (mtp_head_config).
  KVCache new_mtp_cache(std::int64_t n) const {
    const ModelConfig c = mtp_head_config(impl_->config);
    return KVCache(c, n, impl_->kv_dtype, impl_->backend.allocate(KVCache::bytes_needed(c, n, impl_->kv_dtype)));
  }

  // The MTP head over each sequence's tokens at positions cache.size().. of its MTP cache (new_mtp_cache), each
  // token with its SequenceInput::hidden_in row; outputs as forward's, the hidden states being the head's own
  // (after mtp.norm), which its next step reads. Checked as forward's inputs are.
  void forward_mtp(std::span<const SequenceInput> batch) {
    if (!has_mtp()) throw Error(ErrorCategory::request, "mtp", checkpoint().dir().string() + " was loaded without its MTP head (ModelOptions::mtp)");
    const ModelConfig c = mtp_head_config(config());
    validate(batch, c);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const ForwardOutputs& out = batch[i].out;
      if (impl_->mtp_vocab < vocab_size() && (!out.greedy.empty() || !out.top.empty() || !out.drawn.empty()))
        throw Error(ErrorCategory::request, "outputs", "the MTP head over a draft vocabulary (mtp_vocab) gives logits, not picks");
      if (batch[i].hidden_in.size() != batch[i].tokens.size() * static_cast<std::size_t>(hidden_size()))
        throw Error(ErrorCategory::request, "hidden_in", "sequence " + std::to_string(i) + ": " + std::to_string(batch[i].hidden_in.size()) +
                                                          " floats for " + std::to_string(batch[i].tokens.size()) + " tokens of hidden size " +
                                                          std::to_string(hidden_size()));
    }
    run_passes(batch, *impl_->mtp_net);
  }

  // Feeds `tokens` at positions cache.size().. (in passes of max_pass_rows tokens) and writes the
  // outputs of the last token or of every token.
  void forward(std::span<const int> tokens, KVCache& cache, const ForwardOutputs& out) {
    const SequenceInput one{tokens, cache, out};
    forward(std::span<const SequenceInput>(&one, 1));
  }
  void forward(std::span<const int> tokens, KVCache& cache, std::span<float> logits, Positions which = Positions::last) {
    forward(tokens, cache, ForwardOutputs{.logits = logits, .hidden = {}, .positions = which});
  }

  // Every sequence of the batch in shared passes of up to max_pass_rows rows: one GEMM (or one
  // weight-streaming dot-product pass for decoding sequences) over the rows of all of them,
  // attention per sequence against its own cache. Each sequence's outputs equal running it alone.
  // Everything is checked before anything runs: a bad input changes no cache.
  void forward(std::span<const SequenceInput> batch) {
    validate(batch, config());
    run_passes(batch, impl_->net);
  }

  // Convenience: logits of the last token as a new vector.
  std::vector<float> logits_last(std::span<const int> tokens, KVCache& cache) {
    std::vector<float> out(static_cast<std::size_t>(vocab_size()));
    forward(tokens, cache, out);
    return out;
  }

 private:
  struct Impl {
    Impl(const std::filesystem::path& dir, const ModelOptions& o)
        : config(load_model_config(dir)),
          generation_config(load_generation_config(dir)),
          checkpoint(std::make_unique<io::Checkpoint>(dir, checked_memory(dir, o))),
          backend(config, BackendOptions{.threads = o.threads, .max_pass_rows = std::max<std::int64_t>(1, o.max_pass_rows),
                                         .prefill_activations = o.prefill_activations}),
          workspace(backend, config, std::max<std::int64_t>(1, o.max_pass_rows)),
          weight_format(o.weights),
          net(make_net(config, held_weights(config, o, *checkpoint, backend, quantized, packed))),
          mtp_net(make_mtp_net(config, net, o, mtp_lm_head)),
          kv_dtype(o.kv_dtype),
          prefill_activations(o.prefill_activations),
          lm_head(lm_head_source(*checkpoint, config)) {
      KVCache::bytes_needed(config, 1, kv_dtype);  // refuses a KV dtype no cache can hold, at load
      pass_seqs.reserve(static_cast<std::size_t>(workspace.max_pass_rows));
    }

    // A copy holds the checkpoint as stored, so beside q8/q4 or packed copies it would only double the memory.
    static io::FileMemory checked_memory(const std::filesystem::path& dir, const ModelOptions& o) {
      if (o.checkpoint_memory == io::FileMemory::copied && o.weights != WeightFormat::stored)
        throw Error(ErrorCategory::request, dir.string(), "copying the checkpoint into memory (--no-mmap) keeps the weights as stored; "
                                                       "quantized (q8/q4) weights are in memory already: leave one of the two out");
      if (o.checkpoint_memory == io::FileMemory::copied && packs(o))
        throw Error(ErrorCategory::request, dir.string(), "copying the checkpoint into memory (--no-mmap) keeps the weights as stored; "
                                                       "packed weights (the default) are in memory already: add --weight-layout stored, "
                                                       "or leave --no-mmap out");
      return o.checkpoint_memory;
    }
    // What the net reads: the bound weights quantized (--weights), FP8 widened and packed
    // (--weight-layout); with --experts mapped, the routed experts as the checkpoint stores them.
    static ModelWeights held_weights(const ModelConfig& c, const ModelOptions& o, const io::Checkpoint& ckpt, B& backend,
                                     QuantizedWeights& quantized, PackedWeights& packed) {
      // (Qwen3-Next's config does not count its MTP layer: the tensors say it is there)
      if (o.mtp_vocab < 0) throw Error(ErrorCategory::request, "mtp_vocab", "must be 0 (the whole vocabulary) or positive, got " + std::to_string(o.mtp_vocab));
      if (o.mtp == MtpHead::loaded && (!c.linear || !ckpt.find("mtp.fc.weight")))
        throw Error(ErrorCategory::config, ckpt.dir().string(), "--mtp: this checkpoint has no MTP head (no mtp.fc.weight)");
      ModelWeights w = bind_weights(ckpt, c, Fp8Widening::deferred, o.mtp);
      LayerExperts aside;
      if (o.experts == ExpertMemory::mapped) {
        check_mapped_experts(ckpt, o, w);
        aside = take_experts(w);
      }
      const HoldPlan plan{.format = o.weights, .packs = packs(o)};
      const bool held_experts = std::ranges::any_of(w.layers, [](const LayerWeights& L) { return !L.experts.empty(); });
      check_copies_fit(weight_copy_bytes(w, plan), available_memory_bytes(), plan, held_experts, ckpt.dir().string());
      w = packed.apply(widen_fp8(quantized.apply(std::move(w), o.weights, o.threads, ckpt)), o.weight_layout, backend, o.threads, ckpt);
      return put_experts(std::move(w), std::move(aside));
    }
    // Mapped experts are read where the file's pages lie: by a backend that reads host memory, from a
    // mapping (not a copy), in a dtype the kernels run as stored (FP8 is widened in memory).
    static void check_mapped_experts(const io::Checkpoint& ckpt, const ModelOptions& o, const ModelWeights& w) {
      const std::string where = ckpt.dir().string();
      if constexpr (!requires { B::reads_host_weights; })
        throw Error(ErrorCategory::request, where, "--experts mapped: " + std::string(backend_name()) + " holds its weights in device memory; use --backend cpu");
      if (o.checkpoint_memory == io::FileMemory::copied)
        throw Error(ErrorCategory::request, where, "--experts mapped reads the experts from the mapped file; leave --no-mmap out");
      for (const LayerWeights& L : w.layers)
        for (const ExpertWeights& x : L.experts)
          if (x.gate_proj.dtype == DType::f8_e4m3)
            throw Error(ErrorCategory::request, where, "--experts mapped: FP8 experts are widened to BF16 in memory at load; "
                                                       "run this checkpoint with its experts held");
    }
    static bool packs(const ModelOptions& o) { return o.weight_layout == WeightLayout::packed && packed_layout_of<B> != kernels::Layout::rows; }

    // One alternative per Transformer type of model/arch.hpp's architectures; visit_arch picks it from model_type.
    using Net = detail::NetOf<AllArchs>;
    static Net make_net(const ModelConfig& c, const ModelWeights& w) {
      return visit_arch(c.model_type, [&]<class Arch>(Arch) -> Net {
        if constexpr (!HybridBackend<B>) {
          if (Arch::info.is_hybrid())
            throw Error(ErrorCategory::config, "backend",
                        std::string(backend_name()) + " does not run " + std::string(Arch::name) + "'s Gated DeltaNet layers; use --backend cpu");
        }
        return Net(std::make_unique<ArchTransformer<Arch>>(c, w));
      });
    }
    // the MTP head's Transformer over the same weights (layers.back(), ModelWeights::mtp), where it was loaded
    static std::optional<Net> make_mtp_net(const ModelConfig& c, const Net& net, const ModelOptions& o, std::vector<std::byte>& lm_head_copy) {
      if (o.mtp == MtpHead::skipped) return std::nullopt;
      return std::visit([&]<class T>(const std::unique_ptr<T>& t) {
        ModelWeights w = t->weights();
        if (o.mtp_vocab > 0 && o.mtp_vocab < c.vocab_size) w.lm_head = first_rows(w.lm_head, (o.mtp_vocab + 15) / 16 * 16, lm_head_copy);
        return Net(std::make_unique<T>(c, w, Stack::mtp_head));
      }, net);
    }
    // The first n rows of m (a whole number of 16-row panels): a prefix of its data, or for Q8_0/Q4_0 (the scales
    // after all values) a copy of those rows' values and scales, held by `copy` (a backend reading host memory).
    static MatRef first_rows(MatRef m, std::int64_t n, std::vector<std::byte>& copy) {
      n = std::min(n, m.rows);
      if (!kernels::is_quantized(m.dtype)) return m.rows = n, m;
      if constexpr (!requires { B::reads_host_weights; })
        throw Error(ErrorCategory::request, "mtp_vocab", std::string(backend_name()) + " holds quantized weights in device memory: use the whole vocabulary");
      const std::size_t scale_row = static_cast<std::size_t>(m.cols / kernels::q8_block) * 2,
                        value_row = kernels::quant_bytes(m.dtype, 1, m.cols) - scale_row;  // the values of a row, then all rows' scales
      const std::size_t values = static_cast<std::size_t>(n) * value_row, all_values = static_cast<std::size_t>(m.rows) * value_row,
                        scales = static_cast<std::size_t>(n) * scale_row;
      const auto* src = static_cast<const std::byte*>(m.data);
      copy.assign(src, src + values);
      copy.insert(copy.end(), src + all_values, src + all_values + scales);
      return MatRef{m.dtype, copy.data(), n, m.cols, m.layout};
    }
    static std::string_view backend_name() {
      if constexpr (requires { B::name; }) return B::name;
      else return "this backend";
    }

    ModelConfig config;
    json::Value generation_config;
    std::unique_ptr<io::Checkpoint> checkpoint;
    B backend;
    Workspace workspace;
    WeightFormat weight_format;
    QuantizedWeights quantized;  // the Q8_0/Q4_0 copies `net` points to (empty: weights as stored)
    PackedWeights packed;        // the copies in B's layout `net` points to (empty: weights as stored)
    Net net;
    std::vector<std::byte> mtp_lm_head;  // ModelOptions::mtp_vocab over a quantized LM head: its first rows
    std::int64_t mtp_vocab = 0;          // ids the MTP head's logits cover (vocab_size: all)
    std::optional<Net> mtp_net;  // ModelOptions::mtp: the MTP head (Stack::mtp_head)
    DType kv_dtype;
    kernels::PrefillActivations prefill_activations;
    LmHead lm_head;
    double load_seconds = 0;
    std::vector<std::int64_t> fed;         // [batch] tokens of each sequence already run
    std::vector<PassSequence> pass_seqs;   // [<= max_pass_rows] the pass being planned
    std::vector<ImageRows> pass_images;    // the images of its pieces (PassSequence::images point into it)
    std::optional<vision::VisionTower<B>> tower;  // config.vision's tower, on a backend of its own
    std::mutex tower_mutex;                       // one encode_image at a time
    std::int64_t pass_rows = 0, pass_decode_rows = 0;
  };

  BasicModel(const std::filesystem::path& dir, const ModelOptions& o) {
    const auto t0 = std::chrono::steady_clock::now();
    impl_ = std::make_unique<Impl>(dir, o);
    if constexpr (requires { B::reads_host_weights; })  // the tower's row ops read its activations on the host
      if (impl_->config.vision) impl_->tower.emplace(*impl_->checkpoint, *impl_->config.vision, o.threads);
    // Quantized or packed weights were read once and their pages dropped (QuantizedWeights::apply,
    // PackedWeights::apply).
    if (o.weights == WeightFormat::stored && !Impl::packs(o))
      std::visit([&](const auto& net) { populate_bound(net->weights(), *impl_->checkpoint); }, impl_->net);
    const std::int64_t V = impl_->config.vocab_size;
    impl_->mtp_vocab = o.mtp_vocab > 0 ? std::min(V, (o.mtp_vocab + 15) / 16 * 16) : V;
    impl_->load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // Tokens of a sequence that run as one-row decode pieces (the dot-product kernel's rows): all of
  // them for decode_rows; else its last token when it is alone (a decode step) or when
  // max_pass_rows-sized chunks leave exactly one over, as they do when the sequence runs by itself.
  // All other tokens are GEMM rows, however the passes cut them, so every row gets the kernel, and
  // so the numbers, it gets alone.
  std::int64_t decode_tail(const SequenceInput& in) const {
    const auto n = static_cast<std::int64_t>(in.tokens.size());
    return in.decode_rows ? n : n == 1 || n % impl_->workspace.max_pass_rows == 1 ? 1 : 0;
  }

  // The next pass: first the rows of each sequence whose decode tail is next, then GEMM rows of
  // the others up to max_pass_rows rows, in batch order.
  bool plan_pass(std::span<const SequenceInput> batch) {
    Impl& m = *impl_;
    const std::int64_t cap = m.workspace.max_pass_rows;
    m.pass_seqs.clear();
    m.pass_images.clear();
    m.pass_rows = 0;
    for (std::size_t i = 0; i < batch.size() && m.pass_rows < cap; ++i) {
      const std::int64_t n = static_cast<std::int64_t>(batch[i].tokens.size()), tail = decode_tail(batch[i]);
      if (tail == 0 || m.fed[i] < n - tail || m.fed[i] == n) continue;
      const std::int64_t take = std::min(n - m.fed[i], cap - m.pass_rows);
      add_piece(batch[i], m.fed[i], take);
      m.fed[i] += take;
    }
    m.pass_decode_rows = m.pass_rows;
    for (std::size_t i = 0; i < batch.size() && m.pass_rows < cap; ++i) {
      const std::int64_t n = static_cast<std::int64_t>(batch[i].tokens.size()), left = n - decode_tail(batch[i]) - m.fed[i];
      if (left <= 0) continue;
      const std::int64_t take = gemm_take(batch[i].cache, left, cap - m.pass_rows);
      add_piece(batch[i], m.fed[i], take);
      m.fed[i] += take;
    }
    return !m.pass_seqs.empty();
  }

  // GEMM rows of a sequence with `left` to feed in a pass with `room`: all that fits, except that a cache with
  // recurrent states is cut at a multiple of the delta rule's chunk (its chunks start at absolute multiples of
  // it), so its numbers do not depend on its neighbours; only a pass too full to reach one cuts elsewhere.
  static std::int64_t gemm_take(const KVCache& cache, std::int64_t left, std::int64_t room) {
    const std::int64_t take = std::min(left, room);
    if (take == left || !cache.has_states()) return take;
    const std::int64_t pos = cache.size(), aligned = (pos + take) / kernels::delta_chunk * kernels::delta_chunk - pos;
    return aligned > 0 ? aligned : take;
  }

  // Tokens [from, from + n) of one sequence as the next piece of the pass, with the output rows it owns.
  void add_piece(const SequenceInput& in, std::int64_t from, std::int64_t n) {
    Impl& m = *impl_;
    const std::int64_t total = static_cast<std::int64_t>(in.tokens.size()), V = vocab_size(), H = hidden_size();
    // rows [first, first + count) of the piece wanted under `which`, and the piece's first row in the output buffers
    struct Rows {
      std::int64_t first = 0, count = 0, at = 0;
    };
    auto wanted = [&](Positions which) {
      if (which == Positions::all) return Rows{0, n, from};
      return Rows{n - 1, from + n == total ? 1 : 0, 0};
    };
    auto part = [&](std::span<float> s, const Rows& r, std::int64_t width) {
      return s.empty() || r.count == 0 ? std::span<float>{} : s.subspan(static_cast<std::size_t>(r.at * width), static_cast<std::size_t>(r.count * width));
    };
    OutputRows out;
    if (!in.out.logits.empty() || !in.out.greedy.empty() || !in.out.top.empty() || !in.out.drawn.empty()) {
      const Rows r = wanted(in.out.positions);
      const auto row = static_cast<std::size_t>(r.at), count = static_cast<std::size_t>(r.count);
      out.first = r.first, out.count = r.count;
      out.logits = part(in.out.logits, r, V);
      if (!in.out.greedy.empty() && count > 0) out.greedy = in.out.greedy.subspan(row, count);
      if (!in.out.top.empty() && count > 0) out.top = in.out.top.subspan(row * static_cast<std::size_t>(in.out.top_k), count * static_cast<std::size_t>(in.out.top_k));
      out.top_k = in.out.top_k;
      if (!in.out.drawn.empty() && count > 0) {
        out.drawn = in.out.drawn.subspan(row, count);
        out.draws = in.out.draws.subspan(row, count);
      }
      out.pick_end = in.out.pick_end > 0 ? in.out.pick_end : V;
    }
    if (!in.out.hidden.empty()) {
      const Rows r = wanted(in.out.hidden_positions.value_or(in.out.positions));
      out.hidden_first = r.first, out.hidden_count = r.count;
      out.hidden = part(in.out.hidden, r, H);
    }
    const std::span<const float> hidden_in =
        in.hidden_in.empty() ? in.hidden_in : in.hidden_in.subspan(static_cast<std::size_t>(from * H), static_cast<std::size_t>(n * H));
    std::span<const ImageRows> images;
    if (!in.images.empty()) {  // the piece's share of the images, in pass_images (reserved by run_passes: the spans stay valid)
      const std::size_t first = m.pass_images.size();
      clip_images(in.images, from, n, H, m.pass_images);
      images = std::span<const ImageRows>(m.pass_images).subspan(first);
    }
    m.pass_seqs.push_back({&in.cache, in.tokens.subspan(static_cast<std::size_t>(from), static_cast<std::size_t>(n)), m.pass_rows, out,
                           in.keep_states, hidden_in, images});
    m.pass_rows += n;
  }

  static constexpr std::size_t max_kept_states = 16;  // per input (a pass's state pointers are sized for them)

  // Every pass of the batch through `net` (the model's, or the MTP head's).
  void run_passes(std::span<const SequenceInput> batch, typename Impl::Net& net) {
    Impl& m = *impl_;
    m.fed.assign(batch.size(), 0);
    std::size_t images = 0;  // a pass holds at most one piece of each sequence, so its clipped images fit in this
    for (const SequenceInput& in : batch) images += in.images.size();
    m.pass_images.reserve(images);
    while (plan_pass(batch)) {
      const Pass pass{m.pass_seqs, m.pass_rows, m.pass_decode_rows};
      // A backend that holds a pass's work back (CUDA: to replay a repeated pass as one graph)
      // is told where each pass starts and ends.
      if constexpr (requires { m.backend.begin_pass(); }) m.backend.begin_pass();
      std::visit([&](auto& n) { n->forward(m.backend, m.workspace, pass); }, net);
      if constexpr (requires { m.backend.end_pass(); }) m.backend.end_pass();
    }
  }

  // c: the config of the caches (the model's, or mtp_head_config).
  void validate(std::span<const SequenceInput> batch, const ModelConfig& c) const {
    if (batch.empty()) throw Error(ErrorCategory::request, "batch", "no sequences");
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const SequenceInput& s = batch[i];
      // built only for an error: validation runs on every decode step and must not allocate
      auto where = [&] { return batch.size() == 1 ? std::string() : "sequence " + std::to_string(i) + ": "; };
      if (s.tokens.empty()) throw Error(ErrorCategory::request, "tokens", where() + "empty token list");
      if ((!s.out.logits.empty() || !s.out.greedy.empty() || !s.out.top.empty() || !s.out.drawn.empty()) && !has_lm_head())
        throw Error(ErrorCategory::request, "logits", checkpoint().dir().string() + " has no lm_head: it is an embedding model; use embed");
      if (s.out.pick_end < 0 || s.out.pick_end > vocab_size())
        throw Error(ErrorCategory::request, "pick_end", where() + std::to_string(s.out.pick_end) + " is outside [0, " +
                                                              std::to_string(vocab_size()) + "]");
      if (!s.images.empty()) check_image_rows(s.tokens, s.images, s.cache, hidden_size(), has_vision(), where());
      for (int id : s.tokens)
        if ((id < 0 && s.images.empty()) || id >= vocab_size())
          throw Error(ErrorCategory::request, "tokens", where() + "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                                            std::to_string(vocab_size()) + ")");
      if (s.keep_states.size() > max_kept_states ||
          !std::is_sorted(s.keep_states.begin(), s.keep_states.end()) ||
          std::any_of(s.keep_states.begin(), s.keep_states.end(), [&](std::int64_t p) { return p <= s.cache.size() || p > s.cache.size() + static_cast<std::int64_t>(s.tokens.size()); }))
        throw Error(ErrorCategory::request, "keep_states", where() + "at most " + std::to_string(max_kept_states) +
                                                               " ascending positions within the tokens fed");
      if (!s.cache.fits(c))
        throw Error(ErrorCategory::request, "kv cache", where() + "the cache has another layer or head shape than this model");
      s.cache.check_room(static_cast<std::int64_t>(s.tokens.size()));
      for (std::size_t j = 0; j < i; ++j)
        if (&batch[j].cache == &s.cache)
          throw Error(ErrorCategory::request, "kv cache", where() + "shares its cache with sequence " + std::to_string(j));
      const std::size_t rows = s.out.positions == Positions::all ? s.tokens.size() : 1;
      const std::size_t hidden_rows = s.out.hidden_positions.value_or(s.out.positions) == Positions::all ? s.tokens.size() : 1;
      if (!fits(s.out.logits, rows * static_cast<std::size_t>(vocab_size())))
        throw output_error(where() + "logits", s.out.logits.size(), rows * static_cast<std::size_t>(vocab_size()));
      if (!fits(s.out.hidden, hidden_rows * static_cast<std::size_t>(hidden_size())))
        throw output_error(where() + "hidden states", s.out.hidden.size(), hidden_rows * static_cast<std::size_t>(hidden_size()));
      if (!s.out.greedy.empty() && s.out.greedy.size() < rows)
        throw Error(ErrorCategory::request, "outputs", where() + "greedy output buffer holds " + std::to_string(s.out.greedy.size()) +
                                                         " ids, needs " + std::to_string(rows));
      if (!s.out.top.empty() && (s.out.top_k < 1 || s.out.top_k > vocab_size()))
        throw Error(ErrorCategory::request, "top_k", where() + std::to_string(s.out.top_k) + " is outside [1, " + std::to_string(vocab_size()) + "]");
      if (!s.out.top.empty() && s.out.top.size() < rows * static_cast<std::size_t>(s.out.top_k))
        throw Error(ErrorCategory::request, "outputs", where() + "top-k output buffer holds " + std::to_string(s.out.top.size()) +
                                                         " entries, needs " + std::to_string(rows * static_cast<std::size_t>(s.out.top_k)));
      if (!s.out.drawn.empty()) check_draws(s.out, rows, where);
    }
  }
  // drawn and draws [rows], each draw within kernels::RowDraw's ranges.
  template <class Where>
  static void check_draws(const ForwardOutputs& out, std::size_t rows, const Where& where) {
    if (out.drawn.size() < rows || out.draws.size() < rows)
      throw Error(ErrorCategory::request, "outputs", where() + "draw output buffers hold " + std::to_string(out.drawn.size()) + " ids and " +
                                                       std::to_string(out.draws.size()) + " draws, need " + std::to_string(rows));
    for (const kernels::RowDraw& d : out.draws.first(rows))
      if (!(d.inv_temperature > 0.0f && d.inv_temperature < std::numeric_limits<float>::infinity()) || !(d.min_weight > 0.0f && d.min_weight <= 1.0f) ||
          !(d.u >= 0.0 && d.u < 1.0) || !(d.top_p > 0.0f && d.top_p <= 1.0f))
        throw Error(ErrorCategory::request, "draws",
                    where() + "a draw needs inv_temperature finite and above 0, min_weight in (0, 1], u in [0, 1) and top_p in (0, 1]");
  }
  static bool fits(std::span<const float> buffer, std::size_t needed) { return buffer.empty() || buffer.size() >= needed; }
  static Error output_error(const std::string& what, std::size_t has, std::size_t needed) {
    return Error(ErrorCategory::request, "outputs",
                 what + " output buffer holds " + std::to_string(has) + " floats, needs " + std::to_string(needed));
  }

  std::unique_ptr<Impl> impl_;
};

}  // namespace kylin
