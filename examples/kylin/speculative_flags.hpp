// Command-line speculative decoding options shared by `kylin run`, `chat`, `generate` and `bench`:
// a draft model (--draft), how many tokens it proposes, and prompt lookup (docs/SPECULATIVE.md).
#pragma once

#include <CLI/CLI.hpp>

#include <filesystem>
#include <memory>
#include <string>

#include "kylin/generate/speculative.hpp"

namespace kylin::cli {

struct SpeculativeFlags {
  std::string draft;  // draft model directory; empty: none
  int draft_max = SpeculativeOptions{}.max_draft;
  float p_min = SpeculativeOptions{}.p_min;
  int lookup = 0;

  void add_to(CLI::App* cmd) {
    cmd->add_option("--draft", draft, "Draft model directory for speculative decoding: a smaller model with the same tokenizer");
    cmd->add_option("--draft-max", draft_max, "Most tokens drafted per verification pass")->check(CLI::Range(0, SpeculativeOptions::max_draft_limit));
    cmd->add_option("--draft-p-min", p_min, "The draft stops proposing once its top token's probability is below this")
        ->check(CLI::Range(0.0f, 1.0f));
    cmd->add_option("--lookup", lookup, "Prompt lookup drafts: longest n-gram matched in the prompt and output (0: off)")
        ->check(CLI::Range(0, SpeculativeOptions::max_lookup));
  }

  bool any() const { return !draft.empty() || lookup > 0; }

  // The draft engine to own, loaded with the target's options and checked against it: null
  // without --draft, and when --draft is the model's own directory (it drafts for itself).
  std::unique_ptr<Engine> load_draft(const Engine& target, const EngineOptions& options) const {
    std::error_code ec;
    if (draft.empty() || std::filesystem::equivalent(draft, target.dir(), ec)) return nullptr;
    auto e = Engine::load(draft, options);
    check_draft(target, *e);
    return e;
  }

  // loaded: what load_draft returned.
  SpeculativeOptions options(Engine& target, Engine* loaded) const {
    return {.draft = loaded ? loaded : draft.empty() ? nullptr : &target, .max_draft = draft_max, .p_min = p_min, .lookup = lookup};
  }
};

}  // namespace kylin::cli
