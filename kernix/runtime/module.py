"""`CompiledModule`: a loaded module, its registration and its callables."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

from ..language.names import check_target_prefix
from . import registry

# .function is imported when a function is first asked for: a callable's call machinery imports
# jax's transformations (custom_vmap, custom_partitioning...), which a warm load does not need; and
# ..language.templates when a name is not exported (a family's), or the names are listed.
if TYPE_CHECKING:
    from ..language.spec import FunctionSpec
    from .function import KernelFunction

__all__ = ["CompiledModule", "check_function_names"]


class CompiledModule:
    """A compiled, loaded module.

    Each exported function is an attribute (``mod.vector_add``) and an item (``mod["vector_add"]``):
    a :class:`KernelFunction`.  A name that is one of the module's own attributes (``path``,
    ``targets``...) is rejected at load, so every function is reachable by attribute.

    Attributes
    ----------
    name
        The module name.
    path
        The shared library.
    platform
        ``"cuda"`` or ``"cpu"``.
    functions
        Exported name -> :class:`~kernix.language.spec.FunctionSpec`, in export order.
    handlers
        Exported name -> the library's handler symbol, in export order.
    targets
        Exported name -> the FFI target name its function calls: ``"<target_prefix>.<function>"``, or
        where that name ran other code at registration, ``"<target_prefix>.<function>@<12 hex>"``.
    digest
        SHA-256 of the library: modules with equal digests hold the same code.
    memos
        Where the tables of ``tune=`` templates are remembered (``recall(kind, key)``, ``update(kind, key,
        fields)``: the cache's, ``kernix.store.Memos``), or ``None``: in this process only.
    """

    def __init__(
        self,
        name: str,
        path: Path,
        platform: str,
        functions: Sequence[FunctionSpec] | Callable[[], Sequence[FunctionSpec]],
        handlers: Mapping[str, str],
        digest: str,
        target_prefix: str | None = None,
        memos: Any = None,
    ) -> None:
        """``functions`` are the specs in export order, or a function returning them when first needed
        (a warm load reads no spec to load and register); ``handlers`` name every function, in order."""
        self._callables: dict[str, KernelFunction] = {}
        self._registered_as: dict[str, str] = {}  # exported name -> target its handler is registered under
        self._functions: dict[str, FunctionSpec] | None = None
        self.name = name
        self.path = Path(path)
        self.platform = platform
        self.digest = digest
        self.handlers = dict(handlers)
        self.target_prefix = target_prefix or name
        self.registered = False
        self.memos = memos
        self._read_specs = functions if callable(functions) else lambda given=tuple(functions): given  # (checked below)
        if not callable(functions) or any(n in RESERVED_NAMES for n in self.handlers):
            self._check_specs()  # (a warm load's specs are checked when first used)

    def _check_specs(self) -> dict[str, FunctionSpec]:
        specs = list(self._read_specs())
        if [f.name for f in specs] != list(self.handlers):
            from ..errors import RegistrationError
            raise RegistrationError(
                f"module {self.name!r}: its functions ({', '.join(f.name for f in specs)}) and handlers "
                f"({', '.join(self.handlers)}) do not match"
            )
        check_function_names(specs)
        self._functions = {f.name: f for f in specs}
        return self._functions

    @property
    def functions(self) -> dict[str, FunctionSpec]:
        """Exported name -> :class:`~kernix.language.spec.FunctionSpec`, in export order."""
        return self._functions if self._functions is not None else self._check_specs()

    def backward_name(self, function: str) -> str | None:
        """The name of the backward kernel that declares ``vjp=function``, if any."""
        return next((name for name, spec in self.functions.items() if spec.vjp_of == function), None)

    def tangent_name(self, function: str) -> str | None:
        """The name of the tangent kernel that declares ``jvp=function``, if any."""
        return next((name for name, spec in self.functions.items() if spec.jvp_of == function), None)

    @property
    def targets(self) -> dict[str, str]:
        """Exported name -> the FFI target name its function calls (see the class's attributes)."""
        return {n: self._registered_as.get(n) or f"{self.target_prefix}.{n}" for n in self.handlers}

    @property
    def function_names(self) -> list[str]:
        """The exported function names, in export order (as brainevent's modules name them)."""
        return list(self.handlers)

    @property
    def content_hash(self) -> str:
        """``"sha256:"`` and the first 16 hex digits of the library's digest (brainevent's form)."""
        return "sha256:" + self.digest[:16]

    def get_handler(self, name: str):
        """The ctypes function of ``name``'s XLA FFI handler (as brainevent's modules give it)."""
        if name not in self.handlers:
            raise KeyError(f"module {self.name!r} has no function {name!r}; it exports: {', '.join(self.handlers)}")
        return registry.handler_address(registry.load_library(self.path), self.handlers[name])

    @property
    def specs(self) -> dict[str, tuple[str, ...]]:
        """Exported name -> canonical arg_spec."""
        return {n: f.arg_spec for n, f in self.functions.items()}

    def register(self, target_prefix: str | None = None) -> list[str]:
        """Register every function as ``"<target_prefix>.<function>"``; returns :attr:`targets`' names.

        Registering the same module again is a no-op.  A name this process registered with other code
        keeps it (XLA cannot replace a handler): the function goes under its content-versioned name,
        with a :class:`~kernix.errors.ReloadWarning` the first time.  A
        :class:`~kernix.errors.RegistrationError` if a handler is missing or the module is registered
        under another prefix.
        """
        if target_prefix is not None:
            check_target_prefix(target_prefix)
            if self.registered and target_prefix != self.target_prefix:
                from ..errors import RegistrationError
                raise RegistrationError(
                    f"module {self.name!r} is already registered under prefix {self.target_prefix!r}"
                )
            self.target_prefix = target_prefix
        plain = {fn: f"{self.target_prefix}.{fn}" for fn in self.handlers}
        names = registry.register_targets(
            self.platform, self.path, self.digest, {plain[fn]: symbol for fn, symbol in self.handlers.items()})
        self._registered_as = {fn: names[target] for fn, target in plain.items()}
        self.registered = True
        return list(self._registered_as.values())

    def _callable(self, item: str) -> KernelFunction | None:
        """The callable of ``item`` (a function's, or a family's Dispatcher), made on first use, or ``None``."""
        found = self._callables.get(item)
        if found is None and item in self.handlers:
            from .function import KernelFunction

            found = self._callables[item] = KernelFunction(self, self.functions[item])
        elif found is None and isinstance(item, str) and not item.startswith("__"):
            from ..language.templates import family

            members = family(self.functions, item)
            if members:
                from .function import Dispatcher

                found = self._callables[item] = Dispatcher(self, item, members)  # type: ignore[assignment]
        return found

    def __getattr__(self, item: str) -> KernelFunction:
        # Called only for names the module itself lacks: RESERVED_NAMES never get here.
        if "handlers" in self.__dict__:  # else: not initialised (copy, pickle)
            found = self._callable(item)
            if found is not None:
                return found
        raise AttributeError(
            f"module {self.__dict__.get('name')!r} has no function {item!r}; it exports: "
            + ", ".join(self.__dict__.get("handlers", ()))
        )

    def __getitem__(self, item: str) -> KernelFunction:
        found = self._callable(item)
        if found is None:
            raise KeyError(f"module {self.name!r} has no function {item!r}; it exports: {', '.join(self.handlers)}")
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self.handlers)

    def __len__(self) -> int:
        return len(self.handlers)

    def __dir__(self) -> list[str]:
        from ..language.templates import family_names

        return sorted(set(super().__dir__()) | set(self.handlers) | set(family_names(self.functions.values())))

    def __reduce__(self) -> tuple:
        from .function import unpicklable

        raise unpicklable(f"module {self.name!r}")

    def __copy__(self, memo: object = None) -> CompiledModule:
        """A shallow copy (for ``copy.deepcopy`` too: the same library)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__, _callables={})
        return new

    __deepcopy__ = __copy__

    def __repr__(self) -> str:
        return f"<kernix.CompiledModule {self.name!r} ({self.platform}, {len(self)} functions) at {self.path}>"


#: The module's own attributes and instance fields: no exported function may use them.
RESERVED_NAMES: frozenset[str] = frozenset(dir(CompiledModule)) | frozenset(
    ("name", "path", "platform", "digest", "handlers", "target_prefix", "registered", "memos", "_read_specs",
     "_functions", "_callables", "_registered_as")
)


def check_function_names(functions: Iterable[FunctionSpec]) -> None:
    """Reject exported names that would hide, or be hidden by, a module attribute (SourceError)."""
    for fn in functions:
        if fn.name in RESERVED_NAMES:
            from ..errors import SourceError
            raise SourceError(
                f"function name {fn.name!r} is taken by CompiledModule.{fn.name}, so module.{fn.name} could "
                f"not reach it. Export a wrapper under another name instead, e.g. `// @BE {fn.name}_op` "
                f"before `void {fn.name}_op(...)` that calls {fn.name}(...), or rename the function.",
                file=fn.file, line=fn.line, function=fn.name,
            )
