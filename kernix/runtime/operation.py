"""One FFI target as a JAX operation: what a call runs once its arguments are checked (a
:class:`PlainOperation` or a :class:`ShapedOperation`), and kernix's errors for a differentiation that no
derivative kernel gives, and for a call that gives no ``out=`` where it must."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

import jax
import numpy as np

from ..errors import CallError
from ..language.dtypes import numpy_dtype
from ..language.shapes import bind, int_attr_names, parse_signature
from ..language.sizes import evaluate
from ..language.spec import FunctionSpec
from ..language.templates import annotated_name, template_name
from . import layers
from .arguments import check_buffer
from .layers import check_platform, in_shard_map, is_traced, output_structs
from .stubs import input_names
from .tuning import Tuner

__all__ = ["Operation", "PlainOperation", "ShapedOperation"]


class Kernel(Protocol):
    """A derivative kernel's callable (a :class:`~kernix.runtime.function.KernelFunction`)."""

    spec: FunctionSpec
    module: Any

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any: ...


def _kernel_to_write(spec: FunctionSpec, word: str) -> str:
    """How to write ``spec``'s backward (``word="vjp"``) or tangent (``"jvp"``) kernel, and what it takes."""
    name = spec.name
    t = template_name(spec) if spec.template_args else ""
    suffix = "_bwd" if word == "vjp" else "_jvp"
    annotation = f"{t}{suffix}<...> {word}={t}" if t else f"{name}{suffix} {word}={name}"
    inputs = ", ".join(p.name for p in spec.inputs)
    outputs = ", ".join(p.name for p in spec.outputs)
    if word == "vjp":
        what = (f"its inputs: {name}'s inputs ({inputs}), then the cotangents of its outputs ({outputs}); its outputs: "
                f"the cotangents of {name}'s inputs")
    else:
        what = (f"its inputs: {name}'s inputs ({inputs}), then their tangents, in the same order; its outputs: the "
                f"tangents of {name}'s outputs ({outputs})")
    return f"`// @BE {annotation}` ({what})"


def _second_order(spec: FunctionSpec) -> str:
    """For a derivative kernel, the second derivatives that differentiate it ("" for other kernels)."""
    if spec.vjp_of:
        return (f" ({spec.name}() is the backward kernel of {spec.vjp_of}: jax.hessian of {spec.vjp_of}, forward "
                f"over reverse, differentiates it in forward mode, and jax.grad of jax.grad in reverse mode.)")
    if spec.jvp_of:
        return (f" ({spec.name}() is the tangent kernel of {spec.jvp_of}: jax.jacfwd of jax.jacfwd of "
                f"{spec.jvp_of} differentiates it in forward mode, jax.jacrev of jax.jacfwd in reverse mode.)")
    return ""


_DIM_NAMES = "nmkpqrstuvwabcdefghij"


def missing_out(spec: FunctionSpec, inputs: Sequence[Any]) -> CallError:
    """The error for calling a function without shape signature without ``out=``: it shows the ``out=``
    call and the annotation to write, guessed from the inputs (each output like the first input)."""
    name = spec.name
    rets = [p for p in spec.outputs if p.role == "ret"]
    taken = {p.name for p in spec.attrs}
    free = iter(c for c in _DIM_NAMES if c not in taken)
    dims: dict[int, str] = {}
    groups = []
    for x in inputs:
        groups.append("(" + ",".join(dims.setdefault(d, next(free, f"d{d}")) for d in np.shape(x)) + ")")
    groups_of = dict(zip([p.name for p in spec.inputs], groups))
    outputs = ",".join(groups_of[p.name] if p.role == "inout" else (groups[0] if groups else "(n)")
                       for p in spec.outputs)
    annotation = f"// @BE {annotated_name(spec)} {','.join(groups)}->{outputs}"
    args = input_names(spec)
    first = args[0] if args else None
    struct = f"jax.ShapeDtypeStruct({first}.shape, {first}.dtype)" if first else "jax.ShapeDtypeStruct(SHAPE, DTYPE)"
    out = struct if len(rets) == 1 else "[" + ", ".join([struct] * len(rets)) + "]"
    call = f"{name}({', '.join(args + [f'{p.name}=...' for p in spec.attrs] + [f'out={out}'])})"
    where = f" (above {spec.file}:{spec.line})" if spec.file else ""
    shapes = ", ".join(str(tuple(np.shape(x))) for x in inputs) or "none"
    outs = ", ".join(repr(p.name) for p in rets)
    return CallError(
        f"{name}() has no shape signature, so kernix does not know the shape and dtype of its output(s) {outs} "
        f"and will not guess them (a kernel that writes another size would write past the buffer). Pass them "
        f"with out=, e.g.\n    {call}\nor declare them with a shape signature at the end of its annotation"
        f"{where}, e.g.\n    {annotation}\n(this call's input shapes: {shapes}; the output shapes above are a "
        f"guess: write the shapes the kernel writes, ... for leading batch dimensions, e.g. (...,n)->(...,n))."
    )


def _listed(spec: FunctionSpec, out: Any) -> list[Any]:
    """``out=`` as a list of one struct per ``ret`` output (in-place outputs are not listed)."""
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    n = sum(p.role == "ret" for p in spec.outputs)
    if len(outs) != n:
        inplace = sum(p.role == "inout" for p in spec.outputs)
        also = f" (and {inplace} updated in place, which out= does not list)" if inplace else ""
        raise CallError(f"{spec.name}(): out= describes {len(outs)} outputs, the function has {n}{also}")
    return outs


@dataclass(eq=False)
class Operation:
    """The JAX operation of one FFI target (a :class:`PlainOperation` or a :class:`ShapedOperation`).

    ``op(inputs, attrs, raw_attrs, out, vmap_method)`` runs it on checked inputs (``attrs`` converted,
    ``raw_attrs`` as the caller gave them, for a derivative kernel) and returns the output array, or a
    tuple of them.  ``module`` names the module that loaded it, for messages; ``backward`` and ``tangent`` are
    the derivative kernels' callables; ``tuner``, for a group of variants, chooses the target each call runs.

    XLA allocates one result per ``ret``, ``inout`` and ``scratch`` parameter, in declaration order; the
    callable returns the first two kinds; an ``inout`` result is aliased to its operand (so with donation XLA
    updates the caller's buffer in place).
    """

    target: str
    spec: FunctionSpec
    module: str
    backward: Kernel | None = None
    tangent: Kernel | None = None
    tuner: Tuner | None = None

    def _with_scratch(self, outputs: Sequence[Any], inputs: Sequence[Any], attrs: Mapping[str, Any],
                      dims: Mapping[str, int] | None = None, batch: tuple[int, ...] = ()) -> list[Any]:
        """``outputs`` with the scratch buffer's struct inserted, sized by its expression over ``dims``
        and the integer attributes, times the ``batch`` shape."""
        full = list(outputs)
        if self.spec.scratch is not None:
            values = {n: int(attrs[n]) for n in int_attr_names(self.spec) if n in attrs}
            nbytes = evaluate(self.spec.scratch, {**values, **(dims or {})}, function=self.spec.name)
            at = [p.role for p in self.spec.results].index("scratch")
            full.insert(at, output_structs([((*batch, nbytes), np.uint8)], inputs)[0])
        return full

    def _returned(self, results: Sequence[Any]) -> tuple[Any, ...]:
        """Of the results of the FFI call, those the callable returns: the outputs, in order."""
        return tuple(r for r, p in zip(results, self.spec.results) if p.role != "scratch")

    def _ffi(
        self, results: Callable[[Sequence[Any]], list[Any]], attrs: Mapping[str, Any], vmap_method: str | None,
    ) -> layers.Call:
        """The plain FFI call (result structs ``results(inputs)``) behind the platform check; returns the outputs
        (of the target the tuner chooses, for a group of variants)."""
        inputs = [p.name for p in self.spec.inputs]  # (each in-place result aliases its operand)
        aliases = {inputs.index(p.name): k for k, p in enumerate(self.spec.results) if p.role == "inout"} or None
        effect = self.spec.has_side_effect
        where = {"target": self.target, "function": self.spec.name, "module": self.module, "side_effect": effect}

        def ffi(*xs: Any) -> tuple[Any, ...]:
            structs = results(xs)

            def call(target: str, plain: bool = False) -> Callable[..., tuple[Any, ...]]:
                # (plain: a call to time, outside any shard_map, never merged with another)
                outs = [jax.ShapeDtypeStruct(s.shape, s.dtype) for s in structs] if plain else structs
                made = jax.ffi.ffi_call(target, outs, vmap_method=vmap_method, has_side_effect=effect or plain,
                                        input_output_aliases=aliases)
                return lambda *ys: self._returned(made(*ys, **attrs))

            checked = check_platform(xs, **where) if is_traced(xs) else xs
            return call(self.target)(*checked) if self.tuner is None else self.tuner.call(call, checked)

        return ffi

    def _refusal(self) -> CallError:
        """The error for reverse-mode differentiation, which no backward kernel declares; without a tangent
        kernel either, for any differentiation."""
        spec, name = self.spec, self.spec.name
        if self.tangent is not None:
            return CallError(
                f"{name}() cannot be differentiated in reverse mode (jax.grad, jax.vjp, jax.jacrev, jax.hessian): no "
                f"backward kernel declares vjp={name}, and its tangent kernel {self.tangent.spec.name}() gives "
                f"forward mode only. Write jax.jacfwd instead of jax.jacrev or jax.grad, and jax.jvp instead of "
                f"jax.vjp; or write a backward kernel and annotate it {_kernel_to_write(spec, 'vjp')}."
                f"{_second_order(spec)}"
            )
        needs_signature = "" if spec.signature else (
            f" For either, give {name} a shape signature (`// @BE {annotated_name(spec)} (...,n)->(...,n)`, "
            "say), which shapes the derivatives.")
        return CallError(
            f"{name}() cannot be differentiated: no backward kernel declares vjp={name}. For reverse mode "
            f"(jax.grad, jax.vjp), write one and annotate it {_kernel_to_write(spec, 'vjp')}, or wrap the call in a "
            f"jax.custom_vjp whose backward pass is written in JAX. For forward mode (jax.jvp, jax.jacfwd), write a "
            f"tangent kernel and annotate it {_kernel_to_write(spec, 'jvp')}.{needs_signature}{_second_order(spec)}"
        )

    def _forward_mode(self) -> CallError:
        """The error for forward-mode differentiation, which no tangent kernel declares while the backward kernel
        gives reverse mode only (jax.hessian needs a tangent kernel of that one too, unless it has one)."""
        name, bwd = self.spec.name, self.backward
        assert bwd is not None
        hessian = "" if bwd.module.tangent_name(bwd.spec.name) is not None else (
            f" jax.hessian (forward over reverse) needs one of {bwd.spec.name}() too: "
            f"{_kernel_to_write(bwd.spec, 'jvp')}.")
        return CallError(
            f"{name}() cannot be differentiated in forward mode (jax.jvp, jax.jacfwd, jax.hessian, or calling the "
            f"function jax.linearize returns): no tangent kernel declares jvp={name}, and its backward kernel "
            f"{bwd.spec.name}() gives reverse mode only. Write jax.jacrev instead of jax.jacfwd, and jax.vjp (vector-"
            f"Jacobian products) instead of jax.jvp; or write a tangent kernel and annotate it "
            f"{_kernel_to_write(self.spec, 'jvp')}.{hessian}{_second_order(self.spec)}"
        )


class PlainOperation(Operation):
    """A function without a shape signature: one ``jax.ffi.ffi_call``, its outputs as ``out=`` gives them."""

    def __call__(
        self, inputs: Sequence[Any], attrs: Mapping[str, Any], raw_attrs: Mapping[str, Any], out: Any,
        vmap_method: str | None,
    ) -> Any:
        outs = self._outputs(out, inputs)

        def results(xs: Sequence[Any]) -> list[Any]:
            inplace = {p.name: x for p, x in zip(self.spec.inputs, xs) if p.role == "inout"}
            given = iter(outs)
            full = [output_structs([(np.shape(inplace[p.name]), inplace[p.name].dtype)], xs)[0]
                    if p.role == "inout" else next(given) for p in self.spec.outputs]
            return self._with_scratch(full, xs, attrs)

        return _unpack(layers.refusing(self._ffi(results, attrs, vmap_method), self._refusal)(*inputs))

    def _outputs(self, out: Any, inputs: Sequence[Any]) -> list[Any]:
        """``out=`` checked against the spec: the struct of each ``ret`` output."""
        spec = self.spec
        rets = [p for p in spec.outputs if p.role == "ret"]
        if out is None:
            if not rets:  # every output is updated in place: its shape is its input's
                return []
            raise missing_out(spec, inputs)
        outs = _listed(spec, out)
        for o, p in zip(outs, rets):
            check_buffer(spec.name, p, o, "output")
        if in_shard_map(inputs):  # the outputs vary over the mesh axes the inputs vary over
            return output_structs([(tuple(np.shape(o)), o.dtype) for o in outs], inputs)
        return outs


@dataclass(eq=False)
class ShapedOperation(Operation):
    """A function with a shape signature: outputs from the signature, and the
    layers of :mod:`kernix.runtime.layers` around the FFI call."""

    def __post_init__(self) -> None:
        assert self.spec.signature is not None
        self.signature = parse_signature(self.spec.signature)
        self._built: dict[Any, layers.Call] = {}

    def _structs(self, inputs: Sequence[Any], attrs: Mapping[str, Any], *, scratch: bool = True) -> list[Any]:
        """Check ``inputs`` against the signature; the ``jax.ShapeDtypeStruct`` of each output (and the scratch)."""
        b = bind(self.signature, self.spec, [np.shape(x) for x in inputs], [np.dtype(x.dtype).name for x in inputs],
                 attrs)
        outs = output_structs([(s, numpy_dtype(d)) for s, d in zip(b.out_shapes, b.out_dtypes)], inputs)
        return self._with_scratch(outs, inputs, attrs, b.dims, b.batch_shape) if scratch else outs

    def __call__(
        self, inputs: Sequence[Any], attrs: Mapping[str, Any], raw_attrs: Mapping[str, Any], out: Any,
        vmap_method: str | None,
    ) -> Any:
        expected = self._structs(inputs, attrs, scratch=False)  # raises CallError before anything runs
        if out is not None:
            rets = [(e, p) for e, p in zip(expected, self.spec.outputs) if p.role == "ret"]
            for o, (e, p) in zip(_listed(self.spec, out), rets):
                if tuple(np.shape(o)) != tuple(e.shape) or np.dtype(o.dtype) != np.dtype(e.dtype):
                    raise CallError(
                        f"{self.spec.name}(): out= gives output {p.name!r} shape {tuple(np.shape(o))} and dtype "
                        f"{np.dtype(o.dtype)}, but the signature {self.spec.signature} gives shape "
                        f"{tuple(e.shape)} and dtype {np.dtype(e.dtype)}"
                    )
        key = (tuple(sorted((k, _hashable(v)) for k, v in attrs.items())), vmap_method)
        fn = self._built.get(key)
        if fn is None:
            fn = self._built[key] = self._build(dict(attrs), dict(raw_attrs), vmap_method)
        return _unpack(fn(*inputs))

    def _build(self, attrs: dict[str, Any], raw_attrs: dict[str, Any], vmap_method: str | None) -> layers.Call:
        ffi = self._ffi(lambda xs: self._structs(xs, attrs), attrs, vmap_method)
        # custom_partitioning carries no effects (JAX would drop an unused call): not for side effects.
        forward = ffi if self.spec.has_side_effect else layers.partitioned(self.signature, ffi)
        if self.signature.batched:
            forward = layers.batched(self.signature, forward, ffi)
        if self.backward is None and self.tangent is None:
            return layers.refusing(forward, self._refusal)

        def bound(kernel: Kernel | None) -> Callable[..., Any] | None:
            if kernel is None:
                return None
            return functools.partial(kernel, **{p.name: raw_attrs[p.name] for p in kernel.spec.attrs})

        outs = functools.partial(self._structs, attrs=attrs, scratch=False)
        return layers.differentiable(forward, outs, tangent=bound(self.tangent), backward=bound(self.backward),
                                     no_tangent=self._forward_mode, no_backward=self._refusal)


def _unpack(result: Sequence[Any]) -> Any:
    return result[0] if len(result) == 1 else tuple(result)


def _hashable(v: Any) -> Any:
    """A converted attribute (a NumPy scalar, a string, or an array attribute's 1-D array) as a key."""
    if isinstance(v, np.ndarray):  # its every value
        return ("ndarray", v.dtype.str, v.shape, v.tobytes())
    return (type(v).__name__, v)
