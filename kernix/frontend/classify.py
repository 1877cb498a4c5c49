"""Turning a function declaration into a :class:`~kernix.language.spec.FunctionSpec`.

Each parameter is classified from its canonical type, so aliases count as what they name, by the
rules docs/reference/arg-spec.rst tabulates (with the refusals and their fixes).
"""

from __future__ import annotations

import keyword
import re
from typing import Any

from ..language.dtypes import ARRAY_ATTR_DTYPES, dtype_by_xla_name
from ..language.names import is_identifier
from ..language.spec import FunctionSpec, Param
from ..language.spelling import api_spelling, is_function_type
from ..errors import SourceError

__all__ = ["function_spec", "qualified_name", "element_dtype", "integer_dtype"]


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
_FLOATS = {"FLOAT": "float32", "DOUBLE": "float64"}


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


def check_attr_name(pname: str, where: str, what: str) -> None:
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
    if name in ("BE::Scratch", "BE::ThreadPool", "BE::State"):
        if ref == "&&":
            raise Reject(f"{where}: rvalue references are not supported; take a `{name}&`")
        if name != "BE::State":
            role = "scratch" if name == "BE::Scratch" else "threads"
            return Param(synth, role, written, bare, role)
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
    extent = _CV.sub("", c.spelling.strip()).partition("<")[2].rpartition(">")[0].partition(",")[2].strip().rstrip("UL")
    if name == "std::span" and extent and extent != str(2**64 - 1):
        raise Reject(f"{where}: a `std::span` of fixed extent cannot take an attribute of any length; "
                     "take a `std::span<const T>` (dynamic extent) and check its size()")
    if element is None:
        raise Reject(f"{where}: kernix cannot read the element type of `{name}`")
    if name in _SPANS and not element.is_const_qualified():
        inner = written.partition("<")[2].rpartition(">")[0].strip() or element.spelling
        raise Reject(f"{where}: an array attribute is read-only; take a `{name}<const {inner}>`")
    dtype = element_dtype(element)
    if dtype not in ARRAY_ATTR_DTYPES:
        raise Reject(
            f"{where}: `{element.get_canonical().spelling}` is not an element type of an array attribute; XLA "
            f"passes arrays of {_ARRAY_TYPES} (no bool, no 16-bit floats: take integers, e.g. `{spelled}` of "
            "uint8_t, and convert)")
    check_attr_name(pname, where, "an array attribute")
    return Param(pname, "attr", written, api_spelling(_CV.sub("", c.spelling.strip())), "array", dtype)


#: The canonical spelling of XLA's FFI error type.
ERROR_TYPE = "xla::ffi::Error"

_FIX = ("return `void` and write results to a `BE::Tensor&` output, or return `xla::ffi::Error` "
        "(from \"xla/ffi/api/ffi.h\") to report a failure")


def return_kind(cursor: Any) -> tuple[bool, str]:
    """Whether the function at ``cursor`` returns ``xla::ffi::Error``, and ``""``
    when it can be exported, else the message naming the type and the fix.
    """
    name = cursor.spelling
    written_type = cursor.result_type
    written = " ".join(written_type.spelling.split())
    canonical = written_type.get_canonical()
    kind = canonical.kind.name
    if kind == "VOID":
        return False, ""
    where = f"function {name!r} returns `{written}`"
    if kind in ("LVALUEREFERENCE", "RVALUEREFERENCE"):
        pointee = _CV.sub("", canonical.get_pointee().get_canonical().spelling.strip())
        if pointee == ERROR_TYPE:
            return False, f"{where}, a reference: return `xla::ffi::Error` by value"
    bare = _CV.sub("", canonical.spelling.strip())
    if bare == ERROR_TYPE:
        return True, ""
    if bare.startswith(ERROR_TYPE + "Or<"):
        return False, (f"{where}: the value an `xla::ffi::ErrorOr<T>` carries cannot reach JAX (results are "
                      f"written to outputs); return `xla::ffi::Error` and write the value to a `BE::Tensor&` output")
    if kind in ("AUTO", "UNEXPOSED") and "auto" in written.split():
        return False, (f"{where}, and no body that deduces it is in this file; write the return type out: "
                      f"{_FIX}")
    return False, (f"{where}: a return value cannot reach JAX, and its value would be dropped "
                  f"(a status returned this way would be ignored); {_FIX}")


_FIX_TENSOR = "take a `const BE::Tensor&` for an input buffer or `BE::Tensor&` for an output"


def qualified_name(cursor: Any) -> str:
    import clang.cindex as ci

    parts = [cursor.spelling]
    parent = cursor.semantic_parent
    while parent is not None and parent.kind != ci.CursorKind.TRANSLATION_UNIT:
        if parent.kind == ci.CursorKind.NAMESPACE:
            if parent.spelling and "anonymous" not in parent.spelling:
                parts.append(parent.spelling)
        elif parent.kind != ci.CursorKind.LINKAGE_SPEC:
            parts.append(parent.spelling)
        parent = parent.semantic_parent
    return "::".join(reversed(parts))


_CV = re.compile(r"^(?:(?:const|volatile)\s+)+|\s+(?:const|volatile)$")
_ANON = re.compile(r"\(anonymous namespace\)::")
_BUFFER = re.compile(r"^xla::ffi::Buffer<xla::ffi::DataType::(\w+)(?:,\s*(-?\d+))?>$")

_ARRAY_KINDS = {"CONSTANTARRAY", "INCOMPLETEARRAY", "VARIABLEARRAY", "DEPENDENTSIZEDARRAY"}
_UNSUPPORTED_SCALARS = {
    "LONGDOUBLE": "`long double` has no XLA attribute type; use `double`",
    "FLOAT128": "`__float128` has no XLA attribute type; use `double`",
    "INT128": "128-bit integers have no XLA attribute type; use `int64_t`",
    "UINT128": "128-bit integers have no XLA attribute type; use `uint64_t`",
    "HALF": "`_Float16`/`__fp16` attributes are not supported; use `__half` (from cuda_fp16.h) or `float`",
    "FLOAT16": "`_Float16` attributes are not supported; use `__half` (from cuda_fp16.h) or `float`",
    "WCHAR": "wide characters have no XLA attribute type; use an integer type",
    "CHAR16": "`char16_t` has no XLA attribute type; use `uint16_t`",
    "CHAR32": "`char32_t` has no XLA attribute type; use `uint32_t`",
    "CHAR8": "`char8_t` has no XLA attribute type; use `uint8_t`",
}


def _bare(spelling: str) -> str:
    return api_spelling(_ANON.sub("", _CV.sub("", spelling.strip())))


def _classify(p: Any, index: int, fname: str) -> Param:
    """Turn one parameter cursor into a :class:`Param` (or raise :class:`Reject`)."""
    t = p.type
    written = " ".join(t.spelling.split())
    pname = p.spelling
    label = f"parameter {pname!r}" if pname else f"parameter {index + 1} (unnamed)"
    where = f"{label} of {fname!r} is `{written}`"
    c = t.get_canonical()
    ref = None
    if c.kind.name in ("LVALUEREFERENCE", "RVALUEREFERENCE"):
        ref = "&" if c.kind.name == "LVALUEREFERENCE" else "&&"
        c = c.get_pointee().get_canonical()
    is_const = c.is_const_qualified()
    bare = _bare(c.spelling)
    synth = pname or f"_p{index}"

    if c.kind.name == "POINTER":
        pointee = _bare(c.get_pointee().get_canonical().spelling)
        if pointee in ("CUstream_st", "struct CUstream_st") and (ref is None or (ref == "&" and is_const)):
            return Param(synth, "stream", written, "CUstream_st *", "stream")
        if pointee in ("CUstream_st", "struct CUstream_st"):
            raise Reject(f"{where}: a stream is passed by value or `const&`; take a `cudaStream_t`")
        if pointee == "BE::Tensor" or pointee.startswith("BE::TensorOf<"):
            raise Reject(f"{where}: a tensor cannot be passed by pointer; {_FIX_TENSOR}")
        if pointee == "char" and c.get_pointee().is_const_qualified():
            raise Reject(f"{where}: pointers cannot cross the FFI boundary; take a `std::string_view` "
                          "for a string attribute")
        raise Reject(f"{where}: pointers cannot cross the FFI boundary; {_FIX_TENSOR}")
    if c.kind.name in _ARRAY_KINDS:
        raise Reject(f"{where}: arrays cannot cross the FFI boundary; {_FIX_TENSOR}")
    if c.is_volatile_qualified():
        raise Reject(f"{where}: volatile parameters are not supported; drop `volatile`")

    special = classify_special(c, ref, is_const, bare, pname, synth, written, where)
    if special is not None:
        return special
    if bare == "BE::Tensor" or bare.startswith(("BE::TensorOf<", "BE::InOutOf<")):
        if ref == "&&":
            raise Reject(f"{where}: rvalue references are not supported; {_FIX_TENSOR}")
        role = "inout" if bare.startswith("BE::InOutOf<") else "arg" if is_const else "ret"
        if bare == "BE::Tensor":
            return Param(synth, role, written, "BE::Tensor", "tensor")
        return Param(synth, role, written, bare, "tensor", _tensor_of_dtype(c, where))

    if bare.startswith("xla::ffi::"):
        if ref == "&&":
            raise Reject(f"{where}: rvalue references are not supported; take the FFI type by value")
        return _ffi_param(synth, written, bare, where)

    if ref == "&&":
        raise Reject(f"{where}: rvalue references are not supported; take the scalar by value")
    if ref == "&" and not is_const:
        raise Reject(
            f"{where}: a non-const reference would be an output, and outputs must be tensors; "
            "take the scalar by value (or `const&`), or write results to a `BE::Tensor&`"
        )

    kind = c.kind.name
    if pname == "stream":
        if kind in ("LONG", "LONGLONG") and c.get_size() == 8:
            return Param("stream", "stream", written, bare, "stream")
        raise Reject(
            f"{where}: a parameter named `stream` is the CUDA stream, which arrives as a `cudaStream_t` "
            "or a 64-bit signed integer (`int64_t stream`); take one of those, or rename the parameter "
            "if it is an integer attribute")

    dtype: str | None
    if kind == "ENUM":
        decl = c.get_declaration()
        if not decl.spelling or "unnamed" in bare or "anonymous" in bare:
            raise Reject(f"{where}: an unnamed enum cannot be named in generated code; give the enum a name")
        dtype = integer_dtype(decl.enum_type.get_canonical())
        if dtype is None:
            raise Reject(f"{where}: the enum's underlying type has no XLA attribute type")
    elif kind in _FLOATS:
        dtype = _FLOATS[kind]
    elif kind in _UNSUPPORTED_SCALARS:
        raise Reject(f"{where}: {_UNSUPPORTED_SCALARS[kind]}")
    elif bare in ("__half", "__nv_bfloat16"):
        dtype = "float16" if bare == "__half" else "bfloat16"
    else:
        dtype = integer_dtype(c)
        if dtype is None:
            what = "a struct or class" if kind == "RECORD" else f"type `{bare}`"
            raise Reject(
                f"{where}: {what} cannot cross the FFI boundary. Inputs and outputs are "
                f"`BE::Tensor`s; attributes are scalars (integers, bool, float, double, enums, "
                f"__half, __nv_bfloat16), arrays of them (`BE::Span<const T>`) or strings (`std::string_view`)"
            )
    check_attr_name(pname, where, "a scalar attribute")
    return Param(pname, "attr", written, bare, "scalar", dtype)


#: The class element types of ``BE::TensorOf<T>`` (canonical spelling -> dtype).
_CLASS_ELEMENTS = {
    "__half": "float16", "__nv_bfloat16": "bfloat16",
    "__nv_fp8_e4m3": "float8_e4m3fn", "__nv_fp8_e5m2": "float8_e5m2",
}
_STD_COMPLEX = re.compile(r"^std::(?:__\w+::)?complex<(float|double)>$")


def element_dtype(t: Any) -> str | None:
    """The dtype whose elements are exactly the C++ type ``t`` (see
    ``BE::element_dtype`` in kernix/common.h), or ``None``."""
    c = t.get_canonical()
    if c.kind.name != "RECORD":
        return _FLOATS.get(c.kind.name) or integer_dtype(c)
    bare = _bare(c.spelling)
    m = _STD_COMPLEX.match(bare)
    if m:
        return "complex64" if m.group(1) == "float" else "complex128"
    return _CLASS_ELEMENTS.get(bare)


def _tensor_of_dtype(c: Any, where: str) -> str:
    """The dtype ``BE::TensorOf<T>`` (the canonical type ``c``) pins."""
    element = c.get_template_argument_type(0) if c.get_num_template_arguments() == 1 else None
    dtype = element_dtype(element) if element is not None and element.kind.name != "INVALID" else None
    if dtype is None:
        what = f"`{_bare(element.get_canonical().spelling)}`" if element is not None else "its element type"
        raise Reject(
            f"{where}: {what} is not the C++ type of a dtype kernix can pin. `BE::TensorOf<T>` takes bool, "
            "an integer type (int8_t ... uint64_t), float, double, __half, __nv_bfloat16, __nv_fp8_e4m3, "
            "__nv_fp8_e5m2, std::complex<float> or std::complex<double>; for any other element type take a "
            "`BE::Tensor` and read it with data_ptr<T>()"
        )
    return dtype


def _ffi_buffer(bare: str) -> tuple[str, str | None, int | None] | None:
    if bare == "xla::ffi::AnyBuffer":
        return bare, None, None
    m = _BUFFER.match(bare)
    if m is None:
        return None
    code, rank_text = m.groups()
    rank = int(rank_text) if rank_text is not None and int(rank_text) >= 0 else None
    norm = f"xla::ffi::Buffer<xla::ffi::DataType::{code}" + (f", {rank}>" if rank is not None else ">")
    return norm, dtype_by_xla_name(code), rank


def _ffi_param(name: str, written: str, bare: str, where: str) -> Param:
    buf = _ffi_buffer(bare)
    if buf is not None:
        norm, dtype, rank = buf
        return Param(name, "arg", written, norm, "ffi", dtype, rank)
    if bare.startswith("xla::ffi::Result<") and bare.endswith(">"):
        inner = _ffi_buffer(_bare(bare[len("xla::ffi::Result<"):-1]))
        if inner is not None:
            norm, dtype, rank = inner
            return Param(name, "ret", written, f"xla::ffi::Result<{norm}>", "ffi", dtype, rank)
    raise Reject(
        f"{where}: this XLA FFI type is not supported; use `xla::ffi::AnyBuffer` or "
        "`xla::ffi::Buffer<T, R>` for inputs and `xla::ffi::Result<...>` / `ResultBuffer<T, R>` for outputs"
    )


def function_spec(cursor: Any, path: str) -> tuple[FunctionSpec | None, list[SourceError]]:
    """The spec of one function cursor, or ``None`` and the errors that prevent it."""
    name = cursor.spelling
    loc = cursor.location
    where = dict(file=path, line=loc.line, column=loc.column, function=name)
    errors: list[SourceError] = []
    if cursor.type.kind.name == "FUNCTIONPROTO" and cursor.type.is_function_variadic():
        errors.append(SourceError(
            f"function {name!r} is variadic (`...`): a variadic function cannot be called through "
            "the FFI; list every parameter explicitly", **where))
    returns_error, problem = return_kind(cursor)
    if problem:
        errors.append(SourceError(problem, **where))
    params: list[Param] = []
    for i, p in enumerate(cursor.get_arguments()):
        try:
            params.append(_classify(p, i, name))
        except Reject as exc:
            ploc = p.location if p.location.file is not None else loc
            errors.append(SourceError(str(exc), file=path, line=ploc.line, column=ploc.column, function=name,
                                      parameter=p.spelling or f"#{i + 1}"))
    if errors:
        return None, errors
    streams = [p for p in params if p.role == "stream"]
    if len(streams) > 1:
        errors.append(SourceError(
            f"function {name!r} takes more than one stream ({', '.join(repr(p.name) for p in streams)}); "
            "take a single `cudaStream_t` (or `int64_t stream`)", **where, parameter=streams[1].name))
    if not any(p.role in ("ret", "inout") for p in params):
        errors.append(SourceError(
            f"function {name!r} has no output tensor: every exported function must write at least one "
            "output. Add a non-const `BE::Tensor& out` parameter (inputs are `const BE::Tensor&`)", **where))
    for role in ("scratch", "state", "threads"):
        several = [p for p in params if p.role == role]
        if len(several) > 1:
            why = " (one scratch buffer can hold several arrays)" if role == "scratch" else ""
            errors.append(SourceError(
                f"function {name!r} takes more than one {role} parameter "
                f"({', '.join(repr(p.name) for p in several)}); take one{why}", **where, parameter=several[1].name))
    if errors:
        return None, errors
    spec = FunctionSpec(name=name, qualified_name=qualified_name(cursor), params=tuple(params), file=path,
                        line=loc.line, function_type=_function_type(cursor), returns_error=returns_error)
    return spec, errors


def _function_type(cursor: Any) -> str:
    """The function's canonical type, if it can be written at file scope (else ``""``)."""
    if cursor.kind.name != "FUNCTION_DECL":
        return ""  # a template: its type names the template's parameters
    spelling = api_spelling(cursor.type.get_canonical().spelling)
    return spelling if is_function_type(spelling) else ""

