"""Warnings attributed to the user's code, never to kernix's own frames.

:func:`warn_at` issues a warning about a place in a user's source (a
near-miss annotation: that file and line) or, without one, about the user's
call that led to it (the first frame outside kernix).
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

__all__ = ["warn_at"]

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
    category
        The warning class.
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
