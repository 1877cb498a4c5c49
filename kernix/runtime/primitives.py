"""The two JAX primitives kernix defines, for errors JAX would otherwise give
late or in its own words.

``kernix_platform`` (:func:`check_platform`) passes a kernel's inputs through
unchanged and lowers to nothing; its lowering rule raises :class:`~kernix.errors.CallError` where the kernel's
FFI target has no handler for a platform it is lowered for (XLA would fail at compile time
with ``No FFI handler registered``), under ``jax.jit`` and ``jax.export`` as
well as eagerly.

``kernix_pullback`` (:func:`pullback_tangents`) is the tangent of a kernel's
outputs, linear in its inputs' tangents: reverse mode transposes it into a
call of the backward kernel; evaluating or compiling it, which only forward
mode does, raises kernix's error instead of JAX's message about
``custom_vjp`` functions.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from ..errors import CallError
from .registry import platforms_of

__all__ = ["check_platform", "pullback_tangents"]

# -- the platform check --------------------------------------------------------------------

_platform_p = Primitive("kernix_platform")
_platform_p.multiple_results = True


def _eager_platform(*xs: Any, function: str, module: str, side_effect: bool = False, **_: Any) -> tuple[Any, ...]:
    """The check applied eagerly (a custom_jvp evaluates its traced body one equation at a time):
    arrays spread over several devices are refused for a kernel with side effects, as lowering
    refuses them under ``jax.jit`` (XLA's partitioner fails on them with an internal error)."""
    if side_effect:
        devices = max((len(x.sharding.device_set) for x in xs if hasattr(x, "sharding")), default=1)
        if devices > 1:
            _refuse_partitioned_effect(function, module, devices)
    return xs


_platform_p.def_impl(_eager_platform)
_platform_p.def_abstract_eval(lambda *avals, **_: avals)
batching.primitive_batchers[_platform_p] = lambda xs, dims, **params: (_platform_p.bind(*xs, **params), dims)

#: The lowering platform's name -> the kernix platform whose handlers it runs.
_KERNIX_PLATFORM = {"cpu": "cpu", "cuda": "cuda"}
_LABELS = {"cpu": "the CPU", "cuda": "CUDA GPUs"}


def check_platform(xs: Sequence[Any], *, target: str, function: str, module: str,
                   side_effect: bool = False) -> tuple[Any, ...]:
    """``xs`` unchanged; lowering them for a platform on which ``target`` has no
    handler raises :class:`~kernix.errors.CallError` (``function`` and
    ``module`` name the kernel in the message), and so does lowering a kernel
    with ``side_effect`` for XLA's partitioner to split across devices."""
    return tuple(_platform_p.bind(*xs, target=target, function=function, module=module, side_effect=side_effect))


def _partitioned_devices(ctx: Any) -> int:
    """How many devices XLA's partitioner splits this equation across (1: none,
    or inside a ``jax.shard_map`` manual over every mesh axis)."""
    context = ctx.module_context.axis_context
    mesh = getattr(context, "mesh", None)
    if mesh is not None:  # SPMDAxisContext: manual over some axes
        automatic = [a for a in mesh.axis_names if a not in getattr(context, "manual_axes", ())]
        return int(np.prod([mesh.shape[a] for a in automatic])) if automatic else 1
    return int(getattr(context, "num_devices", 1) or 1)


def _refuse_partitioned_effect(function: str, module: str, devices: int) -> None:
    raise CallError(
        f"{function}() of module {module!r} has side effects (has_side_effect), and this program would have XLA's "
        f"partitioner split it across {devices} devices, which XLA cannot do for a call with side effects (nor "
        f"can kernix partition it per shard without losing a call whose results are unused). Call it inside "
        f"jax.shard_map, where each device calls it on its own shard: jax.shard_map({function}, mesh=mesh, "
        f"in_specs=..., out_specs=...), or run the program on one device."
    )


def _lower_platform(ctx: Any, *xs: Any, target: str, function: str, module: str, side_effect: bool = False) -> Any:
    # The platforms this equation is lowered for: one, or several for jax.export(platforms=[...]).
    lowering = tuple(getattr(ctx, "platforms", None) or ctx.module_context.platforms)
    have = platforms_of(target)
    for p in lowering:
        if _KERNIX_PLATFORM.get(p) not in have:
            _refuse(p, have, target=target, function=function, module=module)
    if side_effect and (devices := _partitioned_devices(ctx)) > 1:
        _refuse_partitioned_effect(function, module, devices)
    return xs


def _refuse(lowering: str, have: list[str], *, target: str, function: str, module: str) -> None:
    where = _LABELS.get(lowering, lowering)
    if not have:
        raise CallError(
            f"{function}() of module {module!r} cannot be compiled: its target {target!r} is registered on no "
            "platform; call the module's register() first"
        )
    built = " and ".join(_LABELS[p] for p in have)
    fixes = []
    if len(have) == 1:
        device = "gpu" if have == ["cuda"] else "cpu"
        fixes.append(
            f"run the computation on {_LABELS[have[0]]}: put its inputs there with jax.device_put(x, "
            f"jax.devices({device!r})[0]), or create them inside `with jax.default_device(jax.devices({device!r})[0]):`"
        )
    if lowering in _KERNIX_PLATFORM:
        loader = "kernix.load_cpp_file" if lowering == "cpu" else "kernix.load_cuda_file"
        prefix = target.rpartition(".")[0]
        if "@" in target:  # a module loaded again with other code: its content-versioned name is its alone
            fixes.append(
                f"load this code again, and a build of it for {where} ({loader}), both with a target prefix new "
                f"to this process, e.g. target_prefix={prefix + '_v2'!r} (this module was loaded again with edited "
                f"code, so its target name is its own), or restart Python and load both under {prefix!r}"
            )
        else:
            fixes.append(
                f"also load a build of these functions for {where} ({loader}(..., target_prefix={prefix!r})), "
                f"which gives {function}() a handler there"
            )
    fixes.append(f"with kernix.export, pass platforms={have!r}")
    raise CallError(
        f"{function}() of module {module!r} cannot be compiled for {where}: the module was built for {built}, so "
        f"XLA has no handler of its target {target!r} there (it would fail with 'No FFI handler registered'). "
        "To fix it: " + "; or ".join(fixes) + "."
    )


mlir.register_lowering(_platform_p, _lower_platform)


# -- the reverse-mode tangent of a kernel ------------------------------------------------------

_pullback_p = Primitive("kernix_pullback")
_pullback_p.multiple_results = True
_pullback_p.def_abstract_eval(lambda *avals, out_avals, **_: out_avals)


def pullback_tangents(
    primals: Sequence[Any], tangents: Sequence[Any], *, out_avals: Sequence[Any],
    pullback: Callable[[Sequence[Any], Sequence[Any]], Sequence[Any]], error: Callable[[], Exception],
) -> list[Any]:
    """The tangents (avals ``out_avals``) of a kernel's outputs at ``primals``,
    linear in ``tangents``.

    Transposed (reverse mode), it is ``pullback(primals, cotangents)``, which
    returns one cotangent per tangent.  Evaluated or compiled (forward mode:
    ``jax.jvp``, ``jax.jacfwd``, the function of ``jax.linearize``) it raises
    ``error()``.
    """
    return list(_pullback_p.bind(*primals, *tangents, n_primals=len(primals), out_avals=tuple(out_avals),
                                 pullback=pullback, error=error, vmapped=0))


def _forward_mode(*_: Any, error: Callable[[], Exception], **__: Any) -> Any:
    raise error()


_pullback_p.def_impl(_forward_mode)
mlir.register_lowering(_pullback_p, lambda ctx, *xs, error, **_: _forward_mode(error=error))


def _transpose(cts: Sequence[Any], *args: Any, n_primals: int, pullback: Callable[..., Any], vmapped: int,
               **_: Any) -> list[Any]:
    primals = args[:n_primals]
    cts = [ad.instantiate_zeros(ct) for ct in cts]
    fn = pullback
    for _level in range(vmapped):  # a pullback batched by jax.vmap, one leading axis per level
        fn = jax.vmap(fn)
    grads = fn(tuple(primals), tuple(cts))
    return [None] * n_primals + list(grads)


def _batch(args: Sequence[Any], dims: Sequence[Any], *, out_avals: Sequence[Any], vmapped: int,
           **params: Any) -> tuple[Any, list[int]]:
    # Every argument gets the vmap axis first (an unbatched one is broadcast to it, which
    # transposes to a sum of its cotangents), and the transposed pullback runs under jax.vmap.
    size = next(jnp.shape(a)[d] for a, d in zip(args, dims) if d is not None)
    moved = [jnp.broadcast_to(a, (size, *jnp.shape(a))) if d is None else jnp.moveaxis(a, d, 0)
             for a, d in zip(args, dims)]
    avals = tuple(a.update(shape=(size, *a.shape)) for a in out_avals)
    out = _pullback_p.bind(*moved, out_avals=avals, vmapped=vmapped + 1, **params)
    return out, [0] * len(out)


ad.primitive_transposes[_pullback_p] = _transpose
batching.primitive_batchers[_pullback_p] = _batch
