"""Inference and build time of a function template against its number of instantiations.

One template, ``// @BE scale<T: float, double; K: 0, 1, ...>``, exported for
1, 8 and 64 instantiations (2 types x 4 values, 2 x 32): inference
(``infer_file(..., use_cache=False)``, median of ``--runs``: the one extra
parse that reads every instantiation's signature) and a cold build
(``load_cpp_file`` into an empty cache: the shim and handler units grow by one
call and one handler per instantiation).  Both should grow at most linearly.

Usage::

    python bench/bench_templates.py [--runs R] [--counts 1,8,64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

TEMPLATE = """#include <cstdint>
#include "kernix/common.h"
// @BE scale<{groups}> (n)->(n)
template <typename T, int K = 0>
void scale(const BE::Tensor& x, BE::Tensor& out, T factor) {{
  const T* a = x.data_ptr<T>();
  T* o = out.data_ptr<T>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = a[i] * factor + T(K);
}}
"""


def source(count: int) -> str:
    """The file exporting ``count`` instantiations."""
    if count == 1:
        return TEMPLATE.format(groups="T: float")
    values = ", ".join(str(k) for k in range(count // 2))
    return TEMPLATE.format(groups=f"T: float, double; K: {values}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--counts", default="1,8,64")
    args = parser.parse_args()
    os.environ.setdefault("KERNIX_CACHE_DIR", tempfile.mkdtemp(prefix="kernix-bench-"))
    import kernix
    from kernix.frontend.infer import infer_file

    work = Path(tempfile.mkdtemp(prefix="kernix-bench-templates-"))
    print(f"{'instantiations':>14}  {'inference (ms)':>14}  {'per inst.':>9}  {'cold build (s)':>14}  {'per inst.':>9}")
    for count in (int(c) for c in args.counts.split(",")):
        path = work / f"t{count}.cpp"
        path.write_text(source(count))
        infer_file(path, use_cache=False)  # (libclang loaded, toolchain answers remembered)
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            result = infer_file(path, use_cache=False)
            times.append(time.perf_counter() - start)
            assert len(result.functions) == count and not result.errors, result.errors
        infer_ms = statistics.median(times) * 1e3
        start = time.perf_counter()
        mod = kernix.load_cpp_file(path, name=f"bench_templates_{count}", build_directory=work / f"b{count}")
        build_s = time.perf_counter() - start
        assert len(mod.functions) == count
        print(f"{count:>14}  {infer_ms:>14.1f}  {infer_ms / count:>9.2f}  {build_s:>14.2f}  {build_s / count:>9.3f}")


if __name__ == "__main__":
    main()
