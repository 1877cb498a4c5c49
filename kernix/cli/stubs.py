"""``kernix stubs FILE... [-o OUT.pyi]``: a ``.pyi`` stub declaring the
callables of the functions the files export."""

from __future__ import annotations

import os
import sys

from .args import Arg, Command, inference_options, language_option, source_args
from .checks import output_file_problem, source_problem
from .output import error_line, print_error

TYPE_CHECKING = False  # as typing.TYPE_CHECKING: typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["COMMAND", "run"]

COMMAND = Command(
    "stubs",
    help="write a .pyi type stub of the functions the files export",
    description="Infer the // @BE functions of the files and write a .pyi stub declaring their callables.",
    args=(
        Arg("files", kind="positional", nargs="+", metavar="FILE", help="C++ or CUDA source files (one module)"),
        Arg("-o", dest="output", metavar="OUT.pyi",
            help="write here instead of stdout (missing directories are created)"),
        *source_args("parse"),
    ),
)


def run(args: dict[str, Any]) -> int:
    """Run ``kernix stubs`` with the parsed ``args``; returns the exit status."""
    from pathlib import Path

    from ..errors import KernixError
    from ..frontend.infer import infer_file
    from ..frontend.signatures import check_unique_names, check_vjp_pairs
    from ..runtime.stubs import stub_text

    files, output = args["files"], args["output"]
    stub_name = os.path.splitext(os.path.basename(files[0]))[0] + ".pyi"
    problem = source_problem(files, language_option(args), once=True)
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
    for err in check_unique_names(specs) or check_vjp_pairs(specs):
        print(error_line(err), file=sys.stderr)
        failed = True
    if failed:
        return 1
    text = stub_text(specs, source=", ".join(Path(p).name for p in files))
    if not output:
        sys.stdout.write(text)
        return 0
    try:
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        Path(output).write_text(text)
    except OSError as exc:
        print_error("stubs", f"cannot write {output}: {exc.strerror or exc}")
        return 1
    return 0
