// kernix/detail/run_shim.h -- calls a shim and catches what it throws.
//
// Not part of the public API.  A shim (shim.h, compiled with the user's code)
// builds the user's arguments and calls the function; whatever it throws
// reaches the handler here, which turns it into a message and an error code
// (a failure the function returned as xla::ffi::Error arrives as a
// ReturnedError, with its own code).  One try/catch in
// the handler unit serves every function, so shims carry no exception handling
// of their own and cost the compiler less.
#pragma once

#include <cstdio>
#include <exception>

// Relative to this file: a user's header named kernix/... cannot shadow it.
#include "returned_error.h"

namespace kernix {
namespace detail {

// A generated shim: the parameters, one void* each, in the C++ signature's order.
using ShimFn = void (*)(void* const*);

// Keeps the last error message of this thread alive until the handler copies it.
__attribute__((cold, noinline)) inline const char* store_error(const char* what) noexcept {
  static thread_local char message[4096];
  std::snprintf(message, sizeof message, "%s", (what && *what) ? what : "unknown error");
  return message;
}

// The message of the exception being handled (call it from a catch block).
__attribute__((cold, noinline)) inline const char* current_exception_message() noexcept {
  try {
    throw;
  } catch (const std::exception& e) {
    return store_error(e.what());
  } catch (...) {
    return store_error("a C++ exception of unknown type was thrown");
  }
}

// XLA_FFI_Error_Code values (c_api.h), named here so that this header needs none.
constexpr int kErrorUnknown = 2;
constexpr int kErrorInternal = 13;
constexpr int kErrorLast = 16;  // XLA_FFI_Error_Code_UNAUTHENTICATED

// Calls `shim`: nullptr when it returns, else the message of what it threw
// (valid until this thread's next error), and in *code the XLA_FFI_Error_Code
// to report: the code of an xla::ffi::Error the function returned
// (ReturnedError), INTERNAL for any exception it threw.
inline const char* run_shim(ShimFn shim, void* const* slots, int* code) noexcept {
  try {
    shim(slots);
  } catch (const ReturnedError& e) {
    const int c = e.code();
    *code = (c > 0 && c <= kErrorLast) ? c : kErrorUnknown;
    return store_error(e.what());
  } catch (...) {
    *code = kErrorInternal;
    return current_exception_message();
  }
  return nullptr;
}

}  // namespace detail
}  // namespace kernix
