"""The pipeline's miss path: a request's cache entry by its full key, built when missing::

    toolchain -> cache key -> look-up  hit  -> the entry
                                       miss -> lock, infer (libclang), generate, build (ninja), publish

:mod:`kernix.pipeline` comes here only when the direct index has no usable
answer, or when a cached library failed to load; a warm load never imports
this module, the toolchain, libclang or the code generator.
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__, report
from .errors import CacheError, InferenceError, KernixError, RegistrationError, SourceError
from .request import LoadRequest
from .runtime import registry
from .runtime.module import check_function_names
from .store import direct, entries
from .store.files import content_key, file_digest, fingerprints
from .store.manifest import MANIFEST_FORMAT, Manifest

if TYPE_CHECKING:
    from .backend import codegen
    from .backend.flags import BuildConfig
    from .spec import FunctionSpec

__all__ = [
    "build_config", "toolchain_stamp", "cache_key", "store_inline_source", "keyed_entry", "reload", "infer_units",
]


def build_config(request: LoadRequest) -> BuildConfig:
    """How ``request`` is compiled."""
    from .arch import detect_compute_capability
    from .backend.flags import BuildConfig

    cuda = request.platform == "cuda"
    return BuildConfig(
        platform=request.platform,
        optimization_level=request.optimization_level,
        use_fast_math=request.use_fast_math,
        extra_cflags=request.extra_cflags,
        extra_ldflags=request.extra_ldflags,
        include_dirs=request.include_dirs,
        arch=detect_compute_capability(request.compute_capability) if cuda else None,
        allow_cuda_graph=request.allow_cuda_graph,
    )


def _toolchain_parts(config: BuildConfig) -> dict[str, object]:
    """What decides how any input is compiled: tools, flags, versions."""
    from .backend import toolchain
    from .backend.flags import compile_flags

    compilers = [toolchain.find_host_compiler().identity]
    if config.platform == "cuda":
        compilers.append(toolchain.find_nvcc().identity)
    return {
        "kernix": __version__,
        "platform": config.platform,
        "flags": compile_flags(config),
        "compilers": compilers,
        "arch": config.arch,
        "allow_cuda_graph": config.allow_cuda_graph,
        "jaxlib": toolchain.jaxlib_version(),
        "python": sys.implementation.cache_tag,
    }


def toolchain_stamp(config: BuildConfig) -> str:
    """The identity of the tools and flags alone: a work directory whose objects
    were built with another stamp is never reused (see :mod:`kernix.store.workdir`)."""
    return content_key(_toolchain_parts(config))


def cache_key(request: LoadRequest, config: BuildConfig) -> str:
    """The key over everything known before compiling; headers are checked by the manifest."""
    digests = []
    for src in request.sources:
        try:
            digests.append([str(src), file_digest(src)])
        except OSError as exc:
            raise KernixError(f"cannot read source file {src}: {exc.strerror or exc}") from exc
    return content_key({
        **_toolchain_parts(config), "manifest": MANIFEST_FORMAT, "name": request.name, "sources": digests,
        "functions": request.functions,
    })


def _key_files(request: LoadRequest) -> list[str]:
    """The files the entry key is computed from: the sources, the compilers,
    and the directories searched for compilers (``PATH``)."""
    from .backend import toolchain

    compilers = toolchain.compiler_paths(request.platform == "cuda")
    return [str(s) for s in request.sources] + compilers + direct.search_dirs()


def store_inline_source(request: LoadRequest) -> None:
    """Store the source of an inline ``request`` in the cache again if it is gone
    (or holds other bytes); nothing for a file or directory load.

    The inline loaders store the source in ``sources/`` before any lock is taken
    (a warm load takes none), so ``kernix cache clear`` of the module, which
    removes the module's sources under its build lock, may remove it before a
    build reads it.  The build therefore stores it again before the key is
    computed from it and once more once it holds the build lock, after which no
    clear can remove it until the build is done.  This is sure and costs a warm
    load nothing, where sparing sources in the clear is not: by age, a stalled
    process outlives any age; by use, every load would have to mark its source.
    The file's name is derived from its content, so storing it again changes
    nothing that another process could read.
    """
    if request.inline_source is None:
        return
    from .store.files import write_source

    (path,) = request.sources
    write_source(request.root, request.name, request.inline_source, path.suffix[1:])


def keyed_entry(request: LoadRequest, fp: str) -> Manifest:
    """The entry for ``request`` through its full key, remembered in the direct index."""
    store_inline_source(request)  # a concurrent `kernix cache clear` may have removed it
    files = direct.identities(_key_files(request))  # before the key they vouch for
    config = build_config(request)
    key = cache_key(request, config)
    manifest = _entry(request, config, key, fresh=request.force_rebuild)
    direct.record(request.root, request.name, fp, key, files, what=request.name, verbose=request.verbose)
    return manifest


def _entry(request: LoadRequest, config: BuildConfig, key: str, *, fresh: bool) -> Manifest:
    """The cache entry for ``key``: looked up, else built under the lock
    (``fresh``: skip the look-up and build from an empty work directory)."""
    name, root, verbose = request.name, request.root, request.verbose
    if not fresh:
        found = entries.lookup(root, name, key)
        report.note(f"{name}: cache {found.reason} ({key[:16]})", verbose=verbose)
        if found.manifest is not None:
            return found.manifest
    from .store.lock import build_lock

    with build_lock(root, name, verbose=verbose):
        store_inline_source(request)  # removed by a clear while this process waited for the lock?
        if not fresh:
            found = entries.lookup(root, name, key)  # built by another process meanwhile?
            if found.manifest is not None:
                return found.manifest
        return _build(request, config, key, fresh=fresh)


def _discard(request: LoadRequest, manifest: Manifest) -> None:
    from .store.lock import build_lock

    with build_lock(request.root, request.name, verbose=request.verbose):
        entries.discard(manifest)


def _load_failed(request: LoadRequest, manifest: Manifest, exc: RegistrationError) -> RegistrationError:
    return RegistrationError(
        f"{exc}. A clean rebuild of module {request.name!r} did not load either, so it is not kept in "
        "the cache. If the library needs a shared library that is not found, add its directory to "
        "LD_LIBRARY_PATH or link it with extra_ldflags=['-Wl,-rpath,<dir>']; then load again with "
        f"force_rebuild=True (or run `kernix cache clear {request.name}` first)."
    )


def noexec_problem(root: str | os.PathLike[str]) -> str | None:
    """Why no library under the cache root ``root`` can be loaded, or ``None``:
    the file system holding it is mounted ``noexec`` (``dlopen`` then fails with
    "failed to map segment"), which no rebuild can change."""
    path = os.fspath(root)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)  # not made yet: its future file system
    try:
        noexec = bool(os.statvfs(path).f_flag & os.ST_NOEXEC)
    except OSError:
        return None
    if not noexec:
        return None
    return (
        f"the kernix cache {os.fspath(root)} is on a file system mounted noexec, so no library built there can be "
        "loaded. Point kernix at a directory on a file system mounted without noexec (`findmnt -T DIR` shows "
        "a directory's mount options) with KERNIX_CACHE_DIR, kernix.set_cache_dir() or build_directory=."
    )


def reload(request: LoadRequest, manifest: Manifest, exc: OSError) -> Manifest:
    """The entry of ``manifest`` again, after its library failed to load with
    ``exc``: a damaged entry is discarded and built once from an empty work
    directory; one cleared meanwhile is looked up (or built) again.

    Raises
    ------
    RegistrationError
        When the rebuilt library does not load either (it is not kept).
    CacheError
        When the cache is on a ``noexec`` file system (nothing is rebuilt).
    """
    noexec = noexec_problem(request.root)
    if noexec is not None:
        raise CacheError(f"cannot load the compiled library {manifest.so_path} ({exc}): {noexec}") from exc
    damaged = manifest.so_path.exists()  # else: cleared between look-up and load
    if damaged:
        _discard(request, manifest)
        report.note(f"{request.name}: the library {manifest.so_path} failed to load ({exc}); rebuilding it",
                    verbose=True)
    manifest = _entry(request, build_config(request), manifest.key, fresh=damaged)
    try:
        registry.load_library(manifest.so_path)
    except RegistrationError as again:
        _discard(request, manifest)
        raise _load_failed(request, manifest, again) from again
    return manifest


def _build(request: LoadRequest, config: BuildConfig, key: str, *, fresh: bool) -> Manifest:
    from .backend import codegen, toolchain
    from .backend.ninja import OutputError

    noexec = noexec_problem(request.root)
    if noexec is not None:  # a build there could never be loaded
        raise CacheError(noexec)
    toolchain.check_host_compiler()  # before inference, whose parse would only miss its standard headers
    units = infer_units(request)
    check_function_names([f for _, fns in units for f in fns])
    index = itertools.count()  # module-wide: every generated symbol is unique
    exported = [(str(src), [codegen.ExportedFunction(next(index), f) for f in fns]) for src, fns in units]
    stamp = toolchain_stamp(config)
    try:
        so_path, inputs = _build_in_work_dir(request, config, exported, stamp, fresh=fresh)
    except OutputError as exc:
        if fresh:
            raise
        report.note(f"{request.name}: {exc}; building again from an empty directory", verbose=True)
        so_path, inputs = _build_in_work_dir(request, config, exported, stamp, fresh=True)
    all_fns = [e for _, es in exported for e in es]
    handlers = {e.spec.name: codegen.handler_symbol(e) for e in all_fns}
    return entries.publish(
        request.root, request.name, key, so_path, [e.spec for e in all_fns], handlers, inputs, config.platform,
    )


def _build_in_work_dir(
    request: LoadRequest,
    config: BuildConfig,
    exported: list[tuple[str, list[codegen.ExportedFunction]]],
    stamp: str,
    *,
    fresh: bool,
) -> tuple[Path, list[list[Any]]]:
    """Build in the module's work directory; record its inputs when it succeeds.

    Returns the built library and the fingerprints of every file the compilers
    read (taken once: the work directory's record and the manifest share them).
    """
    from .backend.ninja import build_module
    from .store.workdir import build_directory, record_inputs

    with build_directory(request.root, request.name, fresh=fresh, stamp=stamp, verbose=request.verbose) as build_dir:
        report.note(f"{request.name}: building in {build_dir}", verbose=request.verbose)
        result = build_module(build_dir, exported, config, workers=request.ninja_workers, verbose=request.verbose)
        inputs = fingerprints(result.dependencies)
        record_inputs(build_dir, stamp, inputs)
    return result.so_path, inputs


def _find_unannotated(
    request: LoadRequest,
    units: list[tuple[Path, list[FunctionSpec]]],
    wanted: dict[str, Any],
    found: dict[str, FunctionSpec],
) -> list[tuple[Path, list[FunctionSpec]]]:
    """``units`` with the functions ``wanted`` names but no file annotates, each
    inferred in the one source that declares it (added to ``found`` too).

    Raises
    ------
    KernixError
        For a name no source declares, or that several do (the fix: annotate
        the one to export).
    """
    from .frontend.binding import is_not_in_file
    from .frontend.infer import infer_file

    where: dict[str, list[tuple[int, FunctionSpec]]] = {n: [] for n in wanted}
    errors: list[SourceError] = []
    for i, (src, _) in enumerate(units):
        result = infer_file(src, language=request.language, flags=request.parse_flags, functions=wanted,
                            cache_dir=request.root)
        errors += [e for e in result.errors if not is_not_in_file(e)]
        for spec in result.functions:
            where[spec.name].append((i, spec))
    if errors:
        raise InferenceError(errors)
    nowhere = [n for n, hits in where.items() if not hits]
    if nowhere:
        raise KernixError(
            f"functions names {nowhere}, but no source file of the module declares them; "
            f"the files: {', '.join(str(src) for src, _ in units)}"
        )
    for name, hits in where.items():
        if len(hits) > 1:
            places = ", ".join(f"{s.file}:{s.line}" for _, s in hits)
            raise KernixError(
                f"functions names {name!r}, which several source files declare ({places}): mark the one "
                f"to export with `// @BE {name}` on the line before it"
            )
    units = [(src, list(fns)) for src, fns in units]
    for (i, spec), in where.values():
        units[i][1].append(spec)
        found[spec.name] = spec
    return [(src, sorted(fns, key=lambda f: f.line)) for src, fns in units]


def infer_units(request: LoadRequest) -> list[tuple[Path, list[FunctionSpec]]]:
    """Infer every source of ``request``: ``(source, specs)`` per file, the
    specs an explicit ``functions=`` gave reconciled, names unique, ``vjp=``
    pairs checked.

    Raises
    ------
    InferenceError
        With every problem of every file.
    """
    from .frontend.infer import infer_file  # libclang: only when building
    from .frontend.signatures import check_unique_names, raise_for_vjp_pairs
    from .spec import check_spec_matches

    sources, functions = request.sources, request.functions
    units: list[tuple[Path, list[FunctionSpec]]] = []
    errors: list[SourceError] = []
    headers: list[str] = []
    single = len(sources) == 1
    for src in sources:
        result = infer_file(
            src, language=request.language, flags=request.parse_flags,
            functions=functions if single else None, cache_dir=request.root,
        )
        errors.extend(result.errors)
        units.append((src, list(result.functions)))
        headers.extend(result.dependencies)
    if errors:
        raise InferenceError(errors)
    if not single and functions is not None:
        found = {f.name: f for _, fns in units for f in fns}
        missing = [n for n in functions if n not in found]
        if missing:
            units = _find_unannotated(request, units, {n: functions[n] for n in missing}, found)
        for fname, tokens in functions.items():
            if tokens is not None:
                found[fname] = check_spec_matches(tokens, found[fname], source="explicit")
        units = [(src, [found[f.name] for f in fns if f.name in functions]) for src, fns in units]
    specs = [f for _, fns in units for f in fns]
    errors = check_unique_names(specs)
    if errors:
        raise InferenceError(errors)
    seen = {f.name: f for f in specs}
    raise_for_vjp_pairs(seen.values())
    if not seen:
        where = sources[0] if single else f"{len(sources)} files"
        raise KernixError(
            f"no function to export in {where}: annotate each entry point with a `// @BE name` "
            "comment on the line before it (or, from Python, name them with functions=[...])"
            + _header_annotations_hint(headers)
        )
    return units


def _header_annotations_hint(headers: list[str]) -> str:
    """What to say of ``// @BE`` annotations in the included ``headers``, which are
    not read (a module exports what its source files annotate); ``""`` if none."""
    from .frontend.annotations import find_annotations
    from .paths import include_dir

    own = str(include_dir()) + os.sep
    found = []
    for header in dict.fromkeys(headers):
        if header.startswith(own):
            continue
        try:
            with open(header, "rb") as f:
                raw = f.read(1 << 20)
        except OSError:
            continue
        if b"@BE" in raw:
            found += [(header, a) for a in find_annotations(raw.decode("utf-8", "replace")) if a.name]
    if not found:
        return ""
    places = ", ".join(f"{h}:{a.line} ({a.name})" for h, a in found[:3]) + (" ..." if len(found) > 3 else "")
    name = found[0][1].name
    return (f". The annotations in included headers ({places}) are not read: a module exports what its source "
            f"files declare, so declare each function there too, after the #include, as the header declares it "
            f"(in its namespace), with `// @BE {name}` on the line before")
