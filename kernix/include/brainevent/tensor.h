// brainevent/tensor.h -- BE::Tensor and BE::DType (kernix's implementation).
//
// BE::Tensor(void* data, const int64_t* shape, int ndim, BE::DType dtype),
// data_ptr(), data_ptr<T>(), ndim(), shape(i), size(i), stride(i),
// shape_ptr(), strides_ptr(), numel(), numel_checked_int(), nbytes(),
// element_size(), dtype(), is_contiguous(); BE::kMaxDim, BE::dtype_size(),
// BE::dtype_name().  Defined in kernix/common.h.
#pragma once

#include "../kernix/common.h"
