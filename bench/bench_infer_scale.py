"""Inference time against the size of a file: one big file against the same
functions spread over small ones.

Two comparisons, each side by side:

* **annotations**: one file with N annotated functions against the same N
  functions in K files of N/K each (the sum of their times), and against
  one file with N/4 of them (linear: 4x the functions, 4x the time);
* **comment**: a file of the given size (in MB) made almost all of one
  comment, directly above one of its functions (so it is that function's
  doc comment), against the same functions in a small file; the same with
  one line of code between the comment and the function; for each, the size
  of the specs stored (the spec-cache entry, which holds what a module's
  ``functions.json`` holds) and how long libclang alone takes to parse the
  big file (the floor: a parse reads every byte).

Inference is timed in this process (``infer_file(..., use_cache=False)``:
parse and inference; libclang loaded and the toolchain's answers
remembered beforehand), median of ``--runs``; the stored size comes from one
more ``infer_file`` into an empty spec cache.

Usage::

    python bench/bench_infer_scale.py [--annotations N] [--files K] [--mb MB] [--runs R] [--cuda]
    python bench/bench_infer_scale.py --quick      # CI-size: 1,000 annotations, 5 MB

Sources are C++ (``--cuda``: CUDA, through the precompiled prelude).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

HEADER = '#include "kernix/common.h"\n\n'


def function(i: int) -> str:
    """One annotated function, with a doc comment."""
    return (f"// Scales x by a{i} into y.\n// @BE f{i}\n"
            f"void f{i}(const BE::Tensor& x, BE::Tensor& y, float a{i}) {{}}\n\n")


def annotated(first: int, count: int) -> str:
    return HEADER + "".join(function(i) for i in range(first, first + count))


def with_comment(megabytes: float, gap: bool, functions: int = 10) -> str:
    """``functions`` functions, the middle one under a comment of ``megabytes`` MB
    (with ``gap``, a line of code between that comment and the function)."""
    line = "// " + "lorem ipsum dolor sit amet, consectetur adipiscing elit " * 2 + "\n"
    comment = line * max(1, int(megabytes * 1e6 / len(line)))
    parts = [HEADER]
    for i in range(functions):
        if i == functions // 2:
            parts.append(comment + ("struct gap_t {};\n" if gap else ""))
        parts.append(f"// @BE f{i}\nvoid f{i}(const BE::Tensor& x, BE::Tensor& y, float a{i}) {{}}\n\n")
    return "".join(parts)


def median_time(call: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def infer_time(paths: list[Path], runs: int) -> float:
    """Median over ``runs`` of the total time to infer every one of ``paths`` (no spec cache)."""
    from kernix import infer_file

    def all_files() -> None:
        for p in paths:
            r = infer_file(p, use_cache=False)
            assert not r.errors, [str(e) for e in r.errors][:3]

    return median_time(all_files, runs)


def stored_bytes(path: Path, cache: Path) -> int:
    """The size of the spec-cache entry ``infer_file`` stores for ``path``."""
    from kernix import infer_file

    infer_file(path, cache_dir=cache)
    return sum(f.stat().st_size for f in (cache / "specs").rglob("*.rec"))


def parse_only(path: Path, runs: int) -> float:
    """libclang alone parsing ``path`` (as inference parses it)."""
    from kernix.frontend.clangparse import ParseOptions, parse
    from kernix.platforms import language_of

    options = ParseOptions(language_of(str(path)), (), (), ())
    return median_time(lambda: parse(str(path.resolve()), options), runs)


def annotations(tmp: Path, n: int, k: int, ext: str, runs: int) -> None:
    one = tmp / f"one.{ext}"
    one.write_text(annotated(0, n))
    quarter = tmp / f"quarter.{ext}"
    quarter.write_text(annotated(0, n // 4))
    split = []
    for j in range(k):
        p = tmp / f"part{j}.{ext}"
        p.write_text(annotated(j * (n // k), n // k))
        split.append(p)
    t_one, t_quarter, t_split = infer_time([one], runs), infer_time([quarter], runs), infer_time(split, runs)
    print(f"annotations: {n} in one file ({one.stat().st_size / 1e6:.1f} MB): {t_one:8.2f} s   "
          f"{n // k} in each of {k} files: {t_split:8.2f} s   ratio {t_one / t_split:5.2f}\n"
          f"  scaling: {n // 4} in one file: {t_quarter:.2f} s, 4x as many: {t_one / t_quarter:.1f}x the time")


def comment(tmp: Path, megabytes: float, ext: str, runs: int) -> None:
    small = tmp / f"small.{ext}"
    small.write_text(with_comment(0, gap=False))
    t_small = infer_time([small], runs)
    s_small = stored_bytes(small, tmp / "cache-small")
    for gap in (False, True):
        big = tmp / f"big{'-gap' if gap else ''}.{ext}"
        big.write_text(with_comment(megabytes, gap))
        t_big = infer_time([big], runs)
        s_big = stored_bytes(big, tmp / f"cache-big{gap}")
        t_parse = parse_only(big, runs)
        label = "a line of code between comment and function" if gap else "comment directly above a function"
        print(f"comment ({label}):\n"
              f"  {big.stat().st_size / 1e6:.1f} MB file: {t_big:7.3f} s, {s_big / 1e3:9.1f} kB stored   "
              f"same functions in {small.stat().st_size / 1e3:.1f} kB: {t_small:6.3f} s, "
              f"{s_small / 1e3:.1f} kB stored   "
              f"(libclang's parse alone of the big file: {t_parse:.3f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--annotations", type=int, default=10_000, help="annotated functions in the one file")
    parser.add_argument("--files", type=int, default=10, help="files the same functions are split into")
    parser.add_argument("--mb", type=float, default=50, help="size of the file with the big comment, in MB")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--cuda", action="store_true", help="CUDA sources (.cu) instead of C++")
    parser.add_argument("--quick", action="store_true", help="CI sizes: 1,000 annotations, 5 MB")
    parser.add_argument("--only", choices=["annotations", "comment"], help="run one comparison")
    args = parser.parse_args()
    if args.quick:
        args.annotations, args.mb = 1000, 5
    ext = "cu" if args.cuda else "cpp"
    print(f"cpu count: {os.cpu_count()}, python {sys.version.split()[0]}, {ext} sources")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["KERNIX_CACHE_DIR"] = str(tmp / "cache")
        warm = tmp / f"warm.{ext}"  # libclang, the toolchain's answers, the precompiled prelude
        warm.write_text(annotated(0, 1))
        infer_time([warm], 1)
        if args.only != "comment":
            annotations(tmp, args.annotations, args.files, ext, args.runs)
        if args.only != "annotations":
            comment(tmp, args.mb, ext, args.runs)


if __name__ == "__main__":
    main()
