"""How a compiler's command-line flags are read: split into ``(flag, value)``
pairs, and which of them change preprocessing (and so what inference sees)."""

from __future__ import annotations

from typing import Sequence

__all__ = ["PREPROCESSOR_FLAGS", "split_flags", "preprocessor_flags"]

#: The flags that change what the preprocessor does (inference must see them too).
PREPROCESSOR_FLAGS = ("-I", "-isystem", "-iquote", "-idirafter", "-include", "-D", "-U")


def split_flags(flags: Sequence[str]) -> list[tuple[str, str | None]]:
    """``[(flag, value)]``: joined (``-IDIR``) and separate (``-I DIR``) forms alike."""
    out: list[tuple[str, str | None]] = []
    it = iter(flags)
    for flag in it:
        for opt in sorted(PREPROCESSOR_FLAGS + ("-L",), key=len, reverse=True):
            if flag == opt:
                out.append((opt, next(it, "")))
                break
            if flag.startswith(opt):
                out.append((opt, flag[len(opt):]))
                break
        else:
            out.append((flag, None))
    return out


def preprocessor_flags(flags: Sequence[str]) -> tuple[str, ...]:
    """The flags of ``flags`` that change preprocessing (``-I``, ``-isystem``,
    ``-iquote``, ``-idirafter``, ``-include``, ``-D``, ``-U``, ``-std=``), in order."""
    out: list[str] = []
    for opt, value in split_flags(flags):
        if value is not None and opt in PREPROCESSOR_FLAGS:
            out += [opt, value] if opt in ("-isystem", "-iquote", "-idirafter", "-include") else [opt + value]
        elif value is None and opt.startswith(("-std=", "--std=")):
            out.append("-std=" + opt.split("=", 1)[1])
    return tuple(out)
