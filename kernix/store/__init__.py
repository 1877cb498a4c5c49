"""The store: everything kernix keeps on disk, and the rules that keep it safe.

This namespace is the store's one face: the pipeline and the other folders
look entries up, publish, evict and remember small answers through the names
below, never by writing paths under the cache root.

* entries: :func:`lookup` (a :class:`Lookup`), :func:`publish` (which keeps the
  cache within :func:`max_size`), :func:`discard`, :func:`prune_cache`,
  :func:`clear_cache`, :func:`cache_info`;
* the direct index (:func:`recall_key`, :func:`remember_key`): a request's entry
  key, remembered with the stat of every file it was computed from;
* memos (:func:`recall`, :func:`remember`): small answers about the toolchain,
  the GPUs and kernix's own code, and the tables of ``tune=`` templates (merged
  by :class:`Memos`, the memos handed to a loaded module); a *prelude* is a memo
  with files of its own (:func:`new_prelude_file`, :func:`prelude_file`), evicted with them;
* building: :func:`build_lock`, :func:`work_directory`, :func:`write_source`.

The layout under the cache root (:func:`kernix.paths.cache_root`) and its
formats: docs/how-it-works.rst, "Layout and formats" (each module here names
the files it owns).  Every directory is private to the user, and every file
read back that can reach a compiler or the loader is trust-checked first
(:mod:`kernix.store.trust`).  What only a miss, a build or ``kernix cache``
needs is imported when first asked for.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .direct import DIRECT_FORMAT, TOOL_ENVIRONMENT, code_identity, file_stats, record, search_dirs
from .direct import lookup as _direct_lookup
from .files import (
    UNSETTLED, compiler_environment, content_key, file_digest, new_prelude_file, prelude_file, recall, remember,
    settled_versions, version_current, write_source,
)
from .trust import is_private
from ..paths import cache_root

if TYPE_CHECKING:
    from collections.abc import Sequence
    from ..language.spec import FunctionSpec
    from .manifest import Manifest

# The names imported when first asked for, by the module that holds them.
_LATER = {
    "Lookup": "entries", "lookup": "entries", "discard": "entries",
    "MANIFEST_FORMAT": "manifest", "Manifest": "manifest", "ManifestError": "manifest",
    "build_lock": "lock", "work_directory": "workdir", "record_inputs": "workdir", "build_started": "workdir",
    "noexec_problem": "workdir", "prune_cache": "prune", "clear_cache": "admin",
    "cache_info": "admin", "max_size": "prune", "parse_size": "prune", "parse_age": "prune",
    "format_size": "prune", "format_age": "prune",
}

__all__ = [
    "code_identity", "compiler_environment", "content_key", "DIRECT_FORMAT", "file_digest", "file_stats",
    "is_private", "Memos", "new_prelude_file", "prelude_file", "publish", "recall", "recall_key", "remember",
    "remember_key", "search_dirs", "settled_versions", "TOOL_ENVIRONMENT", "UNSETTLED", "version_current",
    "write_source", *_LATER,
]


def __getattr__(name: str) -> Any:
    module = _LATER.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def recall_key(root: Path, name: str, fingerprint: str, *, verbose: bool = False) -> str | None:
    """The entry key the direct index remembers for module ``name``'s request
    ``fingerprint``, while every file it was computed from is unchanged, else
    ``None`` (logged as ``"<name>: direct miss: <why>"``)."""
    return _direct_lookup(root, name, fingerprint, valid=lambda v: isinstance(v, str) and len(v) == 64, what=name,
                          verbose=verbose)


def remember_key(root: Path, name: str, fingerprint: str, key: str, files: list[list[Any]], *,
                 verbose: bool = False) -> None:
    """Remember ``key`` for ``fingerprint``; ``files`` are the :func:`file_stats`
    taken before the key was computed."""
    record(root, name, fingerprint, key, files, what=name, verbose=verbose)


def publish(root: Path, name: str, key: str, built_so: Path, functions: Sequence[FunctionSpec],
            handlers: dict[str, str], dependencies: Sequence[Sequence[Any]], platform: str) -> Manifest:
    """Publish a built library as the entry ``key`` of module ``name``
    (:func:`kernix.store.entries.publish`), then bring the cache within its
    size limit, this entry kept; a :class:`CacheError` when the entry cannot
    be written.  Hold the module's build lock around this."""
    from . import entries, prune

    manifest = entries.publish(root, name, key, built_so, functions, handlers, dependencies, platform)
    prune.after_publish(root, manifest)
    return manifest


class Memos:
    """The memos under the cache root ``root`` (``None``: :func:`kernix.paths.cache_root` when used), as a
    loaded module is handed them: :meth:`recall`, and :meth:`update`, which merges under a lock."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root

    def recall(self, kind: str, key: str) -> Any:
        """The answer remembered as ``kind`` for ``key``, or ``None``."""
        return recall(kind, key, root=self.root)

    def update(self, kind: str, key: str, fields: dict[str, Any]) -> bool:
        """Remember the dict for ``key`` with ``fields`` merged in (a field that is a dict on both sides merged
        one level down), under a lock, so that processes updating it at once keep every entry; whether written."""
        from .lock import MEMOS_LOCK, build_lock

        base = Path(self.root if self.root is not None else cache_root())
        with build_lock(base, MEMOS_LOCK):
            old = recall(kind, key, root=base)
            value = dict(old) if isinstance(old, dict) else {}
            for k, v in fields.items():
                value[k] = {**value[k], **v} if isinstance(v, dict) and isinstance(value.get(k), dict) else v
            return remember(kind, key, value, root=base)
