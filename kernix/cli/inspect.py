"""``kernix inspect PATH...``: what kernix infers from each file's ``// @BE``
annotations, as tables or JSON; files the spec cache holds are read without
libclang, the others parsed in parallel."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..backend.jobs import parallel_jobs
from ..errors import KernixError, SourceError
from ..frontend.speccache import look_up
from ..interface import command_line
from ..platforms import LANGUAGES_BY_EXTENSION, language_of
from ..paths import printable, utf8_problem
from .args import add_source_args, error_line, inference_options, print_error, source_problem

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``kernix inspect`` to ``subparsers``, the ``kernix`` parser's commands."""
    p = subparsers.add_parser("inspect", help="show the arg_spec kernix infers for each // @BE function",
                              description="Parse C++/CUDA files and print the arg_spec of every "
                                          "// @BE-annotated function.")
    p.add_argument("files", nargs="+", metavar="PATH",
                   help="C++ or CUDA source files, or directories (their .cu/.cc/.cpp/.cxx files)")
    add_source_args(p, "parse")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--no-cache", action="store_true", help="parse even when a cached result exists")
    p.add_argument("-j", "--jobs", type=int, default=0, metavar="N",
                   help="parse up to N files at once (default: $KERNIX_JOBS, else one per CPU)")


def _table(result: dict[str, Any]) -> str:
    """A readable table of one file's functions (``result``: an :meth:`InferResult.to_json` dict)."""
    lines = [f"{printable(result['path'])} ({result['language']})"]
    functions = result["functions"]
    if not functions:
        lines.append("  (no functions inferred)")
        return "\n".join(lines)
    with_shapes = any(_annotation_extras(f) != "-" for f in functions)  # the column only when used
    with_pins = any(_buffer_pins(f) != "-" for f in functions)  # likewise
    rows = []
    for f in functions:
        attrs = [(p, token) for p, token in zip(f["params"], f["arg_spec"]) if p["role"] == "attr"]
        # (an attribute's token, attr.NAME:TYPE, spells its type)
        dtypes = ", ".join(f"{p['name']}: {token.partition(':')[2]} ({p['type']})" for p, token in attrs) or "-"
        name = f["name"] if f["qualified_name"] == f["name"] else f"{f['name']} ({f['qualified_name']})"
        row = [name, str(f["line"]), " ".join(f["arg_spec"])]
        if with_shapes:
            row.append(_annotation_extras(f))
        if with_pins:
            row.append(_buffer_pins(f))
        rows.append((*row, dtypes))
    header = ("function", "line", "arg_spec", *(("shape signature",) if with_shapes else ()),
              *(("buffer dtypes",) if with_pins else ()), "attribute dtypes")
    n = len(header) - 1
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(n)]
    for r in [header, *rows]:
        lines.append("  " + "  ".join(r[i].ljust(widths[i]) for i in range(n)) + "  " + r[n])
    return "\n".join(lines)


def _annotation_extras(function: dict[str, Any]) -> str:
    """The shape signature column: the signature, ``vjp=``, ``jvp=``, ``has_side_effect``,
    ``scratch=`` and ``tune=`` as the annotation says them, or ``"-"``."""
    pairs = [f"{w}={function[k]}" for w, k in (("vjp", "vjp_of"), ("jvp", "jvp_of")) if function.get(k)]
    parts = [function.get("signature") or ("-" if pairs else ""), *pairs]
    if function.get("has_side_effect"):
        parts.append("has_side_effect")
    if function.get("scratch"):
        parts.append(f"scratch={function['scratch']}")
    if function.get("tune"):
        dims = function.get("tune_dims")
        parts.append(f"tune={','.join(function['tune'])}" + (f"@{','.join(dims)}" if dims else ""))
    return " ".join(p for p in parts if p) or "-"


def _buffer_pins(function: dict[str, Any]) -> str:
    """The dtype (and rank) each input or output buffer of ``function`` must
    have (``BE::TensorOf<T>``, ``xla::ffi::Buffer<T, R>``): ``"x: float32,
    out: float32 rank 2"``, or ``"-"`` when none is pinned."""
    pins = [f"{p['name']}: {p['dtype'] or 'any dtype'}" + (f" rank {p['rank']}" if p.get("rank") is not None else "")
            for p in function["params"]
            if p["role"] in ("arg", "ret", "inout") and (p.get("dtype") or p.get("rank") is not None)]
    return ", ".join(pins) or "-"


def _json_file(result: dict[str, Any]) -> dict[str, Any]:
    """What ``--json`` prints for one file."""
    keys = ("name", "qualified_name", "line", "arg_spec", "signature", "vjp_of", "jvp_of", "params")
    return {
        "path": result["path"],
        "language": result["language"],
        "functions": [{**{k: f.get(k) for k in keys}, "returns_error": f.get("returns_error", False),
                       "has_side_effect": f.get("has_side_effect", False), "scratch": f.get("scratch"),
                       "tune": f.get("tune", []), "tune_dims": f.get("tune_dims", [])}
                      for f in result["functions"]],
        "errors": result["errors"],
        "warnings": result.get("warnings", []),
    }


def _errors(result: dict[str, Any], key: str = "errors") -> list[SourceError]:
    """The :class:`~kernix.errors.SourceError` of each error record of ``result``
    (``key="warnings"``: of each warning record)."""
    return [SourceError.from_json(e) for e in result.get(key, [])]


def _check_pairs(results: list[dict[str, Any]]) -> None:
    """Add the errors a load would find in ``vjp=`` and ``jvp=`` declarations to each result
    (:func:`kernix.language.annotation.check_pairs`), each file as its own
    module, a forward function looked up in the other files; files with errors
    are skipped.
    """
    if not any(f.get("vjp_of") or f.get("jvp_of") for r in results for f in r["functions"]):
        return
    from ..language.annotation import check_pairs
    from ..language.spec import FunctionSpec

    specs = [[FunctionSpec.from_json(f) for f in r["functions"]] for r in results]
    elsewhere: dict[str, list[Any]] = {}
    for file_specs in specs:
        for spec in file_specs:
            elsewhere.setdefault(spec.name, []).append(spec)
    for result, file_specs in zip(results, specs):
        if result["errors"]:
            continue
        own = {s.name for s in file_specs}
        wanted = {n for s in file_specs for n in (s.vjp_of, s.jvp_of) if n and n not in own}
        borrowed = [elsewhere[n][0] for n in sorted(wanted) if len(elsewhere.get(n, ())) == 1]
        errors = [e for e in check_pairs([*file_specs, *borrowed]) if e.function in own]
        result["errors"] = [*result["errors"], *(e.to_json() for e in errors)]


def _source_files(paths: Sequence[str]) -> list[str]:
    """``paths`` with each directory replaced by the translation units under it
    (``.cu``, ``.cc``, ``.cpp``, ``.cxx``, sorted; headers are not parsed alone)."""
    units = {e for e in LANGUAGES_BY_EXTENSION if e not in (".h", ".hpp", ".cuh", ".c")}
    out: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            found = [os.path.join(d, f) for d, _, names in os.walk(path) for f in names
                     if os.path.splitext(f)[1].lower() in units]
            out += sorted(found)
        else:
            out.append(path)
    return out


def _unparsable(path: str, options: dict[str, Any]) -> dict[str, Any] | None:
    """The result of a file libclang cannot be handed, its path not being
    valid UTF-8 (:meth:`InferResult.to_json` form, with the error that says
    so), or ``None`` for any other file."""
    problem = utf8_problem(path)
    if problem is None:
        return None
    path = os.path.abspath(path)
    error = SourceError(problem, file=path).to_json()
    return {"path": path, "language": options["language"] or language_of(path), "functions": [],
            "errors": [error], "dependencies": []}


def _infer_one(path: str, options: dict[str, Any]) -> dict[str, Any]:
    """One file's inference, as JSON (in a worker process for parallel runs)."""
    # Imported here: a cached file needs neither libclang nor the parser.
    from ..frontend.infer import infer_file

    with command_line("inspect"):  # (a worker process did not run main())
        return infer_file(path, **options).to_json()


def _cached(path: str, options: dict[str, Any]) -> dict[str, Any] | None:
    """One file's result from the spec cache, as JSON, or ``None``: neither
    the parser nor the spec classes are imported for it."""
    payload = look_up(path, options["language"], options["include_dirs"], options["defines"], options["flags"]).payload
    if payload is None:
        return None
    try:
        _table(payload)
        _errors(payload)
        _errors(payload, "warnings")
    except (KeyError, TypeError, AttributeError, ValueError):  # not a result this kernix wrote: parse again
        return None
    return payload


def _infer_all(files: Sequence[str], options: dict[str, Any], jobs: int) -> list[dict[str, Any]]:
    """Each file's result (:meth:`InferResult.to_json` form), in order:
    spec-cache hits in this process, the rest parsed by up to ``jobs``
    processes (libclang parses one file per thread of work, so more cores
    mean more files at once)."""
    results: list[Any] = [None] * len(files)
    misses = []
    for i, path in enumerate(files):
        found = _unparsable(path, options)
        if found is None and options.get("use_cache", True):
            found = _cached(path, options)
        if found is None:
            misses.append(i)
        results[i] = found
    if len(misses) > 1 and jobs > 1:
        import multiprocessing  # here: a warm inspect does not need it
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("spawn")  # libclang may be loaded here already
        with ProcessPoolExecutor(min(jobs, len(misses)), mp_context=context) as pool:
            for i, result in zip(misses, pool.map(_infer_one, [files[i] for i in misses], [options] * len(misses))):
                results[i] = result
    else:
        for i in misses:
            results[i] = _infer_one(files[i], options)
    return results


def run(args: dict[str, Any]) -> int:
    """Run ``kernix inspect`` with the parsed ``args``; returns the exit status."""
    start = time.perf_counter()
    options = {**inference_options(args), "use_cache": not args["no_cache"]}
    files = _source_files(args["files"])
    if not files:
        print("kernix inspect: no C++ or CUDA source files found", file=sys.stderr)
        return 2
    problem = source_problem(files, args)
    if problem is not None:
        print_error("inspect", problem)
        return 2
    try:
        results = _infer_all(files, options, parallel_jobs(args["jobs"]))
    except KernixError as exc:
        print_error("inspect", str(exc))
        return 2
    _check_pairs(results)
    for result in results:
        for warning in _errors(result, "warnings"):  # comments that look like annotations but are not
            print(printable(f"{warning.location()}: warning: {warning.message}"), file=sys.stderr)
    failed = [r for r in results if r["errors"]]
    for result in failed:
        for err in _errors(result):
            print(error_line(err), file=sys.stderr)
    elapsed = time.perf_counter() - start
    total = {
        "files": len(results),
        "functions": sum(len(r["functions"]) for r in results),
        "files_with_errors": sum(bool(r["errors"]) for r in results),
        "seconds": round(elapsed, 3),
    }
    if args["json"]:
        json.dump({"files": [_json_file(r) for r in results], "total": total}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print("\n\n".join(_table(r) for r in results))
        if len(results) > 1:
            print(f"\n{total['files']} files, {total['functions']} functions, "
                  f"{total['files_with_errors']} with errors, {elapsed:.2f} s")
    return 1 if failed else 0
