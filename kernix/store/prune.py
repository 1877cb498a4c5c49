"""Keeping the cache within its size limit (:func:`max_size`, and the
spellings of sizes and ages): :func:`prune_cache` (``kernix cache prune``) and
the eviction after each build (:func:`after_publish`).
What they remove, in which order, and what they never do: docs/how-it-works.rst,
"Size and eviction".
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CacheError, OptionError
from ..interface import running_command
from ..language.names import is_module_name
from ..paths import cache_root, printable
from ..notes import note
from .admin import Clearing, Survey, is_real_dir, listing, lstat_or_none, owner, read_survey, survey
from .files import PRELUDE_FILE, source_module
from .lock import PRUNE_LOCK, build_lock
from .manifest import Manifest
from .entries import entry_time

__all__ = ["DEFAULT_MAX_SIZE", "MAX_SIZE_VARIABLE", "Candidate", "after_publish", "candidates", "format_age",
           "format_size", "max_size", "parse_age", "parse_size", "prune_cache"]

#: The limit when ``$KERNIX_CACHE_MAX_SIZE`` is unset: 5 GiB (see docs/cache.rst, "How big it grows").
DEFAULT_MAX_SIZE = 5 * 1024**3
#: The environment variable that sets the limit.
MAX_SIZE_VARIABLE = "KERNIX_CACHE_MAX_SIZE"

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(?:([KMGT])(?:I?B)?|B)?", re.IGNORECASE)
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([smhdw])")
_UNLIMITED = ("0", "none", "unlimited")


def parse_size(text: str, *, unlimited: bool = True) -> int | None:
    """The bytes (at least 1) ``text`` spells: a number, or one followed by
    ``K``, ``M``, ``G`` or ``T`` (powers of 1024, as ``du -h`` writes them;
    optionally ``B`` or ``iB`` after): ``"500M"``, ``"1.5GiB"``.  ``"0"``,
    ``"none"`` and ``"unlimited"`` are no limit, ``None``, where ``unlimited``
    allows it; anything else is a ``ValueError`` saying what a size looks like."""
    word = text.strip()
    if word.lower() in _UNLIMITED:
        if unlimited:
            return None
        raise ValueError(f"{text!r} is no limit; give a size such as 500M or 2G")
    match = _SIZE.fullmatch(word)
    if match is None:
        raise ValueError(
            f"{text!r} is not a size: write a number of bytes, or a number followed by K, M, G or T "
            "(powers of 1024), such as 500M or 2G"
        )
    value = int(float(match.group(1)) * _UNITS[(match.group(2) or "").upper()])
    if value < 1:
        raise ValueError(f"{text!r} is less than one byte; give a size such as 500M or 2G")
    return value


def parse_age(text: str) -> float:
    """The seconds ``text`` spells: a number followed by ``s``, ``m``, ``h``,
    ``d`` or ``w``: ``"30d"``, ``"12h"``; anything else (a bare ``30``, seconds
    or days?) is a ``ValueError`` saying what an age looks like."""
    match = _AGE.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"{text!r} is not an age: write a number followed by s, m, h, d or w (seconds, minutes, hours, "
            "days, weeks), such as 30d or 12h"
        )
    return float(match.group(1)) * _AGE_UNITS[match.group(2)]


def max_size() -> int | None:
    """The cache's size limit in bytes: ``$KERNIX_CACHE_MAX_SIZE`` (a
    :class:`CacheError` when it is no size), else :data:`DEFAULT_MAX_SIZE`;
    ``None``: no limit."""
    raw = os.environ.get(MAX_SIZE_VARIABLE)
    if raw is None or not raw.strip():
        return DEFAULT_MAX_SIZE
    try:
        return parse_size(raw)
    except ValueError as exc:
        raise CacheError(
            f"{MAX_SIZE_VARIABLE}: {exc}; or `0` for no limit (unset, the limit is {format_size(DEFAULT_MAX_SIZE)})"
        ) from None


def format_size(n: float | None) -> str:
    """``n`` bytes as ``"512 B"``, ``"1.5 KiB"`` ... ``"3.0 GiB"``; ``None`` as ``"no limit"``."""
    if n is None:
        return "no limit"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_age(seconds: float) -> str:
    """An age as a person reads it: ``"<1 min"``, ``"5 min"``, ``"3 h"``, ``"12 d"``."""
    if seconds < 60:
        return "<1 min"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds // 3600:.0f} h"
    return f"{seconds // 86400:.0f} d"


@dataclass(frozen=True)
class Candidate:
    """Something a prune may remove: an ``"entry"``, a ``"work directory"``,
    ``"leftovers"`` or a ``"prelude"`` (``files``: its record, then its files),
    of ``module`` (``""`` for a prelude), ``size`` bytes, last used at ``used``;
    an entry's ``key`` (its directory's name) or a prelude's (from its file names)."""

    kind: str
    module: str
    path: str
    size: int
    used: float
    key: str | None = None
    files: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``ops 1a2b3c4d5e6f``, ``ops (work directory)``, ``prelude 1a2b3c4d5e6f``."""
        if self.key is None:
            return f"{printable(self.module)} ({self.kind})"
        return f"{'prelude' if self.kind == 'prelude' else printable(self.module)} {self.key[:12]}"

    def record(self, now: float, **more: Any) -> dict[str, Any]:
        """What :func:`prune_cache` reports of it."""
        return {
            "kind": self.kind, "name": printable(self.module), "key": self.key, "label": self.label,
            "path": printable(self.path), "size_bytes": self.size, "last_use": self.used,
            "age_s": max(0.0, now - self.used), **more,
        }


#: Leftovers younger than this (seconds) may still be being deleted by their build.
LEFTOVERS_AGE_S = 3600.0


def _preludes(base: Path, found: Survey) -> list[Candidate]:
    """Each prelude: its record with its files, last used when one of them was last read or written."""
    groups: dict[str, list[str]] = {}
    for name in found.preludes:
        match = re.fullmatch(PRELUDE_FILE, name)
        if match is not None:
            groups.setdefault(match.group(1), []).append(name)
    out = []
    toolchain = base / "toolchain"
    for key, names in groups.items():
        names.sort(key=lambda n: not n.endswith(".rec"))  # the record first: no record names a removed file
        files = [n for n in names if not n.endswith(".rec")] or names
        out.append(Candidate("prelude", "", os.fspath(toolchain / names[0]),
                             sum(found.preludes[n][0] for n in names), max(found.preludes[n][1] for n in files), key,
                             tuple(os.fspath(toolchain / n) for n in names)))
    return out


def candidates(found: Survey, base: str | os.PathLike[str]) -> list[Candidate]:
    """What a prune may remove of what ``found`` (the cache under ``base``)
    holds, least recently used first."""
    out = []
    for path, size in found.entries.items():
        module = os.path.basename(os.path.dirname(path))
        if is_module_name(module):
            out.append(Candidate("entry", module, path, size, found.used[path], printable(os.path.basename(path))))
    for path, size in found.builds.items():
        kind = "leftovers" if os.path.basename(path).startswith(".") else "work directory"
        module = owner("build", os.path.basename(path))
        st = lstat_or_none(path)
        if is_module_name(module) and st is not None and (
                kind == "work directory" or st.st_mtime < time.time() - LEFTOVERS_AGE_S):
            out.append(Candidate(kind, module, path, size, st.st_mtime))
    out += _preludes(Path(base), found)
    out.sort(key=lambda c: (c.used, c.path))
    return out


_warned_unevictable = False


def _unevictable(total: int, evictable: int, limit: int) -> bool:
    """Whether what no prune removes alone fills ``limit`` (then nothing is
    evicted for it, with a ``RuntimeWarning`` once per process)."""
    fixed = total - evictable
    if fixed < limit:
        return False
    global _warned_unevictable
    message = (f"kernix: the part of the cache no eviction removes (inferred specs, compiler answers, direct records, "
               f"inline sources: {format_size(fixed)}) alone exceeds its size limit of {format_size(limit)}, so "
               f"nothing is evicted to make room; run `kernix cache clear`, or raise {MAX_SIZE_VARIABLE}")
    note("cache: " + message.removeprefix("kernix: "))
    if not _warned_unevictable:
        _warned_unevictable = True
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    return True


class _Pruning:
    """One prune: what it removed, what it kept and why."""

    def __init__(self, base: Path, *, held: str | None = None, keep: str | None = None) -> None:
        self.base = base
        self.held = held  # the module whose build lock this process holds already (a build that just published)
        self.keep = keep  # the entry that build published
        self.clearing = Clearing(base)
        self.removed: list[tuple[Candidate, str]] = []
        self.kept: list[tuple[Candidate, str]] = []

    def run(self, found: Survey, *, limit: int | None, cutoff: float | None) -> int:
        """Remove what is older than ``cutoff`` and, least recently used first,
        what exceeds ``limit``; the bytes left, by the estimate."""
        total = found.total
        found_candidates = candidates(found, self.base)
        if limit is not None and total > limit and _unevictable(total, sum(c.size for c in found_candidates), limit):
            limit = None
        for c in found_candidates:
            old = cutoff is not None and c.used < cutoff
            over = limit is not None and total > limit
            if not old and not over:
                break  # (the rest were used later)
            why = f"unused for {format_age(time.time() - c.used)}" if old else f"over the limit of {format_size(limit)}"
            kept = "it is the entry just built" if c.path == self.keep else self._remove(c)
            if kept is None:
                total -= c.size
                self.removed.append((c, why))
                note(f"cache: evicted {c.label} ({format_size(c.size)}, last used "
                     f"{format_age(time.time() - c.used)} ago): {why}", level=20)  # (logging.INFO)
            else:
                self.kept.append((c, kept))
                note(f"cache: kept {c.label} ({format_size(c.size)}): {kept}")
        return total

    def _remove(self, c: Candidate) -> str | None:
        """Remove ``c`` under its module's build lock; ``None``, or why it was kept."""
        if c.kind == "prelude":  # (no lock: a process that finds its files gone builds them again)
            return None if all(self.clearing.remove(f) for f in c.files) else "it could not be removed"
        if c.module == self.held:
            return self._remove_locked(c)
        try:
            with build_lock(self.base, c.module, wait=False) as locked:
                return self._remove_locked(c) if locked else "its module is being built or cleared"
        except CacheError as exc:  # (a lock file no kernix can hold: `kernix cache clear` removes it)
            return f"its build lock cannot be taken ({exc})"

    def _remove_locked(self, c: Candidate) -> str | None:
        if c.kind != "entry":
            return None if self.clearing.remove(c.path) else "it could not be removed"
        if entry_time(c.path) > c.used:
            return "used since the prune looked"
        try:  # the manifest first: no load trusts what is left
            os.unlink(os.path.join(c.path, "manifest.json"))
        except FileNotFoundError:
            pass
        except OSError as exc:  # (never a manifest without its library)
            self.clearing.failures.append((os.path.join(c.path, "manifest.json"), exc))
            return "its manifest could not be removed"
        if not self.clearing.remove(c.path):
            return "it could not be removed"
        self.clearing.removed += 1
        self._tidy(c.module)
        return None

    def _tidy(self, module: str) -> None:
        """Once ``module`` has no entry left, remove its directory, direct records and inline sources."""
        directory = self.base / "modules" / module
        if not is_real_dir(directory) or listing(directory):
            return
        with contextlib.suppress(OSError):
            directory.rmdir()
        if is_real_dir(self.base / "direct"):  # (never through a link: its target is not the cache's)
            self.clearing.remove(self.base / "direct" / module)
        for e in listing(self.base / "sources"):
            if source_module(e.name) == module:
                self.clearing.remove(e.path)


def _limit_of(max_size_: int | str | None, older_than: float | str | None) -> int | None:
    """The limit a :func:`prune_cache` call asks for."""
    if max_size_ is None:
        return max_size() if older_than is None else None
    if isinstance(max_size_, str):
        try:
            value = parse_size(max_size_, unlimited=False)
        except ValueError as exc:
            raise OptionError(f"max_size: {exc} (to remove every entry, use clear_cache())") from None
        assert value is not None
        return value
    if isinstance(max_size_, bool) or not isinstance(max_size_, int) or max_size_ < 1:
        raise OptionError(f"max_size={max_size_!r}: give a number of bytes (at least 1) or a size such as '2G'")
    return max_size_


def _age_of(older_than: float | str) -> float:
    if isinstance(older_than, str):
        try:
            return parse_age(older_than)
        except ValueError as exc:
            raise OptionError(f"older_than: {exc}") from None
    if isinstance(older_than, bool) or not isinstance(older_than, (int, float)) or not older_than >= 0:
        raise OptionError(f"older_than={older_than!r}: give seconds (0 or more) or an age such as '30d'")
    return float(older_than)


def prune_cache(max_size: int | str | None = None, *, older_than: float | str | None = None,
                root: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Remove least-recently-used cache entries, work directories and
    precompiled preludes until the cache fits ``max_size``, and those unused
    for ``older_than``; with neither, bring it within its configured limit
    (``$KERNIX_CACHE_MAX_SIZE``, default 5 GiB), as after every build.

    What a module being built holds is kept (and reported as kept); so are
    inferred specs and compiler answers, which count towards the size (when
    they alone fill ``max_size``, nothing is removed for it, with a
    ``RuntimeWarning``).  Symbolic links are never followed.

    Parameters
    ----------
    max_size : int or str, optional
        The size to bring the cache within: bytes, or a size such as
        ``"500M"`` or ``"2G"`` (K, M, G, T: powers of 1024).
    older_than : float or str, optional
        Remove what was last used longer ago than this: seconds, or an age
        such as ``"30d"`` or ``"12h"`` (s, m, h, d, w).
    root : path, optional
        The cache root (default: :func:`kernix.cache_root`).

    Returns
    -------
    dict
        ``root``; ``limit_bytes`` (the size asked for, ``None`` for none) and
        ``older_than_s``; ``removed`` and ``kept``, one record each (``kind``:
        ``"entry"``, ``"work directory"``, ``"leftovers"`` or ``"prelude"``,
        ``name``, ``key`` (entries, preludes), ``label`` (as printed),
        ``path``, ``size_bytes``, ``last_use``, ``age_s`` and ``reason``: why
        it was removed, or kept); ``freed_bytes``; and ``total_bytes``, the
        cache's size afterwards.

    Raises
    ------
    OptionError
        When ``max_size`` or ``older_than`` is not a size or an age.
    CacheError
        When something could not be removed or read (naming it and the fix),
        or ``$KERNIX_CACHE_MAX_SIZE`` is not a size.
    """
    cutoff_age = None if older_than is None else _age_of(older_than)
    limit = _limit_of(max_size, older_than)
    base = Path(root) if root is not None else cache_root()
    command = "`kernix cache prune`" if running_command() is not None else "`kernix.prune_cache()`"
    pruning = _Pruning(base)
    with build_lock(base, PRUNE_LOCK):
        found = read_survey(base, command)
        note(f"cache: {format_size(found.total)}, pruning to {format_size(limit)}"
             + ("" if cutoff_age is None else f" and what is unused for {format_age(cutoff_age)}"))
        now = time.time()
        pruning.run(found, limit=limit, cutoff=None if cutoff_age is None else now - cutoff_age)
        after = read_survey(base, command).total
    if pruning.clearing.failures:
        raise CacheError(pruning.clearing.problem(command.strip("`"), command))
    return {
        "root": printable(base), "limit_bytes": limit, "older_than_s": cutoff_age,
        "removed": [c.record(now, reason=why) for c, why in pruning.removed],
        "kept": [c.record(now, reason=why) for c, why in pruning.kept],
        "freed_bytes": sum(c.size for c, _ in pruning.removed), "total_bytes": after,
    }


def after_publish(root: Path, manifest: Manifest) -> None:
    """Bring the cache within its limit after ``manifest``'s entry was published,
    keeping it (the caller holds its build lock); what fails is a ``RuntimeWarning``."""
    try:
        limit = max_size()
    except CacheError as exc:
        warnings.warn(f"kernix: the cache was not kept within a size limit: {exc}", RuntimeWarning, stacklevel=4)
        return
    if limit is None:
        note("cache: no size limit ($KERNIX_CACHE_MAX_SIZE)")
        return
    pruning = _Pruning(root, held=manifest.name, keep=os.fspath(manifest.directory))
    try:
        with build_lock(root, PRUNE_LOCK, wait=False) as ours:
            if not ours:
                note("cache: another process is pruning the cache; leaving it to that one")
                return
            found = survey(root)
            if found.total <= limit:
                note(f"cache: {format_size(found.total)}, within its limit of {format_size(limit)}")
                return
            note(f"cache: {format_size(found.total)}, over its limit of {format_size(limit)}: "
                 "evicting the least recently used")
            left = pruning.run(found, limit=limit, cutoff=None)
            if left > limit:
                note(f"cache: still {format_size(left)} after evicting what could go (the rest is in use, "
                     "being built, or not evictable)")
    except (OSError, CacheError) as exc:  # (a directory it cannot read, a prune lock it cannot take)
        warnings.warn(f"kernix: could not keep the cache within its size limit: {exc}", RuntimeWarning, stacklevel=4)
        return
    if pruning.clearing.failures:
        warnings.warn("kernix: could not keep the cache within its size limit: "
                      + pruning.clearing.problem("the eviction after a build", "`kernix cache prune`"),
                      RuntimeWarning, stacklevel=4)
