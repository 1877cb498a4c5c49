"""Reading the cache's directories with ``lstat``, never through a symbolic
link (a link counts as a file of no size)."""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CacheError
from ..paths import printable
from .entries import LAST_USE, entry_time

__all__ = ["AREAS", "Survey", "read_survey", "directories", "is_real_dir", "listing", "lstat_or_none", "survey"]

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
    ``complete``; last use: ``used``), work directory (``workdirs``) and
    directory a build moved aside (``leftovers``); ``preludes``: the files in
    ``toolchain/``, ``(size, later of atime and mtime)`` by name."""

    total: int = 0
    entries: dict[str, int] = field(default_factory=dict)
    complete: set[str] = field(default_factory=set)
    used: dict[str, float] = field(default_factory=dict)
    workdirs: dict[str, int] = field(default_factory=dict)
    leftovers: dict[str, int] = field(default_factory=dict)
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
                into = found.leftovers if below[0].startswith(".") else found.workdirs
                into[work] = into.get(work, 0) + size
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
