"""``kernix cache info`` and ``kernix cache clear``: reading and emptying the
store, following no symbolic link (:func:`survey`, the one walk of the cache that
they and a prune read, takes a link for a file of no size); what they cannot do
is a :class:`~kernix.errors.CacheError` naming the path and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shlex
import shutil
import stat
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CacheError
from ..interface import running_command
from ..language.names import check_module_name, is_module_name
from ..paths import cache_root, printable
from .entries import LAST_USE, entry_time
from .files import read_record, source_module
from .lock import build_lock
from .manifest import Manifest, ManifestError

__all__ = ["Clearing", "Survey", "cache_info", "clear_cache", "is_real_dir", "listing", "lstat_or_none",
           "owner", "read_survey", "survey"]

#: The directories of the cache whose files ``kernix cache info`` counts.
AREAS = ("modules", "build", "sources", "direct", "specs", "toolchain")


def lstat_or_none(path: str | os.PathLike[str]) -> os.stat_result | None:
    """``os.lstat(path)``, or ``None`` when nothing is there."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def is_real_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a directory, and not a symbolic link to one."""
    st = lstat_or_none(path)
    return st is not None and stat.S_ISDIR(st.st_mode)


def listing(directory: str | os.PathLike[str]) -> list[os.DirEntry[str]]:
    """The entries of ``directory``: none when it is missing, not a directory, or a link."""
    if not is_real_dir(directory):
        return []
    try:
        with os.scandir(directory) as it:
            return list(it)
    except (FileNotFoundError, NotADirectoryError):  # (removed meanwhile)
        return []


def _unreadable(exc: OSError) -> None:
    """:func:`os.walk`'s error handler: what is removed meanwhile is skipped, anything else raised."""
    if not isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        raise exc


def directories(top: str | os.PathLike[str]) -> Iterator[tuple[str, list[str], int, dict[str, os.stat_result]]]:
    """``(path, names, size, stats)`` for ``top`` and each directory below it,
    no link followed: its names, the bytes of its regular files and their
    ``lstat`` by name; what is removed meanwhile counts nothing."""
    st = lstat_or_none(top)
    if st is None or not stat.S_ISDIR(st.st_mode):
        yield os.fspath(top), [], st.st_size if st is not None and stat.S_ISREG(st.st_mode) else 0, {}
        return
    for directory, dirs, files in os.walk(top, onerror=_unreadable):
        size = 0
        stats = {}
        for f in files:
            st = lstat_or_none(os.path.join(directory, f))
            if st is not None and stat.S_ISREG(st.st_mode):
                size += st.st_size
                stats[f] = st
        yield directory, dirs + files, size, stats


@dataclass
class Survey:
    """What one walk of the cache found: ``total``, the bytes of its :data:`AREAS`;
    by path, the bytes below each entry (``entries``; with a manifest:
    ``complete``; last use: ``used``) and each directory of ``build/`` (``builds``: a
    work directory, or one a build moved aside, named ``.*``); ``preludes``: the files in
    ``toolchain/``, ``(size, later of atime and mtime)`` by name."""

    total: int = 0
    entries: dict[str, int] = field(default_factory=dict)
    complete: set[str] = field(default_factory=set)
    used: dict[str, float] = field(default_factory=dict)
    builds: dict[str, int] = field(default_factory=dict)
    preludes: dict[str, tuple[int, float]] = field(default_factory=dict)


def _two_below(directory: str, area: str) -> list[str]:
    """The names of ``directory`` below ``area`` (``[]`` when not below it)."""
    return directory[len(area) + 1:].split(os.sep) if directory.startswith(area + os.sep) else []


def survey(base: str | os.PathLike[str]) -> Survey:
    """Walk the cache under ``base`` once, following no symbolic link."""
    found = Survey()
    modules, build = os.path.join(base, "modules"), os.path.join(base, "build")
    toolchain = os.path.join(base, "toolchain")
    for area in AREAS:
        for directory, names, size, stats in directories(Path(base, area)):
            found.total += size
            below = _two_below(directory, modules)
            if len(below) >= 2:
                entry = os.path.join(modules, below[0], below[1])
                found.entries[entry] = found.entries.get(entry, 0) + size
                if len(below) == 2 and "manifest.json" in names:
                    found.complete.add(entry)
                st = stats.get(LAST_USE, stats.get("manifest.json")) if len(below) == 2 else None
                if st is not None:
                    found.used[entry] = st.st_mtime
            below = _two_below(directory, build)
            if below:
                work = os.path.join(build, below[0])
                found.builds[work] = found.builds.get(work, 0) + size
            if directory == toolchain:
                found.preludes = {f: (st.st_size, max(st.st_atime, st.st_mtime)) for f, st in stats.items()}
    for entry in found.entries:
        if entry not in found.used:  # (neither a last-use file nor a manifest: the directory's time)
            found.used[entry] = entry_time(entry)
    return found


def read_survey(base: str | os.PathLike[str], command: str) -> Survey:
    """:func:`survey`, for ``command`` (as the user ran it, quoted); a
    :class:`CacheError` naming what cannot be read and the fix."""
    try:
        return survey(base)
    except OSError as exc:
        where = printable(exc.filename if exc.filename is not None else base)
        raise CacheError(
            f"cannot read {where} in the kernix cache ({exc.strerror or exc}). Give yourself access "
            f"(`chmod -R u+rwX {shlex.quote(printable(base))}`) and run {command} again."
        ) from exc


#: A work directory moved aside: ``.NAME.stale-PID-NS``.
_ASIDE = re.compile(r"\.(.+)\.stale-\d+-\d+")
#: The areas whose entries each belong to one module, found by their names.
_MODULE_AREAS = ("modules", "build", "sources", "direct")
#: The areas no one module owns, emptied by a clear of every module.
_SHARED_AREAS = ("direct", "specs", "toolchain")
#: The keyword of :func:`shutil.rmtree` that takes an error handler (``onerror`` is deprecated from 3.12).
_ON_ERROR = "onexc" if sys.version_info >= (3, 12) else "onerror"


def owner(area: str, entry: str) -> str:
    """The module an entry of ``area`` belongs to, by its name (``build/.ops.stale-*``
    and ``sources/ops-<hash>.cpp`` are ``ops``'s); else the entry's own name."""
    if area == "build" and entry.startswith("."):
        aside = _ASIDE.fullmatch(entry)  # (the one name kernix.store.workdir moves a work directory to)
        candidate = aside.group(1) if aside else ""
    elif area == "sources":
        candidate = source_module(entry) or ""
    else:
        candidate = entry
    return candidate if is_module_name(candidate) else entry


class Clearing:
    """One run of :func:`clear_cache` (or of a prune): the entries it removed, and what it could not remove."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.removed = 0
        self.failures: list[tuple[str, OSError]] = []

    def owned(self) -> dict[str, list[tuple[str, str]]]:
        """``(area, entry name)`` pairs of the module areas, by :func:`owner`, from one listing of each."""
        owned: dict[str, list[tuple[str, str]]] = {}
        for area in _MODULE_AREAS:
            for e in self._listing(self.base / area):
                owned.setdefault(owner(area, e.name), []).append((area, e.name))
        return owned

    def _failed(self, function: Any, path: str, exc: Any) -> None:
        exc = exc[1] if isinstance(exc, tuple) else exc  # (onerror gives sys.exc_info())
        if isinstance(exc, FileNotFoundError):
            return  # removed meanwhile
        if isinstance(exc, OSError) and exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return  # a directory whose files could not all go (remembered), or got new ones meanwhile
        self.failures.append((path, exc if isinstance(exc, OSError) else OSError(str(exc))))

    def remove(self, path: str | os.PathLike[str]) -> bool:
        """Remove the file, link (never what it points to) or tree ``path`` and say
        whether it is gone; what cannot be removed is remembered."""
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
        return lstat_or_none(path) is None

    def _usable_lock(self, name: str) -> None:
        """Remove what the build lock of ``name`` refuses (a ``locks`` that is no
        directory; a lock file that is no regular file, or another user's)."""
        locks = self.base / "locks"
        if not is_real_dir(locks):
            self.remove(locks)
            return
        lock = locks / f"{name}.lock"
        st = lstat_or_none(lock)
        if st is not None and (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid()):
            self.remove(lock)

    def module(self, name: str, found: list[tuple[str, str]] | None = None) -> None:
        """Remove ``name``'s entries (counting them), work directories, inline
        sources and direct records, under its build lock when it is a module
        name: those in ``found`` (what :meth:`owned` found of it; ``None``:
        listed now), and those named ``name`` itself."""
        if is_module_name(name):
            self._usable_lock(name)
        with build_lock(self.base, name) if is_module_name(name) else contextlib.nullcontext():
            modules = self.base / "modules"
            for entry in self._listing(modules / name) if is_real_dir(modules) else ():  # (never through a link)
                was_entry = entry.is_dir(follow_symlinks=False)
                if was_entry:  # the manifest first: a reader that then misses a file knows the entry is going
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(entry.path, "manifest.json"))
                if self.remove(entry.path) and was_entry:
                    self.removed += 1
            if found is None:
                found = self.owned().get(name, [])
            own = [(area, name) for area in _MODULE_AREAS if owner(area, name) == name]
            for area in _MODULE_AREAS:
                if is_real_dir(self.base / area):  # (never through a link, even one made since the listing)
                    for entry in dict.fromkeys(e for a, e in (*found, *own) if a == area):
                        self.remove(self.base / area / entry)

    def _listing(self, directory: Path) -> list[os.DirEntry[str]]:
        try:
            return listing(directory)
        except OSError as exc:
            self.failures.append((os.fspath(directory), exc))
            return []

    def shared(self) -> None:
        """Remove what no one module owns, and areas that are not directories."""
        for area in (*AREAS, "locks"):
            if area in _SHARED_AREAS or not is_real_dir(self.base / area):
                self.remove(self.base / area)

    def problem(self, call: str, again: str) -> str:
        """What ``call`` could not remove, and the fix; ``again``: the call to repeat, quoted."""
        path, exc = self.failures[0]
        more = len(self.failures) - 1
        also = f" and {more} more path{'s' if more > 1 else ''}" if more else ""
        entries = f"{self.removed} cache entr{'y' if self.removed == 1 else 'ies'}"
        if exc.errno in (errno.EACCES, errno.EPERM):
            advice = (f"Give yourself write permission in the cache (`chmod -R u+rwX "
                      f"{shlex.quote(printable(self.base))}`) and run {again} again; what another user owns, that "
                      "user (or root) must remove.")
        elif exc.errno == errno.EROFS:
            advice = ("The file system that holds it is read-only: remount it read-write, or point KERNIX_CACHE_DIR "
                      "(kernix.set_cache_dir()) at another directory.")
        else:
            advice = f"Remove it by hand (`rm -rf {shlex.quote(printable(path))}`) and run {again} again."
        return (f"{call} removed {entries} but could not remove {printable(path)} ({exc.strerror or exc}){also}. "
                f"{advice}")


def clear_cache(name: str | None = None, *, root: str | os.PathLike[str] | None = None) -> int:
    """Delete cached builds: of module ``name``, or of every module and with
    them everything else the cache holds (inferred specs, compiler answers,
    precompiled preludes), so that :func:`cache_info` then counts nothing.

    A build of the module in progress is waited for; libraries already loaded
    stay usable; symbolic links are removed, never followed.

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
        When something could not be removed (naming it and the fix), or the
        build lock could not be taken.
    """
    base = Path(root) if root is not None else cache_root()
    clearing = Clearing(base)
    if name is not None:
        clearing.module(check_module_name(name))
    else:
        owned = clearing.owned()
        owned.pop(".parse", None)  # direct/.parse: the inference set-ups, no module's (see shared())
        for n in sorted(owned):
            clearing.module(n, owned[n])
        clearing.shared()
    if clearing.failures:
        if running_command() is not None:
            call = "kernix cache clear" + ("" if name is None else f" {name}")
            again = f"`{call}`"
        else:
            call = "clear_cache()" if name is None else f"clear_cache({name!r})"
            again = f"`kernix.{call}`"
        raise CacheError(clearing.problem(call, again))
    return clearing.removed


def _describe(entry: str, size: int, used: float, now: float) -> dict[str, Any]:
    record: dict[str, Any] = {
        "name": printable(os.path.basename(os.path.dirname(entry))), "key": printable(os.path.basename(entry)),
        "path": printable(entry), "size_bytes": size, "last_use": used, "age_s": max(0.0, now - used),
    }
    try:
        m = Manifest.read(Path(entry))
    except (OSError, ManifestError) as exc:
        record.update(damaged=True, why=str(exc))  # (another format: another kernix version's)
        return record
    record.update(name=printable(m.name), key=m.key, platform=m.platform, functions=list(m.handlers),
                  sources=[printable(s) for s in m.sources], created=m.created)
    return record


def cache_info(*, root: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Describe the cache: its root, total size (every regular file of its
    areas, never what a symbolic link points to), and one record per entry
    (each version of a module is one).  Names that are not UTF-8 are given
    with ``\\xNN`` escapes.

    Parameters
    ----------
    root : path, optional
        The cache root (default: :func:`kernix.cache_root`).

    Returns
    -------
    dict
        ``root``, ``total_bytes``, and ``modules``: one record per entry (a
        directory ``modules/<name>/<key>`` holding a manifest), by name and
        the last used first: its ``name``, ``key``, ``path``,
        ``size_bytes``, ``last_use`` (seconds since the epoch) and ``age_s``
        (seconds since then), and either ``damaged: True`` and ``why``, or its
        ``platform``, ``functions``, ``sources`` (the files its functions come
        from) and ``created`` time; and ``tuning``: one record per table of
        ``tune=`` choices (a module's library on one device), its ``module``,
        ``device``, ``digest`` (the library's) and ``entries`` (the key of a
        call -> ``choice``, the variant chosen, and ``us``, each variant's
        microseconds per call).

    Raises
    ------
    CacheError
        When a directory or file in the cache cannot be read (naming it and the fix).
    """
    base = Path(root) if root is not None else cache_root()
    now = time.time()
    found = read_survey(base, "`kernix cache info`")
    entries = [_describe(entry, found.entries[entry], found.used[entry], now) for entry in found.complete]
    entries.sort(key=lambda e: (e["name"], -e["last_use"], e["key"]))
    return {"root": printable(base), "total_bytes": found.total, "modules": entries, "tuning": _tables(base)}


def _tables(base: Path) -> list[dict[str, Any]]:
    """The tables of ``tune=`` choices remembered under ``base`` (memos of kind ``tune``:
    :mod:`kernix.runtime.tuning`), by module and device; an unreadable one is left out."""
    tables = []
    for path in sorted(Path(base, "toolchain").glob("tune-*.rec")):
        try:
            value = read_record(path, base)
        except (OSError, ValueError):
            continue
        if isinstance(value, dict) and isinstance(value.get("entries"), dict):
            tables.append({k: str(value.get(k)) for k in ("module", "device", "digest")}
                          | {"entries": {str(k): v for k, v in sorted(value["entries"].items())}})
    return sorted(tables, key=lambda t: (t["module"], t["device"]))
