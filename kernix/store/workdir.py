"""The working directory where ninja builds a module (``build/<name>/``),
kept between builds so ninja recompiles only what changed.  Hold the
module's build lock around its use.

Each successful build records its *stamp* (the compilers' and flags'
identity) and the version of every input it read, which ninja's modification
times alone do not tell: docs/how-it-works.rst, "What a build after a miss may reuse".
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import warnings
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..errors import CacheError
from ..notes import note
from ..paths import nearest_existing
from .files import UNSETTLED, FileStat, atomic_write, filesystem_now, version_current
from .trust import check_private, io_message, makedirs

__all__ = ["noexec_problem", "build_started", "work_directory", "record_inputs"]

#: A file present while a build runs: found on entry, the last builder died.
BUILDING_MARKER = ".kernix-building"
#: What the last successful build in the directory read, and with which tools.
INPUTS_RECORD = ".kernix-inputs.json"
_RECORD_FORMAT = 3


def noexec_problem(root: str | os.PathLike[str]) -> str | None:
    """Why no library built under the cache root ``root`` can be loaded (its
    file system is mounted ``noexec``), or ``None``."""
    path = nearest_existing(os.fspath(root), os.path.exists)  # not made yet: its future file system
    try:
        if not os.statvfs(path).f_flag & os.ST_NOEXEC:
            return None
    except OSError:
        return None
    return (
        f"the kernix cache {os.fspath(root)} is on a file system mounted noexec, so no library built there can be "
        "loaded. Point kernix at a directory on a file system mounted without noexec (`findmnt -T DIR` shows "
        "a directory's mount options) with KERNIX_CACHE_DIR, kernix.set_cache_dir() or build_directory=."
    )


def build_started(root: Path) -> int:
    """The file system's clock in ``build/`` under ``root``, now (read before a
    build reads any input); a :class:`CacheError` when no file can be made there."""
    directory = root / "build"
    makedirs(directory)
    try:
        return filesystem_now(directory)
    except OSError as exc:
        raise CacheError(io_message(directory, exc)) from exc


def record_inputs(path: Path, stamp: str, prints: Sequence[Sequence[Any]], started_ns: int) -> None:
    """Record, after a successful build in ``path`` that started at ``started_ns``,
    its ``stamp`` and the version of every input it read (:func:`settled_versions`)."""
    record = {"format": _RECORD_FORMAT, "stamp": stamp, "started_ns": started_ns, "inputs": list(prints)}
    atomic_write(path / INPUTS_RECORD, json.dumps(record).encode(), durable=False)


def _input_problem(version: list[Any], started_ns: int) -> str | None:
    inp = version[0]
    if version[-1] == UNSETTLED:
        return f"{inp} changed while its last build ran"
    try:
        if FileStat.of(inp).mtime_ns > started_ns:
            return None  # changed after that build (else it would be unsettled): ninja rebuilds what reads it
    except OSError:
        return f"{inp} is gone"
    if version_current(version):
        return None  # untouched, or touched or copied back with the same content
    return f"{inp} was replaced by different content with an older modification time"


def stale_reason(path: Path, stamp: str) -> str | None:
    """Why the objects in ``path`` cannot be trusted for a build with ``stamp``
    (``None``: ninja's view of what changed is right)."""
    try:
        record = json.loads((path / INPUTS_RECORD).read_bytes())
        if record.get("format") != _RECORD_FORMAT:
            return "its record of inputs has another format"
        if record["stamp"] != stamp:
            return "the compilers, flags or jaxlib changed since its last build"
        started_ns = int(record["started_ns"])
        for version in record["inputs"]:
            problem = _input_problem(list(version), started_ns)
            if problem is not None:
                return problem
    except FileNotFoundError:
        return "it has no record of its last build's inputs"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"its record of inputs is unreadable ({exc!r})"
    return None


def _empty(path: Path, name: str) -> None:
    """Move ``path`` aside and delete it (a compiler of a dead build may still write there)."""
    aside = path.with_name(f".{name}.stale-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.rename(path, aside)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
    else:
        shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def work_directory(root: Path, name: str, *, fresh: bool = False, stamp: str | None = None,
                   verbose: bool = False) -> Iterator[Path]:
    """The working directory for building module ``name``, under its build lock:
    emptied first with ``fresh``, when :func:`stale_reason` distrusts it for
    ``stamp``, or when a marker says its last builder died mid-build.  An
    ``OSError`` inside becomes a :class:`CacheError`."""
    path = root / "build" / name
    marker = path / BUILDING_MARKER
    if fresh:
        shutil.rmtree(path, ignore_errors=True)
    elif marker.exists():
        _empty(path, name)
        warnings.warn(f"kernix: a previous build of {name!r} in {path} was interrupted (its process died); "
                      "starting that build afresh", RuntimeWarning, stacklevel=3)
    elif stamp is not None and path.exists():
        check_private(path, root)
        why = stale_reason(path, stamp)
        if why is not None:
            note(f"{name}: starting the build in {path} afresh: {why}", verbose=verbose)
            _empty(path, name)
    makedirs(path)
    check_private(path, root)  # what is compiled here must not be replaceable by others
    try:
        marker.write_text(f"{os.getpid()}\n")
    except OSError as exc:
        raise CacheError(io_message(path, exc)) from exc
    try:
        yield path
    except Exception as exc:
        # An ordinary error (a failed compile) leaves a consistent directory;
        # an interrupt or a kill leaves the marker behind.
        with contextlib.suppress(OSError):
            marker.unlink()
        if isinstance(exc, OSError):
            raise CacheError(io_message(path, exc)) from exc
        raise
    with contextlib.suppress(OSError):
        marker.unlink()
