"""An in-place update of a large buffer under ``jax.jit`` with donation
(``BE::InOut``) costs the kernel alone: no copy.

Times, on the GPU (or the CPU with ``--platform cpu``), on a buffer of
``--mib`` MiB of float32:

* ``kernel``: the kernel writing a separate output (``y = x + 1``, one read
  and one write of the buffer, the least an update costs);
* ``in place, donated``: the in-place kernel (``y += 1``) under ``jax.jit``
  with ``donate_argnums``, the buffer passed back in each time;
* ``in place, kept``: the same without donation, where XLA must copy the
  buffer first (the caller keeps its array), for comparison.

Prints the median of each, and whether the donated program's HLO aliases the
buffer with no copy.  The claim holds when ``in place, donated`` is no slower
than ``kernel``.

Usage::

    python bench/bench_inplace.py [--platform cuda|cpu] [--mib 1024] [--repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the checkout's kernix

CUDA = r"""
#include "kernix/common.h"
__global__ void add_one(const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = x[i] + 1.0f;
}
// @BE plus_one (n)->(n)
void plus_one(const BE::Tensor& x, BE::Tensor& y, cudaStream_t s) {
  add_one<<<4096, 256, 0, s>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  BE_CHECK_KERNEL_LAUNCH();
}
// @BE increment (n)->(n)
void increment(BE::InOut& y, cudaStream_t s) {
  add_one<<<4096, 256, 0, s>>>(y.data_ptr<float>(), y.data_ptr<float>(), y.numel());
  BE_CHECK_KERNEL_LAUNCH();
}
"""

CPP = r"""
#include "kernix/common.h"
// @BE plus_one (n)->(n)
void plus_one(const BE::Tensor& x, BE::Tensor& y) {
  const float* a = x.data_ptr<float>(); float* b = y.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) b[i] = a[i] + 1.0f;
}
// @BE increment (n)->(n)
void increment(BE::InOut& y) {
  float* b = y.data_ptr<float>();
  for (int64_t i = 0; i < y.numel(); ++i) b[i] += 1.0f;
}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--platform", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp

    import kernix

    if args.platform == "cuda":
        mod = kernix.load_cuda_inline("bench_inplace", CUDA)
        device = jax.devices("gpu")[0]
    else:
        mod = kernix.load_cpp_inline("bench_inplace", CPP)
        device = jax.devices("cpu")[0]
    n = args.mib * (1 << 20) // 4
    kernel = jax.jit(mod.plus_one)
    donated = jax.jit(mod.increment, donate_argnums=0)
    kept = jax.jit(mod.increment)

    with jax.default_device(device):
        x = jnp.zeros(n, jnp.float32)
        hlo = donated.lower(x).compile().as_text()
        aliased = "output_to_operand_aliasing" in hlo and " copy(" not in hlo

        def timed(f, arg):
            start = time.perf_counter()
            out = f(arg)
            out.block_until_ready()
            return time.perf_counter() - start, out

        times: dict[str, list[float]] = {"kernel": [], "in place, donated": [], "in place, kept": []}
        y = jnp.zeros(n, jnp.float32)
        for f in (kernel, kept):
            f(x).block_until_ready()  # compile
        y = donated(y)
        for _ in range(args.repeat):
            t, _ = timed(kernel, x)
            times["kernel"].append(t)
            t, y = timed(donated, y)  # the buffer goes back in: updated where it is
            times["in place, donated"].append(t)
            t, _ = timed(kept, x)
            times["in place, kept"].append(t)
        expected = float(args.repeat + 1)
        assert float(y[0]) == expected and float(y[-1]) == expected, (float(y[0]), expected)

    print(f"{args.platform}: {args.mib} MiB of float32; donated program aliases its buffer with no copy: {aliased}")
    for name, ts in times.items():
        print(f"{name:18} {statistics.median(ts) * 1e3:9.3f} ms (min {min(ts) * 1e3:.3f})")


if __name__ == "__main__":
    main()
