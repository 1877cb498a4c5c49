// kernix/common.h -- the C++ side of kernix.
//
// Include this in every source that kernix compiles.  The API lives in
// namespace kernix, which this header also names BE (`namespace BE = kernix;`,
// brainevent's name), so sources written for brainevent compile unchanged and
// `BE::Tensor` and `kernix::Tensor` are one type.  It gives:
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
// `BE` is a namespace alias: add to the API with qualified names
// (`template <> struct BE::element_dtype<MyHalf> ...`), or inside
// `namespace kernix { ... }`; `namespace BE { ... }` cannot reopen it.
//
// The header needs only a few light C++17 standard headers (no <string> or
// <sstream>, which cost nvcc about half a second per file): it compiles
// without XLA's FFI headers and, for C++ sources, without CUDA.  The text of
// a failed check is formatted out of line (kernix/detail/messages.h), in code
// kernix compiles once per module, not in every source that includes this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>   // (no longer used here; kept for sources that relied on it)
#include <cstring>  // (likewise)
#include <exception>
#include <type_traits>
#include <utility>

// Relative to this file: a user's header named kernix/... cannot shadow them.
#include "detail/dtype.h"
#include "detail/messages.h"
#include "detail/tensor_view.h"

namespace BE = kernix;

namespace kernix {

// The rank up to which a Tensor keeps its shape inside the object.
static constexpr int kMaxDim = 8;

// The exception thrown by a failed check.  kernix catches it at the FFI
// boundary and reports what() as a JAX error.  Throw it yourself with any
// text: `throw BE::Error("message")` or a std::string.
class Error : public std::exception {
 public:
  KERNIX_LOCAL explicit Error(const char* message) noexcept;
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

// The compiler's text naming T ("... [with T = const float]"), for messages.
template <typename T>
inline const char* pretty_type() {
  return __PRETTY_FUNCTION__;
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
    if (n > static_cast<int64_t>(INT32_MAX)) detail::too_many_elements(n);
    return static_cast<int>(n);
  }
  // kernix tensors are always dense and row-major.
  KERNIX_HD bool is_contiguous() const { return true; }
  // Bytes of one element (0 for sub-byte types; see nbytes()).
  KERNIX_HD int64_t element_size() const { return dtype_bits(dtype_) / 8; }
  KERNIX_HD int64_t nbytes() const { return (numel() * dtype_bits(dtype_) + 7) / 8; }
  KERNIX_HD DType dtype() const { return dtype_; }
  const char* dtype_name() const { return ::kernix::dtype_name(dtype_); }

 protected:
  detail::TensorFacts facts() const { return {dtype_, ndim_, sizes(), name_}; }

 private:
  KERNIX_HD int64_t wrap(int64_t i) const {
    int64_t j = i < 0 ? i + ndim_ : i;
#ifndef __CUDA_ARCH__
    if (j < 0 || j >= ndim_) detail::dimension_out_of_range(i, ndim_);
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
    if (i >= size_) detail::span_index_out_of_range(i, size_);
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
      detail::scratch_does_not_fit(count, sizeof(T), offset, nbytes_, name_, alignof(T));
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

}  // namespace kernix

// BE_CHECK(cond) << "message" << value;
// Throws BE::Error ("file:line: check failed: cond: message") when cond is
// false.  kernix reports it as a Python exception from the JAX call.
#define BE_CHECK(cond) \
  if (cond) {          \
  } else               \
    ::kernix::detail::Raise() & ::kernix::detail::CheckMessage(__FILE__, __LINE__, #cond)

// BE_CUDA_CHECK(cudaMemsetAsync(...)); -- throws BE::CudaError naming the CUDA error.
#define BE_CUDA_CHECK(expr)                                                                  \
  do {                                                                                       \
    cudaError_t be_cuda_err_ = (expr);                                                       \
    if (be_cuda_err_ != cudaSuccess) {                                                       \
      ::kernix::detail::cuda_call_failed(__FILE__, __LINE__, #expr, cudaGetErrorName(be_cuda_err_), \
                                         cudaGetErrorString(be_cuda_err_));                  \
    }                                                                                        \
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
