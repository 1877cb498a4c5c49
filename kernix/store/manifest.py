"""The manifest of a cache entry: one class owns its on-disk format.

Format 2 (``manifest.json``, one JSON object; every key is written, readers
refuse an unknown ``format``)::

    format        2
    key           the entry's full key (SHA-256 hex of everything known before compiling)
    name          the module name
    platform      "cuda" or "cpu"
    so            the library's file name, "module-<first 16 hex of its SHA-256>.so"
    so_size       its size in bytes
    so_sha256     its SHA-256 (equal hashes: the same code)
    so_identity   [inode, size, mtime_ns, ctime_ns] when it was hashed at publish
    functions     the specs, in export order (FunctionSpec.to_json)
    handlers      function name -> exported handler symbol
    dependencies  [[path, size, mtime_ns, sha256], ...] every file the build read
    created       seconds since the epoch

As in ccache's manifests, the headers a build read are only known after
compiling, so they are recorded here and re-checked at every look-up.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, NamedTuple

from ..names import is_identifier
from ..spec import FunctionSpec
from .files import atomic_write

__all__ = ["MANIFEST_FORMAT", "Manifest", "ManifestError", "entry_dir"]

MANIFEST_FORMAT = 2
_SO_NAME_RE = re.compile(r"module-[0-9a-f]{16}\.so")
_SYMBOL_RE = re.compile(r"kernix_handler_[0-9]+_[A-Za-z0-9_]+")


class ManifestError(ValueError):
    """A manifest that cannot be used; the message says why."""


def entry_dir(root: Path, name: str, key: str) -> Path:
    """The directory of the entry ``key`` of module ``name``."""
    return root / "modules" / name / key[:32]


class Manifest(NamedTuple):
    """A published cache entry (see the module docstring for the format).

    Attributes
    ----------
    directory
        The entry's directory (not stored: where the manifest was read).
    """

    directory: Path
    key: str
    name: str
    platform: str
    so: str
    so_size: int
    so_sha256: str
    so_identity: tuple[int, ...]
    functions: tuple[FunctionSpec, ...]
    handlers: dict[str, str]
    dependencies: tuple[tuple[Any, ...], ...]
    created: float = 0.0

    @property
    def so_path(self) -> Path:
        """The library."""
        return self.directory / self.so

    def to_json(self) -> dict[str, Any]:
        """The on-disk form."""
        return {
            "format": MANIFEST_FORMAT,
            "key": self.key,
            "name": self.name,
            "platform": self.platform,
            "so": self.so,
            "so_size": self.so_size,
            "so_sha256": self.so_sha256,
            "so_identity": list(self.so_identity),
            "functions": [f.to_json() for f in self.functions],
            "handlers": dict(self.handlers),
            "dependencies": [list(d) for d in self.dependencies],
            "created": self.created,
        }

    @classmethod
    def from_json(cls, directory: Path, data: Any) -> "Manifest":
        """Validate and read the on-disk form.

        Everything that later reaches generated code, a compiler or ``dlopen``
        is checked here: the library name, the handler symbols and the specs.

        Raises
        ------
        ManifestError
            Saying what is wrong.
        """
        try:
            if not isinstance(data, dict):
                raise ManifestError("not a JSON object")
            if data.get("format") != MANIFEST_FORMAT:
                raise ManifestError(f"format {data.get('format')!r}, this kernix reads {MANIFEST_FORMAT}")
            so = data["so"]
            if not isinstance(so, str) or not _SO_NAME_RE.fullmatch(so):
                raise ManifestError(f"bad library name {so!r}")
            functions = tuple(FunctionSpec.from_json(f) for f in data["functions"])
            handlers = {str(k): str(v) for k, v in data["handlers"].items()}
            for fn in functions:
                if not is_identifier(fn.name) or not _SYMBOL_RE.fullmatch(handlers.get(fn.name, "")):
                    raise ManifestError(f"bad function or handler name for {fn.name!r}")
            platform = str(data["platform"])
            if platform not in ("cuda", "cpu"):
                raise ManifestError(f"unknown platform {platform!r}")
            return cls(
                directory=directory,
                key=str(data["key"]),
                name=str(data["name"]),
                platform=platform,
                so=so,
                so_size=int(data["so_size"]),
                so_sha256=str(data["so_sha256"]),
                so_identity=tuple(int(v) for v in data.get("so_identity") or ()),
                functions=functions,
                handlers=handlers,
                dependencies=tuple(tuple(d) for d in data["dependencies"]),
                created=float(data.get("created", 0.0)),
            )
        except ManifestError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ManifestError(f"unreadable manifest: {exc!r}") from None

    @classmethod
    def read(cls, directory: Path) -> "Manifest":
        """Read ``directory/manifest.json``.

        Raises
        ------
        FileNotFoundError
            When there is none; ``OSError`` when it cannot be read;
            :class:`ManifestError` when it is not a valid manifest.
        """
        raw = (directory / "manifest.json").read_bytes()
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise ManifestError(f"not JSON: {exc}") from None
        return cls.from_json(directory, data)

    def write(self) -> None:
        """Write ``manifest.json`` atomically (readers see the old one or this one)."""
        atomic_write(self.directory / "manifest.json", json.dumps(self.to_json(), separators=(",", ":")).encode())
