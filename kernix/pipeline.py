"""The load pipeline, from a :class:`~kernix.request.LoadRequest` to a loaded module::

    request -> cache key -> look-up  hit  -> load the library, register
                                     miss -> lock, infer (libclang), generate,
                                             build (ninja), publish, load, register

A warm load (a hit) runs no compiler and does not import libclang: the specs
are stored in the entry's manifest.  Every look-up says hit or miss-and-why
through :func:`kernix.report.note`.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

from . import report
from ._version import __version__
from .backend import codegen, toolchain
from .backend.ninja import BuildConfig, build_module, compile_flags
from .errors import InferenceError, KernixError, RegistrationError, SourceError
from .request import LoadRequest
from .runtime import registry
from .runtime.module import CompiledModule
from .frontend.signatures import raise_for_vjp_pairs
from .spec import FunctionSpec, check_spec_matches
from .store import entries
from .store.files import content_key, file_digest
from .store.lock import build_lock
from .store.manifest import Manifest
from .store.workdir import build_directory

__all__ = ["load", "build_config", "cache_key", "infer_units"]


def build_config(request: LoadRequest) -> BuildConfig:
    """How ``request`` is compiled (the architecture detected once, here)."""
    cuda = request.platform == "cuda"
    return BuildConfig(
        platform=request.platform,
        optimization_level=request.optimization_level,
        use_fast_math=request.use_fast_math,
        extra_cflags=request.extra_cflags,
        extra_ldflags=request.extra_ldflags,
        include_dirs=request.include_dirs,
        arch=toolchain.detect_compute_capability(request.compute_capability) if cuda else None,
        allow_cuda_graph=request.allow_cuda_graph,
    )


def cache_key(request: LoadRequest, config: BuildConfig) -> str:
    """The key over everything known before compiling; headers are checked by the manifest."""
    compilers = [toolchain.find_host_compiler().identity]
    if config.platform == "cuda":
        compilers.append(toolchain.find_nvcc().identity)
    digests = []
    for src in request.sources:
        try:
            digests.append([str(src), file_digest(src)])
        except OSError as exc:
            raise KernixError(f"cannot read source file {src}: {exc.strerror or exc}") from exc
    return content_key(
        {
            "kernix": __version__,
            "name": request.name,
            "platform": config.platform,
            "sources": digests,
            "functions": request.functions,
            "flags": compile_flags(config),
            "compilers": compilers,
            "arch": config.arch,
            "allow_cuda_graph": config.allow_cuda_graph,
            "jaxlib": toolchain.jaxlib_version(),
            "python": sys.implementation.cache_tag,
        }
    )


def load(request: LoadRequest) -> CompiledModule:
    """Run the pipeline for ``request`` and return the loaded (and, if asked, registered) module."""
    config = build_config(request)
    key = cache_key(request, config)
    name, root, verbose = request.name, request.root, request.verbose
    force = request.force_rebuild
    for attempt in range(2):
        manifest = None
        if not force:
            found = entries.lookup(root, name, key)
            report.note(f"{name}: cache {found.reason} ({key[:16]})", verbose=verbose)
            manifest = found.manifest
        if manifest is None:
            with build_lock(root, name, verbose=verbose):
                if not force:
                    found = entries.lookup(root, name, key)  # built by another process meanwhile?
                    manifest = found.manifest
                if manifest is None:
                    manifest = _build(request, config, key, fresh=force)
        # Map the library now: once loaded it stays usable even if another
        # process clears the cache.  Cleared between look-up and load: once more.
        try:
            registry.load_library(manifest.so_path)
            break
        except RegistrationError:
            if attempt or manifest.so_path.exists():
                raise
            force = False

    module = CompiledModule(
        name, manifest.so_path, manifest.platform, manifest.functions, manifest.handlers,
        manifest.so_sha256, target_prefix=request.target_prefix,
    )
    if request.auto_register:
        module.register()
    return module


def _build(request: LoadRequest, config: BuildConfig, key: str, *, fresh: bool) -> Manifest:
    units = infer_units(request)
    index = itertools.count()  # module-wide: every generated symbol is unique
    exported = [(str(src), [codegen.ExportedFunction(next(index), f) for f in fns]) for src, fns in units]
    with build_directory(request.root, request.name, fresh=fresh) as build_dir:
        report.note(f"{request.name}: building in {build_dir}", verbose=request.verbose)
        result = build_module(build_dir, exported, config, workers=request.ninja_workers, verbose=request.verbose)
    all_fns = [e for _, es in exported for e in es]
    handlers = {e.spec.name: codegen.handler_symbol(e) for e in all_fns}
    return entries.publish(
        request.root, request.name, key, result.so_path, [e.spec for e in all_fns], handlers,
        result.dependencies, config.platform,
    )


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

    sources, functions = request.sources, request.functions
    units: list[tuple[Path, list[FunctionSpec]]] = []
    errors: list[SourceError] = []
    single = len(sources) == 1
    for src in sources:
        result = infer_file(
            src, language=request.language, flags=request.parse_flags,
            functions=functions if single else None, cache_dir=request.root,
        )
        errors.extend(result.errors)
        units.append((src, list(result.functions)))
    if errors:
        raise InferenceError(errors)
    if not single and functions is not None:
        found = {f.name: f for _, fns in units for f in fns}
        missing = [n for n in functions if n not in found]
        if missing:
            raise KernixError(
                f"functions names {missing}, but no file in the directory annotates them with "
                f"// @BE; annotated: {', '.join(found) or 'none'}"
            )
        for fname, tokens in functions.items():
            if tokens is not None:
                found[fname] = check_spec_matches(tokens, found[fname], source="explicit")
        units = [(src, [found[f.name] for f in fns if f.name in functions]) for src, fns in units]
    seen: dict[str, FunctionSpec] = {}
    for _, fns in units:
        for f in fns:
            if f.name in seen:
                prev = seen[f.name]
                raise SourceError(
                    f"function name {f.name!r} is exported twice (also at {prev.file}:{prev.line}); "
                    "FFI target names must be unique within a module: rename one",
                    file=f.file, line=f.line, function=f.name,
                )
            seen[f.name] = f
    raise_for_vjp_pairs(seen.values())
    if not seen:
        where = sources[0] if single else f"{len(sources)} files"
        raise KernixError(
            f"no function to export in {where}: annotate each entry point with a `// @BE name` "
            "comment on the line before it, or pass functions=[...]"
        )
    return units
