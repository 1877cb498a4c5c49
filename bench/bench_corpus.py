"""Run kernix over every annotated CUDA file of a published brainevent package.

For each ``.cu`` file that carries ``// @BE`` annotations this script

1. infers its specs with kernix (``-I <package>/include``, as the package builds),
2. compares them with the package's own inference (its ``parse_annotations``,
   run on the file's text) function by function,
3. builds it with ``kernix.load_cuda_file(..., extra_include_paths=...)``:
   compile and link only (``compute_capability="sm_90"``), or also register
   the targets with ``--load`` on a machine with a GPU,

and prints inferred / agreeing / built counts, times, and each failure sorted
by cause.  Causes that are this machine's and not kernix's (a toolkit without
cuBLAS headers, a header the wheel does not ship) and inference errors from
nvcc's predefined macros (``__launch_bounds__``, ``__CUDACC__``) are counted
apart.

The package is not part of this repository: pass ``--package DIR`` (an
unpacked ``brainevent/`` directory) or ``--wheel FILE``, or let the script
``pip download brainevent==0.3.0`` into ``~/.cache/kernix-bench``; offline, it
says so and exits 0.

Usage::

    python bench/bench_corpus.py [--package DIR | --wheel FILE] [--limit N] [--infer-only] [--load] [--jobs N]
"""

from __future__ import annotations

import argparse
import statistics
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import types
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

VERSION = "0.3.0"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kernix-bench"


def fetch_wheel() -> Path | None:
    """The brainevent wheel, downloaded into the bench cache once (``None``, saying why, when offline)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(CACHE.glob(f"brainevent-{VERSION}-*.whl"))
    if not found:
        # The package needs Python >= 3.12; its files are read, never imported, so
        # the wheel is fetched for 3.12 whatever runs this script.
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--python-version", "3.12", "-d", str(CACHE), f"brainevent=={VERSION}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"skipped: could not download brainevent=={VERSION} (offline?):\n{proc.stderr.strip()[-400:]}")
            return None
        found = sorted(CACHE.glob(f"brainevent-{VERSION}-*.whl"))
    if not found:
        print("skipped: no brainevent wheel was downloaded")
        return None
    return found[0]


def find_package(args: argparse.Namespace) -> Path | None:
    """The unpacked ``brainevent`` package directory, fetching the wheel if needed."""
    if args.package:
        return Path(args.package).resolve()
    wheel = Path(args.wheel) if args.wheel else fetch_wheel()
    if wheel is None:
        return None
    target = CACHE / wheel.stem
    if not (target / "brainevent").is_dir():
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(target)
    return target / "brainevent"


def reference_inference(package: Path):
    """The package's own ``parse_annotations`` (pure Python), or ``None``."""
    path = package / "_op" / "kernix_codegen.py"
    if not path.is_file():
        return None
    # It imports one name from the package; a stand-in keeps the rest unimported.
    stub = types.ModuleType("brainevent._error")

    class KernelError(Exception):
        pass

    stub.KernelError = KernelError  # type: ignore[attr-defined]
    sys.modules.setdefault("brainevent", types.ModuleType("brainevent"))
    sys.modules["brainevent._error"] = stub
    spec = importlib.util.spec_from_file_location("_reference_codegen", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.parse_annotations


def _agrees(ours: tuple[str, ...], theirs: list[str]) -> bool:
    if len(ours) != len(theirs):
        return False
    for a, b in zip(ours, theirs):
        if b.startswith("attr."):
            name, _, dtype = b[5:].partition(":")
            a_name, _, a_dtype = a[5:].partition(":")
            # A half attribute the reference passes as bits is a uint16_t parameter here.
            if not a.startswith("attr.") or name != a_name or (dtype and dtype != a_dtype
                                                              and not (dtype in ("float16", "bfloat16")
                                                                       and a_dtype == "uint16")):
                return False
        elif a != b:
            return False
    return True


def classify_failure(text: str) -> str:
    """A short cause for a failed build or inference."""
    if "cublas" in text.lower() and ("file not found" in text or "No such file" in text):
        return "machine: cuBLAS headers are not installed"
    if "cublas" in text.lower():
        return "machine: cuBLAS library not found (the package links nvidia's libcublas.so.13)"
    if "file not found" in text or "No such file or directory" in text:
        for line in text.splitlines():
            if "file not found" in line or "No such file" in line:
                return "missing header: " + line.strip()[:160]
    if "__launch_bounds__" in text or "__CUDACC__" in text or "incomplete type 'void'" in text:
        return "nvcc macros missing from the parse (`__global__ void __launch_bounds__(N) k(...)` reads as a variable)"
    if "is bound to function" in text:
        return "several // @BE lines stacked before one macro that defines several functions"
    first = next((ln for ln in text.splitlines() if "error" in ln.lower()), text.splitlines()[0] if text else "")
    return "other: " + first.strip()[:200]


def cublas_ldflags() -> list[str] | None:
    """The link flags the package itself passes for its cuBLAS file: nvidia's
    ``libcublas.so.*`` from the installed ``nvidia-cublas`` wheel and an rpath
    (``None`` when it is not installed)."""
    for base in sys.path:
        for lib in sorted(Path(base).glob("nvidia/cu*/lib/libcublas.so.*")) + sorted(
                Path(base).glob("nvidia/cublas/lib/libcublas.so.*")):
            return [str(lib), f"-rpath={lib.parent}"]
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--package", help="an unpacked brainevent/ package directory")
    ap.add_argument("--wheel", help="a brainevent wheel file")
    ap.add_argument("--limit", type=int, default=0, help="only the first N files")
    ap.add_argument("--infer-only", action="store_true", help="skip the builds")
    ap.add_argument("--load", action="store_true", help="also register the targets (needs a GPU)")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1) // 4),
                    help="files built at a time (each with its share of the cores)")
    args = ap.parse_args()

    package = find_package(args)
    if package is None:
        return 0
    import kernix

    include = package / "include"
    files = sorted(p for p in package.rglob("*.cu") if "// @BE" in p.read_text(errors="replace"))
    if args.limit:
        files = files[: args.limit]
    parse_reference = reference_inference(package)
    print(f"kernix {kernix.__version__}; {len(files)} annotated .cu files under {package}", flush=True)

    counts = {"files": len(files), "inferred": 0, "functions": 0, "agreeing": 0, "compared": 0, "built": 0}
    infer_time = build_time = 0.0
    infer_times: list[float] = []
    failures: dict[str, list[str]] = {}
    disagreements: list[str] = []
    to_build: list[tuple[int, Path, str]] = []
    build_wall = 0.0
    with tempfile.TemporaryDirectory(prefix="kernix-corpus-") as tmp:
        for i, path in enumerate(files):
            rel = str(path.relative_to(package))
            t0 = time.perf_counter()
            result = kernix.infer_file(path, language="cuda", flags=[f"-I{include}"], use_cache=False)
            dt = time.perf_counter() - t0
            infer_time += dt
            infer_times.append(dt)
            status = f"[{i + 1}/{len(files)}] {rel}: infer {dt:.2f}s"
            if result.errors:
                text = "\n".join(e.format() for e in result.errors)
                failures.setdefault("inference, " + classify_failure(text), []).append(rel)
                print(status + " INFERENCE ERROR " + text.splitlines()[0][:200], flush=True)
                continue
            counts["inferred"] += 1
            counts["functions"] += len(result.functions)
            if parse_reference is not None:
                try:
                    theirs = parse_reference(path.read_text())
                except Exception as exc:  # the reference's own parser gave up
                    theirs = {}
                    status += f" (reference inference failed: {exc})"
                for spec in result.functions:
                    if spec.name in theirs:
                        counts["compared"] += 1
                        if _agrees(spec.arg_spec, theirs[spec.name]):
                            counts["agreeing"] += 1
                        else:
                            disagreements.append(f"{rel}: {spec.name}: kernix {' '.join(spec.arg_spec)} | "
                                                 f"reference {' '.join(theirs[spec.name])}")
            print(status, flush=True)
            to_build.append((i, path, rel))
        if not args.infer_only:
            jobs = max(1, args.jobs)
            workers = max(1, (os.cpu_count() or 1) // jobs)

            def build(item: tuple[int, Path, str]) -> tuple[str, float, str | None]:
                i, path, rel = item
                t0 = time.perf_counter()
                ldflags = cublas_ldflags() if "cublas" in path.read_text(errors="replace") else None
                try:
                    kernix.load_cuda_file(
                        path, name=f"corpus_{i}", compute_capability=args.arch, auto_register=args.load,
                        extra_include_paths=[str(include)], build_directory=Path(tmp) / f"m{i}",
                        ninja_workers=workers, extra_ldflags=ldflags,
                    )
                except kernix.KernixError as exc:
                    return rel, time.perf_counter() - t0, classify_failure(str(exc))
                return rel, time.perf_counter() - t0, None

            t_all = time.perf_counter()
            with ThreadPoolExecutor(jobs) as pool:
                for rel, dt, failure in pool.map(build, to_build):
                    build_time += dt
                    if failure is None:
                        counts["built"] += 1
                        print(f"{rel}: built {dt:.1f}s", flush=True)
                    else:
                        failures.setdefault("build, " + failure, []).append(rel)
                        print(f"{rel}: build FAILED {dt:.1f}s: {failure}", flush=True)
            build_wall = time.perf_counter() - t_all

    print()
    print(f"files {counts['files']}: inferred without error {counts['inferred']}, "
          f"built {counts['built']}{' (and loaded)' if args.load else ''}")
    print(f"functions {counts['functions']}: compared with the reference {counts['compared']}, "
          f"agreeing {counts['agreeing']}")
    print(f"time: inference {infer_time:.1f}s (median {statistics.median(infer_times) * 1e3:.0f} ms a file), "
          f"builds {build_time:.1f}s ({build_wall:.1f}s wall, {args.jobs} at a time)")
    for cause, names in sorted(failures.items()):
        print(f"{len(names):3d}  {cause}: {', '.join(names)}")
    for line in disagreements[:40]:
        print("disagrees:", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
