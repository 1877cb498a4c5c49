"""An annotation's words read onto an inferred spec (:func:`annotate_spec`), the doc comment above a
function, and the checks across one module (unique names, ``vjp=`` and ``jvp=`` pairs)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Iterator

from ..errors import ArgSpecError, InferenceError, SignatureError, SourceError
from .names import is_identifier
from .shapes import check_against_spec, int_attr_names, parse_signature
from .sizes import size_names
from .spec import parse_arg_spec
from .dtypes import BUFFER_DTYPES
from .templates import parse_tune, template_name

__all__ = [
    "DOC_LIMIT", "SourceLines", "leading_comment", "annotate_spec", "check_unique_names", "check_pairs",
    "raise_for_pairs",
]


#: The most characters of a doc comment a spec keeps (the rest is marked ``[...]``).
DOC_LIMIT = 4000


class SourceLines:
    """A file's lines, split once, and where each comment above a line starts (found once)."""

    def __init__(self, text: str) -> None:
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        self.lines = text.split("\n")
        self._tops: dict[tuple[str, int], int] = {}

    def top(self, kind: str, i: int) -> int:
        """The first line (0-based) of the ``//`` run (``kind="line"``) or ``/* */`` block ending at line ``i``;
        each line is read once however many annotations stand under one comment (the tops found are kept)."""
        key = (kind, i)
        if key not in self._tops:
            top = i
            if kind == "block":
                while top > 0 and "/*" not in self.lines[top]:
                    top -= 1
            else:
                while top > 0 and (kind, top) not in self._tops and self.lines[top - 1].lstrip().startswith("//"):
                    top -= 1
                top = self._tops.get((kind, top), top)
            self._tops[key] = top
        return self._tops[key]


def _line_comments(lines: list[str], indices: range) -> Iterator[str]:
    """The text of each ``//`` line among ``lines[indices]``, without markers; ``// @BE`` lines left out."""
    for k in indices:
        s = lines[k].strip()
        if s.startswith("//"):
            body = s.lstrip("/").lstrip("!")
            if not body.lstrip().startswith("@BE"):
                yield body.strip()


def _comment_lines(source: SourceLines, first_line: int, decl_line: int) -> Iterator[str]:
    """The lines :func:`leading_comment` keeps, read as they are asked for."""
    lines = source.lines
    i = first_line - 2
    if 0 <= i < len(lines) and lines[i].strip().endswith("*/"):
        top = source.top("block", i)
        for k in range(top, i + 1):
            ln = lines[k]
            if k == i:
                ln = ln[:ln.rfind("*/")]
            if k == top:
                ln = ln[ln.find("/*") + 2:]
            yield ln.strip().lstrip("*!").strip()
    elif 0 <= i < len(lines) and lines[i].strip().startswith("//"):
        yield from _line_comments(lines, range(source.top("line", i), i + 1))
    yield from _line_comments(lines, range(first_line, min(len(lines), decl_line - 1)))


def leading_comment(text: str | SourceLines, first_line: int, decl_line: int = 0, limit: int = DOC_LIMIT) -> str:
    """The ``//`` or ``/* */`` comment directly above line ``first_line`` (1-based).

    Other ``// @BE`` lines are skipped; comment lines between ``first_line`` and ``decl_line`` (the
    declaration) are added after; markers are stripped; past ``limit`` characters it ends with ``[...]``.
    """
    kept: list[str] = []
    size = 0
    for line in _comment_lines(text if isinstance(text, SourceLines) else SourceLines(text), first_line, decl_line):
        size += len(line) + 1
        if size > limit + 1:
            kept.append("[...]")
            break
        kept.append(line)
    return "\n".join(kept).strip()


def annotate_spec(
    spec: Any, annotation: Any, source_text: str | SourceLines
) -> tuple[tuple[str, ...], Any, list[SourceError]]:
    """Attach an annotation's shape signature, ``vjp=``, ``jvp=``, ``tune=`` and doc comment to ``spec``.

    ``spec`` is the :class:`~kernix.language.spec.FunctionSpec` inferred from the declaration,
    ``annotation`` its :class:`~kernix.frontend.lexer.Annotation` or ``None``.  Returns the annotation's
    arg_spec tokens (checked against the signature afterwards), the completed spec, and the errors found.
    """
    line = annotation.line if annotation is not None else spec.line
    doc = leading_comment(source_text, line, spec.line)
    if annotation is None:
        return (), replace(spec, doc=doc), [_no_scratch_size(spec, spec.line)] if spec.has("scratch") else []
    keys = ("scratch=", "jvp=", "tune=", "vjp=")
    words = [t for t in annotation.tokens if t != "has_side_effect" and not t.startswith(keys)]
    sizes, jvps, tunes, vjps = ([t[len(key):] for t in annotation.tokens if t.startswith(key)] for key in keys)
    cut = next((i for i, t in enumerate(words) if t.startswith("(")), len(words))  # the shape signature's start
    tokens, sig_text = tuple(words[:cut]), " ".join(words[cut:]) or None
    vjp = vjps[-1] if vjps else None
    errors: list[SourceError] = []

    def error(msg: str) -> None:
        errors.append(SourceError(msg, file=spec.file, line=annotation.line, column=annotation.column,
                                  function=spec.name))

    if annotation.tokens.count("has_side_effect") > 1 or len(sizes) > 1 or len(jvps) > 1 or len(tunes) > 1:
        error("an annotation says has_side_effect, scratch=, jvp= and tune= at most once each")
    jvp = jvps[0] if jvps else None
    if jvp is not None and vjp is not None:
        error(f"vjp={vjp} and jvp={jvp}: a kernel is a backward kernel (vjp=) or a tangent kernel (jvp=), not both")

    signature = None
    if sig_text is not None:
        try:
            sig = parse_signature(sig_text)
        except SignatureError as exc:
            error(str(exc))
        else:
            for msg in check_against_spec(sig, _declared_roles(spec, tokens)):
                error(f"shape signature of {spec.name!r} disagrees with its C++ signature: {msg}")
            signature = str(sig)
    for word, name in (("vjp", vjp), ("jvp", jvp)):
        if name is not None and not is_identifier(name):
            error(f"{word}={name!r}: the forward function's name must be an identifier")
    scratch = sizes[0] if sizes else None
    if scratch is None and spec.has("scratch"):
        errors.append(_no_scratch_size(spec, annotation.line, annotation.column))
    elif scratch is not None:
        problem = _scratch_problem(scratch, spec, parse_signature(signature) if signature else None)
        if problem:
            error(problem)
    spec = replace(spec, signature=signature, vjp_of=vjp, jvp_of=jvp, doc=doc,
                   has_side_effect="has_side_effect" in annotation.tokens, scratch=scratch)
    if tunes:
        try:
            tune, dims = parse_tune(tunes[0])
            problem = _tune_problem(tunes[0], spec, tune, dims)
        except ValueError as exc:
            problem = (str(exc), None)
        if problem is None:
            spec = replace(spec, tune=tune, tune_dims=dims)
        else:
            errors.append(SourceError(problem[0], file=spec.file, line=annotation.line, column=annotation.column,
                                      function=template_name(spec), parameter=problem[1]))
    return tokens, spec, errors


def _tune_problem(text: str, spec: Any, params: tuple[str, ...], dims: tuple[str, ...]
                  ) -> tuple[str, str | None] | None:
    """Why ``tune=text`` (tuning ``params``, keyed by ``dims``) does not fit ``spec``, and the parameter it
    names, or ``None``."""
    name = template_name(spec)
    if not spec.template_args:
        return (f"tune={text} but {spec.name!r} is not a function template: tune= has timing choose among the "
                f"arguments a template's annotation lists, e.g. `// @BE {name}<T: float; BLOCK: 128, 256> "
                "tune=BLOCK` before `template <typename T, int BLOCK>`", None)
    listed = {p: key for p, _, key in spec.template_args}
    for p in params:
        if p not in listed:
            return (f"tune={text} names {p!r}, which the template list of {name!r} does not list; it lists: "
                    f"{', '.join(listed)}", p)
        if listed[p] in BUFFER_DTYPES:
            return (f"tune={text} names {p!r}, whose arguments are dtypes: the dtypes of the "
                    "inputs (or out=) choose it, timing does not; tune a parameter such as a block size", p)
    if spec.has_side_effect or spec.has("state"):
        what = "has side effects (has_side_effect)" if spec.has_side_effect else "keeps a state (BE::State)"
        return (f"tune={text}: {name!r} {what}, and tuning runs each variant several times on the same inputs; "
                f"drop tune= and choose by keyword ({params[0]}=...)", None)
    sig = parse_signature(spec.signature) if spec.signature else None
    known = {d for g in sig.inputs for d in g.dims if isinstance(d, str)} if sig else set()
    unknown = [d for d in dims if d not in known]
    if unknown:
        where = (f"no dimension of the inputs in the shape signature {spec.signature}; it can name: "
                 f"{', '.join(sorted(known)) or 'none'}") if sig else "not named: the function has no shape signature"
        return (f"tune={text} keys the choice by {unknown[0]!r}, which is {where} (without `@...`, every dimension "
                "of the inputs keys it)", None)
    return None


def _declared_roles(spec: Any, tokens: tuple[str, ...]) -> Any:
    """``spec`` with the ``inout``/``arg`` roles its tokens give a non-const tensor, so the shape
    signature is checked against the call's inputs and outputs."""
    if len(tokens) != len(spec.params):
        return spec
    try:
        parsed = parse_arg_spec(tokens, function=spec.name)
    except ArgSpecError:
        return spec
    params = tuple(replace(p, role=t.role) if p.kind == "tensor" and p.role == "ret" and t.role in ("inout", "arg")
                   else p for p, t in zip(spec.params, parsed))
    return replace(spec, params=params)


def _no_scratch_size(spec: Any, line: int, column: int = 0) -> SourceError:
    p = next(p for p in spec.params if p.role == "scratch")
    return SourceError(
        f"{spec.name!r} takes scratch memory ({p.name!r}, `{p.type}`), but its annotation does not say how many "
        f"bytes: add `scratch=EXPR` to it, e.g. `// @BE {spec.name} (...,n)->(...,n) scratch=n*4` (bytes per "
        "problem: an expression of the shape signature's dimensions and integer attributes, without spaces)",
        file=spec.file, line=line, column=column, function=spec.name, parameter=p.name)


def _scratch_problem(text: str, spec: Any, sig: Any) -> str | None:
    """Why ``scratch=text`` does not fit ``spec`` (with shape signature ``sig``), or ``None``."""
    if not spec.has("scratch"):
        return (f"scratch={text} but {spec.name!r} takes no scratch memory: add a `BE::Scratch& scratch` "
                "parameter, or drop scratch=")
    try:
        names = size_names(text)
    except ValueError as exc:
        return f"scratch={exc}"
    known = set(int_attr_names(spec))
    if sig is not None:
        known |= {d for g in sig.inputs for d in g.dims if isinstance(d, str)}
    unknown = [n for n in names if n not in known]
    if unknown:
        have = ", ".join(sorted(known)) or "none"
        hint = "" if sig is not None else " (without a shape signature only integer attributes can be named)"
        return (f"scratch={text} names {', '.join(map(repr, unknown))}, which is no dimension of the shape "
                f"signature's inputs and no integer attribute{hint}; it can name: {have}")
    return None


def check_unique_names(specs: Iterable[Any]) -> list[SourceError]:
    """One error per spec (in source order) whose name an earlier one exports: FFI target names are
    unique within a module."""
    seen: dict[str, Any] = {}
    errors: list[SourceError] = []
    for spec in specs:
        prev = seen.setdefault(spec.name, spec)
        if prev is not spec:
            errors.append(SourceError(
                f"function name {spec.name!r} is exported twice (also at {prev.file}:{prev.line}); "
                "FFI target names must be unique within a module: rename one",
                file=spec.file, line=spec.line, function=spec.name,
            ))
    return errors


def check_pairs(specs: Iterable[Any]) -> list[SourceError]:
    """Check every ``vjp=`` and ``jvp=`` declaration among one module's specs against the rules of a backward
    kernel and of a tangent kernel (docs/tutorials/operation.rst, sections 4 and 5): at most one of each per
    forward function, all the ``vjp=`` errors first."""
    by_name = {s.name: s for s in specs}
    errors: list[SourceError] = []
    for word, kind in (("vjp", "backward kernel"), ("jvp", "tangent kernel")):
        claimed: dict[str, str] = {}
        for der in by_name.values():
            of = der.vjp_of if word == "vjp" else der.jvp_of
            if of is not None:
                errors += _pair_problems(der, of, by_name, word, kind, claimed)
    return errors


def _pair_problems(der: Any, of: str, by_name: dict[str, Any], word: str, kind: str, claimed: dict[str, str]
                   ) -> list[SourceError]:
    """The errors of ``der``'s ``{word}={of}`` (a ``kind``), recording in ``claimed`` the forward it takes."""
    errors: list[SourceError] = []

    def error(msg: str, parameter: str | None = None) -> None:
        errors.append(SourceError(f"{der.name!r} ({word}={of}): {msg}", file=der.file, line=der.line,
                                  function=der.name, parameter=parameter))

    fwd = by_name.get(of)
    if fwd is None:
        error(f"the module exports no function {of!r}; it exports: {', '.join(by_name)}")
        return errors
    if fwd.name == der.name:
        error(f"a function cannot be its own {kind}")
        return errors
    if of in claimed:
        error(f"{fwd.name!r} already has a {kind}, {claimed[of]!r}")
        return errors
    claimed[of] = der.name
    untuned = [p for p, _, _ in der.template_args if p in fwd.tune and p not in der.tune]
    if untuned:
        error(f"{template_name(fwd)!r} tunes {untuned[0]} (tune={untuned[0]}), and so must its {kind}: add "
              f"tune={untuned[0]} to the annotation of {template_name(der)!r}, so that timing chooses its "
              f"{untuned[0]} on its own, for the shapes it runs on")
    n_in, n_out = len(fwd.inputs), len(fwd.outputs)
    if word == "vjp":
        if len(der.inputs) != n_in + n_out:
            error(f"a backward kernel takes the forward's {n_in} input(s) then the cotangents of its "
                  f"{n_out} output(s): {n_in + n_out} inputs, but it takes {len(der.inputs)}")
        if len(der.outputs) != n_in:
            error(f"a backward kernel returns one cotangent per forward input ({n_in}), "
                  f"but it has {len(der.outputs)} output(s)")
    else:
        for msg, parameter in _tangent_problems(fwd, der):
            error(msg, parameter)
    fattrs = {p.name: p for p in fwd.attrs}
    for p in der.attrs:
        if p.name not in fattrs:
            error(f"attribute {p.name!r} is not an attribute of {fwd.name!r} "
                  f"(it has: {', '.join(fattrs) or 'none'})", p.name)
        elif fattrs[p.name].attr_type != p.attr_type:
            error(f"attribute {p.name!r} is {p.attr_type} here but {fattrs[p.name].attr_type} in {fwd.name!r}",
                  p.name)
    if fwd.signature is None:
        what = "cotangents" if word == "vjp" else "tangents"
        error(f"{fwd.name!r} has no shape signature; declare one (e.g. '// @BE {fwd.name} (...,n)->(...,n)') "
              f"so that the shapes of its outputs, and so of their {what}, are known")
    return errors


def _tangent_problems(fwd: Any, tan: Any) -> list[tuple[str, str | None]]:
    """What disagrees between ``fwd`` and its tangent kernel ``tan``: ``(message, parameter)`` pairs."""
    n_in, n_out = len(fwd.inputs), len(fwd.outputs)
    problems: list[tuple[str, str | None]] = []
    ins, outs = tan.inputs, tan.outputs
    names = ", ".join(p.name for p in fwd.inputs)
    if len(ins) != 2 * n_in:
        extra = ins[2 * n_in].name if len(ins) > 2 * n_in else None
        problems.append((f"a tangent kernel takes {fwd.name!r}'s {n_in} input(s) ({names}) then their {n_in} "
                         f"tangent(s), in the same order: {2 * n_in} inputs, but it takes {len(ins)}", extra))
    if len(outs) != n_out:
        problems.append((f"a tangent kernel returns one tangent per output of {fwd.name!r} ({n_out}), but it has "
                         f"{len(outs)} output(s)", outs[n_out].name if len(outs) > n_out else None))
    if problems:
        return problems
    fsig = parse_signature(fwd.signature) if fwd.signature else None
    tsig = parse_signature(tan.signature) if tan.signature else None
    pairs = [(t, f, "input" if k < n_in else "the tangent of input", fsig.inputs[k % n_in] if fsig else None,
              tsig.inputs[k] if tsig else None) for k, (t, f) in enumerate(zip(ins, [*fwd.inputs, *fwd.inputs]))]
    pairs += [(t, f, "the tangent of output", fsig.outputs[k] if fsig else None, tsig.outputs[k] if tsig else None)
              for k, (t, f) in enumerate(zip(outs, fwd.outputs))]
    renamed: dict[str, str] = {}  # the tangent kernel's name of a dimension -> the function's, and back
    back: dict[str, str] = {}
    for t, f, what, fgroup, tgroup in pairs:
        stands = f"{what} {f.name!r} of {fwd.name}()"
        if t.dtype and f.dtype and t.dtype != f.dtype:
            problems.append((f"parameter {t.name!r} ({stands}) is {t.dtype} but {f.name!r} is {f.dtype}: a tangent "
                             "has its value's dtype", t.name))
        if fgroup is None or tgroup is None:
            continue
        same = tgroup.batch == fgroup.batch and len(tgroup.dims) == len(fgroup.dims)
        for a, b in zip(tgroup.dims, fgroup.dims) if same else ():
            if isinstance(a, str) and isinstance(b, str):
                same = same and renamed.setdefault(a, b) == b and back.setdefault(b, a) == a
            else:
                same = same and a == b
        dtypes = (tgroup.dtype, fgroup.dtype)
        if not same or (all(dtypes) and dtypes[0] != dtypes[1]):
            problems.append((f"parameter {t.name!r} ({stands}) has shape {tgroup} in the shape signature "
                             f"{tan.signature}, but {f.name!r} has {fgroup} in {fwd.name}'s {fwd.signature}: each "
                             "group of a tangent kernel is the one of the value it stands for (up to the dimensions' "
                             "names)", t.name))
    return problems


def raise_for_pairs(specs: Iterable[Any]) -> None:
    """Raise :class:`~kernix.errors.InferenceError` if :func:`check_pairs` finds anything."""
    errors = check_pairs(specs)
    if errors:
        raise InferenceError(errors)
