// brainevent/dispatch.h -- block-form dispatch over a runtime dtype.
//
//   BE_DISPATCH_FLOATING(x.dtype(), scalar_t, {
//     my_kernel<scalar_t><<<grid, block, 0, stream>>>(x.data_ptr<scalar_t>(), n);
//   });
//
// The second argument names the type alias the block sees; the block runs
// once, for the tensor's dtype, inside an immediately-invoked lambda (a
// `return` leaves the dispatch).  A dtype outside the set fails a BE_CHECK
// (BE::CheckError naming the macro and the dtype).
//
//   BE_DISPATCH_FLOATING            float32, float64
//   BE_DISPATCH_FLOATING_AND_HALF   + float16, bfloat16 (CUDA compiles only)
//   BE_DISPATCH_INTEGRAL            bool and the 8- to 64-bit integers
//   BE_DISPATCH_SIGNED_INDEX        int32, int64
//   BE_DISPATCH_SIGNED_INDEX_PAIR   two of the above, nested
//   BE_DISPATCH_CSR_INDPTR          int32, int64
//   BE_DISPATCH_COMPLEX             complex64, complex128
//   BE_DISPATCH_ALL_TYPES           floating, integral, bool (no half, no complex)
//   BE_DISPATCH_ALL                 everything above
//   BE_CHECK_CSR_INDICES_INT32(t)   t must be int32
//
// kernix's lambda-form macros (BE_DISPATCH_FLOATING_TYPES(dtype, "name",
// [&] {...}), ...) stay available, except BE_DISPATCH_ALL_TYPES, which takes
// the block form once this header is included.
#pragma once

#include <cstdint>

#include "../kernix/common.h"

#if defined(__CUDACC__) || defined(__CUDA__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace kernix {

#if defined(__CUDACC__) || defined(__CUDA__)
using float16_t = __half;
using bfloat16_t = __nv_bfloat16;
#else
// 16-bit float storage on the host: the raw bits.
struct float16_t {
  uint16_t bits;
};
struct bfloat16_t {
  uint16_t bits;
};
#endif

struct complex64_t {
  float real;
  float imag;
};
struct complex128_t {
  double real;
  double imag;
};

// The dtypes these types view, for data_ptr<scalar_t>() (BE::element_dtype).
#if !(defined(__CUDACC__) || defined(__CUDA__))
template <>
struct element_dtype<float16_t> : dtype_constant<DType::Float16> {};
template <>
struct element_dtype<bfloat16_t> : dtype_constant<DType::BFloat16> {};
#endif
template <>
struct element_dtype<complex64_t> : dtype_constant<DType::Complex64> {};
template <>
struct element_dtype<complex128_t> : dtype_constant<DType::Complex128> {};

}  // namespace kernix

// One case: bind VAR to TYPE and run the block.
#define BE_BLOCK_CASE_(ENUM, TYPE, VAR, ...) \
  case ::kernix::DType::ENUM: {                  \
    using VAR [[maybe_unused]] = TYPE;       \
    __VA_ARGS__                              \
    break;                                   \
  }

#define BE_BLOCK_SWITCH_(DTYPE, MACRO, CASES)                                            \
  [&] {                                                                                  \
    const ::kernix::DType be_block_dtype_ = (DTYPE);                                         \
    switch (be_block_dtype_) {                                                           \
      CASES                                                                              \
      default:                                                                           \
        BE_CHECK(false) << MACRO ": unsupported dtype " << ::kernix::dtype_name(be_block_dtype_); \
    }                                                                                    \
  }()

#define BE_BLOCK_FLOATING_(V, ...) \
  BE_BLOCK_CASE_(Float32, float, V, __VA_ARGS__) BE_BLOCK_CASE_(Float64, double, V, __VA_ARGS__)
#define BE_BLOCK_HALF_(V, ...)                                 \
  BE_BLOCK_CASE_(Float16, ::kernix::float16_t, V, __VA_ARGS__)     \
  BE_BLOCK_CASE_(BFloat16, ::kernix::bfloat16_t, V, __VA_ARGS__)
#define BE_BLOCK_INTEGERS_(V, ...)                  \
  BE_BLOCK_CASE_(Int8, int8_t, V, __VA_ARGS__)      \
  BE_BLOCK_CASE_(Int16, int16_t, V, __VA_ARGS__)    \
  BE_BLOCK_CASE_(Int32, int32_t, V, __VA_ARGS__)    \
  BE_BLOCK_CASE_(Int64, int64_t, V, __VA_ARGS__)    \
  BE_BLOCK_CASE_(UInt8, uint8_t, V, __VA_ARGS__)    \
  BE_BLOCK_CASE_(UInt16, uint16_t, V, __VA_ARGS__)  \
  BE_BLOCK_CASE_(UInt32, uint32_t, V, __VA_ARGS__)  \
  BE_BLOCK_CASE_(UInt64, uint64_t, V, __VA_ARGS__)
#define BE_BLOCK_BOOL_(V, ...) BE_BLOCK_CASE_(Bool, bool, V, __VA_ARGS__)
#define BE_BLOCK_INDEX_(V, ...) \
  BE_BLOCK_CASE_(Int32, int32_t, V, __VA_ARGS__) BE_BLOCK_CASE_(Int64, int64_t, V, __VA_ARGS__)
#define BE_BLOCK_COMPLEX_(V, ...)                                 \
  BE_BLOCK_CASE_(Complex64, ::kernix::complex64_t, V, __VA_ARGS__)    \
  BE_BLOCK_CASE_(Complex128, ::kernix::complex128_t, V, __VA_ARGS__)

#define BE_DISPATCH_FLOATING(DTYPE, VAR, ...) \
  BE_BLOCK_SWITCH_(DTYPE, "BE_DISPATCH_FLOATING", BE_BLOCK_FLOATING_(VAR, __VA_ARGS__))

#if defined(__CUDACC__) || defined(__CUDA__)
#define BE_DISPATCH_FLOATING_AND_HALF(DTYPE, VAR, ...)       \
  BE_BLOCK_SWITCH_(DTYPE, "BE_DISPATCH_FLOATING_AND_HALF", \
                   BE_BLOCK_HALF_(VAR, __VA_ARGS__) BE_BLOCK_FLOATING_(VAR, __VA_ARGS__))
#else
#define BE_DISPATCH_FLOATING_AND_HALF(DTYPE, VAR, ...) \
  BE_BLOCK_SWITCH_(DTYPE, "BE_DISPATCH_FLOATING_AND_HALF", BE_BLOCK_FLOATING_(VAR, __VA_ARGS__))
#endif

#define BE_DISPATCH_INTEGRAL(DTYPE, VAR, ...) \
  BE_BLOCK_SWITCH_(DTYPE, "BE_DISPATCH_INTEGRAL", BE_BLOCK_BOOL_(VAR, __VA_ARGS__) BE_BLOCK_INTEGERS_(VAR, __VA_ARGS__))

#define BE_DISPATCH_SIGNED_INDEX(DTYPE, VAR, ...) \
  BE_BLOCK_SWITCH_(DTYPE, "BE_DISPATCH_SIGNED_INDEX", BE_BLOCK_INDEX_(VAR, __VA_ARGS__))

#define BE_DISPATCH_SIGNED_INDEX_PAIR(INDEX_DTYPE, OFFSET_DTYPE, INDEX_VAR, OFFSET_VAR, ...) \
  BE_DISPATCH_SIGNED_INDEX(INDEX_DTYPE, INDEX_VAR, { BE_DISPATCH_SIGNED_INDEX(OFFSET_DTYPE, OFFSET_VAR, __VA_ARGS__); })

#define BE_DISPATCH_CSR_INDPTR(DTYPE, VAR, ...) \
  BE_BLOCK_SWITCH_(DTYPE, "BE_DISPATCH_CSR_INDPTR", BE_BLOCK_INDEX_(VAR, __VA_ARGS__))

#define BE_DISPATCH_COMPLEX(DTYPE, VAR, ...) \
  BE_BLOCK_SWITCH_(DTYPE, "BE_DISPATCH_COMPLEX", BE_BLOCK_COMPLEX_(VAR, __VA_ARGS__))

#undef BE_DISPATCH_ALL_TYPES
#define BE_DISPATCH_ALL_TYPES(DTYPE, VAR, ...)                                              \
  BE_BLOCK_SWITCH_(DTYPE, "BE_DISPATCH_ALL_TYPES",                                          \
                   BE_BLOCK_FLOATING_(VAR, __VA_ARGS__) BE_BLOCK_BOOL_(VAR, __VA_ARGS__)    \
                   BE_BLOCK_INTEGERS_(VAR, __VA_ARGS__))

#define BE_DISPATCH_ALL(DTYPE, VAR, ...)                                                   \
  BE_BLOCK_SWITCH_(DTYPE, "BE_DISPATCH_ALL",                                               \
                   BE_BLOCK_HALF_(VAR, __VA_ARGS__) BE_BLOCK_FLOATING_(VAR, __VA_ARGS__)   \
                   BE_BLOCK_BOOL_(VAR, __VA_ARGS__) BE_BLOCK_INTEGERS_(VAR, __VA_ARGS__)   \
                   BE_BLOCK_COMPLEX_(VAR, __VA_ARGS__))

#define BE_CHECK_CSR_INDICES_INT32(TENSOR)                                      \
  do {                                                                          \
    const ::kernix::DType be_csr_dtype_ = (TENSOR).dtype();                         \
    BE_CHECK(be_csr_dtype_ == ::kernix::DType::Int32)                               \
        << "CSR kernels need int32 indices, got " << ::kernix::dtype_name(be_csr_dtype_); \
  } while (0)
