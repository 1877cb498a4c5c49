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
from pathlib import Path
from typing import Any, Iterable

from .fileio import atomic_write, fingerprints, fingerprints_current

__all__ = ["make_key", "load", "store", "entry_path"]

_FORMAT = 2


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


def load(key: str) -> dict[str, Any] | None:
    """The stored payload for ``key``, or ``None`` (missing, damaged or stale)."""
    try:
        data = json.loads(entry_path(key).read_text())
        if data.get("format") != _FORMAT or data.get("key") != key:
            return None
        if not fingerprints_current(data["dependencies"]):
            return None
        return data["payload"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def store(key: str, payload: dict[str, Any], dependencies: Iterable[str]) -> None:
    """Store ``payload`` under ``key``, recording ``dependencies``' fingerprints.

    Failures to write are ignored: the cache is an optimisation only.
    """
    try:
        target = entry_path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        entry = {"format": _FORMAT, "key": key, "dependencies": fingerprints(dependencies), "payload": payload}
        atomic_write(target, json.dumps(entry).encode(), durable=False)
    except OSError:
        return
