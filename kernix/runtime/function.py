"""The callables of a module: one exported function's (:class:`KernelFunction`), and one family's
(:class:`Dispatcher`: see :mod:`kernix.language.templates`)."""

from __future__ import annotations

import functools
from typing import Any

import jax

from ..errors import KernelRuntimeError, RegistrationError
from ..language.spec import FunctionSpec
from ..language.templates import Member, select
from .arguments import check_call
from .operation import Backward, Operation, make_operation
from .stubs import call_signature, docstring

__all__ = ["KernelFunction", "Dispatcher", "unpicklable", "kernel_refusal"]


def unpicklable(what: str) -> TypeError:
    return TypeError(
        f"kernix {what} cannot be pickled: it calls native code loaded in this process. In the "
        "other process, load the same sources (the same kernix.load_* call) or a prebuilt "
        "directory (kernix.load_prebuilt); to send a computation, use "
        "kernix.export(jax.jit(f), ...).serialize() and kernix.deserialize there"
    )


def kernel_refusal(function: str, exc: Exception) -> KernelRuntimeError | None:
    """The :class:`~kernix.KernelRuntimeError` for the error ``function``'s kernel reported as it ran, which
    XLA gives as ``exc`` (its text kept); ``None`` for any other error."""
    text = str(exc.args[0]) if exc.args else str(exc)
    return KernelRuntimeError(text) if f"kernix: {function}: " in text else None


class _Docstring:
    """``__doc__``: the class's text on the class, the function's (built when asked for) on an instance."""

    def __init__(self, class_doc: str) -> None:
        self.class_doc = class_doc

    def __get__(self, obj: Any, owner: Any = None) -> str:
        if obj is None:
            return self.class_doc
        return docstring(obj.spec, backward=obj.module.backward_name(obj.spec.name))


class KernelFunction:
    """The callable of one exported function.

    ``f(*inputs, out=..., **attributes)`` runs the FFI target on the inputs
    (JAX arrays, in the order of the ``arg`` parameters) with the attributes
    (keywords, converted to their exact dtypes) and returns the output array,
    or a tuple when the function has several outputs.

    Without a shape signature, ``out`` (a ``jax.ShapeDtypeStruct`` or a sequence of them) must give the
    output shapes and dtypes; ``jax.vmap`` runs the kernel once per batch element unless
    ``vmap_method`` says otherwise.  With one (``// @BE f (m,k),(k,n)->(m,n)``) the outputs come from
    it (an ``out=`` must agree), the inputs are checked against it before launch, ``jax.vmap`` over
    ``...`` dimensions is one kernel call, a ``vjp=`` backward kernel makes ``jax.grad`` work, and
    inputs sharded along ``...`` dimensions are processed per shard.
    """

    def __init__(self, module: Any, spec: FunctionSpec) -> None:
        self.module = module  # the CompiledModule that loaded it (not imported here: it imports this module)
        self.spec = spec
        self.__name__ = self.__qualname__ = spec.name

    @property
    def __signature__(self) -> Any:
        """The call's ``inspect.Signature``: inputs, keyword-only attributes, ``out``, ``vmap_method``."""
        return call_signature(self.spec)

    @functools.cached_property
    def operation(self) -> Operation:
        """What a call runs once its arguments are checked (made at the first call: the target is final)."""
        name = self.module.backward_name(self.spec.name)
        backward = None if name is None else self.module[name]
        if backward is not None:
            backward = Backward(name, backward, tuple(p.name for p in backward.spec.attrs))
        return make_operation(self.target, self.spec, backward, self.module.name)

    @property
    def target(self) -> str:
        """The FFI target name."""
        return self.module.targets[self.spec.name]

    def __repr__(self) -> str:
        return f"<kernix function {self.target} ({' '.join(self.spec.arg_spec)})>"

    def __reduce__(self) -> Any:
        raise unpicklable(f"function {self.target!r}")

    def __copy__(self) -> KernelFunction:
        return self  # bound to the loaded library: a copy would be the same function

    def __deepcopy__(self, memo: Any) -> KernelFunction:
        return self

    def __call__(self, *inputs: Any, out: Any = None, vmap_method: str = "sequential", **attrs: Any) -> Any:
        module = self.module
        if not module.registered:
            raise RegistrationError(
                f"{self.spec.name}(): module {module.name!r} is not registered; call "
                "module.register() (it was loaded with auto_register=False)"
            )
        arrays, coerced = check_call(self.spec, inputs, attrs, vmap_method, module.platform, module.name)
        try:
            return self.operation(arrays, coerced, attrs, out, vmap_method)
        except jax.errors.JaxRuntimeError as exc:  # (an eager call: under jit the error comes when XLA runs it)
            refused = kernel_refusal(self.spec.name, exc)
            if refused is None:
                raise
            raise refused from exc


KernelFunction.__doc__ = _Docstring(KernelFunction.__doc__ or "")  # type: ignore[assignment]


class Dispatcher:
    """The callable of a family of per-dtype functions: a call runs the member
    that fits its inputs' dtypes (and, for a template's non-type parameters,
    the keyword arguments named after them: ``mod.tile(x, BLOCK=128)``; where
    the inputs leave several, ``out=``'s dtypes: ``mod.dequant(q, out=...)``), so it
    works wherever the member does (``jax.jit``, ``vmap``, ``grad``, sharding).
    ``members`` are its functions (:class:`~kernix.language.templates.Member`), in export order.
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

    def select(self, *inputs: Any, out: Any = None, **static: Any) -> str:
        """The name of the member a call with ``inputs``, the non-dtype template arguments ``static`` and
        ``out=`` runs (a :class:`~kernix.errors.CallError` lists them when none or several fit): the
        inputs' dtypes choose, and where they leave several members, ``out=``'s dtypes."""
        outs = None if out is None else [_dtype_name(o) for o in (out if isinstance(out, (list, tuple)) else [out])]
        return select(f"{self.module.name}.{self.name}", self.members, self.module.functions,
                      [_dtype_name(x) for x in inputs], static, outs)

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        statics = {p for m in self.members for p, _ in m.static}
        static = {p: kwargs.pop(p) for p in list(kwargs) if p in statics}
        return self.module[self.select(*inputs, out=kwargs.get("out"), **static)](*inputs, **kwargs)


def _dtype_name(x: Any) -> str | None:
    """The dtype name of an array or ``jax.ShapeDtypeStruct`` (``None`` for what has no dtype)."""
    dtype = getattr(x, "dtype", None)
    return None if dtype is None else str(getattr(dtype, "name", dtype))
