"""The argparse parser of the ``kernix`` commands, built from their
declarations (:mod:`kernix.cli.args`): it prints the help and the usage
errors, and reads the command lines the fast parse leaves to it."""

from __future__ import annotations

import argparse
import os
import sys

TYPE_CHECKING = False  # as typing.TYPE_CHECKING: typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any, Sequence

    from .args import Command

__all__ = ["build_parser"]


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


def _add_command(subparsers: Any, command: Command) -> None:
    """Add ``command`` (and its actions) to ``subparsers``."""
    p = subparsers.add_parser(command.name, help=command.help, description=command.description)
    groups: dict[str, Any] = {}
    for arg in command.args:
        if arg.kind == "positional":
            p.add_argument(arg.dest, nargs=arg.nargs, default=arg.default, metavar=arg.metavar, help=arg.help)
            continue
        target = p
        if arg.exclusive is not None:
            target = groups.get(arg.exclusive) or groups.setdefault(arg.exclusive, p.add_mutually_exclusive_group())
        kwargs: dict[str, Any] = {"dest": arg.dest, "help": arg.help}
        if arg.kind == "flag":
            kwargs["action"] = "store_true"
        else:
            kwargs.update(action="append" if arg.kind == "append" else "store", default=arg.initial(),
                          type=arg.type, choices=arg.choices, metavar=arg.metavar)
            if arg.required:
                kwargs["required"] = True
        target.add_argument(*arg.flags, **kwargs)
    if command.actions:
        actions = p.add_subparsers(dest=command.action_dest, metavar=command.action_dest.upper())
        actions.required = True
        for action in command.actions.values():
            _add_command(actions, action)


def build_parser(commands: Sequence[Command]) -> argparse.ArgumentParser:
    """The ``kernix`` parser with ``commands`` (each parse sets ``command``
    to the name of the one given)."""
    parser = _Parser(prog="kernix", description="Call annotated C++ and CUDA functions from JAX.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command in commands:
        _add_command(sub, command)
    return parser
