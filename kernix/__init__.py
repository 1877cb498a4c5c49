"""kernix: call annotated C++ and CUDA functions from JAX.

Write a function, mark it ``// @BE name``, and load it::

    mod = kernix.load_cpp_inline("ops", SOURCE)
    y = mod.scale_by(x, scale_factor=3.0, out=jax.ShapeDtypeStruct(x.shape, x.dtype))

kernix reads the exact signature with libclang, generates a typed XLA FFI
handler, compiles and caches it, and registers ``"ops.scale_by"`` with JAX.

Importing kernix is light: libclang, jax and the compilers are touched only
when a function that needs them runs.
"""

from __future__ import annotations

from .errors import (
    ArgSpecError,
    CacheError,
    CompilationError,
    InferenceError,
    KernixError,
    RegistrationError,
    SourceError,
    ToolchainError,
)
from .api import (
    load_cpp_dir,
    load_cpp_file,
    load_cpp_inline,
    load_cuda_dir,
    load_cuda_file,
    load_cuda_inline,
)
from .cache import cache_info, clear_cache
from .module import CallError, CompiledModule, KernelFunction
from .names import InvalidNameError
from .paths import cache_root, set_cache_dir
from .registry import list_registered_targets
from .spec import FunctionSpec, Param, parse_arg_spec

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "load_cuda_inline",
    "load_cuda_file",
    "load_cuda_dir",
    "load_cpp_inline",
    "load_cpp_file",
    "load_cpp_dir",
    "CompiledModule",
    "KernelFunction",
    "register_ffi_target",
    "list_registered_targets",
    "cache_info",
    "clear_cache",
    "cache_root",
    "CallError",
    "InvalidNameError",
    "ArgSpecError",
    "CacheError",
    "CompilationError",
    "InferenceError",
    "KernixError",
    "RegistrationError",
    "SourceError",
    "ToolchainError",
    "FunctionSpec",
    "Param",
    "parse_arg_spec",
    "set_cache_dir",
]


def register_ffi_target(module: CompiledModule, target_prefix: str | None = None) -> list[str]:
    """Register every function of a module loaded with ``auto_register=False``.

    Targets are named ``"<target_prefix or module name>.<function>"``;
    registering the same code again is a no-op.  Returns the target names.
    """
    return module.register(target_prefix)
