"""The direct index: a warm load's way from a request to its entry key
without asking the toolchain.

An entry's key covers the compilers' identities, the compile flags and the
GPU architecture, so computing it means finding the compilers and the
jaxlib and CUDA headers.  As in ccache's direct mode, the key computed for a
request is remembered under the request's *fingerprint* (its options and the
environment that steers the tool search), together with the identity of
every file the key was computed from: the sources, the compilers, and the
directories searched for them (a compiler installed there later would be
found first).  While all of them are unchanged the remembered key is the key
the full computation would give, and the look-up goes straight to the entry,
whose manifest is then checked as always.

Format 1 (``direct/<module name>/<fingerprint[:32]>.json``, one JSON object)::

    format       1
    fingerprint  the request fingerprint (SHA-256 hex)
    key          the entry key computed for it
    files        [[path, inode, size, mtime_ns, ctime_ns], ...]; a missing
                 file is recorded with inode -1

A record is trusted only when this user wrote it (see :mod:`kernix.store.trust`);
anything else about it that is off is a miss, never an error.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from .. import report
from ..errors import CacheError
from .files import atomic_write
from .trust import is_private, makedirs

__all__ = ["DIRECT_FORMAT", "identities", "lookup", "record"]

DIRECT_FORMAT = 1

def _identity(path: str) -> list[Any]:
    """``[path, inode, size, mtime_ns, ctime_ns]`` (inode -1: missing)."""
    try:
        st = os.stat(path)
    except OSError:
        return [path, -1, 0, 0, 0]
    return [path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def identities(paths: Iterable[str]) -> list[list[Any]]:
    """The identity of each path, now: take them *before* computing the key they vouch for."""
    return [_identity(p) for p in paths]


def _record_path(root: Path, name: str, fingerprint: str) -> Path:
    return root / "direct" / name / f"{fingerprint[:32]}.json"


def lookup(root: Path, name: str, fingerprint: str, *, verbose: bool = False) -> str | None:
    """The entry key remembered for ``fingerprint``, or ``None`` (no record, a
    changed file, or a record that is not usable); the outcome is logged."""
    key, why = _read(root, _record_path(root, name, fingerprint), fingerprint)
    if key is None:
        report.note(f"{name}: direct miss: {why}", verbose=verbose)
    return key


def _read(root: Path, path: Path, fingerprint: str) -> tuple[str | None, str]:
    """``(key, "hit")`` when the record at ``path`` holds, else ``(None, why not)``."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None, "no record"
    except (OSError, ValueError) as exc:
        return None, f"unreadable record ({exc})"
    if not is_private(path, root):
        return None, "the record could have been written by another user"
    try:
        if data["format"] != DIRECT_FORMAT or data["fingerprint"] != fingerprint:
            return None, "a record of another format or request"
        key = data["key"]
        if not (isinstance(key, str) and len(key) == 64):
            return None, "a record without a key"
        for recorded in data["files"]:
            if _identity(recorded[0]) != recorded:
                return None, f"{recorded[0]} changed"
    except (KeyError, TypeError, IndexError):
        return None, "a damaged record"
    return key, "hit"


def record(
    root: Path, name: str, fingerprint: str, key: str, files: Sequence[list[Any]], *, verbose: bool = False
) -> None:
    """Remember ``key`` for ``fingerprint``; ``files`` are :func:`identities` taken
    before the key was computed.  Failing to remember is not an error."""
    path = _record_path(root, name, fingerprint)
    data = {"format": DIRECT_FORMAT, "fingerprint": fingerprint, "key": key, "files": list(files)}
    with contextlib.suppress(OSError, CacheError):
        makedirs(path.parent)
        atomic_write(path, json.dumps(data, separators=(",", ":")).encode(), durable=False)
        report.note(f"{name}: direct record {fingerprint[:16]} -> {key[:16]}", verbose=verbose)
