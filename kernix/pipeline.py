"""The load pipeline, from a :class:`~kernix.request.LoadRequest` to a loaded module::

    request -> fingerprint -> direct index -> look-up  hit  -> load the library, register
                                                       miss -> kernix.compilation: cache key (toolchain), lock, infer
                                                               (libclang), generate, build (ninja), publish

A warm load (a hit) runs no compiler and imports neither libclang nor the
miss path (:mod:`kernix.compilation`): the direct index gives the entry key
remembered for the request, and the specs are read when a function is first
used.  A library that fails to load is never left as a hit: it is rebuilt
once (:func:`kernix.compilation.reload`).
"""

from __future__ import annotations

import os
import sys
import weakref
from typing import TYPE_CHECKING, Any, Callable

from . import __version__, notes, store
from .paths import jaxlib_install
from .request import LoadRequest
from .runtime import registry
from .runtime.module import CompiledModule
from .store import Manifest, ManifestError

if TYPE_CHECKING:
    from .language.spec import FunctionSpec

__all__ = ["load", "fingerprint", "request_of"]

#: Each module loaded here: its request, and its sources' stats before the build (kernix.check rebuilds them).
_REQUESTS: weakref.WeakKeyDictionary[CompiledModule, tuple[LoadRequest, list[Any]]] = weakref.WeakKeyDictionary()


def request_of(module: CompiledModule) -> LoadRequest | str:
    """The request ``module`` was loaded from in this process, or why there is none to build again: a
    prebuilt module, or one whose sources changed (or went) since it was loaded."""
    found = _REQUESTS.get(module)
    if found is None:
        return f"module {module.name!r} was not loaded from sources in this process (a prebuilt module?)"
    request, stamps = found
    now = store.file_stats(map(str, request.sources))
    changed = [str(s) for s, was, is_ in zip(request.sources, stamps, now) if was != is_]
    if changed:
        return (f"{', '.join(changed)} changed or went since module {module.name!r} was loaded: building it again "
                "would check other code (load the module again)")
    return request


def load(request: LoadRequest) -> CompiledModule:
    """Run the pipeline for ``request`` and return the loaded (and, if asked, registered) module."""
    stamps = store.file_stats(map(str, request.sources))  # before the build: an edit during it is a change
    fp = fingerprint(request)
    manifest = None if request.force_rebuild else _direct_hit(request, fp)
    if manifest is None:
        from .compilation import keyed_entry

        manifest = keyed_entry(request, fp)
    # Mapped now: once loaded it stays usable even if another process clears the cache.
    try:
        registry.open_library(manifest.so_path)
    except OSError as exc:
        from .compilation import reload

        manifest = reload(request, manifest, exc)
    module = CompiledModule(
        name=request.name, path=manifest.so_path, platform=manifest.platform, functions=_specs_of(request, manifest),
        handlers=manifest.handlers, digest=manifest.so_sha256, target_prefix=request.target_prefix,
        memos=store.Memos(request.root),
    )
    _REQUESTS[module] = (request, stamps)
    if request.auto_register:
        module.register()
    return module


def fingerprint(request: LoadRequest) -> str:
    """What decides ``request``'s entry key besides the content of files: its
    build options, the environment the tool search reads, the kernix and jaxlib
    installed (versions and places), and for CUDA the GPU architecture (given,
    else asked of the driver, never of JAX: the backend stays unstarted)."""
    arch = None
    if request.platform == "cuda":
        from .backend.arch import detect_compute_capability  # (CUDA only)

        arch = detect_compute_capability(request.compute_capability, root=request.root)
    build_only = {
        **request.as_dict(),
        "root": None, "verbose": False, "force_rebuild": False, "auto_register": False, "target_prefix": None,
        "ninja_workers": None, "inline_source": None,  # (an inline source's path names its content)
    }
    return store.content_key({
        "direct": store.DIRECT_FORMAT,
        "kernix": [__version__, __file__],
        "python": [sys.implementation.cache_tag, sys.prefix],
        "jaxlib": jaxlib_install(),
        "request": build_only,
        "environment": {v: os.environ.get(v) for v in store.TOOL_ENVIRONMENT},
        "arch": arch,
    })


def _direct_hit(request: LoadRequest, fp: str) -> Manifest | None:
    """The entry the direct index gives for ``request``, if it is a hit."""
    key = store.recall_key(request.root, request.name, fp, verbose=request.verbose)
    if key is None:
        return None
    found = store.lookup(request.root, request.name, key, warn=False)
    if found.manifest is not None:
        notes.note(f"{request.name}: cache hit ({key[:16]}, direct)", verbose=request.verbose)
    return found.manifest


def _specs_of(request: LoadRequest, manifest: Manifest) -> Callable[[], tuple[FunctionSpec, ...]]:
    """The manifest's specs, read when the module first needs them."""

    def read() -> tuple[FunctionSpec, ...]:
        try:
            return manifest.specs()
        except ManifestError as exc:
            from .compilation import discard

            discard(request, manifest)
            from .errors import CacheError
            raise CacheError(
                f"the cache entry {manifest.directory} of module {request.name!r} is damaged ({exc}), so it was "
                "removed from the cache: load the module again to rebuild it."
            ) from None

    return read
