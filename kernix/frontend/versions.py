"""The versions of the files a parse read, as the parse read them.

A cached result is only as current as its headers, so each is recorded with
its version (see :func:`kernix.store.settled_versions`). Taking versions after
the parse would vouch for a header saved mid-parse, so :func:`read_versions`
hashes the bytes clang read (``clang_getFileContents``) and records nothing
unless the file on disk still holds them. A file modified within
:data:`RACY_NS` is recorded with ctime 0, so it is always checked by content.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..store.files import FileStat

__all__ = ["merge_versions", "read_versions"]

#: How recent a modification makes a file's stat untrustworthy (file systems
#: with one- or two-second timestamps, and the kernel's coarse clock).
RACY_NS = 3_000_000_000


@functools.cache
def _lib() -> Any:
    import clang.cindex as ci

    lib = ci.conf.lib
    lib.clang_getFileContents.restype = ctypes.c_void_p
    lib.clang_getFileContents.argtypes = [ci.TranslationUnit, ci.File, ctypes.POINTER(ctypes.c_size_t)]
    return lib


def read_versions(tu: Any, skip: Iterable[str] = ()) -> list[list[Any]] | None:
    """``[path, inode, size, mtime_ns, ctime_ns, sha256]`` for each file ``tu`` read
    but ``skip``, or ``None`` when one no longer holds what the parse read.
    """
    left_out = set(skip)
    out: dict[str, list[Any]] = {}
    for inclusion in tu.get_includes():
        file = inclusion.include
        path = os.path.abspath(file.name)
        if path in left_out or path in out:
            continue
        size = ctypes.c_size_t(0)
        data = _lib().clang_getFileContents(tu, file, ctypes.byref(size))  # (the bytes clang parsed)
        if not data:
            return None
        content = ctypes.string_at(data, size.value)
        try:
            before = FileStat.of(path)
            on_disk = Path(path).read_bytes() if before.size == len(content) else None
            after = FileStat.of(path)
        except OSError:
            return None
        if on_disk != content or after != before:
            return None
        out[path] = [path, *_trusted_stat(before), hashlib.sha256(content).hexdigest()]
    return list(out.values())


def _trusted_stat(stat: FileStat) -> FileStat:
    """``stat``, with a ctime of 0 when the file changed too recently for its stat to tell a later rewrite."""
    if time.time_ns() - max(stat.mtime_ns, stat.ctime_ns) < RACY_NS:
        return FileStat(stat.inode, stat.size, stat.mtime_ns, 0)
    return stat


def merge_versions(*groups: list[list[Any]] | None) -> list[list[Any]] | None:
    """The versions of several parses of one file, each file once; ``None`` when
    one group is ``None`` or two parses read different contents of one file."""
    merged: dict[str, list[Any]] = {}
    for group in groups:
        if group is None:
            return None
        for version in group:
            seen = merged.setdefault(version[0], version)
            if seen[-1] != version[-1]:
                return None
    return list(merged.values())
