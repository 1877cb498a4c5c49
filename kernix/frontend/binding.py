"""Binding ``// @BE`` annotations (or requested names) to function declarations.

The rule is C++'s, not a line count: an annotation binds to the first
function declaration that starts after it with only comments, whitespace and
specifiers in between.  Each result is a :class:`Target`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import ArgSpecError, SourceError
from ..names import is_identifier
from ..spec import parse_arg_spec
from .annotations import Annotation
from .clangparse import in_file

__all__ = ["Target", "function_cursors", "bind_annotations", "annotated_targets", "requested_targets"]


@dataclass(frozen=True)
class Target:
    """A function to infer.

    Attributes
    ----------
    name
        The exported name.
    cursor
        Its libclang declaration cursor.
    annotation
        The ``// @BE`` annotation that named it, if any.
    explicit
        The arg_spec tokens a ``functions={name: spec}`` argument gave, if any.
    """

    name: str
    cursor: Any
    annotation: Annotation | None
    explicit: tuple[str, ...] | None


def _by_name(cursors: list[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for c in cursors:
        out.setdefault(c.spelling, []).append(c)
    return out


def _template_error(path: str, name: str, cursor: Any) -> SourceError:
    return SourceError(
        f"function {name!r} is a template: function templates are not supported yet. "
        "Export a plain (non-template) function that calls the instantiation you want",
        file=path, line=cursor.location.line, column=cursor.location.column, function=name)


def function_cursors(tu: Any, path: str) -> list[Any]:
    """FUNCTION_DECL / FUNCTION_TEMPLATE cursors located in the main file."""
    import clang.cindex as ci

    K = ci.CursorKind
    containers = {K.NAMESPACE, K.LINKAGE_SPEC, K.UNEXPOSED_DECL}
    wanted = {K.FUNCTION_DECL, K.FUNCTION_TEMPLATE}
    out: list[Any] = []

    def visit(parent: Any) -> None:
        for c in parent.get_children():
            kind = c.kind
            if kind in wanted or kind in containers:
                if not in_file(c, path):
                    continue
                if kind in wanted:
                    out.append(c)
                else:
                    visit(c)

    visit(tu.cursor)
    return out


_BETWEEN_COMMENTS = re.compile(rb"//[^\n]*|/\*.*?\*/", re.DOTALL)


def bind_annotations(raw: bytes, annotations: list[Annotation], cursors: list[Any]) -> dict[int, Any]:
    """Bind each annotation to the function declaration that follows it.

    An annotation binds to the first function whose declaration (its extent:
    ``template``, specifiers, or the macro call that generates it) starts
    after the annotation, when only comments, whitespace and specifiers lie in
    between -- no ``;``, braces or preprocessor lines, the rule clang itself
    uses to attach comments.  (``cursor.raw_comment`` alone is not enough: a
    comment between the return type and the name takes the annotation's place.)
    Returns annotation line -> cursor.
    """
    import bisect

    line_starts = [0]
    for i, b in enumerate(raw):
        if b == 10:
            line_starts.append(i + 1)

    def offset(line: int, col: int) -> int:
        return line_starts[min(line, len(line_starts)) - 1] + col - 1

    starts = []
    for c in cursors:
        st = c.extent.start
        starts.append((offset(st.line, st.column), c.location.line, c))
    starts.sort(key=lambda t: (t[0], t[1]))
    keys = [t[0] for t in starts]
    bound: dict[int, Any] = {}
    for a in annotations:
        end_line = a.end_line
        after = line_starts[end_line] if end_line < len(line_starts) else len(raw)
        i = bisect.bisect_left(keys, after)
        if i == len(starts):
            continue
        between = _BETWEEN_COMMENTS.sub(b" ", raw[after:starts[i][0]])
        if any(ch in between for ch in b";{}#"):
            continue
        bound[a.line] = starts[i][2]
    return bound


def annotated_targets(
    path: str, annotations: list[Annotation], bound: dict[int, Any], cursors: list[Any]
) -> tuple[list[Target], list[SourceError]]:
    import clang.cindex as ci

    errors: list[SourceError] = []
    targets: list[Target] = []
    seen: dict[str, tuple[Annotation, Any]] = {}
    by_name = _by_name(cursors)
    for a in annotations:
        where = dict(file=path, line=a.line, column=a.column)
        if not a.name:
            errors.append(SourceError(
                "`// @BE` names no function: write `// @BE <function_name>` right before the function", **where))
            continue
        if not is_identifier(a.name):
            errors.append(SourceError(
                f"`// @BE {a.name}`: {a.name!r} is not a valid function name", function=a.name, **where))
            continue
        cursor = bound.get(a.line)
        if cursor is None:
            hint = ""
            if a.name in by_name:
                hint = f" (function {a.name!r} is declared at line {by_name[a.name][0].location.line})"
            errors.append(SourceError(
                f"annotation `{a.text}` is bound to nothing: no function declaration follows it{hint}. "
                "Put it on the line right before the function it exports, with only comments in between",
                function=a.name, **where))
            continue
        if cursor.spelling != a.name:
            errors.append(SourceError(
                f"annotation `{a.text}` is bound to function {cursor.spelling!r} (line {cursor.location.line}), "
                f"which has another name. Rename the annotation to `// @BE {cursor.spelling}` or move it "
                f"right before {a.name!r}",
                function=a.name, **where))
            continue
        if cursor.kind == ci.CursorKind.FUNCTION_TEMPLATE:
            errors.append(_template_error(path, a.name, cursor))
            continue
        if a.name in seen:
            prev_ann, prev_cursor = seen[a.name]
            if prev_cursor.canonical == cursor.canonical:
                continue  # prototype and definition both annotated: one function
            errors.append(SourceError(
                f"one name annotated twice: `// @BE {a.name}` here and at line {prev_ann.line}. "
                "Each exported name must be unique; give one of them another name",
                function=a.name, **where))
            continue
        seen[a.name] = (a, cursor)
        targets.append(Target(a.name, cursor, a, None))
    return targets, errors


def requested_targets(
    path: str,
    wanted: dict[str, tuple[str, ...] | None],
    annotations: list[Annotation],
    bound: dict[int, Any],
    cursors: list[Any],
) -> tuple[list[Target], list[SourceError]]:
    import clang.cindex as ci

    errors: list[SourceError] = []
    targets: list[Target] = []
    annotated = {a.name: (a, bound[a.line]) for a in annotations if a.line in bound and bound[a.line].spelling == a.name}
    by_name = _by_name(cursors)
    for name, explicit in wanted.items():
        if name in annotated:
            a, cursor = annotated[name]
        else:
            a = None
            cands = by_name.get(name, [])
            if not cands:
                available = ", ".join(sorted(by_name)) or "none"
                errors.append(SourceError(
                    f"no function named {name!r} in this file; the functions it declares are: {available}",
                    file=path, function=name))
                continue
            distinct: dict[int, Any] = {}
            for c in cands:
                distinct.setdefault(c.canonical.hash, c)
            if len(distinct) > 1:
                lines = ", ".join(str(c.location.line) for c in distinct.values())
                errors.append(SourceError(
                    f"{name!r} is overloaded (declarations at lines {lines}): mark the one to export "
                    f"with `// @BE {name}` on the line before it",
                    file=path, line=cands[0].location.line, function=name))
                continue
            defs = [c for c in cands if c.is_definition()]
            cursor = defs[0] if defs else cands[-1]  # bodies are skipped: the last is the definition
        if cursor.kind == ci.CursorKind.FUNCTION_TEMPLATE:
            errors.append(_template_error(path, name, cursor))
            continue
        if explicit is not None:
            try:
                parse_arg_spec(list(explicit), function=name)
            except ArgSpecError as exc:
                errors.append(SourceError(str(exc), file=path, line=cursor.location.line, function=name))
                continue
        targets.append(Target(name, cursor, a, explicit))
    return targets, errors
