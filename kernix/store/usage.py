"""An entry's last use, and the leases that keep an entry in use from being evicted.

Every entry (manifest format 8 on) holds an empty file ``last-use``, created
before its manifest.  Its modification time is the entry's last use: a load
that finds the entry sets it to the present when it is more than
:data:`TOUCH_INTERVAL_S` old (a warm load pays one ``fstat``, and one
``utime`` an hour).  A cache that cannot be written keeps serving hits; their
use is then not recorded.

The same file is the entry's *lease*: a process that looks the entry up (or
publishes it) holds a shared ``flock`` on it for as long as it holds the
entry's :class:`~kernix.store.manifest.Manifest` -- in a load, as long as the
loaded module object lives -- and the kernel drops it when the process ends.
A process holds one descriptor per entry, shared by every load of it
(:class:`Lease`); one with no descriptor left (``EMFILE``) loads unleased.  An
eviction takes the exclusive ``flock`` without waiting before it removes
anything (:func:`claim`), so it never removes an entry that a live process
has loaded or is loading; a look-up that finds the exclusive lock taken
treats the entry as gone (:class:`Evicting`), as does one whose file was
removed between its ``open`` and its ``flock`` (a lock on a removed file
guards nothing).  The file is opened with
``O_NOFOLLOW`` (a symbolic link there is refused, never followed).  Where
the file system refuses ``flock`` (NFS without a lock service) no lease is
held, and an eviction there cannot tell what is in use (it removes nothing:
the build lock it takes first is refused too).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
import time
import weakref
from pathlib import Path

__all__ = ["LAST_USE", "TOUCH_INTERVAL_S", "Evicting", "Lease", "claim", "create", "entry_time", "hold", "last_use",
           "lease", "release"]

#: The file whose modification time is an entry's last use, and its lease.
LAST_USE = "last-use"
#: A load records a use when the recorded one is older than this (seconds).
TOUCH_INTERVAL_S = 3600.0

_OPEN = os.O_NOFOLLOW | os.O_CLOEXEC


class Evicting(Exception):
    """The entry is being removed by an eviction (its exclusive lock is held)."""


def _touch(fd: int, st: os.stat_result) -> None:
    """Record a use now, if the recorded one (``st``, the file's stat) is
    :data:`TOUCH_INTERVAL_S` old (or in the future); failing to (a read-only
    cache) is not an error."""
    if not 0 <= time.time() - st.st_mtime < TOUCH_INTERVAL_S:
        with contextlib.suppress(OSError):
            os.utime(fd)


class Lease:
    """This process's lease on one entry: one descriptor holding the shared
    ``flock``, however many of the entry's manifests are held (``count``);
    closed when the last of them is released."""

    __slots__ = ("count", "fd", "key")

    def __init__(self, key: str, fd: int) -> None:
        self.key, self.fd, self.count = key, fd, 1


# This process's leases, by entry directory (one descriptor per entry, however many loads).
_leases: dict[str, Lease] = {}
_leases_lock = threading.Lock()
_NO_DESCRIPTOR = (errno.EMFILE, errno.ENFILE)  # (no descriptor left: no lease, as where flock is refused)


def release(held: Lease | None) -> None:
    """Give up one hold of ``held`` (from :func:`lease` or :func:`create`);
    the last one closes its descriptor, dropping the lock."""
    if held is None:
        return
    with _leases_lock:
        held.count -= 1
        if held.count > 0:
            return
        if _leases.get(held.key) is held:
            del _leases[held.key]
    os.close(held.fd)


def _share(key: str, fd: int) -> Lease | None:
    """Take the shared lock on ``fd`` (the entry ``key``'s ``last-use`` file,
    just opened) without waiting and make it the entry's lease; ``None``
    (``fd`` closed) where the file system refuses ``flock`` (ENOLCK).

    Raises
    ------
    Evicting
        When an eviction holds the exclusive lock, or has removed the file
        since it was opened (an ``st_nlink`` of 0: a lock on it would guard nothing).
    """
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Evicting from None
        except OSError:
            os.close(fd)
            return None
        st = os.fstat(fd)
        if st.st_nlink == 0:
            raise Evicting
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise
    _touch(fd, st)
    held = Lease(key, fd)
    with _leases_lock:
        _leases[key] = held  # (replacing a lease on a file removed since: its holders keep it until released)
    return held


def _shared(key: str) -> Lease | None:
    """This process's lease on ``key``, one more hold taken, if it still
    guards the entry's ``last-use`` file (one ``fstat``); its use recorded."""
    with _leases_lock:
        held = _leases.get(key)
        if held is None:
            return None
        held.count += 1
    try:
        st = os.fstat(held.fd)
    except OSError:
        st = None
    if st is None or st.st_nlink == 0:  # (removed by a clear: the entry found now is another)
        release(held)
        with _leases_lock:
            if _leases.get(key) is held:
                del _leases[key]
        return None
    _touch(held.fd, st)
    return held


def lease(entry: str | os.PathLike[str]) -> Lease | None:
    """Take a lease on the entry in directory ``entry`` and record a use.

    A process holds one descriptor per entry: a lease it holds already is
    shared (one ``fstat``), else the ``last-use`` file is opened and locked.

    Returns
    -------
    Lease or None
        The lease (give it to :func:`hold`, or to :func:`release`), or
        ``None`` where the file system refuses ``flock`` or the process has
        no descriptor left (``EMFILE``): the entry is then used unleased.

    Raises
    ------
    FileNotFoundError
        When the entry has no ``last-use`` file (it is being removed, or is
        not a complete entry).
    Evicting
        When an eviction is removing the entry.
    OSError
        When the file cannot be opened (a symbolic link: ``ELOOP``).
    """
    key = os.fspath(entry)
    held = _shared(key)
    if held is not None:
        return held
    try:
        fd = os.open(os.path.join(key, LAST_USE), os.O_RDONLY | _OPEN)
    except OSError as exc:
        if exc.errno in _NO_DESCRIPTOR:
            return None
        raise
    return _share(key, fd)


def create(entry: Path) -> Lease | None:
    """Create (or touch) the ``last-use`` file of an entry being published and
    take its lease, as :func:`lease` does; hold the module's build lock.

    Raises
    ------
    OSError
        When it cannot be created.
    """
    key = os.fspath(entry)
    fd = os.open(entry / LAST_USE, os.O_RDWR | os.O_CREAT | _OPEN, 0o644)
    try:
        os.fchmod(fd, 0o644)  # whatever the umask
        os.utime(fd)
    except BaseException:
        os.close(fd)
        raise
    held = _shared(key)  # (this process had it loaded: the same file, still linked)
    if held is not None:
        os.close(fd)
        return held
    return _share(key, fd)


def hold(owner: object, held: Lease | None) -> None:
    """Keep the lease ``held`` (from :func:`lease` or :func:`create`) until
    ``owner`` is garbage-collected (or the process ends)."""
    if held is not None:
        weakref.finalize(owner, release, held)


@contextlib.contextmanager
def claim(entry: str | os.PathLike[str]):
    """Hold the exclusive lock of the entry in ``entry``, if no process holds
    a lease on it: yields the ``last-use`` file's modification time, or
    ``None`` when the entry is in use; an entry without the file (written by
    an older kernix, or half removed) yields ``0.0`` and is locked by nothing.

    Hold the module's build lock around this, so no build publishes into the
    entry meanwhile.

    Raises
    ------
    OSError
        When the file cannot be opened (a symbolic link: ``ELOOP``; another
        user's: ``EACCES``), or the file system refuses the lock (``ENOLCK``:
        whether the entry is in use cannot be told).
    """
    try:
        fd = os.open(os.path.join(entry, LAST_USE), os.O_RDWR | _OPEN)
    except FileNotFoundError:
        yield 0.0
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        yield os.fstat(fd).st_mtime
    finally:
        os.close(fd)


def last_use(entry: str | os.PathLike[str]) -> float | None:
    """The entry's last use (seconds since the epoch), or ``None`` when it has
    no ``last-use`` file (never followed if it is a link)."""
    try:
        return os.lstat(os.path.join(entry, LAST_USE)).st_mtime
    except OSError:
        return None


def entry_time(entry: str | os.PathLike[str]) -> float:
    """When the entry was last used: its ``last-use`` file's modification
    time, else (an entry of an older kernix, or half written) its manifest's,
    else its directory's (``0.0`` when it is gone)."""
    used = last_use(entry)
    if used is not None:
        return used
    for path in (os.path.join(entry, "manifest.json"), entry):
        with contextlib.suppress(OSError):
            return os.lstat(path).st_mtime
    return 0.0
