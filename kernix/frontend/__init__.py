"""The frontend: reading the user's source the way its compiler does.

``annotations`` finds ``// @BE`` comments; ``clangparse`` runs libclang with the
compiler's own view (macros, include paths); ``binding`` ties annotations to
declarations; ``classify`` turns a declaration into a
:class:`~kernix.spec.FunctionSpec`; ``infer`` runs the whole and ``speccache``
remembers its answers.  libclang is imported only when a parse really runs.
"""
