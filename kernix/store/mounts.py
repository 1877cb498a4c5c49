"""What the file system that holds the cache allows.

A library on a file system mounted ``noexec`` cannot be mapped by ``dlopen``
("failed to map segment"), however often it is rebuilt: such a cache is
refused before anything is built into it, and a library that fails to load
from it is not rebuilt.
"""

from __future__ import annotations

import os

from ..paths import nearest_existing

__all__ = ["noexec_problem"]


def noexec_problem(root: str | os.PathLike[str]) -> str | None:
    """Why no library under the cache root ``root`` can be loaded, or ``None``:
    the file system holding it is mounted ``noexec`` (``dlopen`` then fails with
    "failed to map segment"), which no rebuild can change."""
    path = nearest_existing(os.fspath(root), os.path.exists)  # not made yet: its future file system
    try:
        noexec = bool(os.statvfs(path).f_flag & os.ST_NOEXEC)
    except OSError:
        return None
    if not noexec:
        return None
    return (
        f"the kernix cache {os.fspath(root)} is on a file system mounted noexec, so no library built there can be "
        "loaded. Point kernix at a directory on a file system mounted without noexec (`findmnt -T DIR` shows "
        "a directory's mount options) with KERNIX_CACHE_DIR, kernix.set_cache_dir() or build_directory=."
    )

