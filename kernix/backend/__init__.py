"""The backend: from specs to a shared library.

``toolchain`` finds the compilers; ``arch`` names the GPU architectures and
finds the default one, from the GPUs ``gpus`` asks the driver for; ``flags`` turns the options into their command lines;
``codegen`` writes the shims
and the typed XLA FFI handlers; ``ninja`` writes the build file and runs the
compilers in parallel.
"""
