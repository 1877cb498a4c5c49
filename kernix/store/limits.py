"""The cache's size limit (``$KERNIX_CACHE_MAX_SIZE``) and the spellings of sizes and ages."""

from __future__ import annotations

import os
import re

from ..errors import CacheError

__all__ = ["DEFAULT_MAX_SIZE", "MAX_SIZE_VARIABLE", "format_age", "format_size", "max_size", "parse_age", "parse_size"]

#: The limit when ``$KERNIX_CACHE_MAX_SIZE`` is unset: 5 GiB (see docs/cache.rst, "How big it grows").
DEFAULT_MAX_SIZE = 5 * 1024**3
#: The environment variable that sets the limit.
MAX_SIZE_VARIABLE = "KERNIX_CACHE_MAX_SIZE"

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(?:([KMGT])(?:I?B)?|B)?", re.IGNORECASE)
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([smhdw])")
_UNLIMITED = ("0", "none", "unlimited")


def parse_size(text: str, *, unlimited: bool = True) -> int | None:
    """The bytes (at least 1) ``text`` spells: a number, or one followed by
    ``K``, ``M``, ``G`` or ``T`` (powers of 1024, as ``du -h`` writes them;
    optionally ``B`` or ``iB`` after): ``"500M"``, ``"1.5GiB"``.  ``"0"``,
    ``"none"`` and ``"unlimited"`` are no limit, ``None``, where ``unlimited``
    allows it; anything else is a ``ValueError`` saying what a size looks like."""
    word = text.strip()
    if word.lower() in _UNLIMITED:
        if unlimited:
            return None
        raise ValueError(f"{text!r} is no limit; give a size such as 500M or 2G")
    match = _SIZE.fullmatch(word)
    if match is None:
        raise ValueError(
            f"{text!r} is not a size: write a number of bytes, or a number followed by K, M, G or T "
            "(powers of 1024), such as 500M or 2G"
        )
    value = int(float(match.group(1)) * _UNITS[(match.group(2) or "").upper()])
    if value < 1:
        raise ValueError(f"{text!r} is less than one byte; give a size such as 500M or 2G")
    return value


def parse_age(text: str) -> float:
    """The seconds ``text`` spells: a number followed by ``s``, ``m``, ``h``,
    ``d`` or ``w``: ``"30d"``, ``"12h"``; anything else (a bare ``30``, seconds
    or days?) is a ``ValueError`` saying what an age looks like."""
    match = _AGE.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"{text!r} is not an age: write a number followed by s, m, h, d or w (seconds, minutes, hours, "
            "days, weeks), such as 30d or 12h"
        )
    return float(match.group(1)) * _AGE_UNITS[match.group(2)]


def max_size() -> int | None:
    """The cache's size limit in bytes: ``$KERNIX_CACHE_MAX_SIZE`` (a
    :class:`CacheError` when it is no size), else :data:`DEFAULT_MAX_SIZE`;
    ``None``: no limit."""
    raw = os.environ.get(MAX_SIZE_VARIABLE)
    if raw is None or not raw.strip():
        return DEFAULT_MAX_SIZE
    try:
        return parse_size(raw)
    except ValueError as exc:
        raise CacheError(
            f"{MAX_SIZE_VARIABLE}: {exc}; or `0` for no limit (unset, the limit is {format_size(DEFAULT_MAX_SIZE)})"
        ) from None


def format_size(n: float | None) -> str:
    """``n`` bytes as ``"512 B"``, ``"1.5 KiB"`` ... ``"3.0 GiB"``; ``None`` as ``"no limit"``."""
    if n is None:
        return "no limit"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_age(seconds: float) -> str:
    """An age as a person reads it: ``"<1 min"``, ``"5 min"``, ``"3 h"``, ``"12 d"``."""
    if seconds < 60:
        return "<1 min"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds // 3600:.0f} h"
    return f"{seconds // 86400:.0f} d"
