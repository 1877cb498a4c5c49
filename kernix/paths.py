"""Where kernix keeps and finds things: the cache root and its own C++ headers."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root", "set_cache_dir", "include_dir"]

_override: Path | None = None


def set_cache_dir(path: str | os.PathLike[str] | None) -> None:
    """Use ``path`` as the cache root for this process (``None`` restores the default).

    Takes precedence over ``KERNIX_CACHE_DIR``; a ``build_directory=`` given to a
    ``load_*`` call takes precedence over both.
    """
    global _override
    _override = None if path is None else Path(path).expanduser().absolute()


def cache_root() -> Path:
    """The cache root: :func:`set_cache_dir`, else ``$KERNIX_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/kernix``, else ``~/.cache/kernix``."""
    if _override is not None:
        return _override
    env = os.environ.get("KERNIX_CACHE_DIR")
    if env:
        return Path(env).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "kernix").absolute()


def include_dir() -> Path:
    """The directory holding ``kernix/common.h`` (and ``brainevent/common.h``)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "include", here.parent / "include"):
        if (candidate / "kernix" / "common.h").is_file():
            return candidate
    raise FileNotFoundError(
        f"kernix's C++ headers (kernix/common.h) are missing next to {here}; reinstall kernix"
    )
