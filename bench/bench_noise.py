"""How steady is this machine's Python?  The background for reading the
warm-start figures of ``bench_warm.py``, which are a few milliseconds of
pure Python.

Times the fixed piece of work of ``bench_warm.py --phases`` (unmarshal and
run 300 small functions' definitions 5 times, 20,000 additions; no kernix):

* in fresh processes, ``--repeat`` of them per group, the groups side by
  side: back to back (the reference), right after a process that imported
  jax, and -- with a GPU -- right after a process that started JAX's GPU
  backend and 2 s after one, then back to back again; the median and the
  fastest process of each group.  Far-apart medians with the same fastest
  process are the machine's noise, not the processes before;
* within one process after ``jax.devices()`` (or ``import jax`` without a
  GPU), every few hundred milliseconds for about 8 s, with the CPU time each
  of the process' threads used meanwhile (``/proc/self/task/*/stat``: a
  busy background thread would show there) and the control group's
  throttling counters (``/sys/fs/cgroup/cpu.stat``).

Usage::

    python bench/bench_noise.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_warm import CHILD_ENV, WORK  # noqa: E402

TIMED = WORK + "\nprint(work())\n"
JAX = "import jax, jax.numpy\njax.numpy.zeros(1).block_until_ready()\n"
GPU = "import jax\njax.devices('gpu')\n"


def _work() -> float:
    """The work's time in a fresh process (ms)."""
    out = subprocess.run([sys.executable, "-c", TIMED], check=True, capture_output=True, text=True, env=CHILD_ENV)
    return float(out.stdout) * 1e3


def _run(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, env=CHILD_ENV)


def _has_gpu() -> bool:
    try:
        _run(GPU)
    except subprocess.CalledProcessError:
        return False
    return True


def group(label: str, repeat: int, before: str | None = None, wait: float = 0.0) -> None:
    """Print the median and fastest time of the work in ``repeat`` fresh
    processes, each after running ``before`` in its own process and waiting ``wait`` s."""
    times = []
    for _ in range(repeat):
        if before is not None:
            _run(before)
        time.sleep(wait)
        times.append(_work())
    print(f"  {label:46}{statistics.median(times):8.2f} ms{min(times):10.2f} ms", flush=True)


def _thread_ticks() -> dict[str, tuple[str, int]]:
    """Thread id -> (name, user + system CPU ticks) of this process."""
    ticks = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:  # the thread ended
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        ticks[tid] = (stat[stat.index("(") + 1:stat.rindex(")")], int(fields[11]) + int(fields[12]))
    return ticks


def _throttled() -> str:
    try:
        stat = dict(line.split() for line in Path("/sys/fs/cgroup/cpu.stat").read_text().splitlines())
    except (OSError, ValueError):
        return "no cgroup v2 cpu.stat"
    return f"nr_throttled {stat.get('nr_throttled', '?')}, throttled_usec {stat.get('throttled_usec', '?')}"


def within_one_process(gpu: bool) -> None:
    """The work every few hundred ms in this process after starting JAX."""
    namespace: dict = {}
    exec(WORK, namespace)
    import jax

    jax.devices("gpu" if gpu else "cpu")
    print(f"\nin this process after {'jax.devices()' if gpu else 'import jax'} ({_throttled()}):")
    before = _thread_ticks()
    for wait in (0.0, 0.05, 0.2, 0.5, 1.0, 2.0, 4.0):
        time.sleep(wait)
        times = [namespace["work"]() * 1e3 for _ in range(7)]
        print(f"  after {wait:4.2f} s more: median {statistics.median(times):6.2f} ms, fastest {min(times):6.2f} ms")
    after = _thread_ticks()
    used = sorted(((after[t][1] - before[t][1], after[t][0]) for t in after if t in before), reverse=True)
    busy = ", ".join(f"{name} {ticks}" for ticks, name in used[:4])
    print(f"  CPU ticks (1/100 s) meanwhile, busiest threads of {len(after)}: {busy}")
    print(f"  control group afterwards: {_throttled()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    gpu = _has_gpu()
    print(f"{platform.node() or 'this machine'}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"{'a GPU' if gpu else 'no GPU'}; the work in fresh processes, {args.repeat} a group")
    print(f"  {'':46}{'median':>11}{'fastest':>13}")
    group("back to back", args.repeat)
    group("right after a process that imported jax", args.repeat, JAX)
    if gpu:
        group("right after a process that started the GPU", args.repeat, GPU)
        group("2 s after a process that started the GPU", args.repeat, GPU, wait=2.0)
    group("back to back, again", args.repeat)
    within_one_process(gpu)


if __name__ == "__main__":
    main()
