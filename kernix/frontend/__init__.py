"""The frontend: reading the user's source the way its compiler does.

``annotations`` finds ``// @BE`` comments; ``compiler_view`` asks nvcc and the host
compiler what they predefine; ``clangparse`` runs libclang with that view
(macros, include paths); ``binding`` ties annotations to
declarations; ``classify`` turns a declaration into a
:class:`~kernix.language.spec.FunctionSpec`; ``infer`` runs the whole and ``speccache``
remembers its answers.  libclang is imported only when a parse really runs.
"""
