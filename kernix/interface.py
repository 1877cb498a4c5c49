"""Which interface the user is driving kernix through, for the few messages
that name an option: the Python API spells it one way
(``extra_include_paths=[...]``), the ``kernix`` command line another (``-I DIR``).
Imports nothing: the command line's start-up pays for it.
"""

from __future__ import annotations

__all__ = ["command_line", "running_command"]

_running: list[str] = []  # the commands running in this process, innermost last


def running_command() -> str | None:
    """The ``kernix`` command running in this process (``"build"``,
    ``"inspect"``...), or ``None`` when kernix was called from Python."""
    return _running[-1] if _running else None


class command_line:
    """Within it, messages are worded for ``kernix command`` (a context manager)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __enter__(self) -> command_line:
        _running.append(self.command)
        return self

    def __exit__(self, *exc: object) -> None:
        _running.pop()
