"""Inputs drawn from the shape signature with `hypothesis <https://hypothesis.readthedocs.io>`_
(``pip install "kernix[check]"``), failures shrunk to a small example.

Each example binds every dimension name to a size, draws up to two ``...``
batch dimensions (0 included), one dtype combination, and values in the range
of the example's (a constant ``c``: between ``c/2`` and ``2c``). Outputs and
gradients are compared with the reference's and the kernel runs on guarded
buffers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np

from ..errors import CallError, KernixError
from .report import CheckResult
from .subject import Subject, describe
from .transforms import GRAD_SCALE, cotangents, example_cotangents, gradients

__all__ = ["DEFAULT_SIZES", "BATCH_SIZES", "require_hypothesis", "check_drawn"]

#: The sizes a dimension is drawn from, simplest first (hypothesis shrinks towards the front).
DEFAULT_SIZES = (1, 2, 3, 5, 4, 7, 8, 13, 17, 32)
#: The sizes of a ``...`` batch dimension.
BATCH_SIZES = (1, 0, 2, 3, 5)


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


@dataclass
class _Failure:
    detail: str
    parameter: str | None
    difference: float | None
    index: tuple[int, ...] | None
    example: tuple[np.ndarray, ...]
    described: str


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


def _values(example: np.ndarray, shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if np.issubdtype(dtype, np.integer):
        lo, hi = (int(example.min()), int(example.max())) if example.size else (0, 3)
        return rng.integers(lo, hi + 1, shape).astype(dtype)
    lo, hi = _value_range(example)
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.uniform(lo, hi, shape) + 1j * rng.uniform(lo, hi, shape)).astype(dtype)
    return rng.uniform(lo, hi, shape).astype(dtype)


def _describe(s: Subject, xs: Sequence[np.ndarray], dims: Mapping[str, int], batch: Sequence[int]) -> str:
    inputs = ", ".join(f"{n}: {x.dtype.name}[{','.join(map(str, x.shape))}]" for n, x in zip(s.input_names, xs))
    bound = ", ".join(f"{k}={v}" for k, v in dims.items())
    lead = f"'...'={tuple(batch)}" if s.batch_inputs else ""
    return f"{inputs} ({', '.join(p for p in (bound, lead) if p) or 'no dimensions'})"


def check_drawn(
    s: Subject, examples: int, seed: int | None, sizes: Mapping[str, Any], values: Mapping[str, Callable[..., Any]],
    dtype_combos: Sequence[tuple[np.dtype, ...]], memory: Any,
) -> CheckResult:
    """The ``drawn`` row: ``examples`` inputs drawn with ``sizes``, ``values`` and
    ``dtype_combos``; ``memory`` (a :class:`~kernix.checking.memory.Memory`, or ``None``) runs each
    on exact buffers first.
    """
    sig = s.signature
    if sig is None:
        return CheckResult("drawn", "n/a", "no shape signature: kernix cannot tell which other shapes the kernel "
                           f"accepts; give it one (`// @BE {s.spec.name} (...,n)->(...,n)`, say)")
    if examples <= 0:
        return CheckResult("drawn", "n/a", "examples=0")
    hypothesis = require_hypothesis()
    st = hypothesis.strategies
    int_attrs = {p.name for p in s.spec.attrs if p.dtype and "int" in p.dtype}
    fixed = {n: int(s.attrs[n]) for n in sig.names if n in int_attrs}
    names = [n for n in sig.names if n not in fixed and any(n in g.dims for g in sig.inputs)]
    unknown = sorted(set(sizes) - set(names))
    if unknown:
        raise CallError(f"kernix.check: sizes= names {', '.join(map(repr, unknown))}, which the signature "
                        f"{sig} does not draw (it draws: {', '.join(names) or 'none'})")
    unknown = sorted(set(values) - set(s.input_names))
    if unknown:
        raise CallError(f"kernix.check: values= names {', '.join(map(repr, unknown))}, which {s.spec.name}() "
                        f"does not take as an input (its inputs: {', '.join(s.input_names) or 'none'})")

    def choices(name: str) -> Any:
        given = sizes.get(name, DEFAULT_SIZES)
        return st.just(int(given)) if isinstance(given, (int, np.integer)) else st.sampled_from(list(given))

    # A typed XLA FFI buffer of fixed rank (xla::ffi::Buffer<T, R>) in a '...' group fixes the batch rank.
    ranks = {p.rank - len(g.dims) for p, g in zip(s.spec.inputs, sig.inputs) if g.batch and p.rank is not None}
    low, high = (min(ranks), min(ranks)) if ranks else (0, 2)
    strategy = st.tuples(
        st.fixed_dictionaries({n: choices(n) for n in names}),
        st.lists(st.sampled_from(BATCH_SIZES), min_size=low, max_size=high) if s.batch_inputs else st.just([]),
        st.sampled_from(list(dtype_combos)),
        st.integers(0, 2**32 - 1),
    )
    base = list(s.example)
    state: dict[str, Any] = {"run": 0, "failure": None}
    grads = s.backward is not None

    def fail(detail: str, xs: Sequence[np.ndarray], described: str, parameter: str | None = None,
             difference: float | None = None, index: tuple[int, ...] | None = None) -> None:
        state["failure"] = _Failure(detail, parameter, difference, index, tuple(xs), described)
        raise AssertionError(detail)

    @jax.jit
    def evaluate(args: list[Any], cts: list[Any] | None) -> tuple[Any, ...]:
        """Kernel and reference (and their gradients): one compile per drawn shape, not one per operation."""
        if cts is None:
            return s.kernel(*args), s.ref(*args), None, None
        return s.kernel(*args), s.ref(*args), gradients(s.kernel, args, cts), gradients(s.ref, args, cts)

    def one(drawn: tuple[Any, ...]) -> None:
        dims, batch, combo, value_seed = drawn
        dims = {**dims, **fixed}
        rng = np.random.default_rng(value_seed)
        xs = []
        for i, (g, dtype) in enumerate(zip(sig.inputs, combo)):
            shape = tuple(batch if g.batch else ()) + tuple(d if isinstance(d, int) else dims[d] for d in g.dims)
            make = values.get(s.input_names[i])
            x = make(shape, dtype, rng, dict(dims)) if make else _values(base[i], shape, dtype, rng)
            xs.append(np.asarray(x, dtype=dtype).reshape(shape))
        described = _describe(s, xs, {k: v for k, v in dims.items() if k not in fixed}, batch)
        args = [s.put(x) for x in xs]
        try:
            jax.eval_shape(s.ref, *args)
        except Exception:  # noqa: BLE001 - any refusal: not an input the reference takes
            hypothesis.reject()  # not an input the reference takes
        state["run"] += 1
        floating = [n for n, x in zip(s.input_names, args) if np.issubdtype(x.dtype, np.inexact)]
        cts = cotangents(s, args) if grads and floating else None
        problems = memory.run(xs, cotangents=example_cotangents(s, xs) if cts is not None else None) \
            if memory is not None else []
        for p in problems:  # first: a kernel that crashes would take this process down under XLA
            if p.unsafe:
                fail(p.message, xs, described, p.parameter)
        try:
            got, want, got_grads, want_grads = evaluate(args, cts)
        except Exception as exc:  # noqa: BLE001 - what the kernel raised is the finding
            fail(f"the kernel raised {describe(exc)}, where the reference did not", xs, described)
        changed = s.changed_input(args, xs)
        if changed:
            fail(changed, xs, described, changed.split("'")[1])
        found = s.mismatch(got, want)
        if found:
            fail(found[0].message, xs, described, found[1], found[0].difference, found[0].index)
        if cts is not None:
            found = s.mismatch(got_grads, want_grads, scale=GRAD_SCALE, names=floating, kind="gradient of input")
            if found:
                fail(found[0].message, xs, described, found[1], found[0].difference, found[0].index)
        if problems:
            fail(problems[0].message, xs, described, problems[0].parameter)

    settings = hypothesis.settings(
        max_examples=examples, deadline=None, database=None, derandomize=seed is None,
        phases=(hypothesis.Phase.explicit, hypothesis.Phase.generate, hypothesis.Phase.shrink),
        suppress_health_check=list(hypothesis.HealthCheck), report_multiple_bugs=False,
        verbosity=hypothesis.Verbosity.quiet, print_blob=False,
    )
    test = hypothesis.given(strategy)(one)
    if seed is not None:
        test = hypothesis.seed(seed)(test)
    refused = CheckResult("drawn", "failed", "the reference raised on every drawn input: constrain the sizes "
                          "(sizes={name: [...]}) or the values (values={input: f}) to inputs it takes")
    try:
        settings(test)()
    except Exception as exc:  # noqa: BLE001 - what the kernel raised is the finding
        f = state["failure"]
        if f is None:
            return refused if state["run"] == 0 else CheckResult("drawn", "failed",
                                                                 f"drawing inputs failed: {describe(exc)}")
        return CheckResult("drawn", "failed", f"{f.detail}; on drawn inputs {f.described}", f.difference, f.index,
                           f.parameter, f.example)
    if state["run"] == 0:
        return refused
    what = " and gradients" if grads else ""
    guarded = ", and on exact buffers under sanitizers" if memory is not None else ""
    batches = ", empty batches included" if s.batch_inputs else ""
    return CheckResult("drawn", "passed", f"{state['run']} examples drawn from the signature{batches}: outputs{what} "
                       f"match the reference{guarded}")
