"""kernix's own identity in every cache key: the content of the code that
turns a source into specs and specs into compiled code, not just its version
(a checkout edited in place, or two installs of one version, generate other
code under the same ``kernix.__version__``).

It covers every Python module of ``kernix/language/``, ``kernix/frontend/``
and ``kernix/backend/``, ``languages.py`` and ``compiler_flags.py``, and every
file under ``kernix/include/``.  It is worked out once per process, its digest
remembered per the files' stats (:func:`kernix.store.files.remember`); a
direct-index record vouches for those stats, so a warm load notices an
edited generator or header by ``stat`` alone.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from .files import FileStat, content_key, recall, remember

__all__ = ["code_files", "code_identity", "code_stats", "forget"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DIRECTORIES = ("language", "frontend", "backend")
_MODULES = ("languages.py", "compiler_flags.py")
_HEADERS = "include"


def code_files() -> list[str]:
    """The files whose content is kernix's identity (see the module documentation), absolute, sorted."""
    found = [os.path.join(_PACKAGE, m) for m in _MODULES]
    for d in _DIRECTORIES:
        found += [e.path for e in os.scandir(os.path.join(_PACKAGE, d)) if e.name.endswith(".py") and e.is_file()]
    for top, _, names in os.walk(os.path.join(_PACKAGE, _HEADERS)):
        found += [os.path.join(top, n) for n in names]
    return sorted(found)


@functools.lru_cache(maxsize=None)
def _identity() -> tuple[str, tuple[tuple[Any, ...], ...]]:
    """``(SHA-256 over the files' names and content, their stats taken before
    reading them)``; the digest is remembered under the cache root per stats
    (reading and hashing the files costs a warm ``kernix inspect`` about 2 ms)."""
    paths = code_files()
    stats = tuple((p, *FileStat.of(p)) for p in paths)
    memo = content_key(list(stats))[:24]
    digest = recall("kernix-code", memo)
    if isinstance(digest, str) and len(digest) == 64:
        return digest, stats
    blobs = []
    for p in paths:
        with open(p, "rb") as f:
            blobs.append(f.read())
    digest = content_key(["kernix code", [os.path.relpath(p, _PACKAGE) for p in paths]], *blobs)
    remember("kernix-code", memo, digest)
    return digest, stats


def code_identity() -> str:
    """The SHA-256 of kernix's code (see the module documentation), the same for
    the whole process."""
    return _identity()[0]


def code_stats() -> list[list[Any]]:
    """``[path, inode, size, mtime_ns, ctime_ns]`` of each of :func:`code_files`,
    as taken before :func:`code_identity` read them (for direct-index records)."""
    return [list(s) for s in _identity()[1]]


def forget() -> None:
    """Work the identity out again when next needed (tests that edit a copy of kernix)."""
    _identity.cache_clear()
