"""``jax.export`` for functions that call kernix kernels.

XLA serialises a custom call by its target name alone, and ``jax.export``
refuses non-builtin targets unless told they are safe.  A target name like
``"ops.scale"`` does not say which code it stands for, so :func:`export`
writes content-versioned names instead: every kernix target is also
registered as ``"<prefix>.<function>@<12 hex of the library's SHA-256>"``
(see :func:`kernix.runtime.registry.versioned_name`), and the exported module
calls those.  A deserialised artifact therefore runs only where the very same
library is loaded; :func:`deserialize` checks that before a call and says
which module to load when it is not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import jax
from jax.extend import core

from ..errors import KernixError
from . import registry

__all__ = ["export", "deserialize", "ExportedKernels", "kernix_targets"]

# A content-versioned kernix target inside a StableHLO module's text.
_VERSIONED_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*@[0-9a-f]{12})\b")


def _rewrite(value: Any, names: dict[str, str], used: set[str]) -> Any:
    """``value`` (a jaxpr, closed jaxpr, or a tuple/list of them) with every
    ffi_call to a name in ``names`` renamed; other values unchanged."""
    if core.ClosedJaxpr is not core.Jaxpr and isinstance(value, core.ClosedJaxpr):
        # (jax >= 0.11 merged the two classes: a Jaxpr carries its consts.)
        return core.ClosedJaxpr(_rewrite(value.jaxpr, names, used), value.consts)
    if isinstance(value, core.Jaxpr):
        eqns = []
        for eqn in value.eqns:
            params = {k: _rewrite(v, names, used) for k, v in eqn.params.items()}
            target = params.get("target_name")
            if eqn.primitive.name == "ffi_call" and target in names:
                params["target_name"] = names[target]
                used.add(names[target])
            eqns.append(eqn.replace(params=params))
        return value.replace(eqns=eqns)
    if isinstance(value, (tuple, list)) and any(isinstance(v, (core.Jaxpr, core.ClosedJaxpr)) for v in value):
        return type(value)(_rewrite(v, names, used) for v in value)
    return value


def export(
    fn: Callable[..., Any],
    *args: Any,
    platforms: Sequence[str] | None = None,
    disabled_checks: Sequence[Any] = (),
) -> Any:
    """Export ``fn(*args)`` with :func:`jax.export.export`, kernix calls made safe.

    Every kernix kernel that ``fn`` calls is written into the artifact under
    its content-versioned target name, and the custom-call safety check is
    disabled for exactly those names.

    Parameters
    ----------
    fn : callable
        A function of JAX arrays (jitted or not) that calls kernix kernels.
        Bind non-array arguments first (``functools.partial``).
    *args
        Example arguments: arrays or ``jax.ShapeDtypeStruct`` (pytrees allowed).
    platforms : sequence of str, optional
        Lowering platforms (``["cpu"]``, ``["cuda"]``); default: those of the
        kernix modules ``fn`` calls (a C++ module's kernels run on the CPU
        even where a GPU is the default backend), else the default backend's.
    disabled_checks : sequence, optional
        Further :class:`jax.export.DisabledSafetyCheck` values.

    Returns
    -------
    jax.export.Exported
        Serialise it with ``.serialize()``; load it back with :func:`deserialize`.
    """
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
    names = {t: v for t in registry.list_registered_targets() if (v := registry.versioned_target(t))}
    used: set[str] = set()
    rewritten = _rewrite(closed, names, used)
    out_tree = jax.tree_util.tree_structure(out_shape)
    run = core.jaxpr_as_fun(rewritten)

    def versioned(*a: Any) -> Any:
        return jax.tree_util.tree_unflatten(out_tree, run(*jax.tree_util.tree_leaves(a)))

    versioned.__name__ = getattr(fn, "__name__", "kernix_exported")
    if platforms is None and used:
        registered = registry.list_registered_targets()
        platforms = sorted({registered[t].lower() for t in used if t in registered}) or None
    checks = [jax.export.DisabledSafetyCheck.custom_call(t) for t in sorted(used)] + list(disabled_checks)
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


def kernix_targets(exported: Any) -> tuple[str, ...]:
    """The content-versioned kernix targets an exported module calls."""
    return tuple(sorted(set(_VERSIONED_RE.findall(exported.mlir_module()))))


def _problem(target: str) -> str | None:
    base, _, version = target.rpartition("@")
    loaded = registry.versioned_target(base)  # registers the versioned name on first use
    if loaded == target:
        return None
    if loaded is not None:
        return (
            f"{base!r} is loaded with other code (library version {loaded.rpartition('@')[2]}) than the "
            f"artifact was exported with ({version}): load the same build of the module the artifact was "
            "exported with (the same prebuilt directory, or the same sources and options)"
        )
    return (
        f"no loaded module provides {base!r} (code version {version}): load the module first, e.g. "
        f"kernix.load_prebuilt(DIR, target_prefix={base.rpartition('.')[0]!r}) or the load_* call that "
        "made it, with the same sources and options"
    )


@dataclass(eq=False)  # hashable by identity, as a function is: jax.jit(artifact) works
class ExportedKernels:
    """A deserialised artifact whose calls are checked against the loaded kernix modules.

    Attributes
    ----------
    exported
        The :class:`jax.export.Exported`.
    targets
        The content-versioned kernix targets it calls.
    """

    exported: Any
    targets: tuple[str, ...]

    def check(self) -> None:
        """Raise unless every kernix target of the artifact is loaded with the same code.

        Raises
        ------
        KernixError
            Naming each missing or different module and what to load.
        """
        problems = [p for t in self.targets if (p := _problem(t))]
        if problems:
            raise KernixError(
                "this exported function cannot run here, so it was not called: " + "; ".join(problems)
            )

    def call(self, *args: Any, **kwargs: Any) -> Any:
        """Check (:meth:`check`), then run the artifact (``Exported.call``)."""
        self.check()
        return self.exported.call(*args, **kwargs)

    __call__ = call


def deserialize(data: bytes | bytearray) -> ExportedKernels:
    """Deserialise an artifact made by ``kernix.export(...).serialize()``.

    Load the kernix modules it calls (prebuilt or JIT, same code) before
    calling it; :meth:`ExportedKernels.call` refuses with a clear error otherwise.
    """
    exported = jax.export.deserialize(bytearray(data))
    return ExportedKernels(exported, kernix_targets(exported))
