"""kernix quick start: write a native function, mark it `// @BE`, call it from jax.jit.

Builds a CUDA kernel when JAX sees a GPU, a C++ function otherwise; prints the
arg_spec kernix inferred from the C++ signature, then the result.

    python examples/quickstart.py
"""

import jax
import jax.numpy as jnp

import kernix

CUDA_SOURCE = r"""
#include <cuda_runtime.h>
#include "kernix/common.h"

__global__ void axpy_kernel(float alpha, const float* x, const float* y, float* out, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = alpha * x[i] + y[i];
}

// @BE axpy (n),(n)->(n)
void axpy(const BE::Tensor& x, const BE::Tensor& y, BE::Tensor& out, float alpha, cudaStream_t stream) {
  BE_CHECK(x.numel() == y.numel()) << "x and y differ in size";
  int64_t n = x.numel();
  axpy_kernel<<<(n + 255) / 256, 256, 0, stream>>>(alpha, x.data_ptr<float>(), y.data_ptr<float>(),
                                                   out.data_ptr<float>(), n);
  BE_CHECK_KERNEL_LAUNCH();
}
"""

CPP_SOURCE = r"""
#include "kernix/common.h"

// @BE axpy (n),(n)->(n)
void axpy(const BE::Tensor& x, const BE::Tensor& y, BE::Tensor& out, float alpha) {
  BE_CHECK(x.numel() == y.numel()) << "x and y differ in size";
  const float* xs = x.data_ptr<float>();
  const float* ys = y.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = alpha * xs[i] + ys[i];
}
"""


def main() -> None:
    try:
        on_gpu = bool(jax.devices("gpu"))
    except RuntimeError:
        on_gpu = False
    if on_gpu:
        mod = kernix.load_cuda_inline("quickstart", CUDA_SOURCE)
    else:
        mod = kernix.load_cpp_inline("quickstart", CPP_SOURCE)

    spec = mod.functions["axpy"]
    print(f"built {mod.platform} module {mod.name!r}: {mod.path}")
    print(f"inferred: {spec.qualified_name}({', '.join(p.type + ' ' + p.name for p in spec.params)})")
    print(f"arg_spec: {' '.join(spec.arg_spec)}")
    print(f"FFI target: {mod.targets['axpy']}")

    @jax.jit
    def f(x, y):
        return mod.axpy(x, y, alpha=2.0)

    x = jnp.arange(8, dtype=jnp.float32)
    y = jnp.ones(8, dtype=jnp.float32)
    print("2 * x + y =", f(x, y))


if __name__ == "__main__":
    main()
