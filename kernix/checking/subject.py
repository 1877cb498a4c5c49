"""The kernel under check, its reference and the example (:class:`Subject`),
and the helpers every check shares: calling both, comparing their outputs,
making more examples like the given one."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..language.dtypes import numpy_dtype
from ..errors import CallError
from ..language.shapes import Signature, bind, parse_signature
from .compare import Mismatch, Tolerance, compare, first_change, show

__all__ = ["Subject", "as_outputs", "variants", "stack", "describe"]


def as_outputs(result: Any, count: int, who: str) -> tuple[Any, ...]:
    """``result`` (an array, or a tuple or list of them) as a tuple of ``count`` outputs."""
    outs = tuple(result) if isinstance(result, (tuple, list)) else (result,)
    if len(outs) != count:
        raise CallError(f"{who} returns {len(outs)} array(s), but the kernel has {count} output(s)")
    return outs


def describe(exc: BaseException) -> str:
    """An exception in one line or a few: its type and the start of its message."""
    text = str(exc).strip()
    lines = text.splitlines()
    if len(lines) > 6:
        text = "\n".join(lines[:6]) + " ..."
    return f"{type(exc).__name__}: {text}"


class Subject:
    """A kernel ``fn``, its pure-JAX ``reference`` and the example (``args``,
    ``attrs``) they are compared on, on ``device`` within ``tolerance``.
    """

    def __init__(
        self, fn: Any, reference: Callable[..., Any], args: Sequence[Any], attrs: Mapping[str, Any], device: Any,
        tolerance: Tolerance,
    ) -> None:
        self.fn = fn
        self.spec = fn.spec
        self.reference = reference
        self.attrs = dict(attrs)
        self.device = device
        self.tolerance = tolerance
        self.signature: Signature | None = parse_signature(self.spec.signature) if self.spec.signature else None
        #: The example as NumPy arrays, converted as JAX converts them (float64 is float32 unless 64-bit mode is on).
        self.example = tuple(np.array(self.put(a)) for a in args)
        self.backward: str | None = fn.module.backward_name(self.spec.name) if self.signature is not None else None
        self.tangent: str | None = fn.module.tangent_name(self.spec.name) if self.signature is not None else None
        self.name = fn.target
        self.input_names = [p.name for p in self.spec.inputs]
        self.output_names = [p.name for p in self.spec.outputs]
        #: The positions of the inputs whose signature group has ``...``.
        self.batch_inputs = [i for i, g in enumerate(self.signature.inputs) if g.batch] if self.signature else []

    def with_attrs(self, changed: Mapping[str, Any]) -> Subject:
        """The same subject with some attributes changed."""
        other = copy.copy(self)
        other.attrs = {**self.attrs, **changed}
        return other

    def put(self, x: Any) -> Any:
        """``x`` as a new JAX array on the subject's device (NumPy float64 is float32 unless 64-bit mode is on);
        never sharing memory with ``x``, so a kernel that writes into it cannot change ``x``."""
        with jax.default_device(self.device):
            return jax.device_put(jnp.array(np.array(x, copy=True)), self.device)

    @property
    def args(self) -> tuple[Any, ...]:
        """Fresh device arrays of the example (a kernel that writes into its inputs cannot change the example)."""
        return tuple(self.put(x) for x in self.example)

    def changed_input(self, args: Sequence[Any], example: Sequence[np.ndarray] | None = None) -> str | None:
        """Which of ``args``, after a call, no longer holds ``example`` (default: the example), and how."""
        for name, a, e in zip(self.input_names, args, self.example if example is None else example):
            after = np.asarray(a)
            if (i := first_change(e, after)) is not None:
                return (f"the kernel changed its input {name!r} (element {i}: {show(e[i])} became "
                        f"{show(after[i])}), which it does not declare as an output: the caller's array changed")
        return None

    def describe_inputs(self, xs: Sequence[Any], attrs: Mapping[str, Any] | None = None) -> str:
        """``x: float32[3,4], k=2``: each input's dtype and shape, and the attributes."""
        attrs = self.attrs if attrs is None else attrs
        parts = [f"{n}: {np.dtype(x.dtype).name}[{','.join(map(str, np.shape(x)))}]" for n, x in zip(self.input_names, xs)]
        parts += [f"{p.name}={attrs[p.name]!r}" for p in self.spec.attrs if p.name in attrs]
        return ", ".join(parts)

    def ref(self, *xs: Any) -> tuple[Any, ...]:
        """The reference's outputs, as a tuple."""
        return as_outputs(self.reference(*xs, **self.attrs), len(self.spec.outputs), "the reference")

    def out_structs(self, xs: Sequence[Any]) -> list[Any]:
        """The outputs' ``jax.ShapeDtypeStruct`` for inputs ``xs``: from the
        signature, or (no signature) from the reference's outputs."""
        if self.signature is not None:
            b = bind(self.signature, self.spec, [jnp.shape(x) for x in xs], [np.dtype(x.dtype).name for x in xs],
                     self.attrs)
            return [jax.ShapeDtypeStruct(s, numpy_dtype(d)) for s, d in zip(b.out_shapes, b.out_dtypes)]
        structs = [jax.ShapeDtypeStruct(jnp.shape(x), x.dtype) for x in xs]
        return list(jax.eval_shape(self.ref, *structs))

    def kernel(self, *xs: Any) -> tuple[Any, ...]:
        """The kernel's outputs, as a tuple (``out=`` from the reference when it has no signature)."""
        out = None if self.signature is not None else self.out_structs(xs)
        return as_outputs(self.fn(*xs, out=out, **self.attrs), len(self.spec.outputs), "the kernel")

    def mismatch(self, got: Sequence[Any], want: Sequence[Any], how: str = "", scale: float = 1.0,
                 names: Sequence[str] | None = None, kind: str = "output", against: str = "the reference",
                 floor: float = 0.0) -> tuple[Mismatch, str] | None:
        """The first output (or gradient) that differs, and its parameter's name (``scale``, ``floor``: as
        :class:`~kernix.checking.compare.Tolerance` takes them)."""
        tolerance = dataclasses.replace(self.tolerance, scale=scale, floor=floor)
        for name, g, w in zip(names or self.output_names, got, want):
            m = compare(f"{kind} {name!r}{how}", g, w, tolerance, against)
            if m is not None:
                return m, name
        return None


def _perturbed(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Another array like ``x``: floating values scaled by 0.5 to 1.5 each
    (signs and magnitudes kept, so a domain like x > 0 is kept), other values
    shuffled (indices stay valid)."""
    if np.issubdtype(x.dtype, np.inexact) or x.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        factor = rng.uniform(0.5, 1.5, x.shape)
        return (x.astype(np.float64) * factor).astype(x.dtype)
    flat = x.reshape(-1).copy()
    rng.shuffle(flat)
    return flat.reshape(x.shape)


def variants(args: Sequence[Any], count: int, seed: int = 0) -> list[tuple[np.ndarray, ...]]:
    """``count`` examples like ``args``: ``args`` itself, then perturbed copies."""
    rng = np.random.default_rng(seed)
    base = tuple(np.asarray(a) for a in args)
    return [base] + [tuple(_perturbed(a, rng) for a in base) for _ in range(count - 1)]


def stack(examples: Sequence[Sequence[Any]], index: int) -> np.ndarray:
    """Input ``index`` of every example, stacked along a new leading axis."""
    return np.stack([np.asarray(e[index]) for e in examples])
