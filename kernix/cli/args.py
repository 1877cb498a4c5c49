"""What several ``kernix`` commands share: the options of their sources (``-I``, ``-D``, ``--cuda``/``--cpp``),
the checks of ``kernix inspect``'s and ``kernix stubs``' sources and ``-o`` file, made before any work and worded
for the command line (``kernix build``'s are :func:`kernix.build_module`'s own), and how errors are printed."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import SourceError
from ..platforms import LANGUAGES_BY_EXTENSION, unknown_extension
from ..paths import directory_problem, printable, regular_file_problem, repeated_source, text_problem

__all__ = ["source_problem", "output_file_problem", "add_source_args", "language_option", "inference_options",
           "error_line", "print_error"]


def source_problem(paths: Sequence[str], args: dict[str, Any], *, once: bool = False) -> str | None:
    """Why ``paths`` cannot be the sources of the command parsed as ``args`` (its ``-I``, ``-D``, ``--cuda`` and
    ``--cpp``), or ``None``; ``once``: whether a file may appear only once.

    A source must be a regular file (by ``stat``: a FIFO would block), with an extension
    naming a language unless one is asked for.
    """
    for option, values in (("-I", args["include_dirs"]), ("-D", args["defines"])):
        for value in values:
            problem = text_problem(value, option)
            if problem is not None:
                return problem
    for path in paths:
        problem = regular_file_problem(path)
        if problem is not None:
            return problem
    if language_option(args) is None:
        for path in paths:
            if os.path.splitext(path)[1].lower() not in LANGUAGES_BY_EXTENSION:
                return unknown_extension(path, "pass --cuda or --cpp")
    return repeated_source(paths) if once else None


def output_file_problem(path: str, name: str, sources: Sequence[str] = ()) -> str | None:
    """Why ``-o path`` cannot be the file a command writes, or ``None``; ``name`` is
    suggested when ``path`` is a directory, and ``sources`` must not be overwritten.
    """
    if os.path.isdir(path):
        return f"-o {path} is a directory, not a file: name the file, e.g. -o {os.path.join(path, name)}"
    for source in sources:
        if os.path.exists(path) and os.path.exists(source) and os.path.samefile(path, source):
            return f"-o {path} is the source {source}: writing it would overwrite the code; name another file"
    problem = directory_problem(os.path.dirname(os.path.abspath(path)))
    if problem is None:
        return None
    return f"cannot write {path}: {problem}; choose another path for -o (missing directories are created)"


def add_source_args(parser: argparse.ArgumentParser, verb: str) -> None:
    """Add ``-I``, ``-D`` and ``--cuda``/``--cpp``; ``verb`` (``"parse"``) words their help."""
    parser.add_argument("-I", action="append", dest="include_dirs", default=[], metavar="DIR",
                        help="add an include directory (repeatable)")
    parser.add_argument("-D", action="append", dest="defines", default=[], metavar="NAME[=VALUE]",
                        help="define a macro (repeatable)")
    language = parser.add_mutually_exclusive_group()
    language.add_argument("--cuda", action="store_true", help=f"{verb} as CUDA whatever the extension")
    language.add_argument("--cpp", action="store_true", help=f"{verb} as C++ whatever the extension")


def language_option(args: dict[str, Any]) -> str | None:
    """The language ``--cuda`` / ``--cpp`` ask for (``None``: by extension)."""
    return "cuda" if args["cuda"] else "cpp" if args["cpp"] else None


def inference_options(args: dict[str, Any]) -> dict[str, Any]:
    """:func:`~kernix.frontend.infer.infer_file`'s options for a command's
    sources: parsed as a load with the default ``optimization_level`` parses
    them (``-O3``, and with it ``__OPTIMIZE__``)."""
    return {"language": language_option(args), "include_dirs": args["include_dirs"], "defines": args["defines"],
            "flags": ("-O3",)}


def error_line(err: SourceError) -> str:
    """``FILE:LINE:COL: error: message``, the form editors and compilers use
    (a file name's bytes that are not UTF-8 written ``\\xNN``)."""
    return printable(f"{err.location()}: error: {err.message}")


def print_error(command: str, message: str) -> None:
    """Print ``kernix COMMAND: error: message`` on stderr, as argparse prints a
    usage error (a file name's bytes that are not UTF-8 written ``\\xNN``)."""
    print(f"kernix {command}: error: {printable(message)}", file=sys.stderr)
