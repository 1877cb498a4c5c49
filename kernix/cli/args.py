"""The arguments several ``kernix`` commands share: the options of a
command that reads sources, and what they mean for the inference."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_source_args", "language_option", "inference_options"]


def add_source_args(parser: argparse.ArgumentParser, verb: str) -> None:
    """Add ``-I``, ``-D`` and ``--cuda`` / ``--cpp``, as every command that reads sources takes them.

    Parameters
    ----------
    parser
        The command's parser.
    verb
        What the command does with the sources (``"parse"``, ``"build"``), for the help of ``--cuda`` / ``--cpp``.
    """
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
