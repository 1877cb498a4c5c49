"""The public loaders: ``load_cuda_inline``, ``load_cuda_file``, ``load_cuda_dir``,
``load_cpp_inline``, ``load_cpp_file`` and ``load_cpp_dir``.

Each one runs the same pipeline::

    sources -> cache key -> cache hit?  yes -> load the library, register
                                        no  -> lock, infer (libclang), generate,
                                               build (ninja), publish, load, register

A warm load (cache hit) runs no compiler and does not import libclang: the
specs are stored in the cache entry's manifest.
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import cache, codegen, registry, toolchain
from .build import BuildConfig, build_module, compile_flags
from .errors import (
    InferenceError,
    KernixError,
    RegistrationError,
    SourceError,
)
from .fileio import file_digest
from .module import CompiledModule
from .names import check_module_name, check_target_prefix
from .paths import cache_root
from .spec import FunctionSpec, Requested, check_spec_matches, normalize_functions

__all__ = [
    "load_cuda_inline",
    "load_cuda_file",
    "load_cuda_dir",
    "load_cpp_inline",
    "load_cpp_file",
    "load_cpp_dir",
]

Functions = None | Sequence[str] | Mapping[str, Sequence[str]]

CUDA_EXTENSIONS = (".cu",)
CPP_EXTENSIONS = (".cc", ".cpp", ".cxx")


def _defines_and_includes(flags: Sequence[str]) -> tuple[list[str], list[str]]:
    """The ``-D`` and ``-I`` options in user flags, for the inference parse."""
    defines: list[str] = []
    includes: list[str] = []
    it = iter(flags)
    for flag in it:
        for opt, bucket in (("-D", defines), ("-I", includes)):
            if flag == opt:
                value = next(it, None)
                if value is not None:
                    bucket.append(value)
            elif flag.startswith(opt):
                bucket.append(flag[2:])
    return defines, includes


def _infer(
    sources: Sequence[Path], functions: Requested | None, language: str,
    include_dirs: Sequence[str], defines: Sequence[str],
) -> list[tuple[Path, list[FunctionSpec]]]:
    from .infer import infer_file  # libclang: only when building

    units: list[tuple[Path, list[FunctionSpec]]] = []
    errors: list[SourceError] = []
    single = len(sources) == 1
    for src in sources:
        result = infer_file(
            src, language=language, include_dirs=include_dirs, defines=defines,
            functions=functions if single else None,
        )
        errors.extend(result.errors)
        units.append((src, list(result.functions)))
    if errors:
        raise InferenceError(errors)
    if not single and functions is not None:
        found = {f.name: f for _, fns in units for f in fns}
        missing = [n for n in functions if n not in found]
        if missing:
            raise KernixError(
                f"functions names {missing}, but no file in the directory annotates them with "
                f"// @BE; annotated: {', '.join(found) or 'none'}"
            )
        for fname, tokens in functions.items():
            if tokens is not None:
                check_spec_matches(tokens, found[fname], source="explicit")
        units = [(src, [f for f in fns if f.name in functions]) for src, fns in units]
    seen: dict[str, FunctionSpec] = {}
    for _, fns in units:
        for f in fns:
            if f.name in seen:
                prev = seen[f.name]
                raise SourceError(
                    f"function name {f.name!r} is exported twice (also at {prev.file}:{prev.line}); "
                    "FFI target names must be unique within a module: rename one",
                    file=f.file, line=f.line, function=f.name,
                )
            seen[f.name] = f
    if not seen:
        where = sources[0] if single else f"{len(sources)} files"
        raise KernixError(
            f"no function to export in {where}: annotate each entry point with a `// @BE name` "
            "comment on the line before it, or pass functions=[...]"
        )
    return units


def _load(
    name: str,
    sources: Sequence[Path],
    functions: Functions,
    *,
    platform: str,
    extra_cflags: Sequence[str] | None,
    extra_ldflags: Sequence[str] | None,
    extra_include_paths: Sequence[str] | None,
    build_directory: str | os.PathLike[str] | None,
    verbose: bool,
    compute_capability: str | None,
    force_rebuild: bool,
    auto_register: bool,
    target_prefix: str | None,
    ninja_workers: int | None,
    optimization_level: int,
    use_fast_math: bool,
    allow_cuda_graph: bool,
) -> CompiledModule:
    from . import __version__

    check_module_name(name)
    if target_prefix is not None:
        check_target_prefix(target_prefix)
    requested = normalize_functions(functions)
    extra_cflags = [str(f) for f in (extra_cflags or [])]
    extra_ldflags = [str(f) for f in (extra_ldflags or [])]
    include_paths = [os.path.abspath(str(p)) for p in (extra_include_paths or [])]
    root = _root(build_directory)

    config = BuildConfig(
        platform=platform,
        optimization_level=optimization_level,
        use_fast_math=bool(use_fast_math),
        extra_cflags=tuple(extra_cflags),
        extra_ldflags=tuple(extra_ldflags),
        include_dirs=tuple(include_paths),
        arch=toolchain.detect_compute_capability(compute_capability) if platform == "cuda" else None,
        allow_cuda_graph=bool(allow_cuda_graph),
    )
    flags = compile_flags(config)
    compilers = [toolchain.find_host_compiler().identity]
    if platform == "cuda":
        compilers.append(toolchain.find_nvcc().identity)
    source_digests = []
    for src in sources:
        try:
            source_digests.append([str(src), file_digest(src)])
        except OSError as exc:
            raise KernixError(f"cannot read source file {src}: {exc.strerror or exc}") from exc
    key = cache.compute_key(
        {
            "kernix": __version__,
            "name": name,
            "platform": platform,
            "sources": source_digests,
            "functions": requested,
            "flags": flags,
            "compilers": compilers,
            "arch": config.arch,
            "allow_cuda_graph": config.allow_cuda_graph,
            "jaxlib": toolchain.jaxlib_version(),
            "python": sys.implementation.cache_tag,
        }
    )

    for attempt in range(2):
        manifest = None if force_rebuild else cache.lookup(root, name, key)
        if manifest is None:
            with cache.build_lock(root, name, verbose=verbose):
                manifest = None if force_rebuild else cache.lookup(root, name, key)
                if manifest is None:
                    manifest = _build(root, name, key, sources, requested, config, include_paths,
                                      extra_cflags, ninja_workers, verbose, force_rebuild)
        elif verbose:
            print(f"kernix: {name}: cache hit {manifest.directory}", file=sys.stderr)
        # Map the library now: once loaded it stays usable even if another
        # process clears the cache.  Cleared between look-up and load: once more.
        try:
            registry.load_library(manifest.so_path)
            break
        except RegistrationError:
            if attempt or manifest.so_path.exists():
                raise
            force_rebuild = False

    module = CompiledModule(
        name, manifest.so_path, manifest.platform, manifest.functions, manifest.handlers,
        manifest.so_sha256, target_prefix=target_prefix,
    )
    if auto_register:
        module.register()
    return module


def _build(
    root: Path, name: str, key: str, sources: Sequence[Path],
    requested: Requested | None, config: BuildConfig, include_paths: list[str],
    extra_cflags: list[str], ninja_workers: int | None, verbose: bool, force_rebuild: bool,
) -> cache.Manifest:
    defines, flag_includes = _defines_and_includes(extra_cflags)
    units = _infer(
        sources, requested, "cuda" if config.platform == "cuda" else "cpp",
        include_paths + flag_includes, defines,
    )
    index = itertools.count()  # module-wide: every generated symbol is unique
    exported = [(str(src), [codegen.ExportedFunction(next(index), f) for f in fns]) for src, fns in units]
    with cache.build_directory(root, name, fresh=force_rebuild) as build_dir:
        if verbose:
            print(f"kernix: {name}: building in {build_dir}", file=sys.stderr)
        result = build_module(build_dir, exported, config, workers=ninja_workers, verbose=verbose)
    all_fns = [e for _, es in exported for e in es]
    handlers = {e.spec.name: codegen.handler_symbol(e) for e in all_fns}
    return cache.publish(
        root, name, key, result.so_path, [e.spec for e in all_fns], handlers,
        result.dependencies, config.platform,
    )


def _root(build_directory: str | os.PathLike[str] | None) -> Path:
    """Where a build goes: ``build_directory`` if given, else the cache root."""
    return Path(build_directory).expanduser().absolute() if build_directory is not None else cache_root()


def _inline_source(
    name: str, sources: str | Sequence[str], what: str, ext: str, functions: Functions,
    target_prefix: str | None, build_directory: str | os.PathLike[str] | None,
) -> tuple[str, Path]:
    """Validate an inline load's names, then store its source; returns (name, source path)."""
    module_name = check_module_name(name)
    if target_prefix is not None:
        check_target_prefix(target_prefix)
    normalize_functions(functions)  # every name is checked before anything is written
    text = _join_sources(sources, what)
    return module_name, cache.write_source(_root(build_directory), module_name, text, ext)


def _join_sources(sources: str | Sequence[str], what: str) -> str:
    if isinstance(sources, str):
        return sources
    if isinstance(sources, (list, tuple)) and all(isinstance(s, str) for s in sources):
        return "\n".join(sources)
    raise TypeError(f"{what} must be a string or a list of strings")


def _file(path: str | os.PathLike[str], platform: str) -> Path:
    p = Path(path).expanduser().absolute()
    if not p.is_file():
        raise FileNotFoundError(f"{'CUDA' if platform == 'cuda' else 'C++'} source file not found: {p}")
    if platform == "cpu" and p.suffix in (".cu", ".cuh"):
        raise KernixError(f"{p} is a CUDA source: load it with load_cuda_file (load_cpp_file builds for the CPU)")
    return p


def _default_name(path: Path) -> str:
    stem = "".join(c if (c.isascii() and (c.isalnum() or c == "_")) else "_" for c in path.stem) or "module"
    return stem if not stem[0].isdigit() else f"m_{stem}"


def load_cuda_inline(
    name: str,
    cuda_sources: str | list[str],
    functions: dict[str, list[str]] | list[str] | None = None,
    *,
    extra_cuda_cflags: list[str] | None = None,
    extra_ldflags: list[str] | None = None,
    extra_include_paths: list[str] | None = None,
    build_directory: str | None = None,
    verbose: bool = False,
    compute_capability: str | None = None,
    force_rebuild: bool = False,
    auto_register: bool = True,
    target_prefix: str | None = None,
    ninja_workers: int | None = None,
    optimization_level: int = 3,
    use_fast_math: bool = False,
    allow_cuda_graph: bool = True,
) -> CompiledModule:
    """Compile inline CUDA source and load the resulting module.

    Parameters
    ----------
    name : str
        Module name (used for caching and FFI target naming).
    cuda_sources : str or list of str
        CUDA C++ source code. Multiple strings are concatenated.
    functions : dict or list or None
        ``None``: every function annotated ``// @BE name`` (arg_spec inferred
        from the C++ signature).  A list of names: only those.  A dict
        ``{name: arg_spec}``: those functions, each spec checked against the
        real signature (names need no annotation).
    extra_cuda_cflags, extra_ldflags : list of str, optional
        Extra nvcc / linker flags.
    extra_include_paths : list of str, optional
        Extra include directories.
    build_directory : str, optional
        Use this directory instead of the cache root.
    verbose : bool
        Print every compiler command and its output.
    compute_capability : str, optional
        GPU architecture (e.g. ``"sm_90"``); detected when ``None``.
    force_rebuild : bool
        Skip the cache and recompile.
    auto_register : bool
        Register each function as ``"<target_prefix or name>.<function>"``.
    target_prefix : str, optional
        Prefix of the FFI target names.
    ninja_workers : int, optional
        Parallel compile jobs (default: all CPUs).
    optimization_level : int
        ``-O<n>`` for host and device code (0-3). Default 3.
    use_fast_math : bool
        Pass ``--use_fast_math`` to nvcc.
    allow_cuda_graph : bool
        Mark the handlers command-buffer compatible so XLA may capture them
        in CUDA graphs.

    Returns
    -------
    CompiledModule
    """
    module_name, path = _inline_source(name, cuda_sources, "cuda_sources", "cu", functions, target_prefix,
                                       build_directory)
    return _load(
        module_name, [path], functions, platform="cuda", extra_cflags=extra_cuda_cflags,
        extra_ldflags=extra_ldflags, extra_include_paths=extra_include_paths,
        build_directory=build_directory, verbose=verbose, compute_capability=compute_capability,
        force_rebuild=force_rebuild, auto_register=auto_register, target_prefix=target_prefix,
        ninja_workers=ninja_workers, optimization_level=optimization_level,
        use_fast_math=use_fast_math, allow_cuda_graph=allow_cuda_graph,
    )


def load_cuda_file(
    path: str | os.PathLike[str],
    functions: dict[str, list[str]] | list[str] | None = None,
    *,
    name: str | None = None,
    **options: Any,
) -> CompiledModule:
    """Compile a ``.cu`` file and load it.

    ``name`` defaults to the file's stem.  The other options are those of
    :func:`load_cuda_inline`.  Compiler diagnostics name this file.
    """
    src = _file(path, "cuda")
    return _load(check_module_name(name if name is not None else _default_name(src)), [src], functions, platform="cuda",
                 **_cuda_options(options))


def load_cuda_dir(
    directory: str | os.PathLike[str],
    functions: dict[str, list[str]] | list[str] | None = None,
    *,
    name: str | None = None,
    **options: Any,
) -> CompiledModule:
    """Compile every ``.cu`` file of a directory into one module.

    Each file is its own translation unit; they compile in parallel and link
    into one library.  ``name`` defaults to the directory's name.  Options as
    for :func:`load_cuda_inline`.
    """
    files = _dir_sources(directory, CUDA_EXTENSIONS)
    return _load(check_module_name(name if name is not None else _default_name(Path(directory).absolute())), files, functions,
                 platform="cuda", **_cuda_options(options))


def load_cpp_inline(
    name: str,
    cpp_sources: str | list[str],
    functions: dict[str, list[str]] | list[str] | None = None,
    *,
    extra_cflags: list[str] | None = None,
    extra_ldflags: list[str] | None = None,
    extra_include_paths: list[str] | None = None,
    build_directory: str | None = None,
    verbose: bool = False,
    force_rebuild: bool = False,
    auto_register: bool = True,
    target_prefix: str | None = None,
    ninja_workers: int | None = None,
    optimization_level: int = 3,
    use_fast_math: bool = False,
) -> CompiledModule:
    """Compile inline C++ source for the CPU and load the resulting module.

    The parameters mean what they mean for :func:`load_cuda_inline`;
    ``extra_cflags`` go to the host compiler and ``use_fast_math`` becomes
    ``-ffast-math``.  A ``stream`` parameter receives 0.
    """
    module_name, path = _inline_source(name, cpp_sources, "cpp_sources", "cpp", functions, target_prefix,
                                       build_directory)
    return _load(
        module_name, [path], functions, platform="cpu", extra_cflags=extra_cflags,
        extra_ldflags=extra_ldflags, extra_include_paths=extra_include_paths,
        build_directory=build_directory, verbose=verbose, compute_capability=None,
        force_rebuild=force_rebuild, auto_register=auto_register, target_prefix=target_prefix,
        ninja_workers=ninja_workers, optimization_level=optimization_level,
        use_fast_math=use_fast_math, allow_cuda_graph=False,
    )


def load_cpp_file(
    path: str | os.PathLike[str],
    functions: dict[str, list[str]] | list[str] | None = None,
    *,
    name: str | None = None,
    **options: Any,
) -> CompiledModule:
    """Compile a C++ file for the CPU and load it (options of :func:`load_cpp_inline`)."""
    src = _file(path, "cpu")
    return _load(check_module_name(name if name is not None else _default_name(src)), [src], functions, platform="cpu",
                 **_cpp_options(options))


def load_cpp_dir(
    directory: str | os.PathLike[str],
    functions: dict[str, list[str]] | list[str] | None = None,
    *,
    name: str | None = None,
    **options: Any,
) -> CompiledModule:
    """Compile every ``.cc``/``.cpp``/``.cxx`` file of a directory into one CPU module."""
    files = _dir_sources(directory, CPP_EXTENSIONS)
    return _load(check_module_name(name if name is not None else _default_name(Path(directory).absolute())), files, functions,
                 platform="cpu", **_cpp_options(options))


def _dir_sources(directory: str | os.PathLike[str], exts: tuple[str, ...]) -> list[Path]:
    d = Path(directory).expanduser().absolute()
    if not d.is_dir():
        raise NotADirectoryError(f"not a directory: {d}")
    files = sorted(p for p in d.iterdir() if p.suffix in exts and p.is_file())
    if not files:
        raise KernixError(f"no {'/'.join(exts)} files in {d}")
    return files


_COMMON = {
    "extra_ldflags": None, "extra_include_paths": None, "build_directory": None, "verbose": False,
    "force_rebuild": False, "auto_register": True, "target_prefix": None, "ninja_workers": None,
    "optimization_level": 3, "use_fast_math": False,
}


def _options(options: dict[str, Any], defaults: dict[str, Any], cflags_key: str) -> dict[str, Any]:
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise TypeError(f"unexpected option(s): {', '.join(unknown)}; accepted: {', '.join(sorted(defaults))}")
    merged = {**defaults, **options}
    merged["extra_cflags"] = merged.pop(cflags_key)
    return merged


def _cuda_options(options: dict[str, Any]) -> dict[str, Any]:
    defaults = {**_COMMON, "extra_cuda_cflags": None, "compute_capability": None, "allow_cuda_graph": True}
    return _options(options, defaults, "extra_cuda_cflags")


def _cpp_options(options: dict[str, Any]) -> dict[str, Any]:
    merged = _options(options, {**_COMMON, "extra_cflags": None}, "extra_cflags")
    merged.update(compute_capability=None, allow_cuda_graph=False)
    return merged
