"""`CompiledModule`: a loaded module, its registration and its callables."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Mapping, Sequence

from ..names import check_target_prefix
from ..spec import FunctionSpec
from ..errors import RegistrationError, SourceError
from . import registry
from .function import KernelFunction

__all__ = ["CompiledModule", "check_function_names", "RESERVED_NAMES"]


class CompiledModule:
    """A compiled, loaded module.

    Each exported function is also an attribute (``mod.vector_add``) and an
    item (``mod["vector_add"]``): a :class:`KernelFunction`.  An exported name
    that is one of the module's own attributes (``path``, ``targets``,
    ``__init__``...) is rejected when the module is loaded, so every function
    is reachable by attribute.

    Attributes
    ----------
    name
        The module name.
    path
        The shared library.
    platform
        ``"cuda"`` or ``"cpu"``.
    functions
        Exported name -> :class:`~kernix.spec.FunctionSpec`, in export order.
    targets
        Exported name -> FFI target name.
    digest
        SHA-256 of the library: modules with equal digests hold the same code.
    """

    def __init__(
        self,
        name: str,
        path: Path,
        platform: str,
        functions: Sequence[FunctionSpec],
        handlers: Mapping[str, str],
        digest: str,
        target_prefix: str | None = None,
    ) -> None:
        self.name = name
        self.path = Path(path)
        self.platform = platform
        self.digest = digest
        self.functions: dict[str, FunctionSpec] = {f.name: f for f in functions}
        self.handlers = dict(handlers)
        self.target_prefix = target_prefix or name
        self.registered = False
        check_function_names(functions)
        self._backward = {f.vjp_of: n for n, f in self.functions.items() if f.vjp_of is not None}
        self._callables = {n: KernelFunction(self, s) for n, s in self.functions.items()}

    def backward_name(self, function: str) -> str | None:
        """The name of the backward kernel that declares ``vjp=function``, if any."""
        return self._backward.get(function)

    def backward_of(self, function: str) -> KernelFunction | None:
        """The backward kernel's callable for ``function``, if one declares ``vjp=function``."""
        name = self._backward.get(function)
        return None if name is None else self._callables[name]

    @property
    def targets(self) -> dict[str, str]:
        """Exported name -> FFI target name."""
        return {n: f"{self.target_prefix}.{n}" for n in self.functions}

    @property
    def function_names(self) -> list[str]:
        """The exported function names, in export order (as brainevent's modules name them)."""
        return list(self.functions)

    @property
    def content_hash(self) -> str:
        """``"sha256:"`` and the first 16 hex digits of the library's digest (brainevent's form)."""
        return "sha256:" + self.digest[:16]

    def get_handler(self, name: str):
        """The ctypes function of ``name``'s XLA FFI handler (as brainevent's modules give it).

        Raises
        ------
        KeyError
            Naming the functions the module exports.
        """
        if name not in self.handlers:
            raise KeyError(f"module {self.name!r} has no function {name!r}; it exports: {', '.join(self.functions)}")
        return registry.handler_address(registry.load_library(self.path), self.handlers[name])

    @property
    def specs(self) -> dict[str, tuple[str, ...]]:
        """Exported name -> canonical arg_spec."""
        return {n: f.arg_spec for n, f in self.functions.items()}

    def register(self, target_prefix: str | None = None) -> list[str]:
        """Register every function as ``"<target_prefix>.<function>"``.

        Registering the same module again is a no-op.  Returns the target names.

        Raises
        ------
        RegistrationError
            If a target name is taken by different code.
        """
        if target_prefix is not None:
            check_target_prefix(target_prefix)
            if self.registered and target_prefix != self.target_prefix:
                raise RegistrationError(
                    f"module {self.name!r} is already registered under prefix {self.target_prefix!r}"
                )
            self.target_prefix = target_prefix
        for fn, target in self.targets.items():
            registry.register_target(target, self.platform, self.path, self.handlers[fn], f"{self.digest}:{fn}")
        self.registered = True
        return list(self.targets.values())

    def __getattr__(self, item: str) -> KernelFunction:
        # Called only for names the module itself lacks: RESERVED_NAMES never get here.
        callables = self.__dict__.get("_callables", {})
        if item in callables:
            return callables[item]
        raise AttributeError(
            f"module {self.__dict__.get('name')!r} has no function {item!r}; it exports: "
            + ", ".join(callables)
        )

    def __getitem__(self, item: str) -> KernelFunction:
        try:
            return self._callables[item]
        except KeyError:
            raise KeyError(f"module {self.name!r} has no function {item!r}; it exports: {', '.join(self._callables)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._callables)

    def __len__(self) -> int:
        return len(self._callables)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._callables))

    def __repr__(self) -> str:
        return f"<kernix.CompiledModule {self.name!r} ({self.platform}, {len(self)} functions) at {self.path}>"


#: The module's own attributes and instance fields: no exported function may use them.
RESERVED_NAMES: frozenset[str] = frozenset(dir(CompiledModule)) | frozenset(
    ("name", "path", "platform", "digest", "functions", "handlers", "target_prefix", "registered", "_callables", "_backward")
)


def check_function_names(functions: Sequence[FunctionSpec]) -> None:
    """Reject exported names that would hide, or be hidden by, a module attribute.

    Raises
    ------
    SourceError
        Naming the function, where it is annotated, and how to rename it.
    """
    for fn in functions:
        if fn.name in RESERVED_NAMES:
            raise SourceError(
                f"function name {fn.name!r} is taken by CompiledModule.{fn.name}, so module.{fn.name} could "
                f"not reach it. Export a wrapper under another name instead, e.g. `// @BE {fn.name}_op` "
                f"before `void {fn.name}_op(...)` that calls {fn.name}(...), or rename the function.",
                file=fn.file, line=fn.line, function=fn.name,
            )
