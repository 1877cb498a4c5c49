"""Text the ``kernix`` commands print: compiler-style error lines and error messages."""

from __future__ import annotations

import sys

from ..errors import SourceError
from ..paths import printable

__all__ = ["error_line", "print_error"]


def error_line(err: SourceError) -> str:
    """``FILE:LINE:COL: error: message``, the form editors and compilers use
    (a file name's bytes that are not UTF-8 written ``\\xNN``)."""
    return printable(f"{err.location()}: error: {err.message}")


def print_error(command: str, message: str) -> None:
    """Print ``kernix COMMAND: error: message`` on stderr, as argparse prints a
    usage error (a file name's bytes that are not UTF-8 written ``\\xNN``)."""
    print(f"kernix {command}: error: {printable(message)}", file=sys.stderr)
