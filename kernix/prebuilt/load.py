"""``load_prebuilt``: load a module that ``kernix build`` made, with no compiler.

Nothing here imports :mod:`kernix.frontend` (libclang) or
:mod:`kernix.backend` (compilers, ninja), and nothing writes to the kernix
cache: the manifest, a hash of the library, ``dlopen`` and JAX registration
are all a load does.
"""

from __future__ import annotations

import os

from ..runtime import registry
from ..errors import PrebuiltError
from ..store.files import file_digest
from ..runtime.module import CompiledModule
from .format import PrebuiltManifest, arch_problem, ffi_api_problem, running_ffi_api

__all__ = ["load_prebuilt", "check_prebuilt", "PrebuiltError"]


def _gpus() -> list[tuple[str, str]]:
    """``[(sm_XY, device kind)]`` of the JAX GPU devices (empty without a GPU backend)."""
    try:
        import jax

        devices = jax.devices("gpu")
    except Exception:  # no GPU backend is not an error here
        return []
    out = []
    for dev in devices:
        cc = str(getattr(dev, "compute_capability", "") or "")
        major, _, minor = cc.partition(".")
        if major.isdigit() and (minor or "0").isdigit():
            out.append((f"sm_{major}{minor or '0'}", str(getattr(dev, "device_kind", "GPU"))))
    return out


def check_prebuilt(manifest: PrebuiltManifest) -> None:
    """Refuse a prebuilt module this process cannot run.

    Checks, without running any tool: the running jaxlib's FFI API version,
    and for a CUDA module that a GPU is present and that every GPU has
    machine code or compatible PTX in the library.

    Raises
    ------
    PrebuiltError
        ``reason`` ``"ffi_api"``, ``"platform"`` or ``"arch"``, saying how to rebuild.
    """
    where = manifest.directory
    problem = ffi_api_problem(manifest.ffi_api, running_ffi_api())
    if problem:
        raise PrebuiltError(
            f"cannot load the prebuilt module {manifest.name!r} from {where}: {problem} "
            f"(built with jaxlib {manifest.jaxlib}). Rebuild it with this jaxlib installed "
            "(`kernix build ...`), or install a jaxlib with the same FFI API.",
            "ffi_api",
        )
    if manifest.platform != "cuda":
        return
    gpus = _gpus()
    if not gpus:
        raise PrebuiltError(
            f"cannot load the prebuilt module {manifest.name!r} from {where}: it runs on CUDA GPUs and "
            "JAX sees none here (install jax[cuda] and check that `jax.devices('gpu')` lists your GPU)",
            "platform",
        )
    for arch, kind in gpus:
        problem = arch_problem(arch, kind, manifest.sass, manifest.ptx)
        if problem:
            raise PrebuiltError(
                f"cannot load the prebuilt module {manifest.name!r} from {where}: {problem}", "arch"
            )


def load_prebuilt(
    directory: str | os.PathLike[str],
    target_prefix: str | None = None,
    auto_register: bool = True,
) -> CompiledModule:
    """Load a prebuilt module (made by ``kernix build`` or :func:`kernix.build_module`).

    Needs no compiler, no nvcc and no libclang, and writes nothing to the
    kernix cache.  The library's SHA-256 is checked against the manifest
    before it is loaded.

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
        When the directory holds no valid module, the library's hash does not
        match, the running jaxlib has another FFI API, or (CUDA) no GPU here can
        run the architectures it was built for; ``reason`` says which.
    """
    manifest = PrebuiltManifest.read(directory)
    check_prebuilt(manifest)
    lib = manifest.library_path
    try:
        digest = file_digest(lib)
    except OSError as exc:
        raise PrebuiltError(f"cannot read the library of the prebuilt module: {lib}: {exc.strerror or exc}",
                            "missing") from None
    if digest != manifest.library_sha256:
        raise PrebuiltError(
            f"the library {lib} does not match its manifest (SHA-256 {digest[:16]}..., expected "
            f"{manifest.library_sha256[:16]}...): it was modified or damaged after it was built. "
            "Rebuild the module (`kernix build ...`) or reinstall the package that ships it.",
            "hash",
        )
    registry.load_library(lib)
    module = CompiledModule(
        manifest.name, lib, manifest.platform, manifest.functions, manifest.handlers, digest,
        target_prefix=target_prefix,
    )
    if auto_register:
        module.register()
    return module
