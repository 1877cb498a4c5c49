// kernix/detail/handler.h -- support code for the generated XLA FFI handlers.
//
// Not part of the public API.  Handlers are compiled by the host compiler in
// their own translation unit (the only one that includes XLA's ffi.h); they
// decode the call frame, build BE::Tensor views and call the shims.
#pragma once

#include <cstdint>
#include <string>

#include "kernix/common.h"
#include "xla/ffi/api/ffi.h"

// Handlers are the library's only exported symbols (everything else is compiled
// with -fvisibility=hidden).
#define KERNIX_HANDLER_EXPORT extern "C" __attribute__((visibility("default")))

// The CUDA stream type, declared exactly as the CUDA runtime declares it, so
// that handlers need no CUDA headers.
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

namespace kernix {
namespace detail {

using ShimFn = const char* (*)(void* const*);

inline BE::Tensor to_tensor(const xla::ffi::AnyBuffer& buffer) {
  auto dims = buffer.dimensions();
  return BE::Tensor(buffer.untyped_data(), static_cast<BE::DType>(buffer.element_type()),
                    static_cast<int64_t>(dims.size()), dims.begin());
}

// Calls a shim and turns its error message, if any, into an FFI error.
inline xla::ffi::Error call_shim(ShimFn shim, void* const* params, const char* function) {
  if (const char* message = shim(params)) {
    return xla::ffi::Error(xla::ffi::ErrorCode::kInternal,
                           std::string("kernix: ") + function + ": " + message);
  }
  return xla::ffi::Error::Success();
}

}  // namespace detail
}  // namespace kernix
