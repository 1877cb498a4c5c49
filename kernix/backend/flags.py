"""How a module is compiled: :class:`BuildConfig` and the compiler and linker
argument lists (:func:`compile_flags`).

Kept apart from the ninja driver (:mod:`kernix.backend.ninja`) because a warm
load needs the flags (they enter the cache key) but nothing that builds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import KernixError
from ..paths import include_dir
from . import arch, toolchain

__all__ = ["BuildConfig", "compile_flags"]


@dataclass(frozen=True)
class BuildConfig:
    """Everything that decides how a module is compiled: the ``platform`` (user
    code by nvcc or the host compiler), ``-O<n>``, fast math, the flags and
    include directories in order, ``arch`` (``sm_XY`` or ``sm_80,sm_90``, see
    :attr:`archs`) and ``allow_cuda_graph``.
    """

    platform: str
    optimization_level: int = 3
    use_fast_math: bool = False
    extra_cflags: tuple[str, ...] = ()
    extra_ldflags: tuple[str, ...] = ()
    include_dirs: tuple[str, ...] = ()
    arch: str | None = None
    allow_cuda_graph: bool = True

    def __post_init__(self) -> None:
        if self.platform not in ("cuda", "cpu"):
            raise KernixError(f"platform must be 'cuda' or 'cpu', not {self.platform!r}")
        if not isinstance(self.optimization_level, int) or not 0 <= self.optimization_level <= 3:
            raise KernixError(f"optimization_level must be an int from 0 to 3, not {self.optimization_level!r}")
        if self.platform == "cuda" and not self.arch:
            raise KernixError("a CUDA build needs an architecture (arch='sm_90', say)")

    @property
    def archs(self) -> tuple[str, ...]:
        """The architectures machine code is built for, oldest first (empty for CPU builds)."""
        return arch.normalize_arch_list(self.arch) if self.arch else ()

    @property
    def ptx_arch(self) -> str | None:
        """The virtual architecture whose PTX is embedded: the newest one, so
        newer GPUs can still compile the module at load time."""
        return "compute_" + self.archs[-1][3:] if self.arch else None


def _cuda_lib_dirs() -> list[str]:
    home = toolchain.find_cuda_home()
    if home is None:
        return []
    cands = [home / "lib64", home / "lib", *sorted((home / "targets").glob("*/lib"))]
    return [str(d) for d in cands if (d / "libcudart_static.a").is_file()]


def compile_flags(config: BuildConfig) -> dict[str, list[str]]:
    """The compiler and linker argument lists (without inputs and outputs).

    Returns a dict with ``user`` (the shim units), ``handlers`` and ``link``;
    each list starts with the executable.
    """
    cxx = toolchain.find_host_compiler().path
    opt = f"-O{config.optimization_level}"
    host = [cxx, f"-std={toolchain.CXX_STANDARD}", opt, "-fPIC", "-fvisibility=hidden"]
    # kernix's own headers, then jaxlib's FFI headers: always after the user's.
    own = [f"-I{include_dir()}", "-isystem", toolchain.jax_ffi_include_dir()]
    # Handlers depend on the specs alone: they never see the user's include paths.
    handlers = [*host, *own]
    # An undefined symbol is a link error naming it, not a dlopen failure later.
    link = [cxx, "-shared", "-Wl,--exclude-libs,ALL", "-Wl,--no-undefined"]
    if config.platform == "cuda":
        nvcc = toolchain.find_nvcc().path
        # Machine code for every architecture, PTX of the newest only; one
        # architecture gives the single flag `code=[compute_XY,sm_XY]`.
        archs = config.archs
        gencode = [f"--generate-code=arch=compute_{a[3:]},code=sm_{a[3:]}" for a in archs[:-1]]
        newest = archs[-1][3:]
        gencode.append(f"--generate-code=arch=compute_{newest},code=[compute_{newest},sm_{newest}]")
        user = [
            nvcc, f"-ccbin={cxx}",  # one host compiler (and C++ ABI) for every object
            f"-std={toolchain.CXX_STANDARD}", opt, f"-Xptxas=-O{config.optimization_level}",
            *gencode,
            "-Xcompiler=-fPIC", "-Xcompiler=-fvisibility=hidden",
            "--expt-relaxed-constexpr", "--extended-lambda",
        ]
        if config.use_fast_math:
            user.append("--use_fast_math")
        link += [f"-L{d}" for d in _cuda_lib_dirs()]
        link_tail = ["-l:libcudart_static.a", "-ldl", "-lrt", "-lpthread"]
    else:
        user = list(host)
        if config.use_fast_math:
            user.append("-ffast-math")
        link_tail = []
    # The user's include directories and flags, in order, before kernix's own: one search order for build and
    # inference alike (see :func:`kernix.frontend.compiler_view.inference_flags`).
    user += [*(f"-I{os.path.abspath(d)}" for d in config.include_dirs), *config.extra_cflags, *own]
    link_tail += list(config.extra_ldflags)
    return {"user": user, "handlers": handlers, "link": link + ["@IN@"] + link_tail}
