"""Autotuning (``tune=``): the variant timing chooses, against the first listed value and the best single
fixed value, over a range of shapes, and what the first call's tuning costs.

Kernels whose best block size depends on the shape:

* ``rowsum``: a reduction of each row (CPU: BLOCK interleaved partial sums; CUDA: one block of THREADS
  threads per row);
* ``matmul``: a tiled matrix product (CPU: TILE x TILE cache blocks; CUDA: TILE x TILE shared-memory tiles);
* with ``--cuda``, ``densemv``: brainevent 0.3.0's event-driven dense matrix-vector kernel
  (``_no_transpose_kern_f32_float`` of ``_dense/binary_densemv.cu``), launched with BSZ threads per block.
  Its source is the reference project's, fetched at run time (``pip download brainevent==0.3.0``, as
  ``bench_corpus.py`` does) and never stored in this repository; offline, that kernel is skipped.

For each kernel and shape the script times every variant by keyword (``BLOCK=...``, as kernix times
them: :func:`kernix.runtime.tuning.seconds_per_call`), then calls the kernel with the parameter left
out, in a fresh cache: that first call tunes (its cost, ``cost_ms`` of the table's entry, is printed)
and the variant it chose is reported with its time.  *best fixed* is the one value with the smallest
geometric mean, over the shapes, of its time over the shape's best time.

Usage::

    python bench/bench_tune.py [--kernels rowsum,matmul] [--cuda] [--wheel brainevent-0.3.0-py3-none-any.whl]

On a machine without network, pass the wheel (``pip download --no-deps --only-binary=:all:
--python-version 3.12 brainevent==0.3.0`` elsewhere) with ``--wheel``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import zipfile
from pathlib import Path

CPU_SOURCE = r"""
#include "kernix/common.h"

// @BE rowsum<T: float; BLOCK: 1, 4, 16, 64> (...,n)->(...) tune=BLOCK
template <typename T, int BLOCK>
void rowsum(const BE::Tensor& x, BE::Tensor& out) {
  const int64_t n = x.shape(x.ndim() - 1), rows = n ? x.numel() / n : 0;
  const T* a = x.data_ptr<T>();
  for (int64_t r = 0; r < rows; ++r) {
    T acc[BLOCK] = {};
    for (int64_t i = 0; i < n; ++i) acc[i % BLOCK] += a[r * n + i];
    T sum = 0;
    for (int k = 0; k < BLOCK; ++k) sum += acc[k];
    out.data_ptr<T>()[r] = sum;
  }
}

// @BE matmul<T: float; TILE: 4, 16, 64, 256> (m,k),(k,n)->(m,n) tune=TILE
template <typename T, int TILE>
void matmul(const BE::Tensor& a, const BE::Tensor& b, BE::Tensor& c) {
  const int64_t m = a.shape(0), k = a.shape(1), n = b.shape(1);
  const T* A = a.data_ptr<T>();
  const T* B = b.data_ptr<T>();
  T* C = c.data_ptr<T>();
  for (int64_t i = 0; i < m * n; ++i) C[i] = 0;
  for (int64_t i0 = 0; i0 < m; i0 += TILE)
    for (int64_t p0 = 0; p0 < k; p0 += TILE)
      for (int64_t j0 = 0; j0 < n; j0 += TILE)
        for (int64_t i = i0; i < i0 + TILE && i < m; ++i)
          for (int64_t p = p0; p < p0 + TILE && p < k; ++p) {
            const T aip = A[i * k + p];
            for (int64_t j = j0; j < j0 + TILE && j < n; ++j) C[i * n + j] += aip * B[p * n + j];
          }
}
"""

CUDA_SOURCE = r"""
#include <cuda_runtime.h>
#include "kernix/common.h"

template <int THREADS>
__global__ void rowsum_kernel(const float* x, float* out, int64_t n) {
  __shared__ float partial[THREADS];
  const float* row = x + blockIdx.x * n;
  float acc = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += THREADS) acc += row[i];
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

// @BE rowsum<THREADS: 32, 64, 128, 256, 512, 1024> (...,n)->(...) tune=THREADS
template <int THREADS>
void rowsum(const BE::Tensor& x, BE::Tensor& out, cudaStream_t stream) {
  const int64_t n = x.shape(x.ndim() - 1), rows = n ? x.numel() / n : 0;
  if (rows) rowsum_kernel<THREADS><<<rows, THREADS, 0, stream>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
}

template <int TILE>
__global__ void matmul_kernel(const float* A, const float* B, float* C, int m, int k, int n) {
  __shared__ float As[TILE][TILE], Bs[TILE][TILE];
  const int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.f;
  for (int p0 = 0; p0 < k; p0 += TILE) {
    As[threadIdx.y][threadIdx.x] = row < m && p0 + threadIdx.x < k ? A[row * k + p0 + threadIdx.x] : 0.f;
    Bs[threadIdx.y][threadIdx.x] = col < n && p0 + threadIdx.y < k ? B[(p0 + threadIdx.y) * n + col] : 0.f;
    __syncthreads();
    for (int p = 0; p < TILE; ++p) acc += As[threadIdx.y][p] * Bs[p][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) C[row * n + col] = acc;
}

// @BE matmul<TILE: 8, 16, 32> (m,k),(k,n)->(m,n) tune=TILE
template <int TILE>
void matmul(const BE::Tensor& a, const BE::Tensor& b, BE::Tensor& c, cudaStream_t stream) {
  const int m = a.shape(0), k = a.shape(1), n = b.shape(1);
  dim3 block(TILE, TILE), grid((n + TILE - 1) / TILE, (m + TILE - 1) / TILE);
  matmul_kernel<TILE><<<grid, block, 0, stream>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(),
                                                   m, k, n);
}
"""

# Appended to brainevent's binary_densemv.cu (whose own annotations are turned off): its kernel, launched
# with BSZ threads per block (brainevent launches 256).
DENSEMV_LAUNCHER = r"""
// @BE densemv<BSZ: 64, 128, 256, 512, 1024> (m,n),(n)->(m) tune=BSZ
template <int BSZ>
void densemv(const BE::Tensor& weights, const BE::Tensor& spikes, BE::Tensor& output, cudaStream_t stream) {
  const int m = static_cast<int>(weights.size(0)), n = static_cast<int>(weights.size(1));
  float* out = static_cast<float*>(output.data_ptr());
  cudaMemsetAsync(out, 0, (size_t)m * sizeof(float), stream);
  const int blocks = (n + BSZ / 32 - 1) / (BSZ / 32);
  _no_transpose_kern_f32_float<<<blocks, BSZ, 0, stream>>>(static_cast<const float*>(weights.data_ptr()),
                                                           static_cast<const float*>(spikes.data_ptr()), out, m, n);
}
"""

#: Shapes per kernel (the inputs' shapes), CPU and CUDA.
SHAPES = {
    ("rowsum", False): [[(4096, 8)], [(1024, 64)], [(256, 1024)], [(64, 16384)], [(8, 131072)]],
    ("matmul", False): [[(64, 64), (64, 64)], [(128, 128), (128, 128)], [(256, 256), (256, 256)],
                        [(512, 512), (512, 512)], [(1024, 64), (64, 1024)], [(32, 2048), (2048, 32)]],
    ("rowsum", True): [[(65536, 16)], [(16384, 128)], [(4096, 1024)], [(512, 16384)], [(64, 262144)],
                       [(8, 1048576)]],
    ("matmul", True): [[(64, 64), (64, 64)], [(256, 256), (256, 256)], [(1024, 1024), (1024, 1024)],
                       [(4096, 512), (512, 64)], [(2048, 2048), (2048, 2048)]],
    ("densemv", True): [[(512, 512), (512,)], [(4096, 1024), (1024,)], [(1024, 8192), (8192,)],
                        [(8192, 8192), (8192,)], [(32768, 2048), (2048,)]],
}


def densemv_source(work: Path, wheel: str | None = None) -> tuple[str, list[str]] | None:
    """brainevent's ``binary_densemv.cu`` (from ``wheel``, else downloaded) with the launcher appended, and its
    include directory (``None``, saying why, offline)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_corpus import fetch_wheel

    wheel = wheel or fetch_wheel()
    if wheel is None:
        return None
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.startswith("brainevent/include/")]
        z.extractall(work / "brainevent-wheel", names + ["brainevent/_dense/binary_densemv.cu"])
        text = z.read("brainevent/_dense/binary_densemv.cu").decode()
    text = text.replace("// @BE ", "// (brainevent's) ")  # only the launcher below is exported here
    return text + DENSEMV_LAUNCHER, [str(work / "brainevent-wheel" / "brainevent" / "include")]


def inputs_of(kernel: str, shapes: list[tuple[int, ...]], device):
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    if kernel == "densemv":  # weights, and spikes of which a tenth are active
        w = rng.uniform(-1, 1, shapes[0]).astype(np.float32)
        s = (rng.uniform(size=shapes[1]) < 0.1).astype(np.float32)
        return [jax.device_put(jnp.asarray(w), device), jax.device_put(jnp.asarray(s), device)]
    return [jax.device_put(jnp.asarray(rng.uniform(-1, 1, s).astype(np.float32)), device) for s in shapes]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cuda", action="store_true", help="the CUDA kernels, on the GPU")
    parser.add_argument("--kernels", default=None, help="comma-separated (default: all for the platform)")
    parser.add_argument("--wheel", help="the brainevent 0.3.0 wheel (default: downloaded, as bench_corpus.py does)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kernix-bench-tune-"))
    os.environ["KERNIX_CACHE_DIR"] = str(work / "cache")  # (a fresh cache: each first call tunes)
    import jax
    import kernix
    from kernix.runtime import tuning

    device = jax.devices("gpu" if args.cuda else "cpu")[0]
    kernels = args.kernels.split(",") if args.kernels else (
        ["rowsum", "matmul", "densemv"] if args.cuda else ["rowsum", "matmul"])
    print(f"device: {tuning.device_identity(device)}")
    modules = {}
    if args.cuda:
        modules["rowsum"] = modules["matmul"] = kernix.load_cuda_inline("bench_tune", CUDA_SOURCE)
        if "densemv" in kernels:
            found = densemv_source(work, args.wheel)
            if found is None:
                kernels.remove("densemv")
            else:
                modules["densemv"] = kernix.load_cuda_inline("bench_tune_be", found[0], extra_include_paths=found[1])
    else:
        modules["rowsum"] = modules["matmul"] = kernix.load_cpp_inline("bench_tune", CPU_SOURCE)
    summary = []
    for kernel in kernels:
        mod = modules[kernel]
        family = mod[kernel]
        variants = [m.name for m in family.members]
        value = {m.name: m.static[-1][1] for m in family.members}
        param = family.members[0].static[-1][0]
        rows = []
        for shapes in SHAPES[(kernel, args.cuda)]:
            xs = inputs_of(kernel, shapes, device)
            outs = jax.eval_shape(mod[variants[0]], *xs)
            times = {}
            for name in variants:  # each as the tuner times it: a call of side effects, never merged
                call = jax.ffi.ffi_call(mod.targets[name], outs, has_side_effect=True)
                times[name] = tuning.seconds_per_call(call, xs, in_one_program=args.cuda)
            before = {k for t in tuning.tables_of(mod) for k in t["entries"]}
            jax.block_until_ready(family(*xs))  # the first call: tunes
            new = [v for t in tuning.tables_of(mod) for k, v in t["entries"].items() if k not in before]
            assert len(new) == 1, f"{kernel} {shapes}: the first call made {len(new)} table entries"
            rows.append((shapes, times, new[0]["choice"], new[0]["cost_ms"]))
        best = {name: math.exp(sum(math.log(t[name] / min(t.values())) for _, t, _, _ in rows) / len(rows))
                for name in variants}
        fixed = min(best, key=best.get)
        first = variants[0]
        print(f"\n{kernel} ({param} in {', '.join(value.values())}; times per call in us)")
        print(f"{'shapes':<28} {'first ' + param + '=' + value[first]:>16} {'best fixed ' + value[fixed]:>16} "
              f"{'tuned':>16} {'best':>16} {'tuning ms':>10}")
        ratios = []
        for shapes, t, choice, cost in rows:
            shown = " ".join("x".join(map(str, s)) for s in shapes)
            top = min(t, key=t.get)
            ratios.append((t[first] / t[choice], t[fixed] / t[choice], t[choice] / t[top]))
            print(f"{shown:<28} {t[first] * 1e6:>16.1f} {t[fixed] * 1e6:>16.1f} "
                  f"{t[choice] * 1e6:>9.1f} ({value[choice]:>4}) {t[top] * 1e6:>9.1f} ({value[top]:>4}) {cost:>10.1f}")
        geo = [math.exp(sum(math.log(r[i]) for r in ratios) / len(ratios)) for i in range(3)]
        summary.append((kernel, *geo))
    print("\ngeometric means over the shapes: tuned is N times faster than (>1: tuned wins); tuned / best")
    for kernel, vs_first, vs_fixed, vs_best in summary:
        print(f"  {kernel:<8} vs first listed {vs_first:5.2f}   vs best fixed {vs_fixed:5.2f}   "
              f"tuned/best {vs_best:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
