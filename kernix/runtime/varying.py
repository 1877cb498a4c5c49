"""Inside ``jax.shard_map``: the mesh axes a value varies over, and output
types that vary over the same axes.

``shard_map`` (with ``check_vma=True``, its default) types every value with
the manual mesh axes it varies over.  An FFI call's outputs are typed by the
``jax.ShapeDtypeStruct`` values it is given, so a kernel's outputs must carry
its inputs' axes: otherwise they pass for the same on every device, and
``jax.grad`` through the ``shard_map`` refuses the cotangents.  JAX 0.10 and
later name the type ``manual_axis_type``, earlier releases ``vma``; both need
the (abstract) mesh as the struct's sharding.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import jax
from jax.sharding import NamedSharding, PartitionSpec

__all__ = ["aval", "varying_axes", "in_shard_map", "output_structs"]


def _axes(x: Any) -> tuple[Any, Any, frozenset[str]]:
    """``(aval, manual_axis_type or None, the axes x varies over)``."""
    a = aval(x)
    manual = getattr(a, "manual_axis_type", None)
    return a, manual, frozenset(manual.varying if manual is not None else getattr(a, "vma", ()))


def aval(x: Any) -> Any:
    """The abstract value of ``x`` (``jax.typeof``, where JAX has it)."""
    return jax.typeof(x) if hasattr(jax, "typeof") else jax.core.get_aval(x)


def varying_axes(x: Any) -> frozenset[str]:
    """The mesh axes ``x`` varies over (none outside ``jax.shard_map``, or with ``check_vma=False``)."""
    return _axes(x)[2]


def in_shard_map(inputs: Sequence[Any]) -> bool:
    """Whether any of ``inputs`` varies over a mesh axis: a call inside ``jax.shard_map``."""
    return any(varying_axes(x) for x in inputs)


def output_structs(outputs: Iterable[tuple[Sequence[int], Any]], inputs: Sequence[Any]) -> list[Any]:
    """``jax.ShapeDtypeStruct`` of each ``(shape, dtype)`` in ``outputs``,
    varying over the mesh axes of the first of ``inputs`` that varies."""
    keywords: dict[str, Any] = {}
    for x in inputs:
        aval, manual, axes = _axes(x)
        if axes:
            keywords["sharding"] = NamedSharding(aval.sharding.mesh, PartitionSpec())
            keywords.update({"manual_axis_type": manual} if manual is not None else {"vma": axes})
            break
    return [jax.ShapeDtypeStruct(shape, dtype, **keywords) for shape, dtype in outputs]
