"""``kernix stubs FILE... [-o OUT.pyi]``: a ``.pyi`` stub declaring the
callables of the functions the files export."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..errors import KernixError
from .args import add_source_args, error_line, inference_options, output_file_problem, print_error, source_problem

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``kernix stubs`` to ``subparsers``, the ``kernix`` parser's commands."""
    p = subparsers.add_parser("stubs", help="write a .pyi type stub of the functions the files export",
                              description="Infer the // @BE functions of the files and write a .pyi stub "
                                          "declaring their callables.")
    p.add_argument("files", nargs="+", metavar="FILE", help="C++ or CUDA source files (one module)")
    p.add_argument("-o", dest="output", metavar="OUT.pyi",
                   help="write here instead of stdout (missing directories are created)")
    add_source_args(p, "parse")


def run(args: dict[str, Any]) -> int:
    """Run ``kernix stubs`` with the parsed ``args``; returns the exit status."""
    # Imported here, so that other commands do not load libclang and the parser.
    from ..frontend.infer import infer_file
    from ..language.annotation import check_unique_names, check_pairs
    from ..runtime.stubs import stub_text

    files, output = args["files"], args["output"]
    stub_name = os.path.splitext(os.path.basename(files[0]))[0] + ".pyi"
    problem = source_problem(files, args, once=True)
    if problem is None and output:
        problem = output_file_problem(output, stub_name, files)
    if problem is not None:
        print_error("stubs", problem)
        return 2
    specs = []
    failed = False
    for path in files:
        try:
            result = infer_file(path, **inference_options(args))
        except KernixError as exc:
            print_error("stubs", str(exc))
            return 2
        for err in result.errors:
            print(error_line(err), file=sys.stderr)
        failed = failed or bool(result.errors)
        specs.extend(result.functions)
    for err in check_unique_names(specs) or check_pairs(specs):
        print(error_line(err), file=sys.stderr)
        failed = True
    if failed:
        return 1
    text = stub_text(specs, source=", ".join(os.path.basename(p) for p in files))
    if not output:
        sys.stdout.write(text)
        return 0
    try:
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        with open(output, "w") as f:
            f.write(text)
    except OSError as exc:
        print_error("stubs", f"cannot write {output}: {exc.strerror or exc}")
        return 1
    return 0
