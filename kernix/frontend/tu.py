"""Reading a parsed translation unit: its errors, where its cursors are,
what the preprocessor skipped, which files it read."""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any

from ..backend.toolchain import check_host_compiler
from ..errors import SourceError, ToolchainError
from ..interface import running_command
from .clangparse import (
    PRELUDE_PATH,
    ParseOptions,
    compiler_view_of,
    is_under,
    system_dirs,
)

__all__ = ["error_diagnostics", "in_file", "in_system_header", "skipped_ranges", "dependencies"]


def error_diagnostics(tu: Any, options: ParseOptions) -> list[SourceError]:
    """Every error or fatal diagnostic of ``tu`` as a :class:`SourceError`.

    Diagnostics in system headers or the prelude are kept too (they would make
    inference unreliable) and say that the setup, not the user's code, is at fault.
    """
    sysdirs = system_dirs(options)
    out: list[SourceError] = []
    for diag in tu.diagnostics:
        if diag.severity < 3:  # Error = 3, Fatal = 4
            continue
        loc = diag.location
        fname = os.path.abspath(loc.file.name) if loc.file else ""
        message = diag.spelling
        in_toolchain = fname == PRELUDE_PATH or (fname and is_under(fname, sysdirs))
        if in_toolchain and diag.severity < 4 and compiler_view_of(options) is not None:
            # clang and nvcc's (or g++'s) front end disagree on a few declarations inside the
            # toolkit's own headers; the build compiler accepts them, so they are not the user's
            # problem.  A fatal error (a header the machine lacks) is still reported.
            continue
        if in_toolchain:
            message += (
                " [in a toolchain header while kernix parsed the file: check the CUDA/C++ "
                "installation, or report this to kernix]"
            )
        elif message.startswith("'") and message.endswith("' file not found"):
            message += _missing_header_hint(message[1:-len("' file not found")])
        elif message in _UNDECLARED_BE:
            message += ("; `BE::Tensor` is declared by kernix's header: add `#include \"kernix/common.h\"` "
                        "before the first function that uses it")
        out.append(SourceError(message, file=fname, line=loc.line, column=loc.column))
    return out


#: What clang says where ``BE::Tensor`` is used and no header declared ``BE``.
_UNDECLARED_BE = ("use of undeclared identifier 'BE'", "unknown type name 'BE'")


def _missing_header_hint(header: str) -> str:
    """Where ``header`` was looked for, and the option that adds a directory; or,
    when the host C++ compiler (which gives the standard headers) does not
    work, what is wrong with it."""
    try:
        check_host_compiler()
    except ToolchainError as exc:
        return f"; the C++ standard headers are found through the host compiler, and {exc}"
    if running_command() is not None:  # the command line reads files only, and its option is -I
        return ("; #include \"...\" looks beside the including file, then in the include paths: pass the "
                f"directory that holds {header!r} with -I DIR")
    return (f"; #include \"...\" looks beside the including file (for a load_*_inline source, that is the cache's "
            f"sources/ directory), then in the include paths: pass the directory that holds {header!r} in "
            "extra_include_paths=[...] (include_dirs=[...] for build_module; or -I in the compiler flags)")


@functools.lru_cache(maxsize=None)
def _lib() -> Any:
    import clang.cindex as ci

    lib = ci.conf.lib

    class CXSourceRangeList(ctypes.Structure):
        _fields_ = [("count", ctypes.c_uint), ("ranges", ctypes.POINTER(ci.SourceRange))]

    lib.clang_getAllSkippedRanges.restype = ctypes.POINTER(CXSourceRangeList)
    lib.clang_getAllSkippedRanges.argtypes = [ci.TranslationUnit]
    lib.clang_disposeSourceRangeList.restype = None
    lib.clang_disposeSourceRangeList.argtypes = [ctypes.POINTER(CXSourceRangeList)]
    lib.clang_Location_isFromMainFile.restype = ctypes.c_int
    lib.clang_Location_isFromMainFile.argtypes = [ci.SourceLocation]
    lib.clang_Location_isInSystemHeader.restype = ctypes.c_int
    lib.clang_Location_isInSystemHeader.argtypes = [ci.SourceLocation]
    return lib


def in_file(cursor: Any, path: str) -> bool:
    """Whether ``cursor``'s (expansion) location is in ``path``.

    ``clang_Location_isFromMainFile`` is false for declarations a macro
    expands to, so those are compared by file name (after ruling out system
    headers, which hold almost all cursors, with one cheap call).
    """
    lib = _lib()
    loc = cursor.location
    if lib.clang_Location_isFromMainFile(loc):
        return True
    if lib.clang_Location_isInSystemHeader(loc):
        return False
    f = loc.file
    return f is not None and os.path.abspath(f.name) == path


def in_system_header(cursor: Any) -> bool:
    """Whether ``cursor`` is located in a system header (toolchain, ``-isystem``)."""
    return bool(_lib().clang_Location_isInSystemHeader(cursor.location))


def skipped_ranges(tu: Any, path: str) -> list[tuple[int, int]]:
    """Line ranges of ``path`` the preprocessor skipped (inactive ``#if`` regions).

    ``tu`` must have been parsed with ``detailed=True``.
    """
    lib = _lib()
    lst = lib.clang_getAllSkippedRanges(tu)
    out: list[tuple[int, int]] = []
    try:
        for i in range(lst.contents.count):
            rng = lst.contents.ranges[i]
            f = rng.start.file
            if f is not None and os.path.abspath(f.name) == path:
                out.append((rng.start.line, rng.end.line))
    finally:
        lib.clang_disposeSourceRangeList(lst)
    return out


def dependencies(tu: Any, path: str) -> list[str]:
    """Absolute paths of every file ``tu`` read besides ``path`` and the prelude
    (those held by its precompiled prelude included)."""
    used = getattr(tu, "kernix_pch", None)  # (see kernix.frontend.clangparse.parse)
    seen: dict[str, None] = dict.fromkeys(v[0] for v in (used.prelude.versions if used else ()))
    for inc in tu.get_includes():
        name = inc.include.name
        if name == PRELUDE_PATH:
            continue
        name = os.path.abspath(name)
        if name != path:
            seen.setdefault(name, None)
    return list(seen)
