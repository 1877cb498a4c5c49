"""Finding ``// @BE`` annotations in C++/CUDA source text.

An annotation is a ``//`` line comment whose text starts with ``@BE``::

    // @BE scale_by arg ret attr.factor:float32 stream

Just enough C++ is lexed to tell comments from string, raw string and
character literals, so ``"// @BE x"`` or ``/* // @BE x */`` are not
annotations. :func:`find_near_misses` finds comments that look like one but
are not (``// @Be f``, ``/* @BE f */``, ``/// @BE f``), so a function is not
silently left out; ``@brief`` or ``@BEGIN`` are ordinary text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SHOWN", "Annotation", "NearMiss", "find_annotations", "find_near_misses", "scan"]

# The comments that cannot hold an annotation, the C++ tokens that can hold
# "//" or "/*" without starting a comment (raw strings, identifiers, numbers
# with digit separators, strings, character literals), and every other
# character; the first that matches at a position wins, as in a lexer (only
# the comments, which start with '/', could be moved ahead of the rest).
_TOKEN = r"""
      [^\w$"'/.]+                                            # nothing that starts a token
    | //[^\n@\\]*(?![^\n])                                     # a line comment without '@' or '\'
    | /\*(?:[^*@]|\*(?!/))*(?:\*/|\Z)                         # a block comment without '@'
    | (?:u8|[uUL])?R"(?P<delim>[^()\\\s"]{0,16})\((?:.|\n)*?\)(?P=delim)"   # a raw string
    | [A-Za-z_$][\w$]*                                        # an identifier
    | \.?\d(?:[eEpP][+-]|'(?=\w)|[\w.])*                     # a number (1'000 has no character literal)
    | "(?:\\(?:.|\n)|[^"\\\n])*"                               # a string
    | '(?:\\(?:.|\n)|[^'\\\n])*'                               # a character literal
    | [^/] | /(?![/*])                                        # any other character
"""

# Runs of tokens and comments that cannot hold an annotation (each run one
# match: a file's size costs no Python work per line), and the comments that
# may (containing '@', or a line comment continued by a backslash).
_LEXER = re.compile(
    rf"""(?P<skip>(?:{_TOKEN})+)
       | (?P<block>/\*(?:.|\n)*?(?:\*/|\Z))
       | (?P<line>//(?:\\\r?\n|[^\n])*)""",
    re.VERBOSE,
)

_ANNOTATION = re.compile(r"//[ \t]*@BE(?![\w.])(?P<rest>.*)\Z", re.DOTALL)

# A comment's text that starts with the marker in any case, then a blank or its end.
_MARKER = re.compile(r"@(?i:be)(?=[ \t\n]|\Z)(?P<rest>.*)\Z", re.DOTALL)
# A line comment's opening: `//`, or a documentation comment's `///` / `//!`.
_LINE_OPENING = re.compile(r"//[/!]*[ \t]*")


@dataclass(frozen=True)
class Annotation:
    """One ``// @BE`` annotation: the exported ``name`` (maybe ``""``), the inline
    arg_spec ``tokens``, the 1-based position of the ``//`` and the ``end_line``
    of a ``\\``-continued comment.
    """

    name: str
    tokens: tuple[str, ...]
    line: int
    column: int
    end_line: int

    @property
    def text(self) -> str:
        """The annotation as written, normalised to single spaces (at most
        :data:`SHOWN` characters of it: this is what messages quote)."""
        return _shorten(" ".join(("// @BE", self.name, *self.tokens)).rstrip())


@dataclass(frozen=True)
class NearMiss:
    """A comment that looks like a ``// @BE`` annotation but is not one: as
    ``written`` (at most :data:`SHOWN` characters), the ``name`` and ``tokens`` it
    seems to export, ``why`` it is not one, and its 1-based position.
    """

    written: str
    name: str
    tokens: tuple[str, ...]
    why: str
    line: int
    column: int

    @property
    def message(self) -> str:
        """What is wrong and what to write instead."""
        fix = " ".join(("// @BE", self.name or "<function_name>", *self.tokens))
        what = f"{self.name!r} is not exported" if self.name else "it exports nothing"
        return (f"`{self.written}` is not a kernix annotation ({self.why}), so {what}: write `{fix}` instead, "
                "on the line before the function (or reword the comment if no annotation was meant)")


def find_annotations(source: str) -> list[Annotation]:
    """Every ``// @BE`` annotation in ``source`` (any line endings), in order,
    inactive preprocessor regions included.
    """
    return scan(source, near_misses=False)[0]


def find_near_misses(source: str) -> list[NearMiss]:
    """Every near miss in ``source``, in order, inactive preprocessor regions included."""
    return scan(source)[1]


#: The most characters of a comment a message quotes (a warning is kept with
#: the file's inferred specs: its size must not follow the comment's).
SHOWN = 200


def _shorten(text: str) -> str:
    return text if len(text) <= SHOWN else text[:SHOWN].rstrip() + " ..."


def _near_miss(text: str, written: str, why: str, line: int, column: int) -> NearMiss:
    """The near miss whose marker starts ``text`` (``@be f ...``), written as ``written``."""
    m = _MARKER.match(text)
    assert m is not None
    words = re.sub(r"\\\n", " ", m.group("rest")).split()
    name = words[0] if words else ""
    tokens: list[str] = []
    size = len(name)
    for word in words[1:]:  # (as many as a message quotes)
        size += len(word) + 1
        if size > SHOWN:
            tokens.append("...")
            break
        tokens.append(word)
    return NearMiss(_shorten(" ".join(written.split("\n", 1)[0].split())), name, tuple(tokens), why, line, column)


def _block_near_misses(chunk: str, line: int, column: int) -> list[NearMiss]:
    """The lines of a block comment whose text starts with the marker."""
    out = []
    body = chunk[2:-2] if chunk.endswith("*/") else chunk[2:]
    for k, text in enumerate(body.split("\n")):
        stripped = text.lstrip(" \t").lstrip("*!").lstrip(" \t")
        if _MARKER.match(stripped):
            col = column + 2 + (len(text) - len(stripped)) if k == 0 else len(text) - len(stripped) + 1
            written = chunk if "\n" not in chunk else text
            out.append(_near_miss(stripped, written, "an annotation is a `//` line comment, not a block comment",
                                  line + k, col))
    return out


def _line_near_miss(chunk: str, line: int, column: int) -> NearMiss | None:
    """The near miss a line comment that is no annotation holds, if any."""
    opening = _LINE_OPENING.match(chunk)
    assert opening is not None
    text = chunk[opening.end():]
    if not _MARKER.match(text):
        return None
    if chunk[2:3] in ("/", "!"):
        why = "an annotation is a plain `//` comment, not a `///` or `//!` documentation comment"
    else:
        why = "the marker is `@BE`, in capitals"
    return _near_miss(text, chunk, why, line, column)


def scan(source: str, *, near_misses: bool = True) -> tuple[list[Annotation], list[NearMiss]]:
    """The annotations of ``source`` (:func:`find_annotations`) and, unless
    ``near_misses`` is false, its near misses (:func:`find_near_misses`), in
    one pass."""
    if "@BE" not in source and (not near_misses or re.search(r"@[Bb][Ee]", source) is None):
        return [], []
    text = source.replace("\r\n", "\n").replace("\r", "\n") if "\r" in source else source
    found: list[Annotation] = []
    missed: list[NearMiss] = []
    line = 1
    line_start = 0
    for m in _LEXER.finditer(text):
        start, end = m.span()
        if m.lastgroup == "skip":
            newlines = text.count("\n", start, end)
            if newlines:
                line += newlines
                line_start = text.rfind("\n", start, end) + 1
            continue
        chunk = m.group()
        kind = m.lastgroup
        if near_misses and re.search(r"@[Bb][Ee]", chunk):
            column = start - line_start + 1
            if kind == "block":
                missed += _block_near_misses(chunk, line, column)
            elif _ANNOTATION.match(chunk) is None:
                near = _line_near_miss(chunk, line, column)
                if near is not None:
                    missed.append(near)
        if kind == "line" and "@BE" in chunk:
            am = _ANNOTATION.match(chunk)
            if am is not None:
                body = re.sub(r"\\\n", " ", am.group("rest"))
                words = body.split()
                name = words[0] if words else ""
                found.append(
                    Annotation(
                        name=name,
                        tokens=tuple(words[1:]),
                        line=line,
                        column=start - line_start + 1,
                        end_line=line + chunk.count("\n"),
                    )
                )
        newlines = chunk.count("\n")
        if newlines:
            line += newlines
            line_start = start + chunk.rfind("\n") + 1
    return found, missed
