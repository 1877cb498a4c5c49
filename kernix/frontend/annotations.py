"""Finding ``// @BE`` annotations in C++/CUDA source text.

An annotation is a ``//`` line comment whose text *starts* with ``@BE``::

    // @BE scale_by
    // @BE scale_by arg ret attr.factor:float32 stream
    //@BE   scale_by

This module lexes just enough C++ to tell comments from string literals
(including raw strings), character literals, digit separators and block
comments, so that ``"// @BE x"`` inside a string, ``/* // @BE x */`` and
``// see @BE x`` are not annotations.  Which annotations sit in inactive
``#if`` regions, and which declaration each one belongs to, is decided by
:mod:`kernix.frontend.binding` with libclang's help.

Pure Python, no dependencies: the warm path never needs it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Annotation", "find_annotations"]

# One alternation; the first matching branch wins at each position.  Only the
# ``line`` group matters; the others exist to skip text that may contain "//".
_LEXER = re.compile(
    r"""
      (?P<raw>(?:u8|[uUL])?R"(?P<delim>[^()\\\s"]{0,16})\((?:.|\n)*?\)(?P=delim)")
    | (?P<ident>[A-Za-z_$][\w$]*)
    | (?P<number>\.?\d(?:[eEpP][+-]|'(?=\w)|[\w.])*)
    | (?P<string>"(?:\\(?:.|\n)|[^"\\\n])*")
    | (?P<char>'(?:\\(?:.|\n)|[^'\\\n])*')
    | (?P<block>/\*(?:.|\n)*?(?:\*/|\Z))
    | (?P<line>//(?:\\\r?\n|[^\n])*)
    | (?P<other>.|\n)
    """,
    re.VERBOSE,
)

_ANNOTATION = re.compile(r"//[ \t]*@BE(?![\w.])(?P<rest>.*)\Z", re.DOTALL)


@dataclass(frozen=True)
class Annotation:
    """One ``// @BE`` annotation.

    Attributes
    ----------
    name
        The function name it exports (``""`` when the annotation names none).
    tokens
        The inline arg_spec tokens after the name (empty when none).
    line, column
        1-based position of the ``//``.
    end_line
        The line the comment ends on (a ``\\``-continued comment spans several).
    """

    name: str
    tokens: tuple[str, ...]
    line: int
    column: int
    end_line: int

    @property
    def text(self) -> str:
        """The annotation as written, normalised to single spaces."""
        return " ".join(("// @BE", self.name, *self.tokens)).rstrip()


def find_annotations(source: str) -> list[Annotation]:
    """Return every ``// @BE`` annotation in ``source``, in source order.

    Parameters
    ----------
    source
        The file's text.  CRLF and CR line endings are accepted.

    Returns
    -------
    list of Annotation
        Annotations in inactive preprocessor regions are included; the caller
        filters them.
    """
    if "@BE" not in source:
        return []
    text = source.replace("\r\n", "\n").replace("\r", "\n")
    found: list[Annotation] = []
    line = 1
    line_start = 0
    for m in _LEXER.finditer(text):
        kind = m.lastgroup
        if kind == "other":
            if m.group() == "\n":
                line += 1
                line_start = m.end()
            continue
        chunk = m.group()
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
                        column=m.start() - line_start + 1,
                        end_line=line + chunk.count("\n"),
                    )
                )
        newlines = chunk.count("\n")
        if newlines:
            line += newlines
            line_start = m.start() + chunk.rfind("\n") + 1
    return found
