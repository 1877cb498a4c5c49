// brainevent/ffi_compat.h -- BE::Tensor from XLA FFI buffers (kernix's implementation).
//
// kernix's generated code does this itself; the functions are here for
// sources that build their own XLA FFI handlers.
#pragma once

#include "../kernix/common.h"
#include "dtypes.h"

namespace kernix {
namespace internal {

// A BE::Tensor viewing `buf`; BE::Error for a dtype BE::DType does not name.
inline Tensor buffer_to_tensor(xla::ffi::AnyBuffer buf) {
  DType dtype = xla_to_jkb_dtype(buf.element_type());
  if (dtype == DType::Invalid) throw Error("BE: this XLA buffer dtype has no BE::DType");
  auto dims = buf.dimensions();
  return Tensor(buf.untyped_data(), dims.begin(), static_cast<int>(dims.size()), dtype);
}

inline Tensor result_buffer_to_tensor(xla::ffi::Result<xla::ffi::AnyBuffer> res) {
  return buffer_to_tensor(*res);
}

}  // namespace internal
}  // namespace kernix
