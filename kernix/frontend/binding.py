"""Binding ``// @BE`` annotations (or requested names) to function declarations.

An annotation binds to the first function declaration that starts after it
with only comments, whitespace and specifiers in between (a :class:`Target`).
:func:`refusal` says, with the fix, when the generated code cannot call that
declaration.
"""

from __future__ import annotations

import bisect
import itertools
import os
import re
from dataclasses import dataclass
from typing import Any

from ..language.names import is_identifier
from ..language.spec import parse_arg_spec
from ..errors import ArgSpecError, SourceError
from .clangparse import SPACE_ANNOTATIONS, in_file
from .classify import qualified_name
from .lexer import Annotation

__all__ = ["is_member", "execution_spaces", "Target", "function_cursors", "bind_annotations", "annotated_targets",
           "requested_targets", "line_starts", "NOT_DECLARED", "DECLARED_IN_HEADER", "TEMPLATE_PARAMETER_KINDS"]

#: The cursor kinds (names) of member functions.
MEMBER_KINDS = ("CXX_METHOD", "CONSTRUCTOR", "DESTRUCTOR", "CONVERSION_FUNCTION")
_CLASS_KINDS = ("STRUCT_DECL", "CLASS_DECL", "CLASS_TEMPLATE", "CLASS_TEMPLATE_PARTIAL_SPECIALIZATION", "UNION_DECL")
TEMPLATE_PARAMETER_KINDS = ("TEMPLATE_TYPE_PARAMETER", "TEMPLATE_NON_TYPE_PARAMETER", "TEMPLATE_TEMPLATE_PARAMETER")


def is_member(cursor: Any) -> bool:
    """Whether ``cursor`` declares a member function (or member function template)."""
    if cursor.kind.name in MEMBER_KINDS:
        return True
    parent = cursor.semantic_parent
    return parent is not None and parent.kind.name in _CLASS_KINDS


def execution_spaces(cursor: Any) -> set[str]:
    """The CUDA execution spaces written on ``cursor``, from the prelude's
    ``annotate`` markers (:data:`kernix.frontend.clangparse.SPACE_ANNOTATIONS`)
    or clang's own CUDA attributes.
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
    """Whether ``cursor`` is a hidden friend: declared only in classes, found only
    by argument-dependent lookup, so the generated code could not name it.
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
    names = [c.spelling for c in primary.get_children() if c.kind.name in TEMPLATE_PARAMETER_KINDS]
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
        # (a template template parameter cannot be the example's `<T: float, double>`)
        params = [c.spelling for c in cursor.get_children() if c.kind.name in TEMPLATE_PARAMETER_KINDS[:2]]
        return SourceError(
            f"function {name!r} is a template: a template is exported for the template arguments its annotation "
            f"lists, each instantiation under its own name; write them after its name, e.g. "
            f"`// @BE {name}<{params[0] if params and params[0] else 'T'}: float, double>`", **where)
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


@dataclass(frozen=True)
class Target:
    """A function to infer: its exported ``name``, its declaration ``cursor``, the
    ``annotation`` or ``explicit`` arg_spec tokens that named it, and whether the
    tokens came from a ``second`` annotation of the function (where a
    disagreement is reported).
    """

    name: str
    cursor: Any
    annotation: Annotation | None
    explicit: tuple[str, ...] | None
    second: bool = False


def _by_name(cursors: list[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for c in cursors:
        out.setdefault(c.spelling, []).append(c)
    return out


def function_cursors(tu: Any, path: str) -> list[Any]:
    """Function declarations in the main file, in walk order, members and friends
    included so that an annotation before one binds to it (and :func:`refusal`
    can refuse it).
    """
    import clang.cindex as ci

    K = ci.CursorKind
    containers = {getattr(K, n) for n in (*_CLASS_KINDS, "NAMESPACE", "LINKAGE_SPEC", "UNEXPOSED_DECL", "FRIEND_DECL")}
    wanted = {K.FUNCTION_DECL, K.FUNCTION_TEMPLATE, *(getattr(K, n) for n in MEMBER_KINDS)}
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


# What may separate an annotation from its function besides specifiers: comments,
# and C++11 attribute-specifiers (whose string arguments may hold ';' or braces).
_BETWEEN_SKIP = re.compile(
    rb"""//[^\r\n]*|/\*.*?\*/|"(?:\\.|[^"\\\r\n])*"|'(?:\\.|[^'\\\r\n])*'""", re.DOTALL)
_ATTRIBUTE_SPECIFIER = re.compile(rb"\[\[.*?\]\]", re.DOTALL)


def line_starts(raw: bytes) -> list[int]:
    """Byte offsets where each line of ``raw`` starts, with clang's line breaks (LF, CRLF, CR)."""
    # (bytes.splitlines breaks at exactly those: the work stays in C, whatever the file's size)
    starts = [0, *itertools.accumulate(map(len, raw.splitlines(keepends=True)))]
    if raw and not raw.endswith((b"\n", b"\r")):
        starts.pop()  # the last line has no break: no line starts after it
    return starts


def _between_is_specifiers(text: bytes) -> bool:
    """Whether ``text`` (between annotation and declaration) holds only comments,
    attributes, whitespace and specifiers: no ``;``, braces or preprocessor lines."""
    text = _ATTRIBUTE_SPECIFIER.sub(b" ", _BETWEEN_SKIP.sub(lambda m: b'""' if m.group()[:1] in b"\"'" else b" ", text))
    return not any(ch in text for ch in b";{}#")


# An explicit instantiation (``template void f<float>(...);``, ``extern template ...``):
# ``template`` not followed by ``<``.  libclang gives it no declaration of its own.
_INSTANTIATION = re.compile(rb"(?:extern\s+)?template(?![\w<])\s*(?!<)(?P<decl>[^;{]*)")
_BEFORE_DECLARATION = re.compile(rb"(?:\s+|//[^\r\n]*|/\*.*?\*/|\[\[.*?\]\])*", re.DOTALL)
_TEMPLATE_ID = re.compile(r"(?P<name>[A-Za-z_]\w*)\s*(?:<(?P<args>[^()]*)>)?\s*\(")


def explicit_instantiation(raw: bytes, starts_of: list[int], annotation: Annotation) -> str | None:
    """The explicit instantiation right after ``annotation`` in ``raw`` (single-spaced,
    without ``template``), or ``None``; ``starts_of`` is :func:`line_starts`.
    """
    after = starts_of[annotation.end_line] if annotation.end_line < len(starts_of) else len(raw)
    skipped = _BEFORE_DECLARATION.match(raw, after)
    m = _INSTANTIATION.match(raw, skipped.end() if skipped else after)
    if m is None:
        return None
    return " ".join(m.group("decl").decode("utf-8", errors="replace").split())


def _instantiation_error(a: Annotation, decl: str, where: dict[str, Any]) -> SourceError:
    """The error for annotation ``a`` placed before the explicit instantiation ``decl``."""
    tid = _TEMPLATE_ID.search(decl)
    name, args = (tid.group("name"), tid.group("args")) if tid is not None else (a.name, None)
    call = name if args is None else f"{name}<{args.strip()}>"
    wrapper = a.name  # the name the annotation wants, unless it is the template's own
    if wrapper == name:
        suffix = re.sub(r"[^0-9A-Za-z]+", "_", args or "").strip("_")
        wrapper = f"{name}_{suffix or 'export'}"
    return SourceError(
        f"annotation `{a.text}` precedes an explicit instantiation (`template {decl}`), which declares "
        f"no function of its own. Annotate the template itself with the arguments to export: "
        f"`// @BE {name}<{(args or 'T').strip()}>` right before its `template <...>`; or export a "
        f"plain function that calls it: `// @BE {wrapper}` before `void {wrapper}(...)` taking the same "
        f"parameters and calling `{call}(...)` with them", function=a.name, **where)


def bind_annotations(raw: bytes, annotations: list[Annotation], cursors: list[Any]) -> dict[int, Any]:
    """Annotation line -> the cursor of the function whose declaration extent starts
    after it with only comments, whitespace and specifiers in between (clang's
    own rule for comments; ``cursor.raw_comment`` would lose an annotation to a
    comment between the return type and the name).
    """
    starts_of = line_starts(raw)

    def offset(line: int, col: int) -> int:
        return starts_of[min(line, len(starts_of)) - 1] + col - 1

    starts = []
    for c in cursors:
        st = c.extent.start
        starts.append((offset(st.line, st.column), c.location.line, c))
    starts.sort(key=lambda t: (t[0], t[1]))
    keys = [t[0] for t in starts]
    bound: dict[int, Any] = {}
    # From the lowest annotation up, each checked as far as the one below it (a comment): each byte once,
    # not once per annotation above. reach[i]: where the checked text before declaration i starts (None:
    # it holds something besides specifiers, as then does the text of every annotation above).
    reach: dict[int, int | None] = {}
    for a in reversed(annotations):
        end_line = a.end_line
        after = starts_of[end_line] if end_line < len(starts_of) else len(raw)
        i = bisect.bisect_left(keys, after)
        if i == len(starts):
            continue
        upto = reach.get(i, starts[i][0])
        if upto is None or not _between_is_specifiers(raw[after:upto]):
            reach[i] = None
            continue
        start = starts_of[a.line - 1]  # (the column counts characters: the offset counts bytes)
        reach[i] = start + len(raw[start:start + 4 * a.column].decode("utf-8", "surrogateescape")[:a.column - 1]
                               .encode("utf-8", "surrogateescape"))
        # One macro invocation may generate several functions (all starting at
        # the invocation): a stack of annotations before it binds each to its own name.
        j = i
        while j < len(starts) and starts[j][0] == starts[i][0]:
            if starts[j][2].spelling == a.name:
                i = j
                break
            j += 1
        bound[a.line] = starts[i][2]
    return dict(reversed(bound.items()))  # (in source order)


def _start(cursor: Any) -> tuple[int, int]:
    st = cursor.extent.start
    return st.line, st.column


def _name_problem(name: str) -> str:
    """Why ``name`` (not an ASCII identifier) cannot be exported, and what to do."""
    if name.isidentifier() and not name.isascii():
        return (f"{name!r} is not an ASCII identifier: an exported name is also the FFI target's and the "
                "Python attribute's, so it is ASCII letters, digits and '_'. Rename the function, or annotate "
                "a wrapper with an ASCII name that calls it")
    return f"{name!r} is not a valid function name"


def annotated_targets(
    path: str, annotations: list[Annotation], bound: dict[int, Any], cursors: list[Any], raw: bytes
) -> tuple[list[Target], list[SourceError]]:
    """The functions the annotations export, and an error for each one that cannot be.

    ``raw`` (the file's bytes) lets an annotation bound to nothing say what it
    precedes instead (an explicit instantiation).
    """
    errors: list[SourceError] = []
    targets: list[Target] = []
    seen: dict[str, tuple[Annotation, Any]] = {}
    by_name = _by_name(cursors)
    by_start: dict[tuple[int, int], list[Any]] = {}  # (filled when an annotation first needs it)
    for a in annotations:
        where = dict(file=path, line=a.line, column=a.column)
        if not a.name:
            errors.append(SourceError(
                "`// @BE` names no function: write `// @BE <function_name>` right before the function", **where))
            continue
        if not is_identifier(a.name):
            errors.append(SourceError(f"`// @BE {a.name}`: {_name_problem(a.name)}", function=a.name, **where))
            continue
        cursor = bound.get(a.line)
        if cursor is None:
            instantiation = explicit_instantiation(raw, line_starts(raw), a)
            if instantiation is not None:
                errors.append(_instantiation_error(a, instantiation, where))
                continue
            hint = ""
            if a.name in by_name:
                hint = f" (function {a.name!r} is declared at line {by_name[a.name][0].location.line})"
            errors.append(SourceError(
                f"annotation `{a.text}` is bound to nothing: no function declaration follows it{hint}. "
                "Put it on the line right before the function it exports, with only comments in between",
                function=a.name, **where))
            continue
        if cursor.spelling != a.name:
            if not by_start:
                for c in cursors:
                    by_start.setdefault(_start(c), []).append(c)
            together = by_start[_start(cursor)]
            if len(together) > 1:
                found = ", ".join(repr(c.spelling) for c in together)
                errors.append(SourceError(
                    f"annotation `{a.text}` precedes a macro invocation (line {cursor.location.line}) that "
                    f"generates {found}, none named {a.name!r}. Rename the annotation to one of these, "
                    "or move it right before the function it exports",
                    function=a.name, **where))
                continue
            errors.append(SourceError(
                f"annotation `{a.text}` is bound to function {cursor.spelling!r} (line {cursor.location.line}), "
                f"which has another name. Rename the annotation to `// @BE {cursor.spelling}` or move it "
                f"right before {a.name!r}",
                function=a.name, **where))
            continue
        refused = refusal(path, a.name, cursor)
        if refused is not None:
            errors.append(refused)
            continue
        if a.name in seen:
            prev_ann, prev_cursor = seen[a.name]
            if prev_cursor.canonical == cursor.canonical:
                if a.tokens and prev_ann.tokens and a.tokens != prev_ann.tokens:
                    errors.append(SourceError(
                        f"`{a.text}` disagrees with `{prev_ann.text}` (line {prev_ann.line}) on the same "
                        f"function {a.name!r}: give the arg_spec once, or make both the same",
                        function=a.name, **where))
                    targets = [t for t in targets if t.name != a.name]
                elif a.tokens and not prev_ann.tokens:
                    targets = [t if t.name != a.name else Target(a.name, t.cursor, a, None, True) for t in targets]
                    seen[a.name] = (a, prev_cursor)
                continue  # prototype and definition both annotated: one function
            errors.append(SourceError(
                f"one name annotated twice: `// @BE {a.name}` here and at line {prev_ann.line}. "
                "Each exported name must be unique; give one of them another name",
                function=a.name, **where))
            continue
        seen[a.name] = (a, cursor)
        targets.append(Target(a.name, cursor, a, None))
    return targets, errors


#: The ``reason`` of :func:`requested_targets`' error for a name the file does not declare
#: (expected when a module's sources are searched for an unannotated function).
NOT_DECLARED = "not_declared"
#: The ``reason`` of that error where a header the file includes declares the name (the
#: message says where, and what to declare in the file).
DECLARED_IN_HEADER = "declared_in_header"


def _header_hint(tu: Any, path: str, name: str) -> str:
    """For a requested name only an included header (not a system header) declares: where, and the
    declaration to add."""

    def find(scope: Any) -> Any | None:
        for c in scope.get_children():
            kind = c.kind.name
            if kind not in ("FUNCTION_DECL", "NAMESPACE", "LINKAGE_SPEC") or c.location.is_in_system_header:
                continue
            if kind != "FUNCTION_DECL":
                hit = find(c)
                if hit is not None:
                    return hit
            elif c.spelling == name and c.location.file is not None and c.location.file.name != path:
                return c
        return None

    found = find(tu.cursor)
    if found is None:
        return ""
    loc = found.location
    fix = f"`// @BE {name}` then `{declaration(found)};`"
    scope = qualified_name(found).rpartition("::")[0]
    if scope:
        fix = f"`namespace {scope} {{`, {fix}, `}}`"
    return (f". It is declared in {loc.file.name}:{loc.line}, which this file includes: functions are exported "
            f"from the source files themselves, so declare it here too, after that #include: {fix}")


def requested_targets(
    path: str,
    wanted: dict[str, tuple[str, ...] | None],
    annotations: list[Annotation],
    bound: dict[int, Any],
    cursors: list[Any],
    tu: Any,
) -> tuple[list[Target], list[SourceError]]:
    """The functions a ``functions=`` argument names, and an error for each one that cannot be
    (``tu``, the parsed file, lets a name that only an included header declares say so); the
    error for a name the file does not declare has the reason :data:`NOT_DECLARED`, or
    :data:`DECLARED_IN_HEADER` where an included header declares it."""
    errors: list[SourceError] = []
    targets: list[Target] = []
    annotated = {a.name: (a, bound[a.line]) for a in annotations if a.line in bound and bound[a.line].spelling == a.name}
    by_name = _by_name([c for c in cursors if not is_member(c)])
    for name, explicit in wanted.items():
        if name in annotated:
            a, cursor = annotated[name]
        else:
            a = None
            cands = by_name.get(name, [])
            if not cands:
                available = ", ".join(sorted(by_name)) or "none"
                hint = _header_hint(tu, path, name)
                errors.append(SourceError(
                    f"no function named {name!r} in this file; the functions it declares are: {available}{hint}",
                    file=path, function=name, reason=DECLARED_IN_HEADER if hint else NOT_DECLARED))
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
        refused = refusal(path, name, cursor)
        if refused is not None:
            errors.append(refused)
            continue
        if explicit is not None:
            try:
                parse_arg_spec(list(explicit), function=name)
            except ArgSpecError as exc:
                errors.append(SourceError(str(exc), file=path, line=cursor.location.line, function=name))
                continue
        targets.append(Target(name, cursor, a, explicit))
    return targets, errors
