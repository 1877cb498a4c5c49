"""Gradients of a kernel through the backward kernel that declares ``vjp=`` it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..errors import CallError

if TYPE_CHECKING:
    from ..spec import FunctionSpec
    from .function import KernelFunction
    from .operation import Operation

__all__ = ["with_vjp", "no_backward"]


def no_backward(spec: "FunctionSpec", backward: str | None) -> CallError:
    """The error for differentiating ``spec``'s function where no rule applies:
    it has no backward kernel, or (``backward``) it has one, which gives
    first-order reverse mode only."""
    name = spec.name
    forward_mode = "Forward mode (jax.jvp, jax.jacfwd) is not available for kernels"
    if backward is not None:
        return CallError(
            f"{name}() cannot be differentiated here: its backward kernel {backward}() gives first-order "
            f"reverse-mode gradients (jax.grad, jax.vjp), and a gradient of a gradient would differentiate "
            f"{name}() itself. Neither higher orders nor forward mode (jax.jvp, jax.jacfwd) are available for "
            f"kernels: for those, differentiate an implementation of {name} written in JAX."
        )
    inputs = ", ".join(p.name for p in spec.inputs)
    outputs = ", ".join(p.name for p in spec.outputs)
    needs_signature = "" if spec.signature else (
        f", and give {name} a shape signature (`// @BE {name} (...,n)->(...,n)`, say), which shapes the cotangents")
    return CallError(
        f"{name}() cannot be differentiated: no backward kernel declares vjp={name}. For reverse mode "
        f"(jax.grad, jax.vjp), write one and annotate it `// @BE {name}_bwd vjp={name}` (its inputs: {name}'s "
        f"inputs ({inputs}), then the cotangents of its outputs ({outputs}); its outputs: the cotangents of "
        f"{name}'s inputs){needs_signature}, or wrap the call in a jax.custom_vjp whose backward pass is written "
        f"in JAX. {forward_mode}."
    )


def with_vjp(
    op: "Operation", forward: Callable[..., tuple[Any, ...]], backward: "KernelFunction",
    attrs: Mapping[str, Any],
) -> Callable[..., tuple[Any, ...]]:
    """``forward`` as a ``jax.custom_vjp`` whose backward pass runs ``backward``.

    Parameters
    ----------
    op
        The forward :class:`~kernix.runtime.operation.Operation`.
    forward
        The composed forward call (inputs -> tuple of outputs).
    backward
        The backward kernel: inputs are the forward's inputs then the output
        cotangents; outputs the input cotangents.
    attrs
        The forward call's attribute values (as the caller gave them); the
        backward receives those it declares.

    Returns
    -------
    callable
        Differentiable in reverse mode; integer inputs get ``float0`` cotangents.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    from .varying import output_structs, varying_axes

    def _summed(g: Any, x: Any) -> Any:
        # Inside jax.shard_map an input the same on every device (w) met inputs that
        # differ (x): its cotangent is the sum of every device's.
        extra = varying_axes(g) - varying_axes(x)
        return jax.lax.psum(g, tuple(sorted(extra))) if extra else g

    bwd_attrs = {p.name: attrs[p.name] for p in backward.spec.attrs}

    @jax.custom_vjp
    def f(*xs: Any) -> tuple[Any, ...]:
        return forward(*xs)

    def f_fwd(*xs: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        return forward(*xs), xs

    def f_bwd(xs: tuple[Any, ...], cts: tuple[Any, ...]) -> tuple[Any, ...]:
        outs = op.out_structs(xs, op_attrs)
        cts = tuple(
            jnp.zeros(o.shape, o.dtype) if ct.dtype == jax.dtypes.float0 else ct for ct, o in zip(cts, outs)
        )
        shapes = output_structs([(jnp.shape(x), x.dtype) for x in xs], xs)
        grads = backward(*xs, *cts, out=shapes, **bwd_attrs)
        if not isinstance(grads, tuple):  # one input: one output, returned as it is
            grads = (grads,)
        return tuple(
            _summed(g, x) if jnp.issubdtype(x.dtype, jnp.inexact) else np.zeros(jnp.shape(x), jax.dtypes.float0)
            for g, x in zip(grads, xs)
        )

    op_attrs = {k: v for k, v in attrs.items()}
    f.defvjp(f_fwd, f_bwd)
    return f
