"""Where the test suite's time goes: the CPU of each test file, in the test processes and in the
processes they wait for (compilers, ninja, child Pythons), beside the wall time of the run.

Runs the README's test command (``pytest -n auto --dist loadfile``, or the arguments given) with this
file as a plugin: around each test it reads ``os.times()`` of its worker, so a test's ``children``
CPU is that of the processes it started and waited for (a process started by a fixture counts for
the test that set the fixture up).  A suite whose ``own + children`` is close to ``wall × workers``
is bound by CPU: only less work makes it faster.

Usage::

    python bench/suite_cpu.py [pytest arguments]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

_OUT = os.environ.get("KERNIX_SUITE_CPU_DIR")
_rows: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])

if _OUT:  # imported by pytest as a plugin
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        before = os.times()
        yield
        after, row = os.times(), _rows[item.nodeid.split("::")[0]]
        row[0] += after.user + after.system - before.user - before.system
        row[1] += (after.children_user + after.children_system - before.children_user - before.children_system)

    def pytest_sessionfinish(session):
        Path(_OUT, f"{os.getpid()}.json").write_text(json.dumps(_rows))


def main(args: list[str]) -> None:
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, KERNIX_SUITE_CPU_DIR=out,
                   PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")])))
        start = time.monotonic()
        code = subprocess.run([sys.executable, "-m", "pytest", "-p", "suite_cpu", "-q",
                               *(args or ["-n", "auto", "--dist", "loadfile"])], env=env).returncode
        wall = time.monotonic() - start
        files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for worker in Path(out).glob("*.json"):
            for name, (own, children) in json.loads(worker.read_text()).items():
                files[name][0] += own
                files[name][1] += children
    print(f"\n{'own CPU':>9} {'children':>9}  test file")
    for name, (own, children) in sorted(files.items(), key=lambda kv: -sum(kv[1])):
        print(f"{own:8.1f}s {max(children, 0.0):8.1f}s  {name}")
    own, children = (sum(r[i] for r in files.values()) for i in (0, 1))
    print(f"{own:8.1f}s {children:8.1f}s  all; wall {wall:.1f} s on {os.cpu_count()} CPUs (pytest exit {code})")
    sys.exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
