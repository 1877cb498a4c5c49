"""Running a kernel on guarded buffers (:func:`buffer_problems`).

Each buffer gets random guard bytes before and after it, and the handler is
called through :mod:`kernix.checking.harness`. A changed input was written
to; a changed guard was written out of bounds; an output element that
differs between a run on ``0xff``-filled and one on zero-filled outputs was
left unwritten or read first. A write beyond the guard (4 KiB before; 4 KiB
plus the buffer's size, up to 1 MiB, after) is not seen and may crash, as
under XLA.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..language.dtypes import ATTR_DTYPES, BUFFER_DTYPES, DTYPES, numpy_dtype
from ..language.spec import FunctionSpec
from .compare import Tolerance, compare, show
from .harness import Harness

__all__ = ["Problem", "buffer_problems", "FRONT_GUARD", "FILLS"]

#: Guard bytes before each buffer; after it, this many plus the buffer's size (up to 1 MiB).
FRONT_GUARD = 4096
#: The bytes the outputs are filled with, one run each.
FILLS = (0xFF, 0x00)

# An attribute's XLA type: the one of the C type it is decoded as (float16 and bfloat16 travel as uint16 bits).
_ATTR_XLA = {d.attr_ctype: d.xla for d in DTYPES if d.attr_ctype and d.name not in ("float16", "bfloat16")}
_XLA_NUMPY = {d.xla: d.name for d in DTYPES}


@dataclass(frozen=True)
class Problem:
    """One problem a guarded run found, about ``parameter`` (``None``: the call).
    ``kind`` is ``"outside"``, ``"fault"``, ``"input"``, ``"unwritten"`` or ``"error"``.
    """

    parameter: str | None
    message: str
    kind: str = "outside"

    @property
    def unsafe(self) -> bool:
        """Whether running the kernel under XLA on the same inputs could corrupt memory."""
        return self.kind in ("outside", "fault")


def _back_guard(nbytes: int) -> int:
    return FRONT_GUARD + min(-(-nbytes // 256) * 256, 1 << 20)


@dataclass
class _Slot:
    name: str
    role: str  # "input" or "output"
    shape: tuple[int, ...]
    dtype: np.dtype
    content: np.ndarray  # the data bytes placed there
    front: np.ndarray
    back: np.ndarray
    address: int = 0

    @property
    def data(self) -> int:
        return self.address + self.front.size

    @property
    def total(self) -> int:
        return self.front.size + self.content.size + self.back.size


def _element(slot: _Slot, byte: int) -> str:
    element = byte // max(slot.dtype.itemsize, 1)
    index = np.unravel_index(element, slot.shape) if slot.shape else ()
    return str(tuple(int(i) for i in index))


def _value(raw: np.ndarray, slot: _Slot, byte: int) -> str:
    size = slot.dtype.itemsize
    start = byte // size * size
    return show(raw[start:start + size].view(slot.dtype)[0])


def _guard_problems(slot: _Slot, front: np.ndarray, back: np.ndarray) -> list[Problem]:
    problems = []
    what = f"{slot.role} {slot.name!r} ({slot.dtype.name}{list(slot.shape)}, {slot.content.size} bytes)"
    changed = np.flatnonzero(front != slot.front)
    if changed.size:
        nearest = slot.front.size - int(changed[-1])
        farthest = slot.front.size - int(changed[0])
        problems.append(Problem(slot.name, (
            f"wrote before the start of {what}: {changed.size} guard byte(s) changed, from {farthest} to "
            f"{nearest} bytes before its first element")))
    changed = np.flatnonzero(back != slot.back)
    if changed.size:
        first, last = int(changed[0]), int(changed[-1])
        elements = slot.dtype.itemsize and f" (up to element {(slot.content.size + last) // slot.dtype.itemsize} " \
            f"of a buffer of {slot.content.size // max(slot.dtype.itemsize, 1)})"
        problems.append(Problem(slot.name, (
            f"wrote past the end of {what}: {changed.size} guard byte(s) changed, from byte {first} to byte "
            f"{last} after its end{elements}")))
    return problems


def _run(
    harness: Harness, memory: Any, handler: int, slots: list[_Slot], attrs: list[tuple[str, str, np.ndarray]],
) -> tuple[list[np.ndarray], list[Problem]]:
    """One call on ``slots``; each slot's bytes read back, and the problems seen."""
    problems: list[Problem] = []
    try:
        for s in slots:
            s.address = memory.allocate(s.total)
            memory.write(s.address, np.concatenate([s.front, s.content, s.back]))
        items = [(BUFFER_DTYPES[s.dtype.name], s.shape, s.data) for s in slots]
        args = [i for i, s in zip(items, slots) if s.role == "input"]
        rets = [i for i, s in zip(items, slots) if s.role == "output"]
        error = harness.call(handler, args, rets, [(n, x, v.ctypes.data) for n, x, v in attrs], memory.stream)
        fault = memory.synchronize()
        if error is not None:
            return [], [Problem(None, f"the kernel returned an error on guarded buffers: {error}", "error")]
        if fault is not None:
            problems.append(Problem(None, (
                f"the kernel faulted on guarded buffers ({fault}); a write or read outside its buffers is the "
                "usual cause. This process's CUDA context cannot be used after such a fault"), "fault"))
            return [], problems
        raws = [memory.read(s.address, s.total) for s in slots]
    finally:
        for s in slots:
            if s.address:
                memory.free(s.address)
                s.address = 0
    contents = []
    for s, raw in zip(slots, raws):
        front, data, back = raw[: s.front.size], raw[s.front.size: s.front.size + s.content.size], raw[
            s.front.size + s.content.size:]
        problems += _guard_problems(s, front, back)
        if s.role == "input":
            changed = np.flatnonzero(data != s.content)
            if changed.size:
                b = int(changed[0])
                problems.append(Problem(s.name, (
                    f"wrote into input {s.name!r}, which it does not declare as an output: element {_element(s, b)} "
                    f"changed from {_value(s.content, s, b)} to {_value(data, s, b)} ({changed.size} byte(s) "
                    "changed). XLA may share an input's buffer with other arrays, and they would change too: write "
                    "results to an output (a non-const BE::Tensor&) instead"), "input"))
        contents.append(data)
    return contents, problems


def buffer_problems(
    harness: Harness, memory: Any, handler: int, spec: FunctionSpec, inputs: Sequence[np.ndarray],
    outputs: Sequence[tuple[Sequence[int], Any]], attrs: dict[str, Any], tolerance: Tolerance,
) -> list[Problem]:
    """The problems of the handler at address ``handler`` run twice on guarded copies of ``inputs``.

    ``memory`` is where to allocate (host or GPU, entered); ``outputs`` each
    output's shape and dtype; ``attrs`` converted by ``coerce_attr``; ``tolerance``
    how far two runs' outputs may differ. Empty when the kernel kept to its
    buffers and wrote every output element.
    """
    attr_values = []
    for p in spec.attrs:
        xla = _ATTR_XLA[ATTR_DTYPES[p.dtype][0]]  # type: ignore[index]
        attr_values.append((p.name, xla, np.array(int(attrs[p.name]) if xla == "U64" else attrs[p.name],
                                                  dtype=numpy_dtype(_XLA_NUMPY[xla]))))
    rng = np.random.default_rng(20240601)
    runs = []
    problems: list[Problem] = []
    for fill in FILLS:
        slots = []
        for p, x in zip(spec.inputs, inputs):
            x = np.ascontiguousarray(x)
            content = x.reshape(-1).view(np.uint8)
            slots.append(_Slot(p.name, "input", x.shape, x.dtype, content, rng.integers(0, 256, FRONT_GUARD, np.uint8),
                               rng.integers(0, 256, _back_guard(content.size), np.uint8)))
        for p, (shape, dtype) in zip(spec.outputs, outputs):
            dtype = np.dtype(dtype)
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            slots.append(_Slot(p.name, "output", tuple(int(d) for d in shape), dtype, np.full(nbytes, fill, np.uint8),
                               rng.integers(0, 256, FRONT_GUARD, np.uint8),
                               rng.integers(0, 256, _back_guard(nbytes), np.uint8)))
        contents, found = _run(harness, memory, handler, slots, attr_values)
        seen = {(f.parameter, f.message.partition(":")[0]) for f in problems}
        problems += [f for f in found if (f.parameter, f.message.partition(":")[0]) not in seen]
        if not contents:
            return problems
        runs.append([c for c, s in zip(contents, slots) if s.role == "output"])
    for p, (shape, dtype), a, b in zip(spec.outputs, outputs, *runs):
        dtype = np.dtype(dtype)
        first, second = a.view(dtype).reshape(shape), b.view(dtype).reshape(shape)
        mismatch = compare(f"output {p.name!r}", first, second, tolerance)
        if mismatch is not None and mismatch.index is not None:
            i = mismatch.index
            problems.append(Problem(p.name, (
                f"output {p.name!r} depends on what its buffer held before the call: element {i} is "
                f"{show(first[i])} after a run whose outputs started as 0x{FILLS[0]:02x} bytes and "
                f"{show(second[i])} after "
                f"one whose outputs started as 0x{FILLS[1]:02x} bytes. The kernel leaves it unwritten, or reads "
                "the output before writing it: XLA does not clear output buffers"), "unwritten"))
    return problems
