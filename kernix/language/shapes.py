"""Shape signatures, NumPy's generalized-ufunc notation after an annotation's arg_spec tokens
(``// @BE rms_norm (...,d),(d)->(...,d)``; the notation: docs/reference/arg-spec.rst): parsing, the check
at inference (:func:`check_against_spec`) and the binding when a call is traced (:func:`bind`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .dtypes import BUFFER_DTYPES, x64_hint
from ..errors import CallError, SignatureError
from .names import is_identifier

__all__ = ["Group", "Signature", "Binding", "parse_signature", "check_against_spec", "bind", "int_attr_names"]

_INT_ATTR_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


@dataclass(frozen=True)
class Group:
    """The shape of one buffer in a signature."""

    dims: tuple[Any, ...]  #: the core dimensions: names (``str``) or sizes (``int``)
    batch: bool = False  #: whether the group starts with ``...`` (any leading batch dimensions)
    dtype: str | None = None  #: the pinned dtype, or ``None``

    def __str__(self) -> str:
        parts = (["..."] if self.batch else []) + [str(d) for d in self.dims]
        return "(" + ",".join(parts) + ")" + (f":{self.dtype}" if self.dtype else "")


@dataclass(frozen=True)
class Signature:
    """A parsed shape signature: one :class:`Group` per input, then per output."""

    inputs: tuple[Group, ...]
    outputs: tuple[Group, ...]

    def __str__(self) -> str:
        return ",".join(map(str, self.inputs)) + "->" + ",".join(map(str, self.outputs))

    @property
    def names(self) -> tuple[str, ...]:
        """Every dimension name, in order of first appearance."""
        return tuple(dict.fromkeys(d for g in (*self.inputs, *self.outputs) for d in g.dims if isinstance(d, str)))

    @property
    def batched(self) -> bool:
        """Whether any group takes ``...`` batch dimensions."""
        return any(g.batch for g in (*self.inputs, *self.outputs))


#: A group and the spaces around it.
_GROUP_RE = re.compile(r" *\(([^()]*)\)(?::([A-Za-z0-9_]+))? *")


def _parse_groups(text: str, where: str, full: str) -> tuple[Group, ...]:
    text = text.strip()
    if not text:
        return ()
    groups: list[Group] = []
    pos = 0
    while True:
        m = _GROUP_RE.match(text, pos)
        if m is None:
            raise SignatureError(
                f"bad shape signature {full!r}: expected a group like '(m,n)' in the {where} "
                f"at {text[pos:].lstrip() or 'the end'!r}"
            )
        groups.append(_parse_group(m.group(1), m.group(2), full))
        pos = m.end()
        if pos == len(text):
            return tuple(groups)
        if text[pos] != ",":
            raise SignatureError(f"bad shape signature {full!r}: expected ',' between groups at {text[pos:]!r}")
        pos += 1


def _parse_group(body: str, dtype: str | None, full: str) -> Group:
    items = [s.strip() for s in body.split(",")] if body.strip() else []
    batch = bool(items) and items[0] == "..."
    if batch:
        items = items[1:]
    dims: list[Any] = []
    for item in items:
        if item == "...":
            raise SignatureError(f"bad shape signature {full!r}: '...' may only come first in a group")
        if item.isdigit():
            dims.append(int(item))
        elif is_identifier(item):
            dims.append(item)
        else:
            raise SignatureError(
                f"bad shape signature {full!r}: dimension {item!r} is neither a name nor a non-negative integer"
            )
    if dtype is not None and dtype not in BUFFER_DTYPES:
        raise SignatureError(
            f"bad shape signature {full!r}: unknown dtype {dtype!r}; expected one of: {', '.join(BUFFER_DTYPES)}"
        )
    return Group(tuple(dims), batch, dtype)


def parse_signature(text: str) -> Signature:
    """Parse a shape signature such as ``"(...,d),(d)->(...,d)"`` (a SignatureError names what is malformed)."""
    if not isinstance(text, str):
        raise SignatureError(f"a shape signature must be a string, not {type(text).__name__}")
    full = " ".join(text.split())
    if full.count("->") != 1:
        raise SignatureError(f"bad shape signature {full!r}: it needs exactly one '->' between inputs and outputs")
    left, right = full.split("->")
    sig = Signature(_parse_groups(left, "inputs", full), _parse_groups(right, "outputs", full))
    if not sig.outputs:
        raise SignatureError(f"bad shape signature {full!r}: it has no output group")
    return sig


def int_attr_names(spec: Any) -> list[str]:
    """The names of ``spec``'s integer scalar attributes (what a dimension or a size may name)."""
    return [p.name for p in spec.attrs if p.kind == "scalar" and p.dtype in _INT_ATTR_DTYPES]


def check_against_spec(sig: Signature, spec: Any) -> list[str]:
    """What disagrees between a signature and the function it annotates (empty when nothing): group
    counts, non-integer attributes as dimensions, unbound output dimensions, ``...`` outputs with no
    ``...`` input, in-place groups, and the ranks and dtypes typed buffers fix."""
    problems: list[str] = []
    n_in, n_out = len(spec.inputs), len(spec.outputs)
    if len(sig.inputs) != n_in or len(sig.outputs) != n_out:
        problems.append(
            f"the shape signature {str(sig)!r} has {len(sig.inputs)} input and {len(sig.outputs)} output "
            f"group(s), but {spec.name!r} has {n_in} input(s) and {n_out} output(s)"
        )
        return problems
    attrs = {p.name: p for p in spec.attrs}
    ints = int_attr_names(spec)
    bound = {d for g in sig.inputs for d in g.dims if isinstance(d, str)}
    for g, p in zip(sig.outputs, spec.outputs):
        for d in g.dims:
            if isinstance(d, str) and d not in bound and d not in ints:
                if d in attrs:
                    problems.append(
                        f"dimension {d!r} of output {p.name!r} names attribute {d!r}, which is "
                        f"{attrs[d].dtype} ('{attrs[d].type}'), not an integer"
                    )
                else:
                    problems.append(
                        f"dimension {d!r} of output {p.name!r} is bound by no input and is no integer "
                        f"attribute (attributes: {', '.join(attrs) or 'none'})"
                    )
        if g.batch and not any(i.batch for i in sig.inputs):
            problems.append(f"output {p.name!r} has '...' batch dimensions but no input has")
    for g, p in zip(sig.inputs, spec.inputs):
        for d in g.dims:
            if isinstance(d, str) and d in attrs and d not in ints:
                problems.append(
                    f"dimension {d!r} of input {p.name!r} names attribute {d!r}, which is "
                    f"{attrs[d].dtype}, not an integer"
                )
    in_groups = {p.name: g for g, p in zip(sig.inputs, spec.inputs)}
    for g, p in zip(sig.outputs, spec.outputs):
        if p.role == "inout" and (g.dims, g.batch) != (in_groups[p.name].dims, in_groups[p.name].batch):
            problems.append(f"{p.name!r} is updated in place, so its output group must be its input group "
                            f"{in_groups[p.name]}, not {g}")
        if p.role == "inout" and g.dtype != in_groups[p.name].dtype:
            problems.append(f"{p.name!r} is updated in place: its output group cannot pin another dtype than "
                            f"its input group")
    for g, p in zip((*sig.inputs, *sig.outputs), (*spec.inputs, *spec.outputs)):
        if p.rank is not None and not g.batch and len(g.dims) != p.rank:
            problems.append(f"{p.name!r} has rank {p.rank} ('{p.type}') but its group {g} has {len(g.dims)}")
        if p.dtype is not None and g.dtype is not None and g.dtype != p.dtype:
            problems.append(f"{p.name!r} is {p.dtype} ('{p.type}') but its group pins {g.dtype}")
    return problems


@dataclass(frozen=True)
class Binding:
    """What a call's input shapes bind."""

    dims: Mapping[str, int]  #: dimension name -> size
    batch_shape: tuple[int, ...]  #: the common batch shape of the ``...`` inputs (``()`` if none)
    out_shapes: tuple[tuple[int, ...], ...]
    out_dtypes: tuple[str, ...]  #: each output's dtype name


def bind(
    sig: Signature,
    spec: Any,
    shapes: Sequence[Sequence[int]],
    dtypes: Sequence[str],
    attrs: Mapping[str, Any],
) -> Binding:
    """Bind a call's input ``shapes`` and ``dtypes`` (names) and integer ``attrs`` to ``spec``'s
    signature ``sig``; compute the outputs.  A :class:`~kernix.errors.CallError` names the input, the
    dimension and both values."""
    fn = spec.name
    names = [p.name for p in spec.inputs]
    ints = int_attr_names(spec)
    dims: dict[str, int] = {}
    origin: dict[str, str] = {}
    for n in ints:
        if n in attrs:
            dims[n] = int(attrs[n])
            origin[n] = f"attribute {n!r}"
    batch: tuple[int, ...] | None = None
    batch_from = ""
    for g, name, shape, dtype in zip(sig.inputs, names, shapes, dtypes):
        try:
            shape = tuple(int(s) for s in shape)
        except Exception:  # a symbolic dimension (jax.export.symbolic_shape), which has no int value
            raise CallError(
                f"{fn}(): input {name!r} has shape {tuple(shape)}, with symbolic dimensions, which a function with a "
                f"shape signature cannot be checked against yet; export it with concrete shapes"
            ) from None
        core = len(g.dims)
        if (len(shape) < core) if g.batch else (len(shape) != core):
            want = f"at least {core}" if g.batch else str(core)
            raise CallError(
                f"{fn}(): input {name!r} must have rank {want} (signature group {g}), got shape {shape}"
            )
        if g.dtype is not None and dtype != g.dtype:
            raise CallError(
                f"{fn}(): input {name!r} must be {g.dtype} (signature group {g}), got {dtype}{x64_hint(g.dtype)}"
            )
        lead = shape[: len(shape) - core]
        if g.batch:
            if batch is None:
                batch, batch_from = lead, name
            elif lead != batch:
                raise CallError(
                    f"{fn}(): input {name!r} has batch dimensions '...'={lead} (shape {shape}), "
                    f"but input {batch_from!r} has '...'={batch}; every '...' input needs the same ones"
                )
        for axis, d in enumerate(g.dims):
            size = shape[len(lead) + axis]
            if isinstance(d, int):
                if size != d:
                    raise CallError(
                        f"{fn}(): input {name!r} must have size {d} in dimension {len(lead) + axis} "
                        f"(signature group {g}), got {size} (shape {shape})"
                    )
            elif d in dims:
                if dims[d] != size:
                    raise CallError(
                        f"{fn}(): input {name!r} has dimension {d}={size} (shape {shape}), "
                        f"but {origin[d]} set {d}={dims[d]}"
                    )
            else:
                dims[d] = size
                origin[d] = f"input {name!r}"
    batch = batch or ()
    out_shapes = []
    out_dtypes = []
    first = dtypes[0] if dtypes else None
    own = {p.name: d for p, d in zip(spec.inputs, dtypes)}  # an in-place output keeps its input's dtype
    for g, p in zip(sig.outputs, spec.outputs):
        try:
            core = tuple(d if isinstance(d, int) else dims[d] for d in g.dims)
        except KeyError as exc:
            raise CallError(f"{fn}(): dimension {exc.args[0]} of output {p.name!r} is not bound") from None
        if any(s < 0 for s in core):
            raise CallError(f"{fn}(): output {p.name!r} would have a negative dimension: {core}")
        out_shapes.append((*batch, *core) if g.batch else core)
        dtype = own[p.name] if p.role == "inout" else (g.dtype or p.dtype or first)
        if dtype is None:
            raise CallError(f"{fn}(): output {p.name!r} has no dtype: pin it in the signature, e.g. (n):float32")
        out_dtypes.append(dtype)
    return Binding(dims, batch, tuple(out_shapes), tuple(out_dtypes))
