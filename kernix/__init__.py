"""kernix: call annotated C++ and CUDA functions from JAX.

Write a function, mark it ``// @BE name``, and load it::

    mod = kernix.load_cpp_inline("ops", SOURCE)
    y = mod.scale_by(x, scale_factor=3.0, out=jax.ShapeDtypeStruct(x.shape, x.dtype))

kernix reads the exact signature with libclang, generates a typed XLA FFI
handler, compiles and caches it, and registers ``"ops.scale_by"`` with JAX.
libclang, jax and the compilers are imported only when first needed.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

#: The kernix version (one place: the cache keys import it from here, and the
#: packaging reads it without importing kernix).
__version__ = "0.3.0"

from .platforms import language_of
from .paths import cache_root, set_cache_dir

if TYPE_CHECKING:
    from .errors import (  # (`X as X`: exported, for type checkers)
        AnnotationWarning as AnnotationWarning, ArgSpecError as ArgSpecError, CacheError as CacheError,
        CallError as CallError, CheckError as CheckError, CompilationError as CompilationError,
        InferenceError as InferenceError, InvalidNameError as InvalidNameError,
        KernelRuntimeError as KernelRuntimeError, KernixError as KernixError, OptionError as OptionError,
        PrebuiltError as PrebuiltError, RegistrationError as RegistrationError, ReloadWarning as ReloadWarning,
        SourceError as SourceError, SourceNotFoundError as SourceNotFoundError, ToolchainError as ToolchainError,
        TuningWarning as TuningWarning,
    )
    from .runtime.module import CompiledModule


def register_ffi_target(module: CompiledModule, target_prefix: str | None = None) -> list[str]:
    """Register every function of a module loaded with ``auto_register=False``.

    Parameters
    ----------
    module
        The module, as a ``kernix.load_*`` call returned it.
    target_prefix
        The prefix of the target names (default: the module's name).

    Returns
    -------
    list of str
        The target names, ``"<target_prefix or module name>.<function>"``, or a function's
        content-versioned name where this process registered the plain one with other code
        (see :class:`ReloadWarning`); registering the same code again is a no-op.
    """
    return module.register(target_prefix)


# Public names whose modules load on first use: `import kernix` imports
# neither jax nor libclang, and a warm load only what it runs.
_LAZY = {
    name: module
    for module, names in {
        # (a warm load raises nothing: its modules import an error class where they raise it)
        "kernix.errors": ("KernixError", "AnnotationWarning", "ArgSpecError", "CacheError", "CallError", "CheckError",
                          "CompilationError", "InferenceError", "InvalidNameError", "KernelRuntimeError", "OptionError",
                          "PrebuiltError", "RegistrationError", "ReloadWarning", "SourceError", "SourceNotFoundError",
                          "ToolchainError", "TuningWarning"),
        "kernix.loaders": ("load_cuda_inline", "load_cuda_file", "load_cuda_dir", "load_cpp_inline", "load_cpp_file",
                           "load_cpp_dir"),
        "kernix.runtime.function": ("KernelFunction",),
        "kernix.runtime.module": ("CompiledModule",),
        "kernix.runtime.registry": ("list_registered_targets",),
        "kernix.language.spec": ("FunctionSpec", "Param", "parse_arg_spec"),
        "kernix.frontend.infer": ("infer_file", "InferResult"),
        "kernix.prebuilt.build": ("build_module",),
        "kernix.prebuilt.load": ("load_prebuilt",),
        "kernix.runtime.export": ("export", "deserialize", "ExportedKernels"),
        "kernix.checking": ("check", "CheckReport", "Drawing", "CheckResult"),
        "kernix.store.admin": ("cache_info", "clear_cache"),
        "kernix.store.prune": ("prune_cache",),
    }.items()
    for name in names
}


__all__ = ["__version__", "register_ffi_target", "language_of", "cache_root", "set_cache_dir", *_LAZY]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kernix' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
