// kernix/detail/tensor_view.h -- the buffer view the generated code passes around.
//
// Not part of the public API.  The handler unit (host compiler, XLA's ffi.h)
// fills one kernix::TensorView per tensor parameter; the shim unit (compiled
// with the user's code) turns it into whatever `BE::Tensor` the user's headers
// define.  kernix's own headers name namespace kernix BE as well; a project
// with its own brainevent headers has a BE namespace of its own, with which
// nothing in namespace kernix can collide.
#pragma once

#include <cstdint>

namespace kernix {

// One XLA buffer: data pointer, element type as XLA numbers it
// (XLA_FFI_DataType: 1 = PRED, 11 = F32, ...), rank and row-major dims.
struct TensorView {
  void* data;
  int32_t xla_dtype;
  int64_t ndim;
  const int64_t* dims;
};

// An array or string attribute: `size` elements at `data`, in XLA's storage
// (valid during the call).  The element type is what the parameter's type
// says (kernix checked it when it inferred the spec; XLA checks it again).
struct ArrayView {
  const void* data;
  int64_t size;
};

// XLA's intra-op thread pool, as the handler found it: `schedule` runs
// task(data) on one of its threads (or at once, on this thread, when XLA has
// no pool).  `pool` is nullptr where there is none (CUDA functions).
struct ThreadPoolView {
  void* pool;
  int64_t num_threads;
  void (*schedule)(void* pool, void (*task)(void*), void* data);
};

}  // namespace kernix
