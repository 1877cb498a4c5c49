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
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from ..errors import CallError
from .registry import platforms_of

__all__ = ["check_platform", "pullback_tangents"]

# -- the platform check --------------------------------------------------------------------

_platform_p = Primitive("kernix_platform")
_platform_p.multiple_results = True
_platform_p.def_impl(lambda *xs, **_: xs)
_platform_p.def_abstract_eval(lambda *avals, **_: avals)
batching.primitive_batchers[_platform_p] = lambda xs, dims, **params: (_platform_p.bind(*xs, **params), dims)

#: The lowering platform's name -> the kernix platform whose handlers it runs.
_KERNIX_PLATFORM = {"cpu": "cpu", "cuda": "cuda"}
_LABELS = {"cpu": "the CPU", "cuda": "CUDA GPUs"}


def check_platform(xs: Sequence[Any], *, target: str, function: str, module: str) -> tuple[Any, ...]:
    """``xs`` unchanged; lowering them for a platform on which ``target`` has no
    handler raises :class:`~kernix.errors.CallError` (``function`` and
    ``module`` name the kernel in the message)."""
    return tuple(_platform_p.bind(*xs, target=target, function=function, module=module))


def _lower_platform(ctx: Any, *xs: Any, target: str, function: str, module: str) -> Any:
    # The platforms this equation is lowered for: one, or several for jax.export(platforms=[...]).
    lowering = tuple(getattr(ctx, "platforms", None) or ctx.module_context.platforms)
    have = platforms_of(target)
    for p in lowering:
        if _KERNIX_PLATFORM.get(p) not in have:
            _refuse(p, have, target=target, function=function, module=module)
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
        fixes.append(
            f"also load a build of these functions for {where} ({loader}(..., target_prefix="
            f"{target.rpartition('.')[0]!r})), which gives {function}() a handler there"
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
