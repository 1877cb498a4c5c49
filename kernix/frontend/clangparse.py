"""Parsing a translation unit with libclang the way the real compiler sees it.

* C++17 with the host's libstdc++ (``-nostdinc++`` plus the directories
  ``g++ -v`` reports): libclang-ng's bundled libc++ clashes with glibc.
* The compiler's view (:mod:`kernix.frontend.compiler_view`): ``-undef`` plus
  its predefined macros and include order. CUDA is parsed as C++ with
  nvcc's host-pass macros and forced ``cuda_runtime.h`` (the prelude), since
  clang's CUDA mode rejects the toolkit's own headers; the execution space
  keywords leave ``annotate`` markers. Non-fatal errors inside toolchain
  headers are dropped. Without nvcc, clang's CUDA mode and a stub prelude
  are used.
* The prelude and the file's leading ``#include`` lines are precompiled
  (:mod:`kernix.frontend.pch`).
* Function bodies are skipped: only signatures matter.
"""

from __future__ import annotations

import atexit
import ctypes
import difflib
import functools
import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from ..backend.toolchain import check_host_compiler, cuda_include_dirs, host_compiler_path, jax_ffi_include_dir
from ..store.files import compiler_environment, FileStat, remembered
from ..errors import SourceError, ToolchainError
from ..interface import running_command
from ..paths import cache_root, include_dir
from . import compiler_view, pch
from .pch import is_under, leading, without_leading
from .versions import merge_versions, read_versions

__all__ = ["ParseOptions", "parse", "parse_flags", "prelude_text", "parsed_versions", "error_diagnostics",
           "skipped_lines", "dependencies", "in_file", "SPACE_ANNOTATIONS", "clang_identity",
           "ffi_include_dir", "host_cxx_include_dirs"]


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
    meant = _shipped_header_like(header)
    if meant is not None:
        return (f"; did you mean \"{meant}\"? kernix ships that header, always on the include path: "
                f"write `#include \"{meant}\"`")
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


def _shipped_header_like(header: str) -> str | None:
    """The header kernix ships whose name ``header`` misspells (``kernix/comon.h``), if one is close."""
    try:
        root = include_dir()
    except ToolchainError:
        return None
    shipped = [p.relative_to(root).as_posix() for p in root.rglob("*.h")]
    return next(iter(difflib.get_close_matches(header, shipped, n=1, cutoff=0.8)), None)


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
    return lib


def in_file(cursor: Any, path: str) -> bool:
    """Whether ``cursor``'s expansion location is in ``path``, by file name, since
    ``clang_Location_isFromMainFile`` is false for macro-expanded declarations.
    """
    loc = cursor.location
    if _lib().clang_Location_isFromMainFile(loc):
        return True
    if loc.is_in_system_header:
        return False
    f = loc.file
    return f is not None and os.path.abspath(f.name) == path


def skipped_lines(tu: Any, path: str) -> set[int]:
    """The lines of ``path`` the preprocessor skipped (inactive ``#if`` regions).

    ``tu`` must have been parsed with ``detailed=True``.
    """
    lib = _lib()
    lst = lib.clang_getAllSkippedRanges(tu)
    out: set[int] = set()
    try:
        for i in range(lst.contents.count):
            rng = lst.contents.ranges[i]
            f = rng.start.file
            if f is not None and os.path.abspath(f.name) == path:
                out.update(range(rng.start.line, rng.end.line + 1))
    finally:
        lib.clang_disposeSourceRangeList(lst)
    return out


def dependencies(tu: Any, path: str) -> list[str]:
    """Absolute paths of every file ``tu`` read besides ``path`` and the prelude
    (those held by its precompiled prelude included)."""
    used = getattr(tu, "kernix_pch", None)  # (see kernix.frontend.clangparse.parse)
    seen: dict[str, None] = dict.fromkeys(v[0] for v in (used.versions if used else ()))
    for inc in tu.get_includes():
        name = inc.include.name
        if name == PRELUDE_PATH:
            continue
        name = os.path.abspath(name)
        if name != path:
            seen.setdefault(name, None)
    return list(seen)


def cindex() -> Any:
    """``clang.cindex`` with its native library loaded; a :class:`kernix.ToolchainError`
    saying how to install ``libclang-ng`` when it does not load.
    """
    try:
        import clang.cindex as ci

        ci.conf.lib  # loads libclang.so: a LibclangError when it is missing or does not load
        return ci
    except Exception as exc:  # ImportError, clang.cindex.LibclangError, OSError from ctypes
        where = getattr(sys.modules.get("clang"), "__file__", None)
        found = f" (the clang package imported from {os.path.dirname(where)} is not usable)" if where else ""
        raise ToolchainError(
            f"inferring signatures needs libclang, from the libclang-ng package{found}: "
            f"{type(exc).__name__}: {str(exc).strip() or 'no detail'}. Install it into this Python with "
            f"`{sys.executable} -m pip install --force-reinstall libclang-ng`; if another package provides "
            "clang.cindex here (the `clang` or `libclang` packages), `pip uninstall clang libclang` first."
        ) from exc


CUDA_PRELUDE_REAL = """\
// kernix inference prelude: what nvcc puts in front of every .cu file.
#include <cuda_runtime.h>
"""

# Used when no CUDA headers are installed: enough for signatures to parse.
CUDA_PRELUDE_STUB = """\
// kernix inference prelude (no CUDA headers found): stand-ins for signatures.
#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __managed__ __attribute__((managed))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __device_builtin__
#define __cudart_builtin__
#define CUDART_CB
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef enum cudaError { cudaSuccess = 0 } cudaError_t;
struct __half { unsigned short __x; };
struct __half2 { __half x, y; };
typedef __half half;
struct __nv_bfloat16 { unsigned short __x; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __nv_bfloat16 nv_bfloat16;
struct uint3 { unsigned int x, y, z; };
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
};
extern const uint3 threadIdx, blockIdx;
extern const dim3 blockDim, gridDim;
extern const int warpSize;
cudaError_t cudaGetLastError();
const char* cudaGetErrorName(cudaError_t);
const char* cudaGetErrorString(cudaError_t);
"""


# After nvcc's forced includes: the execution-space keywords also leave an
# ``annotate`` attribute that inference reads (``__global__`` kernels and
# ``__device__``-only functions cannot be exported); they keep their meaning.
SPACE_MARKERS = """\
#undef __global__
#define __global__ __attribute__((global, annotate("kernix.cuda.global")))
#undef __device__
#define __device__ __attribute__((device, annotate("kernix.cuda.device")))
#undef __host__
#define __host__ __attribute__((host, annotate("kernix.cuda.host")))
"""

#: The ``annotate`` texts :data:`SPACE_MARKERS` attaches.
SPACE_ANNOTATIONS = {"kernix.cuda.global": "global", "kernix.cuda.device": "device", "kernix.cuda.host": "host"}


#: The virtual file name of the CUDA prelude (never written to disk).
PRELUDE_PATH = "/__kernix__/cuda_prelude.h"

@dataclass(frozen=True)
class ParseOptions:
    """Everything that decides how a file is parsed: the ``language``, the user's
    absolute ``include_dirs``, ``defines`` and the build's preprocessor ``flags``
    (paths absolute, after those).
    """

    language: str
    include_dirs: tuple[str, ...] = ()
    defines: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()


def host_cxx_include_dirs() -> tuple[str, ...]:
    """The build's host C++ compiler's ``#include <...>`` directories (``-E -x c++ - -v``),
    remembered per compiler and :data:`~kernix.store.files.COMPILER_ENVIRONMENT`;
    empty without a host compiler.
    """
    try:
        cxx = host_compiler_path()
    except ToolchainError:
        return ()
    return _host_cxx_include_dirs(cxx, tuple(compiler_environment().items()))


@functools.lru_cache(maxsize=None)
def _host_cxx_include_dirs(cxx: str, _environment: tuple[tuple[str, str | None], ...]) -> tuple[str, ...]:

    def ask() -> list[str] | None:
        try:
            proc = subprocess.run(
                [cxx, "-E", "-x", "c++", "-std=c++17", "-", "-v"],
                input="", capture_output=True, text=True, timeout=60,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        dirs: list[str] = []
        inside = False
        for line in proc.stderr.splitlines():
            if line.startswith("#include <...> search starts here"):
                inside = True
            elif line.startswith("End of search list"):
                break
            elif inside and line.startswith(" "):
                path = line.strip().removesuffix(" (framework directory)")
                if os.path.isdir(path):
                    dirs.append(os.path.normpath(path))
        return dirs if inside else None  # no search list: not a compiler's answer, not remembered

    return tuple(remembered("cxx-includes", cxx, ask) or ())


@functools.lru_cache(maxsize=None)
def ffi_include_dir() -> str | None:
    """jaxlib's XLA FFI header directory (see :func:`kernix.backend.toolchain.jax_ffi_include_dir`)."""
    try:
        return jax_ffi_include_dir()
    except Exception:  # no jaxlib: sources that include ffi.h then fail to parse, loudly
        return None


def cuda_dirs() -> tuple[str, ...]:
    """The CUDA toolkit's include directories, as the nvcc found now has them."""
    return tuple(cuda_include_dirs())


@functools.lru_cache(maxsize=None)
def clang_identity() -> str:
    """Identifies the libclang build (``path:inode:size:mtime_ns:ctime_ns``), without loading it."""
    spec = importlib.util.find_spec("clang")
    parts = []
    for base in (spec.submodule_search_locations or []) if spec else []:
        lib = os.path.join(base, "native", "libclang.so")
        if os.path.exists(lib):
            parts.append(":".join(map(str, [lib, *FileStat.of(lib)])))
    return ",".join(parts)


def system_dirs(options: ParseOptions) -> tuple[str, ...]:
    """Directories whose headers are not the user's, as the build's command line orders them: jaxlib's FFI
    headers, the compiler's own system dirs (nvcc: cccl), the host C++ library, then CUDA's."""
    ffi = ffi_include_dir()
    view = compiler_view_of(options)
    dirs = [*([ffi] if ffi else []), *(view.system_dirs if view is not None else ()), *host_cxx_include_dirs()]
    if options.language == "cuda":
        dirs += [*cuda_dirs(), *(view.include_dirs if view is not None else ())]
    return tuple(dirs)


def compiler_view_of(options: ParseOptions) -> compiler_view.CompilerView | None:
    """The build compiler's view for ``options`` (``None``: fall back to clang's own).

    A CUDA source without CUDA headers on the machine gets no view: its
    parse uses the stub prelude instead.
    """
    if options.language == "cuda" and not cuda_dirs():
        return None
    return compiler_view.view(options.language, options.flags)


def parse_flags(options: ParseOptions) -> list[str]:
    """The libclang command line for ``options`` (without the file name), in the
    build's include order: user ``-I`` dirs, user flags, kernix's include dir, the
    compiler's own, jaxlib's FFI headers, the host C++ library.
    """
    view = compiler_view_of(options)
    if view is None and options.language == "cuda":
        args = ["-x", "cuda", "--cuda-host-only", "-nocudainc", "-nocudalib"]
    else:
        args = ["-x", "c++"]
    args += ["-std=c++17", "-Wno-unknown-attributes", "-fno-spell-checking", "-nostdinc++", "-ferror-limit=0"]
    if view is not None:
        args += compiler_view.macro_flags(view)
    for d in options.defines:
        args.append(f"-D{d}")
    for d in options.include_dirs:
        args.append(f"-I{d}")
    # The view has the code-generation flags' macros; clang itself sees those that change types.
    args += [f for f in options.flags if not compiler_view.changes_macros(f) or f in compiler_view.TYPE_FLAGS]
    args.append(f"-I{include_dir()}")
    added = list(view.include_dirs) if view is not None else []
    args += [f"-I{d}" for d in added]
    for d in system_dirs(options):
        if d not in added:
            args += ["-isystem", d]
            added.append(d)
    if options.language == "cuda":
        args += ["-include", PRELUDE_PATH]
    return args


def prelude_text(options: ParseOptions) -> str | None:
    """The CUDA prelude's text (``None`` for C++ sources)."""
    if options.language != "cuda":
        return None
    view = compiler_view_of(options)
    if view is not None:
        lines = ["// kernix inference prelude: what nvcc's host pass puts in front of every .cu file."]
        lines += [f"#include <{h}>" for h in view.forced_includes]
        return "\n".join(lines) + "\n" + SPACE_MARKERS
    if any(os.path.isfile(os.path.join(d, "cuda_runtime.h")) for d in cuda_dirs()):
        return CUDA_PRELUDE_REAL
    return CUDA_PRELUDE_STUB


@functools.lru_cache(maxsize=1)
def _index() -> Any:
    """The libclang index every parse uses, disposed of when the interpreter
    exits: left to the interpreter's last clean-up, its finalizer may run
    after libclang's bindings are gone and print an ignored exception."""
    index = cindex().Index.create()
    atexit.register(_index.cache_clear)
    return index


def _quote_dirs(path: str, options: ParseOptions) -> list[str]:
    """Where a ``"..."`` include of ``path`` is looked for, in the compiler's order."""
    dirs = [os.path.dirname(path), *options.include_dirs]
    it = iter(options.flags)
    for flag in it:
        for opt in ("-iquote", "-I"):
            if flag == opt:
                dirs.append(next(it, ""))
            elif flag.startswith(opt) and len(flag) > len(opt):
                dirs.append(flag[len(opt):])
    dirs.append(str(include_dir()))
    return [d for d in dirs if d]


def parse(path: str, options: ParseOptions, *, detailed: bool = False, raw: bytes | None = None,
          same_as: Any = None) -> Any:
    """The ``clang.cindex.TranslationUnit`` of the file ``path`` (absolute; its bytes ``raw`` if already
    read), parsed with ``options``, with the detailed preprocessing record if ``detailed`` (for
    :func:`skipped_lines`).

    The prelude is precompiled once per toolchain, flag set and include list
    under the cache root (a stale or unreadable PCH is rebuilt once);
    ``tu.kernix_pch`` holds it (a :class:`~kernix.frontend.pch.Prelude`, for :func:`parsed_versions`).
    ``same_as``, an earlier parse of the file in the same inference, lends its
    precompiled prelude without its headers being checked again.
    """
    ci = cindex()
    flags = parse_flags(options)
    prelude = prelude_text(options)
    opts = ci.TranslationUnit.PARSE_SKIP_FUNCTION_BODIES
    if detailed:
        opts |= ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD
    if raw is None:
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as exc:
            raise SourceError(f"cannot read this file: {exc.strerror or exc}", file=path) from None
    try:
        if prelude is not None and compiler_view_of(options) is not None:
            opening = leading(raw, _quote_dirs(path, options))
            full = prelude + "".join(inc.line + "\n" for inc in opening)
            # The PCH holds the opening includes: the file is parsed without them (kernix.frontend.pch).
            main = [(path, without_leading(raw, opening))]
            assert flags[-2:] == ["-include", PRELUDE_PATH], flags  # (parse_flags closes with it)
            base = flags[:-2]
            earlier = getattr(same_as, "kernix_pch", None)
            for rebuild in (False, True):
                if earlier is not None and not rebuild and earlier.text == full:  # (checked for that parse)
                    found = earlier
                else:
                    found = pch.prelude_pch(_index(), cache_root(), base, full, PRELUDE_PATH, system_dirs(options),
                                            clang_identity(), rebuild=rebuild)
                if found is None:
                    break
                try:
                    args = [*base, "-include-pch", found.path, "-Xclang", "-fallow-pch-with-compiler-errors"]
                    tu = _index().parse(path, args=args, unsaved_files=main, options=opts)
                except ci.TranslationUnitLoadError:  # the PCH removed or refused: build it again
                    continue
                if not any(d.severity >= 4 and ("precompiled" in d.spelling or "PCH" in d.spelling)
                           for d in tu.diagnostics):  # (else clang refused the PCH)
                    tu.kernix_pch = found
                    return tu
        # The bytes read are the ones parsed (and the ones a cached result is keyed by).
        unsaved = [(PRELUDE_PATH, prelude)] if prelude is not None else []
        return _index().parse(path, args=flags, unsaved_files=[*unsaved, (path, raw)], options=opts)
    except ci.TranslationUnitLoadError as exc:
        raise SourceError(f"libclang could not parse this file ({exc})", file=path) from None


def parsed_versions(tu: Any, path: str) -> list[list[Any]] | None:
    """The version of every file ``tu`` (a parse of ``path``) read besides
    ``path`` itself: the headers its precompiled prelude holds, as the PCH's
    build read them, and the others as this parse read them
    (:func:`kernix.frontend.versions.read_versions`); ``None`` when one of
    them changed while it was being read."""
    used = getattr(tu, "kernix_pch", None)
    return merge_versions(used.versions if used else [], read_versions(tu, skip=(path, PRELUDE_PATH)))
