"""``kernix build SOURCE... -o DIR``: a prebuilt module, which
:func:`kernix.load_prebuilt` loads without a compiler."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import InferenceError, KernixError, OptionError, SourceNotFoundError
from ..paths import regular_file_problem
from .args import add_source_args, language_option
from .output import error_line, human_size, print_error

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``kernix build`` to ``subparsers``, the ``kernix`` parser's commands."""
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


def run(args: dict[str, Any]) -> int:
    """Run ``kernix build`` with the parsed ``args``; returns the exit status."""
    # Imported here, so that other commands do not load the build backend.
    from ..prebuilt.build import build_module

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
    except InferenceError as exc:
        for err in exc.errors:
            print(error_line(err), file=sys.stderr)
        return 1
    except KernixError as exc:
        print_error("build", str(exc))
        # (build_module checks its arguments before any work, in the command line's words)
        return 2 if isinstance(exc, (SourceNotFoundError, OptionError)) else 1
    archs = ", ".join([*manifest.sass, *manifest.ptx])
    print(f"built {manifest.name} ({manifest.platform}{': ' + archs if archs else ''}) into {manifest.directory}")
    print(f"  {manifest.library}  {human_size(manifest.library_size)}  sha256 {manifest.library_sha256[:16]}...")
    print(f"  functions: {', '.join(f.name for f in manifest.functions)}")
    return 0
