"""Inline sources: stored once under a name derived from their content."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ..errors import CacheError, KernixError
from .files import atomic_write
from .trust import check_private, io_message, makedirs

__all__ = ["write_source", "source_name_re"]


def source_name_re(name: str) -> "re.Pattern[str]":
    """File names of module ``name``'s inline sources: ``ops-<hash>.cpp``, not ``ops-v2-<hash>.cpp``."""
    return re.compile(re.escape(name) + r"-[0-9a-f]{16}\.[a-z]+")


def write_source(root: Path, name: str, text: str, ext: str) -> Path:
    """Store an inline source under a content-derived name; return its path."""
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise KernixError(
            f"the inline source of module {name!r} cannot be written as UTF-8: {exc.reason} at "
            f"character {exc.start} ({text[exc.start:exc.start + 1]!r}). Remove that character."
        ) from None
    digest = hashlib.sha256(data).hexdigest()[:16]
    path = root / "sources" / f"{name}-{digest}.{ext}"
    try:
        if not (path.is_file() and path.read_bytes() == data):
            makedirs(path.parent)
            atomic_write(path, data)
    except OSError as exc:
        raise CacheError(io_message(path, exc)) from exc
    check_private(path, root)  # it is about to be compiled
    return path
