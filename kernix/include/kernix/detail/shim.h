// kernix/detail/shim.h -- support code for the generated call shims.
//
// Not part of the public API.  A shim is compiled in the user's translation
// unit, right after the user's code, so it calls each function with its exact
// C++ types.  What it throws reaches the handler, which turns it into a
// message (run_shim.h): a shim is the call and little else, so that a module
// of thousands of functions adds little to the compile of the user's file.
//
// The shim is the only generated code that names the user's tensor type.  It
// builds that `BE::Tensor` from a kernix::TensorView through the public API a
// BE::Tensor offers (a constructor taking data pointer, shape, rank and dtype),
// so a BE::Tensor from kernix's own headers and one from a project's own
// `brainevent/tensor.h` work alike.  This header defines nothing in a project's
// own namespace BE (only in namespace kernix).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <type_traits>
#include <utility>

// Relative to this file: a user's header named kernix/... cannot shadow it.
#include "returned_error.h"
#include "tensor_view.h"

#define KERNIX_SHIM_EXPORT extern "C" __attribute__((visibility("hidden")))

namespace kernix {
namespace detail {

// Rebuilds a 16-bit float (__half, __nv_bfloat16, ...) from its bit pattern.
template <typename T>
inline T from_bits(uint16_t bits) {
  static_assert(sizeof(T) == sizeof(uint16_t), "16-bit float type expected");
  static_assert(std::is_trivially_copyable<T>::value, "trivially copyable type expected");
  T value;
  std::memcpy(static_cast<void*>(&value), &bits, sizeof(bits));
  return value;
}

// The exception a shim raises when a buffer cannot become the user's tensor.
class ShimError : public std::exception {
 public:
  explicit ShimError(const char* text) { std::snprintf(text_, sizeof text_, "%s", text); }
  const char* what() const noexcept override { return text_; }

 private:
  char text_[512];
};

// ---- XLA dtype code -> the user's DType enumerator, matched by name --------
//
// Each row: XLA_FFI_DataType code, the enumerator name BE::DType uses, and the
// dtype's NumPy name.  An enumerator the user's DType lacks is simply absent
// from its mapping (a buffer of that dtype is then refused with a message).
#define KERNIX_DTYPE_ROWS(X)                                             \
  X(1, Bool, "bool") X(2, Int8, "int8") X(3, Int16, "int16")             \
  X(4, Int32, "int32") X(5, Int64, "int64") X(6, UInt8, "uint8")         \
  X(7, UInt16, "uint16") X(8, UInt32, "uint32") X(9, UInt64, "uint64")   \
  X(10, Float16, "float16") X(11, Float32, "float32")                    \
  X(12, Float64, "float64") X(15, Complex64, "complex64")                \
  X(16, BFloat16, "bfloat16") X(18, Complex128, "complex128")            \
  X(19, Float8E5M2, "float8_e5m2") X(20, Float8E4M3FN, "float8_e4m3fn")

#define KERNIX_HAS_ENUMERATOR_(CODE, NAME, TEXT)                              \
  template <typename E, typename = void>                                      \
  struct has_##NAME : std::false_type {};                                     \
  template <typename E>                                                       \
  struct has_##NAME<E, std::void_t<decltype(E::NAME)>> : std::true_type {};
KERNIX_DTYPE_ROWS(KERNIX_HAS_ENUMERATOR_)
#undef KERNIX_HAS_ENUMERATOR_

inline const char* xla_dtype_name(int32_t code) {
#define KERNIX_NAME_CASE_(CODE, NAME, TEXT) \
  case CODE:                                \
    return TEXT;
  switch (code) { KERNIX_DTYPE_ROWS(KERNIX_NAME_CASE_) default: break; }
#undef KERNIX_NAME_CASE_
  return "an XLA type kernix does not name";
}

// Sets *out to the enumerator of E named like XLA dtype `code`; false when E has none.
template <typename E>
inline bool user_dtype(int32_t code, E* out) {
#define KERNIX_DTYPE_CASE_(CODE, NAME, TEXT)     \
  case CODE:                                     \
    if constexpr (has_##NAME<E>::value) {        \
      *out = E::NAME;                            \
      return true;                               \
    } else {                                     \
      return false;                              \
    }
  switch (code) { KERNIX_DTYPE_ROWS(KERNIX_DTYPE_CASE_) default: break; }
#undef KERNIX_DTYPE_CASE_
  return false;
}

// ---- kernix::TensorView -> the user's tensor type ---------------------------

template <typename T>
using dtype_of = std::decay_t<decltype(std::declval<const T&>().dtype())>;

// Builds a T (the BE::Tensor the user's code sees) describing `view`, the
// parameter `name`.  Tried in order: T(const kernix::TensorView&, const char*
// name) and T(const kernix::TensorView&) (kernix's own BE::Tensor and
// BE::TensorOf<E>, which check the dtype and name the parameter in messages);
// T(void* data, const int64_t* shape, int ndim, DType dtype) (the constructor
// brainevent's BE::Tensor documents).
template <typename T>
inline T make_tensor(const TensorView& view, const char* name) {
  if constexpr (std::is_constructible<T, const TensorView&, const char*>::value) {
    return T(view, name);
  } else if constexpr (std::is_constructible<T, const TensorView&>::value) {
    return T(view);
  } else {
    using D = dtype_of<T>;
    static_assert(std::is_constructible<T, void*, const int64_t*, int, D>::value,
                  "kernix: this BE::Tensor has no constructor BE::Tensor(void* data, const int64_t* shape, "
                  "int ndim, BE::DType dtype); kernix cannot build it from an XLA buffer. Include "
                  "\"kernix/common.h\" (or \"brainevent/common.h\") for a BE::Tensor kernix knows.");
    D dtype{};
    if (!user_dtype<D>(view.xla_dtype, &dtype)) {
      char text[256];
      std::snprintf(text, sizeof text,
                    "a buffer of dtype %s (XLA code %d) has no BE::DType value in the BE::Tensor "
                    "this source uses; pass a supported dtype",
                    xla_dtype_name(view.xla_dtype), static_cast<int>(view.xla_dtype));
      throw ShimError(text);
    }
    return T(view.data, view.dims, static_cast<int>(view.ndim), dtype);
  }
}

// A pointer to the user's function that the optimizer cannot see through.
// A shim calls the function through it, with the function's exact type (so
// the same overload is chosen), instead of compiling a second copy of the
// function's body inside the shim: the body is compiled once, where the user
// wrote it.  Costs one indirect call.
template <typename F>
inline F* opaque(F* f) noexcept {
  __asm__("" : "+r"(f));
  return f;
}

// ---- a returned xla::ffi::Error -> ReturnedError ---------------------------
//
// A function returning xla::ffi::Error reports failure by returning one; its
// shim passes the result to check_returned, which throws it as a
// ReturnedError (returned_error.h) for the handler to turn into an XLA error
// with the same code.  Written against the members every ffi.h version has
// (success(), errc(), message()), so this header needs no XLA header.

// The code as its number: errc() is std::optional<ErrorCode> in some ffi.h
// versions and ErrorCode in others.  (Taken as any optional-like type, so
// that this header, which every shim unit includes, does not include
// <optional>: it costs the compile of a small user file a fifth.)
template <typename O, typename = std::enable_if_t<!std::is_enum<O>::value>>
inline int error_code_number(const O& code) noexcept {
  return code ? static_cast<int>(*code) : 2;  // XLA_FFI_Error_Code_UNKNOWN
}
template <typename C, typename = std::enable_if_t<std::is_enum<C>::value>>
inline int error_code_number(C code) noexcept {
  return static_cast<int>(code);
}

[[noreturn]] __attribute__((cold, noinline)) inline void raise_returned(int code, const char* message) {
  throw ReturnedError(code, message);
}

template <typename E>
inline void check_returned(const E& error) {
  if (__builtin_expect(!error.success(), 0)) raise_returned(error_code_number(error.errc()), error.message().c_str());
}

// ---- attributes, scratch, state and the thread pool -------------------------

// The element type of a span, vector or string type T.
template <typename T>
using element_of = std::remove_cv_t<std::remove_reference_t<decltype(*std::declval<const T&>().begin())>>;

// An array or string attribute (a kernix::ArrayView) as the parameter's type T:
// T(data, size) for views (BE::Span, std::span, xla::ffi::Span,
// std::string_view, std::string), else T(first, last) (std::vector).
template <typename T>
inline T array_from(const void* slot) {
  const ArrayView* view = static_cast<const ArrayView*>(slot);
  using E = element_of<T>;
  const E* first = static_cast<const E*>(view->data);
  const size_t size = static_cast<size_t>(view->size);
  if constexpr (std::is_constructible<T, const E*, size_t>::value) {
    return T(first, size);
  } else {
    return T(first, first + size);
  }
}

// The per-instance state: made by the instantiate stage, passed to every call.
template <typename S>
inline void* new_state() {
  return new typename S::value_type();
}
template <typename S>
inline void delete_state(void* object) noexcept {
  delete static_cast<typename S::value_type*>(object);
}
template <typename S>
inline S state_from(void* object) {
  return S(static_cast<typename S::value_type*>(object));
}

// make_tensor out of line, compiled once per tensor type: each shim calls it
// (a few instructions) instead of expanding the constructor and the dtype
// mapping, which would cost the compiler time for every function.
template <typename T>
__attribute__((noinline)) T tensor_from(const void* view, const char* name) {
  return make_tensor<T>(*static_cast<const TensorView*>(view), name);
}

}  // namespace detail
}  // namespace kernix
