"""The set-up of an inference parse, remembered: what libclang is, its
command line and the CUDA prelude, for one set of parse options.

Working these out means finding the host compiler, nvcc, the CUDA and jaxlib
headers and asking the compilers what they predefine
(:mod:`kernix.frontend.compiler_view`).  The answer is kept in the direct
index (:mod:`kernix.store.direct`, records under ``direct/.parse/``) under a
fingerprint of the options, the kernix, Python and environment that steer
the search, with the identity of the files it came from (the compilers,
libclang, jaxlib's FFI header and every ``PATH`` directory), so a warm
``kernix inspect`` or look-up in the spec cache neither searches for tools
nor imports the parser.
"""

from __future__ import annotations

import os
import sys

from .. import __version__
from ..store import direct
from ..store.files import content_key

TYPE_CHECKING = False  # as typing.TYPE_CHECKING: typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["parse_setup"]

_SPACE = ".parse"


def _is_setup(value: Any) -> bool:
    """``[libclang identity, [flag, ...], prelude or None]``."""
    return (
        isinstance(value, list) and len(value) == 3 and isinstance(value[0], str)
        and isinstance(value[1], list) and all(isinstance(f, str) for f in value[1])
        and (value[2] is None or isinstance(value[2], str))
    )


_BINDINGS = ("clang", "clang.py", "jaxlib")


def _import_roots() -> list[str]:
    """The ``sys.path`` entries (absolute) that hold libclang's Python bindings
    or jaxlib, in order: which of them are found first decides the set-up;
    the other entries (the current or the script's directory, for one)
    cannot change it."""
    roots = []
    for entry in sys.path:
        entry = os.path.abspath(entry)
        if any(os.path.exists(os.path.join(entry, name)) for name in _BINDINGS):
            roots.append(entry)
    return roots


def parse_setup(
    language: str, include_dirs: tuple[str, ...], defines: tuple[str, ...], flags: tuple[str, ...], root: str
) -> list[Any]:
    """``[libclang identity, parse flags, CUDA prelude text or None]`` for
    these options (see :func:`kernix.frontend.clangparse.parse_flags`), from
    the direct index under ``root`` when it holds, else worked out and
    remembered."""
    fingerprint = content_key({
        "direct": direct.DIRECT_FORMAT,
        "kernix": [__version__, __file__],
        "python": [sys.implementation.cache_tag, sys.prefix, _import_roots()],
        "options": [language, include_dirs, defines, flags],
        "environment": {v: os.environ.get(v) for v in direct.TOOL_ENVIRONMENT},
    })
    found = direct.lookup(root, _SPACE, fingerprint, valid=_is_setup, what="inference set-up")
    if found is not None:
        return found
    from . import clangparse

    options = clangparse.ParseOptions(language, include_dirs, defines, flags)
    files = direct.identities(_setup_files())  # before the answer they vouch for
    setup = [clangparse.clang_fingerprint(), clangparse.parse_flags(options), clangparse.prelude_text(options)]
    direct.record(root, _SPACE, fingerprint, setup, files, what="inference set-up")
    return setup


def _setup_files() -> list[str]:
    """The files the set-up is worked out from: the compilers, libclang,
    jaxlib's FFI header, and the directories searched for compilers."""
    from ..backend import toolchain
    from ..errors import ToolchainError
    from . import clangparse

    files = [part.rsplit(":", 2)[0] for part in clangparse.clang_fingerprint().split(",") if part]
    ffi = clangparse.ffi_include_dir()
    if ffi:
        files.append(os.path.join(ffi, "xla", "ffi", "api", "ffi.h"))
    try:
        files += toolchain.compiler_paths(cuda=toolchain.nvcc_path_or_none() is not None)
    except ToolchainError:  # no host compiler: the parse has no compiler view to vouch for
        pass
    return files + direct.search_dirs()
