"""The manifest of a cache entry: one class owns its on-disk format.

Format 8 (``manifest.json``, one JSON object; every key is written, readers
refuse an unknown ``format``)::

    format          8
    key             the entry's full key (SHA-256 hex of everything known before compiling)
    name            the module name
    platform        "cuda" or "cpu"
    so              the library's file name, "module-<first 16 hex of its SHA-256>.so"
    so_size         its size in bytes
    so_sha256       its SHA-256 (equal hashes: the same code)
    so_stat         [inode, size, mtime_ns, ctime_ns] when it was hashed at publish (a FileStat)
    sources         the source files the functions come from, in export order, each once (what
                    ``kernix cache info`` shows)
    handlers        function name -> exported handler symbol, in export order
    specs_sha256    the SHA-256 of the entry's ``functions.json``
    dependencies    the version of every file the build read but the host compiler's own
                    headers, or its unsettled version (both: kernix.store.files)
    created         seconds since the epoch

and beside it, written first, ``functions.json`` (the functions' specs in
export order) and ``last-use`` (:mod:`kernix.store.entries`).  Reading a
manifest checks what a load uses (library name, handler symbols); the specs
are parsed and checked only when :meth:`Manifest.specs` is asked.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..platforms import JAX_PLATFORMS
from ..language.names import handlers_problem
from .files import FileStat, atomic_write

if TYPE_CHECKING:
    from ..language.spec import FunctionSpec

__all__ = ["MANIFEST_FORMAT", "Manifest", "ManifestError", "entry_dir"]

MANIFEST_FORMAT = 8
SPECS_FILE = "functions.json"


class ManifestError(ValueError):
    """A manifest that cannot be used; the message says why."""


def entry_dir(root: Path, name: str, key: str) -> Path:
    """The directory of the entry ``key`` of module ``name``."""
    return root / "modules" / name / key[:32]


class Manifest:
    """A published cache entry: each field as stored, and ``directory``, the
    entry's directory (where the manifest was read)."""

    #: The fields stored in ``manifest.json``, in order.
    STORED = ("key", "name", "platform", "so", "so_size", "so_sha256", "so_stat", "sources", "handlers",
              "specs_sha256", "dependencies", "created")
    __slots__ = ("directory", *STORED, "_specs_raw")

    def __init__(self, *, directory: Path, key: str, name: str, platform: str, so: str, so_size: int,
                 so_sha256: str, so_stat: FileStat, sources: tuple[str, ...] = (), handlers: dict[str, str],
                 specs_sha256: str, dependencies: tuple[tuple[Any, ...], ...], created: float = 0.0) -> None:
        self.directory = directory
        self.key = key
        self.name = name
        self.platform = platform
        self.so = so
        self.so_size = so_size
        self.so_sha256 = so_sha256
        self.so_stat = so_stat
        self.sources = sources
        self.handlers = handlers
        self.specs_sha256 = specs_sha256
        self.dependencies = dependencies
        self.created = created
        self._specs_raw: bytes | None = None  # functions.json, once kept

    @property
    def so_path(self) -> Path:
        """The library."""
        return self.directory / self.so

    @staticmethod
    def specs_bytes(specs: "Sequence[FunctionSpec]") -> bytes:
        """What ``functions.json`` holds for ``specs``."""
        return json.dumps([f.to_json() for f in specs], separators=(",", ":")).encode()

    def keep_specs(self) -> None:
        """Read ``functions.json`` now (unchecked): :meth:`specs` works after the entry is removed."""
        self._specs_raw = (self.directory / SPECS_FILE).read_bytes()

    def specs(self) -> "tuple[FunctionSpec, ...]":
        """The functions' specs, read from ``functions.json`` and validated; a
        :class:`ManifestError` says what is wrong."""
        from ..language.spec import FunctionSpec  # (a warm load reads no spec)

        raw = self._specs_raw
        if raw is None:
            try:
                raw = (self.directory / SPECS_FILE).read_bytes()
            except OSError as exc:
                raise ManifestError(f"cannot read {SPECS_FILE}: {exc.strerror or exc}") from None
        if hashlib.sha256(raw).hexdigest() != self.specs_sha256:
            raise ManifestError(f"{SPECS_FILE} does not have its recorded SHA-256")
        try:
            records = json.loads(raw)
            if [r["name"] for r in records] != list(self.handlers):
                raise ManifestError(f"the functions of {SPECS_FILE} are not the handlers'")
        except (ValueError, KeyError, TypeError) as exc:
            raise ManifestError(f"{SPECS_FILE} is not a list of spec records: {exc!r}") from None
        specs = []
        for record in records:
            try:
                specs.append(FunctionSpec.from_json(record))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ManifestError(f"the record of function {record['name']!r} is not a valid spec: {exc}") from None
        return tuple(specs)

    @classmethod
    def read(cls, directory: Path) -> "Manifest":
        """Read and validate ``directory/manifest.json``: an ``OSError``, or a
        :class:`ManifestError` saying what is wrong."""
        raw = (directory / "manifest.json").read_bytes()
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise ManifestError(f"not JSON: {exc}") from None
        try:
            if not isinstance(data, dict):
                raise ManifestError("not a JSON object")
            if data.get("format") != MANIFEST_FORMAT:
                raise ManifestError(f"format {data.get('format')!r} (another kernix version's); this kernix "
                                    f"reads format {MANIFEST_FORMAT}")
            so = data["so"]
            if not (isinstance(so, str) and len(so) == 26 and so.startswith("module-") and so.endswith(".so")
                    and all(c in "0123456789abcdef" for c in so[7:23])):  # module-<16 hex digits>.so
                raise ManifestError(f"bad library name {so!r}")
            handlers = data["handlers"]
            if not isinstance(handlers, dict):
                raise ManifestError("handlers is not a JSON object")
            problem = handlers_problem(list(handlers), handlers)
            if problem:
                raise ManifestError(problem)
            if not isinstance(data["sources"], list):
                raise ManifestError("sources is not a JSON list")
            platform = data["platform"]
            if platform not in JAX_PLATFORMS:
                raise ManifestError(f"unknown platform {platform!r}")
            return cls(
                directory=directory, key=str(data["key"]), name=str(data["name"]), platform=platform, so=so,
                so_size=int(data["so_size"]), so_sha256=str(data["so_sha256"]),
                so_stat=FileStat(*(int(v) for v in data["so_stat"])), sources=tuple(str(s) for s in data["sources"]),
                handlers=handlers, specs_sha256=str(data["specs_sha256"]),
                dependencies=tuple(tuple(d) for d in data["dependencies"]), created=float(data["created"]),
            )
        except ManifestError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ManifestError(f"unreadable manifest: {exc!r}") from None

    def write(self) -> None:
        """Write ``manifest.json`` atomically (readers see the old one or this one)."""
        data = {"format": MANIFEST_FORMAT, **{f: getattr(self, f) for f in self.STORED}}  # (tuples as JSON lists)
        atomic_write(self.directory / "manifest.json", json.dumps(data, separators=(",", ":")).encode())
