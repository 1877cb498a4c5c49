"""The ``kernix`` command line: ``inspect``, ``stubs``, ``cache``, ``build``, ``tune`` (their output and exit
statuses: docs/reference/cli.rst). Each command is a module here with ``add_parser(subparsers)`` and
``run(args)``; ``python -m kernix`` runs the same :func:`main`.
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

COMMANDS = {"inspect": inspect, "stubs": stubs, "cache": cache, "build": build, "tune": build}
"""Each command's module, in the order ``kernix --help`` lists them."""


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every command (each parse sets ``command`` to the name of the one given)."""
    parser = argparse.ArgumentParser(prog="kernix", description="Call annotated C++ and CUDA functions from JAX.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in dict.fromkeys(COMMANDS.values()):  # (build's module adds tune too)
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line (``argv`` without the program name); returns the exit status."""
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
