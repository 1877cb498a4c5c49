"""The direct index: answers that need the toolchain to compute, remembered
under the fingerprint of their question with the stat of every file they
were computed from, as in ccache's direct mode.

An entry's key, or an inference parse's set-up, needs the compilers, jaxlib
and the CUDA headers found; its fingerprint covers the request's options and
the environment that steers the tool search.  While every file it was
computed from (the sources, the compilers, the directories searched for them,
kernix's own code) is unchanged, the remembered answer is the one the full
computation would give.

``direct/<module name>/<fingerprint[:32]>.rec`` holds a load request's entry
key; ``direct/.parse/<fingerprint[:32]>.rec`` an inference parse's set-up
(:mod:`kernix.frontend.setup`).  Each is a record (:mod:`kernix.store.files`)
of ``format``, ``fingerprint``, ``key`` (the answer) and ``files``
(``[path, inode, size, mtime_ns, ctime_ns]``, inode -1 for a missing file).
Anything off about a record is a miss, never an error.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Sequence

from .. import notes
from .files import COMPILER_ENVIRONMENT, UntrustedRecord, read_record, write_record
from .identity import code_stats

__all__ = ["DIRECT_FORMAT", "TOOL_ENVIRONMENT", "file_stats", "search_dirs", "lookup", "record", "records"]

DIRECT_FORMAT = 3  # 3: records vouch for kernix's code; fingerprints cover the compilers' environment

#: The environment variables that steer the search for compilers, CUDA and the
#: GPU architecture, and those that change what the compilers do
#: (:data:`kernix.store.files.COMPILER_ENVIRONMENT`).
TOOL_ENVIRONMENT = (
    "PATH", "CXX", "KERNIX_NVCC", "CUDA_HOME", "CUDA_PATH", "KERNIX_CUDA_ARCH", "KERNIX_CUDA_ARCH_LIST",
    *COMPILER_ENVIRONMENT,
)

def _file_stat(path: str) -> list[Any]:
    """``[path, inode, size, mtime_ns, ctime_ns]`` (:class:`~kernix.store.files.FileStat`; inode -1: missing)."""
    try:
        st = os.stat(path)  # (not through FileStat: a warm load checks every file of its record)
    except OSError:
        return [path, -1, 0, 0, 0]
    return [path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def search_dirs() -> list[str]:
    """The directories ``PATH`` searches for tools, each once, in order: a
    record that depends on which compiler is found vouches for each of them
    (a compiler installed into one later changes its identity)."""
    return list(dict.fromkeys(d for d in os.environ.get("PATH", "").split(os.pathsep) if d))


def file_stats(paths: Iterable[str]) -> list[list[Any]]:
    """The stat of each path, now: take them *before* computing the answer they vouch for."""
    return [_file_stat(p) for p in paths]


def records(root: str | os.PathLike[str], space: str) -> str:
    """The directory of one kind of record: a module name, or ``".parse"``."""
    return os.path.join(root, "direct", space)


def _record_path(root: str | os.PathLike[str], space: str, fingerprint: str) -> str:
    return os.path.join(records(root, space), f"{fingerprint[:32]}.rec")


def lookup(
    root: str | os.PathLike[str], space: str, fingerprint: str, *, valid: Callable[[Any], bool], what: str,
    verbose: bool = False,
) -> Any:
    """The answer remembered for ``fingerprint`` in ``space`` if ``valid``
    accepts it, else ``None`` (no record, a changed file, or a record that is
    not usable); a miss is logged as ``"<what>: direct miss: <why>"``."""
    value, why = _read(root, _record_path(root, space, fingerprint), fingerprint, valid)
    if value is None:
        notes.note(f"{what}: direct miss: {why}", verbose=verbose)
    return value


def _read(
    root: str | os.PathLike[str], path: str, fingerprint: str, valid: Callable[[Any], bool]
) -> tuple[Any, str]:
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


def record(
    root: str | os.PathLike[str], space: str, fingerprint: str, value: Any, files: Sequence[list[Any]], *, what: str,
    verbose: bool = False,
) -> None:
    """Remember ``value`` for ``fingerprint`` in ``space``; ``files`` are
    the :func:`file_stats` taken before the value was computed (the record
    vouches for kernix's own code as well).  Failing to remember is not an error."""
    data = {"format": DIRECT_FORMAT, "fingerprint": fingerprint, "key": value, "files": [*files, *code_stats()]}
    if not write_record(_record_path(root, space, fingerprint), data):
        return

    notes.note(f"{what}: direct record {fingerprint[:16]}", verbose=verbose)
