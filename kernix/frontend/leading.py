"""The ``#include`` lines a source file opens with, which inference precompiles.

Nothing in the file can change how those headers read, so they are
precompiled with the CUDA prelude (:func:`kernix.frontend.clangparse.parse`),
and the file is parsed with them blanked out (:func:`without_leading`): a
header without include guards read twice would report redefinitions nvcc
never reports. A directive in any doubt (a backslash-continued comment,
anything but a ``//`` comment after the header name) ends the list.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["LeadingInclude", "leading", "leading_includes", "without_leading"]

# One item of a file's opening: blank space, a comment, `#pragma once` or an `#include`.
_ITEM = re.compile(
    rb"""(?P<space>[ \t\r\n]+)
       | (?P<comment>//[^\r\n]*)
       | (?P<block>/\*.*?\*/)
       | (?P<pragma>\#[ \t]*pragma[ \t]+once\b)(?P<pragma_rest>[^\r\n]*)
       | (?P<inc>\#[ \t]*include[ \t]*(?:<(?P<sys>[^>\r\n]+)>|"(?P<quoted>[^"\r\n]+)"))(?P<rest>[^\r\n]*)""",
    re.DOTALL | re.VERBOSE,
)

# What may follow a directive on its line: blanks, then perhaps a `//` comment.
_REST = re.compile(rb"[ \t]*(?://[^\r\n]*)?")


class LeadingInclude(NamedTuple):
    """One opening ``#include``: the ``line`` for the prelude (a ``"..."`` include by
    its absolute path) and its ``start`` and ``end`` bytes in the file.
    """

    line: str
    start: int
    end: int


def _continued(text: bytes) -> bool:
    """Whether a line ends in a backslash (a line splice: the next line joins it)."""
    return text.rstrip(b" \t").endswith(b"\\")


def leading(raw: bytes, quote_dirs: Sequence[str] | None) -> list[LeadingInclude]:
    """The ``#include`` directives ``raw`` opens with, in order. A ``"..."`` include
    is looked for in ``quote_dirs``; one found nowhere, or any when ``quote_dirs``
    is ``None``, ends the list.
    """
    out: list[LeadingInclude] = []
    pos = 0
    while True:
        m = _ITEM.match(raw, pos)
        if m is None or not m.group():
            return out
        if m.group("comment") is not None and _continued(m.group()):
            return out
        if m.group("pragma") is not None:
            rest = m.group("pragma_rest")
            if _REST.fullmatch(rest) is None or _continued(rest):
                return out
        if m.group("inc"):
            rest = m.group("rest")
            if _REST.fullmatch(rest) is None or _continued(rest):
                return out
            if m.group("sys"):
                line = m.group("inc").decode("utf-8", errors="replace")
            else:
                name = m.group("quoted").decode("utf-8", errors="replace")
                found = None if quote_dirs is None else next(
                    (os.path.join(d, name) for d in quote_dirs if os.path.isfile(os.path.join(d, name))), None)
                if found is None:
                    return out
                line = f'#include "{os.path.abspath(found)}"'
            out.append(LeadingInclude(line, m.start(), m.end()))
        pos = m.end()


def leading_includes(raw: bytes, quote_dirs: Sequence[str] | None) -> list[str]:
    """The directive lines of :func:`leading` (for the precompiled prelude; with ``quote_dirs`` ``None``, the
    ``#include <...>`` lines before any other include or code)."""
    return [inc.line for inc in leading(raw, quote_dirs)]


def without_leading(raw: bytes, includes: Sequence[LeadingInclude]) -> bytes:
    """``raw`` with each of ``includes`` replaced by spaces: the same length and
    lines, so every position in the file stays where it was."""
    if not includes:
        return raw
    text = bytearray(raw)
    for inc in includes:
        text[inc.start:inc.end] = b" " * (inc.end - inc.start)
    return bytes(text)
