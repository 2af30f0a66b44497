// Command-line speculative decoding options shared by `kylin run`, `chat`, `generate` and `bench`:
// a draft model (--draft) or the checkpoint's own MTP head (--mtp), how many tokens they propose, and prompt
// lookup (docs/SPECULATIVE.md).
#pragma once

#include <CLI/CLI.hpp>

#include <filesystem>
#include <memory>
#include <string>

#include "kylin/generate/engine.hpp"

#include "kylin/generate/speculative.hpp"

namespace kylin::cli {

struct SpeculativeFlags {
  std::string draft;  // draft model directory; empty: none
  int draft_max = SpeculativeOptions{}.max_draft;
  float p_min = SpeculativeOptions{}.p_min;
  int lookup = 0;
  int mtp = 0;  // MTP drafts per pass; 0: off
  std::int64_t mtp_vocab = 0;  // the head drafts among ids [0, mtp_vocab) only; 0: all

  static constexpr int default_mtp = 3;  // the drafts vLLM's and SGLang's Qwen3.5 / Qwen3-Next MTP recipes take

  void add_to(CLI::App* cmd) {
    cmd->add_option("--mtp", mtp, "Speculative decoding with the checkpoint's own MTP head (Qwen3.5, Qwen3.6, Qwen3-Next): K drafts "
                                  "per pass (--mtp alone: " + std::to_string(default_mtp) + ")")
        ->expected(0, 1)->default_str(std::to_string(default_mtp))->check(CLI::Range(1, SpeculativeOptions::max_draft_limit));
    cmd->add_option("--mtp-vocab", mtp_vocab, "The MTP head drafts among the first N token ids only (the earliest BPE merges), "
                                              "its LM head reading those rows: a cheaper draft step (0: all ids)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--draft", draft, "Draft model directory for speculative decoding: a smaller model with the same tokenizer");
    cmd->add_option("--draft-max", draft_max, "Most tokens drafted per verification pass")->check(CLI::Range(0, SpeculativeOptions::max_draft_limit));
    cmd->add_option("--draft-p-min", p_min, "The draft stops proposing once its top token's probability is below this")
        ->check(CLI::Range(0.0f, 1.0f));
    cmd->add_option("--lookup", lookup, "Prompt lookup drafts: longest n-gram matched in the prompt and output (0: off)")
        ->check(CLI::Range(0, SpeculativeOptions::max_lookup));
  }

  bool any() const { return !draft.empty() || lookup > 0 || mtp > 0; }

  // --mtp loads the model's MTP head; it drafts instead of a draft model, not beside one.
  void apply(EngineOptions& target) const {
    if (mtp > 0 && !draft.empty())
      throw Error(ErrorCategory::request, "--mtp", "the MTP head drafts instead of a draft model: leave out --draft or --mtp");
    if (mtp_vocab > 0 && mtp == 0) throw Error(ErrorCategory::request, "--mtp-vocab", "applies to --mtp drafts: add --mtp");
    if (mtp > 0) target.mtp = MtpHead::loaded, target.mtp_vocab = mtp_vocab;
  }

  // The draft engine to own, loaded with the target's options and checked against it: null
  // without --draft, and when --draft is the model's own directory (it drafts for itself).
  std::unique_ptr<Engine> load_draft(const Engine& target, const EngineOptions& options) const {
    std::error_code ec;
    if (draft.empty() || std::filesystem::equivalent(draft, target.dir(), ec)) return nullptr;
    EngineOptions draft_options = options;
    draft_options.mtp = MtpHead::skipped;
    auto e = Engine::load(draft, draft_options);
    check_draft(target, *e);
    return e;
  }

  // loaded: what load_draft returned.
  SpeculativeOptions options(Engine& target, Engine* loaded) const {
    return {.draft = loaded ? loaded : draft.empty() ? nullptr : &target, .mtp = mtp > 0, .max_draft = mtp > 0 ? mtp : draft_max, .p_min = p_min,
            .lookup = lookup};
  }
};

}  // namespace kylin::cli
