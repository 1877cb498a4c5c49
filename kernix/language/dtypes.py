"""The one table of element and attribute dtypes (:data:`DTYPES`); everything else derives from it.
``BE::DType`` numbers types as XLA's ``DataType`` does."""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "DType", "DTYPES", "ATTR_DTYPES", "ARRAY_ATTR_DTYPES", "BUFFER_DTYPES", "dtype_by_xla_name", "numpy_dtype",
    "x64_hint",
]


class DType(NamedTuple):
    """One dtype: its NumPy/JAX ``name`` (``"float32"``), its ``xla::ffi::DataType`` enumerator ``xla``
    (``"F32"``), and ``attr_ctype``, the C++ type an attribute of it is decoded as (``None``: it cannot be
    one; float16/bfloat16 travel as their 16-bit payload, as XLA FFI has no 16-bit float attribute)."""

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

#: Element dtypes of array attributes: name -> the C++ element type (XLA's FFI has no array of
#: bool or 16-bit floats).
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
    """The hint for a "must be ``wanted``" error when JAX makes no such arrays (64-bit mode is off)."""
    import jax

    made = jax.dtypes.canonicalize_dtype(numpy_dtype(wanted))
    if made == numpy_dtype(wanted):
        return ""
    return (f"; JAX makes {wanted} arrays {made} unless its 64-bit mode is on: "
            "jax.config.update('jax_enable_x64', True) at the start of the program")
