// brainevent/tensor.h -- BE::Tensor and BE::DType (kernix's implementation).
//
// BE::Tensor(void* data, const int64_t* shape, int ndim, BE::DType dtype),
// data_ptr(), data_ptr<T>(), ndim(), shape(i), size(i), stride(i),
// shape_ptr(), strides_ptr(), numel(), numel_checked_int(), nbytes(),
// element_size(), dtype(), is_contiguous(); BE::kMaxDim, BE::dtype_size(),
// BE::dtype_name().  Defined in kernix/common.h.
//
// Unlike brainevent's, data_ptr<T>() checks T on the host: it must be a C++
// type of the tensor's dtype (BE::element_dtype), void, uint16_t for the bits
// of float16/bfloat16, or a one-byte integer for bool (how brainevent's own
// kernels read bool spikes).  reinterpret_ptr<T>() views elements as another
// type of their size on purpose.
#pragma once

#include "../kernix/common.h"
