"""Prebuilt modules: build once with a compiler (:func:`build_module`, ``kernix build``),
load anywhere without one (:func:`load_prebuilt`).

Importing this package imports neither libclang nor the build backend;
:func:`build_module` imports them when it runs.
"""

from __future__ import annotations

from .format import MANIFEST_NAME, PREBUILT_FORMAT, PrebuiltError, PrebuiltManifest
from .fallback import last_load_reason, load_or_build
from .load import load_prebuilt


def build_module(*args, **kwargs):  # noqa: D103 - documented in kernix.prebuilt.build
    from .build import build_module as _build

    return _build(*args, **kwargs)


build_module.__doc__ = "Compile sources into a prebuilt module directory; see :func:`kernix.prebuilt.build.build_module`."

__all__ = ["build_module", "load_prebuilt", "load_or_build", "last_load_reason", "PrebuiltError", "PrebuiltManifest", "MANIFEST_NAME", "PREBUILT_FORMAT"]
