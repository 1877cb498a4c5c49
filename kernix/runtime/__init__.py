"""The runtime: loading a built library, registering its handlers with JAX,
and the typed callables of a :class:`~kernix.runtime.module.CompiledModule`.

Nothing here imports libclang or runs a compiler: a warm load is only this.
"""
