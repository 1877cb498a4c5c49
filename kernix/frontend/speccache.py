"""The on-disk cache of inferred specs.

An entry lives at ``<cache root>/specs/<key[:2]>/<key>.rec`` where ``key`` is
the store's content key (:func:`kernix.store.files.content_key`) over
everything the parse depends on except the headers: kernix's version, the
libclang build, the language, the exact flags and the source bytes.  The
headers the parse read are stored in the entry with their size, ``mtime_ns``
and sha256; a look-up re-checks them (size and mtime first, the hash only when
those changed) so an edited header is a miss, without parsing.

A cached spec ends up in generated C++, so an entry is read only when no other
user could have written it (:mod:`kernix.store.trust`), and its specs are
validated again on the way in (:meth:`kernix.spec.FunctionSpec.from_json`).
An entry is a record (:mod:`kernix.store.files`): a dict of ``format``,
``key``, ``dependencies`` (fingerprints) and ``payload`` (the
:meth:`~kernix.frontend.infer.InferResult.to_json` form).
Entries are written atomically; a damaged, untrusted or unreadable entry is a
miss, never an error.  Pure Python: a warm look-up neither imports libclang
nor runs a compiler.
"""

from __future__ import annotations

import os

from ..store.files import content_key, fingerprints, fingerprints_current, read_record, write_record

TYPE_CHECKING = False  # as typing.TYPE_CHECKING: typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any, Iterable

__all__ = ["make_key", "load", "store", "entry_path"]

# 6: specs carry the function type; 7: dependencies record ctime_ns; 8: clang sees the type flags;
# 9: an error records its reason (a requested name the file does not declare: "not_declared");
# 10: one only an included header declares has its own reason ("declared_in_header")
_FORMAT = 10


def make_key(parts: Iterable[Any], source: bytes) -> str:
    """The content key over ``parts`` and the source bytes."""
    return content_key([_FORMAT, *parts], source)


def entry_path(root: str | os.PathLike[str], key: str) -> str:
    """Where the entry for ``key`` lives under cache root ``root``."""
    return os.path.join(root, "specs", key[:2], f"{key}.rec")


def load(root: str | os.PathLike[str], key: str) -> dict[str, Any] | None:
    """The stored payload for ``key``, or ``None`` (missing, damaged, stale or untrusted)."""
    try:
        data = read_record(entry_path(root, key), root)  # (untrusted: a ValueError)
        if data.get("format") != _FORMAT or data.get("key") != key:
            return None
        if not fingerprints_current(data["dependencies"]):
            return None
        return data["payload"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def store(root: str | os.PathLike[str], key: str, payload: dict[str, Any], dependencies: Iterable[str]) -> None:
    """Store ``payload`` under ``key``, recording ``dependencies``' fingerprints.

    Failures to write are ignored: the cache is an optimisation only.
    """
    try:
        prints = fingerprints(dependencies)
    except OSError:  # a header gone since the parse: nothing to vouch for
        return
    write_record(entry_path(root, key), {"format": _FORMAT, "key": key, "dependencies": prints, "payload": payload})
