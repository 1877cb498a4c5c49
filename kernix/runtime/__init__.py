"""The runtime: loading a built library, registering its handlers with JAX (:mod:`.registry`), and
the callables of a :class:`~kernix.runtime.module.CompiledModule` (:mod:`.function`; a call checks its
:mod:`.arguments`, then runs an :mod:`.operation` built of JAX :mod:`.layers`), their :mod:`.stubs`,
and :mod:`.export`.  Nothing here imports libclang or runs a compiler: a warm load is only this."""
