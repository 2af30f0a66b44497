// store_kv against the core f32_to_f16 per element (not the kernel's own reference): f16 rounding
// of normals, subnormals, overflow and ties, f32 copied verbatim, the vector store and its tail.
#include <doctest/doctest.h>

#include <bit>
#include <cstring>

#include "helpers.hpp"
#include "kylin/kernels/kv_store.hpp"

using namespace kylin;

TEST_CASE("store_kv rounds to f16 exactly like f32_to_f16 (normals, subnormals, overflow) and copies f32 verbatim") {
  // head_dim 32 takes the vector store on every SIMD build, 20 the element-wise tail
  for (std::int64_t D : {32, 20}) {
    const std::int64_t n_kv = 2, T = 3, pos0 = 1, stride = (pos0 + T) * D;
    auto rows = test::random_floats(T * n_kv * D, 21, 3.f);
    rows[0] = 1e-6f;   // f16 subnormal
    rows[1] = -3e-8f;  // below half the smallest subnormal
    rows[2] = 70000.f; // overflows to inf
    rows[3] = 65519.f; // rounds down to the largest finite f16
    rows[4] = 1.0f + 1.0f / 2048.f;  // a tie: rounds to even
    for (DType dt : {DType::f16, DType::f32}) {
      CAPTURE(D);
      CAPTURE(dtype_name(dt));
      const std::size_t elem = dt == DType::f16 ? 2 : 4;
      std::vector<std::byte> cache(static_cast<std::size_t>(n_kv * stride) * elem);
      kernels::store_kv({dt, cache.data()}, {n_kv, D, stride}, {rows.data(), T, pos0});
      // row (t, h) lands at [h][pos0 + t][:] of the [n_kv][capacity][D] cache
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t h = 0; h < n_kv; ++h)
          for (std::int64_t i = 0; i < D; ++i) {
            const float x = rows[static_cast<std::size_t>((t * n_kv + h) * D + i)];
            const std::byte* at = cache.data() + static_cast<std::size_t>(h * stride + (pos0 + t) * D + i) * elem;
            if (dt == DType::f16) {
              std::uint16_t bits;
              std::memcpy(&bits, at, 2);
              REQUIRE(bits == f32_to_f16(x));
            } else {
              std::uint32_t bits;
              std::memcpy(&bits, at, 4);
              REQUIRE(bits == std::bit_cast<std::uint32_t>(x));
            }
          }
    }
  }
}
