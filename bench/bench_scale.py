"""Build cost as modules grow: time and compiler memory for 1 to 5,000 functions.

For C++ modules of N macro-generated functions (the module of
``bench_build.py``), spread over ``--files`` source files, builds each cold
(fresh cache, new process) and prints the wall time of the build beside its
floor, and the peak resident memory of the largest handler-unit compiler
process, of the largest shim-unit compiler process and of the link, with the
number of handler units.

The floor is what no build of the module can go under: the user's source
files compiled on their own (the largest file, with the same compiler and
flags as the build's shim units), since kernix never splits a file the user
wrote.  A shim unit is that file plus one shim per function, so
``shim unit / file alone`` is what kernix adds to the critical path.

``--workers 1,4,16`` builds each size with each number of ninja workers and
prints the speed-up over the first: how the build scales with cores.
``--compare DIR`` measures another checkout of kernix (e.g. an older commit
unpacked with ``git archive``) in the same run, size by size.

Every compiler process runs under ``/usr/bin/time -f %M`` (through a ``$CXX``
wrapper), whose figure covers the driver and the compiler proper
(``cc1plus``) it waits for.

Usage::

    python bench/bench_scale.py [--sizes 1,40,500,5000] [--files 1] [--workers N[,N...]]
                                [--repeat 1] [--compare DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_build import cpp_source  # noqa: E402

CHILD = """
import sys, time, json
sys.path.insert(0, {root!r})
import kernix
t0 = time.perf_counter()
mod = kernix.load_cpp_dir({src!r}, name={name!r}, build_directory={cache!r}, auto_register=False,
                          ninja_workers={workers!r})
print(json.dumps(time.perf_counter() - t0))
"""


def wrapper(workdir: Path, log: Path) -> Path:
    """A $CXX that runs the real compiler under /usr/bin/time, appending to ``log``."""
    real = shutil.which(os.environ.get("CXX", "g++")) or "g++"
    path = workdir / "g++"  # named like the compiler, so that it is taken for one
    path.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        exec /usr/bin/time -a -o {shlex.quote(str(log))} -f '%M %e %C' {shlex.quote(real)} "$@"
        """))
    path.chmod(0o755)
    return path


def write_sources(directory: Path, n: int, files: int) -> list[Path]:
    """``n`` functions over ``files`` source files (as even as can be)."""
    directory.mkdir()
    paths, first = [], 0
    for k in range(files):
        count = n // files + (k < n % files)
        if count:
            path = directory / f"part_{k}.cpp"
            path.write_text(cpp_source(count, first=first))
            paths.append(path)
            first += count
    return paths


def user_rule(build_dir: Path) -> list[str]:
    """The shim units' compile command of a finished build, without its inputs and outputs."""
    text = (build_dir / "build.ninja").read_text()
    line = text.split("rule user_cc\n", 1)[1].split("\n", 1)[0]
    command = shlex.split(line.split("command = ", 1)[1].replace("$$", "$"))
    return command[: command.index("-MD")]


def floor_seconds(command: list[str], sources: list[Path], out: Path) -> float:
    """Wall time of the largest source compiled alone with ``command``."""
    largest = max(sources, key=lambda p: p.stat().st_size)
    t0 = time.perf_counter()
    subprocess.run([*command, "-c", str(largest), "-o", str(out)], check=True)
    return time.perf_counter() - t0


def build_once(n: int, files: int, workers: int, root: Path, workdir: Path) -> dict:
    run = Path(tempfile.mkdtemp(dir=workdir))
    log = run / "time.log"
    cxx = wrapper(run, log)
    sources = write_sources(run / "src", n, files)
    name = f"scale_{n}"
    cache = run / "cache"
    code = CHILD.format(root=str(root), src=str(run / "src"), name=name, cache=str(cache), workers=workers)
    env = {**os.environ, "CXX": str(cxx)}  # the child puts ``root`` first on its path
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"build of {n} functions failed:\n{out.stderr[-3000:]}")
    wall = json.loads(out.stdout.strip().splitlines()[-1])
    peaks = {"handler": 0, "shim": 0, "link": 0}
    secs = {"handler": 0.0, "shim": 0.0, "link": 0.0}
    units = 0
    for line in log.read_text().splitlines():
        parts = line.split(" ", 2)
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        kb, sec, cmd = int(parts[0]), float(parts[1]), parts[2]
        if " -shared" in cmd:
            kind = "link"
        elif "handlers_" in cmd and " -c " in cmd:
            kind = "handler"
            units += 1
        elif "shim_" in cmd and " -c " in cmd:
            kind = "shim"
        else:
            continue  # the toolchain probes kernix runs once per compiler
        peaks[kind] = max(peaks[kind], kb)
        secs[kind] = max(secs[kind], sec)
    floor = floor_seconds(user_rule(cache / "build" / name), sources, run / "floor.o")
    shutil.rmtree(run, ignore_errors=True)
    return {"wall": wall, "floor": floor, "peaks": peaks, "secs": secs, "units": units}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,40,500,5000")
    ap.add_argument("--files", type=int, default=1, help="source files the functions are spread over")
    ap.add_argument("--workers", default=str(os.cpu_count() or 1), help="ninja workers, one or a list")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--compare", help="another kernix checkout, measured in the same run")
    args = ap.parse_args()
    roots = {"kernix": HERE.parent}
    if args.compare:
        roots["compare"] = Path(args.compare).resolve()
    workers = [int(w) for w in args.workers.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="kernix-scale-"))
    print(f"{os.cpu_count()} CPUs, {args.files} source file(s), median of {args.repeat}; "
          + ", ".join(f"{k}: {v}" for k, v in roots.items()))
    print(f"{'functions':>9} {'code':>8}{'workers':>8}{'build':>9}{'speed-up':>9}{'file alone':>11}{'ratio':>7}"
          f"{'handler units':>14}{'handler cc':>11}{'handler RSS':>12}{'shim cc':>9}{'shim RSS':>9}{'link RSS':>9}")
    for n in (int(s) for s in args.sizes.split(",")):
        for label, root in roots.items():
            first = None
            for w in workers:
                runs = [build_once(n, args.files, w, root, workdir) for _ in range(args.repeat)]

                def med(get):
                    return statistics.median(get(r) for r in runs)

                wall, floor = med(lambda r: r["wall"]), med(lambda r: r["floor"])
                first = first or wall
                print(f"{n:>9} {label:>8}{w:>8}{wall:>8.2f}s{first / wall:>8.2f}x{floor:>10.2f}s{wall / floor:>7.2f}"
                      f"{med(lambda r: r['units']):>14.0f}{med(lambda r: r['secs']['handler']):>10.2f}s"
                      f"{med(lambda r: r['peaks']['handler']) / 1024:>9.0f} MB"
                      f"{med(lambda r: r['secs']['shim']):>8.2f}s{med(lambda r: r['peaks']['shim']) / 1024:>6.0f} MB"
                      f"{med(lambda r: r['peaks']['link']) / 1024:>6.0f} MB", flush=True)
    shutil.rmtree(workdir, ignore_errors=True)
    print(f"\ncommand: {shlex.join([sys.executable, *sys.argv])}")


if __name__ == "__main__":
    main()
