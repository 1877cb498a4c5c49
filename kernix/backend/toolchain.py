"""Finding the tools a build needs: nvcc, the host C++ compiler, the CUDA
headers and jaxlib's FFI headers (the GPU architecture: :mod:`.arch`).

Every finder raises :class:`~kernix.errors.ToolchainError` with what to
install or set when it comes up empty.  A compiler's identity (path, version
banner, content SHA-256) is remembered per (path, size, mtime, ctime) so a
warm load neither runs nor reads a compiler.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from ..errors import ToolchainError
from ..paths import jaxlib_install
from ..store.files import FileStat, file_digest, remembered

__all__ = [
    "forget",
    "Compiler",
    "find_nvcc",
    "find_cuda_home",
    "find_host_compiler",
    "check_host_compiler",
    "host_compiler_path",
    "compiler_paths",
    "cuda_include_dirs",
    "cuda_cccl_include_dir",
    "nvcc_path_or_none",
    "jax_ffi_include_dir",
    "jaxlib_version",
]

NVCC_ENV = "KERNIX_NVCC"


class Compiler(NamedTuple):
    """A compiler executable and the identity string that enters cache keys."""

    path: str
    identity: str


def _compiler(path: str) -> Compiler:
    """The compiler at ``path``, whose identity is ``path``, its ``--version`` banner and the SHA-256 of its
    content, remembered per (path, stat)."""
    return Compiler(path, _identity_cached(path, FileStat.of(path)))


@functools.lru_cache(maxsize=None)
def _identity_cached(path: str, stat: FileStat) -> str:
    # The content hash tells apart two executables with one banner: a compiler
    # wrapper edited in place, a rebuilt compiler of the same version.
    def ask() -> str:
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            raise ToolchainError(f"could not run {path} --version: {exc}") from exc
        try:
            digest = file_digest(path)
        except OSError as exc:
            raise ToolchainError(f"could not read the compiler {path}: {exc.strerror or exc}") from exc
        return f"{path}\nsha256:{digest}\n{out.strip()}"

    return str(remembered("identity-v2", path, ask))


def _pip_nvcc() -> Path | None:
    """nvcc from the ``nvidia-cuda-nvcc`` wheel, if installed."""
    for site in sys.path:
        for sub in ("nvidia/cuda_nvcc/bin/nvcc", "nvidia/cu13/bin/nvcc", "nvidia/cu12/bin/nvcc"):
            cand = Path(site) / sub
            if cand.is_file() and os.access(cand, os.X_OK):
                return cand
    return None


def _nvcc_found() -> tuple[str, str]:
    """nvcc ``(as found, as used)``: only one found on ``PATH`` is used resolved.

    Remembered per value of the variables that decide it, so a process that
    changes ``$PATH`` or ``$CUDA_HOME`` finds the nvcc those now name."""
    return _nvcc_found_in(*(os.environ.get(v) for v in (NVCC_ENV, "CUDA_HOME", "CUDA_PATH", "PATH")))


@functools.lru_cache(maxsize=None)
def _nvcc_found_in(explicit: str | None, cuda_home: str | None, cuda_path: str | None,
                   _path: str | None) -> tuple[str, str]:
    if explicit:
        if not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
            raise ToolchainError(f"${NVCC_ENV}={explicit!r} is not an executable file")
        return (os.path.abspath(explicit),) * 2
    for home in (cuda_home, cuda_path):
        if home:
            cand = Path(home) / "bin" / "nvcc"
            if cand.is_file():
                return (str(cand),) * 2
    on_path = shutil.which("nvcc")
    if on_path:
        return on_path, os.path.realpath(on_path)
    pip = _pip_nvcc()
    if pip is not None:
        return (str(pip),) * 2
    raise ToolchainError(
        "nvcc was not found. Install the CUDA toolkit (or `pip install nvidia-cuda-nvcc`), "
        f"or point kernix at it with ${NVCC_ENV}=/path/to/nvcc or $CUDA_HOME."
    )


def nvcc_path_or_none() -> str | None:
    """nvcc's path as :func:`find_nvcc` finds it, or ``None`` when there is none."""
    try:
        return _nvcc_found()[1]
    except ToolchainError:
        return None


def find_nvcc() -> Compiler:
    """Find nvcc: ``$KERNIX_NVCC``, ``$CUDA_HOME``/``$CUDA_PATH``, ``PATH``, then
    the pip ``nvidia-cuda-nvcc`` package."""
    return _compiler(_nvcc_found()[1])


def find_cuda_home() -> Path | None:
    """The CUDA toolkit root (holding ``include/cuda_runtime.h``), or ``None``."""
    nvcc = nvcc_path_or_none()
    candidates = [Path(nvcc).parent.parent] if nvcc else []
    candidates += [Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    candidates.append(Path("/usr/local/cuda"))
    for home in candidates:
        if (home / "include" / "cuda_runtime.h").is_file():
            return home
    return None


def cuda_include_dirs() -> list[str]:
    """Include directories of the CUDA toolkit (empty when none is found)."""
    home = find_cuda_home()
    if home is None:
        return []
    dirs = [home / "include", *sorted((home / "targets").glob("*/include"))]
    return [str(d) for d in dirs if d.is_dir()]


def cuda_cccl_include_dir() -> str | None:
    """CUDA 13's ``include/cccl`` (CUB, Thrust, libcu++), which nvcc adds by itself; ``None`` before CUDA 13."""
    for d in cuda_include_dirs():
        cccl = os.path.join(d, "cccl")
        if os.path.isdir(os.path.join(cccl, "cub")):
            return cccl
    return None


def _host_compiler_found() -> str:
    """Where the host C++ compiler is found, symbolic links not resolved;
    remembered per value of ``$CXX`` and ``$PATH``."""
    return _host_compiler_found_in(os.environ.get("CXX"), os.environ.get("PATH"))


@functools.lru_cache(maxsize=None)
def _host_compiler_found_in(explicit: str | None, _path: str | None) -> str:
    if explicit:
        found = shutil.which(explicit)
        if not found:
            where = "an executable file" if os.sep in explicit else "an executable on PATH"
            raise ToolchainError(
                f"$CXX={explicit!r} is not {where}. Point $CXX at an installed C++17 compiler "
                "(e.g. CXX=g++), or unset it to use g++, c++ or clang++ from PATH."
            )
        return found
    for name in ("g++", "c++", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    raise ToolchainError(
        "no C++ compiler was found (tried $CXX, g++, c++, clang++). Install one, e.g. "
        "`apt-get install g++`, or set $CXX."
    )


def host_compiler_path() -> str:
    """Path of the host C++ compiler: ``$CXX``, then ``g++``, ``c++``, ``clang++``."""
    return os.path.realpath(_host_compiler_found())


def compiler_paths(cuda: bool) -> list[str]:
    """The compilers' paths for records: each as found and, where that is a
    symbolic link, also as resolved, so a re-pointed link is a changed file.
    Raises :class:`ToolchainError` when a compiler is not found.
    """
    found = [_host_compiler_found(), *([_nvcc_found()[0]] if cuda else [])]
    return list(dict.fromkeys(p for f in found for p in (f, os.path.realpath(f))))


#: The language standard every build uses (see :func:`kernix.backend.flags.compile_flags`).
CXX_STANDARD = "c++17"


def _cxx17_problem(path: str) -> str | None:
    """What is wrong with ``path`` as a C++17 compiler (``__cplusplus`` from ``-dM -E``), or ``None``."""
    argv = [path, "-x", "c++", f"-std={CXX_STANDARD}", "-dM", "-E", os.devnull]
    command = " ".join(argv)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=60,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"`{command}` could not run ({exc})"
    said = (proc.stderr.strip() or proc.stdout.strip())[-600:]
    if proc.returncode != 0:
        return f"`{command}` failed (exit code {proc.returncode}): {said or 'no output'}"
    for line in proc.stdout.splitlines():
        if line.startswith("#define __cplusplus "):
            value = line.split()[-1].rstrip("L")
            if value.isdigit() and int(value) >= 201703:
                return None
            return f"`{command}` reports __cplusplus {value}, older than C++17 (201703L)"
    return f"`{command}` did not list the predefined macros a C++ compiler lists (it printed: {said[:200] or 'nothing'})"


def check_host_compiler() -> None:
    """Make sure the host C++ compiler compiles C++17 (once per compiler file).

    Raises :class:`ToolchainError` naming the compiler and the fix, instead of the
    obscure failure a non-compiler (``CXX=/bin/true``) would lead to.
    """
    found = _host_compiler_found()
    path = os.path.realpath(found)
    problems: list[str] = []

    def ask() -> bool | None:
        problem = _cxx17_problem(path)
        if problem is None:
            return True
        problems.append(problem)
        return None  # not remembered: a fixed compiler is asked again

    if remembered("cxx17-check", path, ask):
        return
    origin = "$CXX" if os.environ.get("CXX") else "the first of g++, c++, clang++ on PATH"
    shown = found if found == path else f"{found} (-> {path})"
    raise ToolchainError(
        f"the host C++ compiler {shown}, from {origin}, is not a working C++17 compiler: "
        f"{problems[0] if problems else 'it gave no answer'}. kernix compiles with -std={CXX_STANDARD}: "
        "set $CXX to a C++17 compiler (g++ 7 or newer, clang++ 5 or newer), or install one "
        "(e.g. `apt-get install g++`)."
    )


def find_host_compiler() -> Compiler:
    """Find the host C++ compiler: ``$CXX``, then ``g++``, ``c++``, ``clang++``."""
    return _compiler(host_compiler_path())


@functools.lru_cache(maxsize=None)
def jax_ffi_include_dir() -> str:
    """jaxlib's own XLA FFI headers (always compile against the running jaxlib).

    Found next to the installed ``jaxlib`` without importing it (inference
    runs without jax), else asked from ``jax.ffi.include_dir()``.
    """
    spec = importlib.util.find_spec("jaxlib")
    for base in (spec.submodule_search_locations or []) if spec else []:
        candidate = os.path.join(base, "include")
        if os.path.isfile(os.path.join(candidate, "xla", "ffi", "api", "ffi.h")):
            return candidate
    import jax.ffi

    return str(jax.ffi.include_dir())


def jaxlib_version() -> str:
    """The running jaxlib's version string."""
    return jaxlib_install()[0]


def forget() -> None:
    """Forget what this process remembered about the toolchain (which nvcc and
    host compiler, their identities), so the next finder call looks again:
    after installing a compiler, or changing ``$CXX``/``$KERNIX_NVCC``."""
    for cached in (_nvcc_found_in, _host_compiler_found_in, _identity_cached):
        cached.cache_clear()
