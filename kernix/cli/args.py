"""The arguments of each ``kernix`` command, declared once, and their fast parse.

Each command is a :class:`Command` whose arguments are :class:`Arg` values.
:func:`parse_fast` reads the forms nearly every command line is made of
(``-I DIR``, ``-IDIR``, ``--name VALUE``, ``--name=VALUE``, flags, one run of
positional arguments) without importing argparse, whose import and message
catalogue look-ups cost about as much as the rest of a warm ``kernix
inspect``.  For anything else (``--help``, a usage error, an abbreviated
option, ``--``, a value that starts with ``-``) it returns ``None``, and
:mod:`kernix.cli.parser` builds the argparse parser from the same
declarations: help text and usage errors are argparse's own, and a command
line means the same whichever parser reads it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # as typing.TYPE_CHECKING: typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any, Callable, Sequence

__all__ = ["Arg", "Command", "parse_fast", "source_args", "language_option"]


class Arg:
    """One argument of a command.

    Parameters
    ----------
    *flags
        The option strings (``"-j", "--jobs"``), or the one name of a
        positional argument (``"files"``).
    kind
        ``"flag"`` (true when given), ``"value"`` (the last value given),
        ``"append"`` (every value given, in order) or ``"positional"``.
    dest
        The key of the parsed value (default: the first long option, or the
        short one, without dashes, ``-`` spelled ``_``; a positional's name).
    nargs
        A positional's count: ``"+"`` (one or more) or ``"?"`` (at most one).
    type, choices, default, required, metavar, help
        As argparse's ``add_argument`` takes them.
    exclusive
        Arguments sharing this label may not be given together.
    """

    __slots__ = ("flags", "kind", "dest", "nargs", "type", "choices", "default", "required", "metavar", "help",
                 "exclusive")

    def __init__(self, *flags: str, kind: str = "value", dest: str | None = None, nargs: str | None = None,
                 type: Callable[[str], Any] | None = None, choices: Sequence[Any] | None = None,
                 default: Any = None, required: bool = False, metavar: str | None = None,
                 help: str | None = None, exclusive: str | None = None) -> None:
        self.flags = flags
        self.kind = kind
        if dest is None:
            longs = [f for f in flags if f.startswith("--")]
            dest = (longs or list(flags))[0].lstrip("-").replace("-", "_")
        self.dest = dest
        self.nargs = nargs
        self.type = type
        self.choices = choices
        self.default = default
        self.required = required
        self.metavar = metavar
        self.help = help
        self.exclusive = exclusive

    def initial(self) -> Any:
        """The value when the argument is not given (a new list for ``"append"``)."""
        if self.kind == "flag":
            return False
        if self.kind == "append":
            return list(self.default or ())
        return self.default


class Command:
    """A command (or a command's action, as ``cache info``): its arguments,
    its help, and the actions that follow it on the command line.

    Parameters
    ----------
    name
        The word that selects it.
    help
        One line for the list of commands.
    description
        The paragraph of its ``--help``.
    args
        Its arguments, in the order its help lists them.
    actions, action_dest
        The commands one of which must follow this one, and the key that
        names the one given.
    """

    __slots__ = ("name", "help", "description", "args", "actions", "action_dest")

    def __init__(self, name: str, help: str, description: str | None = None, args: Sequence[Arg] = (),
                 actions: Sequence[Command] = (), action_dest: str = "action") -> None:
        self.name = name
        self.help = help
        self.description = description
        self.args = tuple(args)
        self.actions = {a.name: a for a in actions}
        self.action_dest = action_dest


def source_args(verb: str) -> tuple[Arg, ...]:
    """``-I``, ``-D`` and ``--cuda`` / ``--cpp``, as every source-reading command takes them."""
    return (
        Arg("-I", kind="append", dest="include_dirs", metavar="DIR", help="add an include directory (repeatable)"),
        Arg("-D", kind="append", dest="defines", metavar="NAME[=VALUE]", help="define a macro (repeatable)"),
        Arg("--cuda", kind="flag", exclusive="language", help=f"{verb} as CUDA whatever the extension"),
        Arg("--cpp", kind="flag", exclusive="language", help=f"{verb} as C++ whatever the extension"),
    )


def language_option(args: dict[str, Any]) -> str | None:
    """The language ``--cuda`` / ``--cpp`` ask for (``None``: by extension)."""
    return "cuda" if args["cuda"] else "cpp" if args["cpp"] else None


def inference_options(args: dict[str, Any]) -> dict[str, Any]:
    """:func:`~kernix.frontend.infer.infer_file`'s options for a command's
    sources: parsed as a load with the default ``optimization_level`` parses
    them (``-O3``, and with it ``__OPTIMIZE__``)."""
    return {"language": language_option(args), "include_dirs": args["include_dirs"], "defines": args["defines"],
            "flags": ("-O3",)}


def parse_fast(command: Command, argv: Sequence[str]) -> dict[str, Any] | None:
    """The values of ``command``'s arguments in ``argv`` (which follows the
    command's name), or ``None`` where argparse must read it: help, errors,
    and the forms this does not read (see the module's documentation)."""
    if command.actions:
        action = command.actions.get(argv[0]) if argv else None
        values = parse_fast(action, argv[1:]) if action is not None else None
        if values is not None:
            values[command.action_dest] = action.name  # type: ignore[union-attr]
        return values
    options = {flag: arg for arg in command.args if arg.kind != "positional" for flag in arg.flags}
    values = {arg.dest: arg.initial() for arg in command.args}
    positionals: list[str] = []
    given: set[str] = set()
    in_run = False  # the previous token was positional
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("-"):
            if positionals and not in_run:
                return None  # a second run of positionals: argparse's own rules decide
            positionals.append(token)
            in_run = True
            continue
        in_run = False
        arg, value = _option(options, token)
        if arg is None:
            return None
        if arg.kind != "flag" and value is None:
            if i == len(argv) or argv[i].startswith("-"):
                return None
            value = argv[i]
            i += 1
        if not _store(arg, value, values):
            return None
        given.add(arg.dest)
    if not _place(command, positionals, values):
        return None
    for arg in command.args:
        if arg.required and arg.dest not in given:
            return None
    exclusive = [arg.exclusive for arg in command.args if arg.exclusive and arg.dest in given]
    if len(exclusive) != len(set(exclusive)):
        return None
    return values


def _option(options: dict[str, Arg], token: str) -> tuple[Arg | None, str | None]:
    """The option ``token`` gives and the value attached to it (``--name=V``,
    ``-IV``), or ``(None, None)`` for a form :func:`parse_fast` leaves to argparse."""
    if token in options:
        return options[token], None
    if token.startswith("--"):
        name, eq, value = token.partition("=")
        arg = options.get(name)
        if eq and arg is not None and arg.kind != "flag":
            return arg, value
        return None, None
    arg = options.get(token[:2])
    if arg is not None and arg.kind != "flag" and not token.startswith("=", 2):
        return arg, token[2:]
    return None, None


def _store(arg: Arg, text: str | None, values: dict[str, Any]) -> bool:
    """Record ``arg`` given with ``text``; whether it was a valid value."""
    if arg.kind == "flag":
        values[arg.dest] = True
        return True
    value: Any = text
    if arg.type is not None:
        try:
            value = arg.type(text)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
    if arg.choices is not None and value not in arg.choices:
        return False
    if arg.kind == "append":
        values[arg.dest].append(value)
    else:
        values[arg.dest] = value
    return True


def _place(command: Command, positionals: list[str], values: dict[str, Any]) -> bool:
    """Give the positional strings to the command's positional argument;
    whether their number fits it."""
    wanted = [arg for arg in command.args if arg.kind == "positional"]
    if not wanted:
        return not positionals
    (arg,) = wanted
    if arg.nargs == "+":
        values[arg.dest] = positionals
        return bool(positionals)
    if len(positionals) > 1:
        return False
    if positionals:
        values[arg.dest] = positionals[0]
    return True
