// kernix/detail/dtype.h -- element types, and which C++ types view which.
//
// Included by kernix/common.h (include that).  Declares, in namespace kernix
// (also named BE):
//   DType                 the element types XLA can hand a function, numbered
//                         as XLA numbers them;
//   dtype_name(), dtype_bits(), dtype_size();
//   element_dtype<T>      the dtype whose elements are exactly T.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

// The CUDA element types, declared as CUDA's own headers declare them
// (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h), so that BE::element_dtype names them
// without including those headers (each adds about half a second to a CUDA
// compile).  Where a source never includes them they stay incomplete.
struct __half;
struct __nv_bfloat16;
struct __nv_fp8_e4m3;
struct __nv_fp8_e5m2;

// Host and device on CUDA compiles, plain functions otherwise.
#if defined(__CUDACC__) || defined(__CUDA__)
#define KERNIX_HD __host__ __device__
#else
#define KERNIX_HD
#endif

namespace kernix {

// Element types, numbered as XLA numbers them (XLA_FFI_DataType), so a value
// read from an XLA buffer converts with a plain cast.
enum class DType : int32_t {
  Invalid = 0,
  Bool = 1,
  Int8 = 2,
  Int16 = 3,
  Int32 = 4,
  Int64 = 5,
  UInt8 = 6,
  UInt16 = 7,
  UInt32 = 8,
  UInt64 = 9,
  Float16 = 10,
  Float32 = 11,
  Float64 = 12,
  Complex64 = 15,
  BFloat16 = 16,
  Token = 17,
  Complex128 = 18,
  Float8E5M2 = 19,
  Float8E4M3FN = 20,
  Int4 = 21,
  UInt4 = 22,
  Float8E4M3B11FNUZ = 23,
  Float8E5M2FNUZ = 24,
  Float8E4M3FNUZ = 25,
  Int2 = 26,
  UInt2 = 27,
  Float8E4M3 = 28,
  Float8E3M4 = 29,
  Int1 = 30,
  UInt1 = 31,
  Float4E2M1FN = 32,
  Float8E8M0FNU = 33,
};

// The dtype's name as JAX/numpy spell it ("float32", "bfloat16", ...).
KERNIX_HD inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::Int8: return "int8";
    case DType::Int16: return "int16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::UInt8: return "uint8";
    case DType::UInt16: return "uint16";
    case DType::UInt32: return "uint32";
    case DType::UInt64: return "uint64";
    case DType::Float16: return "float16";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Complex64: return "complex64";
    case DType::BFloat16: return "bfloat16";
    case DType::Token: return "token";
    case DType::Complex128: return "complex128";
    case DType::Float8E5M2: return "float8_e5m2";
    case DType::Float8E4M3FN: return "float8_e4m3fn";
    case DType::Int4: return "int4";
    case DType::UInt4: return "uint4";
    case DType::Float8E4M3B11FNUZ: return "float8_e4m3b11fnuz";
    case DType::Float8E5M2FNUZ: return "float8_e5m2fnuz";
    case DType::Float8E4M3FNUZ: return "float8_e4m3fnuz";
    case DType::Int2: return "int2";
    case DType::UInt2: return "uint2";
    case DType::Float8E4M3: return "float8_e4m3";
    case DType::Float8E3M4: return "float8_e3m4";
    case DType::Int1: return "int1";
    case DType::UInt1: return "uint1";
    case DType::Float4E2M1FN: return "float4_e2m1fn";
    case DType::Float8E8M0FNU: return "float8_e8m0fnu";
    case DType::Invalid: break;
  }
  return "invalid";
}

// Size of one element in bits (sub-byte types are packed by XLA).
KERNIX_HD inline int dtype_bits(DType t) {
  switch (t) {
    case DType::Int1: case DType::UInt1: return 1;
    case DType::Int2: case DType::UInt2: return 2;
    case DType::Int4: case DType::UInt4: case DType::Float4E2M1FN: return 4;
    case DType::Bool: case DType::Int8: case DType::UInt8:
    case DType::Float8E5M2: case DType::Float8E4M3FN: case DType::Float8E4M3B11FNUZ:
    case DType::Float8E5M2FNUZ: case DType::Float8E4M3FNUZ: case DType::Float8E4M3:
    case DType::Float8E3M4: case DType::Float8E8M0FNU: return 8;
    case DType::Int16: case DType::UInt16: case DType::Float16: case DType::BFloat16: return 16;
    case DType::Int32: case DType::UInt32: case DType::Float32: return 32;
    case DType::Int64: case DType::UInt64: case DType::Float64: case DType::Complex64: return 64;
    case DType::Complex128: return 128;
    case DType::Token: case DType::Invalid: break;
  }
  return 0;
}

// Bytes of one element (0 for sub-byte types and invalid).
KERNIX_HD inline size_t dtype_size(DType t) { return static_cast<size_t>(dtype_bits(t) / 8); }

// ---- Which C++ types view which dtype --------------------------------------

// BE::element_dtype<T>::value: the dtype whose elements are exactly T, or
// DType::Invalid.  const and volatile are ignored.
//
//   bool                                     bool
//   char, signed char, unsigned char, short, the integer dtype of their size
//   int, long, long long and the unsigned    and signedness: int64_t, `long`
//   ones                                     and `long long` all view int64;
//                                            plain char views int8 where char
//                                            is signed (x86-64), uint8 where it
//                                            is not (AArch64)
//   float, double                            float32, float64
//   __half, __nv_bfloat16                    float16, bfloat16
//   __nv_fp8_e4m3, __nv_fp8_e5m2             float8_e4m3fn, float8_e5m2
//   a class with real() returning float or   complex64 / complex128, when
//   double (std::complex, thrust::complex,   its size is twice that of the
//   cuda::std::complex), or with members x   part
//   and y of that type (float2, double2,
//   cuFloatComplex)
//
// Specialise it for a type of your own:
//   template <> struct BE::element_dtype<MyHalf> : BE::dtype_constant<BE::DType::Float16> {};
template <DType D>
struct dtype_constant {
  static constexpr DType value = D;
};

namespace detail {

template <typename T>
struct is_standard_integer
    : std::integral_constant<bool, std::is_same<T, char>::value || std::is_same<T, signed char>::value ||
                                       std::is_same<T, unsigned char>::value || std::is_same<T, short>::value ||
                                       std::is_same<T, unsigned short>::value || std::is_same<T, int>::value ||
                                       std::is_same<T, unsigned int>::value || std::is_same<T, long>::value ||
                                       std::is_same<T, unsigned long>::value || std::is_same<T, long long>::value ||
                                       std::is_same<T, unsigned long long>::value> {};

KERNIX_HD constexpr DType integer_dtype(size_t size, bool is_signed) {
  return size == 1   ? (is_signed ? DType::Int8 : DType::UInt8)
         : size == 2 ? (is_signed ? DType::Int16 : DType::UInt16)
         : size == 4 ? (is_signed ? DType::Int32 : DType::UInt32)
         : size == 8 ? (is_signed ? DType::Int64 : DType::UInt64)
                     : DType::Invalid;
}

// The part type of a complex-like class: what real() returns, else the type
// of members x and y when they have one type; void when neither.
template <typename T, typename = void>
struct xy_part {
  using type = void;
};
template <typename T>
struct xy_part<T, std::void_t<decltype(std::declval<const T&>().x), decltype(std::declval<const T&>().y)>> {
  using X = std::remove_cv_t<std::remove_reference_t<decltype(std::declval<const T&>().x)>>;
  using Y = std::remove_cv_t<std::remove_reference_t<decltype(std::declval<const T&>().y)>>;
  using type = typename std::conditional<std::is_same<X, Y>::value, X, void>::type;
};
template <typename T, typename = void>
struct complex_part : xy_part<T> {};
template <typename T>
struct complex_part<T, std::void_t<decltype(std::declval<const T&>().real())>> {
  using type = std::remove_cv_t<std::remove_reference_t<decltype(std::declval<const T&>().real())>>;
};

template <typename T>
constexpr DType class_dtype() {
  using P = typename complex_part<T>::type;
  if constexpr (std::is_same<P, float>::value) {
    return sizeof(T) == 2 * sizeof(float) ? DType::Complex64 : DType::Invalid;
  } else if constexpr (std::is_same<P, double>::value) {
    return sizeof(T) == 2 * sizeof(double) ? DType::Complex128 : DType::Invalid;
  } else {
    return DType::Invalid;
  }
}

template <typename T>
constexpr DType default_element_dtype() {
  if constexpr (std::is_same<T, bool>::value) {
    return DType::Bool;
  } else if constexpr (is_standard_integer<T>::value) {
    return integer_dtype(sizeof(T), std::is_signed<T>::value);
  } else if constexpr (std::is_same<T, float>::value) {
    return DType::Float32;
  } else if constexpr (std::is_same<T, double>::value) {
    return DType::Float64;
  } else if constexpr (std::is_class<T>::value) {
    return class_dtype<T>();
  } else {
    return DType::Invalid;
  }
}

}  // namespace detail

template <typename T>
struct element_dtype : dtype_constant<detail::default_element_dtype<T>()> {};
template <typename T>
struct element_dtype<const T> : element_dtype<T> {};
template <typename T>
struct element_dtype<volatile T> : element_dtype<T> {};
template <typename T>
struct element_dtype<const volatile T> : element_dtype<T> {};
template <>
struct element_dtype<::__half> : dtype_constant<DType::Float16> {};
template <>
struct element_dtype<::__nv_bfloat16> : dtype_constant<DType::BFloat16> {};
template <>
struct element_dtype<::__nv_fp8_e4m3> : dtype_constant<DType::Float8E4M3FN> {};
template <>
struct element_dtype<::__nv_fp8_e5m2> : dtype_constant<DType::Float8E5M2> {};

namespace detail {

// Whether data_ptr<T>() views elements of dtype `d`: T is the dtype's own
// type (element_dtype), void, or one of two documented readings of the bytes:
// uint16_t for float16 and bfloat16 (their bit pattern), and a one-byte
// integer type (char, int8_t, uint8_t) for bool (0 or 1; write only 0 or 1).
template <typename T>
constexpr bool views(DType d) {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_void<U>::value) {
    return true;
  } else {
    if (d != DType::Invalid && element_dtype<U>::value == d) return true;
    if constexpr (std::is_same<U, uint16_t>::value) return d == DType::Float16 || d == DType::BFloat16;
    if constexpr (is_standard_integer<U>::value) return sizeof(U) == 1 && d == DType::Bool;
    return false;
  }
}

// sizeof(T), or 0 for void and incomplete types.
template <typename T, typename = void>
struct size_or_zero : std::integral_constant<size_t, 0> {};
template <typename T>
struct size_or_zero<T, std::void_t<decltype(sizeof(T))>> : std::integral_constant<size_t, sizeof(T)> {};

}  // namespace detail
}  // namespace kernix
