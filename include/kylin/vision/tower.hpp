// VisionTower<B>: the Qwen3.5 vision encoder (transformers Qwen3_5VisionModel): patch embedding, the learned
// position table resampled to the grid, ViT blocks with 2D rotary attention over the whole image, and the merger
// that turns each 2x2 block of patches into one text-model embedding. Its products and attention run on a
// backend of its own (sized for the tower's shapes); the small row ops run on the host.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "kylin/backends/backend.hpp"
#include "kylin/vision/processor.hpp"
#include "kylin/vision/tower_weights.hpp"

namespace kylin::vision {

// An image through the tower: its text tokens' embeddings and the grid they cover.
struct ImageEmbedding {
  std::int64_t grid_h = 0, grid_w = 0;  // in text tokens (patches / spatial_merge_size per side)
  std::vector<float> embeds;            // [grid_h * grid_w, out_hidden] in row-major token order
  std::uint64_t hash = 0;               // of the pixel values and grid: its tokens' cache keys (image_token_key)
  std::int64_t tokens() const { return grid_h * grid_w; }
};

// FNV-1a over the grid and the pixel values' bytes: two inputs the tower would tell apart hash apart.
inline std::uint64_t pixel_hash(const PixelValues& px) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  };
  const std::int64_t grid[3] = {px.grid.t, px.grid.h, px.grid.w};
  mix(grid, sizeof grid);
  mix(px.values.data(), px.values.size() * sizeof(float));
  return h;
}

// The floating-point operations (2 per multiply-add) of one encode of `patches` patches: the patch embedding, per
// block the qkv, proj and MLP products and attention's two N x N x D products, the merger's two products.
inline double vision_flops(const VisionConfig& c, std::int64_t patches) {
  const double N = static_cast<double>(patches), D = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size);
  const double M = D * static_cast<double>(c.merge_rows()), T = N / static_cast<double>(c.merge_rows()), H = static_cast<double>(c.out_hidden_size);
  const double block = 2 * N * (4 * D * D + 2 * D * I) + 4 * N * N * D;
  return 2 * N * static_cast<double>(c.patch_dim()) * D + static_cast<double>(c.depth) * block + 2 * T * M * M + 2 * T * M * H;
}

namespace detail {

// y[n, w] = LayerNorm(x) * weight + bias over rows of width w (eps 1e-6, the biased variance), in double.
inline void layer_norm(const float* x, const LayerNormWeights& n, float* y, std::int64_t rows, std::int64_t w) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * w;
    double mean = 0, var = 0;
    for (std::int64_t i = 0; i < w; ++i) mean += in[i];
    mean /= static_cast<double>(w);
    for (std::int64_t i = 0; i < w; ++i) var += (in[i] - mean) * (in[i] - mean);
    const double inv = 1.0 / std::sqrt(var / static_cast<double>(w) + 1e-6);
    for (std::int64_t i = 0; i < w; ++i)
      y[r * w + i] = static_cast<float>((in[i] - mean) * inv * n.weight[static_cast<std::size_t>(i)] + n.bias[static_cast<std::size_t>(i)]);
  }
}

// GELU in place: the tanh approximation (gelu_pytorch_tanh, the blocks') or erf (the merger's, and "gelu").
inline void gelu(float* x, std::int64_t n, bool tanh_approx) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    x[i] = static_cast<float>(tanh_approx ? 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v)))
                                          : 0.5 * v * (1.0 + std::erf(v / std::numbers::sqrt2)));
  }
}

// Patch p's (row, column) in the grid: the processor orders patches by merge block (vision/processor.hpp).
struct PatchPlace {
  std::int64_t row, col;
};
inline PatchPlace patch_place(std::int64_t p, const GridTHW& g, std::int64_t m) {
  const std::int64_t in_block = p % (m * m), block = p / (m * m), blocks_w = g.w / m;
  const std::int64_t bw = block % blocks_w, bh = (block / blocks_w) % (g.h / m);
  return {bh * m + in_block / m, bw * m + in_block % m};
}

}  // namespace detail

// How the blocks attend: full, the backend's full_attention over the whole image (heads zero-padded to a multiple
// of 16 dims, so every kernel set's vector path takes them); per_row, one causal single-row query per patch seeing
// every key, for backends without full_attention (and as the tests' second path).
enum class TowerAttention { full, per_row };

template <Backend B>
class VisionTower {
 public:
  static constexpr std::int64_t chunk_rows = 256;  // rows of one product call (the backend's scratch is sized for them)

  VisionTower(const io::Checkpoint& ckpt, const VisionConfig& c, int threads, TowerAttention attention = TowerAttention::full)
      : config_(c), weights_(bind_vision_weights(ckpt, c)), backend_(backend_config(c), BackendOptions{.threads = threads, .max_pass_rows = chunk_rows}),
        full_(attention == TowerAttention::full && requires(B & b, const kernels::AttentionSeq& s) { b.full_attention(nullptr, nullptr, s, {}); }) {}

  const VisionConfig& config() const { return config_; }

  // The embeddings of one image's pixel values (vision/processor.hpp preprocess); kylin::Error (request) names
  // what does not fit the tower.
  ImageEmbedding encode(const PixelValues& px) {
    check(px);
    const std::int64_t N = px.grid.patches(), D = config_.hidden_size, I = config_.intermediate_size, m = config_.spatial_merge_size;
    Buffers buf(backend_, N, D, I, config_.head_dim(), padded_head_dim());
    // 1. patch embedding, x [N, D] = pixels [N, patch_dim] · W^T + b, plus the learned positions
    linear(px.values.data(), weights_.patch_embed, buf.x, N);
    add_positions(px.grid, buf.x);
    rotary_tables(px.grid, buf.cos, buf.sin);
    // 2. the blocks: x += attn(norm1(x)); x += mlp(norm2(x))
    for (const VisionBlockWeights& blk : weights_.blocks) {
      detail::layer_norm(buf.x, blk.norm1, buf.xn, N, D);
      attention(blk, buf, N);
      linear(buf.attn, blk.proj, buf.tmp, N);
      add(buf.x, buf.tmp, N * D);
      detail::layer_norm(buf.x, blk.norm2, buf.xn, N, D);
      linear(buf.xn, blk.fc1, buf.h, N);
      activate(buf.h, N * I);
      linear(buf.h, blk.fc2, buf.tmp, N);
      add(buf.x, buf.tmp, N * D);
    }
    // 3. merger: LayerNorm per patch, each m*m consecutive patches as one row [N/m^2, m^2 D], fc1, GELU (erf), fc2
    const std::int64_t T = N / (m * m), M = D * m * m, H = config_.out_hidden_size;
    detail::layer_norm(buf.x, weights_.merger_norm, buf.xn, N, D);
    linear(buf.xn, weights_.merger_fc1, buf.h, T);
    detail::gelu(buf.h, T * M, false);
    ImageEmbedding out{px.grid.h / m, px.grid.w / m, std::vector<float>(static_cast<std::size_t>(T * H)), pixel_hash(px)};
    linear(buf.h, weights_.merger_fc2, buf.tmp, T);
    std::memcpy(out.embeds.data(), buf.tmp, out.embeds.size() * sizeof(float));
    return out;
  }

 private:
  // The activations of one image, in the backend's memory (a host backend: the row ops read them in place).
  struct Buffers {
    Buffers(B& b, std::int64_t N, std::int64_t D, std::int64_t I, std::int64_t hd, std::int64_t hdp) {
      const std::int64_t wide = std::max(I, 4 * D), padded = hdp == hd ? 0 : N * D / hd * hdp;
      const std::int64_t floats[] = {N * D, N * D, N * D, N * D, N * D, N * D, N * D, N * wide, N * wide, N * hd / 2, N * hd / 2, padded, padded, padded, padded};
      std::size_t total = 0;
      for (std::int64_t f : floats) total += static_cast<std::size_t>(f + 16);
      mem = b.allocate(total * sizeof(float));
      float** views[] = {&x, &xn, &q, &k, &v, &attn, &keys, &h, &tmp, &cos, &sin, &qp, &kp, &vp, &op};
      std::size_t at = 0;
      for (std::size_t i = 0; i < std::size(views); ++i) *views[i] = mem.as<float>(at * sizeof(float)), at += static_cast<std::size_t>(floats[i] + 16);
      std::fill_n(qp, 3 * (padded + 16), 0.f);  // qp, kp, vp: the pad dims stay zero
    }
    Memory mem;
    float *x, *xn;           // [N, D] residual stream, normalised input
    float *q, *k, *v, *attn;  // [N, D] each
    float* keys;             // [heads, N, hd] the image's keys, stored head-major (its values go to h, free until the MLP)
    float *h, *tmp;          // [N, max(I, 4D)] the MLP's hidden rows, a product's output
    float *cos, *sin;        // [N, hd/2] the 2D rotary tables
    float *qp, *op;          // [N, heads, hdp] queries and outputs with zero-padded heads (full attention, hdp > hd)
    float *kp, *vp;          // [heads, N, hdp] keys and values likewise
  };

  // The head dim the full attention runs at: hd rounded up to 16 (72 -> 80).
  std::int64_t padded_head_dim() const {
    const std::int64_t hd = config_.head_dim();
    return full_ ? (hd + 15) / 16 * 16 : hd;
  }

  static ModelConfig backend_config(const VisionConfig& c) {
    ModelConfig m;
    m.model_type = "qwen3";  // shapes only: the backend sizes its scratch from them
    m.hidden_size = std::max({c.hidden_size * c.merge_rows(), c.out_hidden_size, c.patch_dim()});  // the widest product input
    m.intermediate_size = c.intermediate_size;
    m.num_attention_heads = m.num_key_value_heads = c.num_heads;
    m.head_dim = (c.head_dim() + 15) / 16 * 16;  // the attention scratch fits padded heads (padded_head_dim)
    m.vocab_size = 1;
    m.num_hidden_layers = c.depth;
    return m;
  }

  // The blocks' MLP activation: a backend with a vector GELU (the CPU's, over its threads) takes the tanh form.
  void activate(float* h, std::int64_t n) {
    const bool tanh_approx = config_.hidden_act == "gelu_pytorch_tanh";
    if constexpr (requires { backend_.gelu_tanh(h, n); })
      if (tanh_approx) return backend_.gelu_tanh(h, n);
    detail::gelu(h, n, tanh_approx);
  }

  void check(const PixelValues& px) const {
    const std::int64_t m = config_.spatial_merge_size;
    auto fail = [](const std::string& what) { throw Error(ErrorCategory::request, "pixel values", what); };
    if (px.patch_dim != config_.patch_dim()) fail("patches of " + std::to_string(px.patch_dim) + " values; the tower takes " + std::to_string(config_.patch_dim()));
    if (px.grid.t != 1) fail("a grid of " + std::to_string(px.grid.t) + " frames: the tower takes images (1 frame)");
    if (px.grid.h <= 0 || px.grid.w <= 0 || px.grid.h % m != 0 || px.grid.w % m != 0)
      fail("a grid of " + std::to_string(px.grid.h) + " x " + std::to_string(px.grid.w) + " patches, not whole " + std::to_string(m) + " x " + std::to_string(m) + " blocks");
    if (static_cast<std::int64_t>(px.values.size()) != px.grid.patches() * px.patch_dim) fail("values do not fill the grid");
  }

  // y[n, w.rows] = x · w^T + bias, in chunks of chunk_rows rows.
  void linear(const float* x, const Linear& l, float* y, std::int64_t n) {
    for (std::int64_t r0 = 0; r0 < n; r0 += chunk_rows) {
      const std::int64_t r = std::min(chunk_rows, n - r0);
      backend_.matmul(x + r0 * l.w.cols, l.w, l.bias.data(), y + r0 * l.w.rows, kernels::chunk_plan(r));
    }
  }
  void add(float* acc, const float* x, std::int64_t n) { backend_.add(acc, x, n); }

  // x += the side x side table resampled bilinearly to the grid, align_corners=True (transformers
  // Qwen3VLVisionModel.fast_pos_embed_interpolate: y = row * (side - 1) / (h - 1)).
  void add_positions(const GridTHW& g, float* x) const {
    const std::int64_t side = config_.position_side(), D = config_.hidden_size;
    auto at = [&](std::int64_t i, std::int64_t n) { return n == 1 ? 0.0 : static_cast<double>(i) * static_cast<double>(side - 1) / static_cast<double>(n - 1); };
    for (std::int64_t p = 0; p < g.patches(); ++p) {
      const detail::PatchPlace pl = detail::patch_place(p, g, config_.spatial_merge_size);
      const double y = at(pl.row, g.h), xx = at(pl.col, g.w);
      const auto y0 = static_cast<std::int64_t>(y), x0 = static_cast<std::int64_t>(xx);
      const std::int64_t y1 = std::min(y0 + 1, side - 1), x1 = std::min(x0 + 1, side - 1);
      const double dy = y - static_cast<double>(y0), dx = xx - static_cast<double>(x0);
      const float* t = weights_.pos_embed.data();
      const float *a = t + (y0 * side + x0) * D, *b = t + (y0 * side + x1) * D, *c = t + (y1 * side + x0) * D, *d = t + (y1 * side + x1) * D;
      for (std::int64_t i = 0; i < D; ++i)
        x[p * D + i] += static_cast<float>((1 - dy) * (1 - dx) * a[i] + (1 - dy) * dx * b[i] + dy * (1 - dx) * c[i] + dy * dx * d[i]);
    }
  }

  // cos/sin [N, hd/2]: the first hd/4 angles row * f_i, the next col * f_i, f_i = 10000^(-4i / hd) (transformers
  // Qwen3VLVisionModel.rot_pos_emb); the kernels' rotate_half pairs dim i with i + hd/2 over the whole head.
  void rotary_tables(const GridTHW& g, float* cos, float* sin) const {
    const std::int64_t half = config_.head_dim() / 2, quarter = half / 2;
    for (std::int64_t p = 0; p < g.patches(); ++p) {
      const detail::PatchPlace pl = detail::patch_place(p, g, config_.spatial_merge_size);
      for (std::int64_t i = 0; i < half; ++i) {
        const std::int64_t f = i % quarter;
        const double angle = static_cast<double>(i < quarter ? pl.row : pl.col) / std::pow(10000.0, 2.0 * static_cast<double>(f) / static_cast<double>(half));
        cos[p * half + i] = static_cast<float>(std::cos(angle));
        sin[p * half + i] = static_cast<float>(std::sin(angle));
      }
    }
  }

  // buf.attn = softmax(q k^T / sqrt(hd)) v over every patch of the image (not causal), q/k rotated: the keys and
  // values stored head-major, then one single-row query "sequence" per patch that sees all N keys.
  void attention(const VisionBlockWeights& blk, Buffers& buf, std::int64_t N) {
    const std::int64_t heads = config_.num_heads, hd = config_.head_dim();
    linear(buf.xn, blk.q, buf.q, N);
    linear(buf.xn, blk.k, buf.k, N);
    linear(buf.xn, blk.v, buf.v, N);
    const kernels::KVRef K{DType::f32, buf.keys}, V{DType::f32, buf.h};  // buf.h: free until the MLP
    const kernels::AttentionSeq all{K, V, N * hd, 0, N, 0};
    backend_.attention_inputs({buf.q, buf.k, buf.v, N, heads, heads, hd}, {}, {buf.cos, buf.sin, hd}, std::span(&all, 1));
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
    if constexpr (requires(const kernels::AttentionSeq& s) { backend_.full_attention(buf.q, buf.attn, s, {}); })
      if (full_) return full_attention(buf, N, scale);
    seqs_.clear();
    for (std::int64_t t = 0; t < N; ++t) seqs_.push_back({K, V, N * hd, t, 1, N - 1});
    backend_.attention(buf.q, buf.attn, seqs_, {heads, heads, hd, scale});
  }

  // buf.attn from the rotated buf.q and the head-major keys (buf.keys) and values (buf.h), through the backend's
  // full attention; heads of a dim not a multiple of 16 run zero-padded (the pads add nothing to q.k or the output).
  void full_attention(Buffers& buf, std::int64_t N, float scale) {
    const std::int64_t heads = config_.num_heads, hd = config_.head_dim(), hdp = padded_head_dim();
    if (hdp == hd) {
      const kernels::AttentionSeq seq{{DType::f32, buf.keys}, {DType::f32, buf.h}, N * hd, 0, N, 0};
      return backend_.full_attention(buf.q, buf.attn, seq, {heads, heads, hd, scale});
    }
    for (std::int64_t r = 0; r < N * heads; ++r) {  // row r: token r / heads, head r % heads
      const std::int64_t t = r / heads, h = r % heads;
      std::copy_n(buf.q + r * hd, hd, buf.qp + r * hdp);
      std::copy_n(buf.keys + (h * N + t) * hd, hd, buf.kp + (h * N + t) * hdp);
      std::copy_n(buf.h + (h * N + t) * hd, hd, buf.vp + (h * N + t) * hdp);
    }
    const kernels::AttentionSeq seq{{DType::f32, buf.kp}, {DType::f32, buf.vp}, N * hdp, 0, N, 0};
    backend_.full_attention(buf.qp, buf.op, seq, {heads, heads, hdp, scale});
    for (std::int64_t r = 0; r < N * heads; ++r) std::copy_n(buf.op + r * hdp, hd, buf.attn + r * hd);
  }

  VisionConfig config_;
  VisionWeights weights_;
  B backend_;
  bool full_;                                // TowerAttention::full on a backend that has it
  std::vector<kernels::AttentionSeq> seqs_;  // [N] one a query row (per_row)
};

}  // namespace kylin::vision
