"""The one table of element and attribute dtypes; everything else derives from it.

Each :class:`DType` row says how a dtype appears on every side of the FFI
boundary: the XLA FFI ``DataType`` enumerator (and ``BE::DType`` code, which
numbers types as XLA does), the C++ type an FFI attribute of that dtype is
decoded as (``None`` when it cannot be an attribute), and the NumPy /
``ml_dtypes`` name.  Pure Python, imports nothing heavy.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "DType", "DTYPES", "ATTR_DTYPES", "ARRAY_ATTR_DTYPES", "BUFFER_DTYPES", "dtype_by_xla_name", "numpy_dtype",
    "x64_hint",
]


class DType(NamedTuple):
    """One dtype.

    Attributes
    ----------
    name
        The NumPy/JAX spelling (``"float32"``).
    xla
        The ``xla::ffi::DataType`` enumerator (``"F32"``).
    attr_ctype
        The C++ type an attribute of this dtype is decoded as, or ``None`` when
        it cannot be an attribute.  float16/bfloat16 travel as their 16-bit
        payload: XLA FFI has no 16-bit float attribute.
    """

    name: str
    xla: str
    attr_ctype: str | None


DTYPES: tuple[DType, ...] = (
    DType("bool", "PRED", "bool"),
    DType("int8", "S8", "int8_t"),
    DType("int16", "S16", "int16_t"),
    DType("int32", "S32", "int32_t"),
    DType("int64", "S64", "int64_t"),
    DType("uint8", "U8", "uint8_t"),
    DType("uint16", "U16", "uint16_t"),
    DType("uint32", "U32", "uint32_t"),
    DType("uint64", "U64", "uint64_t"),
    DType("float16", "F16", "uint16_t"),
    DType("bfloat16", "BF16", "uint16_t"),
    DType("float32", "F32", "float"),
    DType("float64", "F64", "double"),
    DType("complex64", "C64", None),
    DType("complex128", "C128", None),
    DType("float8_e4m3fn", "F8E4M3FN", None),
    DType("float8_e5m2", "F8E5M2", None),
)

#: Attribute dtypes: name -> (C++ type the FFI handler decodes, numpy dtype name).
ATTR_DTYPES: dict[str, tuple[str, str]] = {d.name: (d.attr_ctype, d.name) for d in DTYPES if d.attr_ctype}

#: Element dtypes of array attributes (a read-only span of scalars): name -> the C++
#: element type XLA's FFI decodes an array of (no bool, no 16-bit floats: XLA's FFI
#: has no array attribute of those).
ARRAY_ATTR_DTYPES: dict[str, str] = {
    d.name: d.attr_ctype for d in DTYPES
    if d.attr_ctype and d.name not in ("bool", "float16", "bfloat16")
}

#: Buffer element dtypes a typed buffer may fix: name -> XLA FFI ``DataType`` enumerator.
BUFFER_DTYPES: dict[str, str] = {d.name: d.xla for d in DTYPES}

_BY_XLA = {d.xla: d.name for d in DTYPES}


def dtype_by_xla_name(xla: str) -> str | None:
    """The dtype name of an ``xla::ffi::DataType`` enumerator (``"F32"`` -> ``"float32"``)."""
    return _BY_XLA.get(xla)


def numpy_dtype(name: str) -> Any:
    """The NumPy dtype of ``name`` (``ml_dtypes`` for bfloat16 and float8 types)."""
    import numpy as np

    if name == "bfloat16" or name.startswith("float8"):
        import ml_dtypes  # shipped with jax

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def x64_hint(wanted: str) -> str:
    """What to add to a "must be ``wanted``" error when JAX cannot make arrays
    of that dtype: 64-bit types need JAX's 64-bit mode ("" otherwise)."""
    import jax

    made = jax.dtypes.canonicalize_dtype(numpy_dtype(wanted))
    if made == numpy_dtype(wanted):
        return ""
    return (f"; JAX makes {wanted} arrays {made} unless its 64-bit mode is on: "
            "jax.config.update('jax_enable_x64', True) at the start of the program")
