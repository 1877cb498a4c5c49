"""Loading compiled libraries and registering their handlers with JAX.

XLA keeps one handler per (target name, platform) for the life of the
process, and a conflicting registration can break the JAX backend, so every
registration goes through here: registering the same content again is a
no-op, and registering different content under a taken name raises
:class:`~kernix.errors.RegistrationError` before JAX is touched.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
from pathlib import Path

from ..errors import RegistrationError
from ..languages import JAX_PLATFORMS

__all__ = [
    "loaded_libraries",
    "Registration",
    "load_library",
    "handler_address",
    "register_target",
    "list_registered_targets",
    "versioned_name",
    "versioned_target",
]

_lock = threading.RLock()
_libraries: dict[str, ctypes.CDLL] = {}
_targets: dict[tuple[str, str], "Registration"] = {}
_versioned: dict[str, str] = {}  # target -> its content-versioned name

class Registration:
    """One registered FFI target (a plain class: a warm load defines it at import)."""

    __slots__ = ("target", "platform", "identity", "library", "symbol")

    def __init__(self, target: str, platform: str, identity: str, library: str, symbol: str) -> None:
        self.target = target
        self.platform = platform
        self.identity = identity  # library SHA-256 and function: equal identity = same code
        self.library = library
        self.symbol = symbol


def load_library(path: str | Path) -> ctypes.CDLL:
    """``dlopen`` a library once per path (``RTLD_LOCAL``: symbols stay private)."""
    key = str(path)
    with _lock:
        lib = _libraries.get(key)
        if lib is None:
            try:
                lib = ctypes.CDLL(key, mode=ctypes.RTLD_LOCAL)
            except OSError as exc:
                raise RegistrationError(f"cannot load the compiled library {key}: {exc}") from exc
            _libraries[key] = lib
        return lib


def handler_address(library: ctypes.CDLL, symbol: str) -> ctypes._CFuncPtr:  # type: ignore[name-defined]
    """The handler function ``symbol`` of a loaded library."""
    try:
        return getattr(library, symbol)
    except AttributeError:
        raise RegistrationError(
            f"the compiled library {library._name} has no handler symbol {symbol!r}; it is damaged "
            "or was built by another kernix version: rebuild with force_rebuild=True"
        ) from None


def register_target(target: str, platform: str, library_path: str | Path, symbol: str, identity: str) -> bool:
    """Register ``symbol`` of the library as FFI target ``target``.

    Parameters
    ----------
    target
        The FFI target name, ``"<prefix>.<function>"``.
    platform
        ``"cuda"`` or ``"cpu"``.
    library_path, symbol
        Where the handler is.
    identity
        A string identifying the code (the library's SHA-256 and the
        function): the same identity may be registered again harmlessly.

    The handler is also known as :func:`versioned_name`
    (``"<target>@<12 hex of the library's SHA-256>"``), the name that
    :func:`kernix.export` writes into exported artifacts; that name is
    registered with XLA when first asked for (:func:`versioned_target`).

    Returns
    -------
    bool
        ``True`` if registered now, ``False`` if the same code already was.

    Raises
    ------
    RegistrationError
        If ``target`` is taken by different code.
    """
    jax_platform = JAX_PLATFORMS[platform]
    with _lock:
        previous = _targets.get((target, jax_platform))
        if previous is not None:
            if previous.identity == identity:
                return False
            raise RegistrationError(
                f"FFI target {target!r} ({jax_platform}) is already registered in this process with "
                f"different code (from {previous.library}). XLA cannot replace a registered handler. "
                "Load the new code under another module name or target_prefix (for example "
                f"target_prefix='{target.rsplit('.', 1)[0]}_v2'), or restart Python to replace it."
            )
        _register(Registration(target, jax_platform, identity, str(library_path), symbol))
        _versioned[target] = versioned_name(target, identity)
        return True


def _register(reg: Registration) -> None:
    import jax.ffi

    fn = handler_address(load_library(reg.library), reg.symbol)
    jax.ffi.register_ffi_target(reg.target, jax.ffi.pycapsule(fn), platform=reg.platform, api_version=1)
    _targets[(reg.target, reg.platform)] = reg


def versioned_name(target: str, identity: str) -> str:
    """``"<target>@<version>"``: the target name that also names the code.

    ``version`` is the first 12 hex digits of the library's SHA-256 (the start
    of ``identity``), or of the SHA-256 of ``identity`` when it starts otherwise.
    """
    head = identity.split(":", 1)[0]
    if len(head) < 12 or any(c not in "0123456789abcdef" for c in head[:12]):
        head = hashlib.sha256(identity.encode()).hexdigest()
    return f"{target}@{head[:12]}"


def versioned_target(target: str) -> str | None:
    """The content-versioned name of a target kernix registered (registered
    with XLA now if it was not yet), or ``None``."""
    with _lock:
        versioned = _versioned.get(target)
        for platform in JAX_PLATFORMS.values() if versioned is not None else ():
            reg = _targets.get((target, platform))
            if reg is not None and (versioned, platform) not in _targets:
                _register(Registration(versioned, platform, reg.identity, reg.library, reg.symbol))
        return versioned


def list_registered_targets() -> dict[str, str]:
    """Targets kernix registered in this process: ``{target: platform}``."""
    with _lock:
        return {reg.target: reg.platform for reg in _targets.values()}


def loaded_libraries() -> list[str]:
    """Paths of the libraries this process has mapped through kernix."""
    with _lock:
        return list(_libraries)
