"""An example package that ships its kernix kernels precompiled.

At import it loads the prebuilt module its wheel carries; only when that one
cannot serve this machine does it build the shipped sources (and says why).
"""

from pathlib import Path

from kernix.prebuilt import last_load_reason, load_or_build

_HERE = Path(__file__).resolve().parent
_PREBUILT = _HERE / "_prebuilt" / "ops"

_ops = load_or_build(_PREBUILT, [_HERE / "kernels" / "ops.cpp"], target_prefix="downstream_example.ops")

#: "prebuilt", or "jit: <why the prebuilt module could not be used>".
LOADED_FROM = last_load_reason(_PREBUILT)


def axpy(a, x, y):
    """``a * x + y`` for float32 arrays, computed by the C++ kernel."""
    return _ops.axpy(x, y, a=float(a))


__all__ = ["axpy", "LOADED_FROM"]
