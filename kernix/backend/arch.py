"""The GPU architecture a CUDA module is built for: ``sm_XY`` names, lists of
them, and where the default comes from.

A warm CUDA load runs :func:`detect_compute_capability` (the architecture is
part of the request's fingerprint), so this module stays small and imports
neither the compiler search (:mod:`.toolchain`) nor the error classes until
it has an error to raise.
"""

from __future__ import annotations

import os
import re

TYPE_CHECKING = False  # as typing.TYPE_CHECKING: typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Sequence

__all__ = ["ARCH_ENV", "ARCH_LIST_ENV", "normalize_arch", "normalize_arch_list", "arch_key",
           "detect_compute_capability"]

ARCH_ENV = "KERNIX_CUDA_ARCH"
ARCH_LIST_ENV = "KERNIX_CUDA_ARCH_LIST"

_ARCH_RE = re.compile(r"^(?:sm_|compute_)?(\d+)(?:\.(\d+))?([af]?)$")


def _error(message: str) -> Exception:
    from ..errors import ToolchainError

    return ToolchainError(message)


def normalize_arch(value: str | int) -> str:
    """Turn ``"sm_90"``, ``"90"``, ``"9.0"``, ``90`` or ``"sm_90a"`` into ``"sm_90"``-style.

    Raises
    ------
    ToolchainError
        If ``value`` is not a compute capability.
    """
    text = str(value).strip().lower()
    m = _ARCH_RE.match(text)
    if not m:
        raise _error(f"bad compute capability {value!r}: expected a form like 'sm_90', '90', '9.0' or 'sm_90a'")
    major, minor, suffix = m.groups()
    digits = major + minor if minor is not None else major
    return f"sm_{digits}{suffix}"


def arch_key(arch: str) -> tuple[int, int, str]:
    """``(major, minor, suffix)`` of an ``sm_XY[a|f]`` name: ``sm_86`` -> ``(8, 6, "")``,
    ``sm_100a`` -> ``(10, 0, "a")``.  Sorting by it orders architectures oldest first."""
    m = re.fullmatch(r"sm_(\d+)(\d)([af]?)", arch)
    if not m:
        raise _error(f"not a normalised architecture name: {arch!r} (expected 'sm_XY')")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def normalize_arch_list(value: str | int | Sequence[str | int]) -> tuple[str, ...]:
    """Turn an architecture list into sorted, distinct ``sm_XY`` names.

    Accepts ``"sm_80,sm_90"``, ``"80;90"``, ``"8.0 9.0"``, ``["80", "sm_90"]``
    or a single architecture in any form :func:`normalize_arch` takes.

    Raises
    ------
    ToolchainError
        If an item is not a compute capability, or the list is empty.
    """
    items: list[str | int]
    if isinstance(value, (str, int)):
        items = [t for t in re.split(r"[,;\s]+", str(value)) if t]
    else:
        items = [t for v in value for t in (re.split(r"[,;\s]+", v) if isinstance(v, str) else [v]) if t != ""]
    if not items:
        raise _error(f"empty architecture list {value!r}: give at least one, e.g. 'sm_80,sm_90'")
    return tuple(sorted({normalize_arch(v) for v in items}, key=arch_key))


def _arch_from_jax() -> str | None:
    try:
        import jax

        for dev in jax.devices("gpu"):
            cc = getattr(dev, "compute_capability", None)
            if cc:
                return normalize_arch(cc)
    except Exception:  # no GPU backend: not an error here
        return None
    return None


def _arch_from_nvidia_smi() -> str | None:
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        if line.strip():
            return normalize_arch(line) if _ARCH_RE.match(line.strip().lower()) else None
    return None


def detect_compute_capability(explicit: str | Sequence[str] | None = None) -> str:
    """The GPU architecture(s) to build for: ``sm_XY``, or ``sm_XY,sm_ZW,...``
    (sorted, oldest first) for a multi-architecture build.

    Looks, in order, at ``explicit`` (one architecture or a list, see
    :func:`normalize_arch_list`), ``$KERNIX_CUDA_ARCH_LIST``,
    ``$KERNIX_CUDA_ARCH``, the JAX GPU devices and ``nvidia-smi``.

    Raises
    ------
    ToolchainError
        When none of them gives one, saying how to set it.
    """
    if explicit:
        return ",".join(normalize_arch_list(explicit))
    env_list = os.environ.get(ARCH_LIST_ENV)
    if env_list and env_list.strip():
        return ",".join(normalize_arch_list(env_list))
    env = os.environ.get(ARCH_ENV)
    if env:
        return normalize_arch(env)
    arch = _arch_from_jax() or _arch_from_nvidia_smi()
    if arch:
        return arch
    raise _error(
        "could not detect the GPU's compute capability (no JAX GPU device, no nvidia-smi). "
        f"Pass compute_capability='sm_90' (or a list, ['sm_80', 'sm_90']), or set ${ARCH_ENV}=sm_90 "
        f"(or ${ARCH_LIST_ENV}=sm_80,sm_90)."
    )
