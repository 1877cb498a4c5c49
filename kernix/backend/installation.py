"""The host compiler's own header directories, which a build's record leaves out
because the compiler's identity covers them.

They are asked of the compiler (once per compiler file) with the variables
that add header directories removed from its environment, so a user's
``CPLUS_INCLUDE_PATH`` is never taken for the compiler's own. They are its
C++ standard library (directories searched for C++ but not C, or holding
``cstddef``, ``bits/c++config.h`` or libc++'s ``__config``) and the search
directories inside its installation directory (the parent of
``-print-file-name=include``). Everything else is tracked, and so is every
file when the compiler does not answer.
"""

from __future__ import annotations

import os
import subprocess

from ..store.files import remembered

__all__ = ["own_header_dirs", "search_list", "installation_dir"]

#: Variables that add header directories to a compiler's search list; removed when asking for its own.
_HEADER_ENVIRONMENT = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "OBJC_INCLUDE_PATH",
                       "OBJCPLUS_INCLUDE_PATH", "CCC_OVERRIDE_OPTIONS")


def search_list(compiler: str, language: str, env: dict[str, str] | None = None) -> list[str] | None:
    """The directories ``compiler`` searches for ``#include <...>`` in
    ``language`` (``"c"`` or ``"c++"``), normalised, in order (``None``:
    no answer), as its ``-E -v`` output lists them."""
    try:
        proc = subprocess.run([compiler, "-x", language, "-E", "-v", "-"], input="", capture_output=True, check=False,
                              text=True, errors="surrogateescape", timeout=60, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = proc.stderr.splitlines()
    try:
        start = lines.index("#include <...> search starts here:") + 1
        end = lines.index("End of search list.", start)
    except ValueError:
        return None
    return [os.path.normpath(ln.strip().removesuffix(" (framework directory)")) for ln in lines[start:end]]


def installation_dir(compiler: str, env: dict[str, str] | None = None) -> str | None:
    """The parent of the private ``include`` directory ``compiler -print-file-name=include``
    names, or ``None`` when it names none."""
    try:
        proc = subprocess.run([compiler, "-print-file-name=include"], capture_output=True, text=True, check=False,
                              errors="surrogateescape", timeout=60, env=env, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    found = proc.stdout.strip()
    if proc.returncode != 0 or not os.path.isabs(found) or not os.path.isdir(found):
        return None
    return os.path.dirname(os.path.normpath(found))


#: Files only a C++ standard library's header directories hold (libstdc++'s
#: main and target directories, libc++'s).
_CXX_LIBRARY_MARKS = ("cstddef", os.path.join("bits", "c++config.h"), "__config")


def _holds_cxx_library(d: str) -> bool:
    """Whether ``d`` is a directory of a C++ standard library (or its ``backward`` directory)."""
    if os.path.basename(d) == "backward":
        d = os.path.dirname(d)
    return any(os.path.isfile(os.path.join(d, mark)) for mark in _CXX_LIBRARY_MARKS)


def own_header_dirs(compiler: str) -> tuple[str, ...]:
    """The header directories of ``compiler``'s own installation (see the
    module documentation), each ending in a separator: a path starting with
    one of them is the compiler's."""

    def ask() -> list[str] | None:
        env = {k: v for k, v in os.environ.items() if k not in _HEADER_ENVIRONMENT}
        cxx, c = search_list(compiler, "c++", env), search_list(compiler, "c", env)
        if cxx is None or c is None:
            return None
        install = installation_dir(compiler, env)
        inside = os.path.join(install, "") if install else None
        own = [d for d in cxx if d not in c or _holds_cxx_library(d)
               or (inside and os.path.join(d, "").startswith(inside))]
        return [os.path.join(d, "") for d in own]

    return tuple(remembered("own-header-dirs", compiler, ask) or ())
