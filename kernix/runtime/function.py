"""The typed Python callable of one exported function (:class:`KernelFunction`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from ..dtypes import ATTR_DTYPES, numpy_dtype, x64_hint
from ..errors import CallError, RegistrationError
from ..spec import FunctionSpec, Param
from .varying import output_structs

if TYPE_CHECKING:
    from .module import CompiledModule

__all__ = ["KernelFunction"]


_VMAP_METHODS = ("sequential", "sequential_unrolled", "expand_dims", "broadcast_all", "legacy_vectorized")


def unpicklable(what: str) -> TypeError:
    """The error of pickling a module or function: its native code is loaded in this process only."""
    return TypeError(
        f"kernix {what} cannot be pickled: it calls native code loaded in this process. In the "
        "other process, load the same sources (the same kernix.load_* call) or a prebuilt "
        "directory (kernix.load_prebuilt); to send a computation, use "
        "kernix.export(jax.jit(f), ...).serialize() and kernix.deserialize there"
    )


class _UInt64Bits(int):
    """A uint64 attribute value of 2**63 or more.

    JAX lowers a ``numpy.uint64`` attribute through a signed 64-bit conversion,
    which fails for the upper half of the range; this type is lowered through
    its two's-complement bits instead (see :func:`_install_uint64_lowering`).
    """


_uint64_lowering_installed = False


def _install_uint64_lowering() -> bool:
    global _uint64_lowering_installed
    if not _uint64_lowering_installed:
        try:
            from jax._src.interpreters import mlir
            from jax._src.lib.mlir import ir
        except ImportError:  # a JAX without this hook: values >= 2**63 stay unsupported
            return False
        mlir.register_attribute_handler(
            _UInt64Bits, lambda v: ir.IntegerAttr.get(ir.IntegerType.get_unsigned(64), int(v) - 2**64)
        )
        _uint64_lowering_installed = True
    return True


def _is_traced(value: Any) -> bool:
    """Whether ``value`` is a JAX tracer (a traced argument, or computed from one)."""
    import jax

    return isinstance(value, jax.core.Tracer)


def _coerce_attr(fn: str, param: Param, value: Any) -> Any:
    """Turn a Python value into the exact numpy scalar type XLA expects."""
    import numpy as np  # numpy (like jax) loads at the first call, not with kernix

    dtype = param.dtype
    assert dtype is not None
    np_name = ATTR_DTYPES[dtype][1]
    try:
        if _is_traced(value):
            raise ValueError(
                "an attribute is a constant of the compiled call, and this value is traced (an argument of "
                "a jax.jit or jax.vmap function, or computed from one); pass a Python or NumPy number, "
                "e.g. by making the argument it comes from static: jax.jit(f, static_argnames=...)")
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
    except (TypeError, ValueError, OverflowError) as exc:
        raise CallError(
            f"{fn}(): attribute {param.name!r} is {dtype} (C++ type '{param.type}'); "
            f"cannot use {value!r}: {exc}"
        ) from None


def _as_jax(fn: str, param: Param, x: Any) -> Any:
    """``x`` as the array JAX passes to the kernel: a NumPy array, scalar or list
    becomes a JAX array of JAX's dtype for it (``float64`` is ``float32`` unless
    64-bit mode is on), as under ``jax.jit``; JAX arrays and tracers are kept."""
    import jax

    if isinstance(x, jax.Array):
        return x
    try:
        return jax.numpy.asarray(x)
    except (TypeError, ValueError) as exc:
        raise CallError(f"{fn}(): input {param.name!r} must be an array: {exc}") from None


class _Docstring:
    """``__doc__`` of a :class:`KernelFunction`: the class's own text on the
    class, the function's (spec, shape signature, C++ declaration) on an
    instance, built when first asked for (``help()``, an IDE), not at load."""

    def __init__(self, class_doc: str) -> None:
        self.class_doc = class_doc

    def __get__(self, obj: Any, owner: Any = None) -> str:
        if obj is None:
            return self.class_doc
        from .stubs import docstring

        return docstring(obj.spec, backward=obj.module.backward_name(obj.spec.name))


class KernelFunction:
    """The callable of one exported function.

    ``f(*inputs, out=..., **attributes)`` runs the FFI target on the inputs
    (JAX arrays, in the order of the ``arg`` parameters) with the attributes
    (keywords, converted to their exact dtypes) and returns the output array,
    or a tuple when the function has several outputs.

    Without a shape signature, ``out`` gives the output shapes and dtypes (a
    ``jax.ShapeDtypeStruct`` or a sequence of them); when omitted and the
    function has one output, it is like the first input.  Works under
    ``jax.jit`` and ``jax.vmap`` (vmap runs the kernel once per batch element
    unless ``vmap_method`` says otherwise).

    With a shape signature (``// @BE f (m,k),(k,n)->(m,n)``) the outputs come
    from the signature (an ``out=`` must agree with it), the inputs are checked
    against it before launch (:class:`~kernix.errors.CallError`), ``jax.vmap``
    over ``...`` dimensions is one kernel call, a ``vjp=`` backward kernel makes
    ``jax.grad`` work, and inputs sharded along ``...`` dimensions are
    processed per shard.  See ``kernix.runtime.operation``.
    """

    def __init__(self, module: "CompiledModule", spec: FunctionSpec) -> None:
        self.module = module
        self.spec = spec
        self.__name__ = self.__qualname__ = spec.name
        self._operation: Any = None


    @property
    def __signature__(self) -> Any:
        """The call's ``inspect.Signature``: inputs, keyword-only attributes, ``out``, ``vmap_method``."""
        from .stubs import call_signature

        return call_signature(self.spec)

    @property
    def operation(self) -> Any:
        """The :class:`~kernix.runtime.operation.Operation` of a function with a shape signature, else ``None``."""
        if self._operation is None and self.spec.signature is not None:
            from .operation import Operation

            self._operation = Operation(self)
        return self._operation

    @property
    def target(self) -> str:
        """The FFI target name."""
        return self.module.targets[self.spec.name]

    def __repr__(self) -> str:
        return f"<kernix function {self.target} ({' '.join(self.spec.arg_spec)})>"

    def __reduce__(self) -> Any:
        raise unpicklable(f"function {self.target!r}")

    def __copy__(self) -> "KernelFunction":
        return self  # bound to the loaded library: a copy would be the same function

    def __deepcopy__(self, memo: Any) -> "KernelFunction":
        return self

    def _out_specs(self, out: Any, inputs: Sequence[Any]) -> list[Any]:
        import numpy as np

        n_out = len(self.spec.outputs)
        if out is None:
            if n_out != 1 or not inputs:
                raise CallError(
                    f"{self.spec.name}(): pass out= with the shape and dtype of its {n_out} outputs "
                    "(a jax.ShapeDtypeStruct or a list of them)"
                )
            return output_structs([(np.shape(inputs[0]), inputs[0].dtype)], inputs)
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(outs) != n_out:
            raise CallError(f"{self.spec.name}(): out= describes {len(outs)} outputs, the function has {n_out}")
        for o, p in zip(outs, self.spec.outputs):
            self._check_buffer(p, o, "output")
        return outs

    def _check_buffer(self, param: Param, value: Any, what: str) -> None:
        import numpy as np

        if param.dtype is not None and np.dtype(value.dtype) != np.dtype(numpy_dtype(param.dtype)):
            raise CallError(
                f"{self.spec.name}(): {what} {param.name!r} must be {param.dtype} "
                f"(C++ type '{param.type}'), got {np.dtype(value.dtype)}{x64_hint(param.dtype)}"
            )
        if param.rank is not None and len(np.shape(value)) != param.rank:
            raise CallError(
                f"{self.spec.name}(): {what} {param.name!r} must have rank {param.rank} "
                f"(C++ type '{param.type}'), got shape {tuple(np.shape(value))}"
            )

    def _check_platform(self, inputs: Sequence[Any]) -> None:
        """Refuse concrete arrays on a device of another platform than the module's
        (XLA would fail with "No FFI handler registered"); tracers are not checked."""
        import jax

        want, label = ("cpu", "the CPU") if self.module.platform == "cpu" else ("gpu", "CUDA GPUs")
        tracer = getattr(jax.core, "Tracer", ())
        for p, x in zip(self.spec.inputs, inputs):
            if not isinstance(x, jax.Array) or isinstance(x, tracer):
                continue
            devices = x.devices()
            if all(d.platform == want for d in devices):
                continue
            where = ", ".join(sorted(str(d) for d in devices))
            raise CallError(
                f"{self.spec.name}(): module {self.module.name!r} was built for {label}, but input "
                f"{p.name!r} is on {where}. Put the inputs there: jax.device_put(x, "
                f"jax.devices({want!r})[0]), or create them inside `with jax.default_device("
                f"jax.devices({want!r})[0]):`."
            )

    def __call__(self, *inputs: Any, out: Any = None, vmap_method: str = "sequential", **attrs: Any) -> Any:
        import jax

        spec = self.spec
        if not self.module.registered:
            raise RegistrationError(
                f"{spec.name}(): module {self.module.name!r} is not registered; call "
                "module.register() (it was loaded with auto_register=False)"
            )
        expected = spec.inputs
        if len(inputs) != len(expected):
            names = ", ".join(p.name for p in expected) or "none"
            hint = ""
            if len(inputs) > len(expected) and spec.attrs:
                call = ", ".join([p.name for p in expected] + [f"{p.name}=..." for p in spec.attrs])
                hint = f"; attributes are keyword arguments: {spec.name}({call})"
            raise CallError(
                f"{spec.name}() takes {len(expected)} input array(s) ({names}), got {len(inputs)}{hint}"
            )
        if vmap_method is not None and vmap_method not in _VMAP_METHODS:
            raise CallError(
                f"{spec.name}(): vmap_method={vmap_method!r} is not one of "
                f"{', '.join(map(repr, _VMAP_METHODS))} (how jax.vmap runs the kernel when it "
                "cannot batch it as one call; the default is 'sequential')"
            )
        inputs = tuple(_as_jax(spec.name, p, x) for p, x in zip(expected, inputs))
        for p, x in zip(expected, inputs):
            self._check_buffer(p, x, "input")
        self._check_platform(inputs)
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
                f"{spec.name}() is missing attribute(s) "
                + ", ".join(f"{n!r} ({declared[n].dtype})" for n in missing)
            )
        coerced = {n: _coerce_attr(spec.name, declared[n], v) for n, v in attrs.items()}
        try:
            if spec.signature is not None:  # checked shapes, batching, gradients, sharding
                return self.operation(inputs, coerced, attrs, out, vmap_method)
            call = jax.ffi.ffi_call(self.target, self._out_specs(out, inputs), vmap_method=vmap_method)
            result = call(*inputs, **coerced)
        except ValueError as e:
            if f"FFI call to `{self.target}` cannot be differentiated" in str(e):  # JAX's jvp rule of ffi_call
                from .gradient import no_backward

                raise no_backward(spec, self.module.backward_name(spec.name)) from None
            raise
        return result[0] if len(spec.outputs) == 1 else tuple(result)  # as with a shape signature


KernelFunction.__doc__ = _Docstring(KernelFunction.__doc__ or "")  # type: ignore[assignment]
