"""Build-time benchmark: kernix's split build against one translation unit.

For a 1-function and an N-function module (macro-generated entry points), in
C++ and in CUDA, prints side by side:

* cold build with kernix (empty cache: inference + code generation + ninja
  building the user unit and the handler unit in parallel + link);
* the same kernel compiled as ONE translation unit with an ffi.h handler per
  function (what a tool that puts kernel and FFI handler in one file
  compiles): kernix's shim unit followed by ffi.h-bound handlers, timed on the
  same files;
* warm load in a new process (cache hit), excluding ``import jax``: with
  ``import kernix``, and the ``load_*`` call alone;
* rebuild after editing one kernel body;
* optionally (``--brainevent``) the same CUDA source built and warm-loaded
  with the ``brainevent`` package's ``load_cuda_inline``, if it is installed.

Usage::

    python bench/bench_build.py [--functions 40] [--repeat 3] [--cuda-arch sm_90]
                                [--no-cuda] [--no-cpp] [--brainevent]

Medians over ``--repeat`` runs; every cold run uses a fresh cache directory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import kernix  # noqa: E402
from kernix.backend import codegen, toolchain  # noqa: E402
from kernix.backend.arch import detect_compute_capability  # noqa: E402
from kernix.backend.flags import BuildConfig, compile_flags  # noqa: E402


def cuda_source(n: int, variant: int = 0) -> str:
    """A realistic CUDA module: one templated kernel, n macro-generated entry points."""
    head = textwrap.dedent(
        """
        #include <cuda_runtime.h>
        #include "brainevent/common.h"

        template <int OP>
        __global__ void unary_kernel(const float* x, float* out, int n, float alpha) {
          int i = blockIdx.x * blockDim.x + threadIdx.x;
          if (i < n) {
            float v = x[i];
            out[i] = OP % 3 == 0 ? alpha * v + OP : (OP % 3 == 1 ? v * v * alpha : v - alpha * OP);
          }
        }

        #define DEFINE_UNARY(NAME, OP)                                                    \\
          void NAME(const BE::Tensor x, BE::Tensor out, float alpha, int64_t stream) {    \\
            int n = static_cast<int>(x.numel());                                          \\
            unary_kernel<OP><<<(n + 255) / 256, 256, 0, (cudaStream_t)stream>>>(          \\
                static_cast<const float*>(x.data_ptr()), static_cast<float*>(out.data_ptr()), n, alpha); \\
          }
        """
    )
    body = "".join(f"// @BE op_{i}\nDEFINE_UNARY(op_{i}, {i + variant * 1000})\n" for i in range(n))
    return head + body


def cpp_source(n: int, variant: int = 0, first: int = 0) -> str:
    """The same shape of module for the CPU (functions ``op_<first>`` ... ``op_<first + n - 1>``)."""
    head = textwrap.dedent(
        """
        #include "kernix/common.h"

        template <int OP>
        void unary(const float* x, float* out, int64_t n, float alpha) {
          for (int64_t i = 0; i < n; ++i) {
            float v = x[i];
            out[i] = OP % 3 == 0 ? alpha * v + OP : (OP % 3 == 1 ? v * v * alpha : v - alpha * OP);
          }
        }

        #define DEFINE_UNARY(NAME, OP)                                                  \\
          void NAME(const BE::Tensor x, BE::Tensor out, float alpha) {                  \\
            unary<OP>(x.data_ptr<float>(), out.data_ptr<float>(), x.numel(), alpha);    \\
          }
        """
    )
    body = "".join(f"// @BE op_{i}\nDEFINE_UNARY(op_{i}, {i + variant * 1000})\n" for i in range(first, first + n))
    return head + body


def median_ms(samples: list[float]) -> str:
    ms = statistics.median(samples) * 1e3
    return f"{ms:8.1f} ms" if ms < 100 else f"{ms:8.0f} ms"


def kernix_cold(lang: str, n: int, arch: str | None, workdir: Path) -> tuple[float, kernix.CompiledModule]:
    cache = Path(tempfile.mkdtemp(dir=workdir))
    t0 = time.perf_counter()
    if lang == "cuda":
        mod = kernix.load_cuda_inline(f"bench_{lang}_{n}", cuda_source(n), build_directory=str(cache),
                                      compute_capability=arch, auto_register=False)
    else:
        mod = kernix.load_cpp_inline(f"bench_{lang}_{n}", cpp_source(n), build_directory=str(cache),
                                     auto_register=False)
    return time.perf_counter() - t0, mod


def one_tu(lang: str, mod: kernix.CompiledModule, arch: str | None, workdir: Path) -> float:
    """Compile the module's generated code as one translation unit and link it."""
    build = mod.path.parents[3] / "build" / mod.name
    ext = "cu" if lang == "cuda" else "cpp"
    combined = Path(tempfile.mkdtemp(dir=workdir)) / f"one.{ext}"
    # The shim unit includes the user's file; then one ffi.h handler per
    # function, as a hand-written FFI binding would have: the fixed reference
    # that kernix's own (C-API) handlers are measured against; and the text of
    # failed checks that the user's code links to.
    fns = [codegen.ExportedFunction(i, spec) for i, spec in enumerate(mod.functions.values())]
    handlers = codegen.ffi_handler_unit(fns, mod.platform, True)
    combined.write_text("\n".join([(build / f"shim_0.{ext}").read_text(), handlers, codegen.messages_unit()]))
    flags = compile_flags(BuildConfig("cuda" if lang == "cuda" else "cpu", arch=arch))
    obj = combined.with_suffix(".o")
    compile_cmd = [*flags["user"], "-c", str(combined), "-o", str(obj)]
    link = [a for a in flags["link"] if a != "@IN@"]
    link_cmd = link[:3] + [str(obj)] + link[3:] + ["-o", str(combined.with_suffix(".so"))]
    t0 = time.perf_counter()
    subprocess.run(compile_cmd, check=True, capture_output=True)
    subprocess.run(link_cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


WARM_SNIPPET = """
import sys, time, json
import jax, jax.numpy  # excluded from the measurement
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
import kernix
t1 = time.perf_counter()
{load}
t2 = time.perf_counter()
print(json.dumps([t2 - t0, t2 - t1]))
"""


def warm_new_process(load: str, env: dict[str, str]) -> tuple[float, float]:
    """(import kernix + load, load alone) in a fresh process that has imported jax."""
    code = WARM_SNIPPET.format(root=str(HERE.parent), load=load)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env)
    total, load_only = json.loads(out.stdout.strip().splitlines()[-1])
    return total, load_only


def kernix_warm(lang: str, n: int, mod: kernix.CompiledModule, arch: str | None,
                repeat: int) -> list[tuple[float, float]]:
    root = str(mod.path.parents[3])
    src = cuda_source(n) if lang == "cuda" else cpp_source(n)
    fn = "load_cuda_inline" if lang == "cuda" else "load_cpp_inline"
    extra = f", compute_capability={arch!r}" if lang == "cuda" else ""
    load = f"kernix.{fn}({mod.name!r}, {src!r}, build_directory={root!r}{extra})"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as users run: with .pyc
    warm_new_process(load, env)  # writes the .pyc files
    return [warm_new_process(load, env) for _ in range(repeat)]


def kernix_edit(lang: str, n: int, mod: kernix.CompiledModule, arch: str | None) -> float:
    root = str(mod.path.parents[3])
    src = (cuda_source(n) if lang == "cuda" else cpp_source(n)).replace("v - alpha * OP", "v - alpha * OP - 1")
    t0 = time.perf_counter()
    if lang == "cuda":
        kernix.load_cuda_inline(mod.name, src, build_directory=root, compute_capability=arch, auto_register=False)
    else:
        kernix.load_cpp_inline(mod.name, src, build_directory=root, auto_register=False)
    return time.perf_counter() - t0


def brainevent_times(n: int, arch: str, repeat: int, workdir: Path) -> tuple[list[float], list[float]] | None:
    try:
        import brainevent  # noqa: F401
    except ImportError:
        print("  brainevent is not installed: skipped")
        return None
    functions = {f"op_{i}": ["arg", "ret", "attr.alpha:float32", "stream"] for i in range(n)}
    cold = []
    for r in range(repeat):
        cache = Path(tempfile.mkdtemp(dir=workdir))
        env = {**os.environ, "BRAINEVENT_CACHE_DIR": str(cache)}
        load = (f"import brainevent\nbrainevent.load_cuda_inline('be_bench_{n}', {cuda_source(n)!r}, "
                f"functions={functions!r}, compute_capability={arch!r}, auto_register=False)")
        code = WARM_SNIPPET.format(root=str(HERE.parent), load=load)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        if out.returncode != 0:
            print("  brainevent failed:", out.stderr[-2000:])
            return None
        cold.append(json.loads(out.stdout.strip().splitlines()[-1])[0])
    warm = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        warm.append(json.loads(out.stdout.strip().splitlines()[-1])[0])
    return cold, warm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--functions", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cuda-arch", default=None, help="default: detected, else sm_90")
    ap.add_argument("--no-cuda", action="store_true")
    ap.add_argument("--no-cpp", action="store_true")
    ap.add_argument("--brainevent", action="store_true", help="also time the brainevent package, if installed")
    args = ap.parse_args()

    langs = [lang for lang, skip in (("cpp", args.no_cpp), ("cuda", args.no_cuda)) if not skip]
    arch = None
    if "cuda" in langs:
        try:
            arch = detect_compute_capability(args.cuda_arch)
        except kernix.ToolchainError:
            arch = "sm_90"
    print(f"machine: {platform.node()} ({os.cpu_count()} CPUs), python {platform.python_version()}, "
          f"jaxlib {toolchain.jaxlib_version()}, arch {arch}")
    print(f"host compiler: {toolchain.find_host_compiler().identity.splitlines()[1]}")
    if "cuda" in langs:
        print(f"nvcc: {toolchain.find_nvcc().identity.splitlines()[-1]}")
    print(f"median of {args.repeat} runs\n")
    workdir = Path(tempfile.mkdtemp(prefix="kernix-bench-"))
    header = (f"{'module':<16}{'kernix cold':>14}{'one TU':>14}{'ratio':>8}{'warm: import+load':>20}"
              f"{'load call':>12}{'edit rebuild':>15}")
    print(header)
    for lang in langs:
        for n in sorted({1, args.functions}):
            colds, ones, edits = [], [], []
            mod = None
            for _ in range(args.repeat):
                t, mod = kernix_cold(lang, n, arch, workdir)
                colds.append(t)
                ones.append(one_tu(lang, mod, arch, workdir))
                edits.append(kernix_edit(lang, n, mod, arch))
            warms = kernix_warm(lang, n, mod, arch, args.repeat)
            ratio = statistics.median(colds) / statistics.median(ones)
            print(f"{lang + ' x' + str(n):<16}{median_ms(colds):>14}{median_ms(ones):>14}{ratio:>8.2f}"
                  f"{median_ms([w[0] for w in warms]):>20}{median_ms([w[1] for w in warms]):>12}"
                  f"{median_ms(edits):>15}", flush=True)
    if args.brainevent and "cuda" in langs:
        print(f"\nbrainevent, same CUDA source, x{args.functions} (explicit functions dict):")
        res = brainevent_times(args.functions, arch, args.repeat, workdir)
        if res:
            print(f"  cold build {median_ms(res[0])}   warm load (new process) {median_ms(res[1])}")
    print(f"\ncommands: {shlex.join([sys.executable, *sys.argv])}")


if __name__ == "__main__":
    main()
