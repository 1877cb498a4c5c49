"""``load_or_build``: the prebuilt module when it can serve this machine, else a JIT build.

Meant for a package that ships prebuilt kernels *and* their sources::

    from kernix.prebuilt import load_or_build

    ops = load_or_build(HERE / "_prebuilt" / "ops", [HERE / "kernels" / "ops.cu"],
                        target_prefix="mypkg.ops")
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Sequence

from .. import loaders
from ..errors import PrebuiltError
from ..languages import language_of
from ..runtime.module import CompiledModule
from .format import PrebuiltManifest
from .load import load_manifest

__all__ = ["load_or_build", "last_load_reason"]

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
    """Load ``prebuilt_dir`` with :func:`load_prebuilt`; when it cannot serve this
    machine (missing, damaged, stale, another kernix release or FFI API, no
    matching GPU architecture, a library ``dlopen`` refuses), say why on
    stderr and build ``sources`` with the JIT loaders instead.

    The prebuilt module is stale, and not loaded, when ``sources`` exist and
    differ from those it was built from, or when a header they include from
    their own directories (recorded by relative path) differs.  A module that another user could
    have written (reason ``"trust"``) is refused, not replaced by a build:
    its sources could have been written by them too.

    Parameters
    ----------
    prebuilt_dir : path
        The prebuilt module (made at wheel-build time).
    sources : list of paths
        The shipped sources: one file (``load_cuda_file`` / ``load_cpp_file``
        by extension) or several (``load_*_dir`` of their common directory).
    target_prefix : str, optional
        FFI target prefix, for both paths (keep it equal so exported artifacts
        and other code see one name).
    name : str, optional
        Module name of the JIT build (default: the prebuilt module's name).
    quiet : bool
        Do not print why the JIT build was needed.
    **options
        Loader options for the JIT build (``extra_cuda_cflags``, ``compute_capability``...).

    Returns
    -------
    CompiledModule

    Raises
    ------
    PrebuiltError
        With reason ``"trust"``, as :func:`load_prebuilt`.
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
