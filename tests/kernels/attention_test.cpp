// attention against a double-precision oracle written in helpers.hpp (not the kernels' own
// references): f32 and f16 caches, contexts longer than one tile, GQA groups of 1..7 query heads
// per KV head, prefill (T > 1) and decode, 1 and 2 threads.
#include <doctest/doctest.h>

#include "helpers.hpp"
#include "kylin/kernels/attention.hpp"

using namespace kylin;

namespace {

struct Case {
  std::int64_t T, pos0, n_heads, n_kv, head_dim;
};

struct Inputs {
  std::vector<float> keys, vals;  // [capacity, n_kv * head_dim] rows each
  std::vector<float> q;           // [T, n_heads * head_dim]
};

Inputs random_inputs(const Case& c) {
  const std::int64_t capacity = c.pos0 + c.T + 3, D = c.head_dim;
  return {test::random_floats(capacity * c.n_kv * D, 11, 2.f), test::random_floats(capacity * c.n_kv * D, 12),
          test::random_floats(c.T * c.n_heads * D, 13, 2.f)};
}

// Scores of ~120-240 (960 / sqrt(head_dim) + noise of a few units), past 88.7 where expf overflows:
// a softmax without the max shift gives inf and NaN. Every key and query of a KV head share one
// large direction u (|u| = 1): q.k = 30 * 32 + noise.
Inputs large_score_inputs(const Case& c) {
  const std::int64_t capacity = c.pos0 + c.T + 3, D = c.head_dim, group = c.n_heads / c.n_kv;
  Inputs in = random_inputs(c);
  const auto dirs = test::random_floats(c.n_kv * D, 14);
  for (std::int64_t h = 0; h < c.n_kv; ++h) {
    double norm = 0;
    for (std::int64_t i = 0; i < D; ++i) norm += double(dirs[h * D + i]) * dirs[h * D + i];
    const auto u = [&](std::int64_t i) { return static_cast<float>(dirs[h * D + i] / std::sqrt(norm)); };
    for (std::int64_t j = 0; j < capacity; ++j)
      for (std::int64_t i = 0; i < D; ++i) in.keys[(j * c.n_kv + h) * D + i] = 30.f * u(i) + in.keys[(j * c.n_kv + h) * D + i] / 2;
    for (std::int64_t t = 0; t < c.T; ++t)
      for (std::int64_t g = 0; g < group; ++g)
        for (std::int64_t i = 0; i < D; ++i) {
          float& x = in.q[(t * c.n_heads + h * group + g) * D + i];
          x = 32.f * u(i) + x / 2;
        }
  }
  return in;
}

// The kernel's largest error relative to the double oracle's output scale.
double attention_error(const Case& c, const Inputs& in, DType kv_dtype, int threads) {
  CAPTURE(c.T);
  CAPTURE(c.pos0);
  CAPTURE(c.n_heads);
  CAPTURE(c.n_kv);
  CAPTURE(c.head_dim);
  CAPTURE(dtype_name(kv_dtype));
  CAPTURE(threads);
  const std::int64_t capacity = c.pos0 + c.T + 3, D = c.head_dim, stride = capacity * D;
  const std::size_t elem = kv_dtype == DType::f16 ? 2 : 4;
  std::vector<std::byte> kbuf(static_cast<std::size_t>(c.n_kv * stride) * elem), vbuf(kbuf.size());
  const kernels::KVRef k{kv_dtype, kbuf.data()}, v{kv_dtype, vbuf.data()};
  kernels::store_kv(k, {c.n_kv, D, stride}, {in.keys.data(), c.pos0 + c.T, 0});
  kernels::store_kv(v, {c.n_kv, D, stride}, {in.vals.data(), c.pos0 + c.T, 0});
  const kernels::AttentionShape s{c.T, c.pos0, c.n_heads, c.n_kv, D, stride, static_cast<float>(1.0 / std::sqrt(double(D)))};
  std::vector<float> out(in.q.size(), -1.f);
  ThreadPool pool(threads);
  kernels::AttentionScratch scratch(pool.size(), s.groups(), D);
  kernels::attention(in.q.data(), k, v, out.data(), s, pool, scratch);
  const auto ref = test::attention_oracle(in.q.data(), in.keys.data(), in.vals.data(), kv_dtype,
                                          {c.T, c.pos0, c.n_heads, c.n_kv, D, 1.0 / std::sqrt(double(D))});
  return test::max_rel_error(out, ref);
}

void check_attention(const Case& c, DType kv_dtype, int threads) {
  CHECK(attention_error(c, random_inputs(c), kv_dtype, threads) < 2e-5);
}

}  // namespace

TEST_CASE("attention matches the double oracle for f32 and f16 caches across tiles, GQA groups and T") {
  const Case cases[] = {{1, 0, 2, 1, 64},    {1, 200, 16, 8, 128}, {1, 130, 14, 2, 64}, {5, 70, 4, 4, 32},
                        {9, 0, 6, 2, 64},    {3, 257, 8, 1, 128},  {17, 40, 12, 2, 48}, {2, 63, 3, 1, 16}};
  for (DType dt : {DType::f32, DType::f16})
    for (const Case& c : cases) check_attention(c, dt, 1);
}

TEST_CASE("attention with scores past expf's overflow (~120-240) matches the oracle: the softmax shifts by the running max") {
  // Scores this large lose ~1e-5 of their absolute value to f32 rounding, which the softmax turns
  // into relative errors of that size (measured up to 9e-6); an unshifted exp gives inf and NaN, which fail any bar.
  for (DType dt : {DType::f32, DType::f16})
    for (const Case& c : {Case{1, 150, 4, 2, 64}, Case{6, 70, 4, 1, 32}, Case{1, 0, 2, 2, 16}}) {
      const Inputs in = large_score_inputs(c);
      const double err = attention_error(c, in, dt, 1);
      MESSAGE("relative error at large scores: ", err);
      CHECK(err < 5e-5);
    }
}

TEST_CASE("attention on 2 threads matches the oracle (work dealt by token and KV head)") {
  for (DType dt : {DType::f32, DType::f16}) {
    check_attention({1, 300, 16, 8, 128}, dt, 2);
    check_attention({7, 100, 8, 2, 64}, dt, 2);
  }
}

TEST_CASE("attention with a head_dim that is not a multiple of the vector width falls back correctly") {
  check_attention({3, 20, 4, 2, 20}, DType::f32, 1);
  check_attention({3, 20, 4, 2, 20}, DType::f16, 2);
}

// full_attention of T queries over T keys (pos0 0), against the double oracle with every key seen; the kernel's
// own reference too. head_dim 72 zero-padded to 80 gives the unpadded answer (vision/tower.hpp pads so).
double full_attention_error(const Case& c, DType kv_dtype, int threads, bool reference) {
  CAPTURE(c.T);
  CAPTURE(c.n_heads);
  CAPTURE(c.head_dim);
  CAPTURE(threads);
  const Inputs in = random_inputs(c);
  const std::int64_t D = c.head_dim, stride = c.T * D;
  const std::size_t elem = kv_dtype == DType::f16 ? 2 : 4;
  std::vector<std::byte> kbuf(static_cast<std::size_t>(c.n_kv * stride) * elem), vbuf(kbuf.size());
  const kernels::KVRef k{kv_dtype, kbuf.data()}, v{kv_dtype, vbuf.data()};
  kernels::store_kv(k, {c.n_kv, D, stride}, {in.keys.data(), c.T, 0});
  kernels::store_kv(v, {c.n_kv, D, stride}, {in.vals.data(), c.T, 0});
  const float scale = static_cast<float>(1.0 / std::sqrt(double(D)));
  std::vector<float> out(in.q.size(), -1.f);
  ThreadPool pool(threads);
  kernels::AttentionScratch scratch(pool.size(), c.n_heads / c.n_kv, D);
  if (reference) kernels::full_attention_ref(in.q.data(), k, v, out.data(), {c.T, 0, c.n_heads, c.n_kv, D, stride, scale});
  else kernels::full_attention(in.q.data(), out.data(), {k, v, stride, 0, c.T, 0}, {c.n_heads, c.n_kv, D, scale}, pool, scratch);
  const auto ref = test::attention_oracle(in.q.data(), in.keys.data(), in.vals.data(), kv_dtype, {c.T, 0, c.n_heads, c.n_kv, D, 1.0 / std::sqrt(double(D))}, true);
  return test::max_rel_error(out, ref);
}

TEST_CASE("full_attention (every query sees every key) matches the double oracle, as does its reference") {
  for (const Case& c : {Case{1, 0, 2, 2, 16}, Case{5, 0, 2, 2, 64}, Case{37, 0, 3, 3, 32}, Case{300, 0, 2, 2, 80}, Case{70, 0, 4, 2, 48}}) {
    for (int threads : {1, 2}) CHECK(full_attention_error(c, DType::f32, threads, false) < 2e-5);
    CHECK(full_attention_error(c, DType::f16, 2, false) < 2e-5);
    CHECK(full_attention_error(c, DType::f32, 1, true) < 2e-5);
  }
  CHECK(full_attention_error({9, 0, 2, 2, 20}, DType::f32, 2, false) < 2e-5);  // not a multiple of the vector width: the reference
}

TEST_CASE("full_attention over heads zero-padded from 72 to 80 dims equals the unpadded oracle") {
  const std::int64_t T = 150, H = 2, D = 72, P = 80;
  const auto q = test::random_floats(T * H * D, 21, 2.f), keys = test::random_floats(T * H * D, 22, 2.f), vals = test::random_floats(T * H * D, 23);
  std::vector<float> qp(static_cast<std::size_t>(T * H * P)), kp(qp.size()), vp(qp.size()), out(qp.size());
  for (std::int64_t r = 0; r < T * H; ++r) {  // q [T, H, P]; k, v head-major [H, T, P]
    const std::int64_t t = r / H, h = r % H;
    std::copy_n(q.begin() + r * D, D, qp.begin() + r * P);
    std::copy_n(keys.begin() + r * D, D, kp.begin() + (h * T + t) * P);
    std::copy_n(vals.begin() + r * D, D, vp.begin() + (h * T + t) * P);
  }
  ThreadPool pool(2);
  kernels::AttentionScratch scratch(pool.size(), 1, P);
  const float scale = static_cast<float>(1.0 / std::sqrt(double(D)));
  kernels::full_attention(qp.data(), out.data(), {{DType::f32, kp.data()}, {DType::f32, vp.data()}, T * P, 0, T, 0}, {H, H, P, scale}, pool, scratch);
  std::vector<float> unpadded(static_cast<std::size_t>(T * H * D));
  for (std::int64_t r = 0; r < T * H; ++r) std::copy_n(out.begin() + r * P, D, unpadded.begin() + r * D);
  const auto ref = test::attention_oracle(q.data(), keys.data(), vals.data(), DType::f32, {T, 0, H, H, D, 1.0 / std::sqrt(double(D))}, true);
  CHECK(test::max_rel_error(unpadded, ref) < 2e-5);
}

TEST_CASE("batched attention: every sequence against its own cache (own capacity and depth) equals that sequence alone") {
  // Three caches of different capacities and depths, decode and prefill rows mixed in one call;
  // the oracle is the double-precision attention per sequence, and each row must also equal the
  // one-sequence kernel bit for bit.
  const std::int64_t H = 8, KV = 2, D = 64;
  struct Seq {
    std::int64_t n, pos0, capacity;
  };
  const Seq seqs[] = {{1, 90, 100}, {1, 3, 40}, {6, 17, 30}};
  for (DType dt : {DType::f32, DType::f16})
    for (int threads : {1, 2}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(threads);
      const std::size_t elem = dt == DType::f16 ? 2 : 4;
      std::vector<std::vector<std::byte>> kb, vb;
      std::vector<kernels::AttentionSeq> batch;
      std::vector<std::vector<float>> seq_keys, seq_vals;
      std::int64_t rows = 0;
      for (const Seq& s : seqs) {
        const std::int64_t stride = s.capacity * D;
        kb.emplace_back(static_cast<std::size_t>(KV * stride) * elem);
        vb.emplace_back(kb.back().size());
        const kernels::KVRef k{dt, kb.back().data()}, v{dt, vb.back().data()};
        const auto& keys = seq_keys.emplace_back(test::random_floats((s.pos0 + s.n) * KV * D, static_cast<unsigned>(31 + rows), 2.f));
        const auto& vals = seq_vals.emplace_back(test::random_floats((s.pos0 + s.n) * KV * D, static_cast<unsigned>(41 + rows)));
        kernels::store_kv(k, {KV, D, stride}, {keys.data(), s.pos0 + s.n, 0});
        kernels::store_kv(v, {KV, D, stride}, {vals.data(), s.pos0 + s.n, 0});
        batch.push_back({k, v, stride, rows, s.n, s.pos0});
        rows += s.n;
      }
      const auto q = test::random_floats(rows * H * D, 51, 2.f);
      const float scale = static_cast<float>(1.0 / std::sqrt(double(D)));
      std::vector<float> out(q.size(), -1.f), ref(q.size()), alone(q.size());
      ThreadPool pool(threads);
      kernels::AttentionScratch scratch(pool.size(), H / KV, D);
      kernels::attention(q.data(), out.data(), batch, {H, KV, D, scale}, pool, scratch);
      for (std::size_t i = 0; i < batch.size(); ++i) {
        const auto& b = batch[i];
        const kernels::AttentionShape shape{b.n_tokens, b.pos0, H, KV, D, b.kv_stride, scale};
        const auto one = test::attention_oracle(q.data() + b.row0 * H * D, seq_keys[i].data(), seq_vals[i].data(), dt,
                                                {b.n_tokens, b.pos0, H, KV, D, 1.0 / std::sqrt(double(D))});
        std::copy(one.begin(), one.end(), ref.begin() + b.row0 * H * D);
        kernels::attention(q.data() + b.row0 * H * D, b.k, b.v, alone.data() + b.row0 * H * D, shape, pool, scratch);
      }
      CHECK(test::max_rel_error(out, ref) < 2e-5);
      CHECK(out == alone);
    }
}

TEST_CASE("a prefill's attention rows are the bits each token gets alone (decode at its position): blocks of tokens share K/V reads") {
  // Tokens of one prefill are attended in blocks that read the keys up to their last common whole
  // tile together, a tile at a time for all head blocks of 8 rows; each row must equal that token
  // attended alone. Block boundaries, tile boundaries (64 keys) and the 4-key groups fall at
  // different offsets across these cases; GQA groups of 1, 2, 3, 4, 6 and 16 heads per KV head
  // (blocks of 32, 16, 10, 8, 5 and 2 tokens: up to 4 head blocks take turns on 1-3 shared tiles).
  // At head_dim 128 the blocks' rows fill two 16-row vectors of the wide pass (attention_wide.hpp;
  // AVX2: four 8-row vectors, two pairs) over several shared tiles, and 42 tokens of 2 heads end in
  // a block of 20 rows (16 + 4; AVX2 a pair and a lone vector of 4 rows).
  for (DType dt : {DType::f32, DType::f16})
    for (const Case c : {Case{70, 0, 2, 2, 32}, Case{9, 61, 4, 2, 32}, Case{13, 127, 6, 2, 32}, Case{11, 130, 8, 2, 32},
                         Case{5, 200, 6, 1, 32}, Case{3, 64, 16, 1, 32}, Case{20, 3, 8, 8, 32}, Case{100, 37, 4, 2, 32},
                         Case{42, 190, 4, 2, 128}, Case{33, 64, 8, 2, 128}})
      for (int threads : {1, 2}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(c.T);
        CAPTURE(c.pos0);
        CAPTURE(c.n_heads);
        CAPTURE(c.n_kv);
        CAPTURE(c.head_dim);
        CAPTURE(threads);
        const Inputs in = random_inputs(c);
        const std::int64_t D = c.head_dim, capacity = c.pos0 + c.T + 3, stride = capacity * D, width = c.n_heads * D;
        const std::size_t elem = dt == DType::f16 ? 2 : 4;
        std::vector<std::byte> kbuf(static_cast<std::size_t>(c.n_kv * stride) * elem), vbuf(kbuf.size());
        const kernels::KVRef k{dt, kbuf.data()}, v{dt, vbuf.data()};
        kernels::store_kv(k, {c.n_kv, D, stride}, {in.keys.data(), c.pos0 + c.T, 0});
        kernels::store_kv(v, {c.n_kv, D, stride}, {in.vals.data(), c.pos0 + c.T, 0});
        const float scale = static_cast<float>(1.0 / std::sqrt(double(D)));
        ThreadPool pool(threads);
        kernels::AttentionScratch scratch(pool.size(), c.n_heads / c.n_kv, D);
        std::vector<float> prefill(in.q.size(), -1.f), alone(in.q.size(), -2.f);
        kernels::attention(in.q.data(), k, v, prefill.data(), {c.T, c.pos0, c.n_heads, c.n_kv, D, stride, scale}, pool, scratch);
        for (std::int64_t t = 0; t < c.T; ++t)
          kernels::attention(in.q.data() + t * width, k, v, alone.data() + t * width, {1, c.pos0 + t, c.n_heads, c.n_kv, D, stride, scale},
                             pool, scratch);
        CHECK(std::memcmp(prefill.data(), alone.data(), prefill.size() * sizeof(float)) == 0);
        CHECK(attention_error(c, in, dt, threads) < 2e-5);
      }
}
