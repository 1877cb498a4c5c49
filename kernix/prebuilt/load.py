"""``load_prebuilt``: load a module that ``kernix build`` made, with no compiler (nothing here imports
libclang, the compilers or ninja); ``load_or_build``: fall back to a JIT build of the sources when the
prebuilt module cannot serve this machine.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from .. import __version__, loaders
from ..errors import PrebuiltError
from ..platforms import language_of
from ..paths import ancestors
from ..runtime import registry
from ..runtime.module import CompiledModule
from ..store import Memos, elf, trust
from ..store.files import file_digest
from .format import (
    TUNING_NAME,
    read_tuning,
    arch_problem,
    ffi_api_problem,
    headers_root,
    kernix_version_problem,
    MANIFEST_NAME,
    PrebuiltManifest,
    running_ffi_api,
)

__all__ = ["load_or_build", "last_load_reason", "load_prebuilt"]


_reasons: dict[str, str] = {}


def last_load_reason(prebuilt_dir: str | os.PathLike[str]) -> str:
    """How the last :func:`load_or_build` of ``prebuilt_dir`` was served:
    ``"prebuilt"``, ``"jit: <why the prebuilt module could not be used>"``, or
    ``"refused: <why>"`` when it was refused without a build (``"trust"``)."""
    return _reasons.get(str(Path(prebuilt_dir).absolute()), "not loaded")


def load_or_build(
    prebuilt_dir: str | os.PathLike[str],
    sources: Sequence[str | os.PathLike[str]],
    *,
    target_prefix: str | None = None,
    name: str | None = None,
    quiet: bool = False,
    **options: Any,
) -> CompiledModule:
    """Load ``prebuilt_dir`` with :func:`load_prebuilt`, or, when it cannot serve
    this machine, say why on stderr and build ``sources`` with the JIT loaders.

    A stale module is built from its sources instead; one another user could have written is refused, not
    rebuilt (when each happens, and why: docs/deploying.rst, "Shipping kernels in a wheel").

    Parameters
    ----------
    prebuilt_dir : path
        The prebuilt module (made at wheel-build time).
    sources : list of paths
        The shipped sources: one file (``load_*_file``) or several
        (``load_*_dir`` of their common directory).
    target_prefix : str, optional
        FFI target prefix for both paths (keep it equal so exported artifacts
        see one name).
    name : str, optional
        Module name of the JIT build (default: the prebuilt module's name).
    quiet : bool
        Do not print why the JIT build was needed.
    **options
        Loader options for the JIT build.
    """
    key = str(Path(prebuilt_dir).absolute())
    paths = [Path(s) for s in sources]
    manifest = None
    try:
        manifest = PrebuiltManifest.read(prebuilt_dir)
        module = load_manifest(manifest, target_prefix=target_prefix, sources=paths)
        _reasons[key] = "prebuilt"
        return module
    except PrebuiltError as exc:
        if exc.reason == "trust":
            _reasons[key] = f"refused: {exc}"
            raise
        why = f"{exc.reason}: {exc}"
    _reasons[key] = f"jit: {why}"
    if not quiet:
        print(f"kernix: the prebuilt module {prebuilt_dir} cannot be used here ({why}); "
              "building it from its sources instead", file=sys.stderr)

    if name is None and manifest is not None:
        name = manifest.name
    cuda = language_of(str(paths[0])) == "cuda"
    if len(paths) == 1:
        load = loaders.load_cuda_file if cuda else loaders.load_cpp_file
        return load(paths[0], name=name, target_prefix=target_prefix, **options)
    load_dir = loaders.load_cuda_dir if cuda else loaders.load_cpp_dir
    return load_dir(paths[0].parent, functions=None, name=name, target_prefix=target_prefix, **options)


def _chain_problem(path: str, owners: tuple[int, ...], seen: set[str]) -> str | None:
    """Why a user not in ``owners`` could replace ``path`` (resolved) or a directory above it, the first
    problem from the top, or ``None``; paths in ``seen`` are skipped, and added; paths that do not exist
    are skipped."""
    for p in reversed(list(ancestors(os.path.realpath(path)))):
        if p in seen:
            continue
        seen.add(p)
        try:
            st = os.stat(p)
        except OSError:
            continue
        writer = trust.foreign_writer(st, owners, sticky_ok=True)  # (/tmp: others cannot replace what is in it)
        if writer == "owner":
            return (
                f"{p} is owned by another user (uid {st.st_uid}), who could replace the code loaded "
                "from it. Install the package where only you or root can write (a virtual environment "
                "of your own, or the environment kernix is installed in), or build the module yourself "
                "(`kernix build SOURCE... -o DIR`)"
            )
        if writer == "others":
            return (
                f"other users can write to {p}, so they could replace the code loaded from it. "
                f"Fix it with `chmod o-w {p}`, or reinstall the package where other users cannot write"
            )
    return None


def trusted_owners() -> tuple[int, ...]:
    """The users whose files a prebuilt load trusts: this user, root, and the owner
    of the running kernix installation when no one else could write it (they
    already run code in this process).
    """
    uid = os.getuid()
    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # (the kernix package)
    try:
        installer = os.stat(package).st_uid
    except OSError:
        return (uid, 0)
    if installer in (uid, 0) or _chain_problem(package, (uid, 0, installer), set()) is not None:
        return (uid, 0)
    return (uid, 0, installer)


def trust_problem(paths: Sequence[str | os.PathLike[str]]) -> str | None:
    """Why code or data at ``paths`` could have been written by another user, or ``None``.

    Each resolved path and every directory above it must be owned by one of
    :func:`trusted_owners` and not writable by others (sticky directories may be;
    group write is trusted, as in the cache). Missing paths are skipped.
    """
    owners = trusted_owners()
    seen: set[str] = set()
    for path in paths:
        why = _chain_problem(os.fspath(path), owners, seen)
        if why is not None:
            return why
    return None


def elf_problem(path: str | os.PathLike[str], data: bytes) -> tuple[str, str] | None:
    """``(reason, why)`` when ``path`` (bytes ``data``) is not a shared library this
    process could map, else ``None``: its ELF class, byte order and machine
    (``"platform"``), then that it is whole (``"format"``), since mapping a
    truncated library crashes with ``SIGBUS``.
    """
    try:
        with open(os.path.realpath(sys.executable), "rb") as f:
            mine = elf.identity(f.read(20))
    except OSError:
        mine = None
    found = elf.identity(data[:20])
    if found is None:
        return "format", "it is not an ELF shared library"
    if mine is not None and found != mine:
        return "platform", f"it is a library for {elf.describe(found)}, and this machine runs {elf.describe(mine)}"
    try:
        elf.check_elf(Path(path), data)
    except elf.ElfError as exc:
        return "format", str(exc)
    return None


def _gpus() -> tuple[list[tuple[str, str]], str]:
    """``[(sm_XY, GPU name)]`` of the GPUs this process can use, asked of the
    driver (never of JAX, whose backend stays unstarted; nothing is written to
    the cache), and why there are none."""
    from ..backend import gpus  # (a CUDA module's check alone)

    found = gpus.survey(remember=False)
    return [(g.arch, g.name) for g in found.gpus], found.problem


def stale_problem(manifest: PrebuiltManifest, sources: Sequence[Path]) -> str | None:
    """Why ``manifest`` was not built from ``sources`` as they are now, or ``None``,
    by the sources' SHA-256 and the recorded headers'. Nothing is compared when a
    source is missing, nor a missing header.
    """
    if not sources or not manifest.sources or not all(s.is_file() for s in sources):
        return None
    now = sorted((s.name, file_digest(s)) for s in sources)
    fix = ("Rebuild it (`kernix build ...`, or `pip wheel .` for a package), or delete it to build from the "
           "sources")
    if now != sorted(manifest.sources):
        changed = sorted({n for n, _ in set(now) ^ set(manifest.sources)})
        return (
            f"the prebuilt module {manifest.name!r} in {manifest.directory} is stale: the sources given for it "
            f"({', '.join(changed)}) are not those it was built from. {fix}"
        )
    root = headers_root(sources)
    edited = []
    for header, digest in manifest.headers:
        try:
            if file_digest(os.path.join(root, header)) != digest:
                edited.append(header)
        except OSError:  # not shipped (or unreadable): not compared, as for a source
            continue
    if not edited:
        return None
    return (
        f"the prebuilt module {manifest.name!r} in {manifest.directory} is stale: headers its sources include "
        f"({', '.join(edited)}, under {root}) changed since it was built. {fix}"
    )


def check_prebuilt(manifest: PrebuiltManifest) -> None:
    """Refuse a prebuilt module this process cannot run, without running any tool:
    a :class:`PrebuiltError` with reason ``"version"``, ``"ffi_api"``,
    ``"platform"`` or ``"arch"``, saying how to rebuild.
    """
    refused = f"cannot load the prebuilt module {manifest.name!r} from {manifest.directory}"
    problem = kernix_version_problem(manifest.kernix, __version__)
    if problem:
        raise PrebuiltError(f"{refused}: {problem}.", "version")
    problem = ffi_api_problem(manifest.ffi_api, running_ffi_api())
    if problem:
        raise PrebuiltError(
            f"{refused}: {problem} (built with jaxlib {manifest.jaxlib}). Rebuild it with this jaxlib installed "
            "(`kernix build ...`), or install a jaxlib with the same FFI API.",
            "ffi_api",
        )
    if manifest.platform != "cuda":
        return
    present, why = _gpus()
    if not present:
        raise PrebuiltError(
            f"{refused}: it runs on NVIDIA GPUs and none is usable here ({why}). Run it on a machine with a GPU "
            "and its driver (check with `nvidia-smi`), or load a CPU build of the module.",
            "platform",
        )
    for arch, kind in present:
        problem = arch_problem(arch, kind, manifest.sass, manifest.ptx)
        if problem:
            raise PrebuiltError(f"{refused}: {problem}", "arch")


def load_prebuilt(
    directory: str | os.PathLike[str],
    target_prefix: str | None = None,
    auto_register: bool = True,
) -> CompiledModule:
    """Load a prebuilt module (made by ``kernix build`` or :func:`kernix.build_module`).

    Needs no compiler, no nvcc and no libclang, and writes nothing to the
    kernix cache (but for the choices of ``tune=`` templates its
    ``kernix-tuning.json`` lacks, timed at a call).  Before the library is loaded, the module must be
    trustworthy (nothing on its path writable by another user), built by
    this kernix release series, for this jaxlib's FFI API and (CUDA) these
    GPUs, and its library must match the manifest's SHA-256 and be a whole
    shared library for this machine.

    Parameters
    ----------
    directory : str or path
        The prebuilt module's directory (holding ``kernix-prebuilt.json``).
    target_prefix : str, optional
        Prefix of the FFI target names (default: the module name it was built with).
    auto_register : bool
        Register every function with JAX as ``"<target_prefix>.<function>"``.

    Returns
    -------
    CompiledModule
        The same typed callables as a JIT load.

    Raises
    ------
    PrebuiltError
        When the module cannot be used here; ``reason`` says why: ``"missing"``,
        ``"format"``, ``"trust"``, ``"version"``, ``"ffi_api"``, ``"platform"``,
        ``"arch"``, ``"hash"`` or ``"load"`` (``dlopen`` failed).
    """
    manifest = PrebuiltManifest.read(directory)
    return load_manifest(manifest, target_prefix=target_prefix, auto_register=auto_register)


def load_manifest(
    manifest: PrebuiltManifest,
    target_prefix: str | None = None,
    auto_register: bool = True,
    sources: Sequence[Path] = (),
) -> CompiledModule:
    """:func:`load_prebuilt` of a manifest already read; refused with reason
    ``"stale"`` when ``sources`` exist and differ (:func:`stale_problem`).
    """
    lib = Path(os.path.realpath(manifest.library_path))
    problem = trust_problem([manifest.directory / MANIFEST_NAME, lib])
    if problem:
        raise PrebuiltError(f"refusing to load the prebuilt module {manifest.name!r} from "
                            f"{manifest.directory}: {problem}.", "trust")
    problem = stale_problem(manifest, sources)
    if problem:
        raise PrebuiltError(problem, "stale")
    check_prebuilt(manifest)
    try:
        data = lib.read_bytes()  # once, for the hash and the ELF checks
    except OSError as exc:
        raise PrebuiltError(f"cannot read the library of the prebuilt module: {lib}: {exc.strerror or exc}. "
                            "Rebuild the module (`kernix build ...`) or reinstall the package that ships it.",
                            "missing") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != manifest.library_sha256:
        raise PrebuiltError(
            f"the library {lib} does not match its manifest (SHA-256 {digest[:16]}..., expected "
            f"{manifest.library_sha256[:16]}...): it was modified or damaged after it was built. "
            "Rebuild the module (`kernix build ...`) or reinstall the package that ships it.",
            "hash",
        )
    unmappable = elf_problem(lib, data)
    if unmappable is not None:
        reason, why = unmappable
        fix = ("Rebuild the module on (or for) this kind of machine (`kernix build ...`)." if reason == "platform"
               else "Reinstall the package that ships it, or rebuild the module (`kernix build ...`).")
        raise PrebuiltError(f"cannot load the library {lib} of the prebuilt module {manifest.name!r}: {why}. {fix}",
                            reason)
    try:
        registry.open_library(lib)
    except OSError as exc:
        raise PrebuiltError(
            f"cannot load the library {lib} of the prebuilt module {manifest.name!r}: {exc}. This machine "
            "lacks what it needs (often a C++ runtime or glibc older than the build machine's): install "
            "what the message names, or rebuild the module on a system no newer than this one "
            "(`kernix build ...`).",
            "load",
        ) from None
    shipped = [] if trust_problem([manifest.directory / TUNING_NAME]) else read_tuning(manifest.directory)
    module = CompiledModule(
        manifest.name, lib, manifest.platform, manifest.functions, manifest.handlers, digest,
        target_prefix=target_prefix, memos=_Shipped(shipped) if shipped else Memos(),
    )
    if auto_register:
        module.register()
    return module


class _Shipped(Memos):
    """The cache's memos, where a table of ``tune=`` choices the module ships (``kernix tune DIR``) adds the
    entries the cache lacks: a device it has no table for tunes at its first call, into the cache."""

    def __init__(self, tables: Sequence[dict[str, Any]]) -> None:
        from ..runtime.tuning import TABLE_KIND, table_key  # (JAX's lowering machinery: only for shipped tables)
        super().__init__()
        self.kind, self.tables = TABLE_KIND, {table_key(t["digest"], t["device"]): t for t in tables}

    def recall(self, kind: str, key: str) -> Any:
        found, shipped = super().recall(kind, key), self.tables.get(key) if kind == self.kind else None
        if shipped is None:
            return found
        own = found.get("entries") if isinstance(found, dict) else None
        return {**shipped, "entries": {**shipped["entries"], **(own if isinstance(own, dict) else {})}}
