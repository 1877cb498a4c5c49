"""The direct index: answers that need the toolchain to compute (an entry's
key, an inference parse's set-up), remembered under the fingerprint of their
question (the request's options, the environment that steers the tool search)
with the stat of every file they were computed from, as in ccache's direct
mode: while those are unchanged, the answer is the one the full computation
would give.

``direct/<module name>/<fingerprint[:32]>.rec`` holds a load request's entry
key; ``direct/.parse/<fingerprint[:32]>.rec`` an inference parse's set-up
(:func:`kernix.frontend.speccache.parse_setup`).  Each is a record (:mod:`kernix.store.files`)
of ``format``, ``fingerprint``, ``key`` (the answer) and ``files``
(``[path, inode, size, mtime_ns, ctime_ns]``, inode -1 for a missing file).
Anything off about a record is a miss, never an error.

Every record also vouches for kernix's own Python code, which computed the answer: the
stats of the ``.py`` files of :func:`code_files`, whose content (:func:`code_identity`)
enters every cache key (docs/how-it-works.rst, "What the key covers").  Its headers
are left to the entry: an entry's record of the files its build read (the compilers'
dependency files) holds each kernix header the build included, so an edited one is a
miss there, which computes the key again (and a header the build did not read cannot
have changed its library); an inference set-up names the include directory, not what
is in it.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Iterable, Sequence

from .. import notes
from .files import (
    COMPILER_ENVIRONMENT, UntrustedRecord, content_key, read_record, recall, remember, write_record,
)

__all__ = ["DIRECT_FORMAT", "TOOL_ENVIRONMENT", "file_stats", "search_dirs", "lookup", "record", "code_files",
           "code_identity"]

DIRECT_FORMAT = 3  # 3: records vouch for kernix's (Python) code; fingerprints cover the compilers' environment

#: The environment variables that steer the search for compilers, CUDA and the
#: GPU architecture, and those that change what the compilers do
#: (:data:`kernix.store.files.COMPILER_ENVIRONMENT`).
TOOL_ENVIRONMENT = (
    "PATH", "CXX", "KERNIX_NVCC", "CUDA_HOME", "CUDA_PATH", "KERNIX_CUDA_ARCH", "KERNIX_CUDA_ARCH_LIST",
    *COMPILER_ENVIRONMENT,
)


def _file_stat(path: str) -> list[Any]:
    """``[path, inode, size, mtime_ns, ctime_ns]`` (inode -1: missing)."""
    try:
        st = os.stat(path)  # (not through FileStat: a warm load checks every file of its record)
    except OSError:
        return [path, -1, 0, 0, 0]
    return [path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def search_dirs() -> list[str]:
    """The directories ``PATH`` searches for tools, each once, in order (a
    record of which compiler is found vouches for each)."""
    return list(dict.fromkeys(d for d in os.environ.get("PATH", "").split(os.pathsep) if d))


def file_stats(paths: Iterable[str]) -> list[list[Any]]:
    """The stat of each path, now: take them *before* computing the answer they vouch for."""
    return [_file_stat(p) for p in paths]


def _record_path(root: str | os.PathLike[str], space: str, fingerprint: str) -> str:
    return os.path.join(root, "direct", space, f"{fingerprint[:32]}.rec")


def lookup(root: str | os.PathLike[str], space: str, fingerprint: str, *, valid: Callable[[Any], bool], what: str,
           verbose: bool = False) -> Any:
    """The answer remembered for ``fingerprint`` in ``space`` if ``valid``
    accepts it, else ``None`` (no record, a changed file, or a record that is
    not usable); a miss is logged as ``"<what>: direct miss: <why>"``."""
    value, why = _read(root, _record_path(root, space, fingerprint), fingerprint, valid)
    if value is None:
        notes.note(f"{what}: direct miss: {why}", verbose=verbose)
    return value


def _read(root: str | os.PathLike[str], path: str, fingerprint: str, valid: Callable[[Any], bool]) -> tuple[Any, str]:
    """``(answer, "hit")`` when the record at ``path`` holds, else ``(None, why not)``."""
    try:
        data = read_record(path, root)
    except FileNotFoundError:
        return None, "no record"
    except UntrustedRecord:
        return None, "the record could have been written by another user"
    except (OSError, ValueError) as exc:
        return None, f"unreadable record ({exc})"
    try:
        if data["format"] != DIRECT_FORMAT or data["fingerprint"] != fingerprint:
            return None, "a record of another format or request"
        value = data["key"]
        if not valid(value):
            return None, "a record without a usable answer"
        for recorded in data["files"]:
            if _file_stat(recorded[0]) != recorded:
                return None, f"{recorded[0]} changed"
    except (KeyError, TypeError, IndexError):
        return None, "a damaged record"
    return value, "hit"


def record(root: str | os.PathLike[str], space: str, fingerprint: str, value: Any, files: Sequence[list[Any]], *,
           what: str, verbose: bool = False) -> None:
    """Remember ``value`` for ``fingerprint`` in ``space`` (failing to is no
    error); ``files``: the :func:`file_stats` taken before it was computed."""
    code = [stat for stat in _identity()[1] if stat[0].endswith(".py")]  # (headers: see the module's docstring)
    data = {"format": DIRECT_FORMAT, "fingerprint": fingerprint, "key": value, "files": [*files, *code]}
    if write_record(_record_path(root, space, fingerprint), data):
        notes.note(f"{what}: direct record {fingerprint[:16]}", verbose=verbose)


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def code_files() -> list[str]:
    """The files whose content is kernix's identity, absolute, sorted: every Python module of
    ``kernix/language/``, ``frontend/`` and ``backend/``, ``platforms.py``, every file under ``include/``."""
    found = [os.path.join(_PACKAGE, "platforms.py")]
    for d in ("language", "frontend", "backend"):
        found += [e.path for e in os.scandir(os.path.join(_PACKAGE, d)) if e.name.endswith(".py") and e.is_file()]
    for top, _, names in os.walk(os.path.join(_PACKAGE, "include")):
        found += [os.path.join(top, n) for n in names]
    return sorted(found)


@functools.lru_cache(maxsize=None)
def _identity() -> tuple[str, list[list[Any]]]:
    """``(SHA-256 over the files' names and content, their stats taken before
    reading them)``; the digest is remembered per stats."""
    paths = code_files()
    stats = file_stats(paths)
    memo = content_key(stats)[:24]
    digest = recall("kernix-code", memo)
    if isinstance(digest, str) and len(digest) == 64:
        return digest, stats
    blobs = []
    for p in paths:
        with open(p, "rb") as f:
            blobs.append(f.read())
    digest = content_key(["kernix code", [os.path.relpath(p, _PACKAGE) for p in paths]], *blobs)
    remember("kernix-code", memo, digest)
    return digest, stats


def code_identity() -> str:
    """The SHA-256 of kernix's code, the same for the whole process."""
    return _identity()[0]
