"""The working directory where ninja builds a module (``build/<name>/``).

Kept between builds so ninja recompiles only what changed; trusted only
after the checks below.  Hold the module's build lock around its use.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import warnings
from pathlib import Path
from typing import Iterator

from ..errors import CacheError
from .trust import check_private, io_message, makedirs

__all__ = ["build_directory", "BUILDING_MARKER"]

#: A file present while a build runs: found on entry, the last builder died.
BUILDING_MARKER = ".kernix-building"


@contextlib.contextmanager
def build_directory(root: Path, name: str, *, fresh: bool = False) -> Iterator[Path]:
    """The working directory for building module ``name``; hold :func:`build_lock` around it.

    The directory is kept between builds so ninja recompiles only what
    changed (``fresh=True`` empties it first).  An ``OSError`` inside the
    block (the cache disk is full, say) becomes a :class:`CacheError`.  While a build runs it holds a marker file; a marker found on
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
        aside = path.with_name(f".{name}.stale-{os.getpid()}-{time.monotonic_ns()}")
        try:
            os.rename(path, aside)
        except OSError:
            shutil.rmtree(path, ignore_errors=True)
        else:
            shutil.rmtree(aside, ignore_errors=True)
        warnings.warn(
            f"kernix: a previous build of {name!r} in {path} was interrupted (its process died); "
            "starting that build afresh", RuntimeWarning, stacklevel=3,
        )
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
