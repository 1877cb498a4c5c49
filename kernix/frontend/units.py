"""A module's sources inferred together (:func:`infer_units`), for the miss path of a load
(:mod:`kernix.compilation`) and ``kernix build`` (:mod:`kernix.prebuilt.build`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from ..errors import InferenceError, KernixError, SourceError
from ..paths import include_dir
from ..language.selection import Requested, check_spec_matches
from ..language.spec import FunctionSpec
from .lexer import find_annotations
from .binding import DECLARED_IN_HEADER, NOT_DECLARED
from .infer import infer_file
from ..language.annotation import check_unique_names, raise_for_pairs

__all__ = ["infer_units"]


def infer_units(
    sources: Sequence[Path],
    functions: Requested | None,
    *,
    language: str,
    flags: Sequence[str],
    cache_dir: str | os.PathLike[str],
) -> list[tuple[Path, list[FunctionSpec]]]:
    """Infer every source of a module, reconciled: ``(source, specs)`` per file,
    explicit ``functions=`` specs reconciled (with several sources, a function no file annotates
    looked up in the one declaring it), names unique, ``vjp=`` and ``jvp=`` pairs checked.

    ``functions`` maps name -> arg_spec tokens or ``None`` (``None``: every
    annotated function); ``language``, ``flags`` and ``cache_dir`` are as for
    :func:`~kernix.frontend.infer.infer_file`. Raises :class:`InferenceError`
    with every problem of every file, :class:`KernixError` when nothing is
    exported or a requested function is declared by no source or by several.
    """
    units: list[tuple[Path, list[FunctionSpec]]] = []
    errors: list[SourceError] = []
    headers: list[str] = []
    near_misses: list[SourceError] = []
    single = len(sources) == 1
    for src in sources:
        result = infer_file(
            src, language=language, flags=flags, functions=functions if single else None, cache_dir=cache_dir,
        )
        result.warn()  # comments that look like annotations but are not
        near_misses.extend(result.warnings)
        errors.extend(result.errors)
        units.append((src, list(result.functions)))
        headers.extend(result.dependencies)
    if errors:
        raise InferenceError(errors)
    if not single and functions is not None:
        found = {f.name: f for _, fns in units for f in fns}
        missing = [n for n in functions if n not in found]
        if missing:
            units = _find_unannotated(units, {n: functions[n] for n in missing}, found, headers,
                                      language=language, flags=flags, cache_dir=cache_dir)
        for fname, tokens in functions.items():
            if tokens is not None and fname not in missing:  # (the look-up inferred the others with them)
                found[fname] = check_spec_matches(tokens, found[fname], source="explicit")
        units = [(src, [found[f.name] for f in fns if f.name in functions]) for src, fns in units]
    specs = [f for _, fns in units for f in fns]
    errors = check_unique_names(specs)
    if errors:
        raise InferenceError(errors)
    raise_for_pairs(specs)  # (names unique: checked above)
    if not specs:
        where = sources[0] if single else f"{len(sources)} files"
        raise KernixError(
            f"no function to export in {where}: annotate each entry point with a `// @BE name` "
            "comment on the line before it (or, from Python, name them with functions=[...])"
            + _header_annotations_hint(headers)
            + "".join("\n" + w.format() for w in near_misses)
        )
    return units


def _find_unannotated(
    units: list[tuple[Path, list[FunctionSpec]]],
    wanted: Requested,
    found: dict[str, FunctionSpec],
    headers: list[str],
    *,
    language: str,
    flags: Sequence[str],
    cache_dir: str | os.PathLike[str],
) -> list[tuple[Path, list[FunctionSpec]]]:
    """``units`` plus the functions ``wanted`` names that no file annotates, each
    inferred in the one source declaring it; a :class:`KernixError` for a name
    no source, or several, declare.
    """
    where: dict[str, list[tuple[int, FunctionSpec]]] = {n: [] for n in wanted}
    errors: list[SourceError] = []
    in_headers: list[SourceError] = []
    for i, (src, _) in enumerate(units):
        result = infer_file(src, language=language, flags=flags, functions=wanted, cache_dir=cache_dir)
        errors += [e for e in result.errors if e.reason not in (NOT_DECLARED, DECLARED_IN_HEADER)]
        in_headers += [e for e in result.errors if e.reason == DECLARED_IN_HEADER]
        for spec in result.functions:
            where[spec.name].append((i, spec))
    if errors:
        raise InferenceError(errors)
    nowhere = [n for n, hits in where.items() if not hits]
    if nowhere:
        raise KernixError(
            f"functions names {nowhere}, but no source file of the module declares them; "
            f"the files: {', '.join(str(src) for src, _ in units)}" + _header_annotations_hint(headers)
            + "".join("\n" + e.format() for e in in_headers if e.function in nowhere)
        )
    for name, hits in where.items():
        if len(hits) > 1:
            places = ", ".join(f"{s.file}:{s.line}" for _, s in hits)
            raise KernixError(
                f"functions names {name!r}, which several source files declare ({places}): mark the one "
                f"to export with `// @BE {name}` on the line before it"
            )
    units = [(src, list(fns)) for src, fns in units]
    for (i, spec), in where.values():
        units[i][1].append(spec)
        found[spec.name] = spec
    return [(src, sorted(fns, key=lambda f: f.line)) for src, fns in units]


def _header_annotations_hint(headers: list[str]) -> str:
    """What to say of ``// @BE`` annotations in the included ``headers``, which are
    not read (a module exports what its source files annotate); ``""`` if none."""
    own = str(include_dir()) + os.sep
    found = []
    for header in dict.fromkeys(headers):
        if header.startswith(own):
            continue
        try:
            with open(header, "rb") as f:
                raw = f.read(1 << 20)
        except OSError:
            continue
        if b"@BE" in raw:
            found += [(header, a) for a in find_annotations(raw.decode("utf-8", "replace")) if a.name]
    if not found:
        return ""
    places = ", ".join(f"{h}:{a.line} ({a.name})" for h, a in found[:3]) + (" ..." if len(found) > 3 else "")
    name = found[0][1].name
    return (f". The annotations in included headers ({places}) are not read: a module exports what its source "
            f"files declare, so declare each function there too, after the #include, as the header declares it "
            f"(in its namespace), with `// @BE {name}` on the line before")
