// kernix/detail/shim.h -- support code for the generated call shims.
//
// Not part of the public API.  A shim is compiled in the user's translation
// unit, right after the user's code, so it calls each function with its exact
// C++ types; it turns any exception into a message for the FFI handler.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <type_traits>

#include "kernix/common.h"

#define KERNIX_SHIM_EXPORT extern "C" __attribute__((visibility("hidden")))

namespace kernix {
namespace detail {

// Keeps the last error message of this thread alive until the handler copies it.
inline const char* store_error(const char* what) {
  static thread_local char message[4096];
  std::snprintf(message, sizeof message, "%s", (what && *what) ? what : "unknown error");
  return message;
}

inline const char* current_exception_message() {
  try {
    throw;
  } catch (const std::exception& e) {
    return store_error(e.what());
  } catch (...) {
    return store_error("a C++ exception of unknown type was thrown");
  }
}

// Rebuilds a 16-bit float (__half, __nv_bfloat16, ...) from its bit pattern.
template <typename T>
inline T from_bits(uint16_t bits) {
  static_assert(sizeof(T) == sizeof(uint16_t), "16-bit float type expected");
  static_assert(std::is_trivially_copyable<T>::value, "trivially copyable type expected");
  T value;
  std::memcpy(static_cast<void*>(&value), &bits, sizeof(bits));
  return value;
}

}  // namespace detail
}  // namespace kernix
