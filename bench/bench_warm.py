"""Warm start: what ``import kernix`` plus loading a cached module costs in a
fresh process, over ``import jax`` alone.

Builds a C++ module (with ``--cuda``, a CUDA module) of ``--functions``
macro-generated entry points once (per checkout), then runs, ``--repeat``
rounds, one fresh process of each row:

* ``import jax, jax.numpy``                                   (the reference)
* ``import jax, jax.numpy; import kernix; kernix.load_cpp_inline(...)``
* the same with the checkout given by ``--compare`` (e.g. an older kernix),
  when given, and then the median of their round-by-round differences

Each round starts one row later than the one before, so that every row
takes every place in a round equally often when ``--repeat`` is a multiple
of the number of rows (2, or 3 with ``--compare``): on some machines a
process started right after another one is measurably slower or faster,
which a fixed order would charge to one row.

With ``--cuda`` the module is a CUDA one: its load asks the driver, not
JAX, for the GPU's architecture (remembered per driver and GPUs), so no row
starts JAX's backend; each process says whether its backend was started by
the time the load returned (the table's "backend" column: in how many
processes), and the architecture's look-up is timed on its own, each way
(NVML, the CUDA driver API, and the remembered answer), in fresh processes.

It prints the medians of the whole process' wall time and of the part
after ``import jax`` (import kernix + the load call), side by side, and how
much of that part the garbage collector took: a collection that falls in it
traverses the process' young objects, most of them left by ``import jax``,
so whether one falls there depends on where the
interpreter's allocation counters stood when kernix started.

The children run with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` is
removed from their environment), as for an installed package, whose ``.pyc``
files pip writes at install time: without it every start compiles each
module from source, which times the interpreter's compiler, not kernix.

Usage::

    python bench/bench_warm.py [--functions 40] [--repeat 21] [--cuda] [--compare /path/to/other/checkout] [--phases]
                               [--modules]

The table's last column, "exit", is the time from each process' last
statement to its parent seeing it exit (jax shutting down, and anything a
load left for the interpreter's exit).

``--phases`` also times each step of the warm load (imports, request, inline
source, fingerprint, direct + entry look-up, dlopen, registration) in fresh
processes, and splits the imports step: its floor (as many empty modules,
imported the same way: the import machinery) and its code (the same modules'
code run from one file, without the import machinery), and times a fixed
piece of pure-Python work (no kernix) in fresh processes: the machine's
Python speed, to set figures taken on different machines side by side (the
median process and the fastest one: far apart, the machine is noisy).

``--modules`` times each kernix module a warm load imports, imported alone
in the order the load completed them, with the garbage collector on and off
(where the one collection that falls in the load lands).
"""

from __future__ import annotations

import argparse
import json
import marshal
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_build import cpp_source, cuda_source  # noqa: E402

CHILD = """
import sys, time, json, gc
t0 = time.perf_counter()
import jax, jax.numpy
from jax._src import xla_bridge
collecting = []
def collector(phase, info):
    collecting.append(time.perf_counter())
gc.callbacks.append(collector)
t1 = time.perf_counter()
if {root!r}:
    sys.path.insert(0, {root!r})
    import kernix
    load = kernix.load_cuda_inline if {cuda!r} else kernix.load_cpp_inline
    load({name!r}, {src!r}, build_directory={cache!r})  # registered, as by default
t2 = time.perf_counter()
gc.callbacks.remove(collector)
started = xla_bridge.backends_are_initialized()
print(json.dumps([t2 - t0, t2 - t1, sum(collecting[1::2]) - sum(collecting[0::2]), started, time.perf_counter()]))
"""


CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run(root: str, name: str, src: str, cache: str, cuda: bool) -> tuple[float, float, float, float, bool]:
    """(wall time after interpreter start, time after ``import jax``, of which
    in the garbage collector, from the child's last statement until this
    process sees it exit, whether JAX's backend was started) of one fresh
    process (``time.perf_counter`` is one clock for all processes of the machine)."""
    total, after, collector, started, last = _child(CHILD.format(root=root, name=name, src=src, cache=cache,
                                                                 cuda=cuda))
    return total, after, collector, time.perf_counter() - last, started


# --phases: the warm load's steps, timed one by one in a fresh process (kernix's
# own modules, not the public API: what a load call does, in order).
PHASES = """
import sys, time, json
import jax, jax.numpy
T = time.perf_counter
t = [T()]
sys.path.insert(0, {root!r})
{imports}
t.append(T())
lang, ext, options = ("cuda", "cu", loaders._CUDA_OPTIONS) if {cuda!r} else ("cpp", "cpp", loaders._CPP_OPTIONS)
req = make_request({name!r}, [], lang, None, {{**options, "build_directory": {cache!r}}}); t.append(T())
req = req.replace(sources=(files.write_source(req.root, {name!r}, {src!r}, ext),)); t.append(T())
fp = pipeline.fingerprint(req); t.append(T())
m = pipeline._direct_hit(req, fp); t.append(T())
registry.load_library(m.so_path); t.append(T())
CompiledModule({name!r}, m.so_path, m.platform, m.specs, m.handlers, m.so_sha256).register(); t.append(T())
modules = sum(1 for m in sys.modules if m == "kernix" or m.startswith("kernix."))
print(json.dumps([[b - a for a, b in zip(t, t[1:])], modules]))
"""

# The imports step: the modules a warm load imports before it runs (through the
# public entry, as a load does; the loaders by name too, for -X importtime to see them).
IMPORTS = """import kernix
import kernix.loaders
kernix.load_cpp_inline
from kernix import loaders, pipeline
from kernix.request import make_request
from kernix.runtime import registry
from kernix.runtime.module import CompiledModule
from kernix.store import files"""

# The same modules' code, read from one file and run in the order their imports
# completed, without the import machinery: what the imports step would cost if
# the warm path were one module.
ONE_FILE = """
import sys, time, json, marshal, types
import jax, jax.numpy
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
modules = marshal.loads(open({blob!r}, "rb").read())
for name, origin, is_package, code in modules:  # (a package completes after its first modules: all made first)
    module = sys.modules[name] = types.ModuleType(name)
    module.__file__ = origin
    module.__package__ = name if is_package else name.rpartition(".")[0]
    if is_package:
        module.__path__ = [origin.rpartition("/")[0]]
for name, origin, is_package, code in modules:
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, sys.modules[name])
for name, origin, is_package, code in modules:
    exec(marshal.loads(code), sys.modules[name].__dict__)
print(json.dumps(time.perf_counter() - t0))
"""

# The floor of the imports step: as many empty modules of one package, imported
# the same way (after import jax, bytecode cached).
EMPTY = """
import sys, time, json
import jax, jax.numpy
sys.path.insert(0, {where!r})
t0 = time.perf_counter()
import empty_pkg
for i in range({n} - 1):
    __import__(f"empty_pkg.m{{i}}")
print(json.dumps(time.perf_counter() - t0))
"""
# The machine's Python speed, for comparing figures taken on different
# machines: a fixed piece of work (no kernix), timed in a fresh process after
# import jax, and again after jax.devices() with --cuda (WORK is bench_noise.py's too).
WORK = r"""
import marshal, time
code = marshal.dumps(compile("".join(f"def f{i}(a, b=1):\n    'doc {i}'\n    return [a, b, {i}]\n"
                                     for i in range(300)), "speed", "exec"))
def work():
    t = time.perf_counter()
    for _ in range(5):
        exec(marshal.loads(code), {})
    x = 0
    for i in range(20000):
        x += i
    return time.perf_counter() - t
"""
SPEED = """
import json, statistics
import jax, jax.numpy
before = statistics.median(work() for _ in range(15))
if {cuda!r}:
    jax.devices()
print(json.dumps([before, statistics.median(work() for _ in range(15))]))
"""
# --modules: each module a warm load imports, imported alone in the order the
# warm load completed them (so each one's own imports are done before it), with
# the collector on and off.
MODULES = """
import sys, time, json, gc
import jax, jax.numpy
sys.path.insert(0, {root!r})
if {no_gc!r}:
    gc.disable()
T = time.perf_counter
times = []
for name in {names!r}:
    t = T()
    __import__(name)
    times.append(T() - t)
print(json.dumps(times))
"""
PHASE_NAMES = ("imports", "request", "inline source", "fingerprint", "direct + entry look-up", "dlopen",
               "module + register")


def phases(root: str, name: str, src: str, cache: str, cuda: bool, repeat: int) -> None:
    """Print the median time of each step of a warm load (fresh processes)."""
    code = PHASES.format(root=root, name=name, src=src, cache=cache, cuda=cuda, imports=IMPORTS)
    rows = [_child(code) for _ in range(repeat)]
    modules = rows[0][1]
    print(f"\nwarm load step by step (median of {repeat} fresh processes, after import jax):")
    for i, label in enumerate(PHASE_NAMES):
        print(f"  {label:26}{statistics.median(r[0][i] for r in rows) * 1e3:8.2f} ms")
    with tempfile.TemporaryDirectory() as where:
        package = Path(where, "empty_pkg")
        package.mkdir()
        for i in range(modules - 1):
            (package / f"m{i}.py").write_text("from __future__ import annotations\n")
        (package / "__init__.py").write_text("")
        code = EMPTY.format(where=where, n=modules, cuda=cuda)
        _child(code)  # writes their .pyc files
        empty = statistics.median(_child(code) for _ in range(repeat))
        blob = Path(where, "one_file.bin")
        blob.write_bytes(marshal.dumps(_one_file(root)))
        code = ONE_FILE.format(root=root, blob=str(blob), cuda=cuda)
        one_file = statistics.median(_child(code) for _ in range(repeat))
    print(f"  (the imports step's floor: {modules} empty modules of one package, imported the same way:"
          f" {empty * 1e3:.2f} ms;\n   the step's own modules, their code run from one file without the import"
          f" machinery: {one_file * 1e3:.2f} ms)")
    speed = [_child(WORK + SPEED.format(cuda=cuda)) for _ in range(repeat)]
    before, after = (statistics.median(r[i] for r in speed) for i in (0, 1))
    fastest = min(r[0] for r in speed)
    print(f"  (this machine's Python: a fixed piece of work -- unmarshal and run 300 small functions' definitions 5"
          f" times, 20,000 additions -- takes {before * 1e3:.2f} ms"
          + (f", {after * 1e3:.2f} ms after jax.devices()" if cuda else "")
          + f"; {fastest * 1e3:.2f} ms in the fastest process: the gap is the machine's noise)")


# --cuda: the GPU architecture's look-up, each way, in a fresh process after import jax.
ARCH = """
import sys, time, json
import jax
sys.path.insert(0, {root!r})
from kernix.backend import gpus
t = time.perf_counter()
found = {{"nvml": gpus._nvml, "cuda": gpus._cuda_driver, "memo": lambda: gpus.survey({cache!r})}}[{way!r}]()
took = time.perf_counter() - t
found = found if isinstance(found, str) else [list(g)[:2] for g in getattr(found, "gpus", found)]
print(json.dumps([took, found]))
"""


def arch_lookup(root: str, cache: str, repeat: int) -> None:
    """Print the median time of each way of finding the GPUs' architectures
    (fresh processes), and what each found."""
    print(f"\nthe GPU architecture's look-up, each way (median of {repeat} fresh processes, after import jax):")
    for way, label in (("nvml", "NVML"), ("cuda", "CUDA driver API (cuInit)"), ("memo", "the remembered answer")):
        rows = [_child(ARCH.format(root=root, cache=cache, way=way)) for _ in range(repeat)]
        print(f"  {label:28}{statistics.median(r[0] for r in rows) * 1e3:9.3f} ms   {rows[0][1]}")


def modules(root: str, name: str, src: str, cache: str, cuda: bool, repeat: int) -> None:
    """Print the median import time of each module a warm load imports (fresh
    processes after ``import jax``), with the garbage collector on and off."""
    # (an import statement naming the loaders: -X importtime sees neither kernix.__getattr__'s
    # import_module nor a from-import's submodule)
    names = _kernix_imports(f"import sys\nsys.path.insert(0, {root!r})\nimport kernix.loaders as loaders\n"
                            f"(loaders.load_cuda_inline if {cuda!r} else loaders.load_cpp_inline)"
                            f"({name!r}, {src!r}, build_directory={cache!r})")
    rows = {no_gc: [_child(MODULES.format(root=root, cuda=cuda, names=names, no_gc=no_gc)) for _ in range(repeat)]
            for no_gc in (False, True)}
    print(f"\neach module a warm load imports, imported alone in that order (median of {repeat} fresh processes):")
    print(f"  {'':32}{'gc on':>10}{'gc off':>10}")
    for i, module in enumerate(names):
        on, off = (statistics.median(r[i] for r in rows[no_gc]) for no_gc in (False, True))
        print(f"  {module:32}{on * 1e3:7.3f} ms{off * 1e3:7.3f} ms")
    on, off = (statistics.median(sum(r) for r in rows[no_gc]) for no_gc in (False, True))
    print(f"  {'in all':32}{on * 1e3:7.3f} ms{off * 1e3:7.3f} ms")


def _kernix_imports(code: str) -> list[str]:
    """The kernix modules a fresh process running ``code`` imports, in the
    order their imports completed (``python -X importtime``)."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", code], check=True, capture_output=True,
                         text=True, env=CHILD_ENV).stderr
    names = [line.rsplit("|", 1)[1].strip() for line in err.splitlines() if line.startswith("import time:")]
    return [n for n in names if n == "kernix" or n.startswith("kernix.")]


def _one_file(root: str) -> list[tuple[str, str, bool, bytes]]:
    """(name, file, is a package, marshalled code) of each kernix module the
    imports step imports, in the order the imports completed."""
    out = []
    for name in _kernix_imports(f"import sys\nsys.path.insert(0, {root!r})\n" + IMPORTS):
        path = Path(root, *name.split("."))
        is_package = path.is_dir()
        origin = str(path / "__init__.py" if is_package else path.with_suffix(".py"))
        code = compile(Path(origin).read_text(), origin, "exec")
        out.append((name, origin, is_package, marshal.dumps(code)))
    return out


def _child(code: str) -> Any:
    """What a fresh process running ``code`` prints last, as JSON."""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=CHILD_ENV)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--functions", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--compare", default=None, help="another kernix checkout to time the same way")
    ap.add_argument("--phases", action="store_true", help="also time each step of the warm load")
    ap.add_argument("--modules", action="store_true", help="also time each module the warm load imports")
    ap.add_argument("--cuda", action="store_true", help="a CUDA module (needs nvcc and a GPU)")
    args = ap.parse_args()
    src = (cuda_source if args.cuda else cpp_source)(args.functions)
    roots = {"kernix": str(HERE.parent)}
    if args.compare:
        roots["compare"] = str(Path(args.compare).resolve())
    with tempfile.TemporaryDirectory(prefix="kernix-warm-") as tmp:  # (the caches: removed at the end)
        work = Path(tmp)
        name = f"warm_{'cuda_' if args.cuda else ''}{args.functions}"
        caches = {}
        for label, root in roots.items():
            caches[label] = str(work / label)
            t0 = time.perf_counter()
            run(root, name, src, caches[label], args.cuda)  # builds, and writes .pyc files
            print(f"built {label} ({root}) in {time.perf_counter() - t0:.1f} s")
            run(root, name, src, caches[label], args.cuda)
        reference = "import jax"
        # (label, root, cache) of each row
        rows = [(reference, "", ""), *((label, root, caches[label]) for label, root in roots.items())]
        samples: dict[str, list[tuple[float, float, float, float, bool]]] = {row[0]: [] for row in rows}
        for i in range(args.repeat):
            # each round starts one row later: every row takes every place in a round equally often (when
            # --repeat is a multiple of the number of rows), so none is always the one after another
            for label, root, cache in rows[i % len(rows):] + rows[:i % len(rows)]:
                samples[label].append(run(root, name, src, cache, args.cuda))
        print(f"\n{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
              f"{args.functions} {'CUDA' if args.cuda else 'C++'} functions, median of {args.repeat} fresh processes")
        base = statistics.median(row[0] for row in samples[reference])
        print(f"{'':28}{'whole process':>16}{'after import jax':>20}{'of which in gc':>18}{'over import jax':>18}"
              f"{'exit':>14}{'backend':>10}")
        for label, timings in samples.items():
            total, after, collector, exit_ = (statistics.median(t[i] for t in timings) for i in range(4))
            started = sum(t[4] for t in timings)
            print(f"{label:28}{total * 1e3:13.1f} ms{after * 1e3:17.2f} ms{collector * 1e3:15.2f} ms"
                  f"{(total - base) * 1e3:15.2f} ms{exit_ * 1e3:11.1f} ms{started:>6}/{len(timings)}")
        print("(backend: in how many processes JAX's backend had been started when the load returned)")
        if args.cuda:
            arch_lookup(roots["kernix"], caches["kernix"], args.repeat)
        if args.compare:
            paired(samples["kernix"], samples["compare"], "kernix - compare")
        if args.phases:
            phases(roots["kernix"], name, src, caches["kernix"], args.cuda, args.repeat)
        if args.modules:
            modules(roots["kernix"], name, src, caches["kernix"], args.cuda, args.repeat)


def paired(ours: list[tuple[float, ...]], theirs: list[tuple[float, ...]], label: str) -> None:
    """Print the median and quartiles of the per-round difference after ``import jax``.

    The two rows run in the same round, so a machine
    whose speed drifts over minutes moves both; the median of the differences
    is steadier than the difference of the medians."""
    diffs = [a[1] - b[1] for a, b in zip(ours, theirs)]
    q1, q2, q3 = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else (diffs[0],) * 3
    print(f"{label}, round by round (after import jax): median {q2 * 1e3:+.2f} ms,"
          f" quartiles {q1 * 1e3:+.2f} .. {q3 * 1e3:+.2f} ms")


if __name__ == "__main__":
    main()
