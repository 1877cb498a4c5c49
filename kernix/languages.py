"""Platforms and source languages: one type for each, one extension map."""

from __future__ import annotations

import os
from typing import Literal

from .errors import KernixError

#: Where a module's handlers run: ``"cuda"`` (user code built by nvcc) or ``"cpu"``.
Platform = Literal["cuda", "cpu"]
#: How a source file is parsed and compiled.
Language = Literal["cuda", "cpp"]

__all__ = ["Platform", "Language", "LANGUAGES_BY_EXTENSION", "language_of", "unknown_extension", "platform_of",
           "JAX_PLATFORMS"]


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
        raise KernixError(unknown_extension(path, "pass language='cuda' or language='cpp'")) from None


def unknown_extension(path: str, remedy: str) -> str:
    """The message for ``path``, whose extension names no language; ``remedy`` says how to name one."""
    return (f"cannot tell the language of {path!r} from its extension {os.path.splitext(path)[1].lower()!r}: "
            f"expected one of {', '.join(LANGUAGES_BY_EXTENSION)}; {remedy}")


def platform_of(language: Language) -> Platform:
    """The platform a module of ``language`` sources is built for."""
    return "cuda" if language == "cuda" else "cpu"
