"""The on-disk format of a prebuilt module, and the compatibility rules it is checked by.

A prebuilt module is a directory holding ``kernix-prebuilt.json`` (the
manifest) and ``<name>-<sha12>.so`` (generated handlers + user code). The
manifest, format 2 (readers refuse another ``format``)::

    format          2
    kind            "kernix-prebuilt"
    name            the module name (default FFI target prefix)
    platform        "cuda" or "cpu"
    library         the library's file name, in the same directory
    library_sha256  SHA-256 of the library (checked before it is loaded)
    library_size    its size in bytes
    functions       the specs, in export order (FunctionSpec.to_json)
    handlers        function name -> exported handler symbol
    kernix          the kernix version that built it (loaded by the same major.minor only)
    jaxlib          the jaxlib version whose FFI headers it was compiled against
    ffi_api         [major, minor]: XLA_FFI_API_MAJOR/MINOR of those headers
    compilers       the compilers' identities (path and --version banner)
    sass            CUDA architectures with machine code, e.g. ["sm_80", "sm_90"]
    ptx             virtual architectures with PTX, e.g. ["compute_90"]
    sources         [[file name, sha256], ...] of the sources it was built from
    headers         [[path, sha256], ...] of the headers read from within the
                    sources' common directory (:func:`headers_root`), ``/``-separated
    options         the build options (optimization level, fast math, defines...)
    created         seconds since the epoch

Beside them, ``kernix-tuning.json`` (written by ``kernix tune DIR``) may hold the tables of the
module's ``tune=`` choices, one per device (:func:`read_tuning`)::

    format  1
    kind    "kernix-tuning"
    tables  [{"module", "digest", "device", "entries": {call key: {"choice", "us"}}}, ...]

This module imports nothing from :mod:`kernix.frontend` or
:mod:`kernix.backend`: it is read on machines without a compiler.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

from ..errors import KernixError, PrebuiltError
from ..platforms import JAX_PLATFORMS
from ..language.names import handlers_problem
from ..language.spec import FunctionSpec
from ..store.files import atomic_write

__all__ = ["PREBUILT_FORMAT", "MANIFEST_NAME", "PrebuiltManifest", "TUNING_NAME", "read_tuning", "write_tuning"]

PREBUILT_FORMAT = 2
MANIFEST_NAME = "kernix-prebuilt.json"
TUNING_NAME = "kernix-tuning.json"
_KIND = "kernix-prebuilt"
_LIBRARY_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.so")
_SASS_RE = re.compile(r"sm_(\d+)(\d)([af]?)")
_PTX_RE = re.compile(r"compute_(\d+)(\d)([af]?)")


@dataclass(frozen=True)
class PrebuiltManifest:
    """The manifest of a prebuilt module (see the module docstring).

    Attributes
    ----------
    directory
        Where it was read from (not stored).
    """

    directory: Path
    name: str
    platform: str
    library: str
    library_sha256: str
    library_size: int
    functions: tuple[FunctionSpec, ...]
    handlers: dict[str, str]
    kernix: str
    jaxlib: str
    ffi_api: tuple[int, int]
    compilers: tuple[str, ...] = ()
    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    sources: tuple[tuple[str, str], ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    created: float = field(default_factory=time.time)

    @property
    def library_path(self) -> Path:
        """The library."""
        return self.directory / self.library

    def to_json(self) -> dict[str, Any]:
        """The on-disk form (every field but :attr:`directory`)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "directory"}
        return {"format": PREBUILT_FORMAT, "kind": _KIND, **data, "functions": [f.to_json() for f in self.functions]}

    @classmethod
    def from_json(cls, directory: Path, data: Any) -> "PrebuiltManifest":
        """Validate and read the on-disk form, everything that reaches ``dlopen`` or a
        symbol look-up included; a :class:`PrebuiltError` with ``reason="format"``.
        """
        where = directory / MANIFEST_NAME
        try:
            if not isinstance(data, dict) or data.get("kind") != _KIND:
                raise PrebuiltError(f"{where} is not a kernix prebuilt manifest", "format")
            if data.get("format") != PREBUILT_FORMAT:
                raise PrebuiltError(
                    f"{where} has format {data.get('format')!r}; this kernix reads format {PREBUILT_FORMAT}. "
                    "Rebuild it with this kernix (`kernix build ...`) or install the kernix that built it "
                    f"({data.get('kernix', 'unknown version')}).",
                    "format",
                )
            library = data["library"]
            if not isinstance(library, str) or not _LIBRARY_RE.fullmatch(library):
                raise PrebuiltError(f"{where}: bad library file name {library!r}", "format")
            functions = tuple(FunctionSpec.from_json(f) for f in data["functions"])
            handlers = {str(k): str(v) for k, v in data["handlers"].items()}
            problem = handlers_problem([fn.name for fn in functions], handlers)
            if problem:
                raise PrebuiltError(f"{where}: {problem}", "format")
            platform = str(data["platform"])
            if platform not in JAX_PLATFORMS:
                raise PrebuiltError(f"{where}: unknown platform {platform!r}", "format")
            sass = tuple(str(a) for a in data.get("sass") or ())
            ptx = tuple(str(a) for a in data.get("ptx") or ())
            if not all(_SASS_RE.fullmatch(a) for a in sass) or not all(_PTX_RE.fullmatch(a) for a in ptx):
                raise PrebuiltError(f"{where}: bad architecture list {sass!r} / {ptx!r}", "format")
            major, minor = (int(v) for v in data["ffi_api"])
            headers = tuple((str(n), str(h)) for n, h in data.get("headers") or ())
            for header, _ in headers:
                problem = header_path_problem(header)
                if problem:
                    raise PrebuiltError(f"{where}: bad header path {header!r}: {problem}", "format")
            return cls(
                directory=directory,
                name=str(data["name"]),
                platform=platform,
                library=library,
                library_sha256=str(data["library_sha256"]),
                library_size=int(data["library_size"]),
                functions=functions,
                handlers=handlers,
                kernix=str(data["kernix"]),
                jaxlib=str(data["jaxlib"]),
                ffi_api=(major, minor),
                compilers=tuple(str(c) for c in data.get("compilers") or ()),
                sass=sass,
                ptx=ptx,
                sources=tuple((str(n), str(h)) for n, h in data.get("sources") or ()),
                headers=headers,
                options=dict(data.get("options") or {}),
                created=float(data.get("created", 0.0)),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise PrebuiltError(f"{where} is not a valid kernix prebuilt manifest: {exc!r}", "format") from None

    @classmethod
    def read(cls, directory: str | os.PathLike[str]) -> "PrebuiltManifest":
        """Read ``directory/kernix-prebuilt.json``.

        :attr:`directory` is the real path (``~`` expanded, links followed), so the
        manifest, the library and the trust checks name the same files.

        Raises
        ------
        PrebuiltError
            ``reason="missing"`` without a manifest, ``"format"`` when it is not valid.
        """
        d = Path(os.path.realpath(Path(directory).expanduser()))
        try:
            raw = (d / MANIFEST_NAME).read_bytes()
        except OSError as exc:
            raise PrebuiltError(
                f"{d} is not a prebuilt kernix module ({MANIFEST_NAME}: {exc.strerror or exc}); "
                "make one with `kernix build SOURCE... -o DIR`",
                "missing",
            ) from None
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise PrebuiltError(f"{d / MANIFEST_NAME} is not JSON: {exc}", "format") from None
        return cls.from_json(d, data)

    def write(self) -> None:
        """Write the manifest into :attr:`directory` (indented: it is meant to be read)."""
        atomic_write(self.directory / MANIFEST_NAME, (json.dumps(self.to_json(), indent=1) + "\n").encode(),
                     durable=False)


def headers_root(sources: Sequence[str | os.PathLike[str]]) -> str:
    """The directory the recorded header paths are relative to: the deepest
    directory holding every source (a single source's own directory)."""
    return os.path.commonpath([os.path.dirname(os.path.abspath(s)) for s in sources])


def header_path_problem(path: str) -> str | None:
    """Why ``path`` is not a recorded header path (relative, ``/``-separated,
    with no empty, ``.`` or ``..`` part), or ``None``."""
    if path.startswith("/"):
        return "it is absolute"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return "it must be a relative path below the sources' directory, with no empty, '.' or '..' part"
    return None


def _header_ffi_api(include_dir: str) -> tuple[int, int] | None:
    try:
        text = Path(include_dir, "xla", "ffi", "api", "c_api.h").read_text(errors="replace")
    except OSError:
        return None
    major = re.search(r"#define\s+XLA_FFI_API_MAJOR\s+(\d+)", text)
    minor = re.search(r"#define\s+XLA_FFI_API_MINOR\s+(\d+)", text)
    return (int(major.group(1)), int(minor.group(1))) if major and minor else None


def ffi_api_of(include_dir: str) -> tuple[int, int]:
    """``(XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR)`` of the FFI headers under ``include_dir``."""
    found = _header_ffi_api(include_dir)
    if found is None:
        raise KernixError(f"no XLA_FFI_API_MAJOR/MINOR in {include_dir}/xla/ffi/api/c_api.h")
    return found


def running_ffi_api() -> tuple[int, int] | None:
    """The XLA FFI API version of the installed jaxlib, read from its headers
    (without importing jax); ``None`` when the headers are not installed."""
    spec = importlib.util.find_spec("jaxlib")
    for base in (spec.submodule_search_locations or []) if spec else []:
        found = _header_ffi_api(os.path.join(base, "include"))
        if found is not None:
            return found
    return None


def ffi_api_problem(built: tuple[int, int], running: tuple[int, int] | None) -> str | None:
    """Why handlers built against FFI API ``built`` cannot run under API ``running``,
    or ``None``: a major change breaks the ABI, a newer minor may use what the
    running jaxlib lacks.
    """
    if running is None:
        return None  # headers not shipped: XLA itself checks the version at registration
    if built[0] != running[0] or built[1] > running[1]:
        return (
            f"it was compiled against XLA FFI API {built[0]}.{built[1]}, and the running jaxlib "
            f"implements API {running[0]}.{running[1]}"
        )
    return None


def _release(version: str) -> tuple[str, str]:
    """The ``(major, minor)`` of a version string (``"0.2.1"`` -> ``("0", "2")``)."""
    major, _, rest = version.partition(".")
    return major, rest.partition(".")[0]


def kernix_version_problem(built: str, running: str) -> str | None:
    """Why a module built by kernix ``built`` cannot be loaded by kernix ``running``,
    or ``None``: handlers and runtime agree within one ``major.minor`` series.
    """
    if _release(built) == _release(running):
        return None
    series = ".".join(_release(built))
    return (
        f"it was built by kernix {built}, and this is kernix {running}; modules load only in the "
        f"kernix release series that built them ({series}.x). Rebuild it with this kernix "
        f"(`kernix build ...`), or install kernix {series}.x (`pip install 'kernix=={series}.*'`)"
    )


def _arch_parts(arch: str) -> tuple[int, int, str]:
    m = _SASS_RE.fullmatch(arch) or _PTX_RE.fullmatch(arch)
    if not m:
        raise ValueError(arch)
    return int(m.group(1)), int(m.group(2)), m.group(3)


def arch_runs_on(device: str, sass: tuple[str, ...], ptx: tuple[str, ...]) -> str | None:
    """What in a fat binary serves a GPU of architecture ``device`` (``sm_XY``), or ``None``.

    ``sm_XY`` code runs on ``sm_XZ``, ``Z >= Y``; ``sm_XYa`` only on ``sm_XY``;
    ``sm_XYf`` on its family; PTX ``compute_XY`` on ``XY`` or newer
    (``compute_XYa`` only ``sm_XY``).
    """
    dmaj, dmin, _ = _arch_parts(device)
    for arch in sass:
        major, minor, suffix = _arch_parts(arch)
        if major == dmaj and (minor == dmin if suffix == "a" else minor <= dmin):
            return arch
    for arch in ptx:
        major, minor, suffix = _arch_parts(arch)
        if (major, minor) == (dmaj, dmin) if suffix == "a" else (major, minor) <= (dmaj, dmin):
            return arch
    return None


def arch_problem(device: str, device_name: str, sass: tuple[str, ...], ptx: tuple[str, ...]) -> str | None:
    """Why a module with ``sass``/``ptx`` cannot run on a GPU ``device`` (``sm_XY``), or ``None``."""
    if arch_runs_on(device, sass, ptx) is not None:
        return None
    present = ", ".join([*sass, *ptx]) or "none"
    wanted = ",".join(sorted({*sass, device}, key=_arch_parts))
    return (
        f"the GPU {device_name} is {device}, and the module has machine code or PTX only for: {present} "
        f"(none runs on {device}). Rebuild it with `kernix build ... --arch {wanted}`"
    )


def read_tuning(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The tables of ``tune=`` choices the module directory ships (none when it has none, or an unreadable file;
    a choice is checked when used: only the variants of its own group can be chosen)."""
    try:
        data = json.loads(Path(directory, TUNING_NAME).read_text())
    except (OSError, ValueError):
        return []
    tables = data.get("tables") if isinstance(data, dict) and data.get("kind") == "kernix-tuning" else None
    return [t for t in tables if isinstance(t, dict) and isinstance(t.get("entries"), dict)
            and all(isinstance(t.get(k), str) for k in ("digest", "device"))] if isinstance(tables, list) else []


def write_tuning(directory: str | os.PathLike[str], tables: Sequence[dict[str, Any]]) -> Path:
    """Merge ``tables`` into the module directory's :data:`TUNING_NAME` (a table of the same library and device
    entry by entry); its path."""
    merged = {(t["digest"], t["device"]): t for t in read_tuning(directory)}
    for t in tables:
        old = merged.get((t["digest"], t["device"]), {}).get("entries", {})
        merged[(t["digest"], t["device"])] = {**t, "entries": {**old, **t["entries"]}}
    path = Path(directory, TUNING_NAME)
    atomic_write(path, json.dumps({"format": 1, "kind": "kernix-tuning", "tables": list(merged.values())},
                                  indent=1, sort_keys=True).encode())
    return path
