// VisionConfig: config.json's vision_config (the Qwen3.5 vision tower, transformers Qwen3_5VisionConfig) and the
// top-level image token ids, by their HF names; read when the architecture has a tower (ArchInfo::vision_config).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace kylin {

struct VisionConfig {
  std::int64_t depth = 27;                  // ViT blocks
  std::int64_t hidden_size = 1152;          // D
  std::int64_t num_heads = 16;              // D / num_heads = the head dim
  std::int64_t intermediate_size = 4304;    // the blocks' MLP width
  std::int64_t in_channels = 3;
  std::int64_t patch_size = 16;             // P
  std::int64_t temporal_patch_size = 2;     // frames per patch (an image is repeated to fill them)
  std::int64_t spatial_merge_size = 2;      // m: m x m patches merge into one text token
  std::int64_t num_position_embeddings = 2304;  // a side x side learned table, resampled to each grid
  std::int64_t out_hidden_size = 0;         // the merger's output: the text model's hidden_size
  std::string hidden_act = "gelu_pytorch_tanh";  // the blocks' MLP (the merger's GELU is always erf)
  std::int64_t image_token_id = -1, vision_start_token_id = -1, vision_end_token_id = -1;  // top-level fields

  std::int64_t head_dim() const { return hidden_size / num_heads; }
  std::int64_t patch_dim() const { return in_channels * temporal_patch_size * patch_size * patch_size; }
  std::int64_t merge_rows() const { return spatial_merge_size * spatial_merge_size; }  // patches per token
  std::int64_t position_side() const {  // the table's side: num_position_embeddings is its square
    std::int64_t s = 0;
    while ((s + 1) * (s + 1) <= num_position_embeddings) ++s;
    return s;
  }
};

// Multimodal RoPE of the text model (rope_parameters.mrope_section, mrope_interleaved): which of the three
// position rows (temporal, height, width) each rotary frequency takes. All zero: plain RoPE.
struct MRopeConfig {
  std::array<std::int64_t, 3> section{};  // frequencies per row; they sum to rotary_dim / 2
  bool interleaved = false;               // Qwen3.5: t h w t h w ...; else three consecutive runs (Qwen2-VL)

  bool enabled() const { return section[0] + section[1] + section[2] > 0; }
  // The row (0 temporal, 1 height, 2 width) frequency j reads (transformers apply_interleaved_mrope).
  int row_of(std::int64_t j) const {
    if (interleaved) {
      if (j % 3 == 1 && j < 3 * section[1]) return 1;
      if (j % 3 == 2 && j < 3 * section[2]) return 2;
      return 0;
    }
    return j < section[0] ? 0 : j < section[0] + section[1] ? 1 : 2;
  }
};

}  // namespace kylin
