"""Which function declarations cannot be exported, and why.

An annotation (or a ``functions=`` name) binds to a declaration first
(:mod:`kernix.frontend.binding`); :func:`refusal` then says, with the fix,
when that declaration is one the generated code cannot call: a member
function, a function template, a CUDA kernel or device function, a deleted
function, a friend function only its class declares, an explicit
specialization whose template arguments a call cannot deduce.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import SourceError
from .prelude import SPACE_ANNOTATIONS

__all__ = ["MEMBER_KINDS", "is_member", "execution_spaces", "declaration", "refusal"]


def _template_error(path: str, name: str, cursor: Any) -> SourceError:
    params = [c.spelling for c in cursor.get_children()
              if c.kind.name in ("TEMPLATE_TYPE_PARAMETER", "TEMPLATE_NON_TYPE_PARAMETER")]
    first = params[0] if params and params[0] else "T"
    return SourceError(
        f"function {name!r} is a template: a template is exported for the template arguments its annotation "
        f"lists, each instantiation under its own name; write them after its name, e.g. "
        f"`// @BE {name}<{first}: float, double>`",
        file=path, line=cursor.location.line, column=cursor.location.column, function=name)


#: The cursor kinds (names) of member functions.
MEMBER_KINDS = ("CXX_METHOD", "CONSTRUCTOR", "DESTRUCTOR", "CONVERSION_FUNCTION")
_CLASS_KINDS = ("STRUCT_DECL", "CLASS_DECL", "CLASS_TEMPLATE", "CLASS_TEMPLATE_PARTIAL_SPECIALIZATION", "UNION_DECL")


def is_member(cursor: Any) -> bool:
    """Whether ``cursor`` declares a member function (or member function template)."""
    if cursor.kind.name in MEMBER_KINDS:
        return True
    parent = cursor.semantic_parent
    return parent is not None and parent.kind.name in _CLASS_KINDS


def execution_spaces(cursor: Any) -> set[str]:
    """The CUDA execution spaces written on ``cursor`` (``global``, ``device``, ``host``).

    Read from the ``annotate`` attributes the CUDA prelude's keyword markers
    leave (:data:`kernix.frontend.prelude.SPACE_ANNOTATIONS`), or from
    clang's own CUDA attributes when the parse runs in clang's CUDA mode.
    """
    spaces: set[str] = set()
    for child in cursor.get_children():
        kind = child.kind.name
        if kind == "ANNOTATE_ATTR" and child.spelling in SPACE_ANNOTATIONS:
            spaces.add(SPACE_ANNOTATIONS[child.spelling])
        elif kind in ("CUDAGLOBAL_ATTR", "CUDADEVICE_ATTR", "CUDAHOST_ATTR"):
            spaces.add(kind[4:-5].lower())
    return spaces


def _is_deleted(cursor: Any) -> bool:
    """Whether ``cursor`` is defined as deleted (``= delete``).

    libclang answers this for member functions only, and a declaration's
    extent stops before ``= delete``: the tokens right after it are read.
    """
    import clang.cindex as ci

    end = cursor.extent.end
    if end.file is None:
        return False
    tu = cursor.translation_unit
    try:
        size = os.path.getsize(end.file.name)
    except OSError:
        return False
    stop = ci.SourceLocation.from_offset(tu, end.file, min(end.offset + 64, size))
    tokens: list[str] = []
    try:
        for t in tu.get_tokens(extent=ci.SourceRange.from_locations(end, stop)):
            tokens.append(t.spelling)
            if len(tokens) == 3:
                break
    except UnicodeDecodeError:  # bytes that are not UTF-8 after the declaration: not `= delete`
        pass
    return tokens[:2] == ["=", "delete"] or tokens[1:3] == ["=", "delete"]


def _declared_in_class_only(cursor: Any) -> bool:
    """Whether ``cursor`` is a friend function that only classes declare.

    Such a "hidden friend" belongs to the enclosing namespace, but neither
    ordinary nor qualified lookup finds it (only argument-dependent lookup
    does), so the generated code could not name it.  A declaration at
    namespace scope, anywhere in the translation unit, makes it nameable.
    """
    import clang.cindex as ci

    lexical = cursor.lexical_parent
    if lexical is None or lexical.kind.name not in (*_CLASS_KINDS, "FRIEND_DECL"):
        return False
    scopes: list[str] = []  # the USRs of the enclosing namespaces, outermost first
    parent = cursor.semantic_parent
    while parent is not None and parent.kind != ci.CursorKind.TRANSLATION_UNIT:
        scopes.insert(0, parent.get_usr())
        parent = parent.semantic_parent
    target = cursor.canonical

    def declares(scope: Any, depth: int) -> bool:
        for c in scope.get_children():
            kind = c.kind.name
            if kind == "FUNCTION_DECL" and depth == len(scopes) and c.canonical == target:
                return True
            if kind in ("LINKAGE_SPEC", "UNEXPOSED_DECL") and declares(c, depth):
                return True
            if kind == "NAMESPACE" and depth < len(scopes) and c.get_usr() == scopes[depth] and declares(c, depth + 1):
                return True
        return False

    return not declares(cursor.translation_unit.cursor, 0)


def declaration(cursor: Any) -> str:
    """A declaration of function ``cursor`` as its types are written (no body, no default arguments)."""
    params = ", ".join(" ".join(w for w in (p.type.spelling, p.spelling) if w) for p in cursor.get_arguments())
    noexcept = cursor.exception_specification_kind.name in ("BASIC_NOEXCEPT", "COMPUTED_NOEXCEPT", "DYNAMIC_NONE")
    return f"{cursor.result_type.spelling} {cursor.spelling}({params})" + (" noexcept" if noexcept else "")


def _undeducible_specialization(cursor: Any) -> list[str]:
    """For an explicit specialization, the primary template's parameters that no
    function parameter mentions (so a call cannot deduce them); else ``[]``."""
    import clang.cindex as ci

    primary = cursor.specialized_template
    if primary is None or primary.kind != ci.CursorKind.FUNCTION_TEMPLATE:
        return []
    names = [c.spelling for c in primary.get_children()
             if c.kind.name in ("TEMPLATE_TYPE_PARAMETER", "TEMPLATE_NON_TYPE_PARAMETER",
                                "TEMPLATE_TEMPLATE_PARAMETER")]
    used: set[str] = set()
    for p in primary.get_children():
        if p.kind == ci.CursorKind.PARM_DECL:
            used.update(t.spelling for t in p.get_tokens())
    return [n for n in names if n and n not in used]


def refusal(path: str, name: str, cursor: Any) -> SourceError | None:
    """Why ``cursor`` cannot be exported as ``name`` (an error naming the fix), or ``None``."""
    import clang.cindex as ci

    where = dict(file=path, line=cursor.location.line, column=cursor.location.column, function=name)
    if is_member(cursor):
        owner = cursor.semantic_parent.spelling if cursor.semantic_parent is not None else "a class"
        return SourceError(
            f"{name!r} is a member function of {owner!r}: member functions cannot be exported: "
            "annotate a free function that calls it", **where)
    if cursor.kind == ci.CursorKind.FUNCTION_TEMPLATE:
        return _template_error(path, name, cursor)
    if _declared_in_class_only(cursor):
        owner = cursor.lexical_parent.spelling or "its class"
        return SourceError(
            f"{name!r} is a friend function declared only inside class {owner!r}: outside argument-dependent "
            "lookup nothing can name it, so the generated code cannot call it. Declare it at namespace scope "
            f"too, after the class: `{declaration(cursor)};`", **where)
    spaces = execution_spaces(cursor)
    if "global" in spaces:
        return SourceError(
            f"{name!r} is a `__global__` kernel: a kernel cannot be called from the host. Annotate its "
            f"launcher instead: a host function that runs `{name}<<<grid, block, 0, stream>>>(...)` "
            "and takes the tensors", **where)
    if "device" in spaces and "host" not in spaces:
        return SourceError(
            f"{name!r} is a `__device__` function: nvcc compiles it for the GPU only, so the host cannot "
            f"call it. Annotate a host function that launches a kernel calling it, or declare it "
            "`__host__ __device__`", **where)
    if _is_deleted(cursor):
        return SourceError(
            f"{name!r} is a deleted function (`= delete`): it cannot be called. Annotate a function "
            "that has a definition", **where)
    missing = _undeducible_specialization(cursor)
    if missing:
        return SourceError(
            f"{name!r} is an explicit specialization whose template argument(s) "
            f"{', '.join(missing)} cannot be deduced at the call: no parameter mentions them. "
            "Annotate a plain function that calls this specialization", **where)
    return None
