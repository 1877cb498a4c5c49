"""The spec cache: one file's inferred specs, found again without the parser.

:func:`look_up` reads the source, resolves its options and reads the entry
under the store's content key (:func:`kernix.store.files.content_key`) of
everything the parse depends on but the headers: kernix's version, the parse
set-up (libclang, its command line, the CUDA prelude), the language, the
requested functions and the source bytes. The headers are stored with the
versions the parse read (:func:`kernix.frontend.versions.read_versions`) and
re-checked on look-up, so an edited header is a miss.

The parse set-up is remembered in the direct index (:mod:`kernix.store.direct`,
under ``direct/.parse/``), so a warm look-up neither searches for tools nor
imports libclang. An entry is a record at ``<cache root>/specs/<key[:2]>/<key>.rec``
holding the :meth:`~kernix.frontend.infer.InferResult.to_json` payload; it is
read only when trusted (:mod:`kernix.store.trust`) and its specs validated
again, since they end up in generated C++. A damaged, untrusted or stale
entry is a miss, never an error.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NamedTuple, Sequence

from .. import __version__
from ..errors import KernixError, ToolchainError
from ..platforms import language_of
from ..paths import absolute, cache_root, printable, utf8_problem
from ..store import direct
from ..store.files import (
    content_key,
    read_record,
    versions_current,
    write_record,
)
from ..store.direct import code_identity

__all__ = ["look_up", "load", "store"]

_FORMAT = 17  # raised whenever what an entry records, or what inference reports, changes

_SETUP_SPACE = ".parse"  # the direct index's records of parse set-ups

# Where libclang's Python bindings and jaxlib are found first decides the set-up.
_BINDINGS = ("clang", "clang.py", "jaxlib")


class SpecLookup(NamedTuple):
    """The outcome of one look-up: the resolved parse options, the source bytes
    read for the ``key`` (``None``: cache not used), and the cached ``payload`` or ``None``.
    """

    path: str
    language: str
    source: bytes
    include_dirs: tuple[str, ...]
    defines: tuple[str, ...]
    flags: tuple[str, ...]
    root: str
    key: str | None
    payload: dict[str, Any] | None


def look_up(
    path: str | os.PathLike[str],
    language: str | None = None,
    include_dirs: Sequence[str] = (),
    defines: Sequence[str] = (),
    flags: Sequence[str] = (),
    wanted: list[Any] | None = None,
    use_cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
) -> SpecLookup:
    """Look ``path`` up in the spec cache (arguments as for
    :func:`kernix.frontend.infer.infer_file`; ``wanted`` in key form). Raises
    :class:`KernixError` when the file cannot be read or its language is unknown.
    """
    path = os.path.abspath(os.fspath(path))
    problem = utf8_problem(path)
    if problem is not None:
        raise KernixError(f"cannot parse {printable(path)}: {problem}")
    if language is None:
        language = language_of(path)
    elif language not in ("cuda", "cpp"):
        raise KernixError(f"language must be 'cuda' or 'cpp', not {language!r}")
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        raise KernixError(f"cannot read {path}: {exc.strerror or exc}") from None
    include_dirs = tuple(os.path.abspath(d) for d in include_dirs)
    defines = tuple(str(d) for d in defines)
    flags = tuple(str(f) for f in flags)
    root = absolute(cache_dir) if cache_dir is not None else str(cache_root())
    key = payload = None
    if use_cache:
        setup = parse_setup(language, include_dirs, defines, flags, root)
        key = content_key([_FORMAT, __version__, code_identity(), *setup, path, language, wanted], source)
        payload = load(root, key)
    return SpecLookup(path, language, source, include_dirs, defines, flags, root, key, payload)


def entry_path(root: str | os.PathLike[str], key: str) -> str:
    """Where the entry for ``key`` lives under cache root ``root``."""
    return os.path.join(root, "specs", key[:2], f"{key}.rec")


def load(root: str, key: str) -> dict[str, Any] | None:
    """The stored payload for ``key``, or ``None`` (missing, damaged, stale or untrusted)."""
    try:
        data = read_record(entry_path(root, key), root)  # (untrusted: a ValueError)
        if data.get("format") != _FORMAT or data.get("key") != key:
            return None
        if not versions_current(data["dependencies"]):
            return None
        return data["payload"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def store(root: str | os.PathLike[str], key: str, payload: dict[str, Any], versions: list[list[Any]]) -> None:
    """Store ``payload`` under ``key`` with the headers' ``versions`` as parsed; write failures are ignored."""
    write_record(entry_path(root, key), {"format": _FORMAT, "key": key, "dependencies": versions, "payload": payload})


def parse_setup(
    language: str, include_dirs: tuple[str, ...], defines: tuple[str, ...], flags: tuple[str, ...], root: str
) -> list[Any]:
    """``[libclang identity, parse flags, CUDA prelude text or None]`` for
    these options (see :func:`kernix.frontend.clangparse.parse_flags`), from
    the direct index under ``root`` when it holds, else worked out and
    remembered."""
    fingerprint = content_key({
        "direct": direct.DIRECT_FORMAT,
        "kernix": [__version__, __file__],
        "python": [sys.implementation.cache_tag, sys.prefix, _import_roots()],
        "options": [language, include_dirs, defines, flags],
        "environment": {v: os.environ.get(v) for v in direct.TOOL_ENVIRONMENT},
    })
    found = direct.lookup(root, _SETUP_SPACE, fingerprint, valid=_is_setup, what="inference set-up")
    if found is not None:
        return found
    # Working the set-up out needs libclang and the toolchain search: imported only then.
    from ..backend import toolchain
    from . import clangparse

    options = clangparse.ParseOptions(language, include_dirs, defines, flags)
    files = direct.file_stats(_setup_files(clangparse, toolchain))  # before the answer they vouch for
    setup = [clangparse.clang_identity(), clangparse.parse_flags(options), clangparse.prelude_text(options)]
    direct.record(root, _SETUP_SPACE, fingerprint, setup, files, what="inference set-up")
    return setup


def _is_setup(value: Any) -> bool:
    """``[libclang identity, [flag, ...], prelude or None]``."""
    return (
        isinstance(value, list) and len(value) == 3 and isinstance(value[0], str)
        and isinstance(value[1], list) and all(isinstance(f, str) for f in value[1])
        and (value[2] is None or isinstance(value[2], str))
    )


def _import_roots() -> list[str]:
    """The ``sys.path`` entries (absolute) that hold libclang's Python bindings
    or jaxlib, in order: which of them are found first decides the set-up;
    the other entries (the current or the script's directory, for one)
    cannot change it."""
    roots = []
    for entry in sys.path:
        entry = os.path.abspath(entry)
        if any(os.path.exists(os.path.join(entry, name)) for name in _BINDINGS):
            roots.append(entry)
    return roots


def _setup_files(clangparse: Any, toolchain: Any) -> list[str]:
    """The files the set-up is worked out from: the compilers, libclang,
    jaxlib's FFI header, and the directories searched for compilers."""
    files = [part.rsplit(":", 4)[0] for part in clangparse.clang_identity().split(",") if part]
    ffi = clangparse.ffi_include_dir()
    if ffi:
        files.append(os.path.join(ffi, "xla", "ffi", "api", "ffi.h"))
    try:
        files += toolchain.compiler_paths(cuda=toolchain.nvcc_path_or_none() is not None)
    except ToolchainError:  # no host compiler: the parse has no compiler view to vouch for
        pass
    return files + direct.search_dirs()
