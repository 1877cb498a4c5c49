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
from .paths import set_cache_dir
from .spec import FunctionSpec, Param, parse_arg_spec

__version__ = "0.1.0"

__all__ = [
    "__version__",
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
