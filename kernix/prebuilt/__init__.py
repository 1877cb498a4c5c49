"""Prebuilt modules: build once with a compiler (:func:`build_module`, ``kernix build``),
load anywhere without one (:func:`load_prebuilt`).

Importing this package imports neither libclang nor the build backend;
:func:`build_module` imports them when it runs.
"""

from __future__ import annotations

from ..errors import PrebuiltError
from .fallback import last_load_reason, load_or_build
from .format import MANIFEST_NAME, PREBUILT_FORMAT, PrebuiltManifest
from .load import load_prebuilt


def __getattr__(name: str):  # build_module needs the build backend: imported on first use
    if name == "build_module":
        from .build import build_module

        return build_module
    raise AttributeError(f"module 'kernix.prebuilt' has no attribute {name!r}")

__all__ = ["build_module", "load_prebuilt", "load_or_build", "last_load_reason", "PrebuiltError", "PrebuiltManifest", "MANIFEST_NAME", "PREBUILT_FORMAT"]
