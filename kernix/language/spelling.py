"""The C++ spellings a spec read back from the cache carries into generated code (``qualified_name``,
``canonical_type``, ``function_type``), checked to hold nothing that could end a statement or open a
block, string or comment."""

from __future__ import annotations

import re

__all__ = ["api_spelling", "is_qualified_name", "is_type_spelling", "is_function_type"]

_QUALIFIED_RE = re.compile(r"(?:::)?[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*")
_TYPE_RE = re.compile(r"[A-Za-z0-9_:<>,*& -]*")  # (no "/", so no comment either)
# A function type as clang spells a canonical one: the return type, then the parameter types in
# parentheses (which may hold parentheses and brackets), perhaps ``noexcept``.
_FUNCTION_TYPE_RE = re.compile(r"[A-Za-z0-9_:<>,*&\[\] -]*\([A-Za-z0-9_:<>,*&()\[\] -]*\)(?: noexcept)?")
# What clang prints for types that no declaration at file scope can name.
_UNSPELLABLE = ("(anonymous", "(unnamed", "(lambda", "type-parameter-", "<dependent", "__attribute__")
# kernix's C++ API types as clang spells them canonically: in namespace kernix, which kernix's headers
# also name BE (``namespace BE = kernix;``), whichever name the source wrote.
_KERNIX_API = re.compile(r"(?<![\w:])kernix::(?=(?:Tensor|TensorOf|InOut|InOutOf|Span|Scratch|State|ThreadPool)\b)")


def api_spelling(text: str) -> str:
    """``text`` with kernix's API types named ``BE::`` (``kernix::Tensor`` -> ``BE::Tensor``), as specs
    spell them: both names give one spec, valid C++ wherever kernix's headers are included."""
    return _KERNIX_API.sub("BE::", text)


def is_qualified_name(text: str) -> bool:
    """Whether ``text`` is a C++ name with optional namespaces (``ops::scale_by``)."""
    return _QUALIFIED_RE.fullmatch(text) is not None


def is_type_spelling(text: str) -> bool:
    """Whether ``text`` may be written into generated C++ as a type."""
    return _TYPE_RE.fullmatch(text) is not None


def is_function_type(text: str) -> bool:
    """Whether ``text`` is ``""`` or a function type that can be written at file scope."""
    return text == "" or (
        _FUNCTION_TYPE_RE.fullmatch(text) is not None and not any(bad in text for bad in _UNSPELLABLE)
    )
