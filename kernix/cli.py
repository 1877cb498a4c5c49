"""The ``kernix`` command line.

``kernix inspect PATH... [-I DIR] [-D NAME[=VALUE]] [--cuda | --cpp] [--json] [-j N]``
prints what kernix infers from each file's ``// @BE`` annotations (a directory
stands for its source files; files missing from the spec cache are parsed in
parallel, and a run over several files ends with the totals).
``kernix stubs FILE... [-o OUT.pyi]`` writes a ``.pyi`` stub of the functions
the files export (to stdout without ``-o``).
``kernix cache info [--json]`` lists the cached modules; ``kernix cache clear
[NAME]`` deletes cached builds.  ``kernix build SOURCE... -o DIR [--name NAME]
[--cuda | --cpp] [--arch sm_80,sm_90] [-I DIR] [-D NAME[=VALUE]] [-O N]
[--fast-math]`` writes a prebuilt module that :func:`kernix.load_prebuilt` loads
without a compiler.

Exit status: 0 when every annotated function was inferred, 1 when any was not
(each error on stderr as ``FILE:LINE:COL: error: message``), 2 for usage errors.
Each subcommand is a ``add_<name>_parser(subparsers)`` function that sets
``func`` on its parser, so more subcommands plug in the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

TYPE_CHECKING = False  # as typing.TYPE_CHECKING: typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any, Sequence

__all__ = ["main", "build_parser", "add_inspect_parser", "add_stubs_parser", "add_cache_parser", "add_build_parser"]


def _columns() -> int:
    """The terminal width as :func:`shutil.get_terminal_size` gives it
    (``$COLUMNS``, else the terminal's, else 80), without importing shutil."""
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 80


class _Formatter(argparse.HelpFormatter):
    """argparse's help layout; the width is found without shutil (and its
    compression modules), which argparse would import to build every parser."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)


class _Parser(argparse.ArgumentParser):
    """An argument parser (and its subcommands' parsers) using :class:`_Formatter`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)


def _add_source_options(p: argparse.ArgumentParser, verb: str) -> None:
    """``-I``, ``-D`` and ``--cuda`` / ``--cpp``, as every source-reading subcommand takes them."""
    p.add_argument("-I", dest="include_dirs", action="append", default=[], metavar="DIR",
                   help="add an include directory (repeatable)")
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME[=VALUE]",
                   help="define a macro (repeatable)")
    lang = p.add_mutually_exclusive_group()
    lang.add_argument("--cuda", action="store_true", help=f"{verb} as CUDA whatever the extension")
    lang.add_argument("--cpp", action="store_true", help=f"{verb} as C++ whatever the extension")


def _error_line(err: Any) -> str:
    return f"{err.location()}: error: {err.message}"


def _table(result: dict[str, Any]) -> str:
    """A readable table of one file's functions (``result``: an :meth:`InferResult.to_json` dict)."""
    lines = [f"{result['path']} ({result['language']})"]
    functions = result["functions"]
    if not functions:
        lines.append("  (no functions inferred)")
        return "\n".join(lines)
    with_shapes = any(f.get("signature") or f.get("vjp_of") for f in functions)  # the column only when used
    rows = []
    for f in functions:
        attrs = [p for p in f["params"] if p["role"] == "attr"]
        dtypes = ", ".join(f"{p['name']}: {p['dtype']} ({p['type']})" for p in attrs) or "-"
        name = f["name"] if f["qualified_name"] == f["name"] else f"{f['name']} ({f['qualified_name']})"
        row = [name, str(f["line"]), " ".join(f["arg_spec"])]
        if with_shapes:
            row.append((f.get("signature") or "-") + (f" vjp={f['vjp_of']}" if f.get("vjp_of") else ""))
        rows.append((*row, dtypes))
    header = ("function", "line", "arg_spec", *(("shape signature",) if with_shapes else ()), "attribute dtypes")
    n = len(header) - 1
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(n)]
    for r in [header, *rows]:
        lines.append("  " + "  ".join(r[i].ljust(widths[i]) for i in range(n)) + "  " + r[n])
    return "\n".join(lines)


def _json_file(result: dict[str, Any]) -> dict[str, Any]:
    """What ``--json`` prints for one file."""
    keys = ("name", "qualified_name", "line", "arg_spec", "signature", "vjp_of", "params")
    return {
        "path": result["path"],
        "language": result["language"],
        "functions": [{k: f.get(k) for k in keys} for f in result["functions"]],
        "errors": result["errors"],
    }


def _errors(result: dict[str, Any]) -> list[Any]:
    """The :class:`~kernix.errors.SourceError` of each error record of ``result``."""
    if not result["errors"]:
        return []  # (the error classes load only when there is one to show)
    from .errors import SourceError

    return [SourceError.from_json(e) for e in result["errors"]]


def _source_files(paths: Sequence[str]) -> list[str]:
    """``paths`` with each directory replaced by the translation units under it
    (``.cu``, ``.cc``, ``.cpp``, ``.cxx``, sorted; headers are not parsed alone)."""
    from .languages import LANGUAGES_BY_EXTENSION

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


def _infer_one(path: str, options: dict[str, Any]) -> dict[str, Any]:
    """One file's inference, as JSON (in a worker process for parallel runs)."""
    from .frontend.infer import infer_file

    return infer_file(path, **options).to_json()


def _cached(path: str, options: dict[str, Any]) -> dict[str, Any] | None:
    """One file's result from the spec cache, as JSON, or ``None``: neither
    the parser nor the spec classes are imported for it."""
    from .frontend.lookup import look_up

    payload = look_up(path, options["language"], options["include_dirs"], options["defines"]).payload
    if payload is None:
        return None
    try:
        _table(payload)
        _errors(payload)
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
        found = _cached(path, options) if options.get("use_cache", True) else None
        if found is None:
            misses.append(i)
        results[i] = found
    if len(misses) > 1 and jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("spawn")  # libclang may be loaded here already
        with ProcessPoolExecutor(min(jobs, len(misses)), mp_context=context) as pool:
            for i, result in zip(misses, pool.map(_infer_one, [files[i] for i in misses], [options] * len(misses))):
                results[i] = result
    else:
        for i in misses:
            results[i] = _infer_one(files[i], options)
    return results


def _run_inspect(args: argparse.Namespace) -> int:
    import time

    start = time.perf_counter()
    options = {
        "language": "cuda" if args.cuda else "cpp" if args.cpp else None,
        "include_dirs": args.include_dirs,
        "defines": args.defines,
        "use_cache": not args.no_cache,
    }
    files = _source_files(args.files)
    if not files:
        print("kernix inspect: no C++ or CUDA source files found", file=sys.stderr)
        return 2
    jobs = args.jobs or os.cpu_count() or 1
    try:
        results = _infer_all(files, options, jobs)
    except Exception as exc:  # (not `except KernixError`: that would import the error classes on every run)
        from .errors import KernixError

        if not isinstance(exc, KernixError):
            raise
        print(f"kernix inspect: {exc}", file=sys.stderr)
        return 2
    failed = False
    for result in results:
        for err in _errors(result):
            print(_error_line(err), file=sys.stderr)
        failed = failed or bool(result["errors"])
    elapsed = time.perf_counter() - start
    total = {
        "files": len(results),
        "functions": sum(len(r["functions"]) for r in results),
        "files_with_errors": sum(bool(r["errors"]) for r in results),
        "seconds": round(elapsed, 3),
    }
    if args.json:
        json.dump({"files": [_json_file(r) for r in results], "total": total}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print("\n\n".join(_table(r) for r in results))
        if len(results) > 1:
            print(f"\n{total['files']} files, {total['functions']} functions, "
                  f"{total['files_with_errors']} with errors, {elapsed:.2f} s")
    return 1 if failed else 0


def add_inspect_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``inspect`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "inspect",
        help="show the arg_spec kernix infers for each // @BE function",
        description="Parse C++/CUDA files and print the arg_spec of every // @BE-annotated function.",
    )
    p.add_argument("files", nargs="+", metavar="PATH",
                   help="C++ or CUDA source files, or directories (their .cu/.cc/.cpp/.cxx files)")
    _add_source_options(p, "parse")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--no-cache", action="store_true", help="parse even when a cached result exists")
    p.add_argument("-j", "--jobs", type=int, default=0, metavar="N",
                   help="parse up to N files at once (default: one per CPU)")
    p.set_defaults(func=_run_inspect)
    return p


def _run_stubs(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .errors import KernixError
    from .frontend.infer import infer_file
    from .runtime.stubs import stub_text
    from .frontend.signatures import check_vjp_pairs

    language = "cuda" if args.cuda else "cpp" if args.cpp else None
    specs = []
    failed = False
    for path in args.files:
        try:
            result = infer_file(path, language=language, include_dirs=args.include_dirs, defines=args.defines)
        except KernixError as exc:
            print(f"kernix stubs: {exc}", file=sys.stderr)
            return 2
        for err in result.errors:
            print(_error_line(err), file=sys.stderr)
        failed = failed or bool(result.errors)
        specs.extend(result.functions)
    for err in check_vjp_pairs(specs):
        print(_error_line(err), file=sys.stderr)
        failed = True
    if failed:
        return 1
    text = stub_text(specs, source=", ".join(Path(p).name for p in args.files))
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def add_stubs_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``stubs`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "stubs",
        help="write a .pyi type stub of the functions the files export",
        description="Infer the // @BE functions of the files and write a .pyi stub declaring their callables.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="C++ or CUDA source files (one module)")
    p.add_argument("-o", dest="output", metavar="OUT.pyi", help="write here instead of stdout")
    _add_source_options(p, "parse")
    p.set_defaults(func=_run_stubs)
    return p


def _human_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def _run_cache(args: argparse.Namespace) -> int:
    from .store.admin import cache_info, clear_cache
    from .errors import KernixError

    try:
        if args.action == "clear":
            removed = clear_cache(args.name)
            what = f"module {args.name!r}" if args.name else "every module"
            print(f"removed {removed} cache entr{'y' if removed == 1 else 'ies'} ({what})")
            return 0
        info = cache_info()
    except KernixError as exc:
        print(f"kernix: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(info, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(f"cache: {info['root']} ({_human_size(info['total_bytes'])})")
    for m in info["modules"]:
        if m.get("damaged"):
            print(f"  {m['name']:<24} DAMAGED  {m['path']}")
            continue
        fns = ", ".join(m["functions"])
        print(f"  {m['name']:<24} {m['platform']:<5} {_human_size(m['size_bytes']):>10}  {fns}")
    return 0


def add_cache_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``cache`` subcommand (``info`` / ``clear [NAME]``) to ``subparsers``."""
    p = subparsers.add_parser(
        "cache",
        help="show or clear the build cache",
        description="Show the build cache (info) or delete cached builds (clear [NAME]).",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    info = actions.add_parser("info", help="list cached modules and the cache size")
    info.add_argument("--json", action="store_true", help="print JSON")
    clear = actions.add_parser("clear", help="delete cached builds (of one module, or all)")
    clear.add_argument("name", nargs="?", default=None, help="module name (default: every module)")
    p.set_defaults(func=_run_cache, json=False)
    return p


def _run_build(args: argparse.Namespace) -> int:
    from .errors import InferenceError, KernixError
    from .prebuilt.build import build_module

    language = "cuda" if args.cuda else "cpp" if args.cpp else None
    try:
        manifest = build_module(
            args.sources, args.output, name=args.name, language=language, arch=args.arch,
            include_dirs=args.include_dirs, defines=args.defines, optimization_level=args.opt,
            use_fast_math=args.fast_math, verbose=args.verbose,
        )
    except InferenceError as exc:
        for err in exc.errors:
            print(_error_line(err), file=sys.stderr)
        return 1
    except KernixError as exc:
        print(f"kernix build: error: {exc}", file=sys.stderr)
        return 1
    archs = ", ".join([*manifest.sass, *manifest.ptx])
    print(f"built {manifest.name} ({manifest.platform}{': ' + archs if archs else ''}) into {manifest.directory}")
    print(f"  {manifest.library}  {_human_size(manifest.library_size)}  sha256 {manifest.library_sha256[:16]}...")
    print(f"  functions: {', '.join(f.name for f in manifest.functions)}")
    return 0


def add_build_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``build`` subcommand (a prebuilt module for :func:`kernix.load_prebuilt`) to ``subparsers``."""
    p = subparsers.add_parser(
        "build",
        help="compile sources into a prebuilt module (loaded later without a compiler)",
        description="Compile C++/CUDA sources into a self-contained module directory: the library "
                    "and kernix-prebuilt.json. kernix.load_prebuilt(DIR) loads it with no compiler.",
    )
    p.add_argument("sources", nargs="+", metavar="SOURCE", help="C++ or CUDA source files")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="the module directory to write")
    p.add_argument("--name", default=None, help="module name and default FFI target prefix "
                                                "(default: the file's stem)")
    _add_source_options(p, "build")
    p.add_argument("--arch", default=None, metavar="LIST",
                   help="CUDA architectures, e.g. sm_80,sm_90: machine code for each, PTX of the newest "
                        "(default: $KERNIX_CUDA_ARCH_LIST, $KERNIX_CUDA_ARCH, else this machine's GPU)")
    p.add_argument("-O", dest="opt", type=int, default=3, choices=range(4), metavar="N",
                   help="optimisation level 0-3 (default 3)")
    p.add_argument("--fast-math", action="store_true", help="--use_fast_math (nvcc) / -ffast-math (C++)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every compiler command")
    p.set_defaults(func=_run_build)
    return p


_COMMANDS = {"inspect": add_inspect_parser, "stubs": add_stubs_parser, "cache": add_cache_parser,
             "build": add_build_parser}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser with every subcommand, or with ``command``'s alone.

    A run of one command needs only its parser; argparse looks up its
    message catalogue for every parser it builds (about half a millisecond
    each), so :func:`main` builds the others only for help and usage errors.
    """
    parser = _Parser(prog="kernix", description="Call annotated C++ and CUDA functions from JAX.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, add in _COMMANDS.items():
        if command is None or name == command:
            add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Parameters
    ----------
    argv
        The arguments (without the program name); ``None`` reads ``sys.argv``.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv[0] if argv and argv[0] in _COMMANDS else None)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 for --help
        return int(exc.code or 0)
    try:
        return int(args.func(args))
    except BrokenPipeError:  # the reader of our output went away (`kernix cache info | head -1`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush is quiet too
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
