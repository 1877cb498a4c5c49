// The example package's kernels (CPU, so the example runs anywhere).
#include <cstdint>
#include "kernix/common.h"

// y = a * x + y0 (any shape: the shape signature gives y the shape of x)
// @BE axpy (...),(...)->(...)
void axpy(const BE::Tensor& x, const BE::Tensor& y0, BE::Tensor& y, float a) {
  BE_CHECK(x.numel() == y0.numel()) << "x has " << x.numel() << " elements, y0 has " << y0.numel();
  const float* px = x.data_ptr<float>();
  const float* py = y0.data_ptr<float>();
  float* out = y.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = a * px[i] + py[i];
}
