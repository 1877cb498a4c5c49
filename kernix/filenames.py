"""The names of the files a user gives: shown safely, and checked before use.

Kept apart from :mod:`kernix.paths` (which a warm load imports): only the
command line, inference and builds need these.
"""

from __future__ import annotations

import os

from .paths import absolute

TYPE_CHECKING = False  # as typing.TYPE_CHECKING: typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Sequence

__all__ = ["printable", "utf8_problem", "directory_problem", "repeated_source"]


def printable(path: str | os.PathLike[str]) -> str:
    """``path`` as text any output can take.

    Parameters
    ----------
    path
        A path as :func:`os.fsdecode` gives it: each byte of a name that is
        not valid UTF-8 held as a lone surrogate.

    Returns
    -------
    str
        ``path`` with each such byte written ``\\xNN``, as a Python bytes
        literal writes it; other paths unchanged.
    """
    path = os.fspath(path)
    if _is_utf8(path):
        return path
    try:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file name decodes to
        return path.encode("utf-8", "backslashreplace").decode("utf-8")


def utf8_problem(path: str) -> str | None:
    """Why ``path`` cannot be handed to libclang, or ``None``.

    Parameters
    ----------
    path
        A file's path (as :func:`os.fsdecode` gives it).

    Returns
    -------
    str or None
        The message naming the first part of ``path`` that is not valid UTF-8
        (libclang, and the build files, take UTF-8 paths), and the fix.
    """
    if _is_utf8(path):
        return None
    part = next(p for p in reversed(path.split(os.sep)) if not _is_utf8(p))
    return f"{printable(part)} is not a valid UTF-8 name, and libclang opens files only by UTF-8 paths: rename it"


def _is_utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (holds no undecodable byte of a file name)."""
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def directory_problem(path: str | os.PathLike[str]) -> str | None:
    """Why files cannot be written into the directory ``path``, which is
    created if missing, or ``None``.

    Parameters
    ----------
    path
        The directory.

    Returns
    -------
    str or None
        ``"X is not a directory"`` where ``path``, or the nearest of its
        ancestors that exists, is something else (a file), ``"X is not
        writable"`` where that directory cannot be written, else ``None``.
    """
    p = absolute(path)
    while not os.path.isdir(p):
        if os.path.lexists(p):
            return f"{p} is not a directory"
        parent = os.path.dirname(p)
        if parent == p:
            return None
        p = parent
    if not os.access(p, os.W_OK | os.X_OK):
        return f"{p} is not writable"
    return None


def repeated_source(paths: Sequence[str | os.PathLike[str]]) -> str | None:
    """Why ``paths``, one module's sources, name a file twice, or ``None``.

    Parameters
    ----------
    paths
        The source files, as given; ones that do not exist are skipped.

    Returns
    -------
    str or None
        The message naming the first file given again (the same path, the
        same path spelled differently, or a link to it), as given both times.
    """
    seen: dict[tuple[int, int], str] = {}
    for path in map(os.fspath, paths):
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            also = "" if seen[key] == path else f" (also as {seen[key]})"
            return f"the source {path} is given twice{also}: give each file once"
        seen[key] = path
    return None
