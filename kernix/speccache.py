"""The on-disk cache of inferred specs.

An entry lives at ``cache_root()/specs/<key[:2]>/<key>.json`` where ``key`` is
a sha256 over everything the parse depends on except the headers: kernix's
version, the libclang build, the language, the exact flags and the source
bytes.  The headers the parse read are stored in the entry with their size,
``mtime_ns`` and sha256; a look-up re-checks them (size and mtime first, the
hash only when those changed) so an edited header is a miss, without parsing.

Entries are written atomically (temporary file + ``os.replace``); a damaged
or unreadable entry is a miss, never an error.  Pure Python: a warm look-up
neither imports libclang nor runs a compiler.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable

__all__ = ["make_key", "load", "store", "entry_path"]

_FORMAT = 1


def make_key(parts: Iterable[Any], source: bytes) -> str:
    """sha256 over the JSON form of ``parts`` and the source bytes."""
    h = hashlib.sha256()
    h.update(json.dumps([_FORMAT, *parts], sort_keys=True).encode())
    h.update(b"\0")
    h.update(source)
    return h.hexdigest()


def entry_path(key: str) -> Path:
    """Where the entry for ``key`` lives."""
    from .paths import cache_root

    return cache_root() / "specs" / key[:2] / f"{key}.json"


def _file_hash(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _dep_still_valid(dep: dict[str, Any]) -> bool:
    try:
        st = os.stat(dep["path"])
    except (OSError, KeyError, TypeError):
        return False
    if st.st_size != dep["size"]:
        return False
    if st.st_mtime_ns == dep["mtime_ns"]:
        return True
    try:
        return _file_hash(dep["path"]) == dep["sha256"]
    except OSError:
        return False


def load(key: str) -> dict[str, Any] | None:
    """The stored payload for ``key``, or ``None`` (missing, damaged or stale)."""
    try:
        data = json.loads(entry_path(key).read_text())
        if data.get("format") != _FORMAT or data.get("key") != key:
            return None
        deps = data["dependencies"]
        if not all(_dep_still_valid(d) for d in deps):
            return None
        return data["payload"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def store(key: str, payload: dict[str, Any], dependencies: Iterable[str]) -> None:
    """Store ``payload`` under ``key``, recording ``dependencies``' fingerprints.

    Failures to write are ignored: the cache is an optimisation only.
    """
    deps = []
    try:
        for path in dependencies:
            st = os.stat(path)
            deps.append(
                {"path": path, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": _file_hash(path)}
            )
        target = entry_path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        tmp.write_text(
            json.dumps({"format": _FORMAT, "key": key, "dependencies": deps, "payload": payload})
        )
        os.replace(tmp, target)
    except OSError:
        return
