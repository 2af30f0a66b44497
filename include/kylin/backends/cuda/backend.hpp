// CudaBackend<Runtime>: the Backend concept on a CUDA device. Workspace and KV caches live in
// device memory, weights are uploaded once (at first use) in their stored dtype, decode rows take
// the matvec kernel and prefill rows cuBLAS; logits come back to the host. The Runtime is the GPU
// (device_runtime.hpp) or, in the tests, the host emulation (tests/common/cuda_emulator/).
#pragma once

#include <algorithm>
#include <cassert>
#include <concepts>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kylin/backends/backend.hpp"
#include "kylin/backends/cuda/gemm_call.hpp"
#include "kylin/backends/cuda/kernels.hpp"
#include "kylin/backends/cuda/row_picks.hpp"
#include "kylin/kernels/ops.hpp"
#include "kylin/kernels/quant.hpp"

namespace kylin::cuda {

// What CudaBackend needs from a device: memory, copies, kernel launches and cublasGemmEx.
template <class R>
concept Runtime = requires(R& r, std::size_t n, void* p, const void* cp, const GemmCall& g, const FillKernel& k) {
  { R::name } -> std::convertible_to<std::string_view>;
  { r.allocate(n) } -> std::same_as<Memory>;  // Placement::device
  r.to_device(p, cp, n);                       // ordered after earlier launches; the host buffer may be reused on return
  r.to_host(p, cp, n);                         // waits for earlier launches
  r.launch(k);                                 // any kernel of kernels.hpp, at k.shape()
  r.gemm(g);
  r.begin_pass();                              // a forward pass starts: its work may be held back ...
  r.end_pass();                                // ... until here (or a copy to the host) issues it
};

template <Runtime R>
class CudaBackend {
 public:
  // Staging for the small per-call host arguments (row selections, attention sequences) and the
  // BF16 halves of a GEMM's f32 input, sized once for the widest matrix input and max_pass_rows rows.
  CudaBackend(const ModelConfig& c, const BackendOptions& o)
      : rows_(std::max<std::int64_t>(1, o.max_pass_rows)),
        widest_(std::max({c.hidden_size, c.intermediate_size, c.q_dim(), c.moe ? c.moe->moe_intermediate_size : 0})),
        split_(runtime_.allocate(static_cast<std::size_t>(2 * rows_ * widest_) * sizeof(std::uint16_t))),
        index_(runtime_.allocate(static_cast<std::size_t>(rows_) * sizeof(std::int64_t))),
        weight_(runtime_.allocate(static_cast<std::size_t>(rows_) * sizeof(float))),
        seqs_(runtime_.allocate(static_cast<std::size_t>(rows_) * sizeof(DeviceAttentionSeq))),
        ids_(runtime_.allocate(static_cast<std::size_t>(rows_) * sizeof(int))),
        picks_(runtime_, rows_),
        partial_(runtime_.allocate(static_cast<std::size_t>(detail::attn_partial_floats) * sizeof(float))),
        sum_(runtime_.allocate(static_cast<std::size_t>(rows_ * c.hidden_size) * sizeof(float))) {
    if (o.prefill_activations != kernels::PrefillActivations::f32) throw no_bf16_prefill("the CPU backend");
    host_seqs_.reserve(static_cast<std::size_t>(rows_));
    uploaded_seqs_.reserve(static_cast<std::size_t>(rows_));
    if (c.head_dim > detail::attn_max_dim)
      throw Error(ErrorCategory::config, std::string(name), "head_dim " + std::to_string(c.head_dim) + " is above the attention kernel's " +
                                                                std::to_string(detail::attn_max_dim));
  }

  static constexpr std::string_view name = R::name;
  // Weights are uploaded as stored: the matvec and cuBLAS read row-major matrices.
  static int threads() { return 1; }  // host threads: the device does the work
  R& runtime() { return runtime_; }
  // Bytes of weights uploaded so far.
  std::size_t resident_bytes() const {
    std::size_t n = 0;
    for (const auto& [key, mem] : resident_) n += mem.bytes();
    return n;
  }

  Memory allocate(std::size_t bytes) { return runtime_.allocate(bytes); }
  Memory allocate_weights(std::size_t bytes) { return runtime_.allocate(bytes); }
  // One forward pass (model.hpp brackets each): the runtime may issue its work as one graph.
  void begin_pass() {
    release_norm();
    uploaded_seqs_.clear();
    runtime_.begin_pass();
  }
  void end_pass() {
    release_norm();
    runtime_.end_pass();
  }
  void download(std::span<float> host, const float* src) {
    release_norm();
    runtime_.to_host(host.data(), src, host.size_bytes());
  }
  void upload(float* dst, std::span<const float> host) {
    release_norm();
    runtime_.to_device(dst, host.data(), host.size_bytes());
  }
  // Greedy ids, top-k and draws picked where the logits are (row_picks.hpp).
  void argmax_rows(const LogitRows& r, std::span<int> host) {
    release_norm();
    picks_.argmax_rows(runtime_, r, host);
  }
  void top_k_rows(const LogitRows& r, std::span<kernels::RankedLogit> host, std::int64_t k) {
    release_norm();
    picks_.top_k_rows(runtime_, r, host, k);
  }
  void draw_rows(const LogitRows& r, std::span<const kernels::RowDraw> draws, std::span<int> host) {
    release_norm();
    picks_.draw_rows(runtime_, r, draws, host);
  }

  void matmul(const float* x, const kernels::MatRef& w, const float* bias, float* y, const kernels::RowPlan& plan) {
    const kernels::MatmulOut one{w, bias, y};
    matmul_fused(x, std::span<const kernels::MatmulOut>(&one, 1), plan);
  }
  // Decode rows: the matvec adds its sums to acc as it stores them. GEMM rows (prefill, bound by the
  // GEMMs): the product into scratch, then one add, the calls the unfused path makes.
  void matmul_add(const float* x, const kernels::MatRef& w, float* acc, const kernels::RowPlan& plan) {
    release_norm();
    const std::int64_t D = fuse_ ? plan.decode_rows : 0, N = w.rows, K = w.cols;
    if (D > 0) {
      const kernels::MatmulOut one{w, nullptr, acc};
      matvec<Store::add>(x, D, std::span<const kernels::MatmulOut>(&one, 1));
    }
    if (plan.rows == D) return;
    assert((plan.rows - D) * N <= static_cast<std::int64_t>(sum_.bytes() / sizeof(float)));
    const kernels::MatmulOut rest{w, nullptr, sum_.as<float>()};  // [rows - D, N]
    products(x + D * K, std::span<const kernels::MatmulOut>(&rest, 1), {plan.rows - D, plan.decode_rows - D});
    add(acc + D * N, sum_.as<float>(), (plan.rows - D) * N);
  }
  void matmul_fused(const float* x, std::span<const kernels::MatmulOut> outs, const kernels::RowPlan& plan) { products(x, outs, plan); }
  // Decode rows: one gated matvec launch (gate and up read side by side, silu(gate) * up stored);
  // GEMM rows: the two products, then silu_mul.
  void swiglu(const float* x, const SwiGLUProduct& p, const kernels::RowPlan& plan) {
    const std::int64_t D = plan.decode_rows, T = plan.rows - D, N = p.gate.rows, K = p.gate.cols;
    const kernels::MatmulOut gate_up[] = {{p.gate, nullptr, p.y}, {p.up, nullptr, p.up_y}};
    if (T > 0) release_norm();  // the GEMM rows read x
    if (fuse_ && D > 0 && p.gate.dtype == p.up.dtype && p.gate.rows == p.up.rows) {
      SwiGLUMatvecKernel k{.x = x, .n = D, .w_dtype = p.gate.dtype, .in_features = K, .outs = {}, .n_outs = 2};
      k.outs[0] = {.w = resident(p.gate), .bias = nullptr, .y = p.y, .rows = N};
      k.outs[1] = {.w = resident(p.up), .bias = nullptr, .y = p.up_y, .rows = N};
      k.k_split = SwiGLUMatvecKernel::split_for(k.features(), K);
      launch_matvec(k);
    } else if (D > 0) {
      products(x, gate_up, {D, D});
      silu_mul(p.y, p.up_y, D * N);
    }
    if (T == 0) return;
    const kernels::MatmulOut rest[] = {{p.gate, nullptr, p.y + D * N}, {p.up, nullptr, p.up_y + D * N}};
    products(x + D * K, rest, {T, 0});
    silu_mul(p.y + D * N, p.up_y + D * N, T * N);
  }
  // Products of many rows (an MoE expert's prefill rows) take the GEMM, the others the matvec.
  void matmul_each(std::span<const kernels::DotProduct> each) {
    for (const kernels::DotProduct& p : each) {
      if (p.n > detail::matvec_rows) matmul(p.x, p.out.w, p.out.bias, p.out.y, {p.n, 0});
      else matvec<Store::assign>(p.x, p.n, std::span<const kernels::MatmulOut>(&p.out, 1));
    }
  }

  // With KYLIN_CUDA_FUSE_NORM=1, a decode step's norm (few rows, not in place) is held back: the
  // matvec that reads it next takes it in (MatvecNorm: applied to its sums, a launch fewer); anything
  // else first launches it (release_norm). Opt-in until measured faster on a GPU (docs/CUDA.md).
  void rms_norm(const float* x, const kernels::MatRef& w, float* out, std::int64_t rows, double eps) {
    release_norm();
    const RmsNormKernel k{.x = x, .w = resident(w), .w_dtype = w.dtype, .out = out, .rows = rows, .dim = w.cols, .eps = eps};
    const bool holdable = norm_in_ && out != x && rows <= detail::matvec_rows && MatvecKernel::norm_bytes(rows, w.cols) <= MatvecKernel::max_norm_bytes &&
                          (w.dtype == DType::bf16 || w.dtype == DType::f16 || w.dtype == DType::f32);
    if (holdable) held_norm_ = k;
    else runtime_.launch(k);
  }
  void attention_inputs(const QKVRows& r, const QKNorms& norms, const kernels::RopeTables& t, std::span<const kernels::AttentionSeq> seqs) {
    release_norm();
    if (norms.q.data && norms.k.dtype != norms.q.dtype)
      throw Error(ErrorCategory::config, std::string(name), "q_norm and k_norm weights of different dtypes");
    upload_seqs(seqs);
    runtime_.launch(AttentionInputsKernel{.q = r.q, .k = r.k, .v = r.v, .rows = r.rows, .n_heads = r.n_heads, .n_kv_heads = r.n_kv_heads,
                                          .head_dim = r.head_dim, .q_norm = norms.q.data ? resident(norms.q) : nullptr,
                                          .k_norm = norms.k.data ? resident(norms.k) : nullptr, .norm_dtype = norms.q.dtype, .eps = norms.eps,
                                          .cos = t.cos, .sin = t.sin, .seqs = seqs_.as<DeviceAttentionSeq>(),
                                          .n_seqs = static_cast<std::int64_t>(seqs.size()), .kv_dtype = seqs.front().k.dtype});
  }
  // Few rows (decode) split each row's keys into shares (flash-decoding) and combine them after,
  // once a row sees split_min_keys keys (KYLIN_CUDA_ATTN_SPLIT=1: at any length, =0: never).
  void attention(const float* q, float* out, std::span<const kernels::AttentionSeq> seqs, const kernels::AttentionHeads& h) {
    release_norm();
    const std::int64_t n_rows = upload_seqs(seqs);
    SplitAttentionKernel k{.q = q, .out = out, .seqs = seqs_.as<DeviceAttentionSeq>(), .n_seqs = static_cast<std::int64_t>(seqs.size()),
                           .n_rows = n_rows, .n_heads = h.n_heads, .n_kv_heads = h.n_kv_heads, .head_dim = h.head_dim,
                           .scale = h.scale, .kv_dtype = seqs.front().k.dtype, .splits = 1, .partial = partial_.as<float>()};
    std::int64_t keys = 0;  // the most any row sees
    for (const kernels::AttentionSeq& s : seqs) keys = std::max(keys, s.pos0 + s.n_tokens);
    const bool split = split_keys_ == SplitKeys::always || (split_keys_ == SplitKeys::long_rows && keys >= split_min_keys);
    k.splits = split ? k.splits_for() : 1;
    if (k.splits == 1)
      return runtime_.launch(AttentionKernel{.q = q, .out = out, .seqs = k.seqs, .n_seqs = k.n_seqs, .n_rows = n_rows, .n_heads = h.n_heads,
                                             .n_kv_heads = h.n_kv_heads, .head_dim = h.head_dim, .scale = h.scale, .kv_dtype = k.kv_dtype});
    runtime_.launch(k);
    runtime_.launch(AttentionCombineKernel{.partial = k.partial, .out = out, .seqs = k.seqs, .n_seqs = k.n_seqs, .n_rows = n_rows,
                                           .n_heads = h.n_heads, .head_dim = h.head_dim, .splits = k.splits});
  }
  void silu_mul(float* gate, const float* up, std::int64_t n) {
    release_norm();
    runtime_.launch(SiluMulKernel{.gate = gate, .up = up, .n = n});
  }
  void add(float* acc, const float* x, std::int64_t n) {
    release_norm();
    runtime_.launch(AddKernel{.acc = acc, .x = x, .n = n});
  }
  void fill_zero(float* out, std::int64_t n) {
    release_norm();
    runtime_.launch(FillKernel{.out = out, .n = n, .value = 0.0f});
  }
  void gather_rows(const float* x, const kernels::RowSelection& sel, float* out, std::int64_t width) {
    release_norm();
    runtime_.to_device(index_.data(), sel.rows.data(), sel.rows.size_bytes());
    runtime_.launch(GatherRowsKernel{.x = x, .rows = index_.as<std::int64_t>(), .n_rows = static_cast<std::int64_t>(sel.rows.size()),
                                     .width = width, .out = out});
  }
  void add_rows_scaled(float* acc, const float* y, const kernels::RowSelection& sel, std::int64_t width) {
    release_norm();
    runtime_.to_device(index_.data(), sel.rows.data(), sel.rows.size_bytes());
    runtime_.to_device(weight_.data(), sel.weights.data(), sel.weights.size_bytes());
    runtime_.launch(AddRowsScaledKernel{.acc = acc, .y = y, .rows = index_.as<std::int64_t>(), .weights = weight_.as<float>(),
                                        .n_rows = static_cast<std::int64_t>(sel.rows.size()), .width = width});
  }
  // The ids go up as a staged copy, part of a decode step's graph like the attention arguments.
  void embed(const kernels::MatRef& table, std::span<const int> ids, float* out) {
    release_norm();
    runtime_.to_device(ids_.data(), ids.data(), ids.size_bytes());
    runtime_.launch(EmbedKernel{.table = resident(table), .dtype = table.dtype, .rows = table.rows, .cols = table.cols, .ids = ids_.as<int>(),
                                .n = static_cast<std::int64_t>(ids.size()), .out = out});
  }

 private:
  // Switches for comparing on a GPU: NAME=0 turns an optimisation off, NAME=1 an opt-in one on.
  static bool switched(const char* name, bool by_default) {
    const char* v = std::getenv(name);
    return v && (std::string_view(v) == "0" || std::string_view(v) == "1") ? std::string_view(v) == "1" : by_default;
  }

  // The sequences' caches, rows and positions into seqs_; returns the rows they cover. A layer's
  // attention reads what its attention_inputs uploaded: the second copy of a pass is skipped.
  std::int64_t upload_seqs(std::span<const kernels::AttentionSeq> seqs) {
    host_seqs_.clear();
    std::int64_t n_rows = 0;
    for (const kernels::AttentionSeq& s : seqs) {
      host_seqs_.push_back({.k = s.k.data, .v = s.v.data, .kv_stride = s.kv_stride, .row0 = s.row0, .n_tokens = s.n_tokens, .pos0 = s.pos0});
      n_rows = std::max(n_rows, s.row0 + s.n_tokens);
    }
    if (host_seqs_ != uploaded_seqs_) {
      runtime_.to_device(seqs_.data(), host_seqs_.data(), host_seqs_.size() * sizeof(DeviceAttentionSeq));
      uploaded_seqs_ = host_seqs_;
    }
    return n_rows;
  }

  // Decode rows: the matvec kernel, which reads each weight once for all of them. GEMM rows: BF16
  // weights through two cuBLAS BF16 GEMMs on the hi and lo BF16 halves of x (f32 compute, so x
  // keeps ~16 bits), F32 weights through one F32 GEMM, F16 and Q8_0 weights through the matvec kernel.
  void products(const float* x, std::span<const kernels::MatmulOut> outs, const kernels::RowPlan& plan) {
    const std::int64_t K = outs.front().w.cols, T = plan.rows - plan.decode_rows;
    if (T > 0) release_norm();  // the GEMM rows read x
    if (plan.decode_rows > 0) matvec<Store::assign>(x, plan.decode_rows, outs);
    if (T == 0) return;
    const float* xg = x + plan.decode_rows * K;  // [T, K]
    auto* hi = split_.as<std::uint16_t>();    // [T, K]
    auto* lo = hi + rows_ * widest_;          // [T, K]
    if (std::ranges::any_of(outs, [](const kernels::MatmulOut& o) { return o.w.dtype == DType::bf16; }))
      runtime_.launch(SplitBf16Kernel{.x = xg, .n = T * K, .hi = hi, .lo = lo});
    for (const kernels::MatmulOut& o : outs) {
      const std::int64_t N = o.w.rows;
      float* yg = o.y + plan.decode_rows * N;  // [T, N]
      if (o.w.dtype == DType::bf16) {
        runtime_.gemm(linear_call({.w = resident(o.w), .w_type = GemmType::bf16, .x = hi, .y = yg, .T = T, .N = N, .K = K}));
        runtime_.gemm(linear_call({.w = resident(o.w), .w_type = GemmType::bf16, .x = lo, .y = yg, .T = T, .N = N, .K = K, .beta = 1.0f}));
      } else if (o.w.dtype == DType::f32) {
        runtime_.gemm(linear_call({.w = resident(o.w), .w_type = GemmType::f32, .x = xg, .y = yg, .T = T, .N = N, .K = K}));
      } else if (T >= widened_gemm_rows) {
        widened_gemm(xg, o.w, yg, T);
      } else {
        const kernels::MatmulOut og{o.w, o.bias, yg};
        matvec<Store::assign>(xg, T, std::span<const kernels::MatmulOut>(&og, 1));
        continue;
      }
      if (o.bias) runtime_.launch(AddBiasKernel{.y = yg, .bias = resident(o.bias, N), .rows = T, .cols = N});
    }
  }

  // y[T, N] = x[T, K] · W^T for F16/Q8_0/Q4_0 weights: chunks of W's rows widened to f32 (exact),
  // each then one f32 GEMM into its columns of y; the matvec would read W once per 8 rows.
  void widened_gemm(const float* x, const kernels::MatRef& w, float* y, std::int64_t T) {
    const std::int64_t N = w.rows, K = w.cols;
    const std::int64_t chunk = std::clamp<std::int64_t>(widened_bytes / (K * static_cast<std::int64_t>(sizeof(float))), 1, N);
    // one size for every weight: launches still held in the pass may read it, so it is never replaced
    if (widened_.bytes() == 0) widened_ = runtime_.allocate(static_cast<std::size_t>(widened_bytes));
    const void* stored = resident(w);
    for (std::int64_t r0 = 0; r0 < N; r0 += chunk) {
      const std::int64_t n = std::min(chunk, N - r0);
      runtime_.launch(WidenRowsKernel{.w = stored, .dtype = w.dtype, .rows = N, .cols = K, .r0 = r0, .n = n, .out = widened_.as<float>()});
      runtime_.gemm(linear_call({.w = widened_.data(), .w_type = GemmType::f32, .x = x, .y = y + r0, .T = T, .N = n, .K = K, .ldy = N}));
    }
  }

  // One launch for every run of up to matvec_max_outs consecutive outputs of one dtype.
  template <Store Kind>
  void matvec(const float* x, std::int64_t n, std::span<const kernels::MatmulOut> outs) {
    MatvecKernelOf<Kind> k{.x = x, .n = n, .w_dtype = outs.front().w.dtype, .in_features = outs.front().w.cols, .outs = {}, .n_outs = 0};
    auto launch = [&] {
      k.k_split = MatvecKernelOf<Kind>::split_for(k.features(), k.in_features);
      launch_matvec(k);  // the first launch may take the norm in, writing the normed rows for the others
    };
    for (const kernels::MatmulOut& o : outs) {
      if (k.n_outs == detail::matvec_max_outs || o.w.dtype != k.w_dtype) {
        launch();
        k.w_dtype = o.w.dtype;
        k.n_outs = 0;
      }
      k.outs[k.n_outs++] = {.w = resident(o.w), .bias = o.bias ? resident(o.bias, o.w.rows) : nullptr, .y = o.y, .rows = o.w.rows};
    }
    launch();
  }

  // k, with the held norm taken in if it made k's x and the launch is small enough that norming in
  // every block costs less than a launch (one wave of blocks); else the norm is launched first.
  template <Store Kind>
  void launch_matvec(const MatvecKernelOf<Kind>& k) {
    if (!held_norm_) return runtime_.launch(k);
    const RmsNormKernel& h = *held_norm_;
    if (h.out != k.x || h.rows != k.n || k.shape().grid.x > max_norm_blocks) {
      release_norm();
      return runtime_.launch(k);
    }
    const MatvecNorm taken{.x = h.x, .w = h.w, .w_dtype = h.w_dtype, .eps = h.eps, .out = h.out};
    held_norm_.reset();
    runtime_.launch(k.normed(taken));
  }
  void release_norm() {
    if (held_norm_) runtime_.launch(*std::exchange(held_norm_, std::nullopt));
  }

  // The device copy of a weight (keyed by its host address: weights never change while a model
  // lives), uploaded on first use. Unknown dtypes are refused by name before any kernel sees them.
  const void* resident(const kernels::MatRef& w) {
    if (auto it = resident_.find(w.data); it != resident_.end()) return it->second.data();
    if (w.dtype != DType::bf16 && w.dtype != DType::f16 && w.dtype != DType::f32 && !kernels::is_quantized(w.dtype))
      throw Error(ErrorCategory::config, std::string(name), "no kernels for " + std::string(dtype_name(w.dtype)) + " weights");
    const std::size_t bytes = kernels::is_quantized(w.dtype)
                                  ? kernels::visit_quant(w.dtype, w.data, w.rows, w.cols,
                                                         []<class V>(const V& v) { return kernels::quant_bytes<V>(v.rows, v.cols); })
                                  : static_cast<std::size_t>(w.rows * w.cols) * dtype_size(w.dtype);
    return upload_once(w.data, bytes);
  }
  const float* resident(const float* bias, std::int64_t n) {
    if (auto it = resident_.find(bias); it != resident_.end()) return it->second.template as<float>();
    return static_cast<const float*>(upload_once(bias, static_cast<std::size_t>(n) * sizeof(float)));
  }
  const void* upload_once(const void* host, std::size_t bytes) {
    Memory m = runtime_.allocate(bytes);
    runtime_.to_device(m.data(), host, bytes);
    return resident_.emplace(host, std::move(m)).first->second.data();
  }

  R runtime_;
  std::int64_t rows_, widest_;
  Memory split_;   // [2][rows, widest] BF16 halves of a GEMM input
  Memory index_;   // [rows] int64 row indices of a selection
  Memory weight_;  // [rows] f32 routing weights of a selection
  Memory seqs_;    // [rows] DeviceAttentionSeq
  Memory ids_;     // [rows] int token ids of a pass
  RowPicks<R> picks_;  // argmax_rows, top_k_rows, draw_rows
  Memory widened_;   // [widened_bytes] f32 rows of an F16/Q8_0/Q4_0 weight for the GEMM (widened_gemm), made on first use
  // Prefill rows from which F16/Q8_0/Q4_0 products widen the weight for a GEMM (fewer: the matvec),
  // and the most a widened chunk holds. Chosen, not yet measured on a GPU.
  static constexpr std::int64_t widened_gemm_rows = 32;
  static constexpr std::int64_t widened_bytes = std::int64_t{64} << 20;
  Memory partial_;  // [attn_partial_floats] attention's key shares before they are combined
  Memory sum_;      // [rows, hidden] a residual product of GEMM rows before matmul_add adds it
  // Key shares in attention (flash-decoding). On an H200 (0.6B shape, decode): 380 against 145
  // tok/s at depth 1024, but 463 against 489 below 64 keys, where one tile is all a row has.
  enum class SplitKeys : std::uint8_t { never, long_rows, always };
  static constexpr std::int64_t split_min_keys = 256;
  SplitKeys split_keys_ = [] {
    const char* v = std::getenv("KYLIN_CUDA_ATTN_SPLIT");
    const std::string_view s = v ? v : "";
    return s == "1" ? SplitKeys::always : s == "0" ? SplitKeys::never : SplitKeys::long_rows;
  }();
  bool fuse_ = switched("KYLIN_CUDA_FUSE", true);  // 0: matmul_add and swiglu as separate products, add and silu_mul
  // Norms taken into the matvecs: every block then pays the norm's latency before its first
  // product, and the matvec, filling the GPU, leaves no room to overlap its predecessor.
  bool norm_in_ = switched("KYLIN_CUDA_FUSE_NORM", false);
  std::optional<RmsNormKernel> held_norm_;          // a norm not launched yet (rms_norm)
  // Norms taken into matvecs of at most this many blocks (0.6B: q/k/v 512, gate/up 768) and rows.
  static constexpr unsigned max_norm_blocks = 1024;
  std::vector<DeviceAttentionSeq> host_seqs_;             // [<= rows] staged before upload
  std::vector<DeviceAttentionSeq> uploaded_seqs_;         // [<= rows] what seqs_ holds, this pass
  std::unordered_map<const void*, Memory> resident_;      // host weight address -> device copy
};

}  // namespace kylin::cuda
