// kernix/detail/handler.h -- support code for the generated XLA FFI handlers.
//
// Not part of the public API.  Used by the handlers of functions with typed
// XLA FFI parameters (xla::ffi::Buffer<T, R>, AnyBuffer, Result<...>), which
// ffi.h's bindings decode (with the function's other parameters, scratch,
// state and the thread pool included); every other handler uses the C-API
// decoder of frame.h and never includes ffi.h.  These handlers are compiled by the
// host compiler in their own translation units (the only ones that include
// XLA's ffi.h); they decode the call frame, describe each buffer as a
// kernix::TensorView and call the shims.  Nothing here names BE::, so the
// handler never depends on which BE::Tensor the user's code uses.
#pragma once

#include <cstdint>
#include <string>

// Relative to this file: a user's header named kernix/... cannot shadow it.
#include "dtype.h"
#include "messages.h"
#include "run_shim.h"
#include "tensor_view.h"
#include "xla/ffi/api/ffi.h"

// Handlers are the library's only exported symbols (everything else is compiled
// with -fvisibility=hidden).
#ifndef KERNIX_HANDLER_EXPORT
#define KERNIX_HANDLER_EXPORT extern "C" __attribute__((visibility("default")))
#endif

// The CUDA stream type, declared exactly as the CUDA runtime declares it, so
// that handlers need no CUDA headers.
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

namespace kernix {
namespace detail {

inline TensorView to_view(const xla::ffi::AnyBuffer& buffer) {
  auto dims = buffer.dimensions();
  return TensorView{buffer.untyped_data(), static_cast<int32_t>(buffer.element_type()),
                    static_cast<int64_t>(dims.size()), dims.begin()};
}

// Calls a shim and turns what it threw, if anything, into an FFI error: the
// code of an xla::ffi::Error the function returned, else INTERNAL.
inline xla::ffi::Error call_shim(ShimFn shim, void* const* params, const char* function) {
  int code = kErrorInternal;
  if (const char* message = run_shim(shim, params, &code)) {
    return xla::ffi::Error(static_cast<XLA_FFI_Error_Code>(code),
                           std::string("kernix: ") + function + ": " + message);
  }
  return xla::ffi::Error::Success();
}

// The thread pool XLA gives a C++ handler, as the shim's view of it.
inline void schedule_on(void* pool, void (*task)(void*), void* data) {
  static_cast<xla::ffi::ThreadPool*>(pool)->Schedule([task, data] { task(data); });
}
inline ThreadPoolView pool_view(xla::ffi::ThreadPool& pool) {
  return ThreadPoolView{&pool, pool.num_threads(), &schedule_on};
}

// A buffer updated in place arrives twice, as an operand and as the result
// XLA aliases to it: the two must be one buffer, or the function would read
// uninitialised memory.
inline xla::ffi::Error check_aliased(const xla::ffi::AnyBuffer& in, const xla::ffi::AnyBuffer& out,
                                     const char* function, const char* param) {
  if (in.untyped_data() == out.untyped_data() || in.size_bytes() == 0) return xla::ffi::Error::Success();
  return xla::ffi::Error(xla::ffi::ErrorCode::kInternal,
                         std::string("kernix: ") + function + ": the operand and the result of in-place parameter '" +
                             param + "' are different buffers (XLA did not alias them)");
}

// A scalar attribute: decoded as ffi.h decodes T, but one of another type names the NumPy scalar to
// pass (a Python float arrives as F64, a Python int as S64), as frame.h's handlers say.
template <typename T>
struct ScalarAttr {
  T value;
};

}  // namespace detail
}  // namespace kernix

template <typename T>
struct xla::ffi::AttrDecoding<::kernix::detail::ScalarAttr<T>> {
  using Type = ::kernix::detail::ScalarAttr<T>;
  static std::optional<Type> Decode(XLA_FFI_AttrType type, void* attr, DiagnosticEngine& diagnostic) {
    if (type == XLA_FFI_AttrType_SCALAR && !AttrDecoding<T>::Isa(type, attr)) {
      ::kernix::detail::Message m;
      m.add("pass ").add_numpy_scalar(::kernix::element_dtype<T>::value).add("(value)");
      return diagnostic.Emit("attribute has type ") << static_cast<XLA_FFI_Scalar*>(attr)->dtype << ": " << m.c_str();
    }
    std::optional<T> value = AttrDecoding<T>::Decode(type, attr, diagnostic);
    if (!value) return std::nullopt;
    return Type{*value};
  }
};

#include "state.h"
