"""The inter-process build lock of a module: an ``flock`` on
``locks/<name>.lock`` (``O_NOFOLLOW``, ``0600``, in a trust-checked
directory), which the kernel drops when its holder dies.  The holder writes
its pid and start time into it, for waiters to name it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from pathlib import Path
from typing import Iterator

from ..errors import CacheError
from ..notes import note
from .trust import check_private, io_message, makedirs

__all__ = ["build_lock", "lock_timeout", "ANNOUNCE_AFTER_S", "PRUNE_LOCK", "MEMOS_LOCK"]

#: Seconds a waiter waits before saying whom it waits for.
ANNOUNCE_AFTER_S = 3.0
#: The locks a prune and a merge into a memo (``Memos.update``) hold: no module's name starts with ``.``.
PRUNE_LOCK, MEMOS_LOCK = ".prune", ".memos"


def lock_timeout() -> float:
    """Seconds to wait for another process's build: ``$KERNIX_LOCK_TIMEOUT``, default 1800."""
    raw = os.environ.get("KERNIX_LOCK_TIMEOUT", "1800")
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise CacheError(f"KERNIX_LOCK_TIMEOUT={raw!r} is not a positive number of seconds")
    return value


def _open_in(root: Path, name: str) -> tuple[Path, int]:
    """The lock file of ``name`` under ``root`` and a descriptor of it, opened safely."""
    locks = root / "locks"
    makedirs(locks)
    check_private(locks, root)
    path = locks / f"{name}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise CacheError(io_message(path, exc)) from exc
    st = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(st.st_mode):
        problem = "it is not a regular file"
    elif st.st_uid != os.getuid():
        problem = f"it is owned by another user (uid {st.st_uid})"
    if problem is not None:
        os.close(fd)
        raise CacheError(f"refusing to use the lock file {path}: {problem}. Delete it (or run `kernix cache clear`).")
    if st.st_mode & 0o077:
        os.fchmod(fd, 0o600)  # an older kernix made it 0644: nobody else may flock it
    return path, fd


def _holder(fd: int) -> tuple[int, float, str] | None:
    """(pid, start time) the holder wrote, if readable, and its state."""
    try:
        text = os.pread(fd, 256, 0).decode("ascii", "replace").split()
        pid, since = int(text[0]), float(text[1])
    except (OSError, ValueError, IndexError):
        return None
    return pid, since, _process_state(pid)


def _process_state(pid: int) -> str:
    """``"running"``, ``"stopped"`` (SIGSTOP, a debugger) or ``"gone"``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return "stopped" if state in (b"T", b"t") else "running"
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return "gone"
        except PermissionError:
            pass
        return "running"


def _describe(held: tuple[int, float, str] | None, name: str) -> str:
    if held is None:
        return f"another process building {name!r}"
    pid, since, state = held
    when = time.strftime("%H:%M:%S", time.localtime(since))
    doing = "pruning the cache" if name == PRUNE_LOCK else f"building {name!r}"
    return f"process {pid} ({state}), {doing} since {when}"


def _timeout_message(fd: int, name: str, path: Path, waited: float) -> str:
    held = _holder(fd)
    state = None if held is None else held[2]
    if state == "stopped":
        why = "held by a stopped process"
        advice = "Resume it (`kill -CONT <pid>`) or end it, then try again."
    elif state == "gone":
        why = "held by a process that has passed the lock on"
        advice = "Another process holds it now; try again, or raise KERNIX_LOCK_TIMEOUT (seconds)."
    else:
        why = "held by a live process that is still building"
        advice = "If that build is stuck, end that process; if it is slow, raise KERNIX_LOCK_TIMEOUT (seconds)."
    return f"gave up after {waited:.0f} s waiting for the build lock {path}, {why}: {_describe(held, name)}. {advice}"


def _refused_message(path: Path, root: Path, name: str, exc: OSError) -> str:
    return (f"the file system of the kernix cache {root} refuses the lock {path} ({exc.strerror or exc}), as an NFS "
            f"mount without lock support does. kernix holds it to build or remove module {name!r}, so that two "
            "processes never mix their files. Put the cache on a local disk (KERNIX_CACHE_DIR, or build_directory=), "
            "mount the share with locking (NFSv4, or NFSv3 with lockd running), or ship prebuilt modules "
            "(`kernix build`); modules already built in this cache load without the lock.")


def _take(fd: int, path: Path, root: Path, name: str, *, wait: bool, verbose: bool = False) -> bool:
    """Take the lock on ``fd`` as :func:`build_lock` says; whether it is held."""
    timeout = lock_timeout() if wait else 0.0
    start = time.monotonic()
    announced = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                return False
            waited = time.monotonic() - start
            if not announced and (verbose or waited >= ANNOUNCE_AFTER_S):
                note(f"waiting for {_describe(_holder(fd), name)} (lock {path})", verbose=True)
                announced = True
            if waited > timeout:
                raise CacheError(_timeout_message(fd, name, path, waited)) from None
            time.sleep(0.05)
            continue
        except OSError as exc:  # ENOLCK, EOPNOTSUPP...: building without it could mix two builds
            raise CacheError(_refused_message(path, root, name, exc)) from exc
        with contextlib.suppress(OSError):  # (the record only helps waiters name us)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {time.time():.3f}\n".encode(), 0)
        return True


@contextlib.contextmanager
def build_lock(root: Path, name: str, *, wait: bool = True, verbose: bool = False) -> Iterator[bool]:
    """Hold the build lock of module ``name`` under cache root ``root``: waiting for
    another holder (naming it after a few seconds) up to ``$KERNIX_LOCK_TIMEOUT``
    seconds, then a :class:`CacheError`; without ``wait``, only if no process holds
    it.  Yields whether it is held; a :class:`CacheError` when it cannot be opened
    safely, or the file system refuses ``flock``."""
    path, fd = _open_in(root, name)
    try:
        yield _take(fd, path, root, name, wait=wait, verbose=verbose)
    finally:
        os.close(fd)  # closing drops the flock
