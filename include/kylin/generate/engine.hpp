// Engine: everything loaded from one model directory that generation needs — the model, its
// tokenizer, its chat template, the sampling defaults of generation_config.json and the
// end-of-sequence ids. Sessions borrow it; one Engine can serve many sessions in turn.
#pragma once

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "kylin/chat/chat_template.hpp"
#include "kylin/generate/chat_images.hpp"
#include "kylin/generate/embed.hpp"
#include "kylin/generate/rerank.hpp"
#include "kylin/generate/sampler.hpp"
#include "kylin/model/model.hpp"
#include "kylin/tokenizer/tokenizer.hpp"

namespace kylin {

// The ids a tokenizer can decode: what the sampler may return for a model using it.
inline SampleableIds sampleable_ids(const Tokenizer& tokenizer) {
  return SampleableIds::scan(static_cast<std::size_t>(tokenizer.vocab_size()),
                             [&](int id) { return tokenizer.id_to_token(id).has_value(); });
}

// For a model directory: its tokenizer's ids, or every id when it has no tokenizer files
// (then token ids are all there is, as for `kylin generate --tokens`).
inline SampleableIds sampleable_ids(const std::filesystem::path& model_dir) {
  const bool has_tokenizer = std::filesystem::exists(model_dir / "tokenizer.json") ||
                             (std::filesystem::exists(model_dir / "vocab.json") &&
                              std::filesystem::exists(model_dir / "merges.txt"));  // as Tokenizer::from_dir
  return has_tokenizer ? sampleable_ids(Tokenizer::from_dir(model_dir)) : SampleableIds{};
}

struct EngineOptions {
  std::string backend = "cpu";                // a name in backends(): "cuda" in a KYLIN_CUDA build with a GPU
  int threads = 0;                            // 0: all hardware threads
  std::int64_t max_pass_rows = 512;           // rows of one batched pass (prefill tokens, decode rows)
  std::optional<std::int64_t> context_length = std::nullopt;  // default: default_context_length(config, kv_dtype)
  DType kv_dtype = DType::f32;  // f16: half the KV memory and long-context reads (docs/PERFORMANCE.md)
  WeightFormat weights = WeightFormat::stored;  // q8/q4: projections quantized at load (docs/QUANTIZATION.md)
  WeightLayout weight_layout = WeightLayout::packed;  // stored: matmuls read the checkpoint's bytes in place (docs/PERFORMANCE.md)
  io::FileMemory checkpoint_memory = io::FileMemory::mapped;  // copied: read into huge pages at load (`--no-mmap`, stored layout)
  kernels::PrefillActivations prefill_activations = kernels::PrefillActivations::f32;  // bf16: faster prefill, not exact (docs/PERFORMANCE.md)
  ExpertMemory experts = ExpertMemory::held;  // mapped: MoE experts read from the mapped file as routed (docs/PERFORMANCE.md)
  MtpHead mtp = MtpHead::skipped;  // loaded: the checkpoint's MTP head, for SpeculativeOptions::mtp (docs/SPECULATIVE.md)
  std::int64_t mtp_vocab = 0;      // > 0: the head drafts among ids [0, mtp_vocab) only (ModelOptions::mtp_vocab)
  // > 0: the image processor's pixel bounds (smart_resize) instead of preprocessor_config.json's
  // size.shortest_edge / size.longest_edge (`--image-min-pixels`, `--image-max-pixels`).
  std::int64_t image_min_pixels = 0, image_max_pixels = 0;
};

class Engine {
 public:
  static std::unique_ptr<Engine> load(const std::filesystem::path& dir, const EngineOptions& options = {}) {
    return std::unique_ptr<Engine>(new Engine(dir, options));
  }

  Model& model() { return model_; }
  const Model& model() const { return model_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const ChatTemplate& chat_template() const { return *template_; }
  bool has_chat_template() const { return template_ != nullptr; }
  const SamplingParams& default_sampling() const { return default_sampling_; }
  const std::vector<int>& eos_ids() const { return eos_ids_; }
  // Logit rows that are tokens (computed once): Sessions sample only these.
  const SampleableIds& sampleable_ids() const { return sampleable_ids_; }
  bool is_eos(int id) const { return std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end(); }
  // The id of the token that opens a chat turn (ArchInfo::turn_start), -1 when the tokenizer has none.
  int turn_start_id() const { return turn_start_id_; }
  std::int64_t context_length() const { return context_length_; }
  double load_ms() const { return load_ms_; }
  const std::filesystem::path& dir() const { return dir_; }

  // Images (generate/chat_images.hpp): whether the model has its vision tower, the processor that turns images
  // into its pixel values, and the id the chat template writes once per image.
  bool has_vision() const { return processor_.has_value(); }
  const vision::ProcessorConfig& image_processor() const {
    if (!processor_) throw Error(ErrorCategory::request, "images", no_images_);
    return *processor_;
  }
  int image_pad_id() const { return has_vision() ? static_cast<int>(model_.vision_config()->image_token_id) : -1; }
  // `ids` as the chat template rendered them (one image pad per image), the images encoded in and expanded.
  // With a tower, a pad without its image is refused (its token alone would be silent garbage).
  ImagePrompt encode_images(std::span<const int> ids, std::span<const vision::Image> images, const std::string& field = "messages") {
    if (images.empty() && !has_vision()) {
      ImagePrompt text;
      text.ids.assign(ids.begin(), ids.end());
      return text;
    }
    return encode_prompt_images(model_, ids, image_pad_id(), images, image_processor(), field);
  }

  // Embeddings (generate/embed.hpp) of a sentence-transformers directory: texts get the prompt and
  // the tokenizer's post-processor; token inputs run as given.
  bool can_embed() const { return embedding_.has_value(); }
  EmbedResult embed(std::span<const std::string> texts, const EmbedOptions& o = {}) {
    const io::EmbeddingInfo& info = embedding_info();
    if (texts.empty()) throw Error(ErrorCategory::request, "input", "no inputs to embed");
    return embed_ids(model_, info, context_length_, embedding_ids(tokenizer_, info, texts, o), o);
  }
  EmbedResult embed_tokens(std::span<const std::vector<int>> inputs, const EmbedOptions& o = {}) {
    const io::EmbeddingInfo& info = embedding_info();
    if (!o.prompt_name.empty())
      throw Error(ErrorCategory::request, "prompt_name", "applies to text inputs only; token inputs run as given");
    return embed_ids(model_, info, context_length_, inputs, o);
  }
  // Relevance of each document to `query` as a Qwen3-Reranker scores it (generate/rerank.hpp).
  Reranking rerank(std::string_view query, std::span<const std::string> documents, const RerankOptions& o = {}) {
    if (!model_.has_lm_head())
      throw Error(ErrorCategory::request, dir_.string(), "cannot rerank: the model has no lm_head (an embedding model?)");
    const RerankAnswerIds answer = rerank_answer_ids(tokenizer_);
    const auto ids = rerank_ids(tokenizer_, query, documents, o, context_length_);  // [documents][tokens]
    return rerank_scores(model_, answer, ids, o.top_n);
  }
  const io::EmbeddingInfo& embedding_info() const {
    if (!embedding_)
      throw Error(ErrorCategory::request, dir_.string(), "cannot embed: not a sentence-transformers embedding model (no modules.json)");
    return *embedding_;
  }

 private:
  Engine(const std::filesystem::path& dir, const EngineOptions& o)
      : dir_(dir),
        started_(std::chrono::steady_clock::now()),
        model_(Model::load(dir, {.backend = o.backend, .threads = o.threads, .max_pass_rows = o.max_pass_rows, .kv_dtype = o.kv_dtype, .weights = o.weights,
                               .weight_layout = o.weight_layout, .checkpoint_memory = o.checkpoint_memory,
                               .prefill_activations = o.prefill_activations, .experts = o.experts, .mtp = o.mtp, .mtp_vocab = o.mtp_vocab})),
        tokenizer_(Tokenizer::from_dir(dir)) {
    tokenizer_.check_model_vocab(model_.vocab_size(), (dir / "config.json").string());
    sampleable_ids_ = kylin::sampleable_ids(tokenizer_);
    if (has_template_file(dir)) template_ = std::make_unique<ChatTemplate>(ChatTemplate::from_dir(dir));
    // No generation_config.json means transformers' GenerationConfig defaults (do_sample false).
    const json::Value& gen = model_.generation_config();
    default_sampling_ = from_generation_config(gen.is_null() ? json::Value(json::Object{}) : gen);
    collect_eos_ids();
    turn_start_id_ = tokenizer_.token_to_id(arch_info(model_.config().model_type).turn_start).value_or(-1);
    embedding_ = io::load_embedding_info(dir);
    if (embedding_ && embedding_->dimension != model_.hidden_size())
      throw Error(ErrorCategory::config, (dir / "modules.json").string(), "the Pooling module's word_embedding_dimension " +
                                                                              std::to_string(embedding_->dimension) + " is not hidden_size " +
                                                                              std::to_string(model_.hidden_size()));
    if (model_.has_vision()) load_processor(o);
    context_length_ = o.context_length.value_or(default_context_length(model_.config(), o.kv_dtype));
    if (context_length_ <= 0) throw Error(ErrorCategory::config, "context length", "must be positive");
    load_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started_).count();
  }

  void load_processor(const EngineOptions& o) {
    vision::ProcessorConfig c = vision::ProcessorConfig::from_dir(dir_);
    if (o.image_min_pixels > 0) c.min_pixels = o.image_min_pixels;
    if (o.image_max_pixels > 0) c.max_pixels = o.image_max_pixels;
    if (c.min_pixels > c.max_pixels)
      throw Error(ErrorCategory::config, "image pixels", "min_pixels " + std::to_string(c.min_pixels) + " is above max_pixels " + std::to_string(c.max_pixels));
    // A checkpoint beside a tokenizer without the image pad (a text-only copy) runs as a text model.
    const std::int64_t pad = model_.vision_config()->image_token_id;
    if (pad < 0 || pad >= model_.vocab_size() || !tokenizer_.id_to_token(static_cast<int>(pad))) {
      no_images_ = "the tokenizer has no token for config.json's image_token_id " + std::to_string(pad) + ": this model takes no images";
      return;
    }
    processor_ = c;
  }

  // A directory may carry only tokenizer.json: chat then fails with a clear error at use.
  static bool has_template_file(const std::filesystem::path& dir) {
    if (std::filesystem::exists(dir / "chat_template.jinja")) return true;
    const auto path = dir / "tokenizer_config.json";
    if (!std::filesystem::exists(path)) return false;
    const json::Value config = json::parse(io::read_text_file(path), path.string());  // named: t points into it
    const json::Value* t = config.find("chat_template");
    return t && !t->is_null();
  }

  // config.json and generation_config.json eos ids, plus the architecture's chat end-of-turn
  // tokens that the tokenizer defines (ArchInfo::end_of_turn): a chat model stops at either.
  void collect_eos_ids() {
    auto add = [&](std::int64_t id) {
      if (id >= 0 && id < model_.vocab_size() && !is_eos(static_cast<int>(id))) eos_ids_.push_back(static_cast<int>(id));
    };
    for (auto id : model_.config().eos_token_id) add(id);
    if (const json::Value* e = model_.generation_config().find("eos_token_id")) {
      if (e->is_int()) add(e->as_int());
      if (e->is_array())
        for (const auto& x : e->as_array())
          if (x.is_int()) add(x.as_int());
    }
    for (std::string_view token : arch_info(model_.config().model_type).end_of_turn)
      if (auto id = tokenizer_.token_to_id(token)) add(*id);
  }

  std::filesystem::path dir_;
  std::chrono::steady_clock::time_point started_;
  Model model_;
  Tokenizer tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  SamplingParams default_sampling_;
  std::vector<int> eos_ids_;
  int turn_start_id_ = -1;
  SampleableIds sampleable_ids_;
  std::int64_t context_length_ = 0;
  std::optional<vision::ProcessorConfig> processor_;  // set when the model has its vision tower and its tokenizer the image pad
  std::string no_images_ = "this model has no vision tower (vision_config): it takes no images";  // why, without
  std::optional<io::EmbeddingInfo> embedding_;  // a sentence-transformers directory's pooling and prompts
  double load_ms_ = 0;
};

}  // namespace kylin
