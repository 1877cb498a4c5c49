"""The annotation language: what a ``// @BE`` line and the ``functions=``
argument may say, and the :class:`~kernix.language.spec.FunctionSpec` it
becomes.  Pure Python, no libclang and no JAX: inference (:mod:`kernix.frontend`),
the generated code (:mod:`kernix.backend`), the cache and the callables
(:mod:`kernix.runtime`) all read these values and none of them re-parse text.

Internals.  An annotation ``// @BE name<T: float, double> arg ret (n)->(n)
vjp=f scratch=n*4`` is found in the source by :mod:`kernix.frontend.lexer`;
its words are read onto the spec that inference derived from the C++
declaration by :func:`.annotation.annotate_spec`, the one entry point, which
hands each part to its module: the arg_spec tokens to :mod:`.spec` (the
grammar and ``FunctionSpec``, ``Param``), the shape signature to
:mod:`.shapes` (parsed once, bound to arrays at every call), the
``scratch=`` expression to :mod:`.sizes`, the template list to
:mod:`.templates`, which holds the whole template feature but the libclang
probe (:mod:`kernix.frontend.instantiation`): instance names, families, the
member a call's dtypes pick, and the families' ``@overload`` stubs.  :mod:`.selection` holds what a caller asks to
export (``functions=``) and checks an explicit arg_spec against the inferred
one; :mod:`.annotation` also checks a whole module (unique names, ``vjp=``
and ``jvp=`` pairs).  Every module leans on two tables: :mod:`.dtypes` (each dtype on
every side of the FFI boundary) and :mod:`.names` (what a module, target or
function may be called), and on :mod:`.spelling` (what C++ spelling a spec
may carry into generated code).  This ``__init__`` imports nothing, so a
warm load that needs only :mod:`.names` pays only for it.
"""
