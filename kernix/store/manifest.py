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
    functions     the specs, in export order (FunctionSpec.to_json); kept as
                  records when read, and made into specs on first use
    handlers      function name -> exported handler symbol
    dependencies  [[path, size, mtime_ns, sha256], ...] every file the build read
    created       seconds since the epoch

As in ccache's manifests, the headers a build read are only known after
compiling, so they are recorded here and re-checked at every look-up.

Reading a manifest checks what a load uses (library name, function names,
handler symbols) but leaves each function's spec as its JSON record until
:meth:`Manifest.specs` is asked: a warm load that calls one function of forty
validates one spec, and does not import :mod:`kernix.spec` to register them.
"""

# No `from __future__ import annotations`: typing.NamedTuple would compile every
# field's annotation string at import, on the warm path.

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Sequence

from ..languages import JAX_PLATFORMS
from ..names import handlers_problem
from .files import atomic_write

if TYPE_CHECKING:
    from ..spec import FunctionSpec

__all__ = ["MANIFEST_FORMAT", "Manifest", "ManifestError", "entry_dir"]

MANIFEST_FORMAT = 2


def _is_library_name(name: object) -> bool:
    """``module-<16 lower-case hex digits>.so``."""
    return (
        isinstance(name, str) and len(name) == 26 and name.startswith("module-") and name.endswith(".so")
        and all(c in "0123456789abcdef" for c in name[7:23])
    )


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
    functions
        The specs' JSON records, in export order (see :meth:`specs`).
    handlers
        Exported name -> handler symbol, in export order.
    """

    directory: Path
    key: str
    name: str
    platform: str
    so: str
    so_size: int
    so_sha256: str
    so_identity: tuple[int, ...]
    functions: tuple[dict[str, Any], ...]
    handlers: dict[str, str]
    dependencies: tuple[tuple[Any, ...], ...]
    created: float = 0.0

    @property
    def so_path(self) -> Path:
        """The library."""
        return self.directory / self.so

    @classmethod
    def records(cls, specs: "Sequence[FunctionSpec]") -> tuple[dict[str, Any], ...]:
        """The records of ``specs``, as :attr:`functions` holds them."""
        return tuple(f.to_json() for f in specs)

    def specs(self) -> "tuple[FunctionSpec, ...]":
        """The functions' specs, validated (see :meth:`kernix.spec.FunctionSpec.from_json`).

        Raises
        ------
        ManifestError
            Naming the function whose record is not a valid spec.
        """
        from ..spec import FunctionSpec

        specs = []
        for record in self.functions:
            try:
                specs.append(FunctionSpec.from_json(record))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ManifestError(f"the record of function {record.get('name')!r} is not a valid spec: {exc}") from None
        return tuple(specs)

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
            "functions": list(self.functions),
            "handlers": dict(self.handlers),
            "dependencies": [list(d) for d in self.dependencies],
            "created": self.created,
        }

    @classmethod
    def from_json(cls, directory: Path, data: Any) -> "Manifest":
        """Validate and read the on-disk form.

        What a load uses is checked here: the library name, the function
        names and their handler symbols (one each, in export order); the
        spec records are checked when :meth:`specs` reads them.

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
            if not _is_library_name(so):
                raise ManifestError(f"bad library name {so!r}")
            functions = tuple(data["functions"])
            handlers = {str(k): str(v) for k, v in data["handlers"].items()}
            if not all(isinstance(f, dict) for f in functions):
                raise ManifestError("a function record is not a JSON object")
            problem = handlers_problem([f["name"] for f in functions], handlers)
            if problem:
                raise ManifestError(problem)
            platform = str(data["platform"])
            if platform not in JAX_PLATFORMS:
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
