"""Build cost as modules grow: time and compiler memory for 1 to 5,000 functions.

For C++ modules of N macro-generated functions (the module of
``bench_build.py``), builds each cold (fresh cache, new process) and prints
the wall time of the build and the peak resident memory of the largest
handler-unit compiler process, of the largest shim-unit compiler process and
of the link, with the number of handler units.  Every compiler process runs
under ``/usr/bin/time -f %M`` (through a ``$CXX`` wrapper), whose figure
covers the driver and the compiler proper (``cc1plus``) it waits for.

Usage::

    python bench/bench_scale.py [--sizes 1,40,500,5000] [--repeat 1] [--kernix-root DIR]

``--kernix-root`` measures another checkout of kernix (e.g. an older commit
unpacked with ``git archive``) with this same script.
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_build import cpp_source  # noqa: E402

CHILD = """
import sys, time, json
sys.path.insert(0, {root!r})
import kernix
src = open({src!r}).read()
t0 = time.perf_counter()
mod = kernix.load_cpp_inline({name!r}, src, build_directory={cache!r}, auto_register=False)
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


def build_once(n: int, root: Path, workdir: Path) -> dict:
    run = Path(tempfile.mkdtemp(dir=workdir))
    log = run / "time.log"
    cxx = wrapper(run, log)
    src = run / "module.cpp"
    src.write_text(cpp_source(n))
    code = CHILD.format(root=str(root), src=str(src), name=f"scale_{n}", cache=str(run / "cache"))
    env = {**os.environ, "CXX": str(cxx)}
    env.pop("PYTHONPATH", None)
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
    shutil.rmtree(run, ignore_errors=True)
    return {"wall": wall, "peaks": peaks, "secs": secs, "units": units}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,40,500,5000")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--kernix-root", default=str(HERE.parent), help="the kernix checkout to measure")
    args = ap.parse_args()
    root = Path(args.kernix_root).resolve()
    workdir = Path(tempfile.mkdtemp(prefix="kernix-scale-"))
    print(f"kernix: {root}   ({os.cpu_count()} CPUs), median of {args.repeat}")
    print(f"{'functions':>10}{'cold build':>12}{'handler units':>15}{'handler cc':>12}{'handler RSS':>13}"
          f"{'shim cc':>10}{'shim RSS':>11}{'link RSS':>11}")
    for n in (int(s) for s in args.sizes.split(",")):
        runs = [build_once(n, root, workdir) for _ in range(args.repeat)]

        def med(get):
            return statistics.median(get(r) for r in runs)

        print(f"{n:>10}{med(lambda r: r['wall']):>11.2f}s{med(lambda r: r['units']):>15.0f}"
              f"{med(lambda r: r['secs']['handler']):>11.2f}s{med(lambda r: r['peaks']['handler']) / 1024:>10.0f} MB"
              f"{med(lambda r: r['secs']['shim']):>9.2f}s{med(lambda r: r['peaks']['shim']) / 1024:>8.0f} MB"
              f"{med(lambda r: r['peaks']['link']) / 1024:>8.0f} MB", flush=True)
    shutil.rmtree(workdir, ignore_errors=True)
    print(f"\ncommands: {shlex.join([sys.executable, *sys.argv])}")


if __name__ == "__main__":
    main()
