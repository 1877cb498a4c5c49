"""What kernix says while it works: one function, one switch.

Every cache decision (hit, or miss and why), every build and every wait for
another process goes through :func:`note`.  It is printed to stderr as
``kernix: ...`` when the call asked for ``verbose=True`` or ``$KERNIX_VERBOSE``
is set to anything but ``""``/``0``, and is sent to the ``"kernix"``
:mod:`logging` logger (level DEBUG; INFO for what changed the cache), so an
application can collect it.

:mod:`logging` is not imported for that: while no one has imported it, no
one can be listening, and a warm start does not pay for it.
"""

from __future__ import annotations

import os
import sys

__all__ = ["note", "verbose_from_env"]


def verbose_from_env() -> bool:
    """Whether ``$KERNIX_VERBOSE`` asks for the log on stderr."""
    return os.environ.get("KERNIX_VERBOSE", "") not in ("", "0")


def note(message: str, *, verbose: bool = False, level: int = 10) -> None:
    """Report ``message`` (see the module docstring for where it goes), logged
    at ``level`` (:mod:`logging`'s numbers: 10 DEBUG, the default; 20 INFO,
    for what changed, such as an entry evicted from the cache)."""
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.getLogger("kernix").log(level, message)
    if verbose or verbose_from_env():
        print(f"kernix: {message}", file=sys.stderr, flush=True)
