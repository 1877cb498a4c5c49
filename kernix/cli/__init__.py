"""The ``kernix`` command line.

``kernix inspect PATH... [-I DIR] [-D NAME[=VALUE]] [--cuda | --cpp] [--json] [-j N]``
prints what kernix infers from each file's ``// @BE`` annotations (a directory
stands for its source files; files missing from the spec cache are parsed in
parallel, and a run over several files ends with the totals).
``kernix stubs FILE... [-o OUT.pyi]`` writes a ``.pyi`` stub of the functions
the files export (to stdout without ``-o``).
``kernix cache info [--json]`` lists the cached modules; ``kernix cache clear
[NAME]`` deletes cached builds.  ``kernix build SOURCE... -o DIR [--name NAME]
[--cuda | --cpp] [--arch sm_80,sm_90] [-I DIR] [-D NAME[=VALUE]] [-L DIR]
[-l NAME] [-O N] [--fast-math]`` writes a prebuilt module that
:func:`kernix.load_prebuilt` loads without a compiler.

Exit status: 0 when every annotated function was inferred, 1 when any was not
(each error on stderr as ``FILE:LINE:COL: error: message``), 2 for usage errors.

Each command is a module of this package with a ``COMMAND`` declaration
(:class:`~kernix.cli.args.Command`) and a ``run(args)`` function; only the
named command's module is imported, and argparse only for help and usage
errors (:mod:`kernix.cli.args`).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # as typing.TYPE_CHECKING: typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    import argparse
    from types import ModuleType
    from typing import Sequence

__all__ = ["main", "build_parser", "COMMANDS"]

COMMANDS = ("inspect", "stubs", "cache", "build")
"""The commands, in the order ``kernix --help`` lists them."""


def _module(command: str) -> ModuleType:
    """The module of ``command`` (imported on first use)."""
    name = f"{__name__}.{command}"
    __import__(name)
    return sys.modules[name]


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argparse parser with every command, or with ``command``'s alone.

    :func:`main` needs it only for help, usage errors and the rare forms the
    fast parse leaves to it; building one command's parser spares the
    others' message catalogue look-ups.
    """
    from .parser import build_parser as build

    return build([_module(name).COMMAND for name in COMMANDS if command in (None, name)])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Parameters
    ----------
    argv
        The arguments (without the program name); ``None`` reads ``sys.argv``.
    """
    from .args import parse_fast

    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[0] if argv and argv[0] in COMMANDS else None
    args = parse_fast(_module(command).COMMAND, argv[1:]) if command else None
    if args is None:
        try:
            args = vars(build_parser(command).parse_args(argv))
        except SystemExit as exc:  # argparse exits 2 on usage errors, 0 for --help
            return int(exc.code or 0)
    else:
        args["command"] = command
    from ..interface import command_line

    try:
        with command_line(args["command"]):  # messages name this command's options
            return int(_module(args["command"]).run(args))
    except BrokenPipeError:  # the reader of our output went away (`kernix cache info | head -1`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush is quiet too
        return 1
