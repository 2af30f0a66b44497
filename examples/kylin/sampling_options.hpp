// Command-line sampling options shared by `kylin run`, `chat` and `generate`: each one set on
// the command line overrides the model's generation_config.json default.
#pragma once

#include <CLI/CLI.hpp>

#include "kylin/generate/sampler_params.hpp"

namespace kylin::cli {

struct SamplingFlags {
  bool greedy = false;
  std::optional<float> temperature, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
  std::optional<int> top_k;
  std::optional<std::uint64_t> seed;

  void add_to(CLI::App* cmd) {
    cmd->add_flag("--greedy", greedy, "Always pick the most likely token");
    cmd->add_option("--temp,--temperature", temperature, "Sampling temperature (0: greedy)");
    cmd->add_option("--top-k", top_k, "Keep the K most likely tokens (0: off)");
    cmd->add_option("--top-p", top_p, "Nucleus sampling mass in (0, 1]");
    cmd->add_option("--min-p", min_p, "Drop tokens below min_p x the top probability");
    cmd->add_option("--repeat-penalty", repeat_penalty, "HF repetition penalty (1: off)");
    cmd->add_option("--presence-penalty", presence_penalty, "OpenAI presence penalty");
    cmd->add_option("--frequency-penalty", frequency_penalty, "OpenAI frequency penalty");
    cmd->add_option("--seed", seed, "Random seed: the same seed reproduces the same output");
  }

  SamplingOverrides overrides() const {
    SamplingOverrides o;
    if (greedy) o.greedy = true;
    o.temperature = temperature;
    o.top_k = top_k;
    o.top_p = top_p;
    o.min_p = min_p;
    o.repetition_penalty = repeat_penalty;
    o.presence_penalty = presence_penalty;
    o.frequency_penalty = frequency_penalty;
    o.seed = seed;
    return o;
  }
};

}  // namespace kylin::cli
