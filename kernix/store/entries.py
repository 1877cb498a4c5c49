"""Looking up and publishing cache entries, and an entry's last use (by which
the cache is evicted: docs/how-it-works.rst, "Size and eviction").

An entry is used only when its manifest reads back valid, every file the
build read still has its recorded content, and the library its recorded size
and hash; a :class:`Lookup` says why not.  Publishing writes the library
under its own hash, the specs and the ``last-use`` file, then the manifest
that vouches for them, atomically: a reader sees a complete entry or none.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .files import UNSETTLED, FileStat, atomic_write, file_digest, stale_file
from .manifest import SPECS_FILE, Manifest, ManifestError, entry_dir
from .trust import check_private, io_message, makedirs

if TYPE_CHECKING:
    from ..language.spec import FunctionSpec

__all__ = ["LAST_USE", "TOUCH_INTERVAL_S", "Lookup", "discard", "entry_time", "lookup", "publish", "record_use"]

#: The file whose modification time is an entry's last use.
LAST_USE = "last-use"
#: A hit records a use when the recorded one is older than this (seconds).
TOUCH_INTERVAL_S = 3600.0


class Lookup:
    """The outcome of one look-up: the usable entry's ``manifest`` (``None``
    on a miss), and the ``reason``: ``"hit"``, or why not (``"no entry"``, also
    for one removed while it was read; ``"P changed since it was cached"``;
    ``"P changed during the build"``; ``"damaged: ..."``, when ``damaged``:
    the entry exists but cannot be used as it is, and the caller rebuilds it)."""

    __slots__ = ("manifest", "reason", "damaged")

    def __init__(self, manifest: Manifest | None, reason: str, damaged: bool = False) -> None:
        self.manifest = manifest
        self.reason = reason
        self.damaged = damaged

    @property
    def hit(self) -> bool:
        """Whether the entry can be used."""
        return self.manifest is not None


def lookup(root: Path, name: str, key: str, *, warn: bool = True) -> Lookup:
    """Look up the entry for ``key``; a hit records its use, a damaged entry is
    a miss (the caller rebuilds it) and, with ``warn``, a ``RuntimeWarning``;
    a :class:`CacheError` when another user could have written the entry, or
    no file descriptor is left to read it."""
    entry = entry_dir(root, name, key)
    try:
        check_private(entry / "manifest.json", root)
        found = _read_entry(entry, key, root)
    except OSError as exc:
        if exc.errno in _NO_DESCRIPTOR:  # (see _unread)
            raise
        found = _damaged(f"cannot open it: {exc.strerror or exc}")
    if found.manifest is not None:
        record_use(entry)
    if warn and found.damaged:
        warnings.warn(f"kernix: the cache entry {entry} is {found.reason}; rebuilding it", RuntimeWarning, stacklevel=3)
    return found


def _damaged(why: str) -> Lookup:
    return Lookup(None, f"damaged: {why}", damaged=True)


_NO_DESCRIPTOR = (errno.EMFILE, errno.ENFILE)


def _unread(entry: Path, exc: OSError) -> None:
    """Raise when ``exc`` says this process has no file descriptor left (no damage): a :class:`CacheError`
    saying so, or where kernix.errors cannot be imported for want of one either, ``exc`` with that note."""
    if exc.errno in _NO_DESCRIPTOR:
        advice = (f"cannot read the cache entry {entry}: {exc.strerror} (this process holds too many open files). "
                  "Close files it no longer needs, or raise its limit (`ulimit -n`, resource.setrlimit(RLIMIT_NOFILE)).")
        try:
            from ..errors import CacheError
        except OSError:
            exc.add_note(advice)
            raise exc from None
        raise CacheError(advice) from exc


def record_use(entry: Path) -> None:
    """Set the entry's ``last-use`` file to the present if it is :data:`TOUCH_INTERVAL_S`
    old (or in the future); failing to is not an error, a link is never followed."""
    path = os.path.join(entry, LAST_USE)
    with contextlib.suppress(OSError):
        if not 0 <= time.time() - os.lstat(path).st_mtime < TOUCH_INTERVAL_S:
            os.utime(path, follow_symlinks=False)


def entry_time(entry: str | os.PathLike[str]) -> float:
    """When the entry was last used: its ``last-use`` file's mtime, else its
    manifest's, else its directory's (``0.0`` when it is gone)."""
    for path in (os.path.join(entry, LAST_USE), os.path.join(entry, "manifest.json"), entry):
        with contextlib.suppress(OSError):
            return os.lstat(path).st_mtime
    return 0.0


def _read_entry(entry: Path, key: str, root: Path) -> Lookup:
    try:
        manifest = Manifest.read(entry)
    except FileNotFoundError:
        return Lookup(None, "no entry")
    except OSError as exc:
        _unread(entry, exc)
        return _damaged(f"cannot read manifest: {exc}")
    except ManifestError as exc:
        return _damaged(str(exc))
    if manifest.key != key:
        return _damaged("manifest does not belong to this key")
    try:
        stale = stale_file(manifest.dependencies)
    except (ValueError, TypeError):  # (not a list of file versions)
        return _damaged("its record of the files the build read is malformed")
    if stale is not None:
        return Lookup(None, stale + ("" if stale.endswith(UNSETTLED) else " since it was cached"))
    so_path = manifest.so_path
    check_private(so_path, root)
    failed = "library missing"
    try:
        stat = FileStat.of(so_path)
        if stat.size != manifest.so_size:
            return _damaged(f"library is {stat.size} bytes, expected {manifest.so_size}")
        # Unchanged since it was hashed at publish, else hash it again.
        if stat != manifest.so_stat and file_digest(so_path) != manifest.so_sha256:
            return _damaged("library content does not match its recorded SHA-256")
        failed = f"cannot read {SPECS_FILE}"
        manifest.keep_specs()  # the entry may be cleared while the module is in use
    except OSError as exc:
        _unread(entry, exc)
        if not (entry / "manifest.json").exists():  # a clear removes it first
            return Lookup(None, "no entry (removed while it was read: a cache clear)")
        return _damaged(f"{failed}: {exc.strerror or exc}")
    return Lookup(manifest, "hit")


def publish(root: Path, name: str, key: str, built_so: Path, functions: "Sequence[FunctionSpec]",
            handlers: dict[str, str], dependencies: Sequence[Sequence[Any]], platform: str) -> Manifest:
    """Copy a built library into the cache and write its manifest, atomically
    (a :class:`CacheError` when it cannot); ``dependencies``: the version of
    every file the build read.  Hold the module's build lock around this."""
    entry = entry_dir(root, name, key)
    try:
        makedirs(entry)
        check_private(entry, root)
        for leftover in entry.glob(".*.tmp"):  # from a publisher that died (we hold the build lock)
            with contextlib.suppress(OSError):
                leftover.unlink()
        data = built_so.read_bytes()
        so_sha = hashlib.sha256(data).hexdigest()
        so_name = f"module-{so_sha[:16]}.so"
        if not (entry / so_name).is_file() or file_digest(entry / so_name) != so_sha:
            atomic_write(entry / so_name, data)
        specs = Manifest.specs_bytes(functions)
        atomic_write(entry / SPECS_FILE, specs)
        manifest = Manifest(
            directory=entry, key=key, name=name, platform=platform, so=so_name, so_size=len(data), so_sha256=so_sha,
            so_stat=FileStat.of(entry / so_name), sources=tuple(dict.fromkeys(f.file for f in functions if f.file)),
            handlers=dict(handlers), specs_sha256=hashlib.sha256(specs).hexdigest(),
            dependencies=tuple(tuple(d) for d in dependencies), created=time.time(),
        )
        atomic_write(entry / LAST_USE, b"", durable=False)  # before the manifest; replacing what is there
        manifest.write()
        manifest.keep_specs()
        for old in entry.glob("module-*.so"):  # superseded libraries of this entry
            if old.name != so_name:
                with contextlib.suppress(OSError):
                    old.unlink()
    except OSError as exc:
        from ..errors import CacheError
        raise CacheError(io_message(entry, exc)) from exc
    check_private(entry / so_name, root)
    return manifest


def discard(manifest: Manifest) -> None:
    """Remove an entry whose library failed to load.  Hold the module's build lock around this."""
    with contextlib.suppress(OSError):
        (manifest.directory / "manifest.json").unlink()
