// kernix/dispatch.h -- run code once per element type (included by common.h).
//
//   BE_DISPATCH_FLOATING_TYPES(x.dtype(), "my_op", [&] {
//     my_kernel<scalar_t><<<grid, block, 0, stream>>>(x.data_ptr<scalar_t>(), ...);
//   });
//
// Inside the lambda `scalar_t` is the C++ type of the tensor's dtype.  A dtype
// outside the set throws BE::Error naming the operation and the dtype.
//
// BE_DISPATCH_FLOATING_AND_HALF_TYPES also covers float16 (__half) and
// bfloat16 (__nv_bfloat16): include <cuda_fp16.h> and <cuda_bf16.h> anywhere
// before using it.  kernix/common.h does not include them itself, since they
// add about half a second to every CUDA compile.
#pragma once

#define BE_DISPATCH_CASE(ENUM, TYPE, ...) \
  case ::kernix::DType::ENUM: {           \
    using scalar_t [[maybe_unused]] = TYPE; \
    return __VA_ARGS__();                 \
  }

#define BE_DISPATCH_SWITCH(DTYPE, NAME, CASES)                                              \
  [&] {                                                                                     \
    const ::kernix::DType be_dispatch_dtype_ = (DTYPE);                                     \
    switch (be_dispatch_dtype_) {                                                           \
      CASES                                                                                 \
      default: {                                                                            \
        ::kernix::detail::Message be_dispatch_name_;                                        \
        be_dispatch_name_ << NAME;                                                          \
        ::kernix::detail::unsupported_dtype(be_dispatch_name_.c_str(), be_dispatch_dtype_); \
      }                                                                                     \
    }                                                                                       \
  }()

#define BE_FLOATING_CASES_(...)                 \
  BE_DISPATCH_CASE(Float32, float, __VA_ARGS__) \
  BE_DISPATCH_CASE(Float64, double, __VA_ARGS__)

#define BE_INTEGRAL_CASES_(...)                    \
  BE_DISPATCH_CASE(Int8, int8_t, __VA_ARGS__)      \
  BE_DISPATCH_CASE(Int16, int16_t, __VA_ARGS__)    \
  BE_DISPATCH_CASE(Int32, int32_t, __VA_ARGS__)    \
  BE_DISPATCH_CASE(Int64, int64_t, __VA_ARGS__)    \
  BE_DISPATCH_CASE(UInt8, uint8_t, __VA_ARGS__)    \
  BE_DISPATCH_CASE(UInt16, uint16_t, __VA_ARGS__)  \
  BE_DISPATCH_CASE(UInt32, uint32_t, __VA_ARGS__)  \
  BE_DISPATCH_CASE(UInt64, uint64_t, __VA_ARGS__)

#define BE_HALF_CASES_(...)                          \
  BE_DISPATCH_CASE(Float16, __half, __VA_ARGS__)     \
  BE_DISPATCH_CASE(BFloat16, __nv_bfloat16, __VA_ARGS__)

// float32, float64.
#define BE_DISPATCH_FLOATING_TYPES(DTYPE, NAME, ...) \
  BE_DISPATCH_SWITCH(DTYPE, NAME, BE_FLOATING_CASES_(__VA_ARGS__))

// float32, float64, float16 as __half, bfloat16 as __nv_bfloat16 (needs
// <cuda_fp16.h> and <cuda_bf16.h>).
#define BE_DISPATCH_FLOATING_AND_HALF_TYPES(DTYPE, NAME, ...) \
  BE_DISPATCH_SWITCH(DTYPE, NAME, BE_FLOATING_CASES_(__VA_ARGS__) BE_HALF_CASES_(__VA_ARGS__))

// Signed and unsigned integers of 8 to 64 bits.
#define BE_DISPATCH_INTEGRAL_TYPES(DTYPE, NAME, ...) \
  BE_DISPATCH_SWITCH(DTYPE, NAME, BE_INTEGRAL_CASES_(__VA_ARGS__))

// float32, float64, the integers above, and bool.
#define BE_DISPATCH_ALL_TYPES(DTYPE, NAME, ...) \
  BE_DISPATCH_SWITCH(DTYPE, NAME,               \
                     BE_FLOATING_CASES_(__VA_ARGS__) BE_INTEGRAL_CASES_(__VA_ARGS__) BE_DISPATCH_CASE(Bool, bool, __VA_ARGS__))
