// GenerationStats: the token counts and times of one generation (Generation::stats), apart from
// the Session so the server's transport can carry them without the engine's headers.
#pragma once

#include <cstdint>

namespace kylin {

struct GenerationStats {
  double load_ms = 0;
  std::int64_t prompt_tokens = 0;
  std::int64_t cached_tokens = 0;     // prompt tokens reused from the KV cache (or loaded from a PromptCache)
  double cache_load_ms = 0;           // reading a stored prefix from GenerateOptions::prompt_cache
  std::int64_t prefill_tokens = 0;    // prompt tokens actually run
  double prefill_ms = 0;
  double prefill_tok_s = 0;
  double ttft_ms = 0;                 // call start to first sampled token
  std::int64_t generated_tokens = 0;
  double decode_ms = 0;
  double decode_tok_s = 0;
  // Speculative decoding (generate/speculative.hpp): tokens proposed by the draft model or prompt
  // lookup, those the target accepted, the target's passes after the first token (each a one-row
  // step or a verification of drafts), and the time spent in the draft model's forward passes
  // after the first token (within decode_ms; its prompt catch-up is in prefill_ms).
  std::int64_t draft_tokens = 0;
  std::int64_t draft_accepted = 0;
  std::int64_t decode_passes = 0;
  double draft_ms = 0;
};

}  // namespace kylin
