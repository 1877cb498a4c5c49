"""The frontend: reading the user's source the way its compiler does.

``lexer`` finds ``// @BE`` comments; ``compiler_view`` asks nvcc and the host
compiler what they predefine; ``clangparse`` runs libclang with that view
(macros, include paths, the precompiled prelude of ``pch``) and reads the
translation unit; ``binding`` ties annotations to declarations and refuses
those that cannot be exported; ``classify`` turns a declaration into a
:class:`~kernix.language.spec.FunctionSpec`; ``instantiation`` does so for a
template's instantiations; ``infer`` runs the whole and ``speccache``
remembers its answers.  libclang is imported only when a parse really runs.
"""
