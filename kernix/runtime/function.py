"""The callables of a module: one exported function's (:class:`KernelFunction`), and one family's
(:class:`Dispatcher`: see :mod:`kernix.language.templates`)."""

from __future__ import annotations

import functools
import weakref
from typing import Any, Sequence

import jax

from ..errors import CallError, KernelRuntimeError, RegistrationError
from ..language.spec import FunctionSpec
from ..language.templates import Member, instance_name, select, template_name
from .arguments import check_call
from .operation import Operation, PlainOperation, ShapedOperation
from .stubs import call_signature, docstring
from .tuning import Tuner

__all__ = ["KernelFunction", "TunedFunction", "Dispatcher", "unpicklable", "kernel_refusal"]


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
    """``__doc__``: the class's text on the class, the function's on an instance, built when asked for (each
    function's callable is made often: by dispatch, tuning and the derivative kernels)."""

    def __init__(self, class_doc: str) -> None:
        self.class_doc = class_doc

    def __get__(self, obj: Any, owner: Any = None) -> str:
        if obj is None:
            return self.class_doc
        return docstring(obj.spec, backward=obj.module.backward_name(obj.spec.name),
                         tangent=obj.module.tangent_name(obj.spec.name))


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

    tuner: Tuner | None = None  #: what chooses the variant a call runs (:class:`TunedFunction`)

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
        def derivative(name: str | None) -> KernelFunction | None:
            if name is None:
                return None
            tune = self.module.functions[name].tune  # a tune= derivative template: tuned on its own
            return tuned(self.module, name, tune) if tune else self.module[name]

        # (a PlainOperation does not use the derivative kernels: pairing them needs a shape signature)
        kind = PlainOperation if self.spec.signature is None else ShapedOperation
        return kind(self.target, self.spec, self.module.name, derivative(self.module.backward_name(self.spec.name)),
                    derivative(self.module.tangent_name(self.spec.name)), self.tuner)

    @property
    def target(self) -> str:
        """The FFI target name."""
        return self.module.targets[self.spec.name]

    def __repr__(self) -> str:
        return f"<kernix function {self.target} ({' '.join(self.spec.arg_spec)})>"

    def __reduce__(self) -> Any:
        raise unpicklable(f"function {self.target!r}")

    def __copy__(self, memo: Any = None) -> KernelFunction:
        return self  # bound to the loaded library: a copy, deep or not, would be the same function

    __deepcopy__ = __copy__

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


class TunedFunction(KernelFunction):
    """The callable of a group of a ``tune=`` template's variants (the instantiations that differ only in
    the tuned parameters a call leaves out): a call runs the one its :attr:`tuner` chooses for the call's
    device, dtypes and shapes (:mod:`kernix.runtime.tuning`).  ``spec`` is the first variant's."""

    def __init__(self, module: Any, spec: FunctionSpec, tuner: Tuner) -> None:
        super().__init__(module, spec)
        self.tuner = tuner
        self.__name__ = self.__qualname__ = tuner.label

    def __repr__(self) -> str:
        assert self.tuner is not None
        return f"<kernix tuned function {self.module.name}.{self.tuner.label} over {', '.join(self.tuner.variants)}>"


#: Each module's groups of variants: (a member's name, the tuned parameters) -> their callable.
_GROUPS: weakref.WeakKeyDictionary[Any, dict[tuple[str, tuple[str, ...]], TunedFunction]] = weakref.WeakKeyDictionary()


def tuned(module: Any, name: str, params: tuple[str, ...]) -> TunedFunction:
    """The callable of the instantiations of ``module`` that differ from ``name`` only in the template parameters
    ``params``, which timing chooses (made once per module)."""
    made = _GROUPS.setdefault(module, {})
    if (name, params) not in made:
        spec, functions = module.functions[name], module.functions
        fixed = [(p, key) for p, _, key in spec.template_args if p not in params]
        variants = [n for n, s in functions.items() if s.template_args and template_name(s) == template_name(spec)
                    and [(p, k) for p, _, k in s.template_args if p not in params] == fixed]
        label = instance_name(template_name(spec), [p if p in params else k for p, _, k in spec.template_args])
        first = functions[variants[0]]
        made[(name, params)] = TunedFunction(module, first, Tuner(module, variants, label, first))
    return made[(name, params)]


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
        return select(f"{self.module.name}.{self.name}", self.members, self.module.functions, _dtype_names(inputs),
                      static, _dtype_names(out))

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        return self._callee(inputs, kwargs)(*inputs, **kwargs)

    def tune(self, *inputs: Any, **kwargs: Any) -> str:
        """Time, on these inputs, the variants a call with them leaves open (its ``tune=`` parameters left out),
        remember the fastest for the call's key (replacing a remembered choice) and return its name: for inputs
        whose values matter to the speed (sparse indices), where a traced call times on made-up ones."""
        fn = self._callee(inputs, kwargs)
        if fn.tuner is None:
            raise CallError(f"{self.module.name}.{self.name}.tune(): the call runs {fn.spec.name}, and leaves no "
                            "tune= parameter to choose")
        fn.tuner.force = True
        try:
            jax.block_until_ready(fn(*inputs, **kwargs))
        finally:
            fn.tuner.force = False
        assert fn.tuner.last is not None
        return fn.tuner.last

    def _callee(self, inputs: Sequence[Any], kwargs: dict[str, Any]) -> KernelFunction:
        """The callable a call runs (taking the template arguments out of ``kwargs``): the member the dtypes and
        keywords pick, or where the call leaves ``tune=`` parameters out, its group's :class:`TunedFunction`."""
        statics = {p for m in self.members for p, _ in m.static}
        static = {p: kwargs.pop(p) for p in list(kwargs) if p in statics}
        left = {p for m in self.members for p in self.module.functions[m.name].tune} - set(static)
        first = {p: v for p, v in self.members[0].static if p in left}  # (the first listed value)
        narrowed = [m for m in self.members if all(dict(m.static)[p] == v for p, v in first.items())]
        where, dtypes, outs = f"{self.module.name}.{self.name}", _dtype_names(inputs), _dtype_names(kwargs.get("out"))
        try:
            name = select(where, narrowed, self.module.functions, dtypes, static, outs)
        except CallError:
            name = select(where, self.members, self.module.functions, dtypes, static, outs)  # (its own error)
        missing = tuple(p for p in self.module.functions[name].tune if p in left)
        return tuned(self.module, name, missing) if missing else self.module[name]


def _dtype_names(values: Any) -> list[str | None] | None:
    """The dtype name of each array or ``jax.ShapeDtypeStruct`` of ``values`` (one, or a list or tuple of them),
    ``None`` for one that has no dtype; ``None`` for ``values=None``."""
    if values is None:
        return None
    dtypes = [getattr(x, "dtype", None) for x in (values if isinstance(values, (list, tuple)) else [values])]
    return [None if d is None else str(getattr(d, "name", d)) for d in dtypes]
