"""``jax.export`` for functions that call kernix kernels.

XLA serialises a custom call by its target name alone, which does not say which code it stands for,
so :func:`export` writes content-versioned names instead
(:func:`kernix.runtime.registry.versioned_name`), registered for the libraries loaded, and marks them
safe for ``jax.export``.  A deserialised artifact therefore runs only where the very same library is
loaded for its platform; :func:`deserialize` checks that before a call and says what to load.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import jax
from jax.extend import core

from ..errors import KernixError
from . import registry
from .tuning import renamed

__all__ = ["export", "deserialize", "ExportedKernels", "kernix_targets"]

# A custom call's target in a StableHLO module's text (MLIR quotes a name with characters such as '-').
_CUSTOM_CALL_RE = re.compile(r'custom_call @(?:"([^"]*)"|([A-Za-z0-9_.$]+))')
# A content-versioned kernix target name.
_VERSIONED_RE = re.compile(r"[^@\s\"]+@(?:[0-9a-f]{12}|[a-z]+:[0-9a-f]{12}(?:,[a-z]+:[0-9a-f]{12})*)")


def _rewrite(value: Any, rename: Callable[[str], str | None]) -> Any:
    """``value`` (a jaxpr or a sequence of them) with each ffi_call target renamed to ``rename(target)``
    where that is not ``None``; other values unchanged."""
    if core.ClosedJaxpr is not core.Jaxpr and isinstance(value, core.ClosedJaxpr):
        # (jax >= 0.11 merged the two classes: a Jaxpr carries its consts.)
        return core.ClosedJaxpr(_rewrite(value.jaxpr, rename), value.consts)
    if isinstance(value, core.Jaxpr):
        eqns = []
        for eqn in value.eqns:
            params = {k: _rewrite(v, rename) for k, v in eqn.params.items()}
            if eqn.primitive.name == "ffi_call" and (new := rename(params["target_name"])) is not None:
                params["target_name"] = new
            elif eqn.primitive.name == "kernix_tuned":  # (the call of a tune= group: each of its variants)
                tuner = params["tuner"]
                names = {t: new for t in map(tuner.module.targets.get, tuner.variants) if (new := rename(t))}
                params["make"] = renamed(params["make"], names) if names else params["make"]
            eqns.append(eqn.replace(params=params))
        return value.replace(eqns=eqns)
    if isinstance(value, (tuple, list)) and any(isinstance(v, (core.Jaxpr, core.ClosedJaxpr)) for v in value):
        return type(value)(_rewrite(v, rename) for v in value)
    return value


def _platforms(targets: set[str]) -> list[str]:
    """The platforms on which every one of ``targets`` has a handler."""
    have = {t: registry.platforms_of(t) for t in sorted(targets)}
    common = sorted(set.intersection(*(set(p) for p in have.values())))
    if not common:
        listed = "; ".join(f"{t}: {', '.join(p)}" for t, p in have.items())
        raise KernixError(
            f"cannot export: no platform has a handler of every kernel the function calls ({listed}). Load a build "
            "of each module for one platform under the same target prefix, or pass platforms= to choose"
        )
    return common


def export(
    fn: Callable[..., Any],
    *args: Any,
    platforms: Sequence[str] | None = None,
    disabled_checks: Sequence[Any] = (),
) -> Any:
    """Export ``fn(*args)`` with :func:`jax.export.export`, kernix calls made safe.

    Every kernix kernel ``fn`` calls is written under its content-versioned target name, which names
    its library on each platform exported for; the custom-call check is disabled for those names only.

    Parameters
    ----------
    fn : callable
        A function of JAX arrays (jitted or not) that calls kernix kernels.
        Bind non-array arguments first (``functools.partial``).
    *args
        Example arguments: arrays or ``jax.ShapeDtypeStruct`` (pytrees allowed).
    platforms : sequence of str, optional
        Lowering platforms (``["cpu"]``, ``["cuda"]``, ``["cpu", "cuda"]``), on each of which every
        kernel needs a handler (for both, a C++ and a CUDA build loaded under one target prefix).
        Default: those on which every kernel has one, else (no kernel) the default backend's.
    disabled_checks : sequence, optional
        Further :class:`jax.export.DisabledSafetyCheck` values.

    Returns
    -------
    jax.export.Exported
        Serialise it with ``.serialize()``; load it back with :func:`deserialize`.

    Raises
    ------
    CallError
        Where a kernel has no handler on one of ``platforms``.
    KernixError
        Where no platform has a handler of every kernel (no ``platforms``),
        or the function runs a kernel per shard (see the message).
    """
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
    registered = registry.list_registered_targets()
    calls: set[str] = set()
    _rewrite(closed, lambda t: calls.add(t) if t in registered else None)
    if platforms is None and calls:
        platforms = _platforms(calls)
    names = {t: v for t in calls if (v := registry.versioned_target(t, platforms))}
    rewritten = _rewrite(closed, names.get)
    out_tree = jax.tree_util.tree_structure(out_shape)
    run = core.jaxpr_as_fun(rewritten)

    def versioned(*a: Any) -> Any:
        return jax.tree_util.tree_unflatten(out_tree, run(*jax.tree_util.tree_leaves(a)))

    versioned.__name__ = getattr(fn, "__name__", "kernix_exported")
    checks = [jax.export.DisabledSafetyCheck.custom_call(t) for t in sorted(set(names.values()))]
    checks += list(disabled_checks)
    try:
        return jax.export.export(jax.jit(versioned), platforms=platforms, disabled_checks=checks)(*args)
    except NotImplementedError as exc:
        if "host_callbacks" not in str(exc):
            raise
        raise KernixError(
            "cannot export: with sharded arguments a kernel with a shape signature runs per shard through "
            "jax.experimental.custom_partitioning, which jax.export cannot serialise. Export with unsharded "
            "arguments, or call the kernel inside jax.shard_map (which exports), e.g. "
            "jax.shard_map(f, mesh=mesh, in_specs=..., out_specs=...)"
        ) from exc


def _custom_call_targets(exported: Any) -> set[str]:
    """Every custom-call target an exported module calls."""
    return {quoted or bare for quoted, bare in _CUSTOM_CALL_RE.findall(exported.mlir_module())}


def kernix_targets(exported: Any) -> tuple[str, ...]:
    """The content-versioned kernix targets an exported module calls."""
    return tuple(sorted(t for t in _custom_call_targets(exported) if _VERSIONED_RE.fullmatch(t)))


def _unpinned(names: Sequence[str]) -> str | None:
    """The problem with an artifact whose non-versioned targets ``names`` include kernix's, or ``None``."""
    plain = [n for n in names if registry.platforms_of(n)]
    if not plain:
        return None
    return (
        f"it calls the kernix target(s) {', '.join(map(repr, plain))} by plain name, which names whatever code "
        "is loaded under that name now, not the code it was made with: export it with kernix.export(...), which "
        "calls content-versioned names"
    )


_LABELS = {"cpu": "CPU", "cuda": "CUDA"}


def _problem(name: str, exported_for: Sequence[str], platform: str | None) -> str | None:
    """What keeps the artifact's call of the versioned ``name`` from running on ``platform`` here
    (``None``: any it was exported for), or ``None``, having registered ``name`` where its library is loaded."""
    base, recorded = registry.parse_versioned(name)
    if None in recorded:  # one library, named without its platform
        recorded = {p: recorded[None] for p in (exported_for or _LABELS)}
    loaded = {p: codes for p, codes in registry.loaded_code(base).items() if p in recorded}
    matching = {p: source for p, codes in loaded.items() for d, source in codes.items() if d[:12] == recorded[p]}
    for p, source in matching.items():
        registry.register_alias(name, source, [p])
    other = [p for p in loaded if p not in matching]
    if other:
        return "; ".join(
            f"{base!r} is loaded with other code for {_LABELS.get(p, p)} (library version(s) "
            f"{', '.join(d[:12] for d in loaded[p])}) than the artifact was exported with ({recorded[p]}): load "
            "the same build of the module the artifact was exported with (the same prebuilt directory, or the "
            "same sources and options)"
            for p in other
        )
    wanted = [platform] if platform is not None else list(recorded)
    if any(p in matching for p in wanted):
        return None
    missing = " or ".join(f"{_LABELS.get(p, p)} (code version {recorded[p]})" for p in wanted if p in recorded)
    if not missing:
        return f"{base!r} was exported for {', '.join(map(_LABELS.get, recorded))} only, not for {platform}"
    prefix = base.rpartition(".")[0]
    return (
        f"no loaded module provides {base!r} for {missing}: load the module first, e.g. "
        f"kernix.load_prebuilt(DIR, target_prefix={prefix!r}) or the load_* call that made it, with the same "
        "sources and options"
    )


def _call_platform(args: Any) -> str | None:
    """The platform a call with ``args`` runs on: its first array's, else JAX's default device's."""
    for x in jax.tree_util.tree_leaves(args):
        if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer) and x.devices():
            platform = next(iter(x.devices())).platform
            break
    else:
        default = jax.config.jax_default_device
        platform = getattr(default, "platform", default) if default is not None else jax.default_backend()
    return "cuda" if platform == "gpu" else platform if isinstance(platform, str) else None


@dataclass(eq=False)  # hashable by identity, as a function is: jax.jit(artifact) works
class ExportedKernels:
    """A deserialised artifact whose calls are checked against the loaded kernix modules."""

    exported: Any  #: the :class:`jax.export.Exported`
    targets: tuple[str, ...]  #: the content-versioned kernix targets it calls
    other_targets: tuple[str, ...] = ()  #: its other custom-call targets (none may be kernix's)

    def check(self, platform: str | None = None) -> None:
        """Raise :class:`~kernix.errors.KernixError` (naming what to load) unless every kernix target is
        loaded with the same code for ``platform`` (``None``: one the artifact was exported for)."""
        exported_for = tuple(getattr(self.exported, "platforms", ()) or ())
        problems = [p for t in self.targets if (p := _problem(t, exported_for, platform))]
        if unpinned := _unpinned(self.other_targets):
            problems.append(unpinned)
        if problems:
            raise KernixError(
                "this exported function cannot run here, so it was not called: " + "; ".join(problems)
            )

    def call(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`check` for the platform the call runs on, then run the artifact (``Exported.call``)."""
        self.check(_call_platform((args, kwargs)))
        return self.exported.call(*args, **kwargs)

    __call__ = call


def deserialize(data: bytes | bytearray) -> ExportedKernels:
    """Deserialise an artifact made by ``kernix.export(...).serialize()``.

    Load the kernix modules it calls (prebuilt or JIT, same code) before
    calling it; :meth:`ExportedKernels.call` refuses with a clear error otherwise.
    """
    exported = jax.export.deserialize(bytearray(data))
    targets = kernix_targets(exported)
    result = ExportedKernels(exported, targets, tuple(sorted(_custom_call_targets(exported) - set(targets))))
    if unpinned := _unpinned(result.other_targets):
        raise KernixError(f"this artifact cannot be trusted: {unpinned}")
    return result
