"""The ``buffers`` check: a kernel (and its backward kernel) run outside XLA on exact buffers, under
sanitizers, in a child process (:class:`Memory`, over a :class:`~kernix.checking.sanitized.Driver`),
three times on each input (:data:`FILLS`); what the runs show is a list of
:class:`~kernix.checking.sanitized.Problem`. What each
tells: docs/tutorials/testing.rst, "Exact buffers, under sanitizers".
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from ..language.shapes import bind
from ..language.sizes import evaluate
from .compare import compare, first_change, show
from .sanitized import Driver, Problem, driver_for

__all__ = ["Memory", "FILLS"]

#: The bytes the outputs start as, one run each.
FILLS = (0xFF, 0x00, 0xFF)


class Memory:
    """Runs the subject's kernel and backward kernel on exact buffers (``why`` says why it cannot, if so)."""

    def __init__(self, s: Any) -> None:
        self.s = s
        self.cuda = s.fn.module.platform == "cuda"
        sanitizer = "memcheck" if self.cuda else "address"  # CUDA: under compute-sanitizer's tools
        exe, self.why = driver_for(s.fn.module, sanitizer)
        self.driver = Driver(exe, s.fn.module.functions, sanitizer) if exe is not None else None
        #: The outputs of the last forward run (its first call), as the driver gave them.
        self.outputs: list[np.ndarray] = []
        #: The drivers that look for races and uninitialised reads, by tool, built on first use (None: cannot).
        self._race_drivers: dict[str, Driver | None] = {}

    def close(self) -> None:
        for driver in (self.driver, *self._race_drivers.values()):
            if driver is not None:
                driver.close()

    def races(self, xs: Sequence[np.ndarray]) -> list[Problem]:
        """For a kernel on the thread pool: the example, and many of it along the '...' batch, run under
        ThreadSanitizer (a data race between the pool's threads is a problem of kind "crash"); for a CUDA
        kernel, the example under compute-sanitizer's initcheck (a read of uninitialised memory), then its
        racecheck (threads of a block racing on shared memory)."""
        if self.cuda:
            return self._races(xs, "initcheck") or self._races(xs, "racecheck")
        return self._races(xs, "thread") if any(p.role == "threads" for p in self.s.spec.params) else []

    def _races(self, xs: Sequence[np.ndarray], tool: str) -> list[Problem]:
        s = self.s
        if tool not in self._race_drivers:
            exe, _ = driver_for(s.fn.module, tool)
            self._race_drivers[tool] = Driver(exe, s.fn.module.functions, tool) if exe is not None else None
        if (driver := self._race_drivers[tool]) is None:
            return []
        times = max(64, (1 << 20) // max(sum(x.size for x in xs), 1))  # ranges long enough to overlap in time
        big = self._larger(xs, times)
        for inputs in ([xs, big] if big is not None and not self.cuda else [xs]):
            inputs = [np.asarray(x, order="C") for x in inputs]
            outputs = [(o.shape, o.dtype) for o in s.out_structs(inputs)]
            ran = driver.call(s.spec.name, inputs, outputs, s.attrs, self._scratch(s.spec, inputs, s.attrs))
            if isinstance(ran, Problem) and ran.kind == "crash":  # (a driver that did not start: no finding)
                under = f"compute-sanitizer {tool}" if self.cuda else "ThreadSanitizer"
                return [replace(ran, message=f"under {under}, on {s.describe_inputs(inputs)}: the kernel "
                                f"{ran.message}", kind="crash")]
        return []

    def _scratch(self, spec: Any, xs: Sequence[np.ndarray], attrs: dict[str, Any]) -> tuple[int, ...]:
        if spec.scratch is None:
            return ()
        values = {p.name: int(attrs[p.name]) for p in spec.attrs if p.dtype and "int" in p.dtype and p.name in attrs}
        batch: tuple[int, ...] = ()
        if self.s.signature is not None and spec is self.s.spec:
            b = bind(self.s.signature, spec, [x.shape for x in xs], [x.dtype.name for x in xs], attrs)
            values.update(b.dims)
            batch = tuple(b.batch_shape)
        return (*batch, evaluate(spec.scratch, values, function=spec.name))

    def run(self, xs: Sequence[np.ndarray], attrs: dict[str, Any] | None = None,
            cotangents: Sequence[np.ndarray] | None = None) -> list[Problem]:
        """The problems of the kernel on inputs ``xs`` (and of its backward kernel on ``xs`` and
        ``cotangents``, when given): empty when it kept to its buffers and wrote every output."""
        assert self.driver is not None
        s = self.s
        attrs = dict(s.attrs if attrs is None else attrs)
        xs = [np.asarray(x, order="C") for x in xs]
        outputs = [(o.shape, o.dtype) for o in s.with_attrs(attrs).out_structs(xs)]
        problems = self._runs(s.spec, xs, outputs, attrs, "")
        if cotangents is not None and s.backward is not None and not any(p.unsafe for p in problems):
            spec = s.fn.module.functions[s.backward]
            grads = [(x.shape, x.dtype) for x in xs]
            problems += self._runs(spec, [*xs, *cotangents], grads, attrs, f"its backward kernel {spec.name}() ")
        return problems

    def _larger(self, xs: Sequence[np.ndarray], times: int) -> list[np.ndarray] | None:
        """``xs`` ``times`` over: stacked along '...', else repeated along the first dimension the inputs
        name (values kept, so indices stay valid); ``None`` when neither can be."""
        s = self.s
        if s.batch_inputs:
            return [np.repeat(x[None], times, axis=0) if i in s.batch_inputs else x for i, x in enumerate(xs)]
        sig = s.signature
        ints = {p.name for p in s.spec.attrs}
        name = next((d for g in (sig.inputs if sig else ()) for d in g.dims if isinstance(d, str) and d not in ints),
                    None)
        if name is None:
            return None
        return [np.tile(x, [times if d == name else 1 for d in g.dims]) for x, g in zip(xs, sig.inputs)]

    def _runs(self, spec: Any, xs: list[np.ndarray], outputs: list[tuple[Any, Any]], attrs: dict[str, Any],
              who: str) -> list[Problem]:
        scratch = self._scratch(spec, xs, attrs)
        runs = []
        for fill in FILLS:
            ran = self.driver.call(spec.name, xs, outputs, attrs, scratch, fill)  # type: ignore[union-attr]
            if isinstance(ran, Problem):
                who = "" if ran.kind == "unavailable" else who or "the kernel "
                return [replace(ran, message=who + ran.message)]
            runs.append(ran)
        if not who:
            self.outputs = [runs[0][p.name] for p in spec.outputs]  # the forward's, for drawn inputs to compare
        problems = []
        for p, x in zip(spec.inputs, xs):
            if p.role != "arg":
                continue
            after = runs[0][p.name]
            if (i := first_change(x, after)) is not None:
                problems.append(Problem(
                    f"{who}wrote into input {p.name!r}, which it does not declare as an output: element {i} changed "
                    f"from {show(x[i])} to {show(after[i])}. XLA may share an input's buffer with other arrays, and "
                    "they would change too: write results to an output (a non-const BE::Tensor&) instead",
                    p.name, "input"))
        for p in spec.outputs:
            first, second, third = (r[p.name] for r in runs)
            changed = compare(f"output {p.name!r}", first, third, self.s.tolerance)
            if changed is not None and changed.index is not None:
                i = changed.index
                problems.append(Problem(
                    f"{who}gives another result when called again on the same inputs: element {i} of output "
                    f"{p.name!r} is {show(first[i])}, then {show(third[i])}. It keeps state across calls, or "
                    "races", p.name, "changing"))
            elif p.role == "ret" and compare(p.name, first, second, self.s.tolerance) is not None:
                item = max(first.itemsize, 1)
                differs = first.reshape(-1).view(np.uint8).reshape(-1, item) != \
                    second.reshape(-1).view(np.uint8).reshape(-1, item)
                flat = np.flatnonzero(differs.any(axis=1))
                shown = [tuple(int(i) for i in np.unravel_index(k, first.shape)) for k in flat[:4]]
                more = f" and {flat.size - 4} more" if flat.size > 4 else ""
                i = shown[0]
                problems.append(Problem(
                    f"{who}leaves {flat.size} of the {first.size} elements of output {p.name!r} unwritten (or reads "
                    f"them before writing them): {', '.join(map(str, shown))}{more}; element {i} is {show(first[i])} "
                    f"when the buffer started as 0xff bytes and {show(second[i])} when it started as zeros. XLA does "
                    "not clear output buffers", p.name, "unwritten"))
        return problems
