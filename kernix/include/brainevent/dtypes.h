// brainevent/dtypes.h -- XLA FFI DataType -> BE::DType (kernix's implementation).
//
// Needs XLA's FFI headers (kernix passes jaxlib's include directory to every
// compile).  kernix numbers BE::DType as XLA numbers its types, so the
// conversion is a cast; types without a BE::DType name convert to Invalid.
#pragma once

#include "../kernix/common.h"
#include "xla/ffi/api/ffi.h"

namespace kernix {

inline DType xla_to_jkb_dtype(xla::ffi::DataType dt) noexcept {
  DType t = static_cast<DType>(static_cast<int32_t>(dt));
  return dtype_bits(t) == 0 ? DType::Invalid : t;
}

}  // namespace kernix
