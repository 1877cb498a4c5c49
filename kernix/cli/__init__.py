"""The ``kernix`` command line.

``kernix inspect PATH... [-I DIR] [-D NAME[=VALUE]] [--cuda | --cpp] [--json] [-j N]``
prints what kernix infers from each file's ``// @BE`` annotations (a directory
stands for its source files; files missing from the spec cache are parsed in
parallel, and a run over several files ends with the totals).
``kernix stubs FILE... [-o OUT.pyi]`` writes a ``.pyi`` stub of the functions
the files export (to stdout without ``-o``).
``kernix cache info [--json]`` lists the cache's entries; ``kernix cache clear
[NAME]`` deletes cached builds; ``kernix cache prune [--max-size SIZE]
[--older-than AGE]`` removes the least recently used.  ``kernix build SOURCE... -o DIR [--name NAME]
[--cuda | --cpp] [--arch sm_80,sm_90] [-I DIR] [-D NAME[=VALUE]] [-L DIR]
[-l NAME] [-O N] [--fast-math]`` writes a prebuilt module that
:func:`kernix.load_prebuilt` loads without a compiler.  ``kernix --version``
prints the version.

Exit status: 0 when every annotated function was inferred, 1 when any was not
(each error on stderr as ``FILE:LINE:COL: error: message``), 2 for usage errors.

Each command is a module of this package with an ``add_parser(subparsers)``
function, which declares its arguments, and a ``run(args)`` function.  The
command is installed as the ``kernix`` entry point, and ``python -m kernix``
runs the same :func:`main`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .. import __version__
from ..interface import command_line
from . import build, cache, inspect, stubs

__all__ = ["main", "build_parser", "COMMANDS"]

COMMANDS = {"inspect": inspect, "stubs": stubs, "cache": cache, "build": build}
"""Each command's module, in the order ``kernix --help`` lists them."""


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every command (each parse sets ``command`` to the name of the one given)."""
    parser = argparse.ArgumentParser(prog="kernix", description="Call annotated C++ and CUDA functions from JAX.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS.values():
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Parameters
    ----------
    argv
        The arguments (without the program name); ``None`` reads ``sys.argv``.

    Returns
    -------
    int
        0 on success, 1 when a command failed, 2 for a usage error (and 0 for
        ``--help`` and ``--version``).
    """
    try:
        args = vars(build_parser().parse_args(argv))
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 for --help and --version
        return int(exc.code or 0)
    try:
        with command_line(args["command"]):  # messages name this command's options
            return int(COMMANDS[args["command"]].run(args))
    except BrokenPipeError:  # the reader of our output went away (`kernix cache info | head -1`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush is quiet too
        return 1
