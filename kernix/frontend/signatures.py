"""Shape signatures at inference: reading them from annotations, checking
them against the C++ signature, and checking across a module that its names
are unique and its ``vjp=`` pairs fit.

The grammar itself (and binding at call time) is :mod:`kernix.signature`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable

from ..errors import ArgSpecError, InferenceError, SignatureError, SourceError
from ..names import is_identifier
from ..signature import check_against_spec, int_attr_names, parse_signature, split_annotation
from ..sizes import size_names
from ..spec import parse_arg_spec

__all__ = ["leading_comment", "annotate_spec", "check_unique_names", "check_vjp_pairs", "raise_for_vjp_pairs"]


def leading_comment(text: str, first_line: int, decl_line: int = 0) -> str:
    """The ``//`` or ``/* */`` comment directly above line ``first_line`` (1-based).

    Other ``// @BE`` lines are skipped; comment lines between ``first_line``
    and ``decl_line`` (the declaration) are added after.  Markers (``///``,
    ``//!``, ``/**``, leading ``*``) are stripped.
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")

    def clean(line: str) -> str | None:
        s = line.strip()
        if s.startswith("//"):
            body = s.lstrip("/").lstrip("!")
            return None if body.lstrip().startswith("@BE") else body.strip()
        return None

    above: list[str] = []
    i = first_line - 2
    if 0 <= i < len(lines) and lines[i].strip().endswith("*/"):
        block: list[str] = []
        while i >= 0:
            block.insert(0, lines[i])
            if "/*" in lines[i]:
                break
            i -= 1
        body = "\n".join(block)
        body = body[body.find("/*") + 2: body.rfind("*/")]
        above = [ln.strip().lstrip("*!").strip() for ln in body.split("\n")]
    else:
        while i >= 0 and lines[i].strip().startswith("//"):
            c = clean(lines[i])
            if c is not None:
                above.insert(0, c)
            i -= 1
    below = []
    for j in range(first_line, max(first_line, decl_line - 1)):
        if j < len(lines):
            c = clean(lines[j])
            if c is not None:
                below.append(c)
    return "\n".join(ln for ln in (*above, *below)).strip()


def annotate_spec(spec: Any, annotation: Any, source_text: str) -> tuple[tuple[str, ...], Any, list[SourceError]]:
    """Attach an annotation's shape signature, ``vjp=`` and doc comment to ``spec``.

    Parameters
    ----------
    spec
        The :class:`~kernix.spec.FunctionSpec` inferred from the declaration.
    annotation
        Its :class:`~kernix.frontend.annotations.Annotation`, or ``None``.
    source_text
        The file's text (for the comment above the declaration).

    Returns
    -------
    tuple
        The annotation's arg_spec tokens (to check against the signature as
        before), the completed spec, and the errors found (at the
        annotation's line).
    """
    line = annotation.line if annotation is not None else spec.line
    doc = leading_comment(source_text, line, spec.line)
    if annotation is None:
        errors = []
        if spec.has("scratch"):
            errors.append(_no_scratch_size(spec, spec.line))
        return (), replace(spec, doc=doc), errors
    words = [t for t in annotation.tokens if t != "has_side_effect" and not t.startswith("scratch=")]
    sizes = [t[len("scratch="):] for t in annotation.tokens if t.startswith("scratch=")]
    tokens, sig_text, vjp = split_annotation(words)
    errors: list[SourceError] = []

    def error(msg: str) -> None:
        errors.append(SourceError(msg, file=spec.file, line=annotation.line, column=annotation.column,
                                  function=spec.name))

    if annotation.tokens.count("has_side_effect") > 1 or len(sizes) > 1:
        error("an annotation says has_side_effect and scratch= at most once each")

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
    if vjp is not None and not is_identifier(vjp):
        error(f"vjp={vjp!r}: the forward function's name must be an identifier")
    scratch = sizes[0] if sizes else None
    if scratch is None and spec.has("scratch"):
        errors.append(_no_scratch_size(spec, annotation.line, annotation.column))
    elif scratch is not None:
        problem = _scratch_problem(scratch, spec, parse_signature(signature) if signature else None)
        if problem:
            error(problem)
    spec = replace(spec, signature=signature, vjp_of=vjp, doc=doc,
                   has_side_effect="has_side_effect" in annotation.tokens, scratch=scratch)
    return tokens, spec, errors


def _declared_roles(spec: Any, tokens: tuple[str, ...]) -> Any:
    """``spec`` with the roles its annotation's tokens give a non-const tensor
    (``inout``, ``arg``: see :func:`kernix.requested.check_spec_matches`,
    which checks the tokens afterwards), so the shape signature is checked
    against the inputs and outputs the call will have."""
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
    """Check that one module's specs export each name once.

    Parameters
    ----------
    specs
        The module's :class:`~kernix.spec.FunctionSpec` values, in source order
        (file by file).

    Returns
    -------
    list of SourceError
        One per spec whose name an earlier one exports, placed at it and
        naming the earlier one's place: FFI target names are unique within a
        module.
    """
    seen: dict[str, Any] = {}
    errors: list[SourceError] = []
    for spec in specs:
        prev = seen.get(spec.name)
        if prev is None:
            seen[spec.name] = spec
        else:
            errors.append(SourceError(
                f"function name {spec.name!r} is exported twice (also at {prev.file}:{prev.line}); "
                "FFI target names must be unique within a module: rename one",
                file=spec.file, line=spec.line, function=spec.name,
            ))
    return errors


def check_vjp_pairs(specs: Iterable[Any]) -> list[SourceError]:
    """Check every ``vjp=`` declaration among one module's specs.

    A backward kernel's inputs must be its forward's inputs followed by one
    cotangent per forward output, its outputs one cotangent per forward input,
    its attributes a subset (by name and dtype) of the forward's; the forward
    must have a shape signature (which shapes the cotangents), and at most one
    backward per forward.
    """
    by_name = {s.name: s for s in specs}
    errors: list[SourceError] = []
    claimed: dict[str, str] = {}
    for bwd in by_name.values():
        if bwd.vjp_of is None:
            continue

        def error(msg: str) -> None:
            errors.append(SourceError(f"{bwd.name!r} (vjp={bwd.vjp_of}): {msg}", file=bwd.file,  # noqa: B023
                                      line=bwd.line, function=bwd.name))  # noqa: B023

        fwd = by_name.get(bwd.vjp_of)
        if fwd is None:
            error(f"the module exports no function {bwd.vjp_of!r}; it exports: {', '.join(by_name)}")
            continue
        if fwd.vjp_of is not None or fwd.name == bwd.name:
            error(f"{fwd.name!r} is itself a backward kernel")
            continue
        if bwd.vjp_of in claimed:
            error(f"{fwd.name!r} already has a backward kernel, {claimed[bwd.vjp_of]!r}")
            continue
        claimed[bwd.vjp_of] = bwd.name
        n_in, n_out = len(fwd.inputs), len(fwd.outputs)
        if len(bwd.inputs) != n_in + n_out:
            error(
                f"a backward kernel takes the forward's {n_in} input(s) then the cotangents of its "
                f"{n_out} output(s): {n_in + n_out} inputs, but it takes {len(bwd.inputs)}"
            )
        if len(bwd.outputs) != n_in:
            error(
                f"a backward kernel returns one cotangent per forward input ({n_in}), "
                f"but it has {len(bwd.outputs)} output(s)"
            )
        fattrs = {p.name: p for p in fwd.attrs}
        for p in bwd.attrs:
            if p.name not in fattrs:
                error(f"attribute {p.name!r} is not an attribute of {fwd.name!r} "
                      f"(it has: {', '.join(fattrs) or 'none'})")
            elif fattrs[p.name].attr_type != p.attr_type:
                error(f"attribute {p.name!r} is {p.attr_type} here but {fattrs[p.name].attr_type} in {fwd.name!r}")
        if fwd.signature is None:
            error(f"{fwd.name!r} has no shape signature; declare one (e.g. '// @BE {fwd.name} (...,n)->(...,n)') "
                  "so that the shapes of its outputs, and so of their cotangents, are known")
    return errors


def raise_for_vjp_pairs(specs: Iterable[Any]) -> None:
    """Raise :class:`~kernix.errors.InferenceError` if :func:`check_vjp_pairs` finds anything."""
    errors = check_vjp_pairs(specs)
    if errors:
        raise InferenceError(errors)
