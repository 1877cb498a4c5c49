// kernix/common.h -- the C++ side of kernix.
//
// Include this in every source that kernix compiles.  It gives:
//   BE::DType        the element types XLA can hand a function, with names;
//   BE::Tensor       a non-owning view of one XLA buffer (data, dtype, shape);
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

namespace detail {

// sizeof(T) where a typed data pointer checks it against the element size:
// arithmetic types of more than one byte; 0 (unchecked) for the others.
template <typename T, bool = std::is_arithmetic<T>::value>
struct checked_size {
  static constexpr size_t value = 0;
};
template <typename T>
struct checked_size<T, true> {
  static constexpr size_t value = sizeof(T) > 1 ? sizeof(T) : 0;
};

KERNIX_HD inline bool is_complex(DType t) { return t == DType::Complex64 || t == DType::Complex128; }

// The C++ name of an arithmetic type from its size and kind, for messages.
inline const char* arithmetic_name(size_t size, bool floating, bool is_signed) {
  if (floating) return size == 4 ? "float" : size == 8 ? "double" : "long double";
  switch (size) {
    case 2: return is_signed ? "int16_t" : "uint16_t";
    case 4: return is_signed ? "int32_t" : "uint32_t";
    case 8: return is_signed ? "int64_t" : "uint64_t";
  }
  return "T";
}

// The C++ type that reads one element of `t`, or nullptr.
inline const char* element_type_name(DType t) {
  switch (t) {
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    case DType::Int16: return "int16_t";
    case DType::Int32: return "int32_t";
    case DType::Int64: return "int64_t";
    case DType::UInt16: return "uint16_t";
    case DType::UInt32: return "uint32_t";
    case DType::UInt64: return "uint64_t";
    case DType::Float16: return "__half";
    case DType::BFloat16: return "__nv_bfloat16";
    case DType::Bool: return "bool";
    case DType::Int8: return "int8_t";
    case DType::UInt8: return "uint8_t";
    default: return nullptr;
  }
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
  // kernix's generated code builds tensors with this constructor.
  explicit Tensor(const ::kernix::TensorView& view)
      : Tensor(view.data, static_cast<DType>(view.xla_dtype), view.ndim, view.dims) {}
  Tensor(void* data, DType dtype, int64_t ndim, const int64_t* dims)
      : data_(data), dtype_(dtype), ndim_(ndim), dims_(dims) {
    if (ndim < 0) throw Error("BE::Tensor: negative rank");
    for (int64_t d = 0; d < ndim && d < kMaxDim; ++d) inline_dims_[d] = dims[d];
  }
  // brainevent's constructor: data, shape, rank, dtype (row-major strides).
  Tensor(void* data, const int64_t* shape, int ndim, DType dtype) : Tensor(data, dtype, ndim, shape) {}

  // Untyped data pointer.
  KERNIX_HD void* data_ptr() const { return data_; }
  // Typed data pointer: `x.data_ptr<float>()`.  On the host, an arithmetic T
  // whose size is not the element size (double for a float32 tensor: reading
  // numel() of them runs past the buffer) throws BE::Error; one-byte types,
  // non-arithmetic ones (__half, float4, structs) and half a complex element
  // (float for complex64) are not checked, nor is static_cast<T*>(data_ptr()).
  // The size is all it checks: use BE_CHECK(x.dtype() == ...) or a dispatch
  // macro for the type itself.
  template <typename T>
  KERNIX_HD T* data_ptr() const {
#ifndef __CUDA_ARCH__
    constexpr size_t size = detail::checked_size<T>::value;
    if constexpr (size != 0) {
      size_t have = dtype_size(dtype_);
      if (have != size && have != 0 && !(detail::is_complex(dtype_) && have == 2 * size)) {
        wrong_element_size(size, std::is_floating_point<T>::value, std::is_signed<T>::value);
      }
    }
#endif
    return static_cast<T*>(data_);
  }
  KERNIX_HD void* data() const { return data_; }
  template <typename T>
  KERNIX_HD T* data() const { return data_ptr<T>(); }

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

 private:
  [[noreturn]] __attribute__((cold, noinline)) void wrong_element_size(size_t size, bool floating,
                                                                      bool is_signed) const;

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
  int64_t inline_dims_[kMaxDim] = {};
  mutable int64_t strides_[kMaxDim] = {};
};

inline void Tensor::wrong_element_size(size_t size, bool floating, bool is_signed) const {
  const char* read = detail::arithmetic_name(size, floating, is_signed);
  detail::Message m;
  m << "BE::Tensor::data_ptr<" << read << ">(): the tensor holds " << dtype_ << " (" << dtype_size(dtype_)
    << "-byte elements, shape [";
  for (int64_t d = 0; d < ndim_; ++d) m << (d ? ", " : "") << sizes()[d];
  m << "]), not " << static_cast<int64_t>(size) << "-byte " << read
    << (size > dtype_size(dtype_) ? ": reading numel() of them would run past the buffer"
                                  : ": its values would be misread")
    << ". Read it as ";
  if (const char* type = detail::element_type_name(dtype_)) m << "data_ptr<" << type << ">(), ";
  m << "check dtype() first (BE_CHECK) or dispatch on it (BE_DISPATCH_*); "
       "static_cast<T*>(data_ptr()) reinterprets the bytes unchecked";
  throw Error(m.c_str());
}

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
