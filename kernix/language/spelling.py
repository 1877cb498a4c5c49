"""The C++ spellings a spec carries into generated code, and what they may contain.

A spec read back from the cache is written into generated C++ (the shim calls
``qualified_name``, casts to a parameter's ``canonical_type``, takes the
function's address with its ``function_type``), so each spelling is checked
to hold nothing that could end a statement or open a block, string or
comment.
"""

from __future__ import annotations

import re

__all__ = ["api_spelling", "is_qualified_name", "is_type_spelling", "is_function_type"]

_QUALIFIED_RE = re.compile(r"(?:::)?[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*")
# A canonical type: identifiers, ::, template brackets and commas, numbers,
# pointers, references, spaces (no "/", so no comment either).
_TYPE_RE = re.compile(r"[A-Za-z0-9_:<>,*& -]*")
# A function type as clang spells a canonical one: the return type, then the
# parameter types in parentheses, perhaps ``noexcept``.  Parentheses and
# brackets appear inside, in function-pointer and array parameter types.
_FUNCTION_TYPE_RE = re.compile(r"[A-Za-z0-9_:<>,*&\[\] -]*\([A-Za-z0-9_:<>,*&()\[\] -]*\)(?: noexcept)?")
# What clang prints for types that no declaration at file scope can name.
_UNSPELLABLE = ("(anonymous", "(unnamed", "(lambda", "type-parameter-", "<dependent", "__attribute__")
# kernix's C++ API types, in the namespace of their declaration.
_KERNIX_API = re.compile(r"(?<![\w:])kernix::(?=(?:Tensor|TensorOf|InOut|InOutOf|Span|Scratch|State|ThreadPool)\b)")


def api_spelling(text: str) -> str:
    """``text`` (a type as clang spells it) with kernix's API types named ``BE::``.

    kernix's headers declare the C++ API in namespace kernix and name it BE
    too (``namespace BE = kernix;``): clang spells a canonical type with the
    namespace's own name, ``kernix::Tensor``, whichever name the source wrote.
    A spec says ``BE::`` (brainevent's name, valid C++ wherever kernix's
    headers are included), so the two spellings give one spec.
    """
    return _KERNIX_API.sub("BE::", text)


def is_qualified_name(text: str) -> bool:
    """Whether ``text`` is a C++ name with optional namespaces (``ops::scale_by``)."""
    return _QUALIFIED_RE.fullmatch(text) is not None


def is_type_spelling(text: str) -> bool:
    """Whether ``text`` may be written into generated C++ as a type."""
    return _TYPE_RE.fullmatch(text) is not None


def is_function_type(text: str) -> bool:
    """Whether ``text`` is ``""`` or a function type that can be written at
    file scope (see :attr:`kernix.FunctionSpec.function_type`)."""
    return text == "" or (
        _FUNCTION_TYPE_RE.fullmatch(text) is not None and not any(bad in text for bad in _UNSPELLABLE)
    )
