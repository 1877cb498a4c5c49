"""The checks under JAX's transformations, ``eager`` to ``export`` in :data:`~kernix.checking.report.CHECKS`.
Each takes a :class:`~kernix.checking.subject.Subject` and returns :class:`~kernix.checking.report.CheckResult`
rows; an exception the kernel raises is a failure, reported with its message."""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .report import CheckResult
from .subject import Subject, describe, stack, variants

__all__ = ["check_called", "check_vmap", "check_grad", "check_jvp", "check_sharded",
           "check_export", "count_calls", "example_cotangents"]

#: How many examples a vmap check batches.
VMAP_BATCH = 3
#: Gradients compose two kernels (forward and backward): their default tolerances are this much looser.
GRAD_SCALE = 10.0


def _compared(name: str, s: Subject, got: Sequence[Any], want: Sequence[Any], passed: str, how: str = "",
              scale: float = 1.0, names: Sequence[str] | None = None, kind: str = "output",
              against: str = "the reference") -> CheckResult:
    found = s.mismatch(got, want, how, scale, names, kind, against)
    if found is not None:
        return CheckResult(name, "failed", found[0].message, found[0].difference, found[0].index, found[1])
    return CheckResult(name, "passed", passed)


def _guarded(name: str, run: Callable[[], CheckResult]) -> CheckResult:
    try:
        return run()
    except Exception as exc:  # noqa: BLE001 - the kernel (or JAX around it) raised: that is the finding
        return CheckResult(name, "failed", f"raised {describe(exc)}")


def check_called(name: str, s: Subject, call: Callable[..., Sequence[Any]], expected: Sequence[Any]) -> CheckResult:
    """The ``eager`` or ``jit`` row: ``call`` on the example against ``expected``; the inputs must not change."""

    def run() -> CheckResult:
        args = s.args
        got = call(*args)
        changed = s.changed_input(args)
        if changed:
            return CheckResult(name, "failed", changed, parameter=changed.split("'")[1])
        return _compared(name, s, got, expected, "matches the reference on the example")

    return _guarded(name, run)


def count_calls(compiled_text: str, target: str) -> tuple[int, bool]:
    """How many times a compiled HLO module calls custom-call ``target``, and whether it has a loop."""
    return compiled_text.count(f'custom_call_target="{target}"'), re.search(r"\bwhile\(", compiled_text) is not None


def _vmap_axes(s: Subject) -> list[tuple[str, list[int | None]]]:
    """The in_axes to check: over the '...' inputs (what folds into one call), and over every input."""
    n = len(s.example)
    batch = s.batch_inputs
    out = []
    if batch:
        out.append(("its '...' inputs", [0 if i in batch else None for i in range(n)]))
    if len(batch) < n:
        out.append(("every input", [0] * n))
    return out


def _stacked(s: Subject, examples: list[tuple[np.ndarray, ...]], axes: list[int | None]) -> list[Any]:
    """The arguments of ``jax.vmap(in_axes=axes)``: the examples stacked where ``axes`` has 0, else the example."""
    return [s.put(stack(examples, i)) if a == 0 else s.args[i] for i, a in enumerate(axes)]


def _vmap_values(s: Subject, examples: list[tuple[np.ndarray, ...]], how: str, axes: list[int | None]) -> CheckResult:
    got = jax.vmap(s.kernel, in_axes=axes)(*_stacked(s, examples, axes))
    ref = jax.jit(s.ref)  # one compile for the examples' common shapes
    per = [ref(*[s.put(e[i]) if a == 0 else s.args[i] for i, a in enumerate(axes)]) for e in examples]
    want = [np.stack([np.asarray(p[k]) for p in per]) for k in range(len(s.output_names))]
    return _compared("vmap", s, got, want, "", f" under jax.vmap over {how}")


def check_vmap(s: Subject, memory: Any = None) -> list[CheckResult]:
    """The ``vmap`` and ``vmap_one_call`` rows; ``memory`` (a :class:`~kernix.checking.memory.Memory`, or ``None``)
    runs the batch on exact buffers first: a crash there is a failure, not run under XLA."""
    if not s.args:
        reason = "the kernel has no inputs to batch"
        return [CheckResult("vmap", "n/a", reason), CheckResult("vmap_one_call", "n/a", reason)]
    examples = variants(s.args, VMAP_BATCH, seed=1)
    if memory is not None and s.batch_inputs:
        batch = [stack(examples, i) if i in s.batch_inputs else e for i, e in enumerate(s.example)]
        crash = next((p for p in memory.run(batch) if p.unsafe), None)
        if crash is not None:
            return [CheckResult("vmap", "failed", f"not run under XLA: outside XLA, on {s.describe_inputs(batch)}, "
                                f"{crash.message}"),
                    CheckResult("vmap_one_call", "n/a", "not run: see 'vmap'")]
    ways = _vmap_axes(s)
    rows = (_guarded("vmap", functools.partial(_vmap_values, s, examples, how, axes)) for how, axes in ways)
    vmap = next((row for row in rows if row.failed), None) or CheckResult(
        "vmap", "passed", f"a batch of {VMAP_BATCH} examples over {' and over '.join(how for how, _ in ways)} matches "
        "the reference on each")
    return [vmap, _guarded("vmap_one_call", lambda: _one_call(s, examples))]


def _one_call(s: Subject, examples: list[tuple[np.ndarray, ...]]) -> CheckResult:
    sig = s.signature
    why = ("no shape signature" if sig is None else "no input has '...' batch dimensions" if not s.batch_inputs
           else "an output has no '...' batch dimensions" if not all(g.batch for g in sig.outputs) else None)
    if why is not None:
        hint = " (vmap_method); a signature with '...' makes it one call" if sig is None else ""
        return CheckResult("vmap_one_call", "n/a", f"{why}: jax.vmap runs the kernel once per batch element{hint}")
    how, axes = _vmap_axes(s)[0]
    text = jax.jit(jax.vmap(s.kernel, in_axes=axes)).lower(*_stacked(s, examples, axes)).compile().as_text()
    calls, loop = count_calls(text, s.name)
    if calls == 1 and not loop:
        return CheckResult("vmap_one_call", "passed", f"jax.vmap over {how} compiles to one call of {s.name}, no loop")
    return CheckResult("vmap_one_call", "failed", f"jax.vmap over {how} compiles to {calls} call(s) of {s.name}"
                       + (" in a loop" if loop else "") + ", expected one call and no loop")


def floating(x: Any) -> bool:
    """Whether ``x`` (an array or a dtype) is of a floating-point dtype, bfloat16 and float8 included."""
    return bool(jnp.issubdtype(jnp.result_type(x), jnp.inexact))


def cotangents(s: Subject, args: Sequence[Any], seed: int = 2) -> list[Any]:
    """Fixed random cotangents for the floating outputs of ``args`` (``None`` for the others)."""
    rng = np.random.default_rng(seed)
    return [s.put(rng.uniform(-1, 1, o.shape).astype(o.dtype)) if floating(o) else None
            for o in s.out_structs(args)]


def example_cotangents(s: Subject, xs: Sequence[np.ndarray]) -> list[np.ndarray] | None:
    """Cotangents for every output of ``xs`` (zeros for an integer one) when the kernel has a backward kernel."""
    if s.backward is None or not any(floating(x) for x in xs):
        return None
    return [np.asarray(c) if c is not None else np.zeros(o.shape, o.dtype)
            for c, o in zip(cotangents(s, xs), s.out_structs(xs))]


def gradients(call: Callable[..., Sequence[Any]], args: Sequence[Any], cts: Sequence[Any]) -> list[Any]:
    """The gradient of ``sum(output * cotangent)`` over the outputs with a
    cotangent, with respect to each floating input (traceable: jit it)."""

    def loss(*xs: Any) -> Any:
        return sum((jnp.sum(o * c) for o, c in zip(call(*xs), cts) if c is not None), 0.0)

    return list(jax.grad(loss, argnums=tuple(i for i, x in enumerate(args) if floating(x)))(*args))


def _derivative_na(s: Subject, kernel: str | None, word: str, transform: str) -> str | None:
    if s.signature is None:
        return f"no shape signature, so no derivative kernel: {transform} raises kernix.CallError"
    if kernel is None:
        return (f"no kernel declares {word}={s.spec.name}: {transform} of {s.spec.name} raises kernix.CallError "
                "saying how to add one")
    if not any(floating(x) for x in s.args):
        return "no floating-point input to differentiate"
    if not any(floating(o) for o in s.out_structs(s.args)):
        return "no floating-point output to differentiate"
    return None


def check_grad(s: Subject) -> list[CheckResult]:
    """The ``grad`` and ``finite_differences`` rows."""
    reason = _derivative_na(s, s.backward, "vjp", "jax.grad")
    if reason:
        return [CheckResult("grad", "n/a", reason), CheckResult("finite_differences", "n/a", reason)]
    names = [p for p, x in zip(s.input_names, s.args) if floating(x)]

    def against_reference() -> CheckResult:
        args = s.args
        cts = cotangents(s, args)
        got = jax.jit(functools.partial(gradients, s.kernel))(args, cts)
        want = jax.jit(functools.partial(gradients, s.ref))(args, cts)
        return _compared("grad", s, got, want, f"gradients of {', '.join(names)} match the reference's (through "
                         f"{s.backward})", scale=GRAD_SCALE, names=names, kind="gradient of input")

    fd = functools.partial(_finite_differences, s, "rev", "finite_differences", f"gradients of {', '.join(names)} "
                           "agree with finite differences (jax.test_util.check_grads, JAX's tolerances)")
    return [_guarded("grad", against_reference), _guarded("finite_differences", fd)]


def _with_floats(s: Subject, call: Callable[..., Sequence[Any]]) -> Callable[..., tuple[Any, ...]]:
    """``call`` as a function of the example's floating inputs alone, returning its floating outputs."""
    which = [i for i, x in enumerate(s.args) if floating(x)]

    def outputs(*floats: Any) -> tuple[Any, ...]:
        full = list(s.args)
        for i, v in zip(which, floats):
            full[i] = v
        return tuple(o for o in call(*full) if floating(o))
    return outputs


def _finite_differences(s: Subject, mode: str, name: str, passed: str, matched: str = "") -> CheckResult:
    """Row ``name``: whether ``mode`` (``"rev"``, ``"fwd"``) derivatives of the kernel agree with finite
    differences.  Where the reference's disagree too and every floating input has 16 bits or fewer,
    finite differences are too coarse to judge, and neither does the row: it is ``matched`` (what the row
    found before), else not applicable.  In float32 or float64 the reference's derivative may be wrong."""
    from jax.test_util import check_grads

    floats = tuple(x for x in s.args if floating(x))

    def fails(call: Callable[..., Sequence[Any]]) -> str | None:
        try:
            check_grads(_with_floats(s, call), floats, order=1, modes=[mode])
        except AssertionError as exc:
            lines = [ln.strip() for ln in str(exc).splitlines() if "difference" in ln or "Mismatch" in ln]
            return "; ".join(lines) or str(exc).strip()
        return None

    found = fails(s.kernel)
    if found is None:
        return CheckResult(name, "passed", passed)
    reference = fails(s.ref)
    if reference is not None and all(np.dtype(x.dtype).itemsize <= 2 for x in floats):
        coarse = (f"finite differences are too coarse to judge {floats[0].dtype}: the reference fails them too "
                  f"({reference})")
        return CheckResult(name, "passed", f"{matched}; {coarse}") if matched else CheckResult(name, "n/a", coarse)
    verdict = (f"the reference fails the same check ({reference}): its derivative is wrong too, or finite differences "
               "are too coarse here (check in float64)" if reference is not None else
               f"the reference passes it: the kernel's {'gradient' if mode == 'rev' else 'tangent'} is wrong")
    return CheckResult(name, "failed", f"jax.test_util.check_grads: the {'reverse' if mode == 'rev' else 'forward'}"
                       f"-mode derivative disagrees with finite differences ({found}); {verdict}")


def check_jvp(s: Subject) -> CheckResult:
    """The ``jvp`` row: ``jax.jvp`` through the tangent kernel, against the reference's and finite differences."""
    reason = _derivative_na(s, s.tangent, "jvp", "jax.jvp")
    if reason:
        return CheckResult("jvp", "n/a", reason)
    rng = np.random.default_rng(3)
    floats = tuple(x for x in s.args if floating(x))
    tangents = tuple(s.put(rng.uniform(-1, 1, np.shape(x)).astype(x.dtype)) for x in floats)
    outputs = [n for n, o in zip(s.output_names, s.out_structs(s.args)) if floating(o)]

    def run() -> CheckResult:
        def forward(call: Callable[..., Sequence[Any]]) -> Any:
            return jax.jit(lambda xs, ts: jax.jvp(_with_floats(s, call), xs, ts)[1])(floats, tangents)

        row = _compared("jvp", s, forward(s.kernel), forward(s.ref), "", scale=GRAD_SCALE, names=outputs,
                        kind="forward-mode tangent of output")
        if row.failed:
            return row
        matched = f"tangents of {', '.join(outputs)} match the reference's (through {s.tangent})"
        return _finite_differences(s, "fwd", "jvp", f"{matched} and agree with finite differences", matched)

    return _guarded("jvp", run)


def check_sharded(s: Subject) -> CheckResult:
    devices = jax.devices(s.device.platform)
    if len(devices) < 2:
        hint = (" (on the CPU, start Python with XLA_FLAGS=--xla_force_host_platform_device_count=2 to check "
                "this)") if s.device.platform == "cpu" else ""
        return CheckResult("sharded", "n/a", f"one {s.device.platform.upper()} device{hint}")
    if not s.batch_inputs:
        return CheckResult("sharded", "n/a", "no input has '...' batch dimensions to shard along")
    return _guarded("sharded", lambda: _sharded(s, devices))


def _sharded(s: Subject, devices: list[Any]) -> CheckResult:
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(devices), ("batch",))
    examples = variants(s.args, len(devices), seed=3)
    batch = s.batch_inputs
    whole = [s.put(stack(examples, i)) if i in batch else a for i, a in enumerate(s.args)]
    sharded = [jax.device_put(np.asarray(x), NamedSharding(mesh, PartitionSpec("batch") if i in batch
                                                           else PartitionSpec()))
               for i, x in enumerate(whole)]
    f = jax.jit(s.kernel)
    got = f(*sharded)
    want = s.kernel(*whole)
    how = f" with its '...' inputs sharded over {len(devices)} devices"
    row = _compared("sharded", s, [np.asarray(g) for g in got], want, "", how, against="one device's result")
    if row.failed:
        return row
    assert s.signature is not None
    if all(g.batch for g in s.signature.outputs):
        text = f.lower(*sharded).compile().as_text()
        if "all-gather" in text:
            return CheckResult("sharded", "failed", f"the compiled program gathers the batch onto every device{how} "
                               "instead of running the kernel on each device's shard")
        return CheckResult("sharded", "passed", f"{how[1:]}: each device runs the kernel on its shard, and the "
                           "result matches one device's")
    return CheckResult("sharded", "passed", f"{how[1:]}: the result matches one device's (an output without '...' "
                       "makes XLA gather the inputs)")


def check_export(s: Subject, expected: Sequence[Any]) -> CheckResult:
    from ..runtime.export import deserialize, export

    def run() -> CheckResult:
        data = export(jax.jit(s.kernel), *s.args).serialize()
        got = deserialize(data)(*s.args)
        return _compared("export", s, got, expected, f"kernix.export, serialised ({len(data)} bytes) and "
                         "deserialised, matches the reference")

    return _guarded("export", run)
