"""The JAX rules a kernel call is wrapped in, each built from plain values (a
parsed :class:`~kernix.language.shapes.Signature`, callables).

:mod:`kernix.runtime.operation` composes them, innermost first:
:func:`partitioned` (per shard, on several devices), :func:`batched` (a
``custom_vmap`` folding a vmap axis into the ``...`` dimensions),
:func:`refusing` (a ``custom_jvp`` that raises kernix's error) or, for a
kernel with a backward kernel, :func:`reverse_only` (a ``custom_jvp`` whose
tangents only reverse mode can use, through the backward kernel).  Either is
the outermost layer, so every differentiation, however the call is reached
(``jax.jit``, ``jax.vmap``, several devices), meets kernix's rule first.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.custom_partitioning import (
    ArrayMapping,
    SdyShardingRule,
    custom_partitioning,
)
from jax.sharding import NamedSharding, PartitionSpec

from ..language.shapes import Group, Signature
from .primitives import pullback_tangents
from .varying import aval, in_shard_map, output_structs, varying_axes

__all__ = ["partitioned", "sharding_rule", "batched", "refusing", "reverse_only"]

Call = Callable[..., tuple[Any, ...]]  # arrays -> tuple of arrays


def sharding_rule(sig: Signature, ranks: Sequence[int]) -> tuple[list[list[str]], list[list[str]], list[str]]:
    """Factor names of each input and output, and the core factors.

    ``ranks`` are the input ranks; the batch rank is that of the ``...`` inputs.
    Batch factors are ``b0, b1, ...``; a named core dimension ``n`` is ``d_n``;
    an integer one gets a factor of its own.
    """
    n_batch = next(r - len(g.dims) for g, r in zip(sig.inputs, ranks) if g.batch)
    batch = [f"b{i}" for i in range(n_batch)]
    core: dict[str, None] = {}
    counter = iter(range(10**6))

    def factors(group: Group) -> list[str]:
        names = []
        for d in group.dims:
            name = f"d_{d}" if isinstance(d, str) else f"c{next(counter)}"
            core.setdefault(name)
            names.append(name)
        return (batch if group.batch else []) + names

    return [factors(g) for g in sig.inputs], [factors(g) for g in sig.outputs], list(core)


def partitioned(sig: Signature, ffi: Call) -> Call:
    """``ffi`` as a ``jax.experimental.custom_partitioning`` whose Shardy rule
    keeps the ``...`` batch dimensions of ``sig`` sharded and replicates the
    core dimensions, so each device runs the kernel on its own shard.

    The batch dimensions are independent problems; every other (core)
    dimension is a ``need_replication`` factor: the kernel sees it whole.
    Only when every output has ``...`` (an output without would be a reduction
    over the batch, which a foreign kernel cannot be split into) and at least
    one input has; with one device, and inside ``jax.shard_map`` (where each
    device already holds its own shard), ``ffi`` itself is used.
    """
    shardable = all(g.batch for g in sig.outputs) and any(g.batch for g in sig.inputs)
    if not shardable or jax.device_count() < 2:
        return ffi
    cache: dict[tuple[int, ...], Any] = {}

    def call(*xs: Any) -> tuple[Any, ...]:
        if in_shard_map(xs):  # each device already has its own shard
            return ffi(*xs)
        ranks = tuple(len(jnp.shape(x)) for x in xs)
        cp = cache.get(ranks)
        if cp is None:
            cp = cache[ranks] = _custom_partitioning(sig, ffi, ranks)
        return cp(*xs)

    return call


def _custom_partitioning(sig: Signature, ffi: Call, ranks: tuple[int, ...]) -> Any:
    ins, outs, core = sharding_rule(sig, ranks)
    n_batch = next(len(f) - len(g.dims) for f, g in zip(ins, sig.inputs) if g.batch)
    rule = SdyShardingRule(
        tuple(ArrayMapping(*f) for f in ins),
        tuple(ArrayMapping(*f) for f in outs),
        need_replication_factors=tuple(core),
    )
    first = next(i for i, g in enumerate(sig.inputs) if g.batch)

    def shardings(mesh: Any, arg_shapes: Any) -> tuple[list[Any], list[Any]]:
        spec = tuple(getattr(arg_shapes[first].sharding, "spec", ())) + (None,) * n_batch
        b = spec[:n_batch]

        def make(group: Group) -> Any:
            lead = b if group.batch else ()
            return NamedSharding(mesh, PartitionSpec(*lead, *([None] * len(group.dims))))

        return [make(g) for g in sig.inputs], [make(g) for g in sig.outputs]

    def infer(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
        return tuple(shardings(mesh, arg_shapes)[1])

    def partition(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
        in_sh, out_sh = shardings(mesh, arg_shapes)
        return mesh, ffi, tuple(out_sh), tuple(in_sh)

    cp = custom_partitioning(ffi)
    cp.def_partition(partition, infer_sharding_from_operands=infer, sharding_rule=rule)
    return cp


def batched(sig: Signature, inner: Call, ffi: Call) -> Call:
    """``inner`` under a ``custom_vmap``: one call of it over a vmap axis where
    ``sig`` allows, else ``jax.vmap`` of the plain ``ffi`` (a loop, or as its
    ``vmap_method`` says)."""
    all_outputs_batch = all(g.batch for g in sig.outputs)

    @jax.custom_batching.custom_vmap
    def op(*xs: Any) -> tuple[Any, ...]:
        return inner(*xs)

    @op.def_vmap
    def rule(axis_size: int, in_batched: Sequence[bool], *xs: Any) -> tuple[Any, Any]:
        in_batched = list(in_batched)
        if all_outputs_batch and all(g.batch for g, b in zip(sig.inputs, in_batched) if b):
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


def refusing(forward: Call, error: Callable[[], Exception]) -> Call:
    """``forward``, raising ``error()`` where JAX differentiates it.

    The rule is a ``jax.custom_jvp`` of ``forward``, so it holds however the
    call is reached: ``jax.grad``, ``jax.jvp``, or a gradient of a ``jax.jit``
    function whose program calls the kernel.  A call on concrete arrays (no
    tracer among the inputs, so nothing can differentiate it) runs ``forward``
    itself: an eager call through ``custom_jvp`` costs about 100 µs more (a
    one-output kernel: 38 µs plain, 139 µs through ``custom_jvp``, 2-core CPU
    machine), and the result is the same.
    """
    guarded = jax.custom_jvp(forward)

    @guarded.defjvp
    def refuse(primals: Any, tangents: Any) -> Any:
        raise error()

    def call(*xs: Any) -> tuple[Any, ...]:
        return guarded(*xs) if any(isinstance(x, jax.core.Tracer) for x in xs) else forward(*xs)

    return call


def _summed(g: Any, x: Any) -> Any:
    # Inside jax.shard_map an input the same on every device (w) met inputs that
    # differ (x): its cotangent is the sum of every device's.
    extra = varying_axes(g) - varying_axes(x)
    return jax.lax.psum(g, tuple(sorted(extra))) if extra else g


def _inexact(x: Any) -> bool:
    return bool(jnp.issubdtype(x.dtype, jnp.inexact))


def reverse_only(
    forward: Call, backward: Callable[..., Any], out_structs: Callable[[Sequence[Any]], list[Any]],
    higher_order: Callable[[], Exception], forward_mode: Callable[[], Exception],
) -> Call:
    """``forward``, differentiable in reverse mode through ``backward``.

    A ``jax.custom_jvp`` whose rule gives the outputs' tangents as a
    :func:`~kernix.runtime.primitives.pullback_tangents`: reverse mode
    (``jax.grad``, ``jax.vjp``, ``jax.jacrev``) transposes it into a call of
    ``backward``; forward mode (``jax.jvp``, ``jax.jacfwd``) raises
    ``forward_mode()`` when it would evaluate or compile it.  The rule
    computes the outputs through :func:`refusing` with ``higher_order``, so a
    derivative of the derivative (``jax.hessian``, a gradient of a gradient)
    raises that.

    Parameters
    ----------
    forward
        The composed forward call (inputs -> tuple of outputs).
    backward
        The backward kernel, its attributes bound: called with the forward's
        inputs, then the output cotangents, and ``out=`` the inputs' shapes
        and dtypes; returns the input cotangents (an array for one input).
    out_structs
        The ``jax.ShapeDtypeStruct`` of each output for given inputs (an
        integer output's cotangent is zeros of its type).
    higher_order, forward_mode
        The errors to raise.

    Returns
    -------
    callable
        Differentiable in reverse mode; integer inputs get ``float0`` cotangents.
    """

    def pullback(xs: Sequence[Any], cts: Sequence[Any]) -> list[Any]:
        given = iter(cts)
        full = [next(given) if _inexact(o) else jnp.zeros(o.shape, o.dtype) for o in out_structs(xs)]
        grads = backward(*xs, *full, out=output_structs([(jnp.shape(x), x.dtype) for x in xs], xs))
        if not isinstance(grads, tuple):  # one input: one output, returned as it is
            grads = (grads,)
        return [_summed(g, x) for g, x in zip(grads, xs) if _inexact(x)]

    primal = refusing(forward, higher_order)
    differentiable = jax.custom_jvp(forward)

    @differentiable.defjvp
    def rule(primals: Any, tangents: Any) -> Any:
        outs = tuple(primal(*primals))
        linear = [t for t, x in zip(tangents, primals) if _inexact(x)]
        avals = [aval(o).to_tangent_aval() for o in outs if _inexact(o)]
        lin = iter(pullback_tangents(primals, linear, out_avals=avals, pullback=pullback, error=forward_mode))
        return outs, tuple(next(lin) if _inexact(o) else np.zeros(jnp.shape(o), jax.dtypes.float0) for o in outs)

    def call(*xs: Any) -> tuple[Any, ...]:
        return differentiable(*xs) if any(isinstance(x, jax.core.Tracer) for x in xs) else forward(*xs)

    return call
