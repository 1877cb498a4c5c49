"""``kernix stubs FILE... [-o OUT.pyi]``: a ``.pyi`` stub declaring the
callables of the functions the files export."""

from __future__ import annotations

import sys

from .args import Arg, Command, language_option, source_args
from .output import error_line

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
        Arg("-o", dest="output", metavar="OUT.pyi", help="write here instead of stdout"),
        *source_args("parse"),
    ),
)


def run(args: dict[str, Any]) -> int:
    """Run ``kernix stubs`` with the parsed ``args``; returns the exit status."""
    from pathlib import Path

    from ..errors import KernixError
    from ..frontend.infer import infer_file
    from ..frontend.signatures import check_vjp_pairs
    from ..runtime.stubs import stub_text

    specs = []
    failed = False
    for path in args["files"]:
        try:
            result = infer_file(path, language=language_option(args), include_dirs=args["include_dirs"],
                                defines=args["defines"])
        except KernixError as exc:
            print(f"kernix stubs: {exc}", file=sys.stderr)
            return 2
        for err in result.errors:
            print(error_line(err), file=sys.stderr)
        failed = failed or bool(result.errors)
        specs.extend(result.functions)
    for err in check_vjp_pairs(specs):
        print(error_line(err), file=sys.stderr)
        failed = True
    if failed:
        return 1
    text = stub_text(specs, source=", ".join(Path(p).name for p in args["files"]))
    if args["output"]:
        Path(args["output"]).write_text(text)
    else:
        sys.stdout.write(text)
    return 0
