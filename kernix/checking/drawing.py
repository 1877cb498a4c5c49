"""Inputs drawn from the shape signature with `hypothesis <https://hypothesis.readthedocs.io>`_
(``pip install "kernix[check]"``), failures shrunk to a small example: the ``drawn`` row. What is
drawn, and what is compared on it: docs/tutorials/testing.rst, "Drawn inputs".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import CallError, KernixError
from .compare import Mismatch
from .report import CheckResult
from ..language.shapes import bind
from .subject import Subject, describe
from .transforms import GRAD_SCALE, cotangents, example_cotangents, floating, gradients

__all__ = ["DEFAULT_SIZES", "BATCH_SIZES", "PATTERNS", "Drawing", "require_hypothesis", "check_drawn"]

#: The sizes a dimension is drawn from, simplest first (hypothesis shrinks towards the front).
DEFAULT_SIZES = (1, 2, 3, 0, 5, 4, 7, 8, 13, 17, 32)
#: The sizes of a ``...`` batch dimension.
BATCH_SIZES = (1, 0, 2, 3, 5)
#: How the values of floating inputs are drawn: in the example's range, all zero, equal along the last
#: axis, a thousand times the example's magnitude, or the example's range moved that far from zero (a
#: variance or a sum of exponentials that cancels); an input where the reference is not finite is not
#: compared.
PATTERNS = ("range", "zeros", "range", "equal", "range", "large", "offset")
_SAID = {"zeros": "all zero", "equal": "equal along the last axis", "large": "large values", "offset": "far from zero"}


@dataclass(frozen=True)
class Drawing:
    """How :func:`kernix.check` draws further inputs, as one value (``drawing=kernix.Drawing(...)``): its
    keywords ``examples``, ``seed``, ``sizes``, ``values`` and ``dtypes`` (see there), and ``attrs``:
    attribute name -> the values to draw it from besides the example's (default: others of its type).
    """

    examples: int = 10
    seed: int | None = None
    sizes: Mapping[str, Any] | None = None
    values: Mapping[str, Callable[..., Any]] | None = None
    dtypes: Sequence[Any] | None = None
    attrs: Mapping[str, Sequence[Any]] | None = None


def require_hypothesis() -> Any:
    """The ``hypothesis`` package, or a clear error saying how to get it."""
    try:
        import hypothesis
    except ImportError:
        raise KernixError(
            "kernix.check draws further inputs with hypothesis, which is not installed: install it with "
            "`pip install \"kernix[check]\"` (or `pip install hypothesis`), or pass examples=0 to check the "
            "given example only"
        ) from None
    return hypothesis


def _value_range(example: np.ndarray) -> tuple[float, float]:
    values = example.astype(np.float64)[np.isfinite(example.astype(np.float64))] if example.size else example
    if values.size == 0:
        return -2.0, 2.0
    lo, hi = float(values.min()), float(values.max())
    if lo < hi:
        return lo, hi
    if lo > 0:
        return lo / 2, lo * 2
    if lo < 0:
        return lo * 2, lo / 2
    return -1.0, 1.0


def _values(example: np.ndarray, shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator,
            pattern: str = "range") -> np.ndarray:
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if np.issubdtype(dtype, np.integer):  # (within the example's range: integers are often indices)
        lo, hi = (int(example.min()), int(example.max())) if example.size else (0, 3)
        if pattern == "zeros" and lo <= 0 <= hi:
            return np.zeros(shape, dtype)
        if pattern in ("equal", "zeros"):  # every element the same (every row in one segment, say)
            return np.full(shape, rng.integers(lo, hi + 1), dtype)
        if pattern == "large":  # beyond the example's range on both sides (an index past the end, say)
            info = np.iinfo(dtype)
            lo, hi = max(lo - (hi - lo) - 1, int(info.min)), min(hi + (hi - lo) + 1, int(info.max))
        return rng.integers(lo, hi + 1, shape).astype(dtype)
    lo, hi = _value_range(example)
    if pattern == "zeros":
        return np.zeros(shape, dtype)
    if pattern == "equal" and shape:
        row = rng.uniform(lo, hi, shape[:-1] + (1,))
        return np.broadcast_to(row, shape).astype(dtype)
    if pattern in ("large", "offset"):
        big = min(1000.0, float(np.finfo(np.float16 if np.dtype(dtype).itemsize <= 2 else np.float32).max) ** 0.25)
        shift = big * max(abs(lo), abs(hi))
        lo, hi = (lo * big, hi * big) if pattern == "large" else (lo + shift, hi + shift)
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.uniform(lo, hi, shape) + 1j * rng.uniform(lo, hi, shape)).astype(dtype)
    return rng.uniform(lo, hi, shape).astype(dtype)


def _attr_choices(p: Any, value: Any, listed: Sequence[Any] | None) -> list[Any]:
    """The values attribute ``p`` is drawn from: the example's first (hypothesis shrinks towards it), then
    the ones the user listed, else others of its type."""
    if listed is not None:
        return [value, *[v for v in listed if not _same(v, value)]]
    if p.kind == "array" and p.dtype is not None:
        arr = np.asarray(value)
        if arr.size == 0 or "int" in p.dtype:  # (integer arrays are often axes or indices: reordered only)
            return [value] if arr.size < 2 else [value, tuple(arr[::-1].tolist())]
        return [value, tuple((arr * 2).tolist()), tuple(arr.tolist()) + (float(arr[-1]),),
                *([tuple(arr[:-1].tolist())] if arr.size > 1 else [])]
    if p.kind != "scalar" or p.dtype is None:
        return [value]
    if p.dtype == "bool":
        return [value, not value]
    if "int" in p.dtype:
        info = np.iinfo(p.dtype)
        return [value, *[v for v in (int(value) + 1, int(value) + 2, int(value) * 2) if info.min <= v <= info.max
                         and v != value]]
    if 0 < value < 1e-2:  # an epsilon, say: 100 first (the case always run), where it outweighs the values
        return [value, 100.0, value * 10, value / 10]
    return [value, *([0.5, 2.0] if value == 0 else [value * 10, value / 10])]


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(np.all(np.asarray(a) == np.asarray(b)))
    except Exception:  # noqa: BLE001 - not comparable: different
        return False


def _explicit(s: Subject, names: Sequence[str], allowed: Callable[[str], list[int]],
              combos: Sequence[tuple[np.dtype, ...]], attrs: Mapping[str, list[Any]], low: int,
              high: int) -> list[tuple[Any, ...]]:
    """The examples every drawing runs first, whatever hypothesis draws: the example's sizes with each
    special pattern, every attribute's other values, every dtype combination, a batch of three, and
    every dimension 0 (each where the sizes allow it)."""
    assert s.signature is not None
    bound = bind(s.signature, s.spec, [x.shape for x in s.example], [x.dtype.name for x in s.example], s.attrs)
    dims = {n: bound.dims[n] if bound.dims.get(n) in allowed(n) else allowed(n)[0] for n in names}
    batch = [b for b in bound.batch_shape if b in BATCH_SIZES][:high]
    batch = batch if len(batch) >= low else [1] * low

    def case(pattern: str = "range", changed: Mapping[str, Any] | None = None, combo: Any = None,
             sizes: Mapping[str, int] | None = None, lead: list[int] | None = None) -> tuple[Any, ...]:
        return ({**dims, **(sizes or {})}, batch if lead is None else lead, combo or combos[0], 0, pattern,
                dict(changed or {}))

    cases = [case(p) for p in PATTERNS if p != "range"]
    cases += [case(changed={n: v}) for n, vs in attrs.items() for v in vs[1:2]]
    cases += [case(combo=c) for c in combos[1:]]
    if s.batch_inputs and high >= 1:
        cases.append(case(lead=[3] + batch[1:] if low <= 1 + len(batch[1:]) <= high else batch))
    empty = {n: 0 for n in names if 0 in allowed(n)}
    if empty:
        cases.append(case(sizes=empty))
    return cases


def _finite(x: Any) -> bool:
    x = np.asarray(x)
    return not floating(x.dtype) or bool(np.all(np.isfinite(x)))


def _describe(s: Subject, xs: Sequence[np.ndarray], dims: Mapping[str, int], batch: Sequence[int],
              attrs: Mapping[str, Any] | None = None, pattern: str = "range") -> str:
    inputs = s.describe_inputs(xs, {})
    if pattern != "range" and (pattern != "offset" or any(floating(x) for x in xs)):  # (integers stay in range)
        inputs += f" ({_SAID[pattern]})"
    if attrs:
        inputs += ", " + ", ".join(f"{k}={v!r}" for k, v in attrs.items())
    bound = ", ".join(f"{k}={v}" for k, v in dims.items())
    lead = f"'...'={tuple(batch)}" if s.batch_inputs else ""
    return f"{inputs} ({', '.join(p for p in (bound, lead) if p) or 'no dimensions'})"


def check_drawn(s: Subject, drawing: Drawing, dtype_combos: Sequence[tuple[np.dtype, ...]], memory: Any) -> CheckResult:
    """The ``drawn`` row: inputs drawn as ``drawing`` says, in ``dtype_combos``; ``memory`` (a
    :class:`~kernix.checking.memory.Memory`, or ``None``) runs each on exact buffers first.
    """
    examples, seed, sizes, values = drawing.examples, drawing.seed, drawing.sizes or {}, drawing.values or {}
    sig = s.signature
    if sig is None:
        return CheckResult("drawn", "n/a", "no shape signature: kernix cannot tell which other shapes the kernel "
                           f"accepts; give it one (`// @BE {s.spec.name} (...,n)->(...,n)`, say)")
    if examples <= 0:
        return CheckResult("drawn", "n/a", "examples=0")
    hypothesis = require_hypothesis()
    st = hypothesis.strategies
    int_attrs = {p.name for p in s.spec.attrs if p.dtype and "int" in p.dtype}
    # (an integer attribute naming a dimension is drawn as a size, and passed)
    names = [n for n in sig.names if any(n in g.dims for g in sig.inputs) or n in int_attrs]
    listed = dict(drawing.attrs or {})
    for given, known, what, which in (
        (sizes, names, "sizes= names", f"the signature {sig} does not draw (it draws: {', '.join(names) or 'none'})"),
        (values, s.input_names, "values= names", f"{s.spec.name}() does not take as an input (its inputs: "
                                                 f"{', '.join(s.input_names) or 'none'})"),
        (listed, [p.name for p in s.spec.attrs], "attribute values are listed for",
         f"{s.spec.name}() does not take as an attribute"),
    ):
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise CallError(f"kernix.check: {what} {', '.join(map(repr, unknown))}, which {which}")

    def allowed(name: str) -> list[int]:
        if name in int_attrs and name not in sizes:
            value = int(s.attrs[name])
            return [value, *[d for d in (value + 1, value * 2, 1) if d != value]]
        given = sizes.get(name, DEFAULT_SIZES)
        return [int(given)] if isinstance(given, (int, np.integer)) else [int(g) for g in given]

    # A typed XLA FFI buffer of fixed rank (xla::ffi::Buffer<T, R>) in a '...' group fixes the batch rank.
    ranks = {p.rank - len(g.dims) for p, g in zip(s.spec.inputs, sig.inputs) if g.batch and p.rank is not None}
    low, high = (min(ranks), min(ranks)) if ranks else (0, 2)
    drawn_attrs = {p.name: _attr_choices(p, s.attrs[p.name], listed.get(p.name)) for p in s.spec.attrs}
    drawn_attrs = {n: v for n, v in drawn_attrs.items() if len(v) > 1}
    kept = [p.name for p in s.spec.attrs if p.name not in drawn_attrs]  # (a string, say: none other is known)
    strategy = st.tuples(
        st.fixed_dictionaries({n: st.sampled_from(allowed(n)) for n in names}),
        st.lists(st.sampled_from(BATCH_SIZES), min_size=low, max_size=high) if s.batch_inputs else st.just([]),
        st.sampled_from(list(dtype_combos)),
        st.integers(0, 2**32 - 1),
        st.sampled_from(PATTERNS),
        st.fixed_dictionaries({n: st.sampled_from(v) for n, v in drawn_attrs.items()}),
    )
    state: dict[str, Any] = {"run": 0, "failure": None}
    grads = s.backward is not None

    def evaluate(t: Subject, args: list[Any], cts: list[Any] | None) -> tuple[Any, ...]:
        """Kernel and reference (and their gradients): one compile per drawn shape, not one per operation."""
        grads = (gradients(t.kernel, args, cts), gradients(t.ref, args, cts)) if cts is not None else (None, None)
        return (t.kernel(*args), t.ref(*args), *grads)

    def one(drawn: tuple[Any, ...]) -> None:
        dims, batch, combo, value_seed, pattern, changed_attrs = drawn
        changed_attrs = {k: v for k, v in {**changed_attrs, **{n: dims[n] for n in int_attrs if n in dims}}.items()
                         if not _same(v, s.attrs[k])}
        t = s.with_attrs(changed_attrs)
        # An input unlike the example (special values, an empty dimension, other attributes): the kernel may
        # refuse it, and where the reference is not finite there is nothing to compare.
        unusual = pattern != "range" or 0 in dims.values() or bool(changed_attrs)
        rng = np.random.default_rng(value_seed)
        xs = []
        for i, (g, dtype) in enumerate(zip(sig.inputs, combo)):
            shape = tuple(batch if g.batch else ()) + tuple(d if isinstance(d, int) else dims[d] for d in g.dims)
            make = values.get(s.input_names[i])
            x = make(shape, dtype, rng, dict(dims)) if make else _values(s.example[i], shape, dtype, rng, pattern)
            xs.append(np.asarray(x, dtype=dtype).reshape(shape))
        described = _describe(s, xs, dims, batch, changed_attrs, pattern)

        def fail(detail: str, parameter: str | None = None, difference: float | None = None,
                 index: tuple[int, ...] | None = None) -> None:
            state["failure"] = CheckResult("drawn", "failed", f"{detail}; on drawn inputs {described}", difference,
                                           index, parameter, tuple(xs))
            raise AssertionError(detail)

        def differs(found: tuple[Mismatch, str] | None, hint: str = "") -> None:
            if found is not None:
                fail(found[0].message + hint, found[1], found[0].difference, found[0].index)

        args = [s.put(x) for x in xs]
        try:
            jax.eval_shape(t.ref, *args)
        except Exception:  # noqa: BLE001 - any refusal: not an input the reference takes
            hypothesis.reject()
        state["run"] += 1
        floats = [n for n, x in zip(s.input_names, args) if floating(x)]
        cts = cotangents(s, args) if grads and floats else None
        problems = memory.run(xs, t.attrs, example_cotangents(s, xs) if cts is not None else None) \
            if memory is not None else []
        for p in problems:  # first: a kernel that crashes would take this process down under XLA
            if p.unsafe:
                fail(p.message, p.parameter)
        def refuses_plain_values() -> bool:
            """Whether the kernel also raises on values in the example's range, with the example's attributes."""
            plain = [_values(s.example[i], x.shape, x.dtype, rng) for i, x in enumerate(xs)]
            if memory is not None:
                return any(p.kind == "error" for p in memory.run(plain))
            try:
                jax.block_until_ready(s.kernel(*[s.put(x) for x in plain]))
            except Exception:  # noqa: BLE001 - it raised
                return True
            return False

        errors = [p.message for p in problems if p.kind == "error"]
        if unusual and errors:
            if 0 in dims.values() or not refuses_plain_values():
                return  # the kernel refuses an unusual input with an error: its right
            fail(errors[0])
        for p in problems:  # an unwritten output, a changed input: wrong on any input the reference takes
            if p.kind not in ("error", "unavailable"):
                fail(p.message, p.parameter)
        try:
            got, want, got_grads, want_grads = jax.jit(functools.partial(evaluate, t))(args, cts)
        except Exception as exc:  # noqa: BLE001 - what the kernel raised is the finding
            if not unusual or (0 not in dims.values() and refuses_plain_values()):
                fail(f"the kernel raised {describe(exc)}, where the reference did not")
            return
        if unusual and not all(_finite(w) for w in [*want, *(want_grads or [])]):
            return
        # Special values leave the reference itself a few rounding errors off (x - mean(x) of an equal row):
        # their results are compared a hundred times more loosely (a wrong one is far off, or not finite).
        scale = 100.0 if pattern != "range" else 1.0
        # Inputs far from zero leave every result a few of their units in the last place off.
        floor = max((4 * float(jnp.finfo(x.dtype).eps) * float(np.max(np.abs(x))) for x in xs
                     if pattern == "offset" and floating(x) and x.size), default=0.0)
        changed = s.changed_input(args, xs)
        if changed:
            fail(changed, changed.split("'")[1])
        differs(s.mismatch(got, want, scale=scale, floor=floor))
        # Outside XLA the kernel's state lives on from every earlier drawn input (under XLA each shape gets its own).
        if memory is not None and memory.outputs:
            differs(s.mismatch(memory.outputs, want, " outside XLA, after earlier calls on other inputs", scale,
                               floor=floor),
                    ": does the kernel keep state (a static, BE::State) across calls?")
        if cts is not None:
            differs(s.mismatch(got_grads, want_grads, scale=GRAD_SCALE * scale, names=floats,
                               kind="gradient of input", floor=floor))
        if errors:  # on exact buffers, not under XLA
            fail(errors[0])

    settings = hypothesis.settings(
        max_examples=examples, deadline=None, database=None,
        phases=(hypothesis.Phase.explicit, hypothesis.Phase.generate, hypothesis.Phase.shrink),
        suppress_health_check=list(hypothesis.HealthCheck), report_multiple_bugs=False,
        verbosity=hypothesis.Verbosity.quiet, print_blob=False,
    )
    # (seeded, not derandomized: hypothesis would derive the seed from this function's source text, and
    # every edit of kernix's code would draw other inputs)
    test = hypothesis.seed(0 if seed is None else seed)(hypothesis.given(strategy)(one))
    # Then, when hypothesis found nothing, the cases every drawing covers (unshrunk: they are the example's size).
    covered = hypothesis.given(strategy)(one)
    for explicit in reversed(_explicit(s, names, allowed, dtype_combos, drawn_attrs, low, high)):
        covered = hypothesis.example(explicit)(covered)
    refused = CheckResult("drawn", "failed", "the reference raised on every drawn input: constrain the sizes "
                          "(sizes={name: [...]}) or the values (values={input: f}) to inputs it takes")
    try:
        settings(test)()
        state["drawn"] = state["run"]
        hypothesis.settings(settings, phases=(hypothesis.Phase.explicit,))(covered)()
    except Exception as exc:  # noqa: BLE001 - what the kernel raised is the finding
        if state["failure"] is None:
            return refused if state["run"] == 0 else CheckResult("drawn", "failed",
                                                                 f"drawing inputs failed: {describe(exc)}")
        return state["failure"]
    if state["run"] == 0:
        return refused
    what = " and gradients" if grads else ""
    guarded = ", and on exact buffers under sanitizers" if memory is not None else ""
    batches = ", empty batches included" if s.batch_inputs else ""
    always = state["run"] - state["drawn"]
    unvaried = (f"; {'attributes' if len(kept) > 1 else 'attribute'} {', '.join(map(repr, kept))} kept the example's "
                f"value (kernix cannot tell which others are valid): to check others, list them, "
                f"drawing=kernix.Drawing(attrs={{{kept[0]!r}: [...]}})") if kept else ""
    return CheckResult("drawn", "passed", f"{state['drawn']} examples drawn from the signature{batches}, and {always} "
                       f"more (special values, other attributes, dtypes, sizes): outputs{what} match the "
                       f"reference{guarded}{unvaried}")
