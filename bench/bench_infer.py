"""Cold and warm inference time for a realistic CUDA source.

Generates a .cu file with dozens of macro-generated entry points (one per
operation and dtype, each launching a templated kernel, including
``cuda_runtime.h`` and ``kernix/common.h``) and measures:

* cold, fresh process: a new Python process with an empty spec cache runs
  ``infer_file`` once (timed inside the process: libclang load + parse +
  inference + cache store; the Python start-up itself is not counted);
* cold, in process: ``infer_file(..., use_cache=False)`` after libclang is
  loaded (parse + inference only);
* warm: ``infer_file`` on the unchanged file with a filled cache (a fresh
  process, timed inside it, and repeated in-process calls).

The same is measured for a second file that also includes ``<cub/cub.cuh>``
(CUB, Thrust and libcu++ live in CUDA 13's ``include/cccl``).  The toolchain
memo copied into each cold cache holds the compiler's answers and the
precompiled CUDA prelude (built once per toolchain and flag set; its one-off
cost is printed as "first ever").

Medians over several runs.  Usage: ``python bench/bench_infer.py [--runs N]``;
``--corpus DIR [-I INCLUDE]`` measures a directory of real CUDA files instead
(per file, cold and warm, ``kernix inspect DIR`` as a whole, and the CLI's
start-up against a bare ``python -c pass``); ``--cli FILE [-I INCLUDE]``
measures only the CLI's start-up on one file.  Run with the Python of a fresh
virtual environment holding the installed wheel to time the ``kernix``
command too, as a user starts it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

OPS = ["add", "sub", "mul", "div", "max", "min", "axpy", "scale"]
DTYPES = [("f32", "float"), ("f64", "double"), ("i32", "int32_t"), ("i64", "int64_t")]


def make_source(cub: bool = False) -> str:
    out = [
        *(["#include <cub/cub.cuh>"] if cub else []),
        "#include <cuda_runtime.h>",
        "#include <cstdint>",
        '#include "kernix/common.h"',
        "",
        "template <typename T, typename Op>",
        "__global__ void binary_kernel(const T* a, const T* b, T* out, int64_t n, T alpha, Op op) {",
        "  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;",
        "  if (i < n) out[i] = op(a[i], b[i], alpha);",
        "}",
        "",
        "#define DEFINE_BINARY(OP, SUFFIX, T, EXPR)                                          \\",
        "  struct OP##_##SUFFIX##_op {                                                       \\",
        "    __device__ T operator()(T x, T y, T alpha) const { return EXPR; }               \\",
        "  };                                                                                \\",
        "  void OP##_##SUFFIX(const BE::Tensor& a, const BE::Tensor& b, BE::Tensor& out,     \\",
        "                     T alpha, int64_t stream) {                                     \\",
        "    int64_t n = a.numel();                                                          \\",
        "    binary_kernel<<<(n + 255) / 256, 256, 0, (cudaStream_t)stream>>>(               \\",
        "        a.data_ptr<T>(), b.data_ptr<T>(), out.data_ptr<T>(), n, alpha,              \\",
        "        OP##_##SUFFIX##_op{});                                                      \\",
        "    BE_CHECK_KERNEL_LAUNCH();                                                       \\",
        "  }",
        "",
    ]
    exprs = {
        "add": "x + y", "sub": "x - y", "mul": "x * y", "div": "x / y",
        "max": "x > y ? x : y", "min": "x < y ? x : y", "axpy": "alpha * x + y", "scale": "alpha * x",
    }
    for op in OPS:
        for suffix, ctype in DTYPES:
            out.append(f"// @BE {op}_{suffix}")
            out.append(f"DEFINE_BINARY({op}, {suffix}, {ctype}, {exprs[op]})")
    out.append("")
    return "\n".join(out)


_CHILD = r"""
import json, sys, time
sys.path.insert(0, {repo!r})
t0 = time.perf_counter()
from kernix import infer_file
r = infer_file({path!r})
dt = time.perf_counter() - t0
assert not r.errors, [str(e) for e in r.errors]
print(json.dumps({{"seconds": dt, "functions": len(r.functions), "clang": "clang.cindex" in sys.modules}}))
"""


def child(path: Path, cache: Path) -> dict:
    env = dict(os.environ, KERNIX_CACHE_DIR=str(cache))
    code = _CHILD.format(repo=str(REPO), path=str(path))
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def measure(src: Path, tmpdir: Path, runs: int, label: str) -> None:
    """Time cold and warm inference of ``src`` and print the medians."""
    n_lines = src.read_text().count("\n")
    # The toolchain memo (compiler answers, precompiled prelude): once per machine, not per file.
    shared = tmpdir / f"shared-{label}"
    first = child(src, shared)

    cold_fresh = []
    for i in range(runs):
        cache = tmpdir / f"cold-{label}{i}"
        # copy only the toolchain memo, not the specs: the spec cache is empty
        (cache / "toolchain").mkdir(parents=True)
        for f in (shared / "toolchain").glob("*"):
            if f.is_file():
                (cache / "toolchain" / f.name).write_bytes(f.read_bytes())
        info = child(src, cache)
        cold_fresh.append(info["seconds"])
    warm_fresh = [child(src, shared) for _ in range(runs)]
    assert not any(w["clang"] for w in warm_fresh), "warm path imported libclang"

    os.environ["KERNIX_CACHE_DIR"] = str(shared)
    from kernix import infer_file

    r = infer_file(src, use_cache=False)
    cold_inproc = []
    for _ in range(runs):
        t = time.perf_counter()
        infer_file(src, use_cache=False)
        cold_inproc.append(time.perf_counter() - t)
    warm_inproc = []
    for _ in range(runs * 5):
        t = time.perf_counter()
        infer_file(src)
        warm_inproc.append(time.perf_counter() - t)

    ms = lambda xs: f"{statistics.median(xs) * 1000:7.1f} ms"  # noqa: E731
    print(f"file: {src.name}, {n_lines} lines, {len(r.functions)} macro-generated entry points, "
          f"includes {label} ({len(r.dependencies)} headers read)")
    print(f"first ever (empty cache, toolchain memo built):      {ms([first['seconds']])}")
    print(f"cold, fresh process (libclang load + parse + store): {ms(cold_fresh)}  (median of {runs})")
    print(f"cold, in process (parse + infer, libclang loaded):   {ms(cold_inproc)}  (median of {runs})")
    print(f"warm, fresh process (cache hit, no libclang import): {ms([w['seconds'] for w in warm_fresh])}  (median of {runs})")
    print(f"warm, in process (cache hit):                        {ms(warm_inproc)}  (median of {runs * 5})")


def _median_time(call, runs: int) -> float:
    """Median seconds of ``runs`` calls."""
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def corpus(directory: Path, include_dirs: list[str], runs: int) -> None:
    """Per-file inference over a directory of real CUDA files (e.g. the
    brainevent package's 61 kernels, fetched by bench/bench_corpus.py), in
    this process: cold (parse + infer; the toolchain memo and precompiled
    preludes exist, as after any first use) and warm (spec-cache hit), then
    ``kernix inspect DIR`` as a whole (parallel parses), cold and warm."""
    from kernix import infer_file

    files = sorted(p for p in directory.rglob("*.cu") if "// @BE" in p.read_text(errors="replace"))
    opts = {"language": "cuda", "include_dirs": include_dirs}
    with tempfile.TemporaryDirectory() as cache:
        for f in files:  # the one-off work: libclang load, compiler answers, precompiled preludes
            infer_file(f, use_cache=False, **opts)
        cold: list[float] = []
        warm: list[float] = []
        for f in files:
            cold.append(_median_time(lambda: infer_file(f, use_cache=False, **opts), runs))
            infer_file(f, cache_dir=cache, **opts)
            warm.append(_median_time(lambda: infer_file(f, cache_dir=cache, **opts), runs))
    print(f"\n== corpus: {len(files)} files under {directory}")
    print(f"cold, in process: median {statistics.median(cold) * 1e3:.1f} ms a file "
          f"(max {max(cold) * 1e3:.0f} ms, total {sum(cold):.2f} s)")
    print(f"warm, in process: median {statistics.median(warm) * 1e3:.2f} ms a file (max {max(warm) * 1e3:.1f} ms)")
    inc = [a for d in include_dirs for a in ("-I", d)]
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, KERNIX_CACHE_DIR=cache)
        for label in ("cold (empty spec cache)", "warm"):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "kernix", "inspect", *inc, str(directory)], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            print(f"kernix inspect DIR, {label}: {time.perf_counter() - t0:.2f} s for {len(files)} files "
                  f"({os.cpu_count()} CPUs)")
    cli_start_up(files[0], inc, runs)


def cli_start_up(path: Path, inc: list[str], runs: int) -> None:
    """Warm ``kernix inspect FILE`` in fresh processes against a bare
    ``python -c pass``, alternating; bytecode caching on in the children, as
    for an installed package.  Also timed: what the two ways of starting a
    command cost before kernix runs (``python -m`` on an empty module: runpy;
    ``python -c "import re"``: what the ``kernix`` entry point an installer
    writes imports first), the command started without either (``python -c``
    calling ``kernix.cli.main``: kernix's own share), and the ``kernix``
    command beside this Python, when there is one."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    argv = ["inspect", *inc, str(path)]
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as empty:
        env["KERNIX_CACHE_DIR"] = cache
        Path(empty, "kernix_bench_empty.py").write_text("")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [empty, env.get("PYTHONPATH")]))
        commands = {
            "`python -c pass`": [sys.executable, "-c", "pass"],
            "`python -m EMPTY_MODULE`": [sys.executable, "-m", "kernix_bench_empty"],
            "`python -c 'import re'`": [sys.executable, "-c", "import re"],
            "warm `kernix inspect FILE`": [sys.executable, "-m", "kernix", *argv],
            "warm `main([...])` alone": [sys.executable, "-c", f"from kernix.cli import main; main({argv!r})"],
        }
        script = Path(sys.executable).with_name("kernix")
        if script.is_file():
            commands["warm `kernix` command"] = [str(script), "inspect", *inc, str(path)]
        subprocess.run(commands["warm `kernix inspect FILE`"], env=env, stdout=subprocess.DEVNULL, check=True)
        times: dict[str, list[float]] = {label: [] for label in commands}
        for _ in range(max(runs, 15)):
            for label, command in commands.items():
                t0 = time.perf_counter()
                subprocess.run(command, env=env, stdout=subprocess.DEVNULL, check=True)
                times[label].append(time.perf_counter() - t0)
        in_process = subprocess.run([sys.executable, "-c", IN_PROCESS, json.dumps(argv),
                                     str(max(runs, 15))], env=env, capture_output=True, text=True, check=True)
    medians = {label: statistics.median(t) * 1e3 for label, t in times.items()}
    bare = medians["`python -c pass`"]
    print(f"CLI start-up (median of {len(times['`python -c pass`'])}, {path.name}):")
    for label, ms in medians.items():
        print(f"  {label:28}{ms:7.1f} ms  ({ms - bare:+.1f} ms)")
    print(f"  warm `main(['inspect', FILE])` in one process: {float(in_process.stdout) * 1e3:.2f} ms")


# The command's own work, without the interpreter's start-up: main() called
# again and again in one process (after one call that imports what it needs).
IN_PROCESS = """
import contextlib, io, json, statistics, sys, time
from kernix.cli import main
argv, runs = json.loads(sys.argv[1]), int(sys.argv[2])
times = []
for _ in range(runs + 1):
    with contextlib.redirect_stdout(io.StringIO()):
        t0 = time.perf_counter()
        main(argv)
        times.append(time.perf_counter() - t0)
print(statistics.median(times[1:]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--corpus", type=Path, help="also a directory of real annotated .cu files")
    parser.add_argument("--cli", type=Path, metavar="FILE", help="only the CLI's start-up on this file")
    parser.add_argument("-I", dest="include_dirs", action="append", default=[], help="for --corpus and --cli")
    args = parser.parse_args()
    print(f"cpu count: {os.cpu_count()}, python {sys.version.split()[0]}")
    if args.cli:
        cli_start_up(args.cli, [a for d in args.include_dirs for a in ("-I", d)], args.runs)
        return
    if args.corpus:
        corpus(args.corpus, args.include_dirs, args.runs)
        return
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        for cub, label, name in ((False, "cuda_runtime.h", "ops.cu"), (True, "cub/cub.cuh", "ops_cub.cu")):
            src = tmpdir / name
            src.write_text(make_source(cub))
            measure(src, tmpdir, args.runs, label)


if __name__ == "__main__":
    main()
