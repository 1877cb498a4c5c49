"""Autotuning: the variant of a ``tune=`` template that timing chooses, per device, dtypes and shape bucket
(what is timed, when and how, as users see it: :doc:`/tutorials/templates`, "What is timed, and how").

A call that leaves a tuned parameter out (``mod.tile(x)`` for ``// @BE tile<T: float; BLOCK: 128, 256>
tune=BLOCK``) runs a group of variants (:class:`~kernix.runtime.function.TunedFunction`), whose operation
hands the group's :class:`Tuner` the FFI call to make (:meth:`Tuner.call`): an eager call chooses at once,
timing on its own inputs; a traced one as the program is lowered (the ``kernix_tuned`` primitive), where
the shapes are those the kernel runs on, timing on inputs of those shapes and dtypes (:func:`synthesized`).
``$KERNIX_TUNE=0`` turns timing off (:func:`enabled`, read at each choice).

Why a module of its own: timing variants, comparing their results and keeping the table is one
concept, that neither the operation (which makes one FFI call) nor the dispatcher (which picks by
dtypes and keywords) holds, and the store cannot run JAX.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import platform
import statistics
import time
import warnings
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from ..errors import CallError, KernixError, TuningWarning
from ..language.shapes import parse_signature
from ..notes import note

__all__ = ["enabled", "bucket", "device_identity", "synthesized", "seconds_per_call", "Tuner", "TABLE_KIND",
           "table_key", "tables_of", "renamed"]

#: The kind under which a table is remembered (``memos.recall(TABLE_KIND, key)``).
TABLE_KIND = "tune"
_FORMAT = 1
#: Seconds one repeat of back-to-back calls lasts at least (the calls of a fast kernel are many), and the repeats.
_REPEAT_S, _REPEATS, _MOST_CALLS, _MOST_LOOPED = 2e-3, 5, 64, 4096
#: The relative tolerance within which two variants' floating results agree, by the bits of the dtype's reals.
_TOLERANCE = {16: 5e-2, 32: 1e-3, 64: 1e-7}

#: (library digest, device) -> the table's entries, as read and grown in this process.
_TABLES: dict[tuple[str, str], dict[str, Any]] = {}


def enabled() -> bool:
    """Whether timing chooses a tuned parameter a call leaves out: ``$KERNIX_TUNE`` is not ``0``."""
    return os.environ.get("KERNIX_TUNE", "1").strip() != "0"


def bucket(n: int) -> int:
    """``n`` rounded up to a power of two (0 and 1 are their own)."""
    return n if n < 2 else 1 << (n - 1).bit_length()


@functools.lru_cache(maxsize=None)
def device_identity(device: Any) -> str:
    """What tells a device's timings from another's: on a GPU its name, compute capability and driver; on
    the CPU its model (read once per device)."""
    if device.platform == "cpu":
        model = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as f:
                model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
        except OSError:
            pass
        return f"cpu: {model}"
    driver = "unknown"
    try:
        with open("/proc/driver/nvidia/version") as f:
            driver = next((w for w in f.readline().split() if w[:1].isdigit() and "." in w), driver)
    except OSError:
        pass
    capability = getattr(device, "compute_capability", "?")
    return f"{device.platform}: {device.device_kind}, compute capability {capability}, driver {driver}"


def synthesized(shape: Sequence[int], dtype: Any, device: Any, seed: int = 0) -> jax.Array:
    """An input to time a kernel on: uniform in [-1, 1) for a floating (or complex) dtype, zeros for any other
    (integers and booleans: an index array of zeros reads in bounds)."""
    dtype = np.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.inexact):
        rng = np.random.default_rng(seed)
        values = rng.uniform(-1, 1, tuple(shape))
        if jnp.issubdtype(dtype, jnp.complexfloating):
            values = values + 1j * rng.uniform(-1, 1, tuple(shape))
        return jax.device_put(values.astype(dtype), device)
    return jax.device_put(np.zeros(tuple(shape), dtype), device)


def seconds_per_call(call: Callable[..., Any], inputs: Sequence[Any], *, in_one_program: bool = False) -> float:
    """The median seconds one ``call`` (of side effects: never merged with another) takes on ``inputs``, over
    repeats of back-to-back calls lasting a few milliseconds each: many programs of one call (XLA's CPU runtime
    may run the calls of one program at once), or with ``in_one_program`` (a GPU, whose one stream runs a
    program's calls in order) one program of many calls, which times the kernels rather than their launches
    (JAX gives Python no CUDA events)."""
    repeat = _repeat(call, inputs, in_one_program)
    return statistics.median(repeat() for _ in range(_REPEATS))


def _repeat(call: Callable[..., Any], inputs: Sequence[Any], in_one_program: bool) -> Callable[[], float]:
    """``call`` compiled and warmed up: a function that times one repeat (seconds per call)."""
    if in_one_program:
        return _looped(call, inputs)
    once = jax.jit(call)
    jax.block_until_ready(once(*inputs))  # (compiled)
    start = time.perf_counter()
    jax.block_until_ready(once(*inputs))
    calls = max(1, min(_MOST_CALLS, int(_REPEAT_S / max(time.perf_counter() - start, 1e-7))))

    def repeat() -> float:
        start = time.perf_counter()
        jax.block_until_ready([once(*inputs) for _ in range(calls)][-1])
        return (time.perf_counter() - start) / calls

    return repeat


def _looped(call: Callable[..., Any], inputs: Sequence[Any]) -> Callable[[], float]:
    """One program of ``1 + n`` calls, a loop whose every iteration runs ``call`` (it has side effects) with the
    trip count ``n`` an argument; a repeat's time per call is the slope between a run of one call and a run of
    a few milliseconds, which leaves out the program's own start and end."""
    loop = jax.jit(lambda n, *xs: jax.lax.fori_loop(0, n, lambda i, _: call(*xs), call(*xs)))

    def run(n: int) -> float:
        start = time.perf_counter()
        jax.block_until_ready(loop(n, *inputs))
        return time.perf_counter() - start

    run(0)  # (compiled)
    n = 8
    while n < _MOST_LOOPED and run(n) < _REPEAT_S:
        n *= 2
    return lambda: max(run(n) - run(0), 0.0) / n


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two variants' results agree: equal for exact dtypes; within the dtype's tolerance, relative to
    the larger of 1 and the largest magnitude, for floating ones (NaN where both have NaN)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not jnp.issubdtype(a.dtype, jnp.inexact):
        return bool(np.array_equal(a, b))
    tol = _TOLERANCE.get(jnp.finfo(a.dtype).bits, 1e-3)
    wide = np.complex128 if jnp.issubdtype(a.dtype, jnp.complexfloating) else np.float64
    a, b = a.astype(wide), b.astype(wide)
    scale = max(1.0, float(np.nanmax(np.abs(b), initial=0.0)))
    return bool(np.allclose(a, b, rtol=tol, atol=tol * scale, equal_nan=True))


class Tuner:
    """The choice among one group's ``variants`` (exported names, the first listed value first) of
    ``module``, whose instantiations have the spec ``spec`` up to their names; ``label`` names the group
    in the table (``tile_float32_BLOCK``)."""

    def __init__(self, module: Any, variants: Sequence[str], label: str, spec: Any) -> None:
        self.module = module
        self.variants = tuple(variants)
        self.label = label
        self.spec = spec
        self.signature = parse_signature(spec.signature) if spec.signature else None
        self.force = False  #: time again even where the table has a choice (Dispatcher.tune)
        self.last: str | None = None  #: the variant the last choice gave

    def __repr__(self) -> str:
        return f"<kernix tuner {self.label} over {', '.join(self.variants)}>"

    def key(self, xs: Sequence[Any]) -> str:
        """The shape part of a call's key: each input's dtype and bucketed dimensions, or with ``tune=...@dims``
        the dtypes, those dimensions and the batch's size, bucketed."""
        shapes = [tuple(np.shape(x)) for x in xs]
        dtypes = [np.dtype(x.dtype).name for x in xs]
        if not self.spec.tune_dims or self.signature is None:
            return ",".join(f"{d}[{','.join(str(bucket(n)) for n in s)}]" for d, s in zip(dtypes, shapes))
        dims: dict[str, int] = {}
        batch = 1
        for group, shape in zip(self.signature.inputs, shapes):
            lead = len(shape) - len(group.dims)
            dims.update((d, n) for d, n in zip(group.dims, shape[lead:]) if isinstance(d, str))
            batch = max(batch, math.prod(shape[:lead])) if group.batch else batch
        named = [f"{d}={bucket(dims[d])}" for d in self.spec.tune_dims]
        return f"{','.join(dtypes)} {','.join(named)}" + (f" batch={bucket(batch)}" if self.signature.batched else "")

    def call(self, make: Make, xs: Sequence[Any]) -> tuple[Any, ...]:
        """The outputs of the call of the chosen variant on ``xs``, made by ``make(target)``: chosen now for
        arrays; for tracers, when the program is lowered, where the shapes are final (JAX traces the body of
        ``custom_vmap`` and ``custom_partitioning`` at shapes it may never run)."""
        if not any(isinstance(x, jax.core.Tracer) for x in xs):
            return tuple(make(self.choose(xs, make))(*xs))
        first = jax.make_jaxpr(make(self.module.targets[self.variants[0]]))(*xs)
        return tuple(_tuned_p.bind(*xs, tuner=self, make=make, out_avals=tuple(first.out_avals)))

    def choose(self, xs: Sequence[Any], make: Make) -> str:
        """The FFI target a call on ``xs`` (arrays or tracers) runs; ``make(target, True)`` makes the plain call
        of a target (arrays in, outputs out) that timing jits."""
        targets = self.module.targets
        self.last = self.variants[0]
        if not enabled():
            return targets[self.last]
        device = _device(xs, self.module.platform)
        if device is None:
            warnings.warn(f"{self.label}: no {self.module.platform} device here to time {', '.join(self.variants)} "
                          f"on; running {self.variants[0]}, the first listed", TuningWarning, stacklevel=2)
            return targets[self.last]
        identity = device_identity(device)
        table = self._table(identity)
        entry = f"{self.label} {self.key(xs)}"
        found = table.get(entry)
        if not self.force and isinstance(found, dict) and found.get("choice") in self.variants:
            self.last = found["choice"]
            return targets[self.last]
        record = self._measure(xs, make, device)
        table[entry] = record
        self.last = record["choice"]
        note(f"{self.module.name}: tuned {entry} on {identity}: {self.last} "
             f"({', '.join(f'{n} {t:.1f} us' for n, t in record['us'].items())})")
        if self.module.memos is not None:
            try:
                self.module.memos.update(TABLE_KIND, table_key(self.module.digest, identity),
                                         _record(self.module, identity, {entry: record}))
            except (KernixError, OSError) as exc:  # (the choice stands in this process)
                note(f"{self.module.name}: could not remember the tuning of {entry}: {exc}")
        return targets[self.last]

    def _table(self, identity: str) -> dict[str, Any]:
        """This module's table for the device ``identity``: read through its memos once per process."""
        key = (self.module.digest, identity)
        table = _TABLES.get(key)
        if table is None:
            memos = self.module.memos
            found = memos.recall(TABLE_KIND, table_key(*key)) if memos is not None else None
            entries = found.get("entries") if isinstance(found, dict) and found.get("format") == _FORMAT else None
            table = _TABLES[key] = dict(entries) if isinstance(entries, dict) else {}
        return table

    def _measure(self, xs: Sequence[Any], make: Make, device: Any) -> dict[str, Any]:
        """Time every variant on ``xs`` (or inputs like them); the record of the fastest that agrees."""
        concrete = all(isinstance(x, (jax.Array, np.ndarray)) and not isinstance(x, jax.core.Tracer) for x in xs)
        with jax.ensure_compile_time_eval():  # (under a trace: run now, not staged into the program)
            inputs = [jax.device_put(x, device) if concrete else synthesized(np.shape(x), x.dtype, device, k)
                      for k, x in enumerate(xs)]
            clusters: list[tuple[list[np.ndarray], list[str]]] = []  # (results, the variants that give them)
            repeats: dict[str, Callable[[], float]] = {}
            start = time.perf_counter()
            for name in self.variants:
                plain = make(self.module.targets[name], True)
                try:
                    outs = [np.asarray(o) for o in jax.block_until_ready(jax.jit(plain)(*inputs))]
                    repeats[name] = _repeat(plain, inputs, device.platform == "gpu")
                except (jax.errors.JaxRuntimeError, KernixError) as exc:
                    warnings.warn(f"{self.label}: {name} failed as it was timed, and is left out: {exc}",
                                  TuningWarning, stacklevel=3)
                    continue
                home = next((names for first, names in clusters if all(map(_close, outs, first))), None)
                if home is None:
                    clusters.append((outs, [name]))
                else:
                    home.append(name)
            kept = self._agreeing([names for _, names in clusters])
            samples: dict[str, list[float]] = {n: [] for n in kept}
            for _ in range(_REPEATS):  # (the variants in turn: a load that comes and goes slows each alike)
                for n in kept:
                    samples[n].append(repeats[n]())
        times = {n: statistics.median(v) for n, v in samples.items()}
        choice = min(kept, key=lambda n: times[n])
        return {"choice": choice, "us": {n: round(times[n] * 1e6, 2) for n in kept},
                "cost_ms": round((time.perf_counter() - start) * 1e3, 1)}

    def _agreeing(self, clusters: list[list[str]]) -> list[str]:
        """Of the variants that ran, grouped by the results they agree on, those the majority share (each
        other one named in a warning)."""
        if not clusters:
            raise CallError(f"{self.label}: every variant ({', '.join(self.variants)}) failed as it was timed; "
                            "call one of them by keyword to see its error")
        best = max(clusters, key=len)
        if 2 * len(best) <= sum(map(len, clusters)) and len(clusters) > 1:
            groups = "; ".join(" = ".join(c) for c in clusters)
            raise CallError(f"{self.label}: the variants disagree, and no majority agrees: {groups} (results of "
                            "the same inputs). kernix cannot tell which is right: fix the kernel, or choose a "
                            "variant by keyword")
        for name in (n for c in clusters if c is not best for n in c):
            warnings.warn(f"{self.label}: {name}'s results disagree with {', '.join(best)}'s on the same inputs; "
                          f"it is left out of the timing (check its code)", TuningWarning, stacklevel=4)
        return best


#: ``make(target, plain=False)``: the call of a variant's target (arrays in, outputs out); ``plain``: for timing,
#: outside any ``shard_map``.
Make = Callable[..., Callable[..., Any]]


def renamed(make: Make, names: dict[str, str]) -> Make:
    """``make`` whose chosen target is called under ``names[target]`` where given (timing calls the plain one)."""
    return lambda target, plain=False: make(target if plain else names.get(target, target), plain)


_tuned_p = Primitive("kernix_tuned")
_tuned_p.multiple_results = True
_tuned_p.def_abstract_eval(lambda *avals, out_avals, **_: out_avals)
_tuned_p.def_impl(lambda *xs, tuner, make, **_: tuple(make(tuner.choose(xs, make))(*xs)))


def _lower(ctx: Any, *xs: Any, tuner: Tuner, make: Make, **_: Any) -> Any:
    target = tuner.choose(ctx.avals_in, make)
    return mlir.lower_fun(make(target), multiple_results=True)(ctx, *xs)


def _batch(xs: Sequence[Any], dims: Sequence[Any], *, tuner: Tuner, make: Make, out_avals: Any) -> Any:
    size = next(np.shape(x)[d] for x, d in zip(xs, dims) if d is not None)

    def batched(target: str, plain: bool = False) -> Callable[..., Any]:
        return jax.vmap(make(target, plain), in_axes=tuple(dims), axis_size=size)

    avals = tuple(a.update(shape=(size, *a.shape)) for a in out_avals)
    return _tuned_p.bind(*xs, tuner=tuner, make=batched, out_avals=avals), [0] * len(avals)


mlir.register_lowering(_tuned_p, _lower)
batching.primitive_batchers[_tuned_p] = _batch


def table_key(digest: str, identity: str) -> str:
    """The memo key of the table of the library with SHA-256 ``digest`` on the device ``identity``."""
    return hashlib.sha256(f"{digest}\0{identity}".encode()).hexdigest()[:32]


def tables_of(module: Any) -> list[dict[str, Any]]:
    """The tables of ``module``'s library this process holds (read or tuned), one per device, as remembered."""
    return [_record(module, identity, entries) for (digest, identity), entries in _TABLES.items()
            if digest == module.digest]


def _record(module: Any, identity: str, entries: dict[str, Any]) -> dict[str, Any]:
    return {"format": _FORMAT, "module": module.name, "digest": module.digest, "device": identity, "entries": entries}


def _device(xs: Sequence[Any], module_platform: str) -> Any | None:
    """The device a call on ``xs`` runs on: the one its concrete inputs are on, else the first of the module's
    platform (``None`` when this process has none)."""
    wanted = "gpu" if module_platform == "cuda" else "cpu"
    for x in xs:
        devices = getattr(x, "devices", None)
        if devices is not None and not isinstance(x, jax.core.Tracer):
            found = devices()
            if len(found) == 1 and next(iter(found)).platform == wanted:
                return next(iter(found))
    try:
        return jax.devices(wanted)[0]
    except RuntimeError:
        return None
