// Writes new key and value rows into a layer's KV cache slab (f32 as copies, f16 rounded to
// nearest-even), the layout attention.hpp reads. Oracle: store_kv_ref.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kylin/kernels/simd.hpp"
#include "kylin/kernels/types.hpp"

namespace kylin::kernels {

// One layer's cache slab layout: [n_kv_heads][capacity][head_dim], head_stride = capacity * head_dim.
struct KVLayout {
  std::int64_t n_kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t head_stride = 0;
};

// New key or value rows [n_tokens, n_kv_heads * head_dim], written at positions pos0...
struct KVRows {
  const float* rows = nullptr;
  std::int64_t n_tokens = 0;
  std::int64_t pos0 = 0;
};

// Scalar reference of store_kv: rounded to nearest-even when the cache is f16.
inline void store_kv_ref(KVRef cache, const KVLayout& layout, const KVRows& in) {
  const std::int64_t n_kv = layout.n_kv_heads, head_dim = layout.head_dim;
  visit_dtype(cache.dtype, [&]<class T>(std::type_identity<T>) {
    for (std::int64_t t = 0; t < in.n_tokens; ++t)
      for (std::int64_t h = 0; h < n_kv; ++h)
        for (std::int64_t i = 0; i < head_dim; ++i) {
          const float x = in.rows[(t * n_kv + h) * head_dim + i];
          T& dst = cache.as<T>()[h * layout.head_stride + (in.pos0 + t) * head_dim + i];
          if constexpr (std::is_same_v<T, f16_t>) dst = f16_t{f32_to_f16(x)};
          else if constexpr (std::is_same_v<T, bf16_t>) dst = bf16_t{f32_to_bf16(x)};
          else dst = x;
        }
  });
}

inline void store_kv(KVRef cache, const KVLayout& layout, const KVRows& in) {
  const std::int64_t n_kv = layout.n_kv_heads, head_dim = layout.head_dim;
  if (cache.dtype == DType::f32) {  // a copy of each head's row
    for (std::int64_t t = 0; t < in.n_tokens; ++t)
      for (std::int64_t h = 0; h < n_kv; ++h)
        std::copy_n(in.rows + (t * n_kv + h) * head_dim, head_dim, cache.as<float>() + h * layout.head_stride + (in.pos0 + t) * head_dim);
    return;
  }
  if constexpr (simd_enabled) {
    if (cache.dtype == DType::f16 && head_dim % static_cast<std::int64_t>(lanes) == 0) {
      for (std::int64_t t = 0; t < in.n_tokens; ++t)
        for (std::int64_t h = 0; h < n_kv; ++h) {
          const float* src = in.rows + (t * n_kv + h) * head_dim;
          f16_t* dst = cache.as<f16_t>() + h * layout.head_stride + (in.pos0 + t) * head_dim;
          for (std::int64_t i = 0; i < head_dim; i += lanes) store_as(dst + i, fbatch::load_unaligned(src + i));
        }
      return;
    }
  }
  store_kv_ref(cache, layout, in);
}

}  // namespace kylin::kernels
