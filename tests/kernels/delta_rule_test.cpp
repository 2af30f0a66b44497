// The Gated DeltaNet kernels against float64 oracles written here: the recurrent step and the chunked form of
// the gated delta rule (each alone, and chunked == recurrent to ~1e-6), and a whole layer core (conv + SiLU,
// l2norm, decay and beta, the rule, the gated RMSNorm) with per-row states for decode rows, states carried
// across calls and a sequence's bits unchanged by its neighbours; sigmoid gating, column gathers, partial RoPE.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "helpers.hpp"
#include "kylin/kernels/linear_attention.hpp"

using namespace kylin;

namespace {

std::vector<double> normalised(std::mt19937& rng, std::int64_t n) {
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> x(static_cast<std::size_t>(n));
  double s = 0;
  for (double& v : x) v = d(rng), s += v * v;
  for (double& v : x) v /= std::sqrt(s);
  return x;
}

// One head's inputs for T tokens and the float64 recurrent rule over them.
struct HeadCase {
  std::int64_t T, dk, dv;
  std::vector<float> q, k, v, g, beta;  // [T, dk], [T, dk], [T, dv], [T], [T]
  std::vector<double> out;              // [T, dv] oracle outputs
  std::vector<double> S;                // [dk, dv] oracle state after T tokens

  HeadCase(std::int64_t T_, std::int64_t dk_, std::int64_t dv_, unsigned seed) : T(T_), dk(dk_), dv(dv_) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> gd(-2.5, -0.01), bd(0.05, 0.95);
    std::normal_distribution<double> vd(0.0, 1.0);
    for (std::int64_t t = 0; t < T; ++t) {
      for (double x : normalised(rng, dk)) q.push_back(static_cast<float>(x / std::sqrt(static_cast<double>(dk))));
      for (double x : normalised(rng, dk)) k.push_back(static_cast<float>(x));
      for (std::int64_t j = 0; j < dv; ++j) v.push_back(static_cast<float>(vd(rng)));
      g.push_back(static_cast<float>(gd(rng)));
      beta.push_back(static_cast<float>(bd(rng)));
    }
    S.assign(static_cast<std::size_t>(dk * dv), 0.0);
    for (std::int64_t t = 0; t < T; ++t) {
      const double e = std::exp(static_cast<double>(g[static_cast<std::size_t>(t)]));
      std::vector<double> u(static_cast<std::size_t>(dv), 0.0);
      for (auto& s : S) s *= e;
      for (std::int64_t i = 0; i < dk; ++i)
        for (std::int64_t j = 0; j < dv; ++j) u[static_cast<std::size_t>(j)] += S[static_cast<std::size_t>(i * dv + j)] * k[static_cast<std::size_t>(t * dk + i)];
      for (std::int64_t j = 0; j < dv; ++j)
        u[static_cast<std::size_t>(j)] = beta[static_cast<std::size_t>(t)] * (v[static_cast<std::size_t>(t * dv + j)] - u[static_cast<std::size_t>(j)]);
      for (std::int64_t i = 0; i < dk; ++i)
        for (std::int64_t j = 0; j < dv; ++j) S[static_cast<std::size_t>(i * dv + j)] += k[static_cast<std::size_t>(t * dk + i)] * u[static_cast<std::size_t>(j)];
      for (std::int64_t j = 0; j < dv; ++j) {
        double o = 0;
        for (std::int64_t i = 0; i < dk; ++i) o += S[static_cast<std::size_t>(i * dv + j)] * q[static_cast<std::size_t>(t * dk + i)];
        out.push_back(o);
      }
    }
  }
};

// ||a - b|| / ||b||
double rel(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < b.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
  return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("delta_step: token by token from a zero state, outputs and state match the float64 recurrence") {
  for (const auto& dims : {std::pair<std::int64_t, std::int64_t>{32, 32}, {16, 48}, {128, 128}, {20, 12}}) {
    const std::int64_t dk = dims.first, dv = dims.second;  // (clang 14 cannot capture structured bindings in CAPTURE's lambda)
    CAPTURE(dk);
    CAPTURE(dv);
    const HeadCase c(40, dk, dv, 7);
    std::vector<float> S(static_cast<std::size_t>(dk * dv)), out(static_cast<std::size_t>(c.T * dv)), scratch(static_cast<std::size_t>(dv));
    for (std::int64_t t = 0; t < c.T; ++t)  // in place after the first token (S_in == S_out)
      kernels::delta_step(t == 0 ? nullptr : S.data(), S.data(), c.q.data() + t * dk, c.k.data() + t * dk, c.v.data() + t * dv,
                          c.g[static_cast<std::size_t>(t)], c.beta[static_cast<std::size_t>(t)], out.data() + t * dv, dk, dv, scratch.data());
    CHECK(rel(out, c.out) < 1e-5);
    CHECK(rel(S, c.S) < 1e-5);
  }
}

TEST_CASE("delta_chunk_rows: chunks of 64 and partial chunks give the float64 recurrence's outputs and state, and the recurrent form's to ~1e-6") {
  for (const auto& dims : {std::pair<std::int64_t, std::int64_t>{32, 32}, {16, 48}, {128, 128}}) {
    const std::int64_t dk = dims.first, dv = dims.second;
    for (std::int64_t first_chunk : {64, 1, 17, 63}) {  // where the sequence's position sits in its first chunk
      CAPTURE(dk);
      CAPTURE(dv);
      CAPTURE(first_chunk);
      const HeadCase c(150, dk, dv, 11);
      std::vector<float> S(static_cast<std::size_t>(dk * dv), 0.0f), out(static_cast<std::size_t>(c.T * dv));
      std::vector<float> scratch(static_cast<std::size_t>(kernels::delta_chunk_scratch(dk, dv)));
      // one stride for q, k and v: lay the three out in rows of width W
      const std::int64_t W = 2 * dk + dv;
      std::vector<float> rows(static_cast<std::size_t>(c.T * W));
      for (std::int64_t t = 0; t < c.T; ++t) {
        std::copy_n(c.q.data() + t * dk, dk, rows.data() + t * W);
        std::copy_n(c.k.data() + t * dk, dk, rows.data() + t * W + dk);
        std::copy_n(c.v.data() + t * dv, dv, rows.data() + t * W + 2 * dk);
      }
      const kernels::DeltaHeadRows hr{rows.data(), rows.data() + dk, rows.data() + 2 * dk, W, c.g.data(), c.beta.data(), 1, out.data(), dv, dk, dv};
      for (std::int64_t t = 0; t < c.T;) {
        const std::int64_t n = std::min(c.T - t, t == 0 ? first_chunk : kernels::delta_chunk);
        kernels::delta_chunk_rows(S.data(), hr, t, n, scratch.data());
        t += n;
      }
      CHECK(rel(out, c.out) < 1e-5);
      CHECK(rel(S, c.S) < 1e-5);
      // the recurrent form in f32 over the same tokens
      std::vector<float> S2(S.size()), out2(out.size()), step(static_cast<std::size_t>(dv));
      for (std::int64_t t = 0; t < c.T; ++t)
        kernels::delta_step(t == 0 ? nullptr : S2.data(), S2.data(), c.q.data() + t * dk, c.k.data() + t * dk, c.v.data() + t * dv,
                            c.g[static_cast<std::size_t>(t)], c.beta[static_cast<std::size_t>(t)], out2.data() + t * dv, dk, dv, step.data());
      std::vector<double> out2d(out2.begin(), out2.end());
      CHECK(rel(out, out2d) < 3e-6);
    }
  }
}

namespace {

// A small Gated DeltaNet layer core and its float64 oracle: 2 key heads, 4 value heads (r = 2), dk 16, dv 12, K 4.
struct LayerShape {
  std::int64_t nk = 2, nv = 4, dk = 16, dv = 12, K = 4;
};
struct LayerCase {
  std::int64_t nk, nv, dk, dv, K, C;
  std::vector<float> conv, neg_exp_a, dt_bias, norm;  // [K, C], [nv], [nv], [dv]
  kernels::DeltaNetLayer layer;

  explicit LayerCase(unsigned seed, LayerShape sh = {})
      : nk(sh.nk), nv(sh.nv), dk(sh.dk), dv(sh.dv), K(sh.K), C(2 * sh.nk * sh.dk + sh.nv * sh.dv) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 0.5f);
    for (std::int64_t i = 0; i < K * C; ++i) conv.push_back(d(rng));
    for (std::int64_t h = 0; h < nv; ++h) neg_exp_a.push_back(-std::exp(0.3f * d(rng))), dt_bias.push_back(d(rng));
    for (std::int64_t i = 0; i < dv; ++i) norm.push_back(1.0f + 0.2f * d(rng));
    layer = {.nk = nk, .nv = nv, .dk = dk, .dv = dv, .conv_kernel = K, .conv = conv.data(), .neg_exp_a = neg_exp_a.data(),
             .dt_bias = dt_bias.data(), .norm = norm.data(), .eps = 1e-6};
  }

  // A sequence's rows: qkv (pre-conv), z, b, a.
  struct Inputs {
    std::vector<float> qkv, z, b, a;
  };
  Inputs inputs(std::int64_t T, unsigned seed) const {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    Inputs in;
    for (std::int64_t i = 0; i < T * C; ++i) in.qkv.push_back(d(rng));
    for (std::int64_t i = 0; i < T * nv * dv; ++i) in.z.push_back(d(rng));
    for (std::int64_t i = 0; i < T * nv; ++i) in.b.push_back(d(rng)), in.a.push_back(d(rng));
    return in;
  }

  // float64: the outputs [T, nv*dv] and the state after each token (conv [K-1, C], then S [nv, dk, dv]).
  void oracle(const Inputs& in, std::int64_t T, std::vector<double>& out, std::vector<std::vector<double>>& states) const {
    std::vector<double> S(static_cast<std::size_t>(nv * dk * dv), 0.0);
    auto x = [&](std::int64_t t, std::int64_t c) { return t < 0 ? 0.0 : static_cast<double>(in.qkv[static_cast<std::size_t>(t * C + c)]); };
    for (std::int64_t t = 0; t < T; ++t) {
      std::vector<double> y(static_cast<std::size_t>(C));
      for (std::int64_t c = 0; c < C; ++c) {
        double s = 0;
        for (std::int64_t j = 0; j < K; ++j) s += conv[static_cast<std::size_t>(j * C + c)] * x(t - (K - 1) + j, c);
        y[static_cast<std::size_t>(c)] = s / (1.0 + std::exp(-s));
      }
      for (std::int64_t h = 0; h < 2 * nk; ++h) {
        double ss = 0;
        for (std::int64_t i = 0; i < dk; ++i) ss += y[static_cast<std::size_t>(h * dk + i)] * y[static_cast<std::size_t>(h * dk + i)];
        for (std::int64_t i = 0; i < dk; ++i) y[static_cast<std::size_t>(h * dk + i)] /= std::sqrt(ss + 1e-6) * (h < nk ? std::sqrt(double(dk)) : 1.0);
      }
      for (std::int64_t h = 0; h < nv; ++h) {
        const double a = in.a[static_cast<std::size_t>(t * nv + h)] + double(dt_bias[static_cast<std::size_t>(h)]);
        const double g = neg_exp_a[static_cast<std::size_t>(h)] * std::log1p(std::exp(a));
        const double beta = 1.0 / (1.0 + std::exp(-double(in.b[static_cast<std::size_t>(t * nv + h)])));
        const std::int64_t kh = h / (nv / nk);
        const double* q = y.data() + kh * dk;
        const double* k = y.data() + nk * dk + kh * dk;
        const double* v = y.data() + 2 * nk * dk + h * dv;
        double* Sh = S.data() + h * dk * dv;
        std::vector<double> u(static_cast<std::size_t>(dv), 0.0), o(static_cast<std::size_t>(dv), 0.0);
        for (std::int64_t i = 0; i < dk * dv; ++i) Sh[i] *= std::exp(g);
        for (std::int64_t i = 0; i < dk; ++i)
          for (std::int64_t j = 0; j < dv; ++j) u[static_cast<std::size_t>(j)] += Sh[i * dv + j] * k[i];
        for (std::int64_t j = 0; j < dv; ++j) u[static_cast<std::size_t>(j)] = beta * (v[j] - u[static_cast<std::size_t>(j)]);
        for (std::int64_t i = 0; i < dk; ++i)
          for (std::int64_t j = 0; j < dv; ++j) Sh[i * dv + j] += k[i] * u[static_cast<std::size_t>(j)];
        for (std::int64_t j = 0; j < dv; ++j)
          for (std::int64_t i = 0; i < dk; ++i) o[static_cast<std::size_t>(j)] += Sh[i * dv + j] * q[i];
        double ms = 0;
        for (double e : o) ms += e * e / double(dv);
        for (std::int64_t j = 0; j < dv; ++j) {
          const double z = in.z[static_cast<std::size_t>(t * nv * dv + h * dv + j)];
          out.push_back(o[static_cast<std::size_t>(j)] / std::sqrt(ms + 1e-6) * norm[static_cast<std::size_t>(j)] * z / (1.0 + std::exp(-z)));
        }
      }
      std::vector<double> state;
      for (std::int64_t m = t - (K - 2); m <= t; ++m)
        for (std::int64_t c = 0; c < C; ++c) state.push_back(x(m, c));
      state.insert(state.end(), S.begin(), S.end());
      states.push_back(std::move(state));
    }
  }
};

// A run of one sequence's rows [t0, t0 + n) through gated_delta_net, from state_in into `outs`.
std::vector<float> run_core(const LayerCase& L, const LayerCase::Inputs& in, std::int64_t t0, std::int64_t n, bool decode, const float* state_in,
                            std::vector<std::vector<float>>& outs, ThreadPool& pool, kernels::DeltaNetScratch& scratch) {
  const std::int64_t C = L.C, Z = L.nv * L.dv, nv = L.nv;
  std::vector<float> qkv(in.qkv.begin() + t0 * C, in.qkv.begin() + (t0 + n) * C), out(static_cast<std::size_t>(n * Z));
  std::vector<float*> ptrs;
  for (auto& o : outs) ptrs.push_back(o.data());
  const kernels::DeltaNetRows rows{qkv.data(), in.z.data() + t0 * Z, in.b.data() + t0 * nv, in.a.data() + t0 * nv, out.data(), n};
  const kernels::DeltaNetSeq seq{0, n, t0, decode, state_in, ptrs, {}, {}};
  kernels::gated_delta_net(rows, L.layer, std::span(&seq, 1), pool, scratch);
  return out;
}

double rel_d(std::span<const float> a, std::span<const double> b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < b.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
  return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("gated_delta_net: a layer core over chunks, decode rows with a state per row, and a state carried between calls match float64") {
  const LayerCase L(3);
  const std::int64_t T = 150, Z = L.nv * L.dv, F = L.layer.state_floats();
  const auto in = L.inputs(T, 5);
  std::vector<double> ref;
  std::vector<std::vector<double>> ref_states;
  L.oracle(in, T, ref, ref_states);
  ThreadPool pool(2);
  kernels::DeltaNetScratch scratch(2, 256, L.layer);
  auto state = [&] { return std::vector<float>(static_cast<std::size_t>(F)); };
  // [0, 70) chunked (a 64-boundary inside), [70, 75) as decode rows with a state each, [75, 150) chunked from row 74's state
  std::vector<std::vector<float>> s1{state()}, s2{state(), state(), state(), state(), state()}, s3{state()};
  const auto o1 = run_core(L, in, 0, 70, false, nullptr, s1, pool, scratch);
  const auto o2 = run_core(L, in, 70, 5, true, s1[0].data(), s2, pool, scratch);
  const auto o3 = run_core(L, in, 75, 75, false, s2[4].data(), s3, pool, scratch);
  CHECK(rel_d(o1, std::span(ref).first(70 * Z)) < 1e-5);
  CHECK(rel_d(o2, std::span(ref).subspan(70 * Z, 5 * Z)) < 1e-5);
  CHECK(rel_d(o3, std::span(ref).subspan(75 * Z)) < 1e-5);
  CHECK(rel_d(s1[0], ref_states[69]) < 1e-5);
  for (int j = 0; j < 5; ++j) CHECK(rel_d(s2[static_cast<std::size_t>(j)], ref_states[static_cast<std::size_t>(70 + j)]) < 1e-5);
  CHECK(rel_d(s3[0], ref_states[149]) < 1e-5);
  // with one buffer for all five decode rows (rows reuse it in turn), the last state and outputs are the same bits
  std::vector<std::vector<float>> one{state()};
  std::vector<float*> same(5, one[0].data());
  std::vector<float> qkv(in.qkv.begin() + 70 * L.C, in.qkv.begin() + 75 * L.C), out(static_cast<std::size_t>(5 * Z));
  const kernels::DeltaNetRows rows{qkv.data(), in.z.data() + 70 * Z, in.b.data() + 70 * L.nv, in.a.data() + 70 * L.nv, out.data(), 5};
  const kernels::DeltaNetSeq seq{0, 5, 70, true, s1[0].data(), same, {}, {}};
  kernels::gated_delta_net(rows, L.layer, std::span(&seq, 1), pool, scratch);
  CHECK(std::memcmp(out.data(), o2.data(), out.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(one[0].data(), s2[4].data(), s2[4].size() * sizeof(float)) == 0);
}

TEST_CASE("gated_delta_net on one thread and on two, over more conv channels than one block of 256: the same bits, float64's numbers") {
  const LayerCase L(12, {.nk = 4, .nv = 8, .dk = 32, .dv = 48, .K = 4});  // C = 640
  const std::int64_t T = 70, Z = L.nv * L.dv, F = L.layer.state_floats();
  const auto in = L.inputs(T, 13);
  std::vector<double> ref;
  std::vector<std::vector<double>> ref_states;
  L.oracle(in, T, ref, ref_states);
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    kernels::DeltaNetScratch scratch(threads, 128, L.layer);
    std::vector<std::vector<float>> state{std::vector<float>(static_cast<std::size_t>(F))};
    outs.push_back(run_core(L, in, 0, T, false, nullptr, state, pool, scratch));
    CHECK(rel_d(outs.back(), ref) < 1e-5);
    CHECK(rel_d(state[0], ref_states.back()) < 1e-5);
  }
  CHECK(std::memcmp(outs[0].data(), outs[1].data(), static_cast<std::size_t>(T * Z) * sizeof(float)) == 0);
}

TEST_CASE("gated_delta_net: a sequence's outputs and states are the same bits beside another sequence in the call") {
  const LayerCase L(9);
  const std::int64_t Z = L.nv * L.dv, F = L.layer.state_floats();
  const auto a = L.inputs(90, 1), b = L.inputs(3, 2);
  ThreadPool pool(2);
  kernels::DeltaNetScratch scratch(2, 256, L.layer);
  std::vector<std::vector<float>> alone{std::vector<float>(static_cast<std::size_t>(F))};
  const auto o_alone = run_core(L, a, 0, 90, false, nullptr, alone, pool, scratch);
  // b's three decode rows first, then a's 90 chunked rows, in one call
  std::vector<float> qkv(b.qkv), z(b.z), bb(b.b), aa(b.a);
  qkv.insert(qkv.end(), a.qkv.begin(), a.qkv.end());
  z.insert(z.end(), a.z.begin(), a.z.end());
  bb.insert(bb.end(), a.b.begin(), a.b.end());
  aa.insert(aa.end(), a.a.begin(), a.a.end());
  std::vector<float> out(static_cast<std::size_t>(93 * Z));
  std::vector<std::vector<float>> sb(3, std::vector<float>(static_cast<std::size_t>(F))), sa(1, std::vector<float>(static_cast<std::size_t>(F)));
  std::vector<float*> pb{sb[0].data(), sb[1].data(), sb[2].data()}, pa{sa[0].data()};
  const kernels::DeltaNetSeq seqs[] = {{0, 3, 0, true, nullptr, pb, {}, {}}, {3, 90, 0, false, nullptr, pa, {}, {}}};
  kernels::gated_delta_net({qkv.data(), z.data(), bb.data(), aa.data(), out.data(), 93}, L.layer, seqs, pool, scratch);
  CHECK(std::memcmp(out.data() + 3 * Z, o_alone.data(), o_alone.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(sa[0].data(), alone[0].data(), alone[0].size() * sizeof(float)) == 0);
}

TEST_CASE("sigmoid_mul, silu_inplace and gather_columns match their formulas; partial RoPE leaves the unrotated dims alone") {
  for (std::int64_t n : {1, 15, 16, 33, 1000}) {
    CAPTURE(n);
    const auto x = test::random_floats(n, 1, 4.f), g = test::random_floats(n, 2, 4.f);
    auto y = x, s = x;
    kernels::sigmoid_mul(y.data(), g.data(), n);
    kernels::silu_inplace(s.data(), n);
    for (std::size_t i = 0; i < x.size(); ++i) {
      CHECK(y[i] == doctest::Approx(x[i] / (1.0 + std::exp(-double(g[i])))).epsilon(1e-6));
      CHECK(s[i] == doctest::Approx(x[i] / (1.0 + std::exp(-double(x[i])))).epsilon(1e-6));
    }
  }
  const std::vector<float> in{0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16, 17};  // two rows of 8
  const kernels::ColumnRun runs[] = {{6, 2}, {0, 3}};
  std::vector<float> out(10);
  kernels::gather_columns(in.data(), 8, runs, out.data(), 5, 2);
  CHECK(out == std::vector<float>{6, 7, 0, 1, 2, 16, 17, 10, 11, 12});
  // head_dim 8, rotary_dim 4: pairs (0, 2), (1, 3) rotate, dims 4..7 pass through
  std::vector<float> h{1, 2, 3, 4, 5, 6, 7, 8};
  const float cos[] = {0.6f, 0.8f}, sin[] = {0.8f, -0.6f};
  kernels::rope(h.data(), {1, 1, 8}, {cos, sin, 4});
  CHECK(h[0] == doctest::Approx(1 * 0.6 - 3 * 0.8));
  CHECK(h[2] == doctest::Approx(3 * 0.6 + 1 * 0.8));
  CHECK(h[1] == doctest::Approx(2 * 0.8 - 4 * -0.6));
  CHECK(h[3] == doctest::Approx(4 * 0.8 + 2 * -0.6));
  CHECK(std::vector<float>(h.begin() + 4, h.end()) == std::vector<float>{5, 6, 7, 8});
}

TEST_CASE("gated_delta_net: states kept inside a chunk match float64 there, and leave the outputs and the last state the same bits") {
  const LayerCase L(4);
  const std::int64_t T = 100, Z = L.nv * L.dv, F = L.layer.state_floats();
  const auto in = L.inputs(T, 6);
  std::vector<double> ref;
  std::vector<std::vector<double>> ref_states;
  L.oracle(in, T, ref, ref_states);
  ThreadPool pool(2);
  kernels::DeltaNetScratch scratch(2, 256, L.layer);
  std::vector<std::vector<float>> plain{std::vector<float>(static_cast<std::size_t>(F))};
  const auto o_plain = run_core(L, in, 0, T, false, nullptr, plain, pool, scratch);
  const std::int64_t rows_kept[] = {1, 5, 64, 65, 99};  // the first row, mid-chunk, a chunk boundary, just after it, the last row
  std::vector<std::vector<float>> kept(5, std::vector<float>(static_cast<std::size_t>(F))), last(1, std::vector<float>(static_cast<std::size_t>(F)));
  std::vector<float*> keep_ptrs, last_ptr{last[0].data()};
  for (auto& k : kept) keep_ptrs.push_back(k.data());
  std::vector<float> qkv(in.qkv), out(static_cast<std::size_t>(T * Z));
  const kernels::DeltaNetSeq seq{0, T, 0, false, nullptr, last_ptr, rows_kept, keep_ptrs};
  kernels::gated_delta_net({qkv.data(), in.z.data(), in.b.data(), in.a.data(), out.data(), T}, L.layer, std::span(&seq, 1), pool, scratch);
  CHECK(std::memcmp(out.data(), o_plain.data(), out.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(last[0].data(), plain[0].data(), last[0].size() * sizeof(float)) == 0);
  for (std::size_t i = 0; i < 5; ++i) {
    CAPTURE(rows_kept[i]);
    CHECK(rel_d(kept[i], ref_states[static_cast<std::size_t>(rows_kept[i] - 1)]) < 1e-5);
  }
}
