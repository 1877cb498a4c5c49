"""The public loaders: ``load_{cuda,cpp}_{inline,file,dir}``.

Their parameters and defaults are declared once, in the signatures of
:func:`load_cuda_inline` and :func:`load_cpp_inline`; the file and directory
loaders check their keywords against those (``__kwdefaults__``). Each loader
builds one :class:`~kernix.request.LoadRequest` for :func:`kernix.pipeline.load`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .platforms import LANGUAGES_BY_EXTENSION, Language
from .paths import check_source, printable
from .pipeline import load
from .request import make_request
from .runtime.module import CompiledModule
from .store.files import write_source

__all__ = [
    "load_cuda_inline",
    "load_cuda_file",
    "load_cuda_dir",
    "load_cpp_inline",
    "load_cpp_file",
    "load_cpp_dir",
]

if TYPE_CHECKING:  # (a type for type checkers only)
    from typing import TypeVar

    _Loader = TypeVar("_Loader", bound=Callable[..., CompiledModule])


def _keywords_checked(loader: _Loader) -> _Loader:
    """``loader`` refusing an unknown keyword with :func:`_check_options` instead of
    Python's bare ``TypeError`` (its signature, for ``help`` and ``inspect``, is unchanged)."""
    code = loader.__code__
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]

    @functools.wraps(loader)
    def checked(*args: Any, **kwargs: Any) -> CompiledModule:
        _check_options(loader.__name__, names, kwargs)
        return loader(*args, **kwargs)

    return checked  # type: ignore[return-value]


#: Extensions a directory loader picks up, per language.
_DIR_EXTENSIONS: dict[str, tuple[str, ...]] = {
    "cuda": (".cu",),
    "cpp": tuple(e for e, lang in LANGUAGES_BY_EXTENSION.items() if lang == "cpp" and e not in (".c", ".h", ".hpp")),
}


@_keywords_checked
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
        Print every compiler command and its output on stderr as the build
        runs, then a summary line.
    compute_capability : str, optional
        GPU architecture (e.g. ``"sm_90"``); detected when ``None``.
    force_rebuild : bool
        Skip the cache and recompile.
    auto_register : bool
        Register each function as ``"<target_prefix or name>.<function>"``.
    target_prefix : str, optional
        Prefix of the FFI target names.
    ninja_workers : int, optional
        Parallel compile jobs (default: ``$KERNIX_JOBS``, else the CPUs this
        process may run on).
    optimization_level : int
        ``-O<n>`` for host and device code (0-3). Default 3.
    use_fast_math : bool
        Pass ``--use_fast_math`` to nvcc.
    allow_cuda_graph : bool
        Mark the handlers command-buffer compatible so XLA may capture them
        in CUDA graphs.
    """
    options = {k: v for k, v in locals().items() if k in _CUDA_OPTIONS}
    return _load_inline(name, cuda_sources, "cuda", functions, options)


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
    return _load_paths("file", path, "cuda", functions, name, options)


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
    return _load_paths("dir", directory, "cuda", functions, name, options)


@_keywords_checked
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
    options = {k: v for k, v in locals().items() if k in _CPP_OPTIONS}
    return _load_inline(name, cpp_sources, "cpp", functions, options)


def load_cpp_file(
    path: str | os.PathLike[str],
    functions: dict[str, list[str]] | list[str] | None = None,
    *,
    name: str | None = None,
    **options: Any,
) -> CompiledModule:
    """Compile a C++ file for the CPU and load it (options of :func:`load_cpp_inline`)."""
    return _load_paths("file", path, "cpp", functions, name, options)


def load_cpp_dir(
    directory: str | os.PathLike[str],
    functions: dict[str, list[str]] | list[str] | None = None,
    *,
    name: str | None = None,
    **options: Any,
) -> CompiledModule:
    """Compile every ``.cc``/``.cpp``/``.cxx`` file of a directory into one CPU module."""
    return _load_paths("dir", directory, "cpp", functions, name, options)


def _load_paths(
    kind: Literal["file", "dir"], path: str | os.PathLike[str], language: Language, functions: Any, name: str | None,
    options: Mapping[str, Any],
) -> CompiledModule:
    """Load a file (``kind`` ``"file"``) or a directory (``"dir"``), its options checked before its path."""
    defaults = _CUDA_OPTIONS if language == "cuda" else _CPP_OPTIONS
    _check_options(f"load_{language}_{kind}", ["functions", "name", *defaults], options)
    p = Path(path).expanduser().absolute()
    sources = [_file(p, language)] if kind == "file" else _dir_sources(p, language)
    name = name if name is not None else default_module_name(p)
    return load(make_request(name, sources, language, functions, {**defaults, **options}))


def _load_inline(
    name: str, sources: Any, language: Language, functions: Any, options: Mapping[str, Any]
) -> CompiledModule:
    """Validate an inline load's names and options, store its source, then load it."""
    request = make_request(name, [], language, functions, options)  # every name checked before writing
    if isinstance(sources, (list, tuple)) and all(isinstance(s, str) for s in sources):
        sources = "\n".join(sources)
    if not isinstance(sources, str):
        from .errors import OptionError
        raise OptionError(f"{language}_sources must be a string or a list of strings, not {type(sources).__name__}")
    path = write_source(request.root, name, sources, "cu" if language == "cuda" else "cpp")
    return load(request.replace(sources=(path,), inline_source=sources))


def _file(p: Path, language: Language) -> Path:
    if not p.exists():
        from .errors import SourceNotFoundError
        raise SourceNotFoundError(f"{'CUDA' if language == 'cuda' else 'C++'} source file not found: {printable(p)}")
    if p.is_dir():
        from .errors import SourceNotFoundError
        raise SourceNotFoundError(f"{printable(p)} is a directory, not a source file: load every "
                                  f"{'/'.join(_DIR_EXTENSIONS[language])} file in it with load_{language}_dir")
    check_source(p)  # a regular file (not a FIFO or a device), with a UTF-8 name
    if language == "cpp" and LANGUAGES_BY_EXTENSION.get(p.suffix.lower()) == "cuda":
        from .errors import KernixError
        raise KernixError(f"{p} is a CUDA source: load it with load_cuda_file (load_cpp_file builds for the CPU)")
    return p


def default_module_name(path: Path) -> str:
    """The module name a file or directory loader uses when ``name`` is not given:
    the file stem (directory name) with every character that a module name
    cannot hold replaced by ``_``."""
    stem = "".join(c if (c.isascii() and (c.isalnum() or c == "_")) else "_" for c in path.stem) or "module"
    return stem if not stem[0].isdigit() else f"m_{stem}"


def _dir_sources(d: Path, language: Language) -> list[Path]:
    if not d.is_dir():
        from .errors import SourceNotFoundError
        raise SourceNotFoundError(f"not a directory: {d}")
    exts = _DIR_EXTENSIONS[language]
    files = sorted(p for p in d.iterdir() if p.suffix in exts and not p.is_dir())
    for p in files:
        check_source(p)  # a FIFO or a device named like a source is refused, never read (nor skipped)
    if not files:
        from .errors import KernixError
        raise KernixError(f"no {'/'.join(exts)} files in {d}")
    return files


#: The options of each family, with their defaults: those of the inline loaders' signatures.
_CUDA_OPTIONS: dict[str, Any] = dict(load_cuda_inline.__wrapped__.__kwdefaults__ or {})  # type: ignore[attr-defined]
_CPP_OPTIONS: dict[str, Any] = dict(load_cpp_inline.__wrapped__.__kwdefaults__ or {})  # type: ignore[attr-defined]


def _check_options(loader: str, accepted: Collection[str], options: Mapping[str, Any]) -> None:
    """A :class:`~kernix.OptionError` for the ``options`` that ``loader`` does not take, listing those it takes."""
    unknown = [k for k in options if k not in accepted]
    if unknown:
        several = len(unknown) > 1
        from .errors import OptionError
        raise OptionError(f"{loader}() got {'' if several else 'an '}unexpected option{'s' if several else ''} "
                          f"{', '.join(map(repr, unknown))}; it takes {', '.join(sorted(accepted))}")
