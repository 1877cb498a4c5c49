"""A CPU kernel on XLA's intra-op thread pool (``BE::ThreadPool``) against the
same kernel on one thread.

The kernel computes, for each of ``--size`` elements, ``--work`` steps of a
small recurrence (so the cost is arithmetic, not memory).  The same source
exports it twice: ``pooled`` splits the elements with
``pool.parallel_for``, ``serial`` runs them in one loop; both run inside one
jitted program.  Prints the pool's size, the median time of each and the
speed-up (serial / pooled).

Usage::

    python bench/bench_threads.py [--size 1000000] [--work 200] [--repeat 9]

On the 16-core GPU machine the pool has 16 threads; the speed-up there is the
figure this script is for.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the checkout's kernix

SOURCE = r"""
#include "kernix/common.h"
#include "kernix/threads.h"

static inline void steps(const float* x, float* y, int64_t begin, int64_t end, int64_t work) {
  for (int64_t i = begin; i < end; ++i) {
    float v = x[i];
    for (int64_t k = 0; k < work; ++k) v = v * 0.999f + 0.5f / (1.0f + v * v);
    y[i] = v;
  }
}

// @BE pooled (n)->(n)
void pooled(const BE::Tensor& x, BE::Tensor& y, int64_t work, BE::ThreadPool pool) {
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  pool.parallel_for(x.numel(), 1024, [&](int64_t begin, int64_t end) { steps(in, out, begin, end, work); });
}

// @BE serial (n)->(n)
void serial(const BE::Tensor& x, BE::Tensor& y, int64_t work) {
  steps(x.data_ptr<float>(), y.data_ptr<float>(), 0, x.numel(), work);
}

// @BE pool_size ()->():int64
void pool_size(const BE::Tensor& unused, BE::Tensor& n, BE::ThreadPool pool) {
  *n.data_ptr<int64_t>() = pool.num_threads();
}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--work", type=int, default=200, help="recurrence steps per element")
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp
    import numpy as np

    import kernix

    jax.config.update("jax_platforms", "cpu")
    mod = kernix.load_cpp_inline("bench_threads", SOURCE)
    threads = int(mod.pool_size(jnp.zeros((), jnp.float32)))
    x = jnp.asarray(np.random.default_rng(0).uniform(0, 1, args.size), jnp.float32)
    fns = {
        "serial": jax.jit(lambda x: mod.serial(x, work=args.work)),
        "pooled": jax.jit(lambda x: mod.pooled(x, work=args.work)),
    }
    results = {name: f(x).block_until_ready() for name, f in fns.items()}  # compile, warm up
    np.testing.assert_array_equal(results["serial"], results["pooled"])  # the same numbers
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(args.repeat):
        for name, f in fns.items():  # interleaved, so drift affects both alike
            start = time.perf_counter()
            f(x).block_until_ready()
            times[name].append(time.perf_counter() - start)
    serial, pooled = (statistics.median(times[n]) for n in ("serial", "pooled"))
    print(f"XLA intra-op pool: {threads} threads; {args.size} elements x {args.work} steps")
    print(f"serial  {serial * 1e3:9.2f} ms")
    print(f"pooled  {pooled * 1e3:9.2f} ms")
    print(f"speed-up {serial / pooled:.2f}x")


if __name__ == "__main__":
    main()
