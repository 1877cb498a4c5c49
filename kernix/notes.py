"""What kernix tells the user while it works: notes (:func:`note`) and
warnings about the user's code (:func:`warn_at`).

Every cache decision (hit, or miss and why), every build and every wait for
another process goes through :func:`note`.  It is printed to stderr as
``kernix: ...`` when the call asked for ``verbose=True`` or ``$KERNIX_VERBOSE``
is set to anything but ``""``/``0``, and is sent to the ``"kernix"``
:mod:`logging` logger (level DEBUG; INFO for what changed the cache), so an
application can collect it.  :mod:`logging` is not imported for that: while
no one has imported it, no one can be listening.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

__all__ = ["note", "warn_at"]


def note(message: str, *, verbose: bool = False, level: int = 10) -> None:
    """Report ``message`` (see the module docstring for where it goes), logged
    at ``level`` (:mod:`logging`'s numbers: 10 DEBUG, the default; 20 INFO,
    for what changed, such as an entry evicted from the cache)."""
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.getLogger("kernix").log(level, message)
    if verbose or os.environ.get("KERNIX_VERBOSE", "") not in ("", "0"):
        print(f"kernix: {message}", file=sys.stderr, flush=True)

#: The kernix package's directory: its frames are never where a warning points.
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
#: One "already shown" registry per source file, as Python keeps one per module.
_REGISTRIES: dict[str, dict[Any, Any]] = {}


def warn_at(message: str, category: type[Warning], file: str, line: int) -> None:
    """Issue a warning about a place in a user's source, attributed to that place.

    Python shows it as ``FILE:LINE: Category: message`` followed by that line
    of the source, and ``warnings.catch_warnings(record=True)`` gives
    ``filename=file`` and ``lineno=line``.  Its module (what
    ``-W action:message:category:module`` and ``filterwarnings(module=...)``
    match) is that of the first caller outside kernix, the code that asked for
    the load.  Under the default action it is shown once per file, line and
    message, so two different warnings at one line are both shown.  Without a
    ``file`` it points at that caller's line instead.

    Parameters
    ----------
    message
        The text (it keeps its ``FILE:LINE:COL:`` prefix, so the exception
        raised under ``-W error`` names the place too).
    file, line
        The place in the user's source (``line`` 1-based, 0 when unknown).
    """
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
    module = frame.f_globals.get("__name__", "__main__") if frame is not None else "kernix"
    if file:
        registry = _REGISTRIES.setdefault(file, {})
    elif frame is not None:
        file, line = frame.f_code.co_filename, frame.f_lineno
        registry = frame.f_globals.setdefault("__warningregistry__", {})
    else:
        file, registry = "<unknown>", {}
    warnings.warn_explicit(message, category, file, line, module=module, registry=registry)
