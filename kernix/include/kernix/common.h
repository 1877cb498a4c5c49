// kernix/common.h -- the C++ side of kernix.
//
// Include this in every source that kernix compiles.  It gives:
//   BE::DType        the element types XLA can hand a function, with names;
//   BE::Tensor       a non-owning view of one XLA buffer (data, dtype, shape);
//                    data_ptr<T>() takes only the C++ types of its dtype
//                    (BE::element_dtype), reinterpret_ptr<T>() any type of the
//                    element's size;
//   BE::TensorOf<T>  a BE::Tensor whose dtype is fixed by T (inference and the
//                    Python callable check it);
//   BE::InOut, BE::InOutOf<T>  a tensor updated in place: an input whose new
//                    value is an output (XLA aliases the two buffers);
//   BE::Span<const T> a read-only view of an array attribute;
//   BE::Scratch      scratch memory XLA allocates for the call;
//   BE::State<T>     the per-instance state (a T made once per compiled call);
//   BE::ThreadPool   XLA's intra-op thread pool ("kernix/threads.h");
//   BE::Error        the exception the checks throw (kernix turns it into a
//                    JAX error; it never aborts the process);
//   BE_CHECK(cond) << "message";
//   BE_CUDA_CHECK(expr);  BE_CHECK_KERNEL_LAUNCH();   (CUDA sources)
//   BE_DISPATCH_*        run a lambda with `scalar_t` bound to a tensor's type.
//
// The header needs only a few light C++17 standard headers (no <string> or
// <sstream>, which cost nvcc about half a second per file): it compiles
// without XLA's FFI headers and, for C++ sources, without CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <type_traits>
#include <utility>

// Relative to this file: the view kernix's generated code passes.
#include "detail/tensor_view.h"

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

namespace BE {

// The rank up to which a Tensor keeps its shape inside the object.
static constexpr int kMaxDim = 8;

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

namespace detail {

// A bounded message buffer: text, numbers, pointers, DType names and any
// string type with c_str() (std::string) can be streamed into it.
class Message {
 public:
  Message() { text_[0] = '\0'; }

  const char* c_str() const { return text_; }

  Message& operator<<(const char* s) {
    append(s ? s : "(null)");
    return *this;
  }
  Message& operator<<(char c) {
    char s[2] = {c, '\0'};
    append(s);
    return *this;
  }
  Message& operator<<(bool b) {
    append(b ? "true" : "false");
    return *this;
  }
  Message& operator<<(DType t) {
    append(dtype_name(t));
    return *this;
  }
  template <typename T>
  Message& operator<<(const T& value) {
    char buf[64];
    if constexpr (std::is_integral<T>::value && std::is_signed<T>::value) {
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(value));
      append(buf);
    } else if constexpr (std::is_integral<T>::value) {
      std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(value));
      append(buf);
    } else if constexpr (std::is_floating_point<T>::value) {
      std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(value));
      append(buf);
    } else if constexpr (std::is_enum<T>::value) {
      *this << static_cast<typename std::underlying_type<T>::type>(value);
    } else if constexpr (std::is_pointer<T>::value) {
      std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(value));
      append(buf);
    } else {
      append(value.c_str());  // std::string and the like
    }
    return *this;
  }

 private:
  void append(const char* s) {
    size_t room = sizeof(text_) - 1 - length_;
    size_t n = std::strlen(s);
    if (n > room) n = room;
    std::memcpy(text_ + length_, s, n);
    length_ += n;
    text_[length_] = '\0';
  }

  char text_[2048];
  size_t length_ = 0;
};

}  // namespace detail

// The exception thrown by a failed check.  kernix catches it at the FFI
// boundary and reports what() as a JAX error.  Throw it yourself with any
// text: `throw BE::Error("message")` or a std::string.
class Error : public std::exception {
 public:
  explicit Error(const char* message) { std::snprintf(text_, sizeof text_, "%s", message ? message : ""); }
  template <typename S, typename = decltype(std::declval<const S&>().c_str())>
  explicit Error(const S& message) : Error(message.c_str()) {}
  const char* what() const noexcept override { return text_; }

 private:
  char text_[2048];
};

// What BE_CHECK throws (brainevent's name for a failed check).
class CheckError : public Error {
 public:
  using Error::Error;
};

// What BE_CUDA_CHECK throws (brainevent's name for a failed CUDA call).
class CudaError : public Error {
 public:
  using Error::Error;
};

namespace detail {

// Collects the message of a failed BE_CHECK; see the macro below.
class CheckMessage {
 public:
  CheckMessage(const char* file, int line, const char* condition) {
    message_ << file << ":" << line << ": check failed: " << condition;
  }
  template <typename T>
  CheckMessage& operator<<(const T& value) {
    if (!has_text_) {
      message_ << ": ";
      has_text_ = true;
    }
    message_ << value;
    return *this;
  }
  const char* c_str() const { return message_.c_str(); }

 private:
  Message message_;
  bool has_text_ = false;
};

// `Raise() & message` throws; `&` binds looser than `<<`, so the whole
// streamed message is built first.
struct Raise {
  [[noreturn]] void operator&(const CheckMessage& message) const { throw CheckError(message.c_str()); }
};

}  // namespace detail

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

// The compiler's text naming T ("... [with T = const float]"), for messages.
template <typename T>
inline const char* pretty_type() {
  return __PRETTY_FUNCTION__;
}

// Appends the type named by pretty_type's text.
inline void append_type(Message& m, const char* pretty) {
  const char* s = std::strstr(pretty, "T = ");
  if (s == nullptr) {
    m << "T";
    return;
  }
  char name[256];
  size_t n = 0;
  int depth = 0;
  for (s += 4; *s != '\0' && n + 1 < sizeof name; ++s) {
    char c = *s;
    if (depth == 0 && (c == ']' || c == ';')) break;
    if (c == '<' || c == '(' || c == '[') ++depth;
    if (c == '>' || c == ')' || c == ']') --depth;
    name[n++] = c;
  }
  name[n] = '\0';
  m << static_cast<const char*>(name);
}

// The C++ type that views one element of `t`, for messages, or nullptr.
inline const char* element_type_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::Int8: return "int8_t";
    case DType::Int16: return "int16_t";
    case DType::Int32: return "int32_t";
    case DType::Int64: return "int64_t";
    case DType::UInt8: return "uint8_t";
    case DType::UInt16: return "uint16_t";
    case DType::UInt32: return "uint32_t";
    case DType::UInt64: return "uint64_t";
    case DType::Float16: return "__half";
    case DType::BFloat16: return "__nv_bfloat16";
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    case DType::Complex64: return "std::complex<float>";
    case DType::Complex128: return "std::complex<double>";
    case DType::Float8E4M3FN: return "__nv_fp8_e4m3";
    case DType::Float8E5M2: return "__nv_fp8_e5m2";
    default: return nullptr;
  }
}

// What a Tensor tells a message about itself.
struct TensorFacts {
  DType dtype;
  int64_t ndim;
  const int64_t* dims;
  const char* name;  // the parameter's name, or nullptr
};

// "parameter 'x' is int32 (shape [3, 4])".
inline void describe(Message& m, const TensorFacts& t) {
  if (t.name != nullptr && *t.name != '\0') {
    m << "parameter '" << t.name << "'";
  } else {
    m << "the tensor";
  }
  m << " is " << t.dtype << " (shape [";
  for (int64_t d = 0; d < t.ndim; ++d) m << (d ? ", " : "") << t.dims[d];
  m << "])";
}

// "Give 'x' dtype float32" (or "Give the tensor ...").
inline void give_dtype(Message& m, const TensorFacts& t, DType want) {
  m << "Give ";
  if (t.name != nullptr && *t.name != '\0') {
    m << "'" << t.name << "'";
  } else {
    m << "the tensor";
  }
  m << " dtype " << want;
}

// data_ptr<T>() of a tensor whose dtype T does not view.
[[noreturn]] __attribute__((cold, noinline)) inline void wrong_element_type(const TensorFacts& t,
                                                                           const char* pretty, size_t size,
                                                                           DType own) {
  Message m;
  m << "BE::Tensor::data_ptr<";
  append_type(m, pretty);
  m << ">(): ";
  describe(m, t);
  m << ", but ";
  append_type(m, pretty);
  if (own != DType::Invalid) {
    m << " views " << own << " elements";
  } else {
    m << " is the C++ type of no dtype";
  }
  size_t have = dtype_size(t.dtype);
  if (size != 0 && have != 0 && size != have) {
    m << " (" << static_cast<int64_t>(size) << " bytes, not " << static_cast<int64_t>(have)
      << (size > have ? ": reading numel() of them would run past the buffer)" : ")");
  }
  m << ". ";
  if (own != DType::Invalid) {
    give_dtype(m, t, own);
    m << ", or read";
  } else {
    m << "Read";
  }
  if (const char* type = element_type_name(t.dtype)) {
    m << " it as data_ptr<" << type << ">()";
    if (t.dtype == DType::Float16 || t.dtype == DType::BFloat16) m << ", or its bits as data_ptr<uint16_t>()";
    m << " (or dispatch on its dtype, BE_DISPATCH_*)";
  } else {
    m << " it after dispatching on its dtype (BE_DISPATCH_*)";
  }
  if (size != 0 && size == have) {
    m << "; reinterpret_ptr<";
    append_type(m, pretty);
    m << ">() views its bytes as ";
    append_type(m, pretty);
    m << " on purpose";
  }
  throw Error(m.c_str());
}

// reinterpret_ptr<T>() of a tensor whose elements are not sizeof(T) bytes.
[[noreturn]] __attribute__((cold, noinline)) inline void wrong_element_size(const TensorFacts& t,
                                                                           const char* pretty, size_t size) {
  Message m;
  m << "BE::Tensor::reinterpret_ptr<";
  append_type(m, pretty);
  m << ">(): ";
  describe(m, t);
  size_t have = dtype_size(t.dtype);
  if (have == 0) {
    m << ", elements of less than a byte";
  } else {
    m << ", elements of " << static_cast<int64_t>(have) << " bytes";
  }
  m << ", but ";
  append_type(m, pretty);
  m << " is " << static_cast<int64_t>(size) << " bytes: reinterpret_ptr<T>() views elements as a type of "
    << "their own size only. Cast data_ptr() yourself to view the buffer's bytes otherwise";
  throw Error(m.c_str());
}

// TensorOf<T> built from a buffer of another dtype.
[[noreturn]] __attribute__((cold, noinline)) inline void wrong_tensor_dtype(const TensorFacts& t,
                                                                           const char* pretty, DType own) {
  Message m;
  m << "BE::TensorOf<";
  append_type(m, pretty);
  m << ">: ";
  describe(m, t);
  m << ", not " << own << ". ";
  give_dtype(m, t, own);
  throw Error(m.c_str());
}

}  // namespace detail

// A non-owning view of one XLA buffer: a dense, row-major array.
//
// kernix builds one per `BE::Tensor` parameter.  Declare inputs `const`
// (`const BE::Tensor x`, `const BE::Tensor& x`, `BE::Tensor const& x`) and
// outputs non-const (`BE::Tensor out`, `BE::Tensor& out`).  The data pointer is
// a device pointer for CUDA targets and a host pointer for C++ targets.
//
// The API is source-compatible with brainevent's BE::Tensor: the shape of the
// first kMaxDim dimensions is stored in the object, so a Tensor passed by value
// to a CUDA kernel answers shape(i), stride(i), numel() on the device too.
// On the host any rank works.
class Tensor {
 public:
  Tensor() = default;
  // kernix's generated code builds tensors with this constructor; `name` (the
  // parameter's name, a string that outlives the tensor) is for messages.
  explicit Tensor(const ::kernix::TensorView& view, const char* name = nullptr)
      : Tensor(view.data, static_cast<DType>(view.xla_dtype), view.ndim, view.dims) {
    name_ = name;
  }
  Tensor(void* data, DType dtype, int64_t ndim, const int64_t* dims)
      : data_(data), dtype_(dtype), ndim_(ndim), dims_(dims) {
    if (ndim < 0) throw Error("BE::Tensor: negative rank");
    for (int64_t d = 0; d < ndim && d < kMaxDim; ++d) inline_dims_[d] = dims[d];
  }
  // brainevent's constructor: data, shape, rank, dtype (row-major strides).
  Tensor(void* data, const int64_t* shape, int ndim, DType dtype) : Tensor(data, dtype, ndim, shape) {}

  // Untyped data pointer.
  KERNIX_HD void* data_ptr() const { return data_; }
  // Typed data pointer: `x.data_ptr<float>()`.  On the host, T must view the
  // tensor's dtype (BE::element_dtype: float for float32, int32_t for int32,
  // __half for float16, ...), or be void, or uint16_t for float16/bfloat16
  // (the bits), or a one-byte integer for bool; any other T throws BE::Error
  // naming the parameter, its dtype and shape and T (an int32 array read as
  // float would compute garbage).  A default-constructed Tensor (no buffer)
  // gives nullptr for any T.  Not checked in device code.
  template <typename T>
  KERNIX_HD T* data_ptr() const {
#ifndef __CUDA_ARCH__
    if (!detail::views<T>(dtype_) && !(data_ == nullptr && dtype_ == DType::Invalid)) {
      detail::wrong_element_type(facts(), detail::pretty_type<T>(), detail::size_or_zero<std::remove_cv_t<T>>::value,
                                 element_dtype<T>::value);
    }
#endif
    return static_cast<T*>(data_);
  }
  // The data pointer as T*, whatever the dtype, when sizeof(T) is the element
  // size: viewing the bytes of float32 elements as uint32_t, of int16 ones as
  // __half, ... on purpose.  Other sizes throw BE::Error on the host.
  template <typename T>
  KERNIX_HD T* reinterpret_ptr() const {
    static_assert(!std::is_void<std::remove_cv_t<T>>::value, "reinterpret_ptr<void>(): use data_ptr()");
#ifndef __CUDA_ARCH__
    if (sizeof(T) != dtype_size(dtype_) || dtype_bits(dtype_) % 8 != 0) {
      detail::wrong_element_size(facts(), detail::pretty_type<T>(), sizeof(T));
    }
#endif
    return static_cast<T*>(data_);
  }
  KERNIX_HD void* data() const { return data_; }
  template <typename T>
  KERNIX_HD T* data() const { return data_ptr<T>(); }
  // The parameter's name when kernix built the tensor ("" otherwise).
  const char* name() const { return name_ != nullptr ? name_ : ""; }

  KERNIX_HD int64_t ndim() const { return ndim_; }
  KERNIX_HD int64_t dim() const { return ndim_; }
  // Extent of dimension i; negative i counts from the end (-1 is the last).
  // Out of range: BE::Error on the host (on the device, the caller's duty).
  KERNIX_HD int64_t shape(int64_t i) const {
    int64_t j = wrap(i);
#ifdef __CUDA_ARCH__
    return inline_dims_[j];
#else
    return j < kMaxDim ? inline_dims_[j] : dims_[j];
#endif
  }
  KERNIX_HD int64_t size(int64_t i) const { return shape(i); }
  // The extents of the first kMaxDim dimensions (all of them on the host
  // through sizes() when the rank is larger).
  KERNIX_HD const int64_t* shape_ptr() const { return inline_dims_; }
  const int64_t* sizes() const { return ndim_ <= kMaxDim ? inline_dims_ : dims_; }
  // Stride of dimension i in elements (row-major: the last dimension is 1).
  KERNIX_HD int64_t stride(int64_t i) const {
    int64_t s = 1;
    for (int64_t d = ndim_ - 1; d > wrap(i); --d) s *= shape(d);
    return s;
  }
  // Row-major strides of the first kMaxDim dimensions.
  KERNIX_HD const int64_t* strides_ptr() const {
    int64_t s = 1;
    int64_t n = ndim_ < kMaxDim ? ndim_ : kMaxDim;
    for (int64_t d = ndim_ - 1; d >= 0; --d) {
      if (d < n) strides_[d] = s;
      s *= shape(d);
    }
    return strides_;
  }
  KERNIX_HD int64_t numel() const {
    int64_t n = 1;
    for (int64_t d = 0; d < ndim_; ++d) n *= shape(d);
    return n;
  }
  // numel() as an int; BE::Error when it does not fit (CUDA launch extents).
  int numel_checked_int() const {
    int64_t n = numel();
    if (n > static_cast<int64_t>(INT32_MAX)) {
      detail::Message m;
      m << "BE::Tensor::numel_checked_int: " << n << " elements do not fit in an int";
      throw Error(m.c_str());
    }
    return static_cast<int>(n);
  }
  // kernix tensors are always dense and row-major.
  KERNIX_HD bool is_contiguous() const { return true; }
  // Bytes of one element (0 for sub-byte types; see nbytes()).
  KERNIX_HD int64_t element_size() const { return dtype_bits(dtype_) / 8; }
  KERNIX_HD int64_t nbytes() const { return (numel() * dtype_bits(dtype_) + 7) / 8; }
  KERNIX_HD DType dtype() const { return dtype_; }
  const char* dtype_name() const { return BE::dtype_name(dtype_); }

 protected:
  detail::TensorFacts facts() const { return {dtype_, ndim_, sizes(), name_}; }

 private:
  KERNIX_HD int64_t wrap(int64_t i) const {
    int64_t j = i < 0 ? i + ndim_ : i;
#ifndef __CUDA_ARCH__
    if (j < 0 || j >= ndim_) {
      detail::Message m;
      m << "BE::Tensor: dimension " << i << " is out of range for a tensor of rank " << ndim_;
      throw Error(m.c_str());
    }
#endif
    return j;
  }

  void* data_ = nullptr;
  DType dtype_ = DType::Invalid;
  int64_t ndim_ = 0;
  const int64_t* dims_ = nullptr;  // host memory, valid during the call
  const char* name_ = nullptr;     // the parameter's name, for messages
  int64_t inline_dims_[kMaxDim] = {};
  mutable int64_t strides_[kMaxDim] = {};
};

// A Tensor whose dtype is part of its C++ type: `const BE::TensorOf<float>& x`
// is an input that must be float32.  kernix's inference reads T, the Python
// callable refuses an array of another dtype before the kernel runs, and on
// the host the constructor checks the buffer's dtype again.  data_ptr()
// returns T* without a template argument.  T is the C++ type of a dtype
// (BE::element_dtype): bool, the integer types, float, double, __half,
// __nv_bfloat16, __nv_fp8_e4m3, __nv_fp8_e5m2, std::complex<float> and
// std::complex<double>.  Declare inputs const and outputs non-const, as for
// BE::Tensor.
template <typename T>
class TensorOf : public Tensor {
  static_assert(element_dtype<T>::value != DType::Invalid,
                "BE::TensorOf<T>: T must be the C++ type of a dtype (bool, an integer type, float, double, "
                "__half, __nv_bfloat16, std::complex<float>, ...; see BE::element_dtype)");

 public:
  using element_type = T;
  // The dtype T views.
  static constexpr DType kDType = element_dtype<T>::value;

  TensorOf() = default;
  // kernix's generated code builds typed tensors with this constructor.
  explicit TensorOf(const ::kernix::TensorView& view, const char* name = nullptr) : Tensor(view, name) {
    check_dtype();
  }
  // A typed view of `t`; BE::Error when its dtype is not kDType.
  explicit TensorOf(const Tensor& t) : Tensor(t) { check_dtype(); }

  using Tensor::data;
  using Tensor::data_ptr;
  KERNIX_HD T* data_ptr() const { return static_cast<T*>(Tensor::data_ptr()); }
  KERNIX_HD T* data() const { return data_ptr(); }

 private:
  void check_dtype() const {
    if (dtype() != kDType) detail::wrong_tensor_dtype(facts(), detail::pretty_type<T>(), kDType);
  }
};

// A tensor updated in place: `BE::InOut& x` is an input whose new value is
// also an output.  The Python callable takes x as an input and returns its new
// value; XLA passes one buffer for both (the caller's array itself under
// jax.jit with donation, a copy of it otherwise), so the function reads x and
// writes x.  Never const.
class InOut : public Tensor {
 public:
  InOut() = default;
  explicit InOut(const ::kernix::TensorView& view, const char* name = nullptr) : Tensor(view, name) {}
};

// An in-place tensor whose dtype is fixed by T, as BE::TensorOf<T>.
template <typename T>
class InOutOf : public TensorOf<T> {
 public:
  InOutOf() = default;
  explicit InOutOf(const ::kernix::TensorView& view, const char* name = nullptr) : TensorOf<T>(view, name) {}
};

// A read-only view of `size()` values of type T (const T): what an array
// attribute arrives as (`BE::Span<const int64_t> axes` takes axes=(0, 2) from
// Python).  Valid during the call.  C++17's stand-in for std::span<const T>,
// which kernix also accepts when the source is compiled as C++20, as it
// accepts `const std::vector<T>&` (a copy).
template <typename T>
class Span {
 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using iterator = T*;

  constexpr Span() noexcept = default;
  constexpr Span(T* data, size_t size) noexcept : data_(data), size_(size) {}

  constexpr T* data() const noexcept { return data_; }
  constexpr size_t size() const noexcept { return size_; }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr T* begin() const noexcept { return data_; }
  constexpr T* end() const noexcept { return data_ + size_; }
  // Element i; BE::Error when i is out of range.
  T& operator[](size_t i) const {
    if (i >= size_) {
      detail::Message m;
      m << "BE::Span: index " << static_cast<uint64_t>(i) << " is out of range for " << static_cast<uint64_t>(size_)
        << " elements";
      throw Error(m.c_str());
    }
    return data_[i];
  }
  T& front() const { return (*this)[0]; }
  T& back() const { return (*this)[size_ - 1]; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

// Scratch memory that XLA allocates for the call and frees after it: as many
// bytes as the `scratch=` expression of the annotation says per problem,
// times the batch size under `...` batch dimensions.  Uninitialised; never
// seen by the caller.  A device pointer for CUDA functions.
class Scratch {
 public:
  Scratch() = default;
  explicit Scratch(const ::kernix::TensorView& view, const char* name = nullptr) : data_(view.data), name_(name) {
    nbytes_ = 1;
    for (int64_t d = 0; d < view.ndim; ++d) nbytes_ *= view.dims[d];
  }
  KERNIX_HD void* data() const { return data_; }
  KERNIX_HD int64_t nbytes() const { return nbytes_; }
  // The memory as T* at byte `offset`; BE::Error when T's alignment or the
  // size does not allow `count` elements there.
  template <typename T>
  T* data_ptr(int64_t offset = 0, int64_t count = 1) const {
    const uintptr_t at = reinterpret_cast<uintptr_t>(data_) + static_cast<uintptr_t>(offset);
    if (offset < 0 || count < 0 || offset + count * static_cast<int64_t>(sizeof(T)) > nbytes_ ||
        at % alignof(T) != 0) {
      detail::Message m;
      m << "BE::Scratch::data_ptr: " << count << " elements of " << static_cast<uint64_t>(sizeof(T))
        << " bytes at offset " << offset << " do not fit the " << nbytes_ << " bytes of scratch '"
        << (name_ ? name_ : "") << "' (or are not aligned to " << static_cast<uint64_t>(alignof(T)) << ")";
      throw Error(m.c_str());
    }
    return reinterpret_cast<T*>(at);
  }

 private:
  void* data_ = nullptr;
  int64_t nbytes_ = 0;
  const char* name_ = nullptr;
};

// The per-instance state of a function: a T that kernix creates (with T's
// default constructor) once per compiled instance of the call, in XLA's
// instantiate stage, and passes to every call of that instance; XLA destroys
// it (~T) with the executable.  Keep a handle there (a cuBLAS handle, an FFT
// plan made at the first call).  Calls of one instance may run one after
// another on different threads: T needs no locking unless the function itself
// starts threads.
template <typename T>
class State {
 public:
  using value_type = T;
  State() = default;
  explicit State(T* object) noexcept : object_(object) {}
  T* get() const noexcept { return object_; }
  T* operator->() const noexcept { return object_; }
  T& operator*() const noexcept { return *object_; }

 private:
  T* object_ = nullptr;
};

}  // namespace BE

// BE_CHECK(cond) << "message" << value;
// Throws BE::Error ("file:line: check failed: cond: message") when cond is
// false.  kernix reports it as a Python exception from the JAX call.
#define BE_CHECK(cond) \
  if (cond) {          \
  } else               \
    ::BE::detail::Raise() & ::BE::detail::CheckMessage(__FILE__, __LINE__, #cond)

// BE_CUDA_CHECK(cudaMemsetAsync(...)); -- throws BE::CudaError naming the CUDA error.
#define BE_CUDA_CHECK(expr)                                                          \
  do {                                                                               \
    cudaError_t be_cuda_err_ = (expr);                                               \
    if (be_cuda_err_ != cudaSuccess) {                                               \
      ::BE::detail::Message be_cuda_msg_;                                            \
      be_cuda_msg_ << __FILE__ << ":" << __LINE__ << ": " << #expr << " returned "   \
                   << cudaGetErrorName(be_cuda_err_) << " ("                         \
                   << cudaGetErrorString(be_cuda_err_) << ")";                      \
      throw ::BE::CudaError(be_cuda_msg_.c_str());                                   \
    }                                                                                \
  } while (0)

// Call right after a kernel launch: reports a bad launch configuration etc.
#define BE_CHECK_KERNEL_LAUNCH() BE_CUDA_CHECK(cudaGetLastError())

// Like BE_CHECK_KERNEL_LAUNCH, then waits for the device so that a fault in
// the kernel is reported here (for debugging: it synchronizes).
#define BE_CHECK_KERNEL_LAUNCH_SYNC()          \
  do {                                         \
    BE_CUDA_CHECK(cudaGetLastError());         \
    BE_CUDA_CHECK(cudaDeviceSynchronize());    \
  } while (0)

#include "dispatch.h"
