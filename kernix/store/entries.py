"""Looking up and publishing cache entries.

An entry is used only when its manifest reads back valid, every file the
build read still has its recorded content, and the library still has its
recorded size and hash.  Every look-up ends in a :class:`Lookup` that says
why (a hit, or the reason for a miss), which ``verbose=True`` /
``KERNIX_VERBOSE=1`` prints, like ccache's debug log.

Publishing copies the library under a name derived from its own hash (never
rewritten in place, so a process that has it loaded is not disturbed), writes
the specs and the ``last-use`` file, and writes the manifest that vouches for
them last, with an atomic rename, so a reader sees a complete entry or none;
then it keeps the cache within its size limit (:mod:`kernix.store.prune`).

A hit (and a publish) holds a lease on the entry for as long as its
:class:`~kernix.store.manifest.Manifest` lives, and records its use
(:mod:`kernix.store.usage`): an eviction never removes an entry in use.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CacheError
from .files import UNSETTLED, FileStat, atomic_write, file_digest, stale_file
from .manifest import SPECS_FILE, Manifest, ManifestError, entry_dir
from .trust import check_private, io_message, makedirs
from .usage import Evicting, create, hold, lease, release

if TYPE_CHECKING:
    from ..language.spec import FunctionSpec

__all__ = ["Lookup", "discard", "lookup", "publish"]


@dataclass(frozen=True)
class Lookup:
    """The outcome of one look-up.

    Attributes
    ----------
    manifest
        The usable entry, or ``None`` on a miss.
    reason
        ``"hit"``, or why the entry was not used: ``"no entry"`` (also for one
        removed while it was read: a ``kernix cache clear``, an eviction),
        ``"P changed since it was cached"``, ``"P changed during the build"``,
        ``"damaged: ..."``.
    damaged
        Whether the entry exists but cannot be used as it is (the caller rebuilds it).
    """

    manifest: Manifest | None
    reason: str
    damaged: bool = False

    @property
    def hit(self) -> bool:
        """Whether the entry can be used."""
        return self.manifest is not None


def lookup(root: Path, name: str, key: str, *, warn: bool = True) -> Lookup:
    """Look up the entry for ``key``.

    A hit's manifest holds a lease on the entry while it lives (see
    :mod:`kernix.store.usage`), and the entry's use is recorded.  A damaged
    entry (unreadable manifest, missing or altered library) is a miss, so the
    caller rebuilds it, and (with ``warn``) a ``RuntimeWarning``.

    Raises
    ------
    CacheError
        When the entry exists but another user could have written it, or the
        process has no file descriptor left to read it.
    """
    found = _lookup(root, name, key)
    if warn and found.damaged:
        warnings.warn(
            f"kernix: the cache entry {entry_dir(root, name, key)} is {found.reason}; rebuilding it",
            RuntimeWarning, stacklevel=3,
        )
    return found


def _damaged(why: str) -> Lookup:
    return Lookup(None, f"damaged: {why}", damaged=True)


def _unread(entry: Path, exc: OSError) -> None:
    """Raise when ``exc`` says this process has no file descriptor left: the
    entry is not damaged, and a rebuild would fail the same way."""
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        raise CacheError(
            f"cannot read the cache entry {entry}: {exc.strerror} (this process holds too many open files). Close "
            "files it no longer needs, or raise its limit (`ulimit -n`, resource.setrlimit(RLIMIT_NOFILE))."
        ) from exc


_CLEARED = Lookup(None, "no entry (removed while it was read: a cache clear)")
_EVICTING = Lookup(None, "no entry (being evicted)")


def _lookup(root: Path, name: str, key: str) -> Lookup:
    entry = entry_dir(root, name, key)
    try:
        check_private(entry / "manifest.json", root)
        held = lease(entry)  # first: an eviction that has not claimed the entry yet no longer can
    except FileNotFoundError:  # (written before the manifest, removed after it)
        return _damaged("its last-use file is missing") if _complete(entry) else Lookup(None, "no entry")
    except Evicting:
        return _EVICTING
    except OSError as exc:
        return _damaged(f"cannot open its last-use file: {exc.strerror or exc}")
    found = None
    try:
        found = _read_entry(entry, key, root)
    finally:
        if found is not None and found.manifest is not None:
            hold(found.manifest, held)
        else:
            release(held)
    return found


def _read_entry(entry: Path, key: str, root: Path) -> Lookup:
    """The entry in ``entry`` checked: a hit, or why not."""
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
    try:
        stat = FileStat.of(so_path)
        if stat.size != manifest.so_size:
            return _damaged(f"library is {stat.size} bytes, expected {manifest.so_size}")
        # Unchanged since it was hashed at publish, else hash it again.
        if stat != manifest.so_stat and file_digest(so_path) != manifest.so_sha256:
            return _damaged("library content does not match its recorded SHA-256")
    except OSError as exc:
        _unread(entry, exc)
        return _CLEARED if not _complete(entry) else _damaged(f"library missing: {exc.strerror or exc}")
    try:
        manifest.keep_specs()  # the entry may be cleared while the module is in use
    except OSError as exc:
        _unread(entry, exc)
        return _CLEARED if not _complete(entry) else _damaged(f"cannot read {SPECS_FILE}: {exc.strerror or exc}")
    return Lookup(manifest, "hit")


def _complete(entry: Path) -> bool:
    """Whether the entry has its manifest: a clear or an eviction removes it
    first, so a file of an entry without one was removed, not damaged."""
    return (entry / "manifest.json").exists()


def publish(
    root: Path,
    name: str,
    key: str,
    built_so: Path,
    functions: "Sequence[FunctionSpec]",
    handlers: dict[str, str],
    dependencies: Sequence[Sequence[Any]],
    platform: str,
) -> Manifest:
    """Copy a built library into the cache and write its manifest, atomically.

    ``dependencies`` are the file versions (:func:`kernix.store.files.file_versions`)
    of every file the build read.

    The returned manifest holds a lease on the entry (as a hit's does); once
    it is published, the cache is brought within its size limit
    (:func:`kernix.store.prune.after_publish`), this entry kept.

    Hold the module's build lock around this.

    Raises
    ------
    CacheError
        When the entry cannot be written.
    """
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
            directory=entry,
            key=key,
            name=name,
            platform=platform,
            so=so_name,
            so_size=len(data),
            so_sha256=so_sha,
            so_stat=FileStat.of(entry / so_name),
            sources=tuple(dict.fromkeys(f.file for f in functions if f.file)),
            handlers=dict(handlers),
            specs_sha256=hashlib.sha256(specs).hexdigest(),
            dependencies=tuple(tuple(d) for d in dependencies),
            created=time.time(),
        )
        hold(manifest, create(entry))  # the last-use file, before the manifest
        manifest.write()
        manifest.keep_specs()
        for old in entry.glob("module-*.so"):  # superseded libraries of this entry
            if old.name != so_name:
                with contextlib.suppress(OSError):
                    old.unlink()
    except OSError as exc:
        raise CacheError(io_message(entry, exc)) from exc
    check_private(entry / so_name, root)
    from .prune import after_publish  # (here: a warm load does not import it)

    after_publish(root, manifest)
    return manifest


def discard(manifest: Manifest) -> None:
    """Remove an entry whose library turned out unusable (it failed to load),
    so it is never a hit again.  Hold the module's build lock around this."""
    with contextlib.suppress(OSError):
        (manifest.directory / "manifest.json").unlink()
