"""What only the compiler can say, asked by parsing the file once more with probes appended
(:func:`probe`): the instantiations of an exported function template, and whether a state can be made.

``// @BE scale<T: float, double>`` exports ``scale_float32`` and
``scale_float64`` (:mod:`kernix.language.templates`). libclang shows a
template's parameters only with dependent types, so the file is parsed once
more with one probe per instantiation appended,
``auto* __kernix_probe_<k> = &::ns::scale<float>;``, whose initializer names
the implicit instantiation with substituted parameter types. A probe that
does not compile is an error at the annotation, quoting clang.

Whether the generated code (``shim.h``) can make and delete a ``BE::State<T>``'s
``T`` is asked with the expressions it uses (:func:`state_errors`): an error at the
parameter, not a compiler error inside generated code.
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass, replace
from typing import Any

from ..errors import SourceError
from ..language.templates import TemplateList, instance_name, parse_template_list
from ..language.spec import FunctionSpec
from .lexer import Annotation
from .binding import TEMPLATE_PARAMETER_KINDS, Target, execution_spaces, is_member
from .clangparse import ParseOptions, parse
from .classify import element_dtype, qualified_name

__all__ = ["InstanceTarget", "instance_targets", "split_templated", "state_errors"]

_PROBE = "__kernix_probe_"


@dataclass(frozen=True)
class InstanceTarget(Target):
    """A :class:`~kernix.frontend.binding.Target` that is one instantiation of an annotated template.

    ``cursor`` is the instantiation's declaration; ``annotation`` is the template's,
    renamed to the instance (and its ``vjp=`` or ``jvp=`` to the same instance of the forward template).
    """

    qualified: str = ""
    template_args: tuple[tuple[str, str, str], ...] = ()

    def explain(self, errors: list[SourceError]) -> list[SourceError]:
        """``errors`` found in the instantiation, each saying which one it is."""
        line = self.annotation.line if self.annotation is not None else 0
        args = ", ".join(f"{p} = {w}" for p, w, _ in self.template_args)
        return [SourceError(f"{e.message} (in `{self.qualified}`, {args}, which the annotation at line {line} "
                            "asks for: remove that argument from its list, or make the template accept it)",
                            file=e.file, line=e.line, column=e.column, function=self.name, parameter=e.parameter)
                for e in errors]

    def specialize(self, spec: FunctionSpec) -> FunctionSpec:
        """The instantiation's spec under its exported name, calling the instantiation."""
        return replace(spec, name=self.name, qualified_name=self.qualified, template_args=self.template_args)


def split_templated(path: str, annotations: list[Annotation]
                    ) -> tuple[list[Annotation], dict[int, TemplateList], list[SourceError]]:
    """Annotations with their template lists taken off (each named by its template, as
    binding expects), the lists by annotation line, and an error per malformed list."""
    out: list[Annotation] = []
    lists: dict[int, TemplateList] = {}
    errors: list[SourceError] = []
    for a in annotations:
        try:
            found = parse_template_list(a.name, a.tokens)
        except ValueError as exc:
            errors.append(SourceError(f"annotation `{a.text}`: {exc}", file=path, line=a.line, column=a.column,
                                      function=a.name.partition("<")[0] or None))
            continue
        if found is None:
            out.append(a)
            continue
        lists[a.line] = found
        out.append(replace(a, name=found.name, tokens=found.rest))
    return out, lists, errors


@dataclass(frozen=True)
class _Probe:
    annotation: Annotation
    template: Any
    args: tuple[tuple[str, str], ...]  # (parameter, argument as written), in declaration order

    @property
    def call(self) -> str:
        return f"{qualified_name(self.template)}<{', '.join(w for _, w in self.args)}>"


def written(a: Annotation, tl: TemplateList) -> Annotation:
    """Annotation ``a`` (template list taken off) as written, for messages to quote."""
    groups = "; ".join(f"{p}: {', '.join(v)}" if p else ", ".join(v) for p, v in tl.groups)
    return replace(a, name=f"{tl.name}<{groups}>")


def _probes(path: str, a: Annotation, tl: TemplateList, cursor: Any) -> tuple[list[_Probe], SourceError | None]:
    """The instantiations annotation ``a`` asks of template ``cursor``, or the error that prevents them."""
    a = written(a, tl)
    where: dict[str, Any] = {"file": path, "line": a.line, "column": a.column, "function": tl.name}
    if cursor is None:
        return [], SourceError(f"annotation `{a.text}` is bound to nothing: put it on the line right before "
                               f"`template <...>` of the function template {tl.name!r}", **where)
    if cursor.spelling != tl.name:
        return [], SourceError(f"annotation `{a.text}` is bound to {cursor.spelling!r} (line "
                               f"{cursor.location.line}): name that template, or move the annotation", **where)
    if cursor.kind.name != "FUNCTION_TEMPLATE":
        return [], SourceError(f"annotation `{a.text}` lists template arguments, but {tl.name!r} (line "
                               f"{cursor.location.line}) is not a function template: write `// @BE {tl.name}`",
                               **where)
    if is_member(cursor):
        return [], SourceError(f"{tl.name!r} is a member function template: member functions cannot be "
                               "exported; annotate a free function template that calls it", **where)
    spaces = execution_spaces(cursor)
    if "global" in spaces or ("device" in spaces and "host" not in spaces):
        return [], SourceError(f"{tl.name!r} is a `__global__` or `__device__` template: the host cannot call "
                               "it; annotate a host function template that launches it", **where)
    param_cursors = [c for c in cursor.get_children() if c.kind.name in TEMPLATE_PARAMETER_KINDS]
    params = [c.spelling for c in param_cursors]
    groups = dict(tl.groups)
    if "" in groups:
        if not params:
            return [], SourceError(f"{tl.name!r} has no template parameters", **where)
        groups = {params[0]: groups[""]}
    unknown = [p for p in groups if p not in params]
    if unknown:
        return [], SourceError(f"annotation `{a.text}` lists {unknown[0]!r}, which is not a template parameter "
                               f"of {tl.name!r}; its parameters are: {', '.join(params) or 'none'}", **where)
    listed = params[:len(groups)]
    if set(listed) != set(groups):
        missing = [p for p in listed if p not in groups]
        return [], SourceError(f"annotation `{a.text}` leaves {missing[0]!r} out but lists a later parameter: "
                               "template arguments are given in order, so only the last parameters may be left "
                               f"to their defaults; list {missing[0]!r} too", **where)
    listed_text = "".join(f"{p}: {', '.join(groups[p])}; " for p in listed)
    for c in param_cursors[len(listed):]:
        words = {t.spelling for t in c.get_tokens()}
        if "=" not in words and "..." not in words:
            return [], SourceError(
                f"annotation `{a.text}` gives no argument for template parameter {c.spelling!r} of {tl.name!r} "
                f"(line {c.location.line}), which has no default: an exported instantiation is never called "
                f"with arguments it could be deduced from. List it: `// @BE {tl.name}<{listed_text}{c.spelling}: "
                f"<arguments>>`, "
                "or give it a default", **where)
    probes = [_Probe(a, cursor, tuple(zip(listed, combo, strict=True)))
              for combo in itertools.product(*(groups[p] for p in listed))]
    return probes, None


def _specialization(var: Any) -> Any | None:
    """The function declaration a probe variable's initializer names."""
    for c in var.walk_preorder():
        if c.kind.name == "DECL_REF_EXPR" and c.referenced is not None and c.referenced.kind.name == "FUNCTION_DECL":
            return c.referenced
    return None


def _key(spec_cursor: Any, i: int, written: str) -> str:
    """Argument ``i``'s key: the dtype of a type that is one's element type, an integer's value, or as written."""
    kind = spec_cursor.get_template_argument_kind(i).name
    if kind == "TYPE":
        return element_dtype(spec_cursor.get_template_argument_type(i)) or written
    if kind == "INTEGRAL" and re.fullmatch(r"[+-]?\d+[uUlL]*", written):
        return str(spec_cursor.get_template_argument_value(i))
    return written  # (``true``, an enumerator ``Mode::Fast``, a constant: as written)


def instance_targets(path: str, raw: bytes, options: ParseOptions, tu: Any, annotations: list[Annotation],
                     lists: dict[int, TemplateList], bound: dict[int, Any]
                     ) -> tuple[list[InstanceTarget], list[SourceError], Any | None]:
    """The instantiations the templated ``annotations`` ask for (each a target to infer), an error for
    each that cannot be made, and the probing parse (``None`` when none was needed)."""
    errors: list[SourceError] = []
    probes: list[_Probe] = []
    for a in annotations:
        found, error = _probes(path, a, lists[a.line], bound.get(a.line))
        if error is not None:
            errors.append(error)
        probes += found
    if not probes:
        return [], errors, None
    import clang.cindex as ci

    lines = [f"auto* {_PROBE}{k} = &::{p.call};" for k, p in enumerate(probes)]
    probed, first, failed = probe(path, raw, options, tu, lines)
    targets: list[InstanceTarget] = []
    made: dict[str, Any] = {}  # instance name -> its template
    for k, p in enumerate(probes):
        a = p.annotation
        tl = lists[a.line]
        where = dict(file=path, line=a.line, column=a.column, function=tl.name)
        if k in failed:
            args = ", ".join(f"{n} = {w}" for n, w in p.args)
            errors.append(SourceError(
                f"annotation `{written(a, tl).text}`: template {qualified_name(p.template)!r} cannot be instantiated "
                f"with {args} (`{p.call}`): {failed[k]}. Remove that argument from the list, or make the template "
                "accept it (every parameter without a default needs an argument)", **where))
            continue
        var = ci.Cursor.from_location(probed, probed.get_location(path, (first + k, 7)))
        spec_cursor = _specialization(var) if var is not None else None
        if spec_cursor is None:
            errors.append(SourceError(f"annotation `{written(a, tl).text}`: libclang did not resolve `{p.call}`",
                                      **where))
            continue
        keys = [_key(spec_cursor, i, w) for i, (_, w) in enumerate(p.args)]
        name = instance_name(tl.name, keys)
        if name in made:  # (a prototype and its definition both annotated: one template, once)
            if made[name] != p.template.canonical:
                errors.append(SourceError(
                    f"annotation `{written(a, tl).text}`: its instantiation `{p.call}` would be exported "
                    f"as {name!r}, a name another instantiation has: list each argument once, or rename a template",
                    **where))
            continue
        made[name] = p.template.canonical
        suffix = name[len(tl.name):]
        tokens = tuple(f"{t}{suffix}" if t.startswith(("vjp=", "jvp=")) else t for t in a.tokens)
        targets.append(InstanceTarget(
            name, spec_cursor, replace(a, name=name, tokens=tokens), None,
            qualified=p.call, template_args=tuple((n, w, key) for (n, w), key in zip(p.args, keys, strict=True))))
    return targets, errors, probed


def probe(path: str, raw: bytes, options: ParseOptions, tu: Any, lines: list[str]) -> tuple[Any, int, dict[int, str]]:
    """Parse ``raw`` (the file at ``path``, parsed as ``tu``) again with ``lines`` appended, one probe a
    line: the parse, the first probe's line, and clang's first error of each failing probe, by index."""
    text = raw if raw.endswith((b"\n", b"\r")) else raw + b"\n"
    first = text.count(b"\n") + 1 if b"\r" not in text else len(text.splitlines()) + 1
    probed = parse(path, options, raw=text + "\n".join(lines).encode() + b"\n", same_as=tu)
    main = os.path.abspath(path)  # a header's line numbers are not the probes' (a toolchain header may have errors)
    failed: dict[int, str] = {}
    for diag in probed.diagnostics:
        if diag.severity < 3:
            continue
        for loc in (diag.location, *(n.location for n in diag.children)):
            if loc.file is not None and first <= loc.line < first + len(lines) and os.path.abspath(loc.file.name) == main:
                failed.setdefault(loc.line - first, diag.spelling)
                break
    return probed, first, failed


def state_errors(path: str, raw: bytes, options: ParseOptions, tu: Any, found: list[tuple[Any, FunctionSpec]]
                 ) -> tuple[list[SourceError], set[str], Any | None]:
    """An error at each ``BE::State<T>`` parameter (of the ``(cursor, spec)`` pairs) whose ``T`` ``shim.h``
    cannot make (``new T()``) or delete, the names of their functions, and the probing parse (or ``None``)."""
    states = [(cursor, spec, p) for cursor, spec in found for p in spec.params if p.role == "state"]
    if not states:
        return [], set(), None
    probed, _, failed = probe(path, raw, options, tu, [
        f"auto* {_PROBE}state_{k} = new ::{p.canonical_type}::value_type(); "
        f"using {_PROBE}state_{k}_deleted = decltype(delete {_PROBE}state_{k});"
        for k, (_, _, p) in enumerate(states)])
    errors: list[SourceError] = []
    for k, (cursor, spec, p) in enumerate(states):
        if k not in failed:
            continue
        decl = next((a for a in cursor.get_arguments() if a.spelling == p.name), cursor)
        state = p.canonical_type.partition("<")[2].rpartition(">")[0].strip()
        errors.append(SourceError(
            f"parameter {p.name!r} of {spec.name!r} is `{p.type}`, but kernix cannot make its state: it makes one "
            f"`{state}` per compiled call with `new {state}()` and deletes it with `delete`, and here clang says: "
            f"{failed[k]}. A state is a class defined before the function, not abstract, with a public default "
            f"constructor and destructor: give `{state}` those, or, to make it with arguments, hold it in a "
            f"state that starts empty and fill it at the first call: `BE::State<std::optional<{state}>> "
            f"{p.name}` (#include <optional>), with `if (!*{p.name}) {p.name}->emplace(...);` in the function",
            file=path, line=decl.location.line, column=decl.location.column, function=spec.name,
            parameter=p.name))
    return errors, {e.function for e in errors if e.function}, probed
