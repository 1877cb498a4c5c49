// kernix/detail/check_driver.h -- the function table of kernix.check's driver (check_driver.cc).
//
// Not part of the public API.  kernix.check generates, per module, a unit defining the table; the
// driver, compiled once, runs the functions it lists.
#pragma once

#include "run_shim.h"

namespace kernix {
namespace check {

// One function the driver can run: its parameters' kind letters (check_driver.cc), its shim, how to
// make its state, and for typed XLA buffers a decoder from an XLA_FFI_Buffer (nullptr for the others).
struct Function {
  const char* name;
  const char* kinds;
  detail::ShimFn shim;
  void* (*new_state)();
  void* (*const* decode)(void* buffer);
};

}  // namespace check
}  // namespace kernix

extern const kernix::check::Function kernix_check_functions[];
extern const int kernix_check_function_count;
