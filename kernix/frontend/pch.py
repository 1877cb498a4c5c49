"""The precompiled CUDA prelude: built once, used while its headers are unchanged.

The prelude, with the ``#include`` lines a file opens with (:func:`leading`: nothing in the
file can change how those headers read), is precompiled and kept in the store
(:func:`kernix.store.new_prelude_file`), its record naming its PCH file and the version of
every header it holds, as the build read them (:func:`kernix.frontend.versions.read_versions`).
The file is then parsed with those lines blanked out (:func:`without_leading`): a header
without include guards read twice would report redefinitions nvcc never reports.

clang checks a PCH's headers by size and modification time only, so each use checks those
versions first and builds the PCH again when one changed (docs/how-it-works.rst,
"cache-key").  A rebuilt PCH gets a new file name, so a process never reads a record naming
one PCH while another writes a different one under the same name.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import CacheError
from ..store import content_key, is_private, new_prelude_file, prelude_file, recall, remember
from ..store.files import versions_current
from .versions import read_versions

__all__ = ["Prelude", "is_under", "prelude_pch", "LeadingInclude", "leading", "without_leading"]

_FORMAT = 3  # of the prelude's record


class Prelude(NamedTuple):
    """A precompiled prelude: its PCH file ``path``, the ``versions`` of the headers it holds, as its
    build read them (:func:`~kernix.frontend.versions.read_versions`), and its ``text``."""

    path: str
    versions: list[list[Any]]
    text: str


# This process's preludes ((root, key) -> Prelude), checked again on each use; and
# those that could not be built ((root, key) -> the versions of the headers that
# build read: tried again when one of them changes).
_known: dict[tuple[str, str], Prelude] = {}
_failed: dict[tuple[str, str], list[list[Any]]] = {}
_lock = threading.Lock()


def _usable(found: Prelude | None, root: Path) -> bool:
    return (found is not None and os.path.isfile(found.path) and is_private(found.path, root)
            and versions_current(found.versions))


def _read(key: str, root: Path, text: str) -> Prelude | None:
    """The prelude ``key`` (of ``text``) its record names, or ``None`` (missing, damaged, untrusted)."""
    data = recall("prelude", key, root=root)
    try:
        path, versions = prelude_file(root, key, data["pch"]), data["versions"]
    except (KeyError, TypeError):
        return None
    if data.get("format") != _FORMAT or path is None or not isinstance(versions, list):
        return None
    return Prelude(str(path), versions, text)


def prelude_pch(index: Any, root: str | os.PathLike[str], flags: Sequence[str], prelude: str, virtual_path: str,
                toolchain_dirs: Sequence[str], clang: str, *, rebuild: bool = False) -> Prelude | None:
    """The precompiled ``prelude`` (the text of the virtual file ``virtual_path``) for a parse with
    ``flags`` (without its ``-include``), under cache root ``root``, built with ``index`` when missing
    or stale, or again whatever the record says with ``rebuild`` (clang refused the last one);
    ``None`` when it cannot be built (the caller parses without it).  Errors in ``toolchain_dirs``
    are tolerated (:func:`_build`); ``clang`` is libclang's identity (a PCH is only read by the
    libclang that wrote it).
    """
    root = Path(root)
    key = content_key(["prelude-pch", _FORMAT, clang, list(flags)], prelude.encode())[:24]
    slot = (str(root), key)
    with _lock:
        found = None if rebuild else _known.get(slot)
        failed = None if rebuild else _failed.get(slot)
    if failed is not None and versions_current(failed):
        return None  # (as the last try found it: no use trying again)
    if not _usable(found, root):
        old = _read(key, root, prelude)
        found = None if rebuild else old
        if not _usable(found, root):
            found, read = _build(index, flags, prelude, virtual_path, root, key, toolchain_dirs)
            if found is None:
                if read is not None:
                    with _lock:
                        _failed[slot] = read
                return None
            if old is not None and old.path != found.path:
                with contextlib.suppress(OSError):
                    os.unlink(old.path)  # (a process still using it retries with a fresh build)
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
        if d.severity >= 4 or (d.severity >= 3 and not (name == virtual_path or is_under(name, toolchain_dirs))):
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
        with contextlib.suppress(OSError):
            tmp.unlink()
        return None, None
    if not remember("prelude", key, {"format": _FORMAT, "pch": target.name, "versions": versions}, root=root):
        with contextlib.suppress(OSError):
            target.unlink()
        return None, None
    return Prelude(str(target), versions, prelude), versions


def is_under(path: str, dirs: Sequence[str]) -> bool:
    """Whether ``path`` is one of ``dirs`` or inside one."""
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


# One item of a file's opening: blank space, a comment, `#pragma once` or an `#include`.
_ITEM = re.compile(
    rb"""(?P<space>[ \t\r\n]+)
       | (?P<comment>//[^\r\n]*)
       | (?P<block>/\*.*?\*/)
       | (?P<pragma>\#[ \t]*pragma[ \t]+once\b)(?P<pragma_rest>[^\r\n]*)
       | (?P<inc>\#[ \t]*include[ \t]*(?:<(?P<sys>[^>\r\n]+)>|"(?P<quoted>[^"\r\n]+)"))(?P<rest>[^\r\n]*)""",
    re.DOTALL | re.VERBOSE,
)

# What may follow a directive on its line: blanks, then perhaps a `//` comment.
_REST = re.compile(rb"[ \t]*(?://[^\r\n]*)?")


class LeadingInclude(NamedTuple):
    """One opening ``#include``: the ``line`` for the prelude (a ``"..."`` include by
    its absolute path) and its ``start`` and ``end`` bytes in the file.
    """

    line: str
    start: int
    end: int


def leading(raw: bytes, quote_dirs: Sequence[str] | None) -> list[LeadingInclude]:
    """The ``#include`` directives ``raw`` opens with, in order. A ``"..."`` include
    is looked for in ``quote_dirs``; one found nowhere, or any when ``quote_dirs``
    is ``None``, ends the list, as does a directive in any doubt (a backslash-continued
    comment, anything but a ``//`` comment after the header name).
    """
    out: list[LeadingInclude] = []
    pos = 0
    while True:
        m = _ITEM.match(raw, pos)
        if m is None or not m.group():
            return out
        # A line comment, or what follows a directive on its line: neither may splice the next line.
        rest = m.group("comment") or m.group("pragma_rest") or m.group("rest") or b""
        if _REST.fullmatch(rest) is None or rest.rstrip(b" \t").endswith(b"\\"):  # (a line splice)
            return out
        if m.group("inc"):
            if m.group("sys"):
                line = m.group("inc").decode("utf-8", errors="replace")
            else:
                name = m.group("quoted").decode("utf-8", errors="replace")
                found = None if quote_dirs is None else next(
                    (os.path.join(d, name) for d in quote_dirs if os.path.isfile(os.path.join(d, name))), None)
                if found is None:
                    return out
                line = f'#include "{os.path.abspath(found)}"'
            out.append(LeadingInclude(line, m.start(), m.end()))
        pos = m.end()


def without_leading(raw: bytes, includes: Sequence[LeadingInclude]) -> bytes:
    """``raw`` with each of ``includes`` replaced by spaces: the same length and
    lines, so every position in the file stays where it was."""
    if not includes:
        return raw
    text = bytearray(raw)
    for inc in includes:
        text[inc.start:inc.end] = b" " * (inc.end - inc.start)
    return bytes(text)
