"""kernix: call annotated C++ and CUDA functions from JAX.

Write a function, mark it ``// @BE name``, and load it::

    mod = kernix.load_cpp_inline("ops", SOURCE)
    y = mod.scale_by(x, scale_factor=3.0, out=jax.ShapeDtypeStruct(x.shape, x.dtype))

kernix reads the exact signature with libclang, generates a typed XLA FFI
handler, compiles and caches it, and registers ``"ops.scale_by"`` with JAX.

Importing kernix is light: libclang, jax and the compilers are touched only
when a function that needs them runs.

The package is laid out as the pipeline: :mod:`kernix.frontend` (libclang
inference), :mod:`kernix.backend` (code generation and the build),
:mod:`kernix.store` (the on-disk cache) and :mod:`kernix.runtime`
(registration and callables), driven by :mod:`kernix.loaders` through
:mod:`kernix.pipeline`.
"""

from __future__ import annotations

#: The kernix version (one place: the cache keys import it from here, and the
#: packaging reads it without importing kernix).
__version__ = "0.2.0"

import os as _os  # already imported by the interpreter's start-up

__all__ = [
    "__version__",
    "load_cuda_inline",
    "load_cuda_file",
    "load_cuda_dir",
    "load_cpp_inline",
    "load_cpp_file",
    "load_cpp_dir",
    "load_prebuilt",
    "build_module",
    "PrebuiltError",
    "export",
    "deserialize",
    "ExportedKernels",
    "infer_file",
    "InferResult",
    "language_of",
    "CompiledModule",
    "KernelFunction",
    "register_ffi_target",
    "list_registered_targets",
    "cache_info",
    "clear_cache",
    "cache_root",
    "set_cache_dir",
    "CallError",
    "InvalidNameError",
    "ArgSpecError",
    "CacheError",
    "CompilationError",
    "InferenceError",
    "KernixError",
    "OptionError",
    "RegistrationError",
    "SourceError",
    "SourceNotFoundError",
    "ToolchainError",
    "FunctionSpec",
    "Param",
    "parse_arg_spec",
]


def register_ffi_target(module: "CompiledModule", target_prefix: str | None = None) -> list[str]:
    """Register every function of a module loaded with ``auto_register=False``.

    Targets are named ``"<target_prefix or module name>.<function>"``;
    registering the same code again is a no-op.  Returns the target names.
    """
    return module.register(target_prefix)


TYPE_CHECKING = False  # as typing.TYPE_CHECKING: typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from typing import Sequence

    from .runtime.module import CompiledModule

# Public names whose modules load on first use, so that `import kernix` plus a
# warm load imports only what a warm load runs (not even the error classes:
# they are imported where an error is raised).
_LAZY = {
    **dict.fromkeys(
        (
            "ArgSpecError", "CacheError", "CallError", "CompilationError", "InferenceError", "InvalidNameError",
            "KernixError", "OptionError", "PrebuiltError", "RegistrationError", "SourceError",
            "SourceNotFoundError", "ToolchainError",
        ),
        "kernix.errors",
    ),
    **dict.fromkeys(
        ("load_cuda_inline", "load_cuda_file", "load_cuda_dir", "load_cpp_inline", "load_cpp_file", "load_cpp_dir"),
        "kernix.loaders",
    ),
    "language_of": "kernix.languages",
    "cache_root": "kernix.paths",
    "set_cache_dir": "kernix.paths",
    "KernelFunction": "kernix.runtime.function",
    "CompiledModule": "kernix.runtime.module",
    "list_registered_targets": "kernix.runtime.registry",
    "FunctionSpec": "kernix.spec",
    "Param": "kernix.spec",
    "parse_arg_spec": "kernix.spec",
    "infer_file": "kernix.frontend.infer",
    "InferResult": "kernix.frontend.infer",
    "build_module": "kernix.prebuilt.build",
    "load_prebuilt": "kernix.prebuilt.load",
    "export": "kernix.runtime.export",
    "deserialize": "kernix.runtime.export",
    "ExportedKernels": "kernix.runtime.export",
    "cache_info": "kernix.store.admin",
    "clear_cache": "kernix.store.admin",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kernix' has no attribute {name!r}")
    import importlib
    import sys

    finder = _OwnModules()
    sys.meta_path.insert(0, finder)
    try:
        value = getattr(importlib.import_module(module), name)
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
    globals()[name] = value  # once
    return value


class _OwnModules:
    """Finds kernix's own submodules while :func:`__getattr__` imports a public
    name's module (for a load function: every module a warm load runs).

    Python finds ``kernix.store.files`` by asking each finder on
    ``sys.meta_path`` in turn (interpreters often carry some that packaging
    tools add), the last of which stats the package directory and the file:
    on some machines that costs as much as loading the module's cached
    bytecode, for each of a warm load's 17 modules.  kernix's submodules are
    ``.py`` files in their package's directory, so this finder, put first on
    the meta path for the duration of one such import, lists each directory
    once and answers with the spec the path finder gives (the same file, its
    ``.pyc``, the standard source loader).  Anything else -- another package,
    a name with no ``.py`` file, an extension module, a package in several
    directories, an installation that is not plain files -- it leaves to the
    usual finders.
    """

    def __init__(self) -> None:
        self._listings: dict[str, dict[str, bool]] = {}  # directory -> {entry name: is a directory}

    def _listing(self, directory: str) -> dict[str, bool]:
        listing = self._listings.get(directory)
        if listing is None:
            try:
                with _os.scandir(directory) as entries:
                    listing = {entry.name: entry.is_dir() for entry in entries}
            except OSError:
                listing = {}
            self._listings[directory] = listing
        return listing

    def find_spec(self, name: str, path: "Sequence[str] | None" = None, target: object = None) -> "ModuleSpec | None":
        """The spec of submodule ``name`` of a kernix package whose ``__path__``
        is ``path``, or ``None`` to leave it to the other finders."""
        if not name.startswith("kernix.") or path is None or len(path) != 1:
            return None
        from importlib.machinery import EXTENSION_SUFFIXES, SourceFileLoader
        from importlib.util import spec_from_file_location

        directory, tail = path[0], name.rpartition(".")[2]
        listing = self._listing(directory)
        locations = None
        if listing.get(tail):  # a directory: its own files decide, as for the path finder
            directory = _os.path.join(directory, tail)
            listing, tail, locations = self._listing(directory), "__init__", [directory]
        if listing.get(tail + ".py") is not False or any(tail + suffix in listing for suffix in EXTENSION_SUFFIXES):
            return None
        origin = _os.path.join(directory, tail + ".py")
        return spec_from_file_location(name, origin, loader=SourceFileLoader(name, origin),
                                       submodule_search_locations=locations)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
