"""The edit loop against its floor: a kernel body edited, the module rebuilt.

In one run, round by round (each round in a rotated order), for a module of
``--functions`` functions in one source file (C++, or CUDA with ``--cuda``):

* the floor: the user's file alone compiled with kernix's own compile command
  for it (``g++ -std=c++17 -O3 -fPIC ... -I kernix/include -isystem <jaxlib
  FFI include> -c FILE``; ``nvcc ... -c FILE`` for CUDA);
* the floor of any build a process can load: that compile, then kernix's link
  command of its object (with the object of kernix's messages, which the
  file's calls of ``kernix/common.h`` need) into a shared library;
* kernix's rebuild after one kernel body is edited (the signature unchanged),
  in a fresh process as a user's ``python script.py`` runs it (``import jax``
  excluded; ``import kernix`` and the load, registration included), and in
  a process kept running that loaded the previous version;
* what the fresh process's load spent its time on, step by step: its own
  imports, the cache key and look-ups, inference (and libclang's parse within
  it), code generation, ninja (each unit's compile and the link, from ninja's
  log, and ninja itself), what follows the build (dependency versions, the
  cache entry, the direct index), ``dlopen`` and registration, and the rest
  of kernix's Python; for each step, the part of it that ran beside one of
  ninja's compiles or its link (off the critical path), and the time from
  the load's start to the user unit's compile and from the link's end to
  the load's return.

Each step's figure is its own time (nested steps are taken out of the step
around them); medians over ``--repeat`` rounds, with the lowest and highest.

Usage::

    python bench/bench_edit.py [--repeat 15] [--functions 1] [--cuda] [--cuda-arch sm_90] [--compare DIR]

``--compare DIR`` times the kernix of another checkout in the same rounds
(each with its own source file and cache), so that two versions are compared
under the same load of the machine.

Every load's time is the wall-clock time of the call; on a shared machine
other processes take the cores now and then, so read the spread.
"""

from __future__ import annotations

import argparse
import importlib.abc
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# Where each step is timed: module -> [(object path, step)].  A step nested in
# another (libclang's parse in inference) is taken out of the outer one.
PROBES: dict[str, list[tuple[str, str]]] = {
    "kernix.pipeline": [("fingerprint", "key and look-ups")],
    "kernix.compilation": [("build_config", "key and look-ups"), ("cache_key", "key and look-ups"),
                           ("exported_units", "inference")],
    "kernix.store.entries": [("lookup", "key and look-ups"), ("publish", "after the build: entry, index")],
    "kernix.store.direct": [("lookup", "key and look-ups"), ("record", "after the build: entry, index")],
    "kernix.frontend.infer": [("parse", "inference: libclang's parse")],
    "kernix.backend.codegen": [("shim_unit", "code generation"), ("handler_unit", "code generation"),
                               ("messages_unit", "code generation")],
    "kernix.backend.ninja": [("_ninja_file", "code generation"), 
                             ("read_depfile", "after the build: versions")],
    "kernix.store.files": [("settled_versions", "after the build: versions")],
    "kernix.store.workdir": [("record_inputs", "after the build: versions")],
    "kernix.store.prune": [("after_publish", "after the build: entry, index")],
    "kernix.runtime.registry": [("open_library", "dlopen and registration")],
    "kernix.runtime.module": [("CompiledModule.register", "dlopen and registration")],
}
IMPORTS = "imports (miss path, libclang)"
OTHER = "kernix's other Python"
BEFORE = "so: the load's start to the user unit's compile"
AFTER = "so: the end of the link to the load's return"
NINJA_EDGES = ("ninja: user unit", "ninja: handler units", "ninja: messages unit", "ninja: link", "ninja itself")


class Timeline:
    """Spans ``(step, thread, start, end)`` in seconds from :attr:`t0`."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.spans: list[tuple[str, int, float, float]] = []
        self.main = threading.get_ident()

    def span(self, step: str, start: float, end: float) -> None:
        self.spans.append((step, threading.get_ident(), start - self.t0, end - self.t0))

    def timed(self, fn: Callable[..., Any], step: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.span(step, start, time.perf_counter())
        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        return timed


def _patch(module: Any, timeline: Timeline) -> None:
    for path, step in PROBES.get(module.__name__, []):
        *owners, attr = path.split(".")
        owner = module
        for o in owners:
            owner = getattr(owner, o)
        if attr in vars(owner):
            setattr(owner, attr, timeline.timed(getattr(owner, attr), step))
    if module.__name__ == "kernix.backend.ninja":
        run = module.run_ninja

        def run_ninja(cmd: list[str], *args: Any) -> Any:  # the edges of this run, from ninja's log
            log = Path(cmd[cmd.index("-C") + 1]) / ".ninja_log"
            size = log.stat().st_size if log.exists() else 0
            start = time.perf_counter()
            out = run(cmd, *args)
            timeline.span("ninja itself", start, time.perf_counter())  # (what its edges leave)
            with open(log, "rb") as f:
                f.seek(size)
                for line in f.read().decode().splitlines():
                    if line.startswith("#"):
                        continue
                    begin, end, _, target, _ = line.split("\t")
                    step = ("ninja: link" if target.endswith(".so") else "ninja: handler units"
                            if target.startswith("handlers_") else "ninja: messages unit"
                            if target.startswith("messages") else "ninja: user unit")
                    timeline.span(step, start + int(begin) / 1e3, start + int(end) / 1e3)
            return out
        module.run_ninja = run_ninja


class _Probe(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Times the imports of kernix's and libclang's modules, and patches the probed ones once executed."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if not name.startswith(("kernix", "clang")):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                real = spec.loader.exec_module
                timeline = self.timeline

                def exec_module(module: Any, real: Any = real) -> None:
                    start = time.perf_counter()
                    try:
                        real(module)
                    finally:
                        timeline.span(IMPORTS, start, time.perf_counter())
                    _patch(module, timeline)
                spec.loader.exec_module = exec_module
                return spec
            if spec is not None:
                return spec
        return None


def instrument(timeline: Timeline) -> None:
    """Probe every step: modules already imported now, the others as they are imported."""
    for name in PROBES:
        if name in sys.modules:
            _patch(sys.modules[name], timeline)
    sys.meta_path.insert(0, _Probe(timeline))


def own_times(spans: list[tuple[str, int, float, float]], total: float) -> dict[str, list[float]]:
    """``{step: [own time, of which beside the build]}``: each instant of a thread belongs to its
    innermost (latest-started) span there; an instant is *beside the build* when another thread is
    in one of ninja's compiles or its link meanwhile; the instants no thread is in a step are
    :data:`OTHER`."""
    resolution = 5e-5
    n = int(total / resolution) + 1
    owners: dict[int, list[tuple[float, str] | None]] = {}
    for step, thread, start, end in spans:
        if end <= 0:  # (before the load)
            continue
        owner = owners.setdefault(thread, [None] * n)
        for i in range(max(0, int(start / resolution)), min(n, int(end / resolution) + 1)):
            cell = owner[i]
            if cell is None or cell[0] <= start:
                owner[i] = (start, step)
    out: dict[str, list[float]] = {}
    for i in range(n):
        steps = [(t, o[i][1]) for t, o in owners.items() if o[i] is not None]  # type: ignore[index]
        if not steps:
            out.setdefault(OTHER, [0.0, 0.0])[0] += resolution
        for thread, step in steps:
            cell = out.setdefault(step, [0.0, 0.0])
            cell[0] += resolution
            if any(t != thread and s.startswith("ninja: ") for t, s in steps):
                cell[1] += resolution
    compiles = [start for step, _, start, _ in spans if step == "ninja: user unit"]
    links = [end for step, _, _, end in spans if step == "ninja: link"]
    if compiles and links:
        out[BEFORE] = [min(compiles), 0.0]
        out[AFTER] = [total - max(links), 0.0]
    return out


def _source(lang: str, n: int, variant: int) -> str:
    sys.path.insert(0, str(HERE))
    import bench_build

    text = bench_build.cuda_source(n) if lang == "cuda" else bench_build.cpp_source(n)
    return text.replace("v - alpha * OP", f"v - alpha * OP - {variant}")  # a body edit; signatures unchanged


def _load(path: str, lang: str, root: str, arch: str | None) -> Any:
    import kernix

    if lang == "cuda":
        return kernix.load_cuda_file(path, name="edit_bench", build_directory=root, compute_capability=arch)
    return kernix.load_cpp_file(path, name="edit_bench", build_directory=root)


def child(args: argparse.Namespace) -> None:
    """One edit rebuild in this fresh process (its total and steps as JSON on stdout); with
    ``--serve``, one load per line read from stdin, each time printed."""
    import jax  # excluded from the measurement
    import jax.numpy  # noqa: F401

    sys.path.insert(0, args.kernix)
    if args.serve:
        import warnings

        import kernix  # noqa: F401

        warnings.simplefilter("ignore", kernix.ReloadWarning)  # (each version is registered under a name of its own)

        for _ in sys.stdin:
            start = time.perf_counter()
            _load(args.child, args.lang, args.root, args.arch)
            print(json.dumps(time.perf_counter() - start), flush=True)
        return
    timeline = Timeline()
    instrument(timeline)
    start = time.perf_counter()
    import kernix  # noqa: F401, F811
    loaded = time.perf_counter()
    timeline.t0 = loaded
    _load(args.child, args.lang, args.root, args.arch)
    total = time.perf_counter() - loaded
    print(json.dumps({"import kernix": loaded - start, "load": total, "steps": own_times(timeline.spans, total)}))


class Checkout:
    """One kernix checkout measured: its source file, cache, fresh processes and a process kept for
    the same-process rebuilds."""

    def __init__(self, label: str, root: Path, work: Path, lang: str, arch: str | None, source: Callable[[], str],
                 env: dict[str, str]) -> None:
        self.label, self.source, self.env = label, source, env
        work.mkdir()
        self.src = work / f"kernel.{'cu' if lang == 'cuda' else 'cpp'}"
        self.cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(self.src), "--lang", lang,
                    "--root", str(work / "cache"), "--kernix", str(root)] + (["--arch", arch] if arch else [])
        self.steps: list[dict[str, list[float]]] = []
        self.src.write_text(source())
        subprocess.run(self.cmd, check=True, capture_output=True, env=env)  # the first build, and the .pyc files
        self.server = subprocess.Popen(self.cmd + ["--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       text=True, env=env)

    def fresh(self) -> float:
        self.src.write_text(self.source())
        out = subprocess.run(self.cmd, check=True, capture_output=True, text=True, env=self.env)
        found = json.loads(out.stdout.strip().splitlines()[-1])
        self.steps.append({"import kernix": [found["import kernix"], 0.0], **found["steps"]})
        return found["import kernix"] + found["load"]

    def same(self) -> float:
        self.src.write_text(self.source())
        assert self.server.stdin is not None and self.server.stdout is not None
        self.server.stdin.write("load\n")
        self.server.stdin.flush()
        return float(json.loads(self.server.stdout.readline()))

    def close(self) -> None:
        assert self.server.stdin is not None
        self.server.stdin.close()
        self.server.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--functions", type=int, default=1)
    ap.add_argument("--cuda", action="store_true", help="a CUDA module (nvcc -c is the floor)")
    ap.add_argument("--cuda-arch", default=None, help="default: detected, else sm_90")
    ap.add_argument("--compare", metavar="DIR", help="also time the kernix of checkout DIR, in the same rounds")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--kernix", default=str(ROOT), help=argparse.SUPPRESS)
    ap.add_argument("--lang", default="cpp", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--arch", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)

    sys.path.insert(0, str(ROOT))
    import kernix
    from kernix.backend import codegen, toolchain
    from kernix.backend.arch import detect_compute_capability
    from kernix.backend.flags import BuildConfig, compile_flags

    lang = "cuda" if args.cuda else "cpp"
    arch = None
    if args.cuda:
        try:
            arch = detect_compute_capability(args.cuda_arch)
        except kernix.ToolchainError:
            arch = args.cuda_arch or "sm_90"
    work = Path(tempfile.mkdtemp(prefix="kernix-edit-"))
    floor_src = work / f"floor.{'cu' if args.cuda else 'cpp'}"
    flags = compile_flags(BuildConfig("cuda" if args.cuda else "cpu", arch=arch))
    floor_cmd = [*flags["user"], "-c", str(floor_src), "-o", str(work / "floor.o")]
    # The floor of any build a process can load: that object linked into a library with kernix's link
    # command (and its messages' object, which the file's calls of kernix/common.h need).
    (work / "messages.cpp").write_text(codegen.messages_unit())
    subprocess.run([*flags["handlers"], "-c", "messages.cpp", "-o", "messages.o"], cwd=work, check=True)
    link_cmd = [x for a in flags["link"] for x in ([str(work / "floor.o"), str(work / "messages.o")]
                                                   if a == "@IN@" else [a])] + ["-o", str(work / "floor.so")]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as users run: with .pyc
    variants = iter(range(1, 1 << 30))

    def source() -> str:
        return _source(lang, args.functions, next(variants))

    def floor(*then: list[str]) -> float:
        floor_src.write_text(source())
        t0 = time.perf_counter()
        for cmd in (floor_cmd, *then):
            subprocess.run(cmd, check=True, capture_output=True)
        return time.perf_counter() - t0

    print(f"machine: {platform.node()} ({os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}), python {platform.python_version()}, "
          f"jaxlib {toolchain.jaxlib_version()}")
    print(f"compiler: {toolchain.find_host_compiler().identity.splitlines()[1]}")
    print(f"floor: {shlex.join(floor_cmd)}")
    checkouts = [Checkout("kernix", ROOT, work / "this", lang, arch, source, env)]
    if args.compare:
        checkouts.append(Checkout(f"kernix of {args.compare}", Path(args.compare).resolve(), work / "other", lang,
                                  arch, source, env))
    linked = f"{'nvcc' if args.cuda else 'g++'} -c of the file, then kernix's link of it"
    runs: dict[str, Callable[[], float]] = {"floor": floor, linked: lambda: floor(link_cmd)}
    for c in checkouts:
        runs[f"{c.label}, fresh process: import kernix + load"] = c.fresh
        runs[f"{c.label}, same process: load"] = c.same
    rows: dict[str, list[float]] = {name: [] for name in runs}
    order = list(runs)
    for r in range(args.repeat):
        for name in order[r % len(order):] + order[:r % len(order)]:
            rows[name].append(runs[name]())
    for c in checkouts:
        c.close()
    base = statistics.median(rows["floor"])

    def line(label: str, xs: list[float], ratio: bool = True) -> str:
        med = statistics.median(xs)
        text = f"  {label:<52}{med * 1e3:8.1f} ms  ({min(xs) * 1e3:6.1f} to {max(xs) * 1e3:6.1f})"
        return text + (f"  {med / base:5.2f}x floor" if ratio else "")

    print(f"\nedit rebuild of a {args.functions}-function {'CUDA' if args.cuda else 'C++'} module "
          f"(one kernel body edited), median of {args.repeat} rounds (lowest to highest)")
    floor_label = f"floor: {'nvcc' if args.cuda else 'g++'} -c of the user's file alone"
    for name in order:
        print(line(floor_label if name == "floor" else name, rows[name]))
    for c in checkouts:
        print(f"\n{c.label}, the fresh process step by step: each step's own time, and the part of it spent "
              "beside ninja's compiles and link (medians of the rounds)")
        for name in sorted({k for s in c.steps for k in s}, key=_step_order):
            own = [s.get(name, [0.0, 0.0])[0] for s in c.steps]
            beside = statistics.median([s.get(name, [0.0, 0.0])[1] for s in c.steps])
            print(line(name, own, ratio=False) + (f"  beside: {beside * 1e3:6.1f} ms" if beside else ""))
    print(f"\ncommand: {shlex.join([sys.executable, *sys.argv])}")


def _step_order(name: str) -> tuple[int, str]:
    order = ["import kernix", IMPORTS, "key and look-ups", "inference", "inference: libclang's parse",
             "code generation", *NINJA_EDGES, "after the build: versions",
             "after the build: entry, index", "dlopen and registration", OTHER, BEFORE, AFTER]
    return (order.index(name) if name in order else len(order), name)


if __name__ == "__main__":
    main()
