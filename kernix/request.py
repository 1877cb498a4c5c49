"""One value for one load: :class:`LoadRequest`.

The public loaders turn their arguments into a ``LoadRequest`` exactly once:
names validated, ``functions`` normalised and parsed, the language and cache
root decided, flags split and their paths made absolute (against the current
directory, for inference and compiler alike).  Every later stage reads this
value and nothing else, so no option is carried, re-split or re-validated
twice.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .platforms import PREPROCESSOR_FLAGS, Language, Platform, split_flags
from .language.names import check_module_name, check_target_prefix
from .paths import cache_root, text_problem

if TYPE_CHECKING:
    from .language.selection import Requested

__all__ = ["LoadRequest", "make_request"]

# Flags whose value is a path (``-I DIR`` or ``-IDIR``): made absolute once.
_PATH_FLAGS = ("-I", "-isystem", "-iquote", "-idirafter", "-include", "-L")
def _absolute_flags(flags: Sequence[str]) -> tuple[str, ...]:
    """``flags`` with every path argument of an include/library flag made absolute."""
    out: list[str] = []
    for opt, value in split_flags(flags):
        if value is None:
            out.append(opt)
            continue
        if value and opt in _PATH_FLAGS:
            value = os.path.abspath(os.path.expanduser(value))
        out += [opt, value] if opt in ("-isystem", "-iquote", "-idirafter", "-include") else [opt + value]
    return tuple(out)


def _linker_flags(flags: Sequence[str]) -> tuple[str, ...]:
    """``flags`` with the linker's own options that the compiler driver does not
    take (``-rpath=DIR``, ``-rpath DIR``, as the reference's users write them)
    passed through as ``-Wl,-rpath,DIR``; paths made absolute."""
    out: list[str] = []
    it = iter(flags)
    for flag in it:
        if flag == "-rpath":
            out.append("-Wl,-rpath," + os.path.abspath(next(it, "")))
        elif flag.startswith("-rpath="):
            out.append("-Wl,-rpath," + os.path.abspath(flag[len("-rpath="):]))
        else:
            out.append(flag)
    return _absolute_flags(out)


class LoadRequest:
    """Everything one load needs, resolved once by :func:`make_request`.

    Paths are absolute; ``functions`` is normalised (``None``: every annotated
    function); ``root`` is ``build_directory=`` or :func:`kernix.cache_root`;
    ``compute_capability`` ``None`` means detect. The other fields are the
    loaders' options, and an inline load's text (see :func:`kernix.compilation.store_inline_source`).
    """

    # A plain slotted class rather than a NamedTuple: a warm load defines it at import.
    __slots__ = ("name", "sources", "language", "functions", "root", "extra_cflags", "extra_ldflags",
                 "include_dirs", "compute_capability", "optimization_level", "use_fast_math", "allow_cuda_graph",
                 "ninja_workers", "verbose", "force_rebuild", "auto_register", "target_prefix", "inline_source")

    def __init__(
        self,
        *,
        name: str,
        sources: tuple[Path, ...],
        language: Language,
        functions: Requested | None,
        root: Path,
        extra_cflags: tuple[str, ...] = (),
        extra_ldflags: tuple[str, ...] = (),
        include_dirs: tuple[str, ...] = (),
        compute_capability: str | None = None,
        optimization_level: int = 3,
        use_fast_math: bool = False,
        allow_cuda_graph: bool = False,
        ninja_workers: int | None = None,
        verbose: bool = False,
        force_rebuild: bool = False,
        auto_register: bool = True,
        target_prefix: str | None = None,
        inline_source: str | None = None,
    ) -> None:
        self.name = name
        self.sources = sources
        self.language = language
        self.functions = functions
        self.root = root
        self.extra_cflags = extra_cflags
        self.extra_ldflags = extra_ldflags
        self.include_dirs = include_dirs
        self.compute_capability = compute_capability
        self.optimization_level = optimization_level
        self.use_fast_math = use_fast_math
        self.allow_cuda_graph = allow_cuda_graph
        self.ninja_workers = ninja_workers
        self.verbose = verbose
        self.force_rebuild = force_rebuild
        self.auto_register = auto_register
        self.target_prefix = target_prefix
        self.inline_source = inline_source

    def as_dict(self) -> dict[str, Any]:
        """Every field, by name."""
        return {field: getattr(self, field) for field in self.__slots__}

    def replace(self, **changes: Any) -> LoadRequest:
        """A copy with ``changes`` applied."""
        return LoadRequest(**{**self.as_dict(), **changes})

    def __repr__(self) -> str:
        shown = {**self.as_dict(), "inline_source": None if self.inline_source is None else "..."}
        return "LoadRequest(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"

    @property
    def platform(self) -> Platform:
        """Where the handlers run: ``"cuda"`` for CUDA sources, else ``"cpu"``."""
        return "cuda" if self.language == "cuda" else "cpu"

def _flags(value: Any, what: str) -> tuple[str, ...]:
    """``value``, a list of strings or paths, as a tuple of flags, refused here, before inference, if the
    compiler would misread it: a line break or NUL (no command line holds
    one), text that is not valid UTF-8 (a path from a name that is not), or
    an include, define or library flag with no value (``-I`` last, or
    followed by ``""``), which would take the next flag as its value."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        from .errors import OptionError
        raise OptionError(f"{what} must be a list of strings, not {type(value).__name__}")
    flags = tuple(os.fspath(v) if isinstance(v, os.PathLike) else str(v) for v in value)
    for i, flag in enumerate(flags):
        problem = text_problem(flag, f"{what}[{i}]")
        if problem is None and any(c in flag for c in "\n\r\0"):
            problem = (f"{what}[{i}] = {flag!r} contains a line break or NUL, which no command line can hold; pass "
                       "each flag or path as its own string")
        elif problem is None and flag in PREPROCESSOR_FLAGS + ("-L",) and not (flags[i + 1:i + 2] or ("",))[0]:
            examples = {"-D": "-DNAME=1", "-U": "-UNAME", "-include": "-include/path/to/file.h"}
            example = examples.get(flag, f"{flag}/path/to/dir")
            problem = (f"{what}[{i}] = {flag!r} has no value after it, so the compiler would take the next "
                       f"flag as its value; write it joined ({example!r}) or give the value as the next item")
        if problem:
            from .errors import OptionError
            raise OptionError(problem)
    return flags


def make_request(
    name: str,
    sources: Sequence[Path],
    language: Language,
    functions: Any,
    options: Mapping[str, Any],
) -> LoadRequest:
    """Validate the loader ``options`` and resolve them into a :class:`LoadRequest`;
    :class:`kernix.InvalidNameError`, :class:`kernix.ArgSpecError` or
    :class:`kernix.OptionError` for a bad value.
    """
    check_module_name(name)
    prefix = options.get("target_prefix")
    if prefix is not None:
        check_target_prefix(prefix)
    level = options.get("optimization_level", 3)
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 3:
        from .errors import OptionError
        raise OptionError(f"optimization_level must be an int from 0 to 3, not {level!r}")
    workers = options.get("ninja_workers")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        from .errors import OptionError
        raise OptionError(f"ninja_workers must be a positive int or None, not {workers!r}")
    build_directory = options.get("build_directory")
    root = Path(build_directory).expanduser().absolute() if build_directory is not None else cache_root()
    problem = text_problem(str(root), "build_directory" if build_directory is not None else "the cache root")
    if problem:
        from .errors import OptionError
        raise OptionError(problem)
    if functions is not None:
        from .language.selection import normalize_functions  # (not at import: a warm load reads no spec)

        functions = normalize_functions(functions)
    cflags = "extra_cuda_cflags" if language == "cuda" else "extra_cflags"
    return LoadRequest(
        name=name,
        sources=tuple(Path(s) for s in sources),
        language=language,
        functions=functions,
        root=root,
        extra_cflags=_absolute_flags(_flags(options.get(cflags), cflags)),
        extra_ldflags=_linker_flags(_flags(options.get("extra_ldflags"), "extra_ldflags")),
        include_dirs=tuple(os.path.abspath(os.path.expanduser(p))
                           for p in _flags(options.get("extra_include_paths"), "extra_include_paths")),
        compute_capability=options.get("compute_capability") if language == "cuda" else None,
        optimization_level=level,
        use_fast_math=bool(options.get("use_fast_math", False)),
        allow_cuda_graph=bool(options.get("allow_cuda_graph", False)) and language == "cuda",
        ninja_workers=workers,
        verbose=bool(options.get("verbose", False)),
        force_rebuild=bool(options.get("force_rebuild", False)),
        auto_register=bool(options.get("auto_register", True)),
        target_prefix=prefix,
    )
