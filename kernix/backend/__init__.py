"""The backend: from specs to a shared library.

``toolchain`` finds the compilers; ``arch`` names the GPU architecture (and finds
the default one: a warm CUDA load asks it, and nothing else here); ``codegen`` writes
the shims and the typed XLA FFI handlers; ``ninja`` writes the build file and
runs the compilers in parallel.
"""
