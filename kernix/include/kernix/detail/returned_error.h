// kernix/detail/returned_error.h -- a failure a function returned, on its way to XLA.
//
// Not part of the public API.  A function that returns xla::ffi::Error reports
// a failure by returning one; its shim (shim.h, compiled with the user's code)
// throws it as a kernix::detail::ReturnedError, and the handler (run_shim.h)
// turns it into an XLA error with the same code.  Both sides include this one
// definition, so the handler catches exactly the type the shim throws.  It
// names no XLA header: the code travels as the XLA_FFI_Error_Code number.
#pragma once

#include <cstdio>
#include <exception>

namespace kernix {
namespace detail {

class ReturnedError : public std::exception {
 public:
  ReturnedError(int code, const char* text) noexcept : code_(code) {
    std::snprintf(text_, sizeof text_, "%s", (text && *text) ? text : "the function returned an error without a message");
  }
  // The XLA_FFI_Error_Code the function's xla::ffi::Error carried.
  int code() const noexcept { return code_; }
  const char* what() const noexcept override { return text_; }

 private:
  int code_;
  char text_[4096];
};

}  // namespace detail
}  // namespace kernix
