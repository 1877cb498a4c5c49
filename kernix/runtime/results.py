"""How an FFI call's results relate to a kernel's outputs.

XLA allocates one result buffer per ``ret``, ``inout`` and ``scratch``
parameter, in declaration order (the handler binds them in that order).  The
callable returns the ``ret`` and ``inout`` ones (:attr:`Results.visible`):
scratch memory is the kernel's own.  An ``inout`` result is aliased to its
operand (:attr:`Results.aliases`, ``jax.ffi.ffi_call``'s
``input_output_aliases``), so under ``jax.jit`` with donation XLA updates the
caller's buffer in place.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..language.shapes import int_attr_names
from ..language.sizes import evaluate
from ..language.spec import FunctionSpec
from .varying import output_structs

__all__ = ["Results"]


class Results:
    """The result layout of one function (computed once, from its spec)."""

    __slots__ = ("spec", "aliases", "visible", "scratch", "_ints")

    def __init__(self, spec: FunctionSpec) -> None:
        self.spec = spec
        results = spec.results
        inputs = [p.name for p in spec.inputs]
        #: operand index -> result index, for each in-place parameter.
        self.aliases = {inputs.index(p.name): k for k, p in enumerate(results) if p.role == "inout"}
        #: the result indices the callable returns (the outputs, in order).
        self.visible = tuple(k for k, p in enumerate(results) if p.role != "scratch")
        #: the scratch result's index, or None.
        self.scratch = next((k for k, p in enumerate(results) if p.role == "scratch"), None)
        self._ints = int_attr_names(spec)

    def structs(self, outputs: Sequence[Any], inputs: Sequence[Any], attrs: Mapping[str, Any],
                dims: Mapping[str, int] | None = None, batch: tuple[int, ...] = ()) -> list[Any]:
        """The ``jax.ShapeDtypeStruct`` of every result: ``outputs`` (one per
        output) with the scratch buffer's inserted, sized by its expression
        over ``dims`` (a shape signature's, for these inputs) and the integer
        attributes, times the ``batch`` shape."""
        if self.scratch is None:
            return list(outputs)
        values = {n: int(attrs[n]) for n in self._ints if n in attrs}
        values.update(dims or {})
        assert self.spec.scratch is not None
        nbytes = evaluate(self.spec.scratch, values, function=self.spec.name)
        scratch = output_structs([((*batch, nbytes), np.uint8)], inputs)[0]
        full = list(outputs)
        full.insert(self.scratch, scratch)
        return full

    def outputs(self, got: Sequence[Any]) -> tuple[Any, ...]:
        """The outputs among the call's results."""
        return tuple(got[k] for k in self.visible)
