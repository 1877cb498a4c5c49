"""The backend: from specs to a shared library.

``toolchain`` finds the compilers; ``flags`` turns the options into their
command lines (the GPU architectures come from :mod:`kernix.arch`, which a warm
CUDA load asks without importing this package); ``codegen`` writes the shims
and the typed XLA FFI handlers; ``ninja`` writes the build file and runs the
compilers in parallel.
"""
