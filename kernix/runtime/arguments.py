"""A kernel call's arguments, checked against the function's spec and converted for the FFI call
(:func:`check_call`)."""

from __future__ import annotations

import functools
from typing import Any, Mapping, Sequence

import jax
import numpy as np

from ..language.dtypes import ATTR_DTYPES, numpy_dtype, x64_hint
from ..errors import CallError
from ..language.spec import FunctionSpec, Param

__all__ = ["check_call", "check_buffer", "coerce_attr"]

#: The ``vmap_method`` values a call accepts (those of ``jax.ffi.ffi_call``), or ``None``.
VMAP_METHODS = ("sequential", "sequential_unrolled", "expand_dims", "broadcast_all", "legacy_vectorized")


class _UInt64Bits(int):
    """A uint64 attribute of 2**63 or more, lowered through its two's-complement bits (JAX's signed
    conversion of ``numpy.uint64`` fails there)."""


@functools.cache
def _install_uint64_lowering() -> bool:
    try:  # (JAX internals: imported here, so that a JAX without them costs only this feature)
        from jax._src.interpreters import mlir
        from jax._src.lib.mlir import ir
    except ImportError:  # a JAX without this hook: values >= 2**63 stay unsupported
        return False
    mlir.register_attribute_handler(
        _UInt64Bits, lambda v: ir.IntegerAttr.get(ir.IntegerType.get_unsigned(64), int(v) - 2**64)
    )
    return True


def coerce_attr(fn: str, param: Param, value: Any) -> Any:
    """``value`` as the exact NumPy type XLA expects for attribute ``param`` of ``fn`` (else CallError): an
    array attribute's (a sequence or 1-D array) as a 1-D NumPy array of exactly its dtype, a string's as ``str``."""
    try:
        if isinstance(value, jax.core.Tracer):
            raise ValueError(
                "an attribute is a constant of the compiled call, and this value is traced (an argument of "
                "a jax.jit or jax.vmap function, or computed from one); pass a Python or NumPy value, "
                "e.g. by making the argument it comes from static: jax.jit(f, static_argnames=...)")
        return _array_attr(param, value) if param.kind in ("array", "string") else _scalar_attr(param, value)
    except (TypeError, ValueError, OverflowError) as exc:
        shown = repr(value)
        if param.kind in ("array", "string") and len(shown) > 80:
            shown = shown[:77] + "..."
        raise CallError(
            f"{fn}(): attribute {param.name!r} is {param.attr_type} (C++ type '{param.type}'); "
            f"cannot use {shown}: {exc}"
        ) from None


def _scalar_attr(param: Param, value: Any) -> Any:
    dtype = param.dtype
    assert dtype is not None
    np_name = ATTR_DTYPES[dtype][1]
    if value is None or isinstance(value, (str, bytes)) or np.iscomplexobj(value):
        raise ValueError(f"expected a real number, got {type(value).__name__}")
    arr = np.asarray(value)
    if arr.shape != ():
        raise ValueError(f"expected a scalar, got an array of shape {arr.shape}")
    if dtype == "bool":
        if not isinstance(value, (bool, np.bool_)) and value not in (0, 1):
            raise ValueError("expected a bool")
        return np.bool_(value)
    if np.issubdtype(np.dtype(np_name), np.integer):
        if not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_):
            raise ValueError(f"expected an integer, got {value!r}")
        info = np.iinfo(np_name)
        if not info.min <= int(value) <= info.max:
            raise ValueError(f"{value} does not fit in {dtype}")
        if dtype == "uint64" and int(value) >= 2**63 and _install_uint64_lowering():
            return _UInt64Bits(int(value))
        return np.dtype(np_name).type(value)
    with np.errstate(over="ignore"):
        result = arr.astype(numpy_dtype(dtype))
    if np.isinf(result.astype(np.float64)) and np.isfinite(arr.astype(np.float64)):
        raise ValueError(f"{value} does not fit in {dtype}")
    # float16 and bfloat16 travel as their 16-bit payload (XLA FFI has no such attribute type)
    return result.view(np.uint16)[()] if dtype in ("float16", "bfloat16") else result[()]


def _array_attr(param: Param, value: Any) -> Any:
    if param.kind == "string":
        if not isinstance(value, str):
            hint = " (decode bytes first: value.decode())" if isinstance(value, bytes) else ""
            raise ValueError(f"expected a str, got {type(value).__name__}{hint}")
        return value
    if isinstance(value, (str, bytes, dict, set, frozenset)) or value is None or np.ndim(value) != 1:
        raise ValueError("expected a tuple, list or 1-D NumPy array of numbers")
    assert param.dtype is not None
    want = np.dtype(param.dtype)
    integral = _integral(value)
    if want.kind in "iu":
        if not integral:
            raise ValueError("expected integers")
        ints = [int(v) for v in value]
        info = np.iinfo(want)
        bad = next((v for v in ints if not info.min <= v <= info.max), None)
        if bad is not None:
            raise ValueError(f"{bad} does not fit in {param.dtype}")
        return np.array(ints, dtype=want)
    if not integral and not _real(value):
        raise ValueError("expected real numbers")
    exact = np.array([int(v) for v in value], dtype=object) if integral else np.asarray(value, np.float64)
    with np.errstate(over="ignore"):
        result = exact.astype(np.float64).astype(want)
    if np.any(np.isinf(result) & np.isfinite(exact.astype(np.float64))):
        raise ValueError(f"a value does not fit in {param.dtype}")
    return result


def _integral(value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return value.dtype == np.bool_ or np.issubdtype(value.dtype, np.integer) or (
            value.dtype == object and all(isinstance(v, (int, np.integer)) for v in value))
    return all(isinstance(v, (int, np.integer, np.bool_)) for v in value)


def _real(value: Any) -> bool:
    if isinstance(value, np.ndarray) and value.dtype != object:
        return np.issubdtype(value.dtype, np.floating) or np.issubdtype(value.dtype, np.integer)
    return all(isinstance(v, (int, float, np.integer, np.floating, np.bool_)) for v in value)


def _as_jax(fn: str, param: Param, x: Any) -> Any:
    """``x`` as a JAX array, of the dtype ``jax.jit`` would give it; JAX arrays and tracers are kept."""
    if isinstance(x, jax.Array):
        return x
    try:
        return jax.numpy.asarray(x)
    except (TypeError, ValueError) as exc:
        raise CallError(f"{fn}(): input {param.name!r} must be an array: {exc}") from None


def check_buffer(fn: str, param: Param, value: Any, what: str) -> None:
    """Raise :class:`CallError` unless ``value`` (an array or a ``jax.ShapeDtypeStruct``) has the dtype
    and rank that ``param``, a typed buffer, declares."""
    if param.dtype is not None and np.dtype(value.dtype) != np.dtype(numpy_dtype(param.dtype)):
        hint = x64_hint(param.dtype)
        if not hint:
            hint = (f"; convert it first: .astype(jnp.{param.dtype})" if what == "input" else
                    f"; give it dtype {param.dtype} in out= (jax.ShapeDtypeStruct(shape, jnp.{param.dtype}))")
        raise CallError(
            f"{fn}(): {what} {param.name!r} must be {param.dtype} "
            f"(C++ type '{param.type}'), got {np.dtype(value.dtype)}{hint}"
        )
    if param.rank is not None and len(np.shape(value)) != param.rank:
        raise CallError(
            f"{fn}(): {what} {param.name!r} must have rank {param.rank} "
            f"(C++ type '{param.type}'), got shape {tuple(np.shape(value))}"
        )


def _check_platform(spec: FunctionSpec, inputs: Sequence[Any], platform: str, module: str) -> None:
    """Refuse concrete arrays on another platform than the module's (tracers are not checked)."""
    want, label = ("cpu", "the CPU") if platform == "cpu" else ("gpu", "CUDA GPUs")
    for p, x in zip(spec.inputs, inputs):
        devices = x.devices() if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer) else set()
        if not any(d.platform != want for d in devices):
            continue
        where = ", ".join(sorted(str(d) for d in devices))
        raise CallError(
            f"{spec.name}(): module {module!r} was built for {label}, but input "
            f"{p.name!r} is on {where}. Put the inputs there: jax.device_put(x, "
            f"jax.devices({want!r})[0]), or create them inside `with jax.default_device("
            f"jax.devices({want!r})[0]):`."
        )


def check_call(spec: FunctionSpec, inputs: Sequence[Any], attrs: Mapping[str, Any], vmap_method: str | None,
               platform: str, module: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Check a call's ``inputs``, ``attrs`` and ``vmap_method`` against ``spec``, and concrete inputs'
    devices against the ``platform`` of ``module``, before anything is traced or run.

    Returns the inputs as JAX arrays (tracers as given) and the attributes converted to their exact
    dtypes (:func:`coerce_attr`); a :class:`CallError` names the argument at fault.
    """
    expected = spec.inputs
    if len(inputs) != len(expected):
        names = ", ".join(p.name for p in expected) or "none"
        hint = ""
        if len(inputs) > len(expected) and spec.attrs:
            call = ", ".join([p.name for p in expected] + [f"{p.name}=..." for p in spec.attrs])
            hint = f"; attributes are keyword arguments: {spec.name}({call})"
        raise CallError(f"{spec.name}() takes {len(expected)} input array(s) ({names}), got {len(inputs)}{hint}")
    if vmap_method is not None and vmap_method not in VMAP_METHODS:
        raise CallError(
            f"{spec.name}(): vmap_method={vmap_method!r} is not one of "
            f"{', '.join(map(repr, VMAP_METHODS))} (how jax.vmap runs the kernel when it "
            "cannot batch it as one call; the default is 'sequential')"
        )
    arrays = tuple(_as_jax(spec.name, p, x) for p, x in zip(expected, inputs))
    for p, x in zip(expected, arrays):
        check_buffer(spec.name, p, x, "input")
    _check_platform(spec, arrays, platform, module)
    declared = {p.name: p for p in spec.attrs}
    unknown = sorted(set(attrs) - set(declared))
    if unknown:
        raise CallError(
            f"{spec.name}() got unknown attribute(s) {', '.join(map(repr, unknown))}; "
            f"it takes: {', '.join(declared) or 'no attributes'}"
        )
    missing = [n for n in declared if n not in attrs]
    if missing:
        raise CallError(
            f"{spec.name}() is missing attribute(s) " + ", ".join(f"{n!r} ({declared[n].attr_type})" for n in missing)
        )
    return arrays, {n: coerce_attr(spec.name, declared[n], v) for n, v in attrs.items()}
