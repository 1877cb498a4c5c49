"""Per-call cost: a kernix-generated handler against a hand-written XLA FFI handler.

Both call the same kernel (``out = x * factor`` on a small array, so the cost
is the call, not the arithmetic).  Each runs 10,000 calls inside ONE jitted
program (``fori_loop`` of 1,000 iterations, 10 calls each), with and without
CUDA graphs (XLA command buffers), each configuration in a fresh process
since XLA reads its flags once.  Prints the median time per call and the
ratio kernix / hand-written.

Usage::

    python bench/bench_call.py [--platform cuda|cpu] [--repeat 7] [--size 1024] [--processes 5] [--compare DIR]

On a machine without a GPU, ``--platform cpu`` compares the C++ handlers.

A process's placement in memory moves its per-call times by a few per cent,
so each configuration runs in ``--processes`` fresh processes (each timing
both handlers, interleaved) and the script prints the median of their ratios
with the lowest and highest.  ``--compare DIR`` also times the kernix of
another checkout (e.g. an older commit) the same way, in processes of its
own alternating with this one's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the checkout's kernix (the child's --root goes before it)

CUDA_KERNEL = r"""
#include <cuda_runtime.h>
__global__ void scale_kernel(const float* x, float* out, int n, float factor) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] * factor;
}
"""

KERNIX_CUDA = CUDA_KERNEL + r"""
#include "kernix/common.h"
// @BE scale
void scale(const BE::Tensor x, BE::Tensor out, float factor, cudaStream_t stream) {
  int n = static_cast<int>(x.numel());
  scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x.data_ptr<float>(), out.data_ptr<float>(), n, factor);
  BE_CHECK_KERNEL_LAUNCH();
}
"""

HAND_CUDA = CUDA_KERNEL + r"""
#include "xla/ffi/api/ffi.h"
namespace ffi = xla::ffi;
static ffi::Error scale_impl(cudaStream_t stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> out, float factor) {
  int n = static_cast<int>(x.element_count());
  scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(static_cast<const float*>(x.untyped_data()),
                                                    static_cast<float*>(out->untyped_data()), n, factor);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return ffi::Error::Internal(cudaGetErrorString(err));
  return ffi::Error::Success();
}
XLA_FFI_DEFINE_HANDLER_SYMBOL(hand_scale, scale_impl,
    ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>()
        .Attr<float>("factor"), {ffi::Traits::kCmdBufferCompatible});
"""

CPU_KERNEL = r"""
#include <cstdint>
static void scale_loop(const float* x, float* out, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * factor;
}
"""

KERNIX_CPU = CPU_KERNEL + r"""
#include "kernix/common.h"
// @BE scale
void scale(const BE::Tensor x, BE::Tensor out, float factor) {
  scale_loop(x.data_ptr<float>(), out.data_ptr<float>(), x.numel(), factor);
}
"""

HAND_CPU = CPU_KERNEL + r"""
#include "xla/ffi/api/ffi.h"
namespace ffi = xla::ffi;
static ffi::Error scale_impl(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> out, float factor) {
  scale_loop(static_cast<const float*>(x.untyped_data()), static_cast<float*>(out->untyped_data()),
             static_cast<int64_t>(x.element_count()), factor);
  return ffi::Error::Success();
}
XLA_FFI_DEFINE_HANDLER_SYMBOL(hand_scale, scale_impl,
    ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>().Attr<float>("factor"));
"""

CALLS_PER_ITER = 10
ITERS = 1000


def build_hand(platform_: str, workdir: Path) -> Path:
    """Compile the hand-written handler the way one would by hand: one TU, -O3."""
    from kernix.backend import toolchain
    from kernix.backend.arch import detect_compute_capability

    src = workdir / ("hand.cu" if platform_ == "cuda" else "hand.cpp")
    src.write_text(HAND_CUDA if platform_ == "cuda" else HAND_CPU)
    so = workdir / "hand.so"
    inc = ["-isystem", toolchain.jax_ffi_include_dir()]
    if platform_ == "cuda":
        arch = detect_compute_capability()
        cmd = [toolchain.find_nvcc().path, "-std=c++17", "-O3", "-shared", "-Xcompiler=-fPIC",
               f"--generate-code=arch=compute_{arch[3:]},code=[compute_{arch[3:]},{arch}]", *inc, str(src), "-o", str(so)]
    else:
        cmd = [toolchain.find_host_compiler().path, "-std=c++17", "-O3", "-shared", "-fPIC", *inc, str(src), "-o", str(so)]
    subprocess.run(cmd, check=True)
    return so


def child(args: argparse.Namespace) -> None:
    """Time both variants in this process (XLA flags are already set)."""
    import ctypes
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np

    if args.root:  # the kernix of another checkout
        sys.path.insert(0, args.root)
    import kernix

    jax_platform = "CUDA" if args.platform == "cuda" else "cpu"
    lib = ctypes.CDLL(args.hand_so)
    jax.ffi.register_ffi_target("bench_hand.scale", jax.ffi.pycapsule(lib.hand_scale), platform=jax_platform)
    load = kernix.load_cuda_inline if args.platform == "cuda" else kernix.load_cpp_inline
    mod = load("bench_call_kernix", KERNIX_CUDA if args.platform == "cuda" else KERNIX_CPU)

    x0 = jnp.ones(args.size, jnp.float32)
    spec = jax.ShapeDtypeStruct(x0.shape, x0.dtype)
    one = np.float32(1.0)

    def make(target: str):
        call = jax.ffi.ffi_call(target, spec)

        def body(_, x):
            for _ in range(CALLS_PER_ITER):
                x = call(x, factor=one)
            return x

        return jax.jit(lambda x: jax.lax.fori_loop(0, ITERS, body, x))

    variants = {"hand": make("bench_hand.scale"), "kernix": make(mod.targets["scale"])}
    for f in variants.values():
        f(x0).block_until_ready()
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.repeat):  # interleaved, so drift hits both alike
        for name, f in variants.items():
            t0 = time.perf_counter()
            f(x0).block_until_ready()
            times[name].append((time.perf_counter() - t0) / (CALLS_PER_ITER * ITERS))
    print(json.dumps(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--platform", choices=["cuda", "cpu"], default=None)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--processes", type=int, default=5, help="fresh processes per configuration")
    ap.add_argument("--compare", default=None, help="another kernix checkout to time the same way")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--root", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--hand-so", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.platform is None:
        try:
            import jax

            args.platform = "cuda" if jax.devices("gpu") else "cpu"
        except RuntimeError:
            args.platform = "cpu"
    if args.child:
        child(args)
        return

    workdir = Path(tempfile.mkdtemp(prefix="kernix-bench-call-"))
    hand_so = build_hand(args.platform, workdir)
    configs = {"no graphs": "--xla_gpu_enable_command_buffer="}
    if args.platform == "cuda":
        configs["CUDA graphs"] = "--xla_gpu_enable_command_buffer=+CUSTOM_CALL --xla_gpu_graph_min_graph_size=1"
    else:
        configs = {"cpu": ""}
    roots = {"kernix": str(HERE.parent)}
    if args.compare:
        roots["compare"] = str(Path(args.compare).resolve())
    print(f"machine: {platform.node()}, platform {args.platform}, {CALLS_PER_ITER * ITERS} calls per program "
          f"(fori_loop {ITERS} x {CALLS_PER_ITER}), array of {args.size} float32, median of {args.repeat} "
          f"programs in each of {args.processes} processes")
    print(f"{'configuration':<14}{'checkout':<10}{'hand-written':>14}{'kernix':>12}{'kernix/hand':>13}"
          f"{'lowest':>9}{'highest':>9}")
    for label, flags in configs.items():
        env = {**os.environ, "KERNIX_CACHE_DIR": str(workdir / "cache")}
        if args.platform == "cuda":
            env["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flags).strip()
        else:
            env["JAX_PLATFORMS"] = "cpu"  # the C++ handlers, also on a machine with a GPU
        runs: dict[str, list[tuple[float, float]]] = {k: [] for k in roots}
        for _ in range(args.processes):
            for checkout, root in roots.items():
                cmd = [sys.executable, __file__, "--child", "--platform", args.platform, "--repeat", str(args.repeat),
                       "--size", str(args.size), "--hand-so", str(hand_so), "--root", root]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
                times = json.loads(out.stdout.strip().splitlines()[-1])
                runs[checkout].append((statistics.median(times["hand"]), statistics.median(times["kernix"])))
        for checkout, pairs in runs.items():
            ratios = [kx / hand for hand, kx in pairs]
            hand = statistics.median(h for h, _ in pairs)
            kx = statistics.median(k for _, k in pairs)
            print(f"{label:<14}{checkout:<10}{hand * 1e6:>11.3f} us{kx * 1e6:>9.3f} us{statistics.median(ratios):>13.3f}"
                  f"{min(ratios):>9.3f}{max(ratios):>9.3f}", flush=True)


if __name__ == "__main__":
    main()
