"""Classifying the parameters that are neither tensors nor scalars.

Called by :mod:`kernix.frontend.classify` with a parameter's canonical type:

* ``BE::InOut`` / ``BE::InOutOf<T>`` (non-const): ``inout``, a buffer updated in place;
* ``BE::Span<const T>``, ``std::span<const T>``, ``xla::ffi::Span<const T>``,
  ``std::vector<T>`` (by value or ``const&``): ``attr.<name>:<dtype>[]``, an
  array attribute;
* ``std::string_view``, ``std::string`` (by value or ``const&``):
  ``attr.<name>:str``;
* ``BE::Scratch``: ``scratch``; ``BE::State<T>``: ``state``; ``BE::ThreadPool``: ``threads``.

Anything else is left to the caller (``None``).
"""

from __future__ import annotations

import keyword
import re
from typing import Any

from ..language.dtypes import ARRAY_ATTR_DTYPES
from ..language.names import is_identifier
from ..language.spelling import api_spelling
from ..language.spec import Param

__all__ = ["Reject", "classify_special", "check_attr_name", "RESERVED_ATTR_NAMES"]

#: Keyword names the Python callable takes itself (``fn(*inputs, out=..., vmap_method=...)``,
#: see :meth:`kernix.runtime.function.KernelFunction.__call__`): an attribute cannot use them.
RESERVED_ATTR_NAMES = frozenset({"self", "out", "vmap_method"})


class Reject(Exception):
    """A parameter kernix cannot pass; the message says why and how to fix it."""


# An inline namespace of a standard library (libstdc++'s __cxx11, libc++'s __1) is not part of the name.
_INLINE_NS = re.compile(r"::__\w+(?=::)")
_SPANS = ("BE::Span", "std::span", "xla::ffi::Span")
_STRINGS = {"std::basic_string_view": "std::string_view", "std::basic_string": "std::string"}
#: libclang's builtin integer type kinds (canonical), by signedness.
INTEGER_KINDS = {
    "CHAR_S": "signed", "SCHAR": "signed", "SHORT": "signed", "INT": "signed", "LONG": "signed",
    "LONGLONG": "signed", "CHAR_U": "unsigned", "UCHAR": "unsigned", "USHORT": "unsigned", "UINT": "unsigned",
    "ULONG": "unsigned", "ULONGLONG": "unsigned",
}
_ARRAY_TYPES = ", ".join(ARRAY_ATTR_DTYPES.values())


def _template_name(bare: str) -> str:
    """``std::vector<long>`` -> ``std::vector`` (inline namespaces dropped)."""
    return _INLINE_NS.sub("", bare.partition("<")[0].strip())


def _arg(c: Any, k: int) -> Any:
    if c.get_num_template_arguments() <= k:
        return None
    t = c.get_template_argument_type(k)
    return None if t.kind.name == "INVALID" else t


def integer_dtype(t: Any) -> str | None:
    """The dtype of the canonical builtin integer (or ``bool``) type ``t`` (by its size: LP64's
    ``long`` is 64-bit), or ``None``."""
    kind = t.kind.name
    if kind == "BOOL":
        return "bool"
    sign = INTEGER_KINDS.get(kind)
    bits = 8 * t.get_size()
    return f"{'u' if sign == 'unsigned' else ''}int{bits}" if sign and bits in (8, 16, 32, 64) else None


def _array_dtype(element: Any) -> str | None:
    c = element.get_canonical()
    dtype = {"FLOAT": "float32", "DOUBLE": "float64"}.get(c.kind.name) or integer_dtype(c)
    return dtype if dtype in ARRAY_ATTR_DTYPES else None


def check_attr_name(pname: str, where: str, what: str = "an attribute") -> None:
    """Raise :class:`Reject` unless ``pname`` can name an attribute (the Python keyword)."""
    if not pname:
        raise Reject(f"{where}: {what} needs a name; give the parameter a name: it becomes attr.<name>")
    if not is_identifier(pname):
        raise Reject(
            f"{where}: attribute names must be ASCII C++ identifiers (the arg_spec `attr.<name>` and the "
            "Python keyword argument use it); rename the parameter")
    if pname in RESERVED_ATTR_NAMES:
        raise Reject(
            f"{where}: {pname!r} is reserved by the Python callable (its keyword arguments are "
            f"{', '.join(sorted(RESERVED_ATTR_NAMES))}), so it cannot name an attribute; rename the parameter")
    if keyword.iskeyword(pname):
        raise Reject(
            f"{where}: {pname!r} is a Python keyword, so the Python callable could not take it as a keyword "
            f"argument ({pname}=...); rename the parameter, e.g. to {pname + '_'!r}")


def classify_special(c: Any, ref: str | None, is_const: bool, bare: str, pname: str, synth: str,
                     written: str, where: str) -> Param | None:
    """The :class:`Param` of a parameter of one of this module's types, or ``None``.

    ``c`` is the canonical type with any reference removed, ``ref`` the
    reference (``"&"``, ``"&&"`` or ``None``), ``bare`` the canonical spelling
    without cv-qualifiers, ``synth`` the name to use for an unnamed parameter.
    """
    name = _template_name(bare)
    if name in ("BE::InOut", "BE::InOutOf"):
        if is_const:
            raise Reject(f"{where}: a tensor updated in place is written, so it cannot be const; take a "
                         f"`{name}{'<T>' if name.endswith('Of') else ''}&`, or a `const BE::Tensor&` for an input")
        if ref == "&&":
            raise Reject(f"{where}: rvalue references are not supported; take a `{name}&`")
        if name == "BE::InOut":
            return Param(synth, "inout", written, bare, "tensor")
        return None  # BE::InOutOf<T>: the caller reads T as for BE::TensorOf<T>
    if name in ("BE::Scratch", "BE::ThreadPool") or name == "BE::State":
        if ref == "&&":
            raise Reject(f"{where}: rvalue references are not supported; take a `{name}&`")
        if name == "BE::Scratch":
            return Param(synth, "scratch", written, bare, "scratch")
        if name == "BE::ThreadPool":
            return Param(synth, "threads", written, bare, "threads")
        state = _arg(c, 0)
        if state is None or state.get_canonical().kind.name != "RECORD":
            raise Reject(f"{where}: BE::State<T> takes a class or struct T, the state itself")
        return Param(synth, "state", written, bare, "state")
    if name in _SPANS or name == "std::vector":
        return _array(c, ref, is_const, name, pname, written, where)
    if name in _STRINGS:
        element = _arg(c, 0)
        if element is None or element.get_canonical().kind.name not in ("CHAR_S", "CHAR_U"):
            raise Reject(f"{where}: a string attribute is a `std::string_view` or `const std::string&` of `char`")
        if ref == "&&" or (ref == "&" and not is_const):
            raise Reject(f"{where}: attributes are read-only; take a `{_STRINGS[name]}` by value or `const&`")
        check_attr_name(pname, where, "a string attribute")
        return Param(pname, "attr", written, bare, "string")
    return None


def _array(c: Any, ref: str | None, is_const: bool, name: str, pname: str, written: str, where: str) -> Param:
    element = _arg(c, 0)
    spelled = f"{name}<const T>" if name in _SPANS else "const std::vector<T>&"
    if ref == "&&" or (ref == "&" and not is_const):
        raise Reject(f"{where}: attributes are read-only; take a `{spelled}` by value or `const&`")
    extent = _bare_no_cv(c.spelling).partition("<")[2].rpartition(">")[0].partition(",")[2].strip().rstrip("UL")
    if name == "std::span" and extent and extent != str(2**64 - 1):
        raise Reject(f"{where}: a `std::span` of fixed extent cannot take an attribute of any length; "
                     "take a `std::span<const T>` (dynamic extent) and check its size()")
    if element is None:
        raise Reject(f"{where}: kernix cannot read the element type of `{name}`")
    if name in _SPANS and not element.is_const_qualified():
        inner = written.partition("<")[2].rpartition(">")[0].strip() or element.spelling
        raise Reject(f"{where}: an array attribute is read-only; take a `{name}<const {inner}>`")
    dtype = _array_dtype(element)
    if dtype is None or dtype not in ARRAY_ATTR_DTYPES:
        raise Reject(
            f"{where}: `{element.get_canonical().spelling}` is not an element type of an array attribute; XLA "
            f"passes arrays of {_ARRAY_TYPES} (no bool, no 16-bit floats: take integers, e.g. `{spelled}` of "
            "uint8_t, and convert)")
    check_attr_name(pname, where, "an array attribute")
    return Param(pname, "attr", written, _bare_no_cv(c.spelling), "array", dtype)


def _bare_no_cv(spelling: str) -> str:
    return api_spelling(re.sub(r"^(?:const\s+|volatile\s+)+|\s+(?:const|volatile)$", "", spelling.strip()))
