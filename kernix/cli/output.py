"""Text the ``kernix`` commands print: compiler-style error lines, error
messages and sizes."""

from __future__ import annotations

import sys

from ..errors import SourceError
from ..paths import printable

__all__ = ["error_line", "print_error", "human_size"]


def error_line(err: SourceError) -> str:
    """``FILE:LINE:COL: error: message``, the form editors and compilers use
    (a file name's bytes that are not UTF-8 written ``\\xNN``)."""
    return printable(f"{err.location()}: error: {err.message}")


def print_error(command: str, message: str) -> None:
    """Print ``kernix COMMAND: error: message`` on stderr, as argparse prints a
    usage error (a file name's bytes that are not UTF-8 written ``\\xNN``)."""
    print(f"kernix {command}: error: {printable(message)}", file=sys.stderr)


def human_size(n: float) -> str:
    """``n`` bytes as ``"512 B"``, ``"1.5 KiB"``, ... ``"3.0 GiB"``."""
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
