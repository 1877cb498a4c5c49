"""libclang's Python bindings (the ``libclang-ng`` package), loaded on first need.

Only inference needs them: a warm load never imports ``clang``.  When they are
missing or their native library does not load, the error says how to install
``libclang-ng`` instead of surfacing an ``ImportError`` or clang's own
``LibclangError`` (which suggests setting a library path).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ..errors import ToolchainError

__all__ = ["cindex"]


def cindex() -> Any:
    """``clang.cindex`` with its native library loaded (the ``libclang-ng`` package).

    Raises
    ------
    kernix.ToolchainError
        When the bindings are missing, or present without a library that
        loads (a ``clang`` package other than ``libclang-ng``, a broken
        install), saying how to install ``libclang-ng``.
    """
    try:
        import clang.cindex as ci

        ci.conf.lib  # loads libclang.so: a LibclangError when it is missing or does not load
        return ci
    except Exception as exc:  # ImportError, clang.cindex.LibclangError, OSError from ctypes
        where = getattr(sys.modules.get("clang"), "__file__", None)
        found = f" (the clang package imported from {os.path.dirname(where)} is not usable)" if where else ""
        raise ToolchainError(
            f"inferring signatures needs libclang, from the libclang-ng package{found}: "
            f"{type(exc).__name__}: {str(exc).strip() or 'no detail'}. Install it into this Python with "
            f"`{sys.executable} -m pip install --force-reinstall libclang-ng`; if another package provides "
            "clang.cindex here (the `clang` or `libclang` packages), `pip uninstall clang libclang` first."
        ) from exc
