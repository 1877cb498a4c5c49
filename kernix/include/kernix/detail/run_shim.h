// kernix/detail/run_shim.h -- calls a shim and catches what it throws.
//
// Not part of the public API.  A shim (shim.h, compiled with the user's code)
// builds the user's arguments and calls the function; whatever it throws
// reaches the handler here, which turns it into a message.  One try/catch in
// the handler unit serves every function, so shims carry no exception handling
// of their own and cost the compiler less.
#pragma once

#include <cstdio>
#include <exception>

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

// Calls `shim`: nullptr when it returns, else the message of what it threw
// (valid until this thread's next error).
inline const char* run_shim(ShimFn shim, void* const* slots) noexcept {
  try {
    shim(slots);
  } catch (...) {
    return current_exception_message();
  }
  return nullptr;
}

}  // namespace detail
}  // namespace kernix
