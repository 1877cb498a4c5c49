"""Shared helpers for the test-suite."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

#: The project root the tests run from (a checkout, or a copy of its tests/,
#: fixtures/, docs/ and examples/ next to an installed kernix).
ROOT = Path(__file__).resolve().parent.parent
#: The C++/CUDA sources the tests use: the one fixtures path.
FIXTURES = ROOT / "fixtures"

#: Every kernix module a warm load of a C++ module imports, and no other (tests/test_warm.py checks both
#: ways). They import an error class only where they raise it (tests/test_architecture.py), so a warm
#: load, which raises nothing, creates none of them.
WARM_LOAD_MODULES = frozenset({
    "kernix", "kernix.platforms", "kernix.paths", "kernix.notes", "kernix.language", "kernix.language.names",
    "kernix.store", "kernix.store.trust", "kernix.store.files", "kernix.store.direct", "kernix.store.entries",
    "kernix.store.manifest", "kernix.runtime", "kernix.runtime.registry", "kernix.runtime.module",
    "kernix.request", "kernix.pipeline", "kernix.loaders",
})
#: What a warm load of a CUDA module imports besides: the GPU architecture, which enters its fingerprint (given,
#: or asked of the driver). These too import an error class only where they raise it.
WARM_CUDA_MODULES = frozenset({"kernix.backend", "kernix.backend.arch", "kernix.backend.gpus"})

_counter = itertools.count()


def unique_name(stem: str) -> str:
    """A module name not used before in this process (FFI targets live per process)."""
    return f"{stem}_{os.getpid()}_{next(_counter)}"


def has_nvcc() -> bool:
    """Whether kernix finds nvcc here (CUDA tests that build skip without it)."""
    from kernix.backend import toolchain
    from kernix.errors import ToolchainError

    try:
        toolchain.find_nvcc()
        return True
    except ToolchainError:
        return False


def gpus() -> list:
    """JAX's GPU devices here, or an empty list (GPU tests skip without one)."""
    import jax

    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


def first_gpu():
    """JAX's first GPU device here, or ``None``."""
    return next(iter(gpus()), None)


def infer_cuda_text(directory: Path, name: str, text: str):
    """``infer_file`` of ``text`` saved as ``directory/name`` (a ``.cu`` file); skips without nvcc,
    whose headers a CUDA source's inference reads."""
    import pytest

    from kernix import infer_file

    if not has_nvcc():
        pytest.skip("needs nvcc (the CUDA headers)")
    path = directory / name
    path.write_text(text)
    return infer_file(str(path))


def handler_units_with_ffi_h(build: Path) -> list[str]:
    """The handler units of build directory ``build`` whose compile read XLA's C++ ``ffi.h``
    (their depfiles say), out of at least one; the others decode the call frame through the C API."""
    import re

    from kernix.backend.ninja import read_depfile

    units = sorted(build.glob("handlers_*.o.d"))
    assert units, f"no handler unit was compiled in {build}"
    return [u.name.removesuffix(".o.d") for u in units
            if any(re.search(r"xla/ffi/api/(ffi|api)\.h$", d) for d in read_depfile(u))]
