"""The GPU architecture a CUDA module is built for: ``sm_XY`` names, lists of
them, and where the default comes from."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from ..errors import ToolchainError

__all__ = ["ARCH_ENV", "ARCH_LIST_ENV", "normalize_arch", "normalize_arch_list", "arch_key",
           "detect_compute_capability"]

ARCH_ENV = "KERNIX_CUDA_ARCH"
ARCH_LIST_ENV = "KERNIX_CUDA_ARCH_LIST"


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _parse(text: str) -> tuple[str, str] | None:
    """``(digits, suffix)`` of ``[sm_|compute_]X[.Y][a|f]`` (lower case; two or
    three digits, the first not 0, as every CUDA architecture has), else ``None``."""
    text = text.removeprefix("sm_") if text.startswith("sm_") else text.removeprefix("compute_")
    suffix = text[-1:] if text[-1:] in ("a", "f") else ""
    major, dot, minor = text[: len(text) - len(suffix)].partition(".")
    if not _digits(major) or (dot and not _digits(minor)) or not 2 <= len(major + minor) <= 3 or major[0] == "0":
        return None
    return major + minor, suffix


def normalize_arch(value: str | int, where: str = "") -> str:
    """Turn ``"sm_90"``, ``"90"``, ``"9.0"``, ``90`` or ``"sm_90a"`` into ``"sm_90"``-style.

    Raises
    ------
    ToolchainError
        If ``value`` is not a compute capability (the message names ``where``
        it came from, when given).
    """
    parsed = _parse(str(value).strip().lower())
    if parsed is None:
        from ..errors import ToolchainError
        raise ToolchainError(f"bad compute capability {value!r}{f' from {where}' if where else ''}: expected a "
                             "form like 'sm_90', '90', '9.0' or 'sm_90a' (two or three digits)")
    return f"sm_{parsed[0]}{parsed[1]}"


def arch_key(arch: str) -> tuple[int, int, str]:
    """``(major, minor, suffix)`` of an ``sm_XY[a|f]`` name: ``sm_86`` -> ``(8, 6, "")``,
    ``sm_100a`` -> ``(10, 0, "a")``.  Sorting by it orders architectures oldest first."""
    parsed = _parse(arch) if arch.startswith("sm_") and "." not in arch else None
    if parsed is None:
        from ..errors import ToolchainError
        raise ToolchainError(f"not a normalised architecture name: {arch!r} (expected 'sm_XY')")
    digits, suffix = parsed
    return int(digits[:-1]), int(digits[-1]), suffix


def _items(text: str) -> list[str]:
    """The names in a list separated by commas, semicolons or white space."""
    return text.replace(",", " ").replace(";", " ").split()


def normalize_arch_list(value: str | int | Sequence[str | int], where: str = "") -> tuple[str, ...]:
    """Turn an architecture list into sorted, distinct ``sm_XY`` names.

    Accepts ``"sm_80,sm_90"``, ``"80;90"``, ``"8.0 9.0"``, ``["80", "sm_90"]``
    or a single architecture in any form :func:`normalize_arch` takes.

    Raises
    ------
    ToolchainError
        If an item is not a compute capability, or the list is empty.
    """
    items: Sequence[str | int]
    if isinstance(value, (str, int)):
        items = _items(str(value))
    else:
        items = [t for v in value for t in (_items(v) if isinstance(v, str) else [v])]
    if not items:
        from ..errors import ToolchainError
        raise ToolchainError(f"empty architecture list {value!r}: give at least one, e.g. 'sm_80,sm_90'")
    return tuple(sorted({normalize_arch(v, where) for v in items}, key=arch_key))


def detect_compute_capability(explicit: str | Sequence[str] | None = None, *,
                              root: str | os.PathLike[str] | None = None) -> str:
    """The GPU architecture(s) to build for: ``sm_XY``, or ``sm_XY,sm_ZW,...``
    (sorted, oldest first) for a multi-architecture build.

    From, in order: ``explicit`` (one architecture or a list, see
    :func:`normalize_arch_list`), ``$KERNIX_CUDA_ARCH_LIST``, ``$KERNIX_CUDA_ARCH``,
    then every GPU that ``CUDA_VISIBLE_DEVICES`` shows, asked of the driver
    (:func:`kernix.backend.gpus.survey`, never JAX, whose backend stays
    unstarted), so a module runs on whichever of them JAX uses.  ``root`` is
    the cache root where the driver's answer is remembered (default: the cache
    root).  A :class:`ToolchainError` when none gives one, saying why and how
    to set it.
    """
    try:
        if explicit:
            return ",".join(normalize_arch_list(explicit, "the argument (compute_capability=, arch=, --arch)"))
        env_list = os.environ.get(ARCH_LIST_ENV)
        if env_list and env_list.strip():
            return ",".join(normalize_arch_list(env_list, f"${ARCH_LIST_ENV}"))
        env = os.environ.get(ARCH_ENV)
        if env:
            return normalize_arch(env, f"${ARCH_ENV}")
        from . import gpus  # (a CUDA load's alone: a C++ load does not import it)

        found = gpus.survey(root)
        if found.gpus:
            return ",".join(sorted({normalize_arch(g.arch, f"the driver ({found.source}) for the {g.name}")
                                    for g in found.gpus}, key=arch_key))
    except Exception as exc:  # (the class is imported where it is raised: a warm load creates none)
        from ..errors import ToolchainError
        if not isinstance(exc, ToolchainError):
            raise
        raise ToolchainError(f"{exc}. {_FIX}") from None
    from ..errors import ToolchainError
    raise ToolchainError(f"could not detect the GPU's compute capability: {found.problem}. {_FIX}")


#: How to name the architecture, said by every error about it.
_FIX = ("Name the architecture: compute_capability='sm_90' (or a list, ['sm_80', 'sm_90']) for a load, "
        "arch= for build_module, --arch sm_90 (or --arch sm_80,sm_90) for kernix build; "
        f"or set ${ARCH_ENV}=sm_90 (or ${ARCH_LIST_ENV}=sm_80,sm_90).")
