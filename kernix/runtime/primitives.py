"""The two JAX primitives kernix defines, for errors JAX would otherwise give
late or in its own words.

``kernix_platform`` (:func:`check_platform`) passes a kernel's inputs through
unchanged and lowers to nothing; its lowering rule, chosen by JAX per
lowering platform, raises :class:`~kernix.errors.CallError` where the kernel's
FFI target has no handler for that platform (XLA would fail at compile time
with ``No FFI handler registered``), under ``jax.jit`` and ``jax.export`` as
well as eagerly.

``kernix_pullback`` (:func:`pullback_tangents`) is the tangent of a kernel's
outputs, linear in its inputs' tangents: reverse mode transposes it into a
call of the backward kernel; evaluating or compiling it, which only forward
mode does, raises kernix's error instead of JAX's message about
``custom_vjp`` functions.
"""

from __future__ import annotations

import functools
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


def _lower_platform(lowering: str | None, ctx: Any, *xs: Any, target: str, function: str, module: str) -> Any:
    have = platforms_of(target)
    platform = _KERNIX_PLATFORM.get(lowering or "")
    if platform is not None and platform in have:
        return xs
    built = " and ".join(_LABELS[p] for p in have) or "no platform (the target is not registered)"
    where = lowering or "a platform other than " + ", ".join(sorted(_KERNIX_PLATFORM))
    if have == ["cuda"]:
        fix = (
            "run it on a GPU: put the inputs there (jax.device_put(x, jax.devices('gpu')[0])), "
            "or jit it for the GPU (jax.jit(f, device=jax.devices('gpu')[0]) or "
            "`with jax.default_device(jax.devices('gpu')[0]):`)"
        )
    elif have == ["cpu"]:
        fix = (
            "run it on the CPU: put the inputs there (jax.device_put(x, jax.devices('cpu')[0])), "
            "or create them inside `with jax.default_device(jax.devices('cpu')[0]):`"
        )
    else:
        fix = "run it on a platform the module was built for"
    other = "a C++ build" if lowering == "cpu" else "a CUDA build" if lowering == "cuda" else None
    also = (
        f"; or load {other} of the same functions under the same target prefix ({target.rpartition('.')[0]!r}), "
        f"which gives {function}() a handler for {lowering} too" if other else ""
    )
    raise CallError(
        f"{function}() of module {module!r} cannot be compiled for {where}: the module was built for {built}, "
        f"and XLA has no handler of its target {target!r} there. To fix it, {fix}{also}; for kernix.export, "
        f"pass platforms={[p for p in have] or ['cpu']!r}."
    )


for _name in _KERNIX_PLATFORM:
    mlir.register_lowering(_platform_p, functools.partial(_lower_platform, _name), platform=_name)
mlir.register_lowering(_platform_p, functools.partial(_lower_platform, None))  # any other platform


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
