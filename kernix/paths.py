"""Where kernix keeps and finds things, and the paths users give it.

The cache root, kernix's own C++ headers and the running jaxlib; the names of
the files a user gives, shown safely and checked before use; and the walk up
a path to where it exists (which those checks, the cache's mount check and
the prebuilt trust check share).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Callable, Iterator, Sequence

__all__ = ["cache_root", "absolute", "set_cache_dir", "include_dir", "jaxlib_install", "printable", "utf8_problem",
           "text_problem", "regular_file_problem", "check_source", "directory_problem", "repeated_source", "ancestors",
           "nearest_existing"]

_override: str | None = None


def absolute(path: str | os.PathLike[str]) -> str:
    """``path`` with ``~`` expanded, made absolute against the current directory
    (``..`` kept: no link is resolved), as text."""
    return str(Path(path).expanduser().absolute())


def set_cache_dir(path: str | os.PathLike[str] | None) -> None:
    """Use ``path`` as the cache root for this process (``None`` restores the default).

    Takes precedence over ``KERNIX_CACHE_DIR``; a ``build_directory=`` given to a
    ``load_*`` call takes precedence over both.
    """
    global _override
    _override = None if path is None else absolute(path)


def cache_root() -> Path:
    """The cache root: :func:`set_cache_dir`, else ``$KERNIX_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/kernix``, else ``~/.cache/kernix``; a relative
    ``$XDG_CACHE_HOME`` is ignored, as the XDG Base Directory specification requires.
    """
    if _override is not None:
        return Path(_override)
    env = os.environ.get("KERNIX_CACHE_DIR")
    if env:
        return Path(env).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if not (xdg and os.path.isabs(xdg)):
        xdg = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg, "kernix").expanduser().absolute()


def include_dir() -> Path:
    """The directory of kernix's C++ headers (``include/`` in the package); a
    :class:`kernix.ToolchainError` saying how to repair a broken install.
    """
    here = Path(__file__).resolve().parent
    candidate = here / "include"
    if (candidate / "kernix" / "common.h").is_file():
        return candidate
    from .errors import ToolchainError
    raise ToolchainError(
        f"kernix's C++ headers are missing: {candidate / 'kernix' / 'common.h'} does not exist, so the "
        f"kernix imported from {here} is incomplete. If it is a source checkout, update it (the headers "
        "live in kernix/include/) and install it with `pip install -e .`. If it is an installed package, "
        "the distribution it came from lacked its headers: reinstalling the same file will not help; "
        "install a complete one (`pip install --force-reinstall --no-cache-dir kernix` fetches a fresh "
        "copy; check it with `python -m zipfile -l kernix-*.whl | grep include/kernix`) or build from "
        "the sources (`pip install --no-binary kernix kernix`, or `pip install .` in a checkout)."
    )


def jaxlib_install() -> tuple[str, str]:
    """The running jaxlib's version and the directory it is installed in."""
    import jaxlib

    version = getattr(jaxlib, "__version__", None) or jaxlib.version.__version__
    return str(version), os.path.dirname(os.path.abspath(jaxlib.__file__ or ""))


def printable(path: str | os.PathLike[str]) -> str:
    """``path`` (as :func:`os.fsdecode` gives it) with each byte that is not UTF-8 written ``\\xNN``."""
    path = os.fspath(path)
    try:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file name decodes to
        return path.encode("utf-8", "backslashreplace").decode("utf-8")


def utf8_problem(path: str) -> str | None:
    """Why ``path`` cannot be handed to libclang (which takes UTF-8), naming its first bad part, or ``None``."""
    if _is_utf8(path):
        return None
    part = next(p for p in reversed(path.split(os.sep)) if not _is_utf8(p))
    return f"{printable(part)} is not a valid UTF-8 name, and libclang opens files only by UTF-8 paths: rename it"


def text_problem(value: str, what: str) -> str | None:
    """Why ``value``, a flag or path given as ``what`` (``"-I"``), cannot reach a
    compiler, or ``None``: command lines, build files and libclang take UTF-8.
    """
    if _is_utf8(value):
        return None
    return (f"{what} = '{printable(value)}' is not valid UTF-8 text, which the compilers' command lines, the "
            "build files and libclang require: rename the directory or file it names (or link to it from a "
            "UTF-8 path), or write the value as UTF-8 text")


#: What a file that is not a regular file is, by its ``stat`` type.
_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def regular_file_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` is not a regular file to read a source from, or ``None``: missing,
    or not a regular file (found by ``stat``, since opening a FIFO blocks and
    ``/dev/zero`` never ends); its name is not checked."""
    path = os.fspath(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"{printable(path)} does not exist"
    except (OSError, ValueError) as exc:
        return f"cannot read {printable(path)}: {getattr(exc, 'strerror', None) or exc}"
    if stat.S_ISREG(st.st_mode):
        return None
    kind = next((k for test, k in _FILE_KINDS if test(st.st_mode)), "not a regular file")
    return (f"{printable(path)} is {kind}, not a regular file: a source is read several times (hashed, "
            "parsed, compiled), which only a regular file allows; save the code to a file and give that")


def check_source(path: str | os.PathLike[str], **options: Sequence[str]) -> None:
    """Check a source file (:func:`regular_file_problem`, and its name is UTF-8) and the flags or paths in
    ``options``, by the name the user gave them (:func:`text_problem`).

    Raises :class:`kernix.SourceNotFoundError` for a missing or irregular file,
    :class:`kernix.KernixError` for text that is not UTF-8.
    """
    for name, values in options.items():
        for i, value in enumerate(values):
            problem = text_problem(os.fspath(value), f"{name}[{i}]") if isinstance(value, (str, os.PathLike)) else None
            if problem is not None:
                from .errors import KernixError
                raise KernixError(problem)
    problem = regular_file_problem(path)
    if problem is not None:
        from .errors import SourceNotFoundError
        raise SourceNotFoundError(problem)
    problem = utf8_problem(os.fspath(path))
    if problem is not None:
        from .errors import KernixError
        raise KernixError(f"cannot parse {printable(path)}: {problem}")


def _is_utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (holds no undecodable byte of a file name)."""
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def directory_problem(path: str | os.PathLike[str]) -> str | None:
    """Why files cannot be written into the directory ``path`` (created if missing),
    or ``None``: it or its nearest existing ancestor is not a directory, or not writable.
    """
    p = nearest_existing(absolute(path))  # itself, or where it would be made
    if not os.path.isdir(p):
        return f"{p} is not a directory"
    if not os.access(p, os.W_OK | os.X_OK):
        return f"{p} is not writable"
    return None


def ancestors(path: str) -> Iterator[str]:
    """``path``, then each :func:`os.path.dirname` above it up to ``/`` or ``""`` (text only, nothing looked up)."""
    while True:
        yield path
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


def nearest_existing(path: str, exists: Callable[[str], bool] = os.path.lexists) -> str:
    """The first of ``path`` and its :func:`ancestors` that ``exists``
    (:func:`os.path.lexists` or :func:`os.path.exists`), else the top one.
    """
    for p in ancestors(path):
        if exists(p):
            return p
    return p


def repeated_source(paths: Sequence[str | os.PathLike[str]]) -> str | None:
    """Why ``paths``, one module's sources, name an existing file twice (however
    spelled or linked), or ``None``.
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
