"""``kernix cache info`` and ``kernix cache clear``: reading and emptying the store.

Below the cache root (which may itself be a symbolic link) kernix creates no
symbolic links, so neither command ever follows one: :func:`clear_cache`
removes a link where it finds one (the link, never what it points to), and
:func:`cache_info` neither lists nor counts what lies behind one.  Both say
what they could not do, with a :class:`~kernix.errors.CacheError` that names
the path and the fix, rather than leave it out of their answer.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import shutil
import stat
import sys
from pathlib import Path
from typing import Any, Iterator

from ..errors import CacheError
from ..interface import running_command
from ..names import check_module_name, is_module_name
from ..paths import cache_root, printable
from .files import source_module
from .lock import build_lock
from .manifest import Manifest, ManifestError

__all__ = ["clear_cache", "cache_info"]

#: The directories of the cache whose files ``kernix cache info`` counts.
_AREAS = ("modules", "build", "sources", "direct", "specs", "toolchain")
#: The areas whose entries each belong to one module, found by their names.
_MODULE_AREAS = ("modules", "build", "sources", "direct")
#: The areas no one module owns, emptied by a clear of every module.
_SHARED_AREAS = ("direct", "specs", "toolchain")
#: The keyword of :func:`shutil.rmtree` that takes an error handler (``onerror`` is deprecated from 3.12).
_ON_ERROR = "onexc" if sys.version_info >= (3, 12) else "onerror"


def _lstat(path: str | os.PathLike[str]) -> os.stat_result | None:
    """``os.lstat(path)``, or ``None`` when nothing is there."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _is_real_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a directory, and not a symbolic link to one."""
    st = _lstat(path)
    return st is not None and stat.S_ISDIR(st.st_mode)


def _listing(directory: Path) -> list[os.DirEntry[str]]:
    """The entries of ``directory``: none when it is missing, not a directory, or a link.

    Raises
    ------
    OSError
        When it cannot be read.
    """
    if not _is_real_dir(directory):
        return []
    try:
        with os.scandir(directory) as it:
            return list(it)
    except (FileNotFoundError, NotADirectoryError):  # (removed meanwhile)
        return []


def _owner(area: str, entry: str) -> str:
    """The module an entry of ``area`` belongs to, by its name (``build/.ops.stale-*``
    and ``sources/ops-<hash>.cpp`` belong to ``ops``); the entry's own name when
    that is no module's (nothing kernix made)."""
    if area == "build" and entry.startswith("."):
        candidate = entry[1:].rpartition(".stale-")[0]
    elif area == "sources":
        candidate = source_module(entry) or ""
    else:
        candidate = entry
    return candidate if is_module_name(candidate) else entry


class _Clearing:
    """One run of :func:`clear_cache`: the entries it removed, and what it could not remove."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.removed = 0
        self.failures: list[tuple[str, OSError]] = []

    def owned(self) -> dict[str, list[tuple[str, str]]]:
        """What the cache's module areas hold, by the name it belongs to (see
        :func:`_owner`: a module name, or the name of an entry no module owns):
        ``(area, entry name)`` pairs, from one listing of each area."""
        owned: dict[str, list[tuple[str, str]]] = {}
        for area in _MODULE_AREAS:
            for e in self._listing(self.base / area):
                owned.setdefault(_owner(area, e.name), []).append((area, e.name))
        return owned

    def _failed(self, function: Any, path: str, exc: Any) -> None:
        """:func:`shutil.rmtree`'s error handler: remember what could not be removed."""
        exc = exc[1] if isinstance(exc, tuple) else exc  # (onerror gives sys.exc_info())
        if isinstance(exc, FileNotFoundError):
            return  # removed meanwhile
        if isinstance(exc, OSError) and exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return  # a directory whose files could not all go (remembered), or got new ones meanwhile
        self.failures.append((path, exc if isinstance(exc, OSError) else OSError(str(exc))))

    def remove(self, path: str | os.PathLike[str]) -> bool:
        """Remove ``path`` -- a file, a symbolic link (never what it points to) or a
        directory tree (whose links :func:`shutil.rmtree` removes, not follows) --
        and say whether it is gone; what cannot be removed is remembered."""
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return True
        except OSError as exc:
            self.failures.append((os.fspath(path), exc))
            return False
        try:
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(path, **{_ON_ERROR: self._failed})
            else:
                os.unlink(path)
        except OSError as exc:
            self._failed(os.unlink, os.fspath(path), exc)
        return _lstat(path) is None

    def _usable_lock(self, name: str) -> None:
        """Remove what would stop the build lock of ``name`` from being taken and
        that no kernix process can be holding, as the build lock refuses it: a
        ``locks`` that is not a directory, a lock file that is a symbolic link,
        not a regular file, or another user's (the refusal advises a clear)."""
        locks = self.base / "locks"
        if not _is_real_dir(locks):
            self.remove(locks)
            return
        lock = locks / f"{name}.lock"
        st = _lstat(lock)
        if st is not None and (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid()):
            self.remove(lock)

    def module(self, name: str, found: list[tuple[str, str]] | None = None) -> None:
        """Remove what belongs to ``name`` in the module areas: under its build
        lock when it is a module name (a build of it may be running), else at once
        (no load uses a name that is not a module name).

        ``found`` is what :meth:`owned` found of ``name``'s before the lock was
        taken (a clear of every module lists each area once for all names);
        ``None``: the areas are listed once the lock is held.
        """
        if not is_module_name(name):
            self._module_files(name, found)
            return
        self._usable_lock(name)
        with build_lock(self.base, name):
            self._module_files(name, found)

    def _module_files(self, name: str, found: list[tuple[str, str]] | None) -> None:
        """Remove ``name``'s entries (counting each directory ``modules/<name>/<key>``
        removed), work directories, inline sources and direct records: those in
        ``found`` (``None``: listed now), and those named ``name`` itself, which a
        build that held the lock may have made since ``found`` was listed."""
        modules = self.base / "modules"
        for entry in self._listing(modules / name) if _is_real_dir(modules) else ():  # (never through a link)
            was_entry = entry.is_dir(follow_symlinks=False)
            if was_entry:  # the manifest first: a reader that then misses a file knows the entry is going
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(entry.path, "manifest.json"))
            if self.remove(entry.path) and was_entry:
                self.removed += 1
        if found is None:
            found = self.owned().get(name, [])
        own = [(area, name) for area in _MODULE_AREAS if _owner(area, name) == name]
        for area in _MODULE_AREAS:
            if _is_real_dir(self.base / area):  # (never through a link, even one made since the listing)
                for entry in dict.fromkeys(e for a, e in (*found, *own) if a == area):
                    self.remove(self.base / area / entry)

    def _listing(self, directory: Path) -> list[os.DirEntry[str]]:
        """:func:`_listing`, remembering a directory that cannot be read."""
        try:
            return _listing(directory)
        except OSError as exc:
            self.failures.append((os.fspath(directory), exc))
            return []

    def shared(self) -> None:
        """Remove what no one module owns (inference set-ups, the records of modules
        whose entries are gone, specs, compiler answers, preludes), and areas that
        are not directories (links, files): kernix did not make them."""
        for area in (*_AREAS, "locks"):
            if area in _SHARED_AREAS or not _is_real_dir(self.base / area):
                self.remove(self.base / area)

    def check(self, name: str | None = None) -> None:
        """Raise if anything could not be removed by a clear of module ``name``
        (``None``: of every module).

        Raises
        ------
        CacheError
            Naming the first path that could not be removed, why, and the fix:
            the clear to run again is the one the user ran, ``kernix cache
            clear [NAME]`` or ``kernix.clear_cache([NAME])``.
        """
        if not self.failures:
            return

        path, exc = self.failures[0]
        more = len(self.failures) - 1
        also = f" and {more} more path{'s' if more > 1 else ''}" if more else ""
        entries = f"{self.removed} cache entr{'y' if self.removed == 1 else 'ies'}"
        if running_command() is not None:
            call = "kernix cache clear" + ("" if name is None else f" {name}")
            again = f"`{call}`"
        else:
            call = "clear_cache()" if name is None else f"clear_cache({name!r})"
            again = f"`kernix.{call}`"
        advice = _clear_advice(self.base, path, exc, again)
        raise CacheError(
            f"{call} removed {entries} but could not remove {printable(path)} "
            f"({exc.strerror or exc}){also}. {advice}"
        )


def _clear_advice(base: Path, path: str, exc: OSError, again: str) -> str:
    """What to do about ``path`` that a clear could not remove with ``exc``;
    ``again`` is the clear to run afterwards, as the user spells it."""
    if exc.errno in (errno.EACCES, errno.EPERM):
        return (
            f"Give yourself write permission in the cache (`chmod -R u+rwX {shlex.quote(printable(base))}`) and run "
            f"{again} again; what another user owns, that user (or root) must remove."
        )
    if exc.errno == errno.EROFS:
        return (
            "The file system that holds it is read-only: remount it read-write, or point KERNIX_CACHE_DIR "
            "(kernix.set_cache_dir()) at another directory."
        )
    return f"Remove it by hand (`rm -rf {shlex.quote(printable(path))}`) and run {again} again."


def clear_cache(name: str | None = None, *, root: str | os.PathLike[str] | None = None) -> int:
    """Delete cached builds: of module ``name``, or of every module and with
    them everything else the cache holds (inferred specs, the direct index's
    inference set-ups, compiler answers, precompiled preludes), so that
    :func:`cache_info` then counts nothing.

    Waits for a build of the module in progress to finish first, so it never
    pulls files from under a running build.  Libraries already loaded by a
    process stay usable.  Symbolic links (which kernix never creates below the
    cache root) are removed where they stand, never followed: nothing outside
    the cache is deleted.

    Parameters
    ----------
    name : str, optional
        The module whose builds to delete (default: every module's).
    root : path, optional
        The cache root (default: :func:`kernix.cache_root`).

    Returns
    -------
    int
        The number of module entries (directories ``modules/<name>/<key>``)
        removed; a symbolic link or a file where an entry belongs is removed
        but not counted.

    Raises
    ------
    InvalidNameError
        When ``name`` is not a module name.
    CacheError
        When something could not be removed (after removing all it could),
        naming it and the fix, or the build lock could not be taken.
    """
    base = Path(root) if root is not None else cache_root()
    clearing = _Clearing(base)
    if name is not None:
        clearing.module(check_module_name(name))
    else:
        owned = clearing.owned()
        owned.pop(".parse", None)  # direct/.parse: the inference set-ups, no module's (see shared())
        for n in sorted(owned):
            clearing.module(n, owned[n])
        clearing.shared()
    clearing.check(name)
    return clearing.removed


def _unreadable(exc: OSError) -> None:
    """:func:`os.walk`'s error handler: what is removed meanwhile is skipped, anything else raised."""
    if not isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        raise exc


def _directories(top: Path) -> Iterator[tuple[str, list[str], int]]:
    """``(path, names, size)`` for ``top`` and each directory below it, no
    symbolic link followed: the names in the directory, and the bytes of the
    regular files among them (for a ``top`` that is not a directory, no names
    and its own bytes if it is a regular file); what is removed meanwhile
    counts nothing.

    Raises
    ------
    OSError
        When a directory or file cannot be read.
    """
    st = _lstat(top)
    if st is None or not stat.S_ISDIR(st.st_mode):
        yield os.fspath(top), [], st.st_size if st is not None and stat.S_ISREG(st.st_mode) else 0
        return
    for directory, dirs, files in os.walk(top, onerror=_unreadable):
        size = 0
        for f in files:
            st = _lstat(os.path.join(directory, f))
            size += st.st_size if st is not None and stat.S_ISREG(st.st_mode) else 0
        yield directory, dirs + files, size


def _describe(entry: Path, size: int) -> dict[str, Any]:
    """What ``cache_info`` says of one entry, whose files hold ``size`` bytes."""
    try:
        m = Manifest.read(entry)
    except (OSError, ManifestError):
        return {"name": printable(entry.parent.name), "path": printable(entry), "damaged": True, "size_bytes": size}
    return {
        "name": printable(m.name),
        "key": m.key,
        "platform": m.platform,
        "functions": list(m.handlers),
        "path": printable(entry),
        "size_bytes": size,
        "created": m.created,
    }


def _survey(base: Path) -> tuple[int, dict[Path, int]]:
    """The bytes of the regular files in the cache's areas, and those of each
    module entry (a directory ``modules/<name>/<key>`` that holds a
    ``manifest.json``), from one walk that follows no symbolic link.

    Raises
    ------
    OSError
        When a directory or file cannot be read.
    """
    total = 0
    sizes: dict[str, int] = {}  # the bytes below each directory modules/<name>/<key>
    entries = []
    modules = os.fspath(base / "modules")
    for area in _AREAS:
        for directory, names, size in _directories(base / area):
            total += size
            below = directory[len(modules) + 1:].split(os.sep) if directory.startswith(modules + os.sep) else []
            if len(below) >= 2:
                entry = os.path.join(modules, below[0], below[1])
                sizes[entry] = sizes.get(entry, 0) + size
                if len(below) == 2 and "manifest.json" in names:
                    entries.append(entry)
    return total, {Path(entry): sizes[entry] for entry in entries}


def cache_info(*, root: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Describe the cache: its root, total size, and one record per module entry.

    The size counts every regular file of the cache's areas (``modules``,
    ``build``, ``sources``, ``direct``, ``specs``, ``toolchain``), never what a
    symbolic link points to.  Names and paths that are not UTF-8 are given with
    ``\\xNN`` escapes, so that any output can write them.

    Parameters
    ----------
    root : path, optional
        The cache root (default: :func:`kernix.cache_root`).

    Returns
    -------
    dict
        ``root``, ``total_bytes``, and ``modules``: per entry its ``name``,
        ``path`` and ``size_bytes`` and either ``damaged: True`` or its ``key``,
        ``platform``, ``functions`` and ``created`` time.

    Raises
    ------
    CacheError
        When a directory or file in the cache cannot be read, naming it and the fix.
    """
    base = Path(root) if root is not None else cache_root()
    try:
        total, sizes = _survey(base)
        entries = [_describe(entry, sizes[entry]) for entry in sorted(sizes)]
    except OSError as exc:
        where = printable(exc.filename if exc.filename is not None else base)
        raise CacheError(
            f"cannot read {where} in the kernix cache ({exc.strerror or exc}). Give yourself access "
            f"(`chmod -R u+rwX {shlex.quote(printable(base))}`) and run `kernix cache info` again."
        ) from exc
    return {"root": printable(base), "total_bytes": total, "modules": entries}
