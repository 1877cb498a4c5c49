"""The backend: from specs to a shared library.

``toolchain`` finds the compilers and the GPU architecture; ``codegen`` writes
the shims and the typed XLA FFI handlers; ``ninja`` writes the build file and
runs the compilers in parallel.
"""
