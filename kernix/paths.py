"""Where kernix keeps and finds things: the cache root, its own C++ headers, jaxlib."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # as typing.TYPE_CHECKING: typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["cache_root", "cache_root_str", "absolute", "set_cache_dir", "include_dir", "jaxlib_install"]

_override: str | None = None


def _as_pathlib_spells(path: str) -> str:
    """``path`` with empty and ``.`` components dropped and exactly two
    leading slashes kept, as :mod:`pathlib` parses it."""
    lead = "//" if path.startswith("//") and not path.startswith("///") else "/" if path.startswith("/") else ""
    return lead + "/".join(part for part in path.split("/") if part not in ("", "."))


def absolute(path: str | os.PathLike[str]) -> str:
    """``str(Path(path).expanduser().absolute())`` without :mod:`pathlib`:
    ``~`` expanded, made absolute against the current directory, empty and
    ``.`` components dropped (``..`` is kept, as pathlib keeps it)."""
    p = os.path.expanduser(_as_pathlib_spells(os.fspath(path)))
    if not os.path.isabs(p):
        p = os.path.join(os.getcwd(), p)
    return _as_pathlib_spells(p)


def set_cache_dir(path: str | os.PathLike[str] | None) -> None:
    """Use ``path`` as the cache root for this process (``None`` restores the default).

    Takes precedence over ``KERNIX_CACHE_DIR``; a ``build_directory=`` given to a
    ``load_*`` call takes precedence over both.
    """
    global _override
    _override = None if path is None else absolute(path)


def cache_root() -> Path:
    """The cache root: :func:`set_cache_dir`, else ``$KERNIX_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/kernix`` (an absolute ``$XDG_CACHE_HOME``), else ``~/.cache/kernix``."""
    from pathlib import Path

    return Path(cache_root_str())


def cache_root_str() -> str:
    """:func:`cache_root` as a string, for the start-up paths that need no :mod:`pathlib`.

    A relative ``$XDG_CACHE_HOME`` is ignored, as the XDG Base Directory
    specification requires: it would put a cache in every directory a
    program starts from.
    """
    if _override is not None:
        return _override
    env = os.environ.get("KERNIX_CACHE_DIR")
    if env:
        return absolute(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if not (xdg and os.path.isabs(xdg)):
        xdg = os.path.join(os.path.expanduser("~"), ".cache")
    return absolute(os.path.join(xdg, "kernix"))


def include_dir() -> Path:
    """The directory holding kernix's C++ headers (``kernix/common.h``,
    ``brainevent/common.h``...): ``include/`` inside the installed package.

    Raises
    ------
    kernix.ToolchainError
        When the headers are missing (a broken install), saying how to repair it.
    """
    from pathlib import Path

    from .errors import ToolchainError

    here = Path(__file__).resolve().parent
    candidate = here / "include"
    if (candidate / "kernix" / "common.h").is_file():
        return candidate
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
