"""Platforms and source languages: one type for each, one extension map; and
how a compiler's flags are split into ``(flag, value)`` pairs, and which of
them change preprocessing (and so what inference sees)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from typing import Literal

    #: Where a module's handlers run: ``"cuda"`` (user code built by nvcc) or ``"cpu"``.
    Platform = Literal["cuda", "cpu"]
    #: How a source file is parsed and compiled.
    Language = Literal["cuda", "cpp"]
else:  # (plain aliases at run time: no process that loads a module builds the Literal types)
    Platform = Language = str

__all__ = ["Platform", "Language", "LANGUAGES_BY_EXTENSION", "language_of", "unknown_extension", "JAX_PLATFORMS",
           "PREPROCESSOR_FLAGS", "split_flags", "preprocessor_flags"]


#: File extension -> language.
LANGUAGES_BY_EXTENSION: dict[str, Language] = {
    ".cu": "cuda",
    ".cuh": "cuda",
    ".c": "cpp",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".h": "cpp",
    ".hpp": "cpp",
}

#: kernix platform -> the platform name JAX registers handlers under.
JAX_PLATFORMS: dict[str, str] = {"cuda": "CUDA", "cpu": "cpu"}


def language_of(path: str) -> Language:
    """The language of ``path`` from its extension; a :class:`KernixError` for an unknown one."""
    try:
        return LANGUAGES_BY_EXTENSION[os.path.splitext(path)[1].lower()]
    except KeyError:
        from .errors import KernixError
        raise KernixError(unknown_extension(path, "pass language='cuda' or language='cpp'")) from None


def unknown_extension(path: str, remedy: str) -> str:
    """The message for ``path``, whose extension names no language; ``remedy`` says how to name one."""
    return (f"cannot tell the language of {path!r} from its extension {os.path.splitext(path)[1].lower()!r}: "
            f"expected one of {', '.join(LANGUAGES_BY_EXTENSION)}; {remedy}")


#: The flags that change what the preprocessor does (inference must see them too).
PREPROCESSOR_FLAGS = ("-I", "-isystem", "-iquote", "-idirafter", "-include", "-D", "-U")


def split_flags(flags: Sequence[str]) -> list[tuple[str, str | None]]:
    """``[(flag, value)]``: joined (``-IDIR``) and separate (``-I DIR``) forms alike."""
    out: list[tuple[str, str | None]] = []
    it = iter(flags)
    for flag in it:
        for opt in sorted(PREPROCESSOR_FLAGS + ("-L",), key=len, reverse=True):
            if flag.startswith(opt):
                out.append((opt, flag[len(opt):] or next(it, "")))  # -IDIR, or -I DIR
                break
        else:
            out.append((flag, None))
    return out


def preprocessor_flags(flags: Sequence[str]) -> tuple[str, ...]:
    """The flags of ``flags`` that change preprocessing (:data:`PREPROCESSOR_FLAGS` and ``-std=``), in order."""
    out: list[str] = []
    for opt, value in split_flags(flags):
        if value is not None and opt in PREPROCESSOR_FLAGS:
            out += [opt, value] if opt in ("-isystem", "-iquote", "-idirafter", "-include") else [opt + value]
        elif value is None and opt.startswith(("-std=", "--std=")):
            out.append("-std=" + opt.split("=", 1)[1])
    return tuple(out)
