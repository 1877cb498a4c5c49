"""A function with a shape signature as a complete JAX operation.

For a :class:`~kernix.runtime.function.KernelFunction` whose spec has a shape
signature (:mod:`kernix.signature`), a call is built from four layers, the
innermost first:

1. the FFI call itself, its output shapes computed from the signature (and
   the inputs checked against it) when the call is traced;
2. on several devices, a ``jax.experimental.custom_partitioning`` of it whose
   Shardy rule keeps the ``...`` batch dimensions sharded and replicates the
   core dimensions, so each device runs the kernel on its own shard;
3. when the signature has ``...`` groups, a ``jax.custom_batching.custom_vmap``
   whose rule folds a ``vmap`` axis into the batch dimensions (one kernel call
   for the whole batch) when every batched input and every output has ``...``,
   and otherwise loops (``vmap_method``, as for functions without a signature);
4. when a backward kernel declares ``vjp=`` this function, a
   ``jax.custom_vjp`` whose backward pass calls it.

The layers are built once per set of attribute values and cached on the
function; checks run when a call is traced, not per execution.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ..errors import CallError
from ..signature import Binding, Signature, bind, parse_signature

if TYPE_CHECKING:
    from .function import KernelFunction

__all__ = ["Operation"]


def _dtype_name(x: Any) -> str:
    import numpy as np

    return np.dtype(x.dtype).name


class Operation:
    """The JAX side of one function with a shape signature.

    Parameters
    ----------
    function
        The :class:`~kernix.runtime.function.KernelFunction` it serves.
    """

    def __init__(self, function: "KernelFunction") -> None:
        self.function = function
        self.spec = function.spec
        assert self.spec.signature is not None
        self.signature: Signature = parse_signature(self.spec.signature)
        self._built: dict[Any, Callable[..., tuple[Any, ...]]] = {}

    # -- shapes -------------------------------------------------------------------
    def bind(self, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> Binding:
        """Check ``inputs`` against the signature; the output shapes and dtypes."""
        import numpy as np

        return bind(self.signature, self.spec, [np.shape(x) for x in inputs], [_dtype_name(x) for x in inputs], attrs)

    def out_structs(self, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[Any]:
        """``jax.ShapeDtypeStruct`` of each output for ``inputs``."""
        from ..dtypes import numpy_dtype
        from .varying import output_structs

        b = self.bind(inputs, attrs)
        return output_structs([(s, numpy_dtype(d)) for s, d in zip(b.out_shapes, b.out_dtypes)], inputs)

    def check_out(self, out: Any, expected: Sequence[Any]) -> None:
        """Raise :class:`CallError` if an explicit ``out=`` disagrees with the signature."""
        import numpy as np

        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        name = self.spec.name
        if len(outs) != len(expected):
            raise CallError(f"{name}(): out= describes {len(outs)} outputs, the function has {len(expected)}")
        for o, e, p in zip(outs, expected, self.spec.outputs):
            if tuple(np.shape(o)) != tuple(e.shape) or np.dtype(o.dtype) != np.dtype(e.dtype):
                raise CallError(
                    f"{name}(): out= gives output {p.name!r} shape {tuple(np.shape(o))} and dtype "
                    f"{np.dtype(o.dtype)}, but the signature {self.spec.signature} gives shape "
                    f"{tuple(e.shape)} and dtype {np.dtype(e.dtype)}"
                )

    # -- calling ------------------------------------------------------------------
    def __call__(
        self, inputs: Sequence[Any], coerced: Mapping[str, Any], raw_attrs: Mapping[str, Any],
        out: Any, vmap_method: str,
    ) -> Any:
        """Run the operation: check, then call the cached composed function."""
        expected = self.out_structs(inputs, coerced)  # raises CallError before anything runs
        if out is not None:
            self.check_out(out, expected)
        key = (tuple(sorted((k, _hashable(v)) for k, v in coerced.items())), vmap_method)
        fn = self._built.get(key)
        if fn is None:
            fn = self._built[key] = self._build(dict(coerced), dict(raw_attrs), vmap_method)
        result = fn(*inputs)
        return result[0] if len(result) == 1 else tuple(result)

    def _build(self, attrs: dict[str, Any], raw_attrs: dict[str, Any], vmap_method: str) -> Callable[..., Any]:
        import jax

        target = self.function.target

        def ffi(*xs: Any) -> tuple[Any, ...]:
            call = jax.ffi.ffi_call(target, self.out_structs(xs, attrs), vmap_method=vmap_method)
            return tuple(call(*xs, **attrs))

        from .sharding import partitioned

        inner = partitioned(self, ffi)
        batched = self._batched(inner, ffi) if self.signature.batched else inner
        backward = self.function.module.backward_of(self.spec.name)
        if backward is None:
            return batched
        from .gradient import with_vjp

        return with_vjp(self, batched, backward, raw_attrs)

    def _batched(self, inner: Callable[..., Any], ffi: Callable[..., Any]) -> Callable[..., Any]:
        """``inner`` under a custom_vmap: one call over a vmap axis where the signature allows."""
        import jax
        import jax.numpy as jnp

        sig = self.signature
        all_outputs_batch = all(g.batch for g in sig.outputs)

        @jax.custom_batching.custom_vmap
        def op(*xs: Any) -> tuple[Any, ...]:
            return inner(*xs)

        @op.def_vmap
        def rule(axis_size: int, in_batched: Sequence[bool], *xs: Any) -> tuple[Any, Any]:
            in_batched = list(in_batched)
            foldable = all_outputs_batch and all(g.batch for g, b in zip(sig.inputs, in_batched) if b)
            if foldable:
                args = [
                    x if b or not g.batch else jnp.broadcast_to(x, (axis_size, *jnp.shape(x)))
                    for x, b, g in zip(xs, in_batched, sig.inputs)
                ]
                outs = op(*args)
            else:
                axes = [0 if b else None for b in in_batched]
                outs = jax.vmap(ffi, in_axes=axes, axis_size=axis_size)(*xs)
            return tuple(outs), (True,) * len(outs)

        return op


def _hashable(v: Any) -> Any:
    try:
        hash(v)
    except TypeError:
        return repr(v)
    return (type(v).__name__, v)
