"""Signature inference of one file: C++/CUDA source -> :class:`~kernix.language.spec.FunctionSpec`,
every error of the file collected, through the parts :mod:`kernix.frontend` names.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..errors import AnnotationWarning, ArgSpecError, InferenceError, SourceError
from ..paths import check_source
from ..language.selection import check_spec_matches, normalize_functions
from ..notes import warn_at
from ..language.spec import FunctionSpec
from .lexer import scan
from .binding import (
    annotated_targets,
    bind_annotations,
    function_cursors,
    requested_targets,
)
from .clangparse import ParseOptions, dependencies, error_diagnostics, parse, parsed_versions, skipped_lines
from .classify import function_spec
from ..language.annotation import SourceLines, annotate_spec
from .speccache import look_up, store
from .instantiation import InstanceTarget, instance_targets, split_templated, state_errors
from .versions import merge_versions

if TYPE_CHECKING:
    from .binding import Target

__all__ = ["InferResult", "infer_file"]


@dataclass(frozen=True)
class InferResult:
    """What inference found in one file.

    Attributes
    ----------
    path
        The file parsed (absolute).
    language
        ``"cuda"`` or ``"cpp"``.
    functions
        The inferred functions, in source order.
    errors
        Every problem found, each with file/line/column/function/parameter set
        where known.
    dependencies
        Absolute paths of every other file the parse read (headers).
    warnings
        Comments that look like ``// @BE`` annotations but are not
        (``// @Be f``, ``/* @BE f */``, ``/// @BE f``), each at its file and
        line, saying what to write instead; a load reports them as
        :class:`~kernix.AnnotationWarning` (:meth:`warn`).
    """

    path: str
    language: str
    functions: tuple[FunctionSpec, ...]
    errors: tuple[SourceError, ...]
    dependencies: tuple[str, ...]
    warnings: tuple[SourceError, ...] = ()

    def warn(self) -> None:
        """Issue each of :attr:`warnings` as an :class:`~kernix.AnnotationWarning`
        at its own file and line (the comment in the user's source), in the
        module of the first caller outside kernix (the user's load): see
        ``kernix.notes.warn_at``."""
        for w in self.warnings:
            warn_at(w.format(), AnnotationWarning, w.file or self.path, w.line)

    def raise_for_errors(self) -> None:
        """Raise :class:`~kernix.errors.InferenceError` holding every error, if any."""
        if self.errors:
            raise InferenceError(list(self.errors))

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable form (round-trips through :meth:`from_json`)."""
        return {
            "path": self.path,
            "language": self.language,
            "functions": [f.to_json() for f in self.functions],
            "errors": [e.to_json() for e in self.errors],
            "dependencies": list(self.dependencies),
            "warnings": [w.to_json() for w in self.warnings],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "InferResult":
        """Rebuild a result from :meth:`to_json` output."""
        return cls(
            path=data["path"],
            language=data["language"],
            functions=tuple(FunctionSpec.from_json(f) for f in data["functions"]),
            errors=tuple(SourceError.from_json(e) for e in data["errors"]),
            dependencies=tuple(data["dependencies"]),
            warnings=tuple(SourceError.from_json(w) for w in data.get("warnings", ())),
        )


def infer_file(
    path: str | os.PathLike[str],
    *,
    language: str | None = None,
    include_dirs: Sequence[str] = (),
    defines: Sequence[str] = (),
    flags: Sequence[str] = (),
    functions: None | Sequence[str] | Mapping[str, Sequence[str]] = None,
    use_cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
) -> InferResult:
    """Infer the specs of the functions a C++/CUDA file exports.

    Parameters
    ----------
    path
        The source file.
    language
        ``"cuda"`` or ``"cpp"``; ``None`` picks it from the extension.
    include_dirs
        Extra include directories (searched before kernix's ``include/``).
    defines
        Macro definitions, ``"NAME"`` or ``"NAME=VALUE"``.
    flags
        The build's preprocessor flags, paths absolute (see
        ``kernix.frontend.compiler_view.inference_flags``), after the above.
    functions
        ``None``: every ``// @BE``-annotated function.  A list of names: just
        those (no annotation needed).  A dict name -> arg_spec: those, each
        explicit spec checked against the real signature.
    use_cache
        Look up and store the result in the on-disk spec cache.
    cache_dir
        The cache root holding that spec cache (default: :func:`kernix.cache_root`).

    Returns
    -------
    InferResult
        The functions inferred and every error found (call
        :meth:`InferResult.raise_for_errors` to turn errors into an exception).

    Raises
    ------
    KernixError
        When the file cannot be read or the arguments are malformed (problems
        *in* the file are reported in the result instead).
    """
    check_source(path, include_dirs=include_dirs, defines=defines, flags=flags)  # before anything opens it
    wanted = normalize_functions(functions, parse=False)  # bad specs are reported per function
    wanted_key = None if wanted is None else [[k, None if v is None else list(v)] for k, v in sorted(wanted.items())]
    found = look_up(path, language, include_dirs, defines, flags, wanted_key, use_cache, cache_dir)
    if found.payload is not None:
        try:
            return InferResult.from_json(found.payload)
        except (ValueError, KeyError, TypeError):  # not a valid result (damaged or tampered): a miss
            pass
    options = ParseOptions(found.language, found.include_dirs, found.defines, found.flags)
    result, versions = infer_source(found.path, found.source, options, wanted)
    if found.key is not None and versions is not None:
        store(found.root, found.key, result.to_json(), versions)
    return result


def infer_source(
    path: str, raw: bytes, options: ParseOptions, wanted: dict[str, tuple[str, ...] | None] | None
) -> tuple[InferResult, list[list[Any]] | None]:
    """Parse ``raw`` (the bytes of ``path``) and infer, without the spec cache; also
    the headers' versions as read, ``None`` when the result may not be cached.
    """
    text = raw.decode("utf-8", errors="replace")
    tu = parse(path, options, raw=raw)
    errors: list[SourceError] = error_diagnostics(tu, options)
    if any(d.severity >= 4 for d in tu.diagnostics):
        # A fatal error (a header not found) ends clang's diagnostics and leaves the types after it unknown
        # (read as int): reported alone, not with what it makes of the functions' parameters.
        return InferResult(path=path, language=options.language, functions=(), errors=tuple(errors),
                           dependencies=tuple(dependencies(tu, path))), None
    versions = parsed_versions(tu, path) if not errors else None
    # Lines of the user's file with a clang error: a function whose declaration
    # covers one is not inferred (clang may have typed a broken parameter as int).
    clang_errors = sorted((e for e in errors if e.file == path and e.line), key=lambda e: e.line)
    bad_lines = [e.line for e in clang_errors]

    cursors = function_cursors(tu, path)
    annotations, near_misses = scan(text)  # and the comments that look like annotations but are not
    annotations, templated, errs = split_templated(path, annotations)  # `// @BE scale<T: float, double>`
    errors += errs

    bound = bind_annotations(raw, annotations, cursors) if annotations else {}

    unbound = [a for a in annotations if a.line not in bound]
    if unbound or near_misses:  # those in inactive #if regions are not the compiler's code
        detailed = parse(path, options, detailed=True, raw=raw, same_as=tu)
        if versions is not None:  # (both parses must have read the same headers)
            versions = merge_versions(versions, parsed_versions(detailed, path))
        skipped = skipped_lines(detailed, path)
        unbound = [a for a in unbound if a.line not in skipped]
        active = {a.line for a in unbound} | set(bound)
        annotations = [a for a in annotations if a.line in active]
        near_misses = [n for n in near_misses if n.line not in skipped]

    targets: list[Target]
    if wanted is None:
        targets, errs = annotated_targets(path, [a for a in annotations if a.line not in templated], bound,
                                          cursors, raw)
        errors += errs
        if templated:
            instances, errs, probed = instance_targets(
                path, raw, options, tu, [a for a in annotations if a.line in templated], templated, bound)
            targets, errors = [*targets, *instances], [*errors, *errs]
            if versions is not None and probed is not None:
                versions = merge_versions(versions, parsed_versions(probed, path))
    else:
        targets, errs = requested_targets(path, wanted, annotations, bound, cursors, tu)
        errors += errs

    lines = SourceLines(text)  # (split once: each function's doc comment costs its own length)
    specs: list[FunctionSpec] = []
    targets_of: dict[str, Target] = {}  # exported name -> its target
    for target in targets:
        name, cursor, ann, explicit = target.name, target.cursor, target.annotation, target.explicit
        start, end = cursor.extent.start.line, cursor.extent.end.line
        first, last = bisect.bisect_left(bad_lines, start), bisect.bisect_right(bad_lines, end)
        if first < last:
            for e in clang_errors[first:last]:  # already reported by clang: name the function
                if e.function is None:
                    e.function = name
            continue
        spec, errs = function_spec(cursor, path)
        errors += target.explain(errs) if isinstance(target, InstanceTarget) else errs
        if spec is None:
            continue
        if isinstance(target, InstanceTarget):
            spec = target.specialize(spec)
        ann_tokens, spec, errs = annotate_spec(spec, ann, lines)  # shape signature, vjp=, doc comment
        errors += errs
        ok = not errs
        for tokens, source in ((ann_tokens, "annotation"), (explicit or (), "explicit")):
            if not tokens:
                continue
            try:
                spec = check_spec_matches(list(tokens), spec, source=source)  # the caller's word may refine it
            except SourceError as exc:
                if source == "annotation" and ann is not None and target.second:  # report it where it was written
                    exc = SourceError(exc.message, file=exc.file or path, line=ann.line, column=ann.column,
                                      function=exc.function or name, parameter=exc.parameter)
                errors.append(exc)
                ok = False
            except ArgSpecError as exc:
                where_line = ann.line if (source == "annotation" and ann) else spec.line
                errors.append(SourceError(str(exc), file=path, line=where_line, function=name))
                ok = False
        if ok:
            specs.append(spec)
            targets_of[spec.name] = target

    errs, refused, probed = state_errors(path, raw, options, tu, [(targets_of[s.name].cursor, s) for s in specs])
    for e in errs:  # (an instantiation's error says which one it is)
        t = targets_of[e.function or ""]
        errors += t.explain([e]) if isinstance(t, InstanceTarget) else [e]
    specs = [s for s in specs if s.name not in refused]
    if versions is not None and probed is not None:
        versions = merge_versions(versions, parsed_versions(probed, path))
    specs.sort(key=lambda s: s.line)
    errors = list({str(e): e for e in errors}.values())  # (an annotation's error, found in each instantiation)
    errors.sort(key=lambda e: (e.file != path, e.line, e.column))
    result = InferResult(
        path=path,
        language=options.language,
        functions=tuple(specs),
        errors=tuple(errors),
        dependencies=tuple(dependencies(tu, path)),
        warnings=tuple(SourceError(n.message, file=path, line=n.line, column=n.column, function=n.name or None)
                       for n in near_misses),
    )
    return result, versions

