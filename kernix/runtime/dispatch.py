"""One callable for a family of per-dtype functions: a template's instantiations, or ``name_f32``, ``name_f64``...

``mod.scale``, where the module exports no ``scale`` but does export

* the instantiations of a function template ``scale`` (``// @BE scale<T: float, double>``:
  ``scale_float32``, ``scale_float64``), or
* functions named ``scale_`` and a dtype suffix (``scale_f32``, ``scale_float32``, ``scale_bf16``...:
  see :data:`SUFFIX_DTYPES`), as brainevent's macros define them,

is a :class:`Dispatcher`: a call picks the member that fits its inputs' dtypes (and,
for a template's non-type parameters, the keyword arguments named after them:
``mod.tile(x, BLOCK=128)``) and calls it, so it works wherever the member does
(``jax.jit``, ``vmap``, ``grad``, sharding).  A member fits a call when

1. every input whose parameter pins a dtype (``BE::TensorOf<T>``, ``Buffer<T>``) has that dtype;
2. unless a pinned input fixes its dtype -- the first template argument that is a dtype's
   element type, or its name's suffix --, that dtype is the first unpinned input's (indices
   pinned to ``int32`` beside data of type ``T`` dispatch on the data);
3. each non-dtype template argument given by keyword has the value given.

No member, or several, is a :class:`~kernix.errors.CallError` listing them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..language.dtypes import BUFFER_DTYPES
from ..errors import CallError
from ..language.templates import template_name

if TYPE_CHECKING:
    from ..language.spec import FunctionSpec

__all__ = ["SUFFIX_DTYPES", "Dispatcher", "Member", "family"]

#: Name suffix -> dtype, for families of functions written one per dtype (and every dtype's own name).
SUFFIX_DTYPES: dict[str, str] = {
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "c64": "complex64", "c128": "complex128", "half": "float16", "float": "float32", "double": "float64",
    **{d: d for d in BUFFER_DTYPES},
}


@dataclass(frozen=True)
class Member:
    """One function of a family.

    Attributes
    ----------
    name
        Its exported name.
    dtype
        The dtype it is for (rule 2 of the module docstring), or ``None``.
    static
        ``(template parameter, value)`` of its non-dtype template arguments.
    shown
        How a message describes it (``T=float, BLOCK=128``).
    """

    name: str
    dtype: str | None
    static: tuple[tuple[str, str], ...]
    shown: str


def family(functions: dict[str, FunctionSpec], name: str) -> list[Member]:
    """The members of family ``name`` among a module's ``functions`` (empty if there is none)."""
    if name in functions:
        return []
    members = []
    for fname, spec in functions.items():
        if spec.template_args and template_name(spec) == name and spec.vjp_of is None:
            dtypes = [key for _, _, key in spec.template_args if key in BUFFER_DTYPES]
            static = tuple((p, key) for p, _, key in spec.template_args if key not in BUFFER_DTYPES)
            members.append(Member(fname, dtypes[0] if dtypes else None, static,
                                  ", ".join(f"{p}={w}" for p, w, _ in spec.template_args)))
    if members:
        return members
    prefix = name + "_"
    for fname, spec in functions.items():
        suffix = fname[len(prefix):] if fname.startswith(prefix) else ""
        if suffix in SUFFIX_DTYPES and not spec.template_args and spec.vjp_of is None:
            members.append(Member(fname, SUFFIX_DTYPES[suffix], (), SUFFIX_DTYPES[suffix]))
    return members


def _dtype_name(x: Any) -> str | None:
    dtype = getattr(x, "dtype", None)
    return None if dtype is None else str(getattr(dtype, "name", dtype))


def _same_value(given: Any, key: str) -> bool:
    """Whether keyword value ``given`` is the template argument whose key is ``key``."""
    if isinstance(given, bool):
        return key == ("true" if given else "false")
    if isinstance(given, (int, np.integer)):
        return str(int(given)) == key
    return isinstance(given, str) and given == key


class Dispatcher:
    """The callable of a family of per-dtype functions (see the module docstring).

    Attributes
    ----------
    module
        The :class:`~kernix.runtime.module.CompiledModule`.
    name
        The family's name.
    members
        Its functions, in export order.
    """

    def __init__(self, module: Any, name: str, members: list[Member]) -> None:
        self.module = module
        self.name = self.__name__ = self.__qualname__ = name
        self.members = tuple(members)

    @property
    def instances(self) -> dict[str, Any]:
        """Member name -> its callable."""
        return {m.name: self.module[m.name] for m in self.members}

    def __repr__(self) -> str:
        return f"<kernix dispatcher {self.module.name}.{self.name} over {', '.join(m.name for m in self.members)}>"

    def _fits(self, m: Member, spec: FunctionSpec, dtypes: list[str | None], static: dict[str, Any]) -> bool:
        if len(spec.inputs) != len(dtypes):
            return False
        pinned = [(p.dtype, d) for p, d in zip(spec.inputs, dtypes, strict=True) if p.dtype]
        if any(want != got for want, got in pinned):
            return False
        free = [d for p, d in zip(spec.inputs, dtypes, strict=True) if not p.dtype]
        if m.dtype is not None and m.dtype not in {want for want, _ in pinned} and free and free[0] != m.dtype:
            return False
        keys = dict(m.static)
        return all(p in keys and _same_value(v, keys[p]) for p, v in static.items())

    def select(self, *inputs: Any, **static: Any) -> str:
        """The name of the member a call with ``inputs`` and the non-dtype template arguments
        ``static`` runs.

        Raises
        ------
        CallError
            When no member fits, or several do, listing them.
        """
        dtypes = [_dtype_name(x) for x in inputs]
        functions = self.module.functions
        fits = [m for m in self.members if self._fits(m, functions[m.name], dtypes, static)]
        available = "; ".join(f"{m.name} ({m.shown})" for m in self.members)
        got = ", ".join(str(d) for d in dtypes) or "no inputs"
        if len(fits) == 1:
            return fits[0].name
        given = "".join(f", {p}={v!r}" for p, v in static.items())
        if not fits:
            raise CallError(
                f"{self.module.name}.{self.name}(): no instantiation fits inputs of dtype {got}{given}; the "
                f"available ones are: {available}. Cast the inputs to one of these dtypes, or add an "
                "instantiation for this one")
        params = sorted({p for m in fits for p, _ in m.static} - set(static))
        hint = (f"pass {' and '.join(f'{p}=...' for p in params)} to choose" if params else
                "call one of them directly (module.<name>)")
        raise CallError(
            f"{self.module.name}.{self.name}(): inputs of dtype {got}{given} fit several instantiations: "
            f"{'; '.join(f'{m.name} ({m.shown})' for m in fits)}; {hint}")

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        statics = {p for m in self.members for p, _ in m.static}
        static = {p: kwargs.pop(p) for p in list(kwargs) if p in statics}
        return self.module[self.select(*inputs, **static)](*inputs, **kwargs)
