"""The pipeline's miss path: a request's cache entry by its full key, built when missing::

    toolchain -> cache key -> look-up  hit  -> the entry
                                       miss -> lock, infer (libclang), generate, build (ninja), publish

:mod:`kernix.pipeline` comes here only when the direct index has no usable
answer, a cached library failed to load, or an entry's specs are damaged.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from . import __version__, notes, store
from .backend import codegen, toolchain
from .backend.arch import detect_compute_capability
from .backend.flags import BuildConfig, compile_flags
from .backend.ninja import BuildResult, OutputError, compile_library, generated_files, previous_units
from .errors import CacheError, KernixError, RegistrationError
from .request import LoadRequest
from .runtime import registry
from .runtime.module import check_function_names
from .store import MANIFEST_FORMAT, UNSETTLED, Manifest, build_lock, content_key, file_digest, noexec_problem

__all__ = ["build_config", "cache_key", "store_inline_source", "keyed_entry", "reload", "discard", "exported_units"]


def build_config(request: LoadRequest) -> BuildConfig:
    """How ``request`` is compiled."""
    cuda = request.platform == "cuda"
    return BuildConfig(
        platform=request.platform, optimization_level=request.optimization_level,
        use_fast_math=request.use_fast_math, extra_cflags=request.extra_cflags, extra_ldflags=request.extra_ldflags,
        include_dirs=request.include_dirs, allow_cuda_graph=request.allow_cuda_graph,
        arch=detect_compute_capability(request.compute_capability, root=request.root) if cuda else None,
    )


def _nvcc_profile() -> str | None:
    """The CUDA toolkit's ``bin/nvcc.profile`` (which nvcc reads), or ``None``: no toolkit."""
    home = toolchain.find_cuda_home()
    return None if home is None else str(home / "bin" / "nvcc.profile")


def _toolchain_parts(config: BuildConfig) -> dict[str, object]:
    """What decides how any input is compiled: kernix's code, tools, their environment, flags, versions."""
    compilers = [toolchain.find_host_compiler().identity]
    if config.platform == "cuda":
        compilers.append(toolchain.find_nvcc().identity)
        profile = _nvcc_profile()
        if profile is not None:
            with contextlib.suppress(OSError):  # (no profile: nvcc's defaults)
                compilers.append(f"{profile}\nsha256:{file_digest(profile)}")
    return {
        "kernix": [__version__, store.code_identity()],
        "platform": config.platform,
        "flags": compile_flags(config),
        "compilers": compilers,
        "environment": store.compiler_environment(),
        "arch": config.arch,
        "allow_cuda_graph": config.allow_cuda_graph,
        "jaxlib": toolchain.jaxlib_version(),
        "python": sys.implementation.cache_tag,
    }


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
    """The files the entry key is computed from: the sources, the compilers (and
    nvcc's profile), and the directories searched for compilers."""
    cuda = request.platform == "cuda"
    compilers = toolchain.compiler_paths(cuda) + [p for p in [_nvcc_profile() if cuda else None] if p]
    return [str(s) for s in request.sources] + compilers + store.search_dirs()


def store_inline_source(request: LoadRequest) -> None:
    """Store the source of an inline ``request`` again if it is gone (or holds
    other bytes), as a clear may have removed it (why and when: docs/how-it-works.rst,
    "What is atomic"); nothing for a file or directory load."""
    if request.inline_source is None:
        return
    (path,) = request.sources
    store.write_source(request.root, request.name, request.inline_source, path.suffix[1:])


def keyed_entry(request: LoadRequest, fp: str) -> Manifest:
    """The entry for ``request`` through its full key, remembered in the direct index."""
    store_inline_source(request)  # a concurrent `kernix cache clear` may have removed it
    files = store.file_stats(_key_files(request))  # before the key they vouch for
    config = build_config(request)
    key = cache_key(request, config)
    manifest = _entry(request, config, key, fresh=request.force_rebuild)
    store.remember_key(request.root, request.name, fp, key, files, verbose=request.verbose)
    return manifest


def _entry(request: LoadRequest, config: BuildConfig, key: str, *, fresh: bool) -> Manifest:
    """The cache entry for ``key``: looked up, else built under the lock
    (``fresh``: skip the look-up and build from an empty work directory)."""
    name, root, verbose = request.name, request.root, request.verbose
    if not fresh:
        found = store.lookup(root, name, key)
        notes.note(f"{name}: cache {found.reason} ({key[:16]})", verbose=verbose)
        if found.manifest is not None:
            return found.manifest

    with build_lock(root, name, verbose=verbose):
        store_inline_source(request)  # removed by a clear while this process waited for the lock?
        manifest = None if fresh else store.lookup(root, name, key).manifest  # built by another process meanwhile?
        if manifest is None:
            manifest = _build(request, config, key, fresh=fresh)
        # Mapped before the lock is released, so that a clear waiting for it cannot remove the library
        # first; a library that does not load fails again where the pipeline maps it (see reload).
        with contextlib.suppress(OSError):
            registry.open_library(manifest.so_path)
        return manifest


def discard(request: LoadRequest, manifest: Manifest) -> None:
    """Remove ``request``'s entry ``manifest`` from the cache, under its build lock."""
    with build_lock(request.root, request.name, verbose=request.verbose):
        store.discard(manifest)


def reload(request: LoadRequest, manifest: Manifest, exc: OSError) -> Manifest:
    """The entry of ``manifest`` again, after its library failed to load with
    ``exc``: a damaged entry is discarded and built once from an empty work
    directory; one cleared meanwhile is looked up (or built) again.  A
    :class:`RegistrationError` when the rebuilt library does not load either
    (it is not kept), a :class:`CacheError` on a ``noexec`` file system."""
    noexec = noexec_problem(request.root)
    if noexec is not None:
        raise CacheError(f"cannot load the compiled library {manifest.so_path} ({exc}): {noexec}") from exc
    damaged = manifest.so_path.exists()  # else: cleared between look-up and load
    if damaged:
        discard(request, manifest)
        notes.note(f"{request.name}: the library {manifest.so_path} failed to load ({exc}); rebuilding it",
                    verbose=True)
    manifest = _entry(request, build_config(request), manifest.key, fresh=damaged)
    try:
        registry.load_library(manifest.so_path)
    except RegistrationError as again:
        discard(request, manifest)
        raise RegistrationError(
            f"{again}. A clean rebuild of module {request.name!r} did not load either, so it is not kept in "
            "the cache. If the library needs a shared library that is not found, add its directory to "
            "LD_LIBRARY_PATH or link it with extra_ldflags=['-Wl,-rpath,<dir>']; then load again with "
            f"force_rebuild=True (or run `kernix cache clear {request.name}` first)."
        ) from again
    return manifest


def exported_units(request: LoadRequest) -> list[tuple[str, list[codegen.ExportedFunction]]]:
    """``request``'s sources inferred and numbered for code generation:
    ``(source, functions)`` per file, every function's index unique in the module."""
    from .frontend.compiler_view import inference_flags
    from .frontend.units import infer_units

    toolchain.check_host_compiler()  # before inference, whose parse would only miss its standard headers
    flags = inference_flags(request.include_dirs, request.extra_cflags, request.optimization_level,
                            fast_math=request.use_fast_math and request.language == "cpp")
    units = infer_units(request.sources, request.functions, language=request.language, flags=flags,
                        cache_dir=request.root)
    index = itertools.count()
    return [(str(src), [codegen.ExportedFunction(next(index), f) for f in fns]) for src, fns in units]


def _build(request: LoadRequest, config: BuildConfig, key: str, *, fresh: bool) -> Manifest:
    noexec = noexec_problem(request.root)
    if noexec is not None:  # a build there could never be loaded
        raise CacheError(noexec)
    started = store.build_started(request.root)  # before anything reads the sources or headers
    stamp = content_key(_toolchain_parts(config))  # objects built with another stamp are never reused
    try:
        exported, so_path, inputs = _build_in_work_dir(request, config, stamp, started, fresh=fresh)
    except OutputError as exc:
        if fresh:
            raise
        notes.note(f"{request.name}: {exc}; building again from an empty directory", verbose=True)
        exported, so_path, inputs = _build_in_work_dir(request, config, stamp, started, fresh=True)
    for version in inputs:
        if version[-1] == UNSETTLED:
            notes.note(f"{request.name}: {version[0]} changed during the build, so the entry is not used again "
                        "(the next load builds it anew)", verbose=request.verbose)
    all_fns = [e for _, es in exported for e in es]
    handlers = {e.spec.name: codegen.handler_symbol(e) for e in all_fns}
    return store.publish(
        request.root, request.name, key, so_path, [e.spec for e in all_fns], handlers, inputs, config.platform,
    )


def _build_in_work_dir(request: LoadRequest, config: BuildConfig, stamp: str, started: int, *,
                       fresh: bool) -> tuple[list[tuple[str, list[codegen.ExportedFunction]]], Path, list[list[Any]]]:
    """Infer and build in the module's work directory: the functions, the library and
    the version of every file the compilers read (a file changed since ``started`` unsettled)."""
    fixed = {}
    if request.inline_source is not None:  # stored under its content's hash: it cannot change
        text = request.inline_source.encode("utf-8", "surrogateescape")
        fixed[str(request.sources[0])] = hashlib.sha256(text).hexdigest()
    with store.work_directory(request.root, request.name, fresh=fresh, stamp=stamp,
                              verbose=request.verbose) as build_dir:
        notes.note(f"{request.name}: building in {build_dir}", verbose=request.verbose)
        exported, result = _infer_and_compile(request, config, build_dir, fresh=fresh)
        inputs = store.settled_versions(result.dependencies, started, fixed)
        store.record_inputs(build_dir, stamp, inputs, started)
    return exported, result.so_path, inputs


def _infer_and_compile(request: LoadRequest, config: BuildConfig, build_dir: Path, *, fresh: bool
                       ) -> tuple[list[tuple[str, list[codegen.ExportedFunction]]], BuildResult]:
    """Inference, and the build of what it exports.

    When ``build_dir`` holds the functions of an earlier build (and not
    ``fresh``), their code is generated again with the sources as they are
    now and built while inference runs.  When inference gives the same code
    (the usual edit changes no signature), that build is the build, its
    compile error included; else it is stopped, as on an error of inference,
    and the code inference gives is built."""
    def build(units: Any, stop: threading.Event | None = None, started: Any = None) -> BuildResult:
        return compile_library(build_dir, units, config, workers=request.ninja_workers, verbose=request.verbose,
                               name=request.name, stop=stop, started=started)

    def infer() -> list[tuple[str, list[codegen.ExportedFunction]]]:
        exported = exported_units(request)
        check_function_names([e.spec for _, es in exported for e in es])
        return exported

    guess = None if fresh else previous_units(build_dir, request.sources)
    if guess is None:
        exported = infer()
        return exported, build(exported)
    stop, running, same = threading.Event(), threading.Event(), False
    with ThreadPoolExecutor(1, thread_name_prefix="kernix-build") as pool:
        early = pool.submit(build, guess, stop, running.set)
        early.add_done_callback(lambda _: running.set())
        try:
            running.wait()  # (the compiler first: inference's imports would hold the lock the build's Python needs)
            exported = infer()
            same = generated_files(exported, config) == generated_files(guess, config)
        finally:
            if not same:
                stop.set()
    if same:
        return exported, early.result()
    notes.note(f"{request.name}: the code generated for its functions changed (a signature, or which functions "
               "are exported); building it", verbose=request.verbose)
    return exported, build(exported)
