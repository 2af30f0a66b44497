// Zero-copy Eigen views of kylin's data, for downstream linear algebra: checkpoint tensors and
// bound weights in their stored dtype (F32/F16/BF16 as float / Eigen::half / Eigen::bfloat16),
// and f32 row buffers (logits [rows, vocab], hidden states [rows, hidden]). The kernels do not use Eigen.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <ranges>
#include <string>
#include <type_traits>

#include "kylin/core/dtype.hpp"
#include "kylin/core/error.hpp"
#include "kylin/io/safetensors.hpp"
#include "kylin/kernels/matmul.hpp"

namespace kylin::eigen {

// Row-major like safetensors and kylin's buffers: element (r, c) of a [rows, cols] tensor is data[r * cols + c].
template <class Scalar>
using RowMatrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// Unaligned: safetensors only guarantees element alignment (kylin re-aligns tensors to that at
// load), not the 16 bytes Eigen would otherwise assume for vectorized loads.
template <class Scalar>
using ConstMatrixMap = Eigen::Map<const RowMatrix<Scalar>, Eigen::Unaligned>;
template <class Scalar>
using MatrixMap = Eigen::Map<RowMatrix<Scalar>, Eigen::Unaligned>;

// The mapped memory holds the raw 16-bit patterns, so Eigen's types must be exactly those bits:
// IEEE binary16 for half, the top half of a float for bfloat16, with no padding or extra alignment.
static_assert(sizeof(Eigen::half) == 2 && alignof(Eigen::half) <= 2, "Eigen::half must be a bare 16-bit value");
static_assert(sizeof(Eigen::bfloat16) == 2 && alignof(Eigen::bfloat16) <= 2, "Eigen::bfloat16 must be a bare 16-bit value");
static_assert(std::is_trivially_copyable_v<Eigen::half> && std::is_standard_layout_v<Eigen::half>,
              "Eigen::half must be readable in place from mapped bytes");
static_assert(std::is_trivially_copyable_v<Eigen::bfloat16> && std::is_standard_layout_v<Eigen::bfloat16>,
              "Eigen::bfloat16 must be readable in place from mapped bytes");

// The Eigen scalar type of each viewable dtype; any other Scalar is a compile-time error.
template <class Scalar>
struct ScalarDType;
template <>
struct ScalarDType<float> {
  static constexpr DType dtype = DType::f32;
  static constexpr const char* name = "float";
};
template <>
struct ScalarDType<Eigen::half> {
  static constexpr DType dtype = DType::f16;
  static constexpr const char* name = "Eigen::half";
};
template <>
struct ScalarDType<Eigen::bfloat16> {
  static constexpr DType dtype = DType::bf16;
  static constexpr const char* name = "Eigen::bfloat16";
};

// kylin's storage tag of a dtype (what visit_dtype hands out) to the Eigen scalar of the same bits.
template <class Storage>
struct EigenScalarOf;
template <>
struct EigenScalarOf<float> { using type = float; };
template <>
struct EigenScalarOf<f16_t> { using type = Eigen::half; };
template <>
struct EigenScalarOf<bf16_t> { using type = Eigen::bfloat16; };
static_assert(sizeof(Eigen::half) == sizeof(f16_t) && sizeof(Eigen::bfloat16) == sizeof(bf16_t));

template <class Scalar>
concept ViewScalar = requires { ScalarDType<Scalar>::dtype; };

// How a 1-D tensor of n elements is viewed: [1, n] (the default, as kylin binds norm weights) or [n, 1].
enum class VectorAs { row, column };

namespace detail {

template <ViewScalar Scalar>
void check_dtype(DType stored, const std::string& what) {
  if (stored == ScalarDType<Scalar>::dtype) return;
  std::string hint;  // the type that would work, when there is one
  if (info(stored).runnable)
    hint = visit_dtype(stored, []<class T>(std::type_identity<T>) {
      return std::string(" (view it as ") + ScalarDType<typename EigenScalarOf<T>::type>::name + ")";
    });
  throw Error(ErrorCategory::request, what,
              "dtype " + std::string(dtype_name(stored)) + " cannot be viewed as " + ScalarDType<Scalar>::name +
                  " (which needs " + std::string(dtype_name(ScalarDType<Scalar>::dtype)) + ")" + hint);
}

template <ViewScalar Scalar>
const Scalar* checked_pointer(const void* data, const std::string& what) {
  if (reinterpret_cast<std::uintptr_t>(data) % alignof(Scalar) != 0)
    throw Error(ErrorCategory::request, what, std::string("data is not aligned to ") + std::to_string(alignof(Scalar)) +
                                                  " bytes, as " + ScalarDType<Scalar>::name + " needs");
  // The mapped bytes are read in place as Scalar objects, as kylin's own kernels read bf16_t/f16_t.
  return static_cast<const Scalar*>(data);
}

inline std::string tensor_context(const io::TensorView& t) { return t.file ? *t.file + ": " + t.name : t.name; }

}  // namespace detail

// A checkpoint tensor as a [rows, cols] matrix in its stored dtype; valid while the Checkpoint
// (or SafetensorsFile) that holds it lives. Rank 2 is [shape[0], shape[1]]; rank 1 is a row or a
// column vector (`as`); rank 0 is 1x1. A dtype other than Scalar's, or a rank above 2, is an Error
// naming the tensor. Example: eigen::map<Eigen::bfloat16>(*ckpt.find("model.norm.weight")).
template <ViewScalar Scalar>
ConstMatrixMap<Scalar> map(const io::TensorView& t, VectorAs as = VectorAs::row) {
  const std::string what = detail::tensor_context(t);
  detail::check_dtype<Scalar>(t.dtype, what);
  if (t.shape.size() > 2)
    throw Error(ErrorCategory::request, what,
                "rank " + std::to_string(t.shape.size()) + " tensor " + io::shape_string(t.shape) +
                    " has no matrix view (ranks 0, 1 and 2 do); map its data with an explicit shape instead");
  Eigen::Index rows = 1, cols = 1;
  if (t.shape.size() == 2) {
    rows = static_cast<Eigen::Index>(t.shape[0]);
    cols = static_cast<Eigen::Index>(t.shape[1]);
  } else if (t.shape.size() == 1) {
    (as == VectorAs::row ? cols : rows) = static_cast<Eigen::Index>(t.shape[0]);
  }
  return ConstMatrixMap<Scalar>(detail::checked_pointer<Scalar>(t.data, what), rows, cols);
}

// A bound weight (kernels::MatRef, as weights.hpp binds it) as its [rows, cols] matrix: output
// features by input features, so W * x is the layer's projection. 1-D weights are [1, n].
template <ViewScalar Scalar>
ConstMatrixMap<Scalar> map(const kernels::MatRef& w) {
  const std::string what = "weight [" + std::to_string(w.rows) + "," + std::to_string(w.cols) + "]";
  if (!w.data) throw Error(ErrorCategory::request, what, "is not bound (null data)");
  if (w.layout != kernels::Layout::rows)
    throw Error(ErrorCategory::request, what,
                "is packed in 16-row panels for the CPU kernels, which no single Eigen map describes; map the checkpoint "
                "tensor (eigen::map(*checkpoint.find(name))) or load with WeightLayout::stored");
  detail::check_dtype<Scalar>(w.dtype, what);
  return ConstMatrixMap<Scalar>(detail::checked_pointer<Scalar>(w.data, what), static_cast<Eigen::Index>(w.rows),
                                static_cast<Eigen::Index>(w.cols));
}

// A float buffer of `rows` equal rows as a [rows, size/rows] matrix: logits [rows, vocab] or hidden
// states [rows, hidden] as Model::forward writes them. Writable when the buffer is; `data` must
// be an lvalue (or a span) that outlives the map, and its size a multiple of `rows`.
template <std::ranges::contiguous_range R>
  requires std::ranges::sized_range<R> && std::ranges::borrowed_range<R> &&
           std::same_as<std::ranges::range_value_t<R>, float>
auto map_rows(R&& data, std::int64_t rows) {
  const auto n = static_cast<std::int64_t>(std::ranges::size(data));
  if (rows <= 0 || n % rows != 0)
    throw Error(ErrorCategory::request, "map_rows",
                "a buffer of " + std::to_string(n) + " floats does not split into " + std::to_string(rows) + " equal rows");
  auto* p = std::ranges::data(data);
  using Map = std::conditional_t<std::is_const_v<std::remove_pointer_t<decltype(p)>>, ConstMatrixMap<float>, MatrixMap<float>>;
  return Map(p, static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(n / rows));
}

// Calls fn with the view of `t` in whatever F32/F16/BF16 dtype it is stored in, for code that
// does not care. fn's results are converted to its result for the float view, so return an
// evaluated value: [&](auto w) { return Eigen::VectorXd(w.template cast<double>() * x); }.
template <class Fn>
std::invoke_result_t<Fn&, ConstMatrixMap<float>> visit(const io::TensorView& t, Fn&& fn, VectorAs as = VectorAs::row) {
  using R = std::invoke_result_t<Fn&, ConstMatrixMap<float>>;
  if (!info(t.dtype).runnable)
    throw Error(ErrorCategory::request, detail::tensor_context(t),
                "dtype " + std::string(dtype_name(t.dtype)) + " has no Eigen view (F32, F16 and BF16 do)");
  return visit_dtype(t.dtype, [&]<class T>(std::type_identity<T>) -> R { return fn(map<typename EigenScalarOf<T>::type>(t, as)); });
}

// The same for a bound weight (binding admits only F32, F16 and BF16).
template <class Fn>
std::invoke_result_t<Fn&, ConstMatrixMap<float>> visit(const kernels::MatRef& w, Fn&& fn) {
  using R = std::invoke_result_t<Fn&, ConstMatrixMap<float>>;
  return visit_dtype(w.dtype, [&]<class T>(std::type_identity<T>) -> R { return fn(map<typename EigenScalarOf<T>::type>(w)); });
}

}  // namespace kylin::eigen
