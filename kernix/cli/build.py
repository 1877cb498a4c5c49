"""``kernix build SOURCE... -o DIR``: a prebuilt module, which
:func:`kernix.load_prebuilt` loads without a compiler; and ``kernix tune FILE|DIR
--shapes ...``: the choices of its ``tune=`` templates, made ahead of time (for a
prebuilt module, shipped in its directory)."""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
from typing import Any

from ..errors import InferenceError, KernixError, OptionError, SourceNotFoundError
from ..paths import regular_file_problem
from .args import add_source_args, error_line, language_option, print_error

__all__ = ["add_parser", "run"]

#: One input of ``--shapes``: a dtype and its dimensions (``float32[64,4096]``).
_INPUT = r"\s*([a-z0-9]+)\[([0-9,\s]*)\]\s*"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``kernix build`` and ``kernix tune`` to ``subparsers``, the ``kernix`` parser's commands."""
    p = subparsers.add_parser("build", help="compile sources into a prebuilt module (loaded later without a compiler)",
                              description="Compile C++/CUDA sources into a self-contained module directory: the "
                                          "library and kernix-prebuilt.json. kernix.load_prebuilt(DIR) loads it "
                                          "with no compiler.")
    p.add_argument("sources", nargs="+", metavar="SOURCE", help="C++ or CUDA source files")
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="the module directory to write (created, with missing parents, if missing)")
    p.add_argument("--name", help="module name and default FFI target prefix (default: the file's stem)")
    add_source_args(p, "build")
    p.add_argument("--arch", metavar="LIST",
                   help="CUDA architectures, e.g. sm_80,sm_90: machine code for each, PTX of the newest "
                        "(default: $KERNIX_CUDA_ARCH_LIST, $KERNIX_CUDA_ARCH, else this machine's GPU)")
    p.add_argument("-L", action="append", dest="library_dirs", default=[], metavar="DIR",
                   help="add a directory the linker searches for -l libraries (repeatable)")
    p.add_argument("-l", action="append", dest="libraries", default=[], metavar="NAME",
                   help="link the library libNAME.so or libNAME.a (repeatable)")
    p.add_argument("-O", dest="opt", type=int, default=3, choices=range(4), metavar="N",
                   help="optimisation level 0-3 (default 3)")
    p.add_argument("--fast-math", action="store_true", help="--use_fast_math (nvcc) / -ffast-math (C++)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every compiler command")
    t = subparsers.add_parser("tune", help="time the variants of tune= templates ahead of time",
                              description="Load a module (a C++/CUDA source, or a prebuilt module directory) and "
                                          "time the variants of its tune= templates on inputs of the given shapes, "
                                          "remembering each choice in the cache; for a prebuilt module, also in "
                                          "DIR/kernix-tuning.json, which ships with it.")
    t.add_argument("module", metavar="FILE|DIR", help="a source file, or a prebuilt module directory")
    t.add_argument("--shapes", action="append", required=True, metavar="INPUTS",
                   help="one call's inputs, dtype[dims] separated by commas: 'float32[64,4096]' or "
                        "'float32[512,256],float32[256,1024]' (repeatable)")
    t.add_argument("--function", action="append", default=[], metavar="NAME",
                   help="the template to tune (repeatable; default: every tune= template whose inputs fit)")
    t.add_argument("--attr", action="append", default=[], metavar="NAME=VALUE",
                   help="an attribute the calls pass, as a Python literal (repeatable)")
    t.add_argument("--name", help="module name of a source (default: the file's stem)")
    add_source_args(t, "build")


def run(args: dict[str, Any]) -> int:
    """Run ``kernix build`` or ``kernix tune`` with the parsed ``args``; returns the exit status."""
    if args["command"] == "tune":
        return _tune(args)
    # Imported here, so that other commands do not load the build backend.
    from ..prebuilt.build import build_module
    from ..store import format_size

    for source in args["sources"]:
        problem = regular_file_problem(source)  # (a FIFO is never opened: build_module would call it not found)
        if problem is not None:
            print_error("build", problem)
            return 2
    if "" in (*args["library_dirs"], *args["libraries"]):
        print_error("build", "-L and -l take a value: -L DIR (a directory), -l NAME (libNAME.so or libNAME.a)")
        return 2
    try:
        manifest = build_module(
            args["sources"], args["output"], name=args["name"], language=language_option(args),
            arch=args["arch"], include_dirs=args["include_dirs"], defines=args["defines"],
            optimization_level=args["opt"], use_fast_math=args["fast_math"], verbose=args["verbose"],
            extra_ldflags=[*(f"-L{d}" for d in args["library_dirs"]), *(f"-l{n}" for n in args["libraries"])],
        )
    except KernixError as exc:  # (build_module checks its arguments before any work, in the command line's words)
        return _failed("build", exc)
    archs = ", ".join([*manifest.sass, *manifest.ptx])
    print(f"built {manifest.name} ({manifest.platform}{': ' + archs if archs else ''}) into {manifest.directory}")
    print(f"  {manifest.library}  {format_size(manifest.library_size)}  sha256 {manifest.library_sha256[:16]}...")
    print(f"  functions: {', '.join(f.name for f in manifest.functions)}")
    return 0


def _tune(args: dict[str, Any]) -> int:
    from .. import loaders
    from ..language.templates import family_names
    from ..prebuilt import format, load
    from ..runtime.tuning import synthesized, tables_of

    calls = []
    for text in args["shapes"]:
        if not re.fullmatch(f"{_INPUT}(,{_INPUT})*", text):
            print_error("tune", f"--shapes {text!r}: write each input as dtype[dims], separated by commas, e.g. "
                        "'float32[64,4096]' or 'float32[512,256],int32[256]'")
            return 2
        calls.append((text, [(d, [int(n) for n in dims.split(",") if n.strip()])
                             for d, dims in re.findall(_INPUT, text)]))
    attrs = {}
    for item in args["attr"]:
        key, eq, value = item.partition("=")
        if not eq:
            print_error("tune", f"--attr {item!r}: write NAME=VALUE, e.g. --attr factor=2.0")
            return 2
        try:
            attrs[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            attrs[key] = value
    path = args["module"]
    try:
        if os.path.isdir(path):
            module = load.load_prebuilt(path)
        else:
            cuda = (language_option(args) or os.path.splitext(path)[1].lower()) in ("cuda", ".cu", ".cuh")
            flags = {"extra_cuda_cflags" if cuda else "extra_cflags": [f"-D{d}" for d in args["defines"]]}
            module = (loaders.load_cuda_file if cuda else loaders.load_cpp_file)(
                path, name=args["name"], extra_include_paths=args["include_dirs"], **flags)
    except KernixError as exc:
        return _failed("tune", exc)
    names = [n for n in family_names(module.functions.values()) if any(
        module.functions[m.name].tune for m in module[n].members) and n in (args["function"] or [n])]
    if not names:
        print_error("tune", f"module {module.name!r} has no tune= template" + (
            f" named {', '.join(args['function'])}" if args["function"] else ""))
        return 1
    device = None
    tuned = 0
    for name in names:
        for shown, call in calls:
            try:
                if device is None:
                    import jax

                    jax.config.update("jax_enable_x64", True)  # (float64 inputs stay float64)
                    device = jax.devices("gpu" if module.platform == "cuda" else "cpu")[0]
                inputs = [synthesized(s, d, device, k) for k, (d, s) in enumerate(call)]
                own = {k: v for k, v in attrs.items() if k in {p.name for m in module[name].members
                                                                for p in module.functions[m.name].attrs}}
                print(f"{name} {shown} -> {module[name].tune(*inputs, **own)}")
                tuned += 1
            except (KernixError, TypeError, ValueError, RuntimeError) as exc:  # (RuntimeError: no such device)
                print(f"{name} {shown}: not tuned: {exc}", file=sys.stderr)
    if os.path.isdir(path) and tuned:
        print(f"wrote {format.write_tuning(path, tables_of(module))}")
    return 0 if tuned else 1


def _failed(command: str, exc: KernixError) -> int:
    """Print why ``kernix <command>`` failed (each problem inference found on a line of its own) and return
    its exit status: 2 for a source or option the command line named wrongly, else 1."""
    if isinstance(exc, InferenceError):
        for err in exc.errors:
            print(error_line(err), file=sys.stderr)
        return 1
    print_error(command, str(exc))
    return 2 if isinstance(exc, (SourceNotFoundError, OptionError)) else 1
