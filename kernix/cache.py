"""The content-addressed build cache.

Layout under the cache root (see :func:`kernix.paths.cache_root`)::

    modules/<name>/<key>/manifest.json    what was built, and from what
    modules/<name>/<key>/module-<sha>.so  the library, named by its own hash
    build/<name>/                         ninja's working directory
    sources/<name>-<sha>.<ext>            inline sources, written once
    locks/<name>.lock                     held while <name> builds

The *key* is a SHA-256 over everything known before compiling (kernix version,
source paths and bytes, requested functions, compiler identities, flags,
architecture, jaxlib version).  Headers are only known after compiling, so,
as in ccache's manifests, the manifest records every file the compilers read
with its size, mtime and SHA-256; an entry is used only if they all still
match (size and mtime first, the hash when they differ).

Guarantees: files are published by writing a temporary file and renaming it,
manifest last, so a reader sees a complete entry or none; builds of one
module name are serialised by an ``flock`` that the kernel drops when its
holder dies, so a killed builder never blocks anyone; an entry whose library
does not match its recorded size and hash is rebuilt with a warning, never
loaded; a library in a directory that other users can write to is refused.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from .errors import CacheError, KernixError
from .fileio import atomic_write, file_digest, fingerprints, fingerprints_current
from .paths import cache_root
from .spec import FunctionSpec

__all__ = [
    "MANIFEST_FORMAT",
    "Manifest",
    "compute_key",
    "lookup",
    "publish",
    "build_lock",
    "write_source",
    "clear_cache",
    "cache_info",
    "check_private",
    "build_directory",
]

MANIFEST_FORMAT = 1
_SO_NAME_RE = re.compile(r"module-[0-9a-f]{16}\.so")
_BUILDING_MARKER = ".kernix-building"


def _lock_timeout() -> float:
    """Seconds to wait for another process's build: ``$KERNIX_LOCK_TIMEOUT``, default 1800."""
    raw = os.environ.get("KERNIX_LOCK_TIMEOUT", "1800")
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise CacheError(f"KERNIX_LOCK_TIMEOUT={raw!r} is not a positive number of seconds")
    return value


def compute_key(parts: dict[str, Any]) -> str:
    """SHA-256 over a JSON-serialisable description of a build."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class Manifest:
    """A published cache entry.

    Attributes
    ----------
    directory
        The entry's directory.
    key
        Its key.
    so_path
        The library.
    functions
        The specs, in export order.
    handlers
        Function name -> exported handler symbol.
    platform
        ``"cuda"`` or ``"cpu"``.
    so_sha256
        The library's SHA-256: equal hashes mean the same code.
    """

    directory: Path
    key: str
    so_path: Path
    functions: tuple[FunctionSpec, ...]
    handlers: dict[str, str]
    platform: str
    so_sha256: str


def _entry_dir(root: Path, name: str, key: str) -> Path:
    return root / "modules" / name / key[:32]


def check_private(path: Path, root: Path, *more: Path) -> None:
    """Refuse ``path`` (and ``more``) if it, or a directory between it and
    ``root``, can be written by other users (or is owned by another user).

    A shared library is code: loading one from a directory that others can
    write to lets them run code in this process.

    Raises
    ------
    CacheError
        Naming the directory and the ``chmod`` that fixes it.
    """
    uid = os.getuid()
    chain: dict[Path, None] = {}  # ordered, each directory once
    for current in (path, *more):
        chain[current] = None
        while current != root and root in current.parents:
            current = current.parent
            chain[current] = None
    for p in chain:
        try:
            st = p.stat() if p == root else p.lstat()  # the root itself may be a link
        except (FileNotFoundError, NotADirectoryError):
            continue
        if stat.S_ISLNK(st.st_mode):
            raise CacheError(
                f"refusing to load from {p}: it is a symbolic link inside the kernix cache, which "
                "kernix never creates. Delete it (or run `kernix cache clear`)."
            )
        if st.st_uid not in (uid, 0):
            raise CacheError(
                f"refusing to load from {p}: it is owned by another user (uid {st.st_uid}). "
                "Use a cache directory of your own (set KERNIX_CACHE_DIR or call kernix.set_cache_dir())."
            )
        if st.st_mode & stat.S_IWOTH and not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX and st.st_uid == uid):
            raise CacheError(
                f"refusing to load a compiled library from {p}: other users can write to it, so "
                f"they could replace the code this process runs. Fix it with `chmod o-w {p}` "
                "or use a private cache directory (KERNIX_CACHE_DIR)."
            )


def _damaged(entry: Path, why: str) -> None:
    warnings.warn(f"kernix: the cache entry {entry} is damaged ({why}); rebuilding it", RuntimeWarning, stacklevel=4)


def _identity_of(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def lookup(root: Path, name: str, key: str) -> Manifest | None:
    """Return the usable entry for ``key``, or ``None`` (absent, stale or damaged).

    A damaged entry (unreadable manifest, missing or altered library) gives a
    ``RuntimeWarning`` and ``None``, so the caller rebuilds it.
    """
    entry = _entry_dir(root, name, key)
    try:
        raw = (entry / "manifest.json").read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        _damaged(entry, f"cannot read manifest: {exc}")
        return None
    try:
        data = json.loads(raw)
        if data.get("format") != MANIFEST_FORMAT or data.get("key") != key:
            _damaged(entry, "manifest does not belong to this key")
            return None
        if not isinstance(data.get("so"), str) or not _SO_NAME_RE.fullmatch(data["so"]):
            raise ValueError(f"bad library name {data.get('so')!r}")
        so_path = entry / data["so"]
        functions = tuple(FunctionSpec.from_json(f) for f in data["functions"])
        handlers = {str(k): str(v) for k, v in data["handlers"].items()}
        deps = data["dependencies"]
        so_size, so_sha = int(data["so_size"]), str(data["so_sha256"])
        so_identity = [int(v) for v in data.get("so_identity") or []]
        platform = str(data["platform"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        _damaged(entry, f"unreadable manifest: {exc!r}")
        return None
    if not fingerprints_current(deps):
        return None  # a header changed: an ordinary miss
    check_private(entry / "manifest.json", root, so_path)
    try:
        st = so_path.stat()
        if st.st_size != so_size:
            _damaged(entry, f"library is {st.st_size} bytes, expected {so_size}")
            return None
        # Unchanged since it was hashed at publish (same inode, size, mtime and ctime:
        # any write, replacement or utime() call changes ctime), else hash it again.
        if _identity_of(st) != so_identity and file_digest(so_path) != so_sha:
            _damaged(entry, "library content does not match its recorded SHA-256")
            return None
    except OSError as exc:
        _damaged(entry, f"library missing: {exc.strerror or exc}")
        return None
    return Manifest(entry, key, so_path, functions, handlers, platform, so_sha)


def _makedirs(path: Path) -> None:
    """Create ``path`` and its missing parents as ``0o755`` whatever the umask,
    so a permissive umask never makes the cache writable by others."""
    missing = []
    p = path
    while not p.is_dir():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    try:
        for d in reversed(missing):
            try:
                os.mkdir(d, 0o755)
            except FileExistsError:
                if not d.is_dir():
                    raise
                continue
            os.chmod(d, 0o755)
    except OSError as exc:
        raise CacheError(_io_message(path, exc)) from exc


def _io_message(path: Path, exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return (
            f"the kernix cache at {path} is not writable ({exc.strerror}). Point kernix at a "
            "writable directory with KERNIX_CACHE_DIR, kernix.set_cache_dir(), or build_directory=."
        )
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"no space left for the kernix cache at {path}. Free space, run `kernix cache clear`, "
            "or point KERNIX_CACHE_DIR at another disk."
        )
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        return (
            f"cannot use the kernix cache at {path}: a part of that path is a file, not a "
            f"directory ({exc.strerror}). Point KERNIX_CACHE_DIR (or build_directory=) at a directory."
        )
    return f"cannot use the kernix cache at {path}: {exc}"


def publish(
    root: Path,
    name: str,
    key: str,
    built_so: Path,
    functions: Sequence[FunctionSpec],
    handlers: dict[str, str],
    dependencies: Sequence[str],
    platform: str,
) -> Manifest:
    """Copy a built library into the cache and write its manifest, atomically.

    The library is stored under a name derived from its own hash and never
    rewritten in place, so a process that has it loaded is not disturbed.
    """
    entry = _entry_dir(root, name, key)
    try:
        _makedirs(entry)
        check_private(entry, root)
        for leftover in entry.glob(".*.tmp"):  # from a publisher that died (we hold the build lock)
            with contextlib.suppress(OSError):
                leftover.unlink()
        data = built_so.read_bytes()
        so_sha = hashlib.sha256(data).hexdigest()
        so_name = f"module-{so_sha[:16]}.so"
        if not (entry / so_name).is_file() or file_digest(entry / so_name) != so_sha:
            atomic_write(entry / so_name, data)
        deps = fingerprints(dependencies)
        manifest = {
            "format": MANIFEST_FORMAT,
            "key": key,
            "name": name,
            "platform": platform,
            "so": so_name,
            "so_size": len(data),
            "so_sha256": so_sha,
            "so_identity": _identity_of(os.stat(entry / so_name)),
            "functions": [f.to_json() for f in functions],
            "handlers": handlers,
            "dependencies": deps,
            "created": time.time(),
        }
        atomic_write(entry / "manifest.json", json.dumps(manifest, separators=(",", ":")).encode())
        for old in entry.glob("module-*.so"):  # superseded libraries of this entry
            if old.name != so_name:
                with contextlib.suppress(OSError):
                    old.unlink()
    except OSError as exc:
        raise CacheError(_io_message(entry, exc)) from exc
    check_private(entry / so_name, root)
    return Manifest(entry, key, entry / so_name, tuple(functions), dict(handlers), platform, so_sha)


@contextlib.contextmanager
def build_lock(root: Path, name: str, *, verbose: bool = False) -> Iterator[None]:
    """Hold the inter-process build lock of module ``name``.

    An ``flock``: released by the kernel when the holder exits or is killed,
    so a dead builder never leaves a stale lock behind.
    """
    locks = root / "locks"
    _makedirs(locks)
    path = locks / f"{name}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise CacheError(_io_message(path, exc)) from exc
    try:
        timeout = _lock_timeout()
        start = time.monotonic()
        announced = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - start
                if verbose and not announced:
                    print(f"kernix: waiting for another process building {name!r} ({path})", file=sys.stderr)
                    announced = True
                if waited > timeout:
                    raise CacheError(
                        f"gave up after {waited:.0f} s waiting for the build lock {path}, held by a live "
                        "process that is still building this module"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing drops the flock


@contextlib.contextmanager
def build_directory(root: Path, name: str, *, fresh: bool = False) -> Iterator[Path]:
    """The working directory for building module ``name``; hold :func:`build_lock` around it.

    The directory is kept between builds so ninja recompiles only what
    changed (``fresh=True`` empties it first).  An ``OSError`` inside the
    block (the cache disk is full, say) becomes a :class:`CacheError`.  While a build runs it holds a marker file; a marker found on
    entry means the previous builder died mid-build (we hold the lock, so it
    is not running), and its compilers, which run in process groups of their
    own, may still be writing there.  That directory is moved aside and
    deleted, and this build starts from an empty one: nothing a dead builder
    half-wrote is ever linked or published.
    """
    path = root / "build" / name
    marker = path / _BUILDING_MARKER
    if fresh:
        shutil.rmtree(path, ignore_errors=True)
    elif marker.exists():
        aside = path.with_name(f".{name}.stale-{os.getpid()}-{time.monotonic_ns()}")
        try:
            os.rename(path, aside)
        except OSError:
            shutil.rmtree(path, ignore_errors=True)
        else:
            shutil.rmtree(aside, ignore_errors=True)
        warnings.warn(
            f"kernix: a previous build of {name!r} in {path} was interrupted (its process died); "
            "starting that build afresh", RuntimeWarning, stacklevel=3,
        )
    _makedirs(path)
    check_private(path, root)  # what is compiled here must not be replaceable by others
    try:
        marker.write_text(f"{os.getpid()}\n")
    except OSError as exc:
        raise CacheError(_io_message(path, exc)) from exc
    try:
        yield path
    except Exception as exc:
        # An ordinary error (a failed compile) leaves a consistent directory;
        # an interrupt or a kill leaves the marker behind.
        with contextlib.suppress(OSError):
            marker.unlink()
        if isinstance(exc, OSError):
            raise CacheError(_io_message(path, exc)) from exc
        raise
    with contextlib.suppress(OSError):
        marker.unlink()


def write_source(root: Path, name: str, text: str, ext: str) -> Path:
    """Store an inline source under a content-derived name; return its path."""
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise KernixError(
            f"the inline source of module {name!r} cannot be written as UTF-8: {exc.reason} at "
            f"character {exc.start} ({text[exc.start:exc.start + 1]!r}). Remove that character."
        ) from None
    digest = hashlib.sha256(data).hexdigest()[:16]
    path = root / "sources" / f"{name}-{digest}.{ext}"
    try:
        if not (path.is_file() and path.read_bytes() == data):
            _makedirs(path.parent)
            atomic_write(path, data)
    except OSError as exc:
        raise CacheError(_io_message(path, exc)) from exc
    check_private(path, root)  # it is about to be compiled
    return path


def clear_cache(name: str | None = None, *, root: str | os.PathLike[str] | None = None) -> int:
    """Delete cached builds: of module ``name``, or of every module.

    Waits for a build of the module in progress to finish first, so it never
    pulls files from under a running build.  Libraries already loaded by a
    process stay usable.

    Returns
    -------
    int
        The number of module entries removed.
    """
    base = Path(root) if root is not None else cache_root()
    modules = base / "modules"
    if name is not None:
        from .names import check_module_name

        check_module_name(name)
        names = [name]
    else:
        from .names import is_module_name

        names = sorted(p.name for p in modules.iterdir()) if modules.is_dir() else []
        if (base / "build").is_dir():
            names = sorted(set(names) | {p.name for p in (base / "build").iterdir()})
        names = [n for n in names if is_module_name(n)]
    removed = 0
    for n in names:
        with build_lock(base, n):
            mdir = modules / n
            if mdir.is_dir():
                removed += sum(1 for p in mdir.iterdir() if p.is_dir())
            shutil.rmtree(mdir, ignore_errors=True)
            shutil.rmtree(base / "build" / n, ignore_errors=True)
            for stale in (base / "build").glob(f".{n}.stale-*"):
                shutil.rmtree(stale, ignore_errors=True)
            # Exactly this module's sources: "ops-<hash>.cpp", not "ops-v2-<hash>.cpp".
            mine = re.compile(re.escape(n) + r"-[0-9a-f]{16}\.[a-z]+")
            for src in (base / "sources").glob(f"{n}-*"):
                if mine.fullmatch(src.name):
                    with contextlib.suppress(OSError):
                        src.unlink()
    if name is None:
        shutil.rmtree(base / "specs", ignore_errors=True)
    return removed


def cache_info(*, root: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Describe the cache: its root, total size, and one record per module entry."""
    base = Path(root) if root is not None else cache_root()
    entries = []
    total = 0
    for manifest in sorted((base / "modules").glob("*/*/manifest.json")):
        size = sum(p.stat().st_size for p in manifest.parent.iterdir() if p.is_file())
        total += size
        try:
            data = json.loads(manifest.read_text())
            entries.append(
                {
                    "name": data.get("name"),
                    "key": data.get("key"),
                    "platform": data.get("platform"),
                    "functions": [f["name"] for f in data.get("functions", [])],
                    "path": str(manifest.parent),
                    "size_bytes": size,
                    "created": data.get("created"),
                }
            )
        except (OSError, ValueError):
            entries.append({"name": manifest.parent.parent.name, "path": str(manifest.parent), "damaged": True, "size_bytes": size})
    for sub in ("build", "sources", "specs"):
        d = base / sub
        if d.is_dir():
            total += sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
    return {"root": str(base), "total_bytes": total, "modules": entries}
