"""File primitives of the store: the content key, hashing, file versions,
atomic writes, records and the memos kept in them, and inline sources.

A file's *version* is ``[path, inode, size, mtime_ns, ctime_ns, sha256]``: still
*current* when its stat is unchanged or its content hashes the same (``touch``
alone is no change); one that changed while a build read it is *unsettled*
(:func:`settled_versions`), never current.

A *record* (``*.rec``) is :data:`RECORD_MAGIC` and one plain value in
:mod:`marshal`'s format 4 (why, and how it is kept safe: docs/how-it-works.rst,
"Layout and formats").
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import re
import secrets
import tempfile
import time
from pathlib import Path
from operator import itemgetter
from typing import Any, Callable, Iterable, Sequence

from ..paths import cache_root
from .trust import check_private, io_message, is_private, makedirs

__all__ = [
    "content_key", "file_digest", "FileStat", "version_current", "versions_current", "stale_file",
    "settled_versions", "filesystem_now", "UNSETTLED", "atomic_write", "write_source", "source_module", "remembered",
    "COMPILER_ENVIRONMENT", "compiler_environment", "RECORD_MAGIC", "encode_record", "write_record", "read_record",
    "UntrustedRecord", "recall", "remember", "PRELUDE_FILE", "new_prelude_file", "prelude_file",
]

#: The environment variables that change what a compiler does with the same arguments:
#: they enter every cache key and fingerprint, and every answer remembered about a compiler.
COMPILER_ENVIRONMENT = (
    "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH", "COMPILER_PATH", "GCC_EXEC_PREFIX",
    "SOURCE_DATE_EPOCH", "CCC_OVERRIDE_OPTIONS", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN",
)

#: The digest of an unsettled file version (see the module documentation).
UNSETTLED = "changed during the build"


def compiler_environment() -> dict[str, str | None]:
    """The value of each of :data:`COMPILER_ENVIRONMENT` (``None``: unset)."""
    return {v: os.environ.get(v) for v in COMPILER_ENVIRONMENT}


#: The first bytes of every record file.
RECORD_MAGIC = b"kernix record 1\n"


def _canonical(value: Any) -> Any:
    """``value`` with dicts as their items in key order and other than plain data as ``str``."""
    if isinstance(value, dict):
        return ("{}", [(k, _canonical(value[k])) for k in sorted(value)])
    if isinstance(value, (list, tuple)):
        return [v if type(v) is str else _canonical(v) for v in value]  # (strings, most items, inline)
    return value if value is None or isinstance(value, (str, int, float)) else str(value)


def content_key(parts: Any, *blobs: bytes) -> str:
    """The one content key of every kernix cache: SHA-256 over the ``repr`` of
    ``parts`` (dicts in key order, tuples as lists, other values as ``str``), then ``blobs``."""
    h = hashlib.sha256(repr(_canonical(parts)).encode("utf-8", "surrogatepass"))
    for blob in blobs:
        h.update(b"\0")
        h.update(blob)
    return h.hexdigest()


def encode_record(value: Any) -> bytes:
    """The bytes of a record file holding ``value`` (plain data)."""
    return RECORD_MAGIC + marshal.dumps(value, 4)


def write_record(path: str | os.PathLike[str], value: Any) -> bool:
    """Write the record file ``path`` holding ``value``, atomically (not durably:
    a record is computed again when missing); whether it was written."""
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
    """The value of the record file at ``path`` under the cache root ``root``:
    an ``OSError`` when it cannot be read, a ``ValueError`` when it is not a
    record, a damaged one, or (:class:`UntrustedRecord`) another user's."""
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


def _memo_path(root: str | os.PathLike[str], kind: str, key: str, suffix: str = ".rec") -> Path:
    return Path(root, "toolchain", f"{kind}-{key}{suffix}")


def recall(kind: str, key: str, *, root: str | os.PathLike[str] | None = None) -> Any:
    """The answer remembered as ``kind`` for ``key`` under the cache root ``root``
    (default: :func:`kernix.paths.cache_root`), or ``None`` (none, or unusable)."""
    base = root if root is not None else cache_root()
    try:
        return read_record(_memo_path(base, kind, key), base)
    except (OSError, ValueError):
        return None


def remember(kind: str, key: str, value: Any, *, root: str | os.PathLike[str] | None = None) -> bool:
    """Remember ``value`` (plain data) as ``kind`` for ``key``; whether it was written."""
    return write_record(_memo_path(root if root is not None else cache_root(), kind, key), value)


#: A prelude: a record remembered as ``prelude`` (:func:`remember`) with the files
#: it names (:func:`new_prelude_file`), evicted together by their last use.
PRELUDE_FILE = r"prelude-([0-9a-f]+)(?:\.rec|-[0-9a-f]{16}\.[a-z]+)"


def new_prelude_file(root: str | os.PathLike[str], key: str, suffix: str) -> Path:
    """A new file name for the prelude ``key``, ending in ``suffix``, its directory made."""
    path = _memo_path(root, "prelude", key, f"-{secrets.token_hex(8)}{suffix}")
    makedirs(path.parent)
    return path


def prelude_file(root: str | os.PathLike[str], key: str, name: object) -> Path | None:
    """The file of the prelude ``key`` that its record names ``name``, if that
    is one of its names and no other user could have written it."""
    match = re.fullmatch(PRELUDE_FILE, name) if isinstance(name, str) else None
    if match is None or match.group(1) != key or name.endswith(".rec"):  # type: ignore[union-attr]
        return None
    path = _memo_path(root, "prelude", key, "").with_name(name)  # type: ignore[arg-type]
    return path if is_private(path, root) else None


def file_digest(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes, as hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class FileStat(tuple):
    """``(inode, size, mtime_ns, ctime_ns)``: what ``stat`` says of a file's
    version.  Any write, replacement or ``utime()`` changes the ctime, which no
    user can set back, so a file with an equal ``FileStat`` has not changed."""

    __slots__ = ()
    inode = property(itemgetter(0))
    size = property(itemgetter(1))
    mtime_ns = property(itemgetter(2))
    ctime_ns = property(itemgetter(3))

    def __new__(cls, inode: int, size: int, mtime_ns: int, ctime_ns: int) -> FileStat:
        return tuple.__new__(cls, (inode, size, mtime_ns, ctime_ns))

    def __getnewargs__(self) -> tuple[int, ...]:  # (copy and pickle)
        return tuple(self)

    @classmethod
    def of(cls, path: str | os.PathLike[str]) -> FileStat:
        """The stat of ``path`` (following links); ``OSError`` as :func:`os.stat`."""
        st = os.stat(path)
        return tuple.__new__(cls, (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))


def version_current(version: Sequence[Any]) -> bool:
    """Whether a file still has its recorded version's content (hashed only when its stat moved)."""
    path, inode, size, mtime_ns, ctime_ns, digest = version
    try:
        st = os.stat(path)  # (compared field by field: every warm load checks each file the build read)
        if st.st_ino == inode and st.st_size == size and st.st_mtime_ns == mtime_ns and st.st_ctime_ns == ctime_ns:
            return True
        return st.st_size == size and file_digest(path) == digest
    except OSError:
        return False


def versions_current(versions: Sequence[Sequence[Any]]) -> bool:
    """Whether every file of ``versions`` still has the recorded content."""
    return all(version_current(v) for v in versions)


def stale_file(versions: Sequence[Sequence[Any]]) -> str | None:
    """Why ``versions`` are not all current (``"P changed during the build"``,
    ``"P changed"``, of the first that is not), else ``None``."""
    for version in versions:
        if not version_current(version):
            return f"{version[0]} {UNSETTLED if version[-1] == UNSETTLED else 'changed'}"
    return None


def filesystem_now(directory: str | os.PathLike[str], *, settle_s: float = 2.0) -> int:
    """The file system's clock in ``directory`` (ns): every file written before
    the call has an earlier time, every file written after a later or equal
    one.  It is the modification time of a file created there (the clock may
    be another machine's), read until it moves past the first reading (file
    systems stamp coarsely), at most ``settle_s`` seconds; ``OSError`` when no
    file can be created there."""
    first = _clock_reading(directory)
    deadline = time.monotonic() + settle_s
    while True:
        now = _clock_reading(directory)
        if now > first or time.monotonic() > deadline:
            return now
        time.sleep(0.001)


def _clock_reading(directory: str | os.PathLike[str]) -> int:
    fd, path = tempfile.mkstemp(dir=directory, prefix=".clock-", suffix=".tmp")
    try:
        return os.fstat(fd).st_mtime_ns
    finally:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):  # (a clear of every module removes it: no module's)
            os.unlink(path)


def settled_versions(paths: Iterable[str], started_ns: int, fixed: dict[str, str] | None = None) -> list[list[Any]]:
    """The version of each file a build that started at ``started_ns`` (by
    :func:`filesystem_now`) read, taken after the build.  A file changed at or
    after the start, or gone, is *unsettled* (``[path, -1, -1, -1, -1,
    UNSETTLED]``, as ccache refuses to record one); an mtime later than the
    ctime was set by hand and says nothing.  ``fixed`` maps paths whose content
    cannot change (inline sources) to the SHA-256 they must have."""
    out: list[list[Any]] = []
    for path in paths:
        try:
            stat = FileStat.of(path)
            digest = file_digest(path)
        except OSError:
            out.append([path, -1, -1, -1, -1, UNSETTLED])
            continue
        moved = stat.ctime_ns >= started_ns or started_ns <= stat.mtime_ns <= stat.ctime_ns
        settled = digest == fixed[path] if fixed and path in fixed else not moved
        out.append([path, *stat, digest] if settled else [path, -1, -1, -1, -1, UNSETTLED])
    return out


def atomic_write(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename (readers
    see the old file or the new one); ``durable``: flushed to disk first."""
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
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def source_module(file_name: str) -> str | None:
    """The module whose inline source is stored under ``file_name``
    (``<module>-<16 hex digits>.<ext>``), or ``None``."""
    match = re.fullmatch(r"(.+)-[0-9a-f]{16}\.[a-z]+", file_name)
    return match.group(1) if match else None


def write_source(root: Path, name: str, text: str, ext: str) -> Path:
    """Store an inline source under a content-derived name in ``root/sources``; return its path."""
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        from ..errors import KernixError
        raise KernixError(
            f"the inline source of module {name!r} cannot be written as UTF-8: {exc.reason} at "
            f"character {exc.start} ({text[exc.start:exc.start + 1]!r}). Remove that character."
        ) from None
    digest = hashlib.sha256(data).hexdigest()[:16]
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
    """``compute()``, remembered on disk per the executable's stat and
    :data:`COMPILER_ENVIRONMENT` (what a compiler says of itself: a warm
    process never runs one); a ``None`` answer is not remembered."""
    stamp = content_key([kind, executable, *FileStat.of(executable), compiler_environment()])[:24]
    found = recall(kind, stamp)
    if isinstance(found, dict) and "value" in found:
        return found["value"]
    value = compute()
    if value is not None:
        remember(kind, stamp, {"executable": executable, "value": value})
    return value
