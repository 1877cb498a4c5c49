"""``build_module``: compile sources into a self-contained prebuilt module directory.

The steps are the JIT pipeline's (libclang inference, code generation, the
ninja build), run in a temporary work directory; only the library and its
manifest (:mod:`kernix.prebuilt.format`) are written to the output directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from .. import __version__
from ..backend import codegen, toolchain
from ..backend.arch import arch_key
from ..backend.ninja import compile_library
from ..compilation import build_config, exported_units
from ..errors import KernixError, OptionError, PrebuiltError, SourceNotFoundError
from ..interface import running_command
from ..platforms import LANGUAGES_BY_EXTENSION, Language, language_of, unknown_extension
from ..loaders import default_module_name
from ..paths import check_source, directory_problem, printable, repeated_source
from ..request import make_request
from ..store.files import file_digest
from .format import PrebuiltManifest, ffi_api_of, headers_root

__all__ = ["build_module"]


def _arguments_problem(paths: Sequence[str], language: str | None, arch: object, output: str) -> str | None:
    """Why ``paths``, ``language``, ``arch`` and ``output`` cannot be one
    module's sources, language, GPU architectures and directory, or ``None``;
    worded for the interface in use (``language='cuda'`` or ``--cuda``,
    ``output_dir`` or ``-o``) and naming the paths as given.  Missing sources
    are checked before."""
    command_line = running_command() is not None
    flags = "--cuda or --cpp" if command_line else "language='cuda' or language='cpp'"
    if language is None:
        found = set()
        for path in paths:
            found.add(LANGUAGES_BY_EXTENSION.get(os.path.splitext(path)[1].lower()))
            if None in found:
                return unknown_extension(path, f"pass {flags}")
        if len(found) > 1:
            return f"the sources mix CUDA and C++ files ({', '.join(paths)}): build them as one language with {flags}"
        language = found.pop()
    elif language not in ("cuda", "cpp"):
        return f"language must be 'cuda' or 'cpp', not {language!r}"
    if language == "cpp" and arch:
        return f"{'--arch' if command_line else 'arch'} is for CUDA builds; a C++ (CPU) module has no GPU architecture"
    problem = repeated_source(paths)
    if problem is not None:
        return problem
    problem = directory_problem(os.path.expanduser(output))
    if problem is None:
        return None
    remedy = "give -o a directory" if command_line else "choose another output directory"
    return f"cannot write the module into {output}: {problem}; {remedy} (a missing one is created)"


def source_headers(sources: Sequence[Path], dependencies: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``(relative path, sha256)`` of each file in ``dependencies`` within a source's
    directory, not a source itself, relative to :func:`headers_root`: a module
    moved to another machine names no path of this one.
    """
    own = {os.path.abspath(s) for s in sources}
    dirs = tuple(os.path.join(os.path.dirname(p), "") for p in own)
    root = headers_root(sources)
    found = {}
    for dep in dependencies:
        path = os.path.abspath(dep)
        if path not in own and path.startswith(dirs):
            found[os.path.relpath(path, root).replace(os.sep, "/")] = file_digest(path)
    return tuple(sorted(found.items()))


def _fatbin_archs(library: Path) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """``(sass, ptx)`` architectures that ``cuobjdump`` finds in ``library``, or
    ``None`` when cuobjdump is not available or fails."""
    try:  # (KernixError: no nvcc; OSError: no cuobjdump beside it)
        tool = Path(toolchain.find_nvcc().path).with_name("cuobjdump")
        out = subprocess.run([str(tool), "--list-elf", "--list-ptx", str(library)],
                             capture_output=True, text=True, timeout=120)
    except (KernixError, OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    sass = sorted(set(re.findall(r"\.(sm_\d+[af]?)\.cubin", out.stdout)), key=arch_key)
    ptx = sorted({"compute_" + a[3:] for a in re.findall(r"\.(sm_\d+[af]?)\.ptx", out.stdout)},
                 key=lambda a: arch_key("sm_" + a[8:]))
    return tuple(sass), tuple(ptx)


def _publish(built: Path, manifest: PrebuiltManifest) -> None:
    """Put the library (copied atomically: no temporary file is left), then the manifest naming it, into the
    module directory, and only then remove the library of the module built there before: a reader finds the
    old manifest with its library, or the new one with its own."""
    output = manifest.directory
    try:
        previous = PrebuiltManifest.read(output).library
    except PrebuiltError:
        previous = None
    tmp = output / f".{manifest.library}.{os.getpid()}.tmp"
    try:
        shutil.copyfile(built, tmp)
        os.chmod(tmp, 0o755)
        os.replace(tmp, manifest.library_path)
        manifest.write()
    except OSError as exc:
        raise KernixError(
            f"cannot write the module into {output}: {exc.strerror or exc} ({exc.filename or output}). Free space "
            "there or choose another output directory, and build again."
        ) from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    if previous is not None and previous != manifest.library:
        with contextlib.suppress(OSError):
            (output / previous).unlink()


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Hold ``flock`` on ``directory`` itself (no lock file joins the module) while
    a module is published into it.
    """
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with contextlib.suppress(OSError):  # (NFS may refuse it: then builds that race may leave the other's library)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (releases the lock)


def build_module(
    sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    output_dir: str | os.PathLike[str],
    *,
    name: str | None = None,
    language: str | None = None,
    functions: Any = None,
    arch: str | Sequence[str] | None = None,
    include_dirs: Sequence[str] = (),
    defines: Sequence[str] = (),
    optimization_level: int = 3,
    use_fast_math: bool = False,
    extra_cflags: Sequence[str] = (),
    extra_ldflags: Sequence[str] = (),
    allow_cuda_graph: bool = True,
    workers: int | None = None,
    verbose: bool = False,
) -> PrebuiltManifest:
    """Compile ``sources`` into a prebuilt module in ``output_dir``.

    The directory then holds the library and ``kernix-prebuilt.json``, and
    :func:`kernix.load_prebuilt` loads it on a machine with no compiler.

    Parameters
    ----------
    sources : path or list of paths
        The C++ or CUDA files (each its own translation unit).
    output_dir : path
        Where the module is written (created if needed, with missing parent
        directories; a module built there before is replaced).
    name : str, optional
        The module name and default FFI target prefix (default: the file's
        stem, or the output directory's name for several files).
    language : {"cuda", "cpp"}, optional
        Default: from the files' extensions.
    functions : list or dict, optional
        As for the loaders: which functions to export (default: every ``// @BE`` one).
    arch : str or list of str, optional
        CUDA architectures, e.g. ``"sm_80,sm_90"`` or ``["80", "90"]``:
        machine code for each plus PTX of the newest.  Default:
        ``$KERNIX_CUDA_ARCH_LIST``, ``$KERNIX_CUDA_ARCH``, else this machine's GPU.
    include_dirs : list of str
        Include directories (``-I``).
    defines : list of str
        Macros, ``NAME`` or ``NAME=VALUE`` (``-D``).
    optimization_level : int
        ``-O<n>`` (0-3).
    use_fast_math : bool
        ``--use_fast_math`` / ``-ffast-math``.
    extra_cflags, extra_ldflags : list of str
        More compiler / linker flags.
    allow_cuda_graph : bool
        Mark the CUDA handlers command-buffer compatible.
    workers : int, optional
        Parallel compile jobs (default: ``$KERNIX_JOBS``, else the CPUs this
        process may run on).
    verbose : bool
        Print every compiler command.

    Returns
    -------
    PrebuiltManifest
        What was written.

    Raises
    ------
    kernix.InferenceError, kernix.CompilationError, kernix.ToolchainError
        As a JIT load would.
    kernix.SourceNotFoundError
        Before any work, for a source that is not a file.
    kernix.OptionError
        Before any work, for a source given twice, an extension that names no
        language, CUDA and C++ sources without ``language``, ``arch`` for C++
        sources, or an ``output_dir`` that cannot be a directory (a file in its
        place or in its path).
    """
    paths = [os.fspath(sources)] if isinstance(sources, (str, os.PathLike)) else list(map(os.fspath, sources))
    if not paths:
        raise OptionError("build_module needs at least one source file")
    srcs = [Path(s).expanduser().absolute() for s in paths]
    for s in srcs:
        if not s.exists():
            raise SourceNotFoundError(f"source file not found: {printable(s)}")
        check_source(s)  # a regular file (not a directory, a FIFO or a device), with a UTF-8 name
    problem = _arguments_problem(paths, language, arch, os.fspath(output_dir))
    if problem is not None:
        raise OptionError(problem)
    output = Path(output_dir).expanduser().absolute()
    lang: Language = language or language_of(paths[0])
    sources = tuple((s.name, file_digest(s)) for s in srcs)  # before the build: an edit during it shows as stale
    if name is None:
        name = default_module_name(srcs[0] if len(srcs) == 1 else output)
    cflags = [*(f"-D{d}" for d in defines), *extra_cflags]
    options: dict[str, Any] = {
        "extra_cuda_cflags" if lang == "cuda" else "extra_cflags": cflags,
        "extra_ldflags": list(extra_ldflags),
        "extra_include_paths": list(include_dirs),
        "optimization_level": optimization_level,
        "use_fast_math": use_fast_math,
        "ninja_workers": workers,
        "verbose": verbose,
    }
    if lang == "cuda":
        options["compute_capability"] = arch
        options["allow_cuda_graph"] = allow_cuda_graph
    request = make_request(name, srcs, lang, functions, options)
    config = build_config(request)

    exported = exported_units(request)  # (the host compiler checked first, as for a load)
    all_fns = [e for _, es in exported for e in es]
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KernixError(f"cannot create the output directory {output}: {exc.strerror or exc}") from None
    compilers = [toolchain.find_host_compiler().identity]
    if config.platform == "cuda":
        compilers.append(toolchain.find_nvcc().identity)
    with tempfile.TemporaryDirectory(prefix=f"kernix-build-{name}-") as work:
        result = compile_library(Path(work), exported, config, workers=workers, verbose=verbose, name=name)
        built = result.so_path
        digest = file_digest(built)
        sass, ptx = config.archs, ((config.ptx_arch,) if config.ptx_arch else ())
        if config.platform == "cuda":
            sass, ptx = _fatbin_archs(built) or (sass, ptx)
        manifest = PrebuiltManifest(
            directory=output,
            name=name,
            platform=config.platform,
            library=f"{name}-{digest[:12]}.so",
            library_sha256=digest,
            library_size=built.stat().st_size,
            functions=tuple(e.spec for e in all_fns),
            handlers={e.spec.name: codegen.handler_symbol(e) for e in all_fns},
            kernix=__version__,
            jaxlib=toolchain.jaxlib_version(),
            ffi_api=ffi_api_of(toolchain.jax_ffi_include_dir()),
            compilers=tuple(compilers),
            sass=tuple(sass),
            ptx=tuple(ptx),
            sources=sources,
            headers=source_headers(srcs, result.dependencies),
            created=time.time(),
            options={
                "language": lang,
                "optimization_level": optimization_level,
                "use_fast_math": use_fast_math,
                "defines": list(defines),
                "include_dirs": [str(Path(d).name) for d in include_dirs],
                "allow_cuda_graph": config.allow_cuda_graph,
            },
        )
        with _locked(output):
            _publish(built, manifest)
    return manifest
