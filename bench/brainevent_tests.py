"""Run a published brainevent package's own tests of its nvcc-built kernels
with kernix as its loader: the drop-in, checked by the reference's tests.

The script installs the brainevent wheel into a directory of its own
(``--site``, ``pip install --no-deps --target``), changes that copy's
loaders to kernix's -- the change ``docs/coming-from-brainevent.rst``
describes, made by appending to ``brainevent/_op/kernix_pipeline.py`` --
and runs ``pytest -k cuda_raw`` over the package's kernel directories,
several directories at a time in their own processes.  The package's tests
compare each kernel with its dense or pure-JAX reference.  Each directory
prints its pytest summary, and then its failures, counted by their error.

The package's own loader is used instead with ``--loader brainevent``: the
same tests, for telling a failure of kernix from one of the package.  With
``--headers kernix`` the installed copy's ``include/brainevent/`` directory is
set aside, so its kernels compile against kernix's own ``brainevent/``
headers (and their checked ``data_ptr<T>()``) instead of the package's.

Needs a GPU, nvcc and the package's test requirements (``brainstate``,
``braintools``, ``brainunit``, ``numba``; pass their wheels with ``--with``
where they are not installed).  The wheel comes from ``--wheel`` or
``bench_corpus.py``'s download (``pip download brainevent==0.3.0``); it is
never part of this repository.

Usage::

    python bench/brainevent_tests.py [--wheel FILE] [--with WHEEL ...] [--dirs _dense _csr ...]
                                     [--jobs 8] [--timeout 540] [-k cuda_raw] [--loader kernix]
                                     [--headers package|kernix]
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_corpus import fetch_wheel  # noqa: E402

DIRS = ("_dense", "_event", "_fcn", "_jit_normal", "_jit_scalar", "_jit_uniform", "_csr", "_tcsr")

# Appended to the installed copy's loader module: its names are rebound to
# kernix's loaders before brainevent's kernel modules import them.  The
# package's include directory comes first, as the package builds.
DROP_IN = '''

# --- bench/brainevent_tests.py: kernix builds and registers this package's kernels ---
import os as _os
from pathlib import Path as _Path

if _os.environ.get("BRAINEVENT_LOADER") == "kernix":
    import kernix as _kernix

    _INCLUDE = str(_Path(__file__).resolve().parents[1] / "include")

    def _kernix_loader(load):
        def loader(*args, **kwargs):
            kwargs["extra_include_paths"] = [_INCLUDE, *(kwargs.get("extra_include_paths") or [])]
            return load(*args, **kwargs)
        return loader

    load_cuda_inline = _kernix_loader(_kernix.load_cuda_inline)
    load_cuda_file = _kernix_loader(_kernix.load_cuda_file)
    load_cuda_dir = _kernix_loader(_kernix.load_cuda_dir)
'''


def install(wheel: Path, extra: list[str], site: Path) -> Path | None:
    """Install the package (and ``extra`` wheels) into ``site``; return the
    installed ``brainevent`` directory, its loaders changed to kernix's
    (``None``, with pip's reason printed, when pip cannot install them)."""
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--upgrade",
                          "--target", str(site), str(wheel), *extra], capture_output=True, text=True)
    if pip.returncode != 0:
        print(f"pip could not install {wheel.name} into {site} with Python {platform.python_version()}:\n"
              f"{pip.stderr.strip()[-800:]}")
        return None
    package = site / "brainevent"
    loaders = package / "_op" / "kernix_pipeline.py"
    text = loaders.read_text()
    if DROP_IN not in text:
        loaders.write_text(text + DROP_IN)
    return package


def run_dir(site: Path, directory: str, env: dict[str, str], keyword: str, timeout: int) -> tuple[str, str, float]:
    """pytest over one kernel directory: (directory, its output, seconds)."""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", keyword, f"brainevent/{directory}"]
    try:
        out = subprocess.run(cmd, cwd=site, env=env, capture_output=True, text=True, timeout=timeout)
        text = out.stdout + out.stderr
    except subprocess.TimeoutExpired as exc:
        text = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        text += f"\nTIMEOUT after {timeout} s"
    return directory, text, time.perf_counter() - t0


def summary(text: str) -> str:
    """pytest's last summary line, or how far it got."""
    lines = [ln for ln in text.splitlines() if re.search(r"\d+ (passed|failed|error)", ln)]
    if lines:
        return lines[-1].strip("= ")
    dots = sum(ln.count(".") for ln in text.splitlines() if re.fullmatch(r"[.sFEx]+( +\[ *\d+%\])?", ln.strip()))
    return f"{dots} passed before it stopped" + (" (timed out)" if "TIMEOUT" in text else "")


def causes(text: str) -> collections.Counter[str]:
    """The failures of pytest's short summary (``FAILED test - Error: message``), counted by their error."""
    found: collections.Counter[str] = collections.Counter()
    for line in text.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            found[line.partition(" - ")[2][:240] or line] += 1
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheel", help="a brainevent wheel (default: bench_corpus.py's download)")
    ap.add_argument("--with", dest="extra", nargs="*", default=[], help="more wheels to install beside it")
    ap.add_argument("--site", help="where to install, kept (default: a temporary directory, removed)")
    ap.add_argument("--dirs", nargs="*", default=list(DIRS), help="the package's kernel directories to test")
    ap.add_argument("--jobs", type=int, default=8, help="directories tested at once")
    ap.add_argument("--timeout", type=int, default=540, help="seconds for one directory")
    ap.add_argument("-k", dest="keyword", default="cuda_raw", help="pytest -k expression")
    ap.add_argument("--loader", choices=("kernix", "brainevent"), default="kernix")
    ap.add_argument("--headers", choices=("package", "kernix"), default="package",
                    help="whose brainevent/ headers the kernels compile against (kernix: the package's are set aside)")
    args = ap.parse_args()
    wheel = Path(args.wheel) if args.wheel else fetch_wheel()
    if wheel is None:
        return 0
    if args.site:
        return test(wheel, Path(args.site), args)
    with tempfile.TemporaryDirectory(prefix="brainevent-tests-") as site:
        return test(wheel, Path(site), args)


def test(wheel: Path, site: Path, args: argparse.Namespace) -> int:
    """Install into ``site``, run the tests and print their results: the exit status."""
    package = install(wheel.resolve(), [str(Path(w).resolve()) for w in args.extra], site)
    if package is None:
        return 1
    if args.headers == "kernix":
        own, aside = package / "include" / "brainevent", package / "include" / "brainevent.package-headers"
        if own.is_dir():  # (pip reinstalled it into a kept --site)
            shutil.rmtree(aside, ignore_errors=True)
            own.rename(aside)
    env = {**os.environ, "BRAINEVENT_LOADER": args.loader, "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
           "COLUMNS": "1000",  # pytest cuts its summary lines, the failures' messages, to the terminal's width
           "PYTHONPATH": os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])}
    print(f"{wheel.name} in {site}, loader {args.loader}, {args.headers} headers, pytest -k {args.keyword!r}, "
          f"{args.jobs} directories at once")
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda d: run_dir(site, d, env, args.keyword, args.timeout), args.dirs))
    failures: collections.Counter[str] = collections.Counter()
    for directory, text, seconds in results:
        print(f"  {directory:14}{seconds:7.0f} s  {summary(text)}")
        failures += causes(text)
    for cause, count in failures.most_common():
        print(f"  {count:5} x {cause}")
    return 1 if failures or any("TIMEOUT" in text for _, text, _ in results) else 0

if __name__ == "__main__":
    sys.exit(main())
