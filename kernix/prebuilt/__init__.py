"""Prebuilt modules: build once with a compiler (:func:`kernix.prebuilt.build.build_module`,
``kernix build``), load anywhere without one (:func:`load_prebuilt`). Importing the package leaves
:mod:`kernix.prebuilt.build` (the build backend, libclang) out: a load needs neither.
"""

from __future__ import annotations

from ..errors import PrebuiltError
from .format import MANIFEST_NAME, PREBUILT_FORMAT, PrebuiltManifest
from .load import last_load_reason, load_or_build, load_prebuilt

__all__ = ["load_prebuilt", "load_or_build", "last_load_reason", "PrebuiltError", "PrebuiltManifest", "MANIFEST_NAME",
           "PREBUILT_FORMAT"]
