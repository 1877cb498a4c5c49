"""Trust checks: nothing another user can write is ever compiled or loaded
(:func:`check_private`); :func:`makedirs` creates directories only their owner
can write, whatever the umask; :func:`io_message` turns an ``OSError`` into advice.
"""

from __future__ import annotations

import errno
import os
import stat

__all__ = ["check_private", "makedirs", "io_message", "is_private", "foreign_writer"]


def foreign_writer(st: os.stat_result, owners: tuple[int, ...], *, sticky_ok: bool) -> str | None:
    """Who, besides the users ``owners``, could replace what ``st`` describes:
    ``"owner"`` (another user owns it), ``"others"`` (others may write it; a
    sticky directory is exempt where ``sticky_ok``), else ``None``."""
    if st.st_uid not in owners:
        return "owner"
    sticky_dir = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
    if st.st_mode & stat.S_IWOTH and not (sticky_dir and sticky_ok):
        return "others"
    return None


_LINK = ("it is a symbolic link inside the kernix cache, which kernix never creates. "
         "Delete it (or run `kernix cache clear`).")


def _problem(p: str, st: os.stat_result, uid: int) -> str | None:
    if stat.S_ISLNK(st.st_mode):
        return _LINK
    writer = foreign_writer(st, (uid, 0), sticky_ok=st.st_uid == uid)  # (a sticky directory of the cache's own)
    if writer == "owner":
        return (
            f"it is owned by another user (uid {st.st_uid}). Use a cache directory of your own "
            "(set KERNIX_CACHE_DIR or call kernix.set_cache_dir())."
        )
    if writer == "others":
        return (
            "other users can write to it, so they could replace what kernix compiles or loads. "
            f"Fix it with `chmod o-w {p}` or use a private cache directory (KERNIX_CACHE_DIR)."
        )
    return None


def check_private(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> None:
    """Raise a :class:`CacheError` naming the fix if ``path``, or a directory
    between it and ``root``, is a symbolic link, another user's, or writable
    by others (paths that do not exist yet are skipped)."""
    why = _first_problem(root, path)
    if why is not None:
        from ..errors import CacheError
        raise CacheError(why)


def is_private(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
    """Whether :func:`check_private` accepts ``path`` (for caches whose entries are optional)."""
    return _first_problem(root, path) is None


def _first_problem(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> str | None:
    """``"refusing to use P: why"`` for the first of ``path`` and its directories up to ``root`` not private."""
    uid = os.getuid()
    top = os.fspath(root)
    inside = top.rstrip(os.sep) + os.sep
    chain = [os.fspath(path)]  # (strings: this runs on every warm load)
    while chain[-1] != top and chain[-1].startswith(inside):
        chain.append(os.path.dirname(chain[-1]))
    for p in chain:
        try:
            st = os.stat(p) if p == top else os.lstat(p)
        except (FileNotFoundError, NotADirectoryError):
            continue
        why = _problem(p, st, uid)
        if why is not None:
            return f"refusing to use {p}: {why}"
    return None


def makedirs(path: str | os.PathLike[str]) -> None:
    """Create ``path`` and its missing parents as ``0o755`` whatever the umask."""
    missing = []
    p = os.fspath(path)
    while not os.path.isdir(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    try:
        for d in reversed(missing):
            try:
                os.mkdir(d, 0o755)
                os.chmod(d, 0o755)
            except FileExistsError:  # (made meanwhile)
                if not os.path.isdir(d):
                    raise
    except OSError as exc:
        from ..errors import CacheError
        raise CacheError(io_message(path, exc)) from exc


def io_message(path: str | os.PathLike[str], exc: OSError) -> str:
    """What an ``OSError`` on the cache means, and what to do about it."""
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return (
            f"the kernix cache at {path} is not writable ({exc.strerror}). Point kernix at a "
            "writable directory with KERNIX_CACHE_DIR, kernix.set_cache_dir(), or build_directory=."
        )
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"no space left for the kernix cache at {path}. Free space, run `kernix cache clear`, "
            "or point KERNIX_CACHE_DIR at another disk."
        )
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        return (
            f"cannot use the kernix cache at {path}: a part of that path is a file, not a "
            f"directory ({exc.strerror}). Point KERNIX_CACHE_DIR (or build_directory=) at a directory."
        )
    if exc.errno == errno.ELOOP:
        return f"refusing to use {path}: {_LINK}"
    return f"cannot use the kernix cache at {path}: {exc}"
