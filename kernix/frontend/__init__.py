"""The frontend: reading the user's source the way its compiler does.

``lexer`` finds ``// @BE`` comments; ``compiler_view`` asks the compilers what
they predefine; ``clangparse`` runs libclang with that view and reads the
translation unit; ``binding`` ties annotations to declarations; ``classify``
makes a :class:`~kernix.language.spec.FunctionSpec` of one; ``instantiation``
handles templates; ``infer`` runs the whole and ``speccache`` remembers it.
"""
