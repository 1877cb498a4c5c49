"""What the real compiler sees before the first line of a source file.

Rather than a hand-written macro list that drifts with each CUDA and GCC
release, the tools are asked, once per compiler identity: ``nvcc --dryrun``
gives its host pass's ``-D``/``-U`` flags, include directories and forced
includes (no ``__CUDA_ARCH__``, as in that pass), and
``CXX -dM -E -x c++ /dev/null`` the host compiler's predefined macros.
:func:`view` combines both into a :class:`CompilerView`, handed to clang as
``-undef`` plus one ``-D`` per macro.
"""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
from dataclasses import dataclass
from typing import Sequence

from ..backend.toolchain import host_compiler_path, nvcc_path_or_none
from ..platforms import preprocessor_flags
from ..errors import ToolchainError
from ..store.files import compiler_environment, content_key, remembered

__all__ = ["CompilerView", "inference_flags", "changes_macros", "TYPE_FLAGS", "view", "macro_flags", "parse_dm",
           "forget"]

#: The nvcc flags of the build that change the host pass's macros (see
#: :func:`kernix.backend.flags.compile_flags`): ``--expt-relaxed-constexpr``
#: defines ``__CUDACC_RELAXED_CONSTEXPR__``, ``--extended-lambda``
#: ``__CUDACC_EXTENDED_LAMBDA__``.
NVCC_BUILD_FLAGS = ("--expt-relaxed-constexpr", "--extended-lambda")


@dataclass(frozen=True)
class CompilerView:
    """The predefined state of one compiler for one language standard: ``macros``
    (``(name, value)`` in order, a name may carry parameters), ``include_dirs``
    (``-I``), ``system_dirs`` (``-isystem``) and ``forced_includes``.
    """

    macros: tuple[tuple[str, str], ...]
    include_dirs: tuple[str, ...] = ()
    system_dirs: tuple[str, ...] = ()
    forced_includes: tuple[str, ...] = ()

    def defined(self, name: str) -> str | None:
        """The value of macro ``name``, or ``None`` when it is not predefined."""
        for key, value in self.macros:
            if key == name or key.startswith(name + "("):
                return value
        return None


def _run(argv: list[str]) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None


def _kind(prefix: str, parts: tuple[str, ...]) -> str:
    """A file-name-safe memo kind that also identifies ``parts``."""
    return f"{prefix}-{content_key(list(parts))[:16]}"


def parse_dm(text: str) -> list[tuple[str, str]]:
    """``#define NAME VALUE`` lines (``-dM`` output) as ``(NAME, VALUE)`` pairs."""
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        if not line.startswith("#define "):
            continue
        rest = line[len("#define "):]
        depth = 0
        for i, ch in enumerate(rest):  # a function-like name ends after its ')'
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            elif ch == " " and depth == 0:
                out.append((rest[:i], rest[i + 1:]))
                break
        else:
            out.append((rest, ""))
    return out


def host_macros(cxx: str, flags: tuple[str, ...] = ()) -> tuple[tuple[str, str], ...] | None:
    """The macros ``cxx`` predefines for C++ with ``flags``; ``None`` when it could not be run."""

    def ask() -> list[list[str]] | None:
        proc = _run([cxx, "-dM", "-E", "-x", "c++", *flags, os.devnull])
        if proc is None or proc.returncode != 0:
            return None
        return [list(p) for p in parse_dm(proc.stdout)]

    found = remembered(_kind("cxx-macros", flags), cxx, ask)
    return None if found is None else tuple((str(k), str(v)) for k, v in found)


def _host_pass_line(stderr: str) -> list[str] | None:
    """The host preprocessing command in ``nvcc --dryrun`` output, split."""
    for line in stderr.splitlines():
        if not line.startswith("#$ "):
            continue
        argv = shlex.split(line[3:])
        if "-E" in argv and "-D__CUDACC__" in argv and not any(a.startswith("-D__CUDA_ARCH__=") for a in argv):
            return argv
    return None


def nvcc_host_pass(nvcc: str, cxx: str, std: str = "c++17") -> dict[str, list[str]] | None:
    """The macro flags, include, system and forced-include lists of nvcc's host
    pass, read from ``nvcc --dryrun``; ``None`` when nvcc could not be run.
    """

    def ask() -> dict[str, list[str]] | None:
        proc = _run([nvcc, f"-ccbin={cxx}", f"-std={std}", *NVCC_BUILD_FLAGS, "--dryrun",
                     "-c", "kernix_probe.cu", "-o", "kernix_probe.o"])
        if proc is None or proc.returncode != 0:
            return None
        argv = _host_pass_line(proc.stderr)
        return None if argv is None else _split_host_pass(argv)

    return remembered(_kind("nvcc-host-pass", (cxx, std)), nvcc, ask)


def _split_host_pass(argv: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"macro_flags": [], "include_dirs": [], "system_dirs": [], "forced_includes": []}
    it = iter(argv[1:])
    for arg in it:
        if arg in ("-I", "-isystem", "-include"):
            value = next(it, "")
            key = {"-I": "include_dirs", "-isystem": "system_dirs", "-include": "forced_includes"}[arg]
            out[key].append(os.path.normpath(value) if arg != "-include" else value)
        elif arg.startswith("-I"):
            out["include_dirs"].append(os.path.normpath(arg[2:]))
        elif arg.startswith(("-D", "-U")) or arg in ("-m64", "-m32"):
            out["macro_flags"].append(arg)
    return out


def inference_flags(
    include_dirs: Sequence[str], extra_cflags: Sequence[str], optimization_level: int, fast_math: bool
) -> tuple[str, ...]:
    """What inference must see of a build's flags: include directories (user paths
    first), defines, undefines, forced includes, the standard, then the
    code-generation flags that change predefined macros (:func:`changes_macros`).
    """
    build = [f"-O{optimization_level}", *(["-ffast-math"] if fast_math else []), *extra_cflags]
    codegen = tuple(f for f in build if changes_macros(f))
    return tuple(f"-I{d}" for d in include_dirs) + preprocessor_flags(extra_cflags) + codegen


def changes_macros(flag: str) -> bool:
    """Whether ``flag`` can change the host compiler's predefined macros (``-O3``,
    ``-ffast-math``, ``-march=``, ``-fopenmp``, ``-pthread``...); clang sees only
    those that also change types (:data:`TYPE_FLAGS`).
    """
    return flag.startswith(("-O", "-f", "-m", "-pthread"))


#: The code-generation flags that change how the compiler types a declaration:
#: the signedness of plain ``char`` (``char c`` is an ``int8`` or a ``uint8``
#: attribute) and the size of enums and ``wchar_t``.  clang must see them
#: too (as well as taking their macros), or inference would type a parameter otherwise than the build.
TYPE_FLAGS = frozenset({
    "-fsigned-char", "-fno-signed-char", "-funsigned-char", "-fno-unsigned-char",
    "-fshort-enums", "-fno-short-enums", "-fshort-wchar", "-fno-short-wchar",
})


def _std_of(flags: tuple[str, ...]) -> str:
    """The language standard the build uses: the last ``-std=`` of ``flags``, else C++17."""
    std = "c++17"
    for f in flags:
        if f.startswith("-std="):
            std = f[len("-std="):]
    return std


@functools.lru_cache(maxsize=None)
def _view(language: str, std: str, codegen: tuple[str, ...], cxx: str, nvcc: str | None,
          _environment: tuple[tuple[str, str | None], ...]) -> CompilerView | None:
    """:func:`view` of compilers ``cxx`` and ``nvcc``, remembered per value of
    the variables that change what they answer."""
    if language != "cuda":
        macros = host_macros(cxx, (f"-std={std}", *codegen))
        return None if macros is None else CompilerView(macros)
    if nvcc is None:
        return None
    host = nvcc_host_pass(nvcc, cxx, std)
    if host is None:
        return None
    macros = host_macros(cxx, (f"-std={std}", *host["macro_flags"], *codegen))
    if macros is None:
        return None
    return CompilerView(
        macros,
        include_dirs=tuple(host["include_dirs"]),
        system_dirs=tuple(host["system_dirs"]),
        forced_includes=tuple(host["forced_includes"]),
    )


def view(language: str, flags: tuple[str, ...] = ()) -> CompilerView | None:
    """The predefined state of the compiler that builds ``language`` sources with
    ``flags``; ``None`` when it is missing or could not be asked (the parse then
    uses clang's own view).
    """
    try:
        cxx = host_compiler_path()
    except ToolchainError:
        return None
    nvcc = nvcc_path_or_none() if language == "cuda" else None
    return _view(language, _std_of(flags), tuple(f for f in flags if changes_macros(f)), cxx, nvcc,
                 tuple(compiler_environment().items()))


def macro_flags(v: CompilerView) -> list[str]:
    """clang flags that replace its predefined macros with ``v``'s: ``-undef`` and one ``-D`` each."""
    return ["-undef", *(f"-D{name}={value}" for name, value in v.macros)]


def forget() -> None:
    """Forget the views this process computed (the on-disk memo stays)."""
    _view.cache_clear()
