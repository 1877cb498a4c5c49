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
loaded module lives -- and the kernel drops it when the process ends.  An
eviction takes the exclusive ``flock`` without waiting before it removes
anything (:func:`claim`), so it never removes an entry that a live process
has loaded or is loading; a look-up that finds the exclusive lock taken
treats the entry as gone (:class:`Evicting`).  The file is opened with
``O_NOFOLLOW`` (a symbolic link there is refused, never followed).  Where
the file system refuses ``flock`` (NFS without a lock service) no lease is
held, and an eviction there cannot tell what is in use (it removes nothing:
the build lock it takes first is refused too).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
import weakref
from pathlib import Path

__all__ = ["LAST_USE", "TOUCH_INTERVAL_S", "Evicting", "claim", "create", "entry_time", "hold", "last_use", "lease"]

#: The file whose modification time is an entry's last use, and its lease.
LAST_USE = "last-use"
#: A load records a use when the recorded one is older than this (seconds).
TOUCH_INTERVAL_S = 3600.0

_OPEN = os.O_NOFOLLOW | os.O_CLOEXEC


class Evicting(Exception):
    """The entry is being removed by an eviction (its exclusive lock is held)."""


def _touch(fd: int, now: float | None = None) -> None:
    """Record a use now, if the recorded one is :data:`TOUCH_INTERVAL_S` old
    (or in the future); failing to (a read-only cache) is not an error."""
    now = time.time() if now is None else now
    with contextlib.suppress(OSError):
        if not 0 <= now - os.fstat(fd).st_mtime < TOUCH_INTERVAL_S:
            os.utime(fd)


def _share(fd: int) -> bool:
    """Take the shared lock on ``fd`` without waiting; whether it is held.

    Raises
    ------
    Evicting
        When an eviction holds the exclusive lock.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise Evicting from None
    except OSError:
        return False  # the file system refuses flock (ENOLCK): no lease to hold
    return True


def lease(entry: str | os.PathLike[str]) -> int | None:
    """Take a lease on the entry in directory ``entry`` and record a use.

    Returns
    -------
    int or None
        The descriptor holding the lease (give it to :func:`hold`), or
        ``None`` where the file system refuses ``flock``.

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
    fd = os.open(os.path.join(entry, LAST_USE), os.O_RDONLY | _OPEN)
    try:
        held = _share(fd)
    except BaseException:
        os.close(fd)
        raise
    _touch(fd)
    if held:
        return fd
    os.close(fd)
    return None


def create(entry: Path) -> int | None:
    """Create (or touch) the ``last-use`` file of an entry being published and
    take its lease, as :func:`lease` does; hold the module's build lock.

    Raises
    ------
    OSError
        When it cannot be created.
    """
    fd = os.open(entry / LAST_USE, os.O_RDWR | os.O_CREAT | _OPEN, 0o644)
    try:
        os.fchmod(fd, 0o644)  # whatever the umask
        os.utime(fd)
        held = _share(fd)
    except BaseException:
        os.close(fd)
        raise
    if held:
        return fd
    os.close(fd)
    return None


def hold(owner: object, fd: int | None) -> None:
    """Keep the lease ``fd`` (from :func:`lease` or :func:`create`) until
    ``owner`` is garbage-collected (or the process ends)."""
    if fd is not None:
        weakref.finalize(owner, os.close, fd)


@contextlib.contextmanager
def claim(entry: str | os.PathLike[str]):
    """Hold the exclusive lock of the entry in ``entry``, if no process holds
    a lease on it: yields the ``last-use`` file's modification time, or
    ``None`` when the entry is in use (or the file system refuses the lock);
    an entry without the file (written by an older kernix, or half removed)
    yields ``0.0`` and is locked by nothing.

    Hold the module's build lock around this, so no build publishes into the
    entry meanwhile.

    Raises
    ------
    OSError
        When the file cannot be opened (a symbolic link: ``ELOOP``; another
        user's: ``EACCES``).
    """
    try:
        fd = os.open(os.path.join(entry, LAST_USE), os.O_RDWR | _OPEN)
    except FileNotFoundError:
        yield 0.0
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
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
