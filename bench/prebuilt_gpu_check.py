"""Check a prebuilt CUDA module on a GPU machine: load, run, time, export round trip.

Usage (on the GPU machine, with a directory made elsewhere by
``kernix build bench/prebuilt_gpu_kernel.cu -o DIR --arch sm_80,sm_90``
or by ``--make-source FILE`` below)::

    python bench/prebuilt_gpu_check.py DIR [--runs 5]
    python bench/prebuilt_gpu_check.py --make-source scale.cu   # writes the kernel it expects

The module must export ``scale(x, out, factor, stream)`` computing
``out = x * factor`` on float32.  Prints one JSON object: the GPU, the
library's size and architectures, the result check, ``load_prebuilt`` time in
fresh processes (median of ``--runs``, with and without the first JAX call),
and whether an exported artifact round-trips through a new process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

KERNEL = textwrap.dedent(
    """\
    #include "kernix/common.h"
    __global__ void scale_kernel(const float* x, float* o, float f, int64_t n) {
      int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
      if (i < n) o[i] = x[i] * f;
    }
    // @BE scale (...)->(...)
    void scale(const BE::Tensor& x, BE::Tensor& out, float factor, cudaStream_t stream) {
      int64_t n = x.numel();
      scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x.data_ptr<float>(), out.data_ptr<float>(), factor, n);
    }
    """
)

_TIMED = """
import time, json
t0 = time.perf_counter()
import kernix
t1 = time.perf_counter()
mod = kernix.load_prebuilt({dir!r})
t2 = time.perf_counter()
import jax.numpy as jnp
y = mod.scale(jnp.arange(1024, dtype=jnp.float32), factor=2.0).block_until_ready()
t3 = time.perf_counter()
print(json.dumps({{"import_kernix_s": t1 - t0, "load_prebuilt_s": t2 - t1, "first_call_s": t3 - t2}}))
"""

_EXPORT = """
import json, jax, jax.numpy as jnp, kernix
mod = kernix.load_prebuilt({dir!r})
exp = kernix.export(jax.jit(lambda x: mod.scale(x, factor=3.0) + 1.0), jax.ShapeDtypeStruct((1000,), jnp.float32))
open({path!r}, "wb").write(exp.serialize())
print(json.dumps({{"targets": list(kernix.runtime.export.kernix_targets(exp)), "platforms": list(exp.platforms)}}))
"""

_IMPORT = """
import json, numpy as np, jax.numpy as jnp, kernix
kernix.load_prebuilt({dir!r})
fn = kernix.deserialize(open({path!r}, "rb").read())
y = np.asarray(fn(jnp.arange(1000, dtype=jnp.float32)))
print(json.dumps({{"ok": bool(np.allclose(y, np.arange(1000) * 3.0 + 1.0))}}))
"""


def _run(code: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"subprocess failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", nargs="?", help="the prebuilt module directory")
    parser.add_argument("--runs", type=int, default=5, help="fresh processes to time (default 5)")
    parser.add_argument("--make-source", metavar="FILE", help="write the expected kernel source and exit")
    args = parser.parse_args(argv)
    if args.make_source:
        Path(args.make_source).write_text(KERNEL)
        print(f"wrote {args.make_source}; build it with: kernix build {args.make_source} -o DIR --arch sm_80,sm_90")
        return 0
    if not args.directory:
        parser.error("give the prebuilt directory (or --make-source FILE)")
    directory = str(Path(args.directory).absolute())

    import jax
    import jax.numpy as jnp
    import numpy as np

    import kernix
    from kernix.prebuilt.format import PrebuiltManifest

    manifest = PrebuiltManifest.read(directory)
    gpu = jax.devices("gpu")[0]
    mod = kernix.load_prebuilt(directory)
    x = jnp.arange(1 << 20, dtype=jnp.float32)
    y = np.asarray(jax.jit(lambda v: mod.scale(v, factor=2.5))(x))
    correct = bool(np.allclose(y, np.arange(1 << 20, dtype=np.float32) * 2.5))

    timings = [_run(_TIMED.format(dir=directory)) for _ in range(args.runs)]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "fn.jax")
        exported = _run(_EXPORT.format(dir=directory, path=path))
        imported = _run(_IMPORT.format(dir=directory, path=path))

    report = {
        "gpu": f"{gpu.device_kind} (sm_{gpu.compute_capability.replace('.', '')})",
        "jax": jax.__version__,
        "library": manifest.library,
        "library_bytes": manifest.library_size,
        "sass": list(manifest.sass),
        "ptx": list(manifest.ptx),
        "built_with_jaxlib": manifest.jaxlib,
        "ffi_api": list(manifest.ffi_api),
        "result_correct": correct,
        "fresh_process_median_s": {
            k: round(statistics.median(t[k] for t in timings), 4) for k in timings[0]
        },
        "export": {**exported, "round_trip_ok": imported["ok"]},
    }
    print(json.dumps(report, indent=1))
    return 0 if correct and imported["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
