"""Small file utilities shared by the caches: the content key, hashing,
fingerprints, atomic writes, records, inline sources stored under a
content-derived name, and answers remembered per executable.

A *fingerprint* of a file is ``[path, size, mtime_ns, sha256]``.  A file is
still *current* when its size and mtime match, or, if only the mtime moved,
when its content still hashes the same (so ``touch`` alone is not a change).

A *record* (``*.rec``: the direct index, the spec cache, the tool memos, what
every warm look-up reads) is :data:`RECORD_MAGIC` followed by one plain value
(``None``, ``bool``, ``int``, ``float``, ``str``, ``list``, ``dict``) in
:mod:`marshal`'s format version 4, CPython's own for ``.pyc`` files and the
same in every Python kernix supports.  Reading one needs no import (:mod:`json`
brings :mod:`re`, most of a warm ``kernix inspect``'s start-up), and is
faster.  marshal is not meant for data others could have
crafted: records are read only where no other user could have written them
(:func:`read_record` checks it, :mod:`kernix.store.trust`), and each reader
validates what it finds, as it would JSON (a wrong shape is a miss).  Manifests stay JSON.
"""

from __future__ import annotations

import marshal
import os
import sys

from .trust import check_private, io_message, is_private, makedirs

TYPE_CHECKING = False  # as typing.TYPE_CHECKING: typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, Callable, Iterable, Sequence

__all__ = [
    "sha256", "content_key", "file_digest", "fingerprints", "fingerprints_current", "atomic_write", "write_source",
    "source_module", "remembered", "RECORD_MAGIC", "encode_record", "write_record", "read_record", "UntrustedRecord",
]

RECORD_MAGIC = b"kernix record 1\n"
"""The first bytes of every record file (see the module documentation)."""


def _builtin_sha256() -> Any:
    """CPython's own SHA-256 constructor (3.12+: ``_sha2``; 3.11: ``_sha256``), or ``None``."""
    try:
        if sys.version_info >= (3, 12):
            from _sha2 import sha256
        else:
            from _sha256 import sha256
    except ImportError:
        return None
    return sha256


_builtin: Any = False  # _builtin_sha256(), looked for on first use


def sha256(data: bytes = b"") -> Any:
    """A SHA-256 hash object over ``data``, as :func:`hashlib.sha256` gives.

    Until something imports :mod:`hashlib` (``import jax`` does), this is
    CPython's built-in implementation: the same digests, without loading
    OpenSSL's libcrypto, which costs a command-line start 2-5 ms.  Large
    files go through :func:`file_digest`, which uses hashlib (faster per byte).
    """
    global _builtin
    if "hashlib" not in sys.modules:
        if _builtin is False:
            _builtin = _builtin_sha256()
        if _builtin is not None:
            return _builtin(data)
    import hashlib

    return hashlib.sha256(data)


def _canonical(value: Any) -> Any:
    """``value`` with each dict (keys: strings) replaced by its items in key
    order and each value other than plain data by its ``str``, so that its
    ``repr`` does not depend on insertion order or on object identities."""
    if isinstance(value, dict):
        return ("{}", [(k, _canonical(value[k])) for k in sorted(value)])
    if isinstance(value, (list, tuple)):
        return [v if type(v) is str else _canonical(v) for v in value]  # (strings, most items, inline)
    return value if value is None or isinstance(value, (str, int, float)) else str(value)


def content_key(parts: Any, *blobs: bytes) -> str:
    """The one content key of every kernix cache: SHA-256 over the canonical
    form of ``parts`` followed by each of ``blobs``.

    ``parts`` is plain data (``None``, ``bool``, ``int``, ``float``, ``str``,
    lists, tuples and dicts with string keys; other values are taken as their
    ``str``); the canonical form is the ``repr`` of it with dicts in key
    order and tuples as lists.
    """
    h = sha256(repr(_canonical(parts)).encode("utf-8", "surrogatepass"))
    for blob in blobs:
        h.update(b"\0")
        h.update(blob)
    return h.hexdigest()


def encode_record(value: Any) -> bytes:
    """The bytes of a record file holding ``value`` (plain data)."""
    return RECORD_MAGIC + marshal.dumps(value, 4)


def write_record(path: str | os.PathLike[str], value: Any) -> bool:
    """Write the record file ``path`` holding ``value``, atomically (not
    durably: every record is an optimisation, computed again when missing),
    creating its directory.  Whether it was written: failing to (a read-only
    cache, a full disk, a value that is not plain data) is not an error."""
    from ..errors import CacheError

    try:
        makedirs(os.path.dirname(path))
        atomic_write(path, encode_record(value), durable=False)
    except (OSError, CacheError, ValueError):  # (ValueError: not plain data)
        return False
    return True


class UntrustedRecord(ValueError):
    """A record file another user could have written: it is not read."""


def read_record(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> Any:
    """The value of the record file at ``path`` under the cache root ``root``,
    read only when no other user could have written it (:func:`is_private`).

    Raises
    ------
    OSError
        When it cannot be read (:class:`FileNotFoundError` when missing).
    UntrustedRecord
        When another user could have written it.
    ValueError
        When it is not a record, or a damaged one.
    """
    if not is_private(path, root):
        raise UntrustedRecord(f"{path} could have been written by another user")
    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(RECORD_MAGIC):
        raise ValueError("not a kernix record")
    try:
        return marshal.loads(memoryview(data)[len(RECORD_MAGIC):])
    except (EOFError, TypeError) as exc:
        raise ValueError(f"a damaged record ({exc})") from None


def file_digest(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes, as hex."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fingerprints(paths: Iterable[str]) -> list[list[Any]]:
    """``[path, size, mtime_ns, ctime_ns, sha256]`` for each path."""
    out = []
    for path in paths:
        st = os.stat(path)
        out.append([path, st.st_size, st.st_mtime_ns, st.st_ctime_ns, file_digest(path)])
    return out


def fingerprints_current(prints: Sequence[Sequence[Any]]) -> bool:
    """Whether every fingerprinted file still has the recorded content.

    A file is hashed again unless its size, mtime and ctime are all as
    recorded: a file replaced by one of the same size and mtime (``cp -p``,
    ``tar x``, ``rsync -a``) has another ctime, which no user can set back.
    """
    for path, size, mtime_ns, ctime_ns, digest in prints:
        try:
            st = os.stat(path)
            if st.st_size != size:
                return False
            if (st.st_mtime_ns, st.st_ctime_ns) != (mtime_ns, ctime_ns) and file_digest(path) != digest:
                return False
        except OSError:
            return False
    return True


def atomic_write(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename.

    Readers see the old file or the whole new one, never a part.  With
    ``durable`` the data is flushed to disk before the rename.
    """
    import tempfile  # (only writers need it)

    directory, name = os.path.split(os.fspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def source_module(file_name: str) -> str | None:
    """The module whose inline source is stored under ``file_name``
    (:func:`write_source`: ``<module>-<16 hex digits>.<ext>``), or ``None``
    when it is no inline source's name: ``ops-v2-<hash>.cpp`` is ``ops-v2``'s."""
    import re

    match = re.fullmatch(r"(.+)-[0-9a-f]{16}\.[a-z]+", file_name)
    return match.group(1) if match else None


def write_source(root: Path, name: str, text: str, ext: str) -> Path:
    """Store an inline source under a content-derived name in ``root/sources``; return its path."""
    from pathlib import Path  # (a load imports it anyway; the command line's look-ups do not)

    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        from ..errors import KernixError

        raise KernixError(
            f"the inline source of module {name!r} cannot be written as UTF-8: {exc.reason} at "
            f"character {exc.start} ({text[exc.start:exc.start + 1]!r}). Remove that character."
        ) from None
    digest = sha256(data).hexdigest()[:16]
    path = Path(root, "sources", f"{name}-{digest}.{ext}")
    for attempt in (1, 2, 3):
        try:
            if not (path.is_file() and path.read_bytes() == data):
                makedirs(path.parent)
                atomic_write(path, data)
            break
        except OSError as exc:
            if isinstance(exc, FileNotFoundError) and attempt < 3:
                continue  # a `kernix cache clear` removed sources/ or the temporary file meanwhile: again
            from ..errors import CacheError

            raise CacheError(io_message(path, exc)) from exc
    check_private(path, root)  # it is about to be compiled
    return path


def remembered(kind: str, executable: str, compute: Callable[[], Any]) -> Any:
    """``compute()``, remembered on disk per (executable, size, mtime, ctime).

    Used for what a compiler reports about itself (its version banner, its
    include directories), so a warm process never runs a compiler.  A
    ``None`` answer (the question failed) is not remembered; failing to
    remember is not an error.
    """
    from ..paths import cache_root_str

    st = os.stat(executable)
    stamp = content_key([kind, executable, st.st_size, st.st_mtime_ns, st.st_ctime_ns])[:24]
    root = cache_root_str()
    memo = os.path.join(root, "toolchain", f"{kind}-{stamp}.rec")
    try:
        return read_record(memo, root)["value"]
    except (OSError, ValueError, KeyError, TypeError):  # (an answer others could have written is not trusted)
        pass
    value = compute()
    if value is None:
        return None
    write_record(memo, {"executable": executable, "value": value})
    return value
