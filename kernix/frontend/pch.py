"""The precompiled CUDA prelude: built once, used while its headers are unchanged.

Parsing ``cuda_runtime.h`` with nvcc's macros costs ~0.5 s, ``<cub/cub.cuh>``
several seconds; so the prelude (with the ``#include`` lines a file opens
with: :mod:`kernix.frontend.leading`) is precompiled and kept in the store as
a prelude (:func:`kernix.store.new_prelude_file`), its record naming its PCH
file and recording the version of every header it holds, as the build read
them (:func:`kernix.frontend.versions.read_versions`).

clang checks a PCH's headers by size and modification time only: a header
rewritten with the same size and its time set back passes, and clang would
go on reading the old declarations from the PCH.  So each use checks the
recorded versions first (:func:`kernix.store.version_current`: the
stat, and the content when the stat moved) and builds the PCH again when one
changed.  A PCH whose headers changed while it was being built is not kept.

A rebuilt PCH gets a new file name (the record is replaced atomically, the
old file removed), so a process never reads a record naming one PCH while
another process writes a different one under the same name.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import CacheError
from ..store import content_key, is_private, new_prelude_file, prelude_file, recall, remember, version_current
from .versions import read_versions

__all__ = ["PCH_FLAGS", "Prelude", "pch_failed", "prelude_pch", "with_pch"]

#: Flags for a parse that uses the PCH.
PCH_FLAGS = ["-Xclang", "-fallow-pch-with-compiler-errors"]

_FORMAT = 3  # 3: a record naming the PCH, with the versions of its headers


class Prelude(NamedTuple):
    """A precompiled prelude.

    Attributes
    ----------
    path
        The PCH file.
    versions
        The version of every header it holds (``[path, inode, size,
        mtime_ns, ctime_ns, sha256]``), as its build read them.
    """

    path: str
    versions: list[list[Any]]


# This process's preludes ((root, key) -> Prelude), checked again on each use; and
# those that could not be built ((root, key) -> the versions of the headers that
# build read: tried again when one of them changes).
_known: dict[tuple[str, str], Prelude] = {}
_failed: dict[tuple[str, str], list[list[Any]]] = {}
_lock = threading.Lock()


def _key(flags: Sequence[str], prelude: str, clang: str) -> str:
    return content_key(["prelude-pch", _FORMAT, clang, list(flags)], prelude.encode())[:24]


def _current(versions: list[list[Any]]) -> bool:
    """Whether every header still has its version (:func:`kernix.store.version_current`),
    the common case (every stat as recorded: a thousand headers for ``<cub/cub.cuh>``) cheaper."""
    for version in versions:
        try:
            st = os.stat(version[0])
        except OSError:
            return False
        if ((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) != tuple(version[1:5])
                and not version_current(version)):
            return False
    return True


def _usable(found: Prelude | None, root: Path) -> bool:
    return (found is not None and os.path.isfile(found.path) and is_private(found.path, root)
            and _current(found.versions))


def _read(key: str, root: Path) -> Prelude | None:
    """The prelude ``key``'s record names, or ``None`` (missing, damaged, untrusted)."""
    data = recall("prelude", key, root=root)
    try:
        path, versions = prelude_file(root, key, data["pch"]), data["versions"]
    except (KeyError, TypeError):
        return None
    if data.get("format") != _FORMAT or path is None or not isinstance(versions, list):
        return None
    return Prelude(str(path), versions)


def prelude_pch(index: Any, root: str | os.PathLike[str], flags: Sequence[str], prelude: str, virtual_path: str,
                toolchain_dirs: Sequence[str], clang: str, *, rebuild: bool = False) -> Prelude | None:
    """The precompiled ``prelude`` for ``flags``, built when missing or stale.

    Parameters
    ----------
    index
        The ``clang.cindex.Index`` to parse with.
    root
        The cache root.
    flags
        The parse's flags, without ``-include`` of the prelude.
    prelude
        The prelude's text, parsed as the virtual file ``virtual_path``.
    toolchain_dirs
        Where the toolkit's headers are: errors in them are tolerated (see :func:`_build`).
    clang
        libclang's identity (a PCH is only read by the libclang that wrote it).
    rebuild
        Build it again whatever the record says (clang refused the last one).

    Returns
    -------
    Prelude or None
        ``None`` when it cannot be built: the caller parses without it.
    """
    root = Path(root)
    key = _key(flags, prelude, clang)
    slot = (str(root), key)
    with _lock:
        found = None if rebuild else _known.get(slot)
        failed = None if rebuild else _failed.get(slot)
    if failed is not None and _current(failed):
        return None  # (as the last try found it: no use trying again)
    if not _usable(found, root):
        found = None if rebuild else _read(key, root)
        if not _usable(found, root):
            old = _read(key, root)
            found, read = _build(index, flags, prelude, virtual_path, root, key, toolchain_dirs)
            if found is None:
                if read is not None:
                    with _lock:
                        _failed[slot] = read
                return None
            if old is not None and old.path != found.path:
                try:
                    os.unlink(old.path)  # (a process still using it retries with a fresh build)
                except OSError:
                    pass
    with _lock:
        _known[slot] = found
        _failed.pop(slot, None)
    return found


def _build(index: Any, flags: Sequence[str], prelude: str, virtual_path: str, root: Path, key: str,
           toolchain_dirs: Sequence[str]) -> tuple[Prelude | None, list[list[Any]] | None]:
    """Precompile the prelude and write its record.

    Returns the prelude, or ``None`` when it cannot be used, with the versions
    of the headers the build read (``None`` when a header changed meanwhile).

    The toolkit's headers carry a few declarations clang rejects and nvcc's
    front end accepts (constexpr redeclarations of math functions); those are
    kept in the header (``-fallow-pch-with-compiler-errors``).  A fatal error
    (a missing header) is not, nor is any error outside ``toolchain_dirs``
    (a user's header): the plain parse then reports it.  Nor is a PCH whose
    headers changed while it was built.
    """
    import clang.cindex as ci

    header_flags = ["-x", "c++-header", *flags[2:]]
    tu = index.parse(virtual_path, args=header_flags, unsaved_files=[(virtual_path, prelude)],
                     options=ci.TranslationUnit.PARSE_SKIP_FUNCTION_BODIES | ci.TranslationUnit.PARSE_INCOMPLETE)
    versions = read_versions(tu, skip=[virtual_path])
    for d in tu.diagnostics:
        name = os.path.abspath(d.location.file.name) if d.location.file else ""
        if d.severity >= 4 or (d.severity >= 3 and not (name == virtual_path or _is_under(name, toolchain_dirs))):
            return None, versions
    if versions is None:  # a header changed while it was read: nothing to vouch for
        return None, None
    try:
        target = new_prelude_file(root, key, ".pch")
    except CacheError:  # the PCH is an optimisation only
        return None, None
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        tu.save(str(tmp))
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except (OSError, ci.TranslationUnitSaveError):
        try:
            tmp.unlink()
        except OSError:
            pass
        return None, None
    if not remember("prelude", key, {"format": _FORMAT, "pch": target.name, "versions": versions}, root=root):
        try:
            target.unlink()
        except OSError:
            pass
        return None, None
    return Prelude(str(target), versions), versions


def _is_under(path: str, dirs: Sequence[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def with_pch(flags: list[str], pch: str, virtual_path: str) -> list[str]:
    """``flags`` with ``-include virtual_path`` replaced by the PCH."""
    out = []
    it = iter(flags)
    for f in it:
        if f == "-include" and next(it, None) == virtual_path:
            out += ["-include-pch", pch, *PCH_FLAGS]
        else:
            out.append(f)
    return out


def pch_failed(tu: Any) -> bool:
    """Whether clang refused the PCH ``tu`` was parsed with."""
    return any(d.severity >= 4 and ("precompiled" in d.spelling or "PCH" in d.spelling) for d in tu.diagnostics)
