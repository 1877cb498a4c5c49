"""The working directory where ninja builds a module (``build/<name>/``).

Kept between builds so ninja recompiles only what changed; trusted only
after the checks below.  Hold the module's build lock around its use.

ninja decides what to recompile by modification times alone: a source
replaced by a different file with an *older* mtime (``mv``, ``cp -p``,
``tar x``, ``rsync -a``, a branch switch, a header turned into a symlink to
an older file) looks up to date to it, and so does every object built by
another compiler behind the same path.  So after each successful build the
directory records (``.kernix-inputs.json``) its *stamp* (the compilers' and
flags' identity) and the version of every input the compilers read
(its path, stat and SHA-256).  The next build keeps the
directory only when the stamp is the same and every input is either
unchanged or newer than that build's start (so ninja sees it); otherwise it
starts from an empty directory, as it does when an input changed while
that build ran (an unsettled version: ninja may hold an object compiled
from what the file was before).  Editing a kernel body keeps the build
incremental.
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
from .files import UNSETTLED, FileStat, atomic_write, filesystem_now, version_current
from .trust import check_private, io_message, makedirs

__all__ = ["build_started", "work_directory", "record_inputs", "stale_reason", "BUILDING_MARKER", "INPUTS_RECORD"]

#: A file present while a build runs: found on entry, the last builder died.
BUILDING_MARKER = ".kernix-building"
#: What the last successful build in the directory read, and with which tools.
INPUTS_RECORD = ".kernix-inputs.json"
# 2: inputs are file versions (with the inode); 3: started_ns, the build's start by the file
# system's clock, replaces built_ns (taken by time.time_ns()), and inputs may be unsettled
_RECORD_FORMAT = 3


def build_started(root: Path) -> int:
    """The file system's clock (:func:`kernix.store.files.filesystem_now`) in
    ``build/`` under ``root``, now: read before a build reads any input.

    Raises
    ------
    CacheError
        When no file can be created there.
    """
    directory = root / "build"
    makedirs(directory)
    try:
        return filesystem_now(directory)
    except OSError as exc:
        raise CacheError(io_message(directory, exc)) from exc


def record_inputs(path: Path, stamp: str, prints: Sequence[Sequence[Any]], started_ns: int) -> None:
    """Record, after a successful build in ``path`` that started at
    ``started_ns`` (the file system's clock), the ``stamp`` it was built with
    and the version of every input it read
    (:func:`kernix.store.files.settled_versions`, taken after the build)."""
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
def work_directory(
    root: Path, name: str, *, fresh: bool = False, stamp: str | None = None, verbose: bool = False
) -> Iterator[Path]:
    """The working directory for building module ``name``; hold :func:`build_lock` around it.

    The directory is kept between builds so ninja recompiles only what
    changed (``fresh=True`` empties it first).  With a ``stamp``, it is also
    emptied when :func:`stale_reason` finds its objects untrustworthy; call
    :func:`record_inputs` with the same stamp after a successful build.

    An ``OSError`` inside the block (the cache disk is full, say) becomes a
    :class:`CacheError`.  While a build runs it holds a marker file; a marker found on
    entry means the previous builder died mid-build (we hold the lock, so it
    is not running), and its compilers, which run in process groups of their
    own, may still be writing there.  That directory is moved aside and
    deleted, and this build starts from an empty one: nothing a dead builder
    half-wrote is ever linked or published.
    """
    path = root / "build" / name
    marker = path / BUILDING_MARKER
    if fresh:
        shutil.rmtree(path, ignore_errors=True)
    elif marker.exists():
        _empty(path, name)
        warnings.warn(
            f"kernix: a previous build of {name!r} in {path} was interrupted (its process died); "
            "starting that build afresh", RuntimeWarning, stacklevel=3,
        )
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
