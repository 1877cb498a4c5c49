"""``kernix.check``: one call that proves a kernel is a correct JAX operation."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Collection, Mapping, Sequence

import jax
import numpy as np

from ..language.dtypes import numpy_dtype
from ..errors import CallError, RegistrationError
from ..runtime.arguments import check_call
from .compare import Tolerance
from .drawing import Drawing, check_drawn, require_hypothesis
from .memory import FILLS, Memory
from .report import CHECKS, CheckReport, CheckResult
from .subject import Subject, describe
from .transforms import (
    check_called,
    check_export,
    check_grad,
    check_jvp,
    check_sharded,
    check_vmap,
    example_cotangents,
)

__all__ = ["check", "OPTIONS"]

#: kernix.check's own keyword arguments (a kernel attribute of one of these names goes in attrs=).
OPTIONS = ("strict", "rtol", "atol", "examples", "seed", "sizes", "values", "dtypes", "checks", "attrs", "drawing")


def _check_family(fn: Any, reference: Callable[..., Any], example_args: Sequence[Any], strict: bool,
                  options: dict[str, Any], kernel_attrs: dict[str, Any]) -> CheckReport:
    """A family (a template's dispatcher, or per-dtype functions) checked as one operation: each member on
    the example cast to its dtypes (64-bit ones with JAX's 64-bit mode on), one row per check naming them."""
    statics = {p for m in fn.members for p, _ in m.static}
    static = {k: kernel_attrs.pop(k) for k in list(kernel_attrs) if k in statics}
    reports = []
    for m in fn.members:
        spec = fn.module.functions[m.name]
        cast = [np.asarray(a).astype(numpy_dtype(p.dtype or m.dtype)) if (p.dtype or m.dtype) else np.asarray(a)
                for p, a in zip(spec.inputs, example_args)]
        try:
            if fn.select(*cast, **static) != m.name:
                continue
        except CallError:
            continue  # another choice of the non-dtype template arguments
        wide = any(np.dtype(a.dtype).itemsize == 8 for a in cast)
        with jax.enable_x64(True) if wide else contextlib.nullcontext():
            reports.append((m.name, check(fn.module[m.name], reference, *cast, strict=False, **options,
                                          **kernel_attrs)))
    if not reports:
        raise CallError(f"kernix.check: no member of {fn.module.name}.{fn.name} fits the example and "
                        f"{static or 'no template arguments'}; its members: {', '.join(m.name for m in fn.members)}")
    rows = []
    for name in CHECKS:
        per = [(member, r) for member, report in reports for r in report if r.name == name]
        failed = [(member, r) for member, r in per if r.failed]
        passed = [member for member, r in per if r.passed]
        if failed:
            rows.append(dataclasses.replace(failed[0][1], detail="; ".join(f"{m}: {r.detail}" for m, r in failed)))
        elif passed:
            rows.append(CheckResult(name, "passed", f"{', '.join(passed)}: {next(r for _, r in per if r.passed).detail}"))
        elif per:
            rows.append(CheckResult(name, "n/a", f"{per[0][0]}: {per[0][1].detail}"))
    report = CheckReport(f"{fn.module.name}.{fn.name} ({', '.join(m for m, _ in reports)})", rows)
    if strict and not report.ok:
        raise report.error()
    return report


def _attrs(fn: Any, given: Mapping[str, Any] | None, keywords: Mapping[str, Any]) -> dict[str, Any]:
    attrs = dict(given or {})
    both = sorted(set(attrs) & set(keywords))
    if both:
        raise CallError(f"kernix.check: attribute(s) {', '.join(map(repr, both))} given both in attrs= and as keywords")
    attrs.update(keywords)
    clash = sorted(p.name for p in fn.spec.attrs if p.name in OPTIONS and p.name not in (given or {}))
    if clash:
        raise CallError(
            f"kernix.check: {fn.spec.name}() has attribute(s) {', '.join(map(repr, clash))}, named like "
            f"kernix.check's own options; pass the kernel's value in attrs=, e.g. attrs={{{clash[0]!r}: ...}}"
        )
    return attrs


def _dtype_combos(s: Subject, dtypes: Sequence[Any] | None) -> list[tuple[np.dtype, ...]]:
    """The dtype of each input, per combination to draw: pinned dtypes always; the others from ``dtypes``."""
    sig = s.signature
    pinned = [p.dtype or (sig.inputs[i].dtype if sig else None) for i, p in enumerate(s.spec.inputs)]
    example = [np.dtype(a.dtype) for a in s.args]
    entries = list(dtypes) if dtypes is not None else [None]
    combos = []

    def dtype(d: Any) -> np.dtype:
        try:
            return np.dtype(numpy_dtype(np.dtype(d).name))
        except (TypeError, ValueError, AttributeError):
            raise CallError(f"kernix.check: dtypes= holds {d!r}, which is not a dtype (write 'float32', "
                            "jnp.float32, ...)") from None

    for entry in entries:
        if entry is None:
            wanted = example
        elif isinstance(entry, (str, np.dtype, type)):
            wanted = [dtype(entry)] * len(example)
        else:
            wanted = [dtype(d) for d in entry]
            if len(wanted) != len(example):
                raise CallError(f"kernix.check: dtypes= entry {entry!r} gives {len(wanted)} dtypes, the kernel has "
                                f"{len(example)} inputs")
        combo = tuple(np.dtype(numpy_dtype(p)) if p else w for p, w in zip(pinned, wanted))
        for name, d in zip(s.input_names, combo):
            if jax.dtypes.canonicalize_dtype(d) != d:
                raise CallError(f"kernix.check: dtypes= asks for {d.name} input {name!r}, which JAX makes "
                                f"{jax.dtypes.canonicalize_dtype(d)} unless its 64-bit mode is on: "
                                "jax.config.update('jax_enable_x64', True)")
        if combo not in combos:
            combos.append(combo)
    return combos


def _check_buffers(s: Subject, memory: Memory) -> tuple[CheckResult, bool]:
    """The ``buffers`` row, and whether on the example the kernel crashes (or a sanitizer stops it)."""
    if memory.driver is None:
        return CheckResult("buffers", "n/a", f"not run: {memory.why}"), False
    xs = list(s.example)
    try:
        problems = memory.run(xs, cotangents=example_cotangents(s, xs)) or memory.races(xs)
    except Exception as exc:  # noqa: BLE001 - what the kernel raised is the finding
        return CheckResult("buffers", "failed", f"raised {describe(exc)}"), False
    if problems and all(p.kind == "unavailable" for p in problems):
        return CheckResult("buffers", "n/a", f"not run: {problems[0].message}"), False
    if problems:
        detail = "; ".join(p.message for p in problems) + f" (on the example: {s.describe_inputs(xs)})"
        return (CheckResult("buffers", "failed", detail, parameter=problems[0].parameter),
                any(p.unsafe for p in problems))
    both = " and its backward kernel" if s.backward is not None else ""
    tsan = " (and ThreadSanitizer on the pool's threads)" if any(p.role == "threads" for p in s.spec.params) else ""
    tools = ("compute-sanitizer memcheck, initcheck and racecheck" if memory.cuda else
             f"AddressSanitizer and UBSan{tsan}")
    return CheckResult("buffers", "passed", f"outside XLA, on buffers of exactly their size, under {tools} "
                       f"in a child process, the kernel{both} read and wrote only within its buffers, left "
                       f"its inputs unchanged, wrote every output element and gave the same result on each of "
                       f"{len(FILLS)} calls"), False


def check(
    fn: Any,
    reference: Callable[..., Any],
    *example_args: Any,
    strict: bool = True,
    rtol: float | Mapping[str, float] | None = None,
    atol: float | Mapping[str, float] | None = None,
    examples: int | None = None,
    seed: int | None = None,
    sizes: Mapping[str, int | Sequence[int]] | None = None,
    values: Mapping[str, Callable[..., Any]] | None = None,
    dtypes: Sequence[Any] | None = None,
    checks: Collection[str] | None = None,
    attrs: Mapping[str, Any] | None = None,
    drawing: Drawing | None = None,
    **kernel_attrs: Any,
) -> CheckReport:
    """Check that a kernel is a correct JAX operation, against a pure-JAX reference.

    Compares the kernel with ``reference`` eagerly, under ``jax.jit``,
    ``jax.vmap`` (and that vmap over ``...`` dimensions is one kernel call),
    ``jax.grad`` (against the reference's gradients and finite differences),
    sharded over several devices (against one device), through a
    :func:`kernix.export` round trip, on guarded buffers (no write into an
    input or outside an output, every output element written), and on
    further inputs drawn from the shape signature (hypothesis), a failure
    shrunk to a small example.

    Parameters
    ----------
    fn : KernelFunction
        The kernel (``module.name``).
    reference : callable
        A pure-JAX implementation, called as ``reference(*inputs, **attrs)``;
        it returns what the kernel returns (an array, or a tuple of them).
    *example_args
        The example inputs (arrays; NumPy arrays are converted as JAX converts them).
    strict : bool, default True
        Raise :class:`~kernix.errors.CheckError` (an ``AssertionError``)
        naming each failed check; with ``False``, return the report instead.
    rtol, atol : float or dict, optional
        Tolerances: ``|kernel - reference| <= atol + rtol * |reference|``.  A
        number for every dtype, or ``{dtype name: number}``; the defaults
        (:data:`kernix.checking.compare.TOLERANCES`) are a few units in the
        last place of each dtype, ten times that for gradients; integer
        results must be equal.
    examples : int, default 10
        How many inputs to draw from the shape signature (0: none, and no
        need for hypothesis).
    seed : int, optional
        Draw other inputs (default: the same ones every run).
    sizes : dict, optional
        Dimension name -> a size, or the sizes to draw it from (default 1, 2,
        3, 0, 5, 4, 7, 8, 13, 17, 32).
    values : dict, optional
        Input name -> ``f(shape, dtype, rng, dims)`` returning the values of
        that input for drawn examples (e.g. indices within a dimension).
    dtypes : sequence, optional
        The dtype combinations to draw: each a dtype (every input whose dtype
        the kernel does not pin) or a tuple with one per input (default: the
        example's).
    checks : collection of str, optional
        The checks to run (default: all; see :data:`kernix.checking.report.CHECKS`).
    attrs : dict, optional
        Kernel attributes, for one named like an option of this function.
    drawing : Drawing, optional
        Every drawing option in one value (:class:`kernix.Drawing`: ``examples``,
        ``seed``, ``sizes``, ``values``, ``dtypes``, and ``attrs``, the values
        to draw each attribute from), instead of the keywords above.
    **kernel_attrs
        The kernel's attributes (as the kernel takes them).

    Returns
    -------
    CheckReport
        One row per check: passed, failed (with the largest difference and
        its index), or not applicable and why.

    Raises
    ------
    CheckError
        When a check fails and ``strict`` is true.
    CallError
        When the example does not fit the kernel, or the arguments of this
        function are wrong.
    """
    __tracebackhide__ = True  # pytest: show the failure, not this frame
    from ..runtime.function import Dispatcher, KernelFunction

    if isinstance(fn, Dispatcher):
        options = {"rtol": rtol, "atol": atol, "examples": examples, "seed": seed, "sizes": sizes, "values": values,
                   "dtypes": dtypes, "checks": checks, "attrs": attrs, "drawing": drawing}
        return _check_family(fn, reference, example_args, strict, options, dict(kernel_attrs))
    if not isinstance(fn, KernelFunction):
        raise CallError(
            f"kernix.check(fn, reference, *inputs, **attrs) checks a kernel function or a family (module.name, "
            f"as a kernix.load_* call returns it), got {type(fn).__name__}: kernix reads its signature, shape "
            "signature and backward from it. To check a function that calls kernels, check each kernel"
        )
    if not fn.module.registered:
        raise RegistrationError(f"kernix.check: module {fn.module.name!r} is not registered; call "
                                "module.register() first (it was loaded with auto_register=False)")
    unknown = sorted(set(checks or ()) - set(CHECKS))
    if unknown:
        raise CallError(f"kernix.check: unknown check(s) {', '.join(map(repr, unknown))}; the checks: "
                        f"{', '.join(CHECKS)}")
    wanted = set(CHECKS) if checks is None else set(checks)
    all_attrs = _attrs(fn, attrs, kernel_attrs)
    loose = {"examples": examples, "seed": seed, "sizes": sizes, "values": values, "dtypes": dtypes}
    given = sorted(k for k, v in loose.items() if v is not None)
    if drawing is not None and given:
        raise CallError(f"kernix.check: {', '.join(given)} given both as keyword(s) and in drawing=; give them in "
                        f"drawing=kernix.Drawing({given[0]}=...) only")
    drawing = drawing or Drawing(**{k: v for k, v in loose.items() if v is not None})
    if drawing.examples and "drawn" in wanted and fn.spec.signature is not None:
        require_hypothesis()
    try:
        device = jax.devices("cpu" if fn.module.platform == "cpu" else "gpu")[0]
    except RuntimeError:
        raise CallError(f"kernix.check: {fn.target} is a CUDA kernel and JAX sees no GPU here") from None
    with jax.default_device(device):
        s = Subject(fn, reference, example_args, all_attrs, device, Tolerance(rtol, atol))
        check_call(fn.spec, s.args, all_attrs, "sequential", fn.module.platform, fn.module.name)  # misuse: raises
        try:
            expected = s.ref(*s.args)
        except CallError:
            raise
        except Exception as exc:
            raise CallError(f"kernix.check: the reference raised on the example: {describe(exc)}") from exc
        with contextlib.closing(Memory(s)) as memory:
            results = _checks(s, wanted, expected, drawing, _dtype_combos(s, drawing.dtypes), memory)
    report = CheckReport(fn.target, results)
    if strict and not report.ok:
        raise report.error()
    return report


def _checks(s: Subject, wanted: set[str], expected: Sequence[Any], drawing: Drawing,
            combos: list[tuple[np.dtype, ...]], memory: Memory) -> list[CheckResult]:
    # The run on exact buffers, in a child process, comes first: a kernel that crashes there (or writes
    # outside its buffers) would corrupt XLA's memory or take this process down, so no other check runs it.
    buffers, unsafe = _check_buffers(s, memory)
    if unsafe:
        skipped = ("not run: on the example the kernel crashed outside XLA, or a sanitizer stopped it (see "
                   "'buffers'); under XLA it could corrupt memory or take this process down")
        return [buffers if name == "buffers" else CheckResult(name, "n/a", skipped)
                for name in CHECKS if name in wanted]  # type: ignore[misc]
    exact = memory if memory.driver is not None else None
    steps: list[tuple[set[str], Callable[[], list[CheckResult]]]] = [
        ({"eager"}, lambda: [check_called("eager", s, s.kernel, expected)]),
        ({"jit"}, lambda: [check_called("jit", s, jax.jit(s.kernel), expected)]),
        ({"vmap", "vmap_one_call"}, lambda: check_vmap(s, exact)),
        ({"grad", "finite_differences"}, lambda: check_grad(s)),
        ({"jvp"}, lambda: [check_jvp(s)]),
        ({"sharded"}, lambda: [check_sharded(s)]),
        ({"export"}, lambda: [check_export(s, expected)]),
        ({"buffers"}, lambda: [buffers]),
        ({"drawn"}, lambda: [check_drawn(s, drawing, combos, exact)]),
    ]
    return [r for names, run in steps if names & wanted for r in run() if r.name in wanted]
