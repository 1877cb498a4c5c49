"""Loading compiled libraries and registering their handlers with JAX.

XLA keeps one handler per (target name, platform) for the life of the process, so every registration
goes through here (what it does with a taken name: :func:`register_targets`)."""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from ..platforms import JAX_PLATFORMS
from ..notes import warn_at

if TYPE_CHECKING:
    from ..errors import RegistrationError

# jax is imported where a target is registered: a build that does not register does not import it.

__all__ = ["loaded_libraries", "open_library", "load_library", "handler_address", "register_targets",
           "list_registered_targets", "platforms_of", "versioned_name", "versioned_target", "parse_versioned",
           "register_alias", "loaded_code"]

_lock = threading.RLock()
_libraries: dict[str, ctypes.CDLL] = {}
_targets: dict[tuple[str, str], "Registration"] = {}
_state_types: set[tuple[str, str]] = set()  # (type name, platform) registered with XLA
_warned: set[tuple[str, str]] = set()  # (plain target, platform) a ReloadWarning has named
#: ``PyCapsule_New``, with a prototype of our own (``jax.ffi.pycapsule`` retypes the shared one).
_new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))


class Registration:
    """One registered FFI target (a plain class: a warm load defines it at import)."""

    __slots__ = ("target", "platform", "digest", "library", "symbol", "base")

    def __init__(self, target: str, platform: str, digest: str, library: str, symbol: str,
                 base: str | None = None) -> None:
        self.target = target  # the name registered with XLA
        self.platform = platform
        self.digest = digest  # the library's SHA-256: equal digest and symbol = same code
        self.library = library
        self.symbol = symbol
        self.base = base or target  # the plain "<prefix>.<function>" it is (a version of)

    def same_code(self, digest: str, symbol: str) -> bool:
        return self.digest == digest and self.symbol == symbol


def open_library(path: str | Path) -> ctypes.CDLL:
    """``dlopen`` a library once per path (``RTLD_LOCAL``: symbols stay private); OSError as it fails."""
    key = str(path)
    with _lock:
        lib = _libraries.get(key)
        if lib is None:
            lib = _libraries[key] = ctypes.CDLL(key, mode=ctypes.RTLD_LOCAL)
        return lib


def load_library(path: str | Path) -> ctypes.CDLL:
    """:func:`open_library`, a failure raised as :class:`~kernix.errors.RegistrationError`."""
    try:
        return open_library(path)
    except OSError as exc:
        from ..errors import RegistrationError
        raise RegistrationError(f"cannot load the compiled library {path}: {exc}") from exc


def _missing_symbol(library: ctypes.CDLL, symbol: str) -> RegistrationError:
    from ..errors import RegistrationError
    return RegistrationError(
        f"the compiled library {library._name} has no handler symbol {symbol!r}; it is damaged "
        "or was built by another kernix version: rebuild with force_rebuild=True"
    )


def handler_address(library: ctypes.CDLL, symbol: str) -> ctypes._CFuncPtr:  # type: ignore[name-defined]
    """The function ``symbol`` of a loaded library (a handler, or a state type's accessor), as a ctypes function."""
    try:
        return getattr(library, symbol)
    except AttributeError:
        raise _missing_symbol(library, symbol) from None


def _address(library: ctypes.CDLL, symbol: str) -> int | None:
    """The address of ``symbol`` in a loaded library (without a ctypes function object), or ``None``."""
    try:
        return ctypes.addressof(ctypes.c_char.in_dll(library, symbol))
    except ValueError:
        return None


def register_targets(platform: str, library_path: str | Path, digest: str, symbols: Mapping[str, str],
                     ) -> dict[str, str]:
    """Register the handlers of one library (SHA-256 ``digest``) as FFI targets, all or none.

    ``symbols`` maps each target (``"<prefix>.<function>"``) to its handler symbol.  A target registered
    with the same digest and symbol is left as it is; one registered with other code keeps it (XLA
    cannot replace it) and the new handler goes under its content-versioned name (:func:`versioned_name`),
    which the new module's callables call, with a :class:`~kernix.errors.ReloadWarning` once per target.  A
    handler with an instantiate stage (``BE::State<T>``) is registered with it, and the library's state type with XLA.

    Returns each target -> the name its handler is registered under.  Raises
    :class:`~kernix.errors.RegistrationError` (nothing registered) for a missing symbol or a
    content-versioned name taken by other code.
    """
    jax_platform = JAX_PLATFORMS[platform]
    library = str(library_path)
    with _lock:
        names: dict[str, str] = {}
        new: list[Registration] = []
        moved: list[tuple[str, str, Registration]] = []  # (target, name registered, its first code)
        for target, symbol in symbols.items():
            name, previous = target, _targets.get((target, jax_platform))
            if previous is not None and not previous.same_code(digest, symbol):
                name = versioned_name(target, {jax_platform: digest})
                moved.append((target, name, previous))
                previous = _targets.get((name, jax_platform))
                if previous is not None and not previous.same_code(digest, symbol):
                    raise _taken(name, jax_platform, previous)
            if previous is None:
                new.append(Registration(name, jax_platform, digest, library, symbol, base=target))
            names[target] = name
        capsules = _capsules(new)  # every symbol found before XLA is touched
        # Before registering: under an "error" filter the load fails with nothing registered, as it says.
        _warn_moved([m for m in moved if (m[0], jax_platform) not in _warned], jax_platform)
        for reg, capsule in zip(new, capsules):
            _register(reg, capsule)
        return names


def _taken(name: str, platform: str, previous: Registration) -> RegistrationError:
    from ..errors import RegistrationError
    return RegistrationError(
        f"FFI target {name!r} ({platform}) is already registered in this process with different code "
        f"(from {previous.library}), and XLA cannot replace a registered handler. Load the new code under "
        f"another module name or target_prefix (for example target_prefix='{name.rsplit('.', 1)[0]}_v2')."
    )


def _warn_moved(moved: list[tuple[str, str, Registration]], platform: str) -> None:
    """One :class:`~kernix.errors.ReloadWarning` naming each target that keeps its first code, and the new names."""
    if not moved:
        return
    quoted = ", ".join(repr(target) for target, _, _ in moved)
    what = f"FFI target {quoted} ({platform}) is" if len(moved) == 1 else f"FFI targets {quoted} ({platform}) are"
    pairs = ", ".join(f"{target!r} -> {name!r}" for target, name, _ in moved)
    from ..errors import ReloadWarning
    warn_at(
        f"kernix: {what} already registered in this process with other code (from {moved[0][2].library}), "
        f"and XLA cannot replace a registered handler. The module just loaded runs its new code under the "
        f"content-versioned name(s) {pairs}; the plain name(s) keep running the code first loaded, and the "
        "modules loaded before keep theirs, and so does a jax.jit function traced before this load until it is "
        "traced again (f.clear_cache()). A jax.ffi.ffi_call of your own must call the new name to run the new "
        "code: module.targets[function] gives it. (Said once per target: later versions are registered under "
        "names of their own without a warning.)",
        ReloadWarning, "", 0,
    )
    _warned.update((target, platform) for target, _, _ in moved)


def _capsules(regs: list[Registration]) -> list[object]:
    """The handler capsule of each registration (what XLA registers; for a stateful one, its two stages')."""
    capsules: list[object] = []
    for reg in regs:
        library = load_library(reg.library)
        address = _address(library, reg.symbol)
        if address is None:
            raise _missing_symbol(library, reg.symbol)
        execute = _new_capsule(address, None, None)
        instantiate = _address(library, "kernix_instantiate_" + reg.symbol.removeprefix("kernix_handler_"))
        if instantiate is not None:
            _register_state_type(library, reg)
            capsules.append({"instantiate": _new_capsule(instantiate, None, None), "execute": execute})
        else:
            capsules.append(execute)
    return capsules


def _register_state_type(library: ctypes.CDLL, reg: Registration) -> None:
    import jax.ffi

    accessor = handler_address(library, "kernix_statetype_" + reg.symbol.removeprefix("kernix_handler_"))
    accessor.restype, accessor.argtypes = ctypes.c_void_p, [ctypes.c_int]
    type_id, type_info = accessor(0), accessor(1)
    name = f"kernix.state.{type_id:x}"  # one type object per loaded library
    if (name, reg.platform) in _state_types:
        return
    jax.ffi.register_ffi_type(
        name, {"type_id": _new_capsule(type_id, None, None), "type_info": _new_capsule(type_info, None, None)},
        platform=reg.platform)
    _state_types.add((name, reg.platform))


def _register(reg: Registration, capsule: object) -> None:
    import jax.ffi

    jax.ffi.register_ffi_target(reg.target, capsule, platform=reg.platform, api_version=1)
    _targets[(reg.target, reg.platform)] = reg


def versioned_name(target: str, digests: Mapping[str, str]) -> str:
    """The target name that also names the code (``digests``: each platform's library's SHA-256):
    ``"<target>@<12 hex>"`` for one library, ``"<target>@cpu:<12 hex>,cuda:<12 hex>"`` for different ones."""
    if len(set(digests.values())) == 1:
        return f"{target}@{next(iter(digests.values()))[:12]}"
    return f"{target}@" + ",".join(f"{p}:{d[:12]}" for p, d in sorted(digests.items()))


def parse_versioned(name: str) -> tuple[str, dict[str | None, str]]:
    """``(target, {platform: 12 hex})`` of a :func:`versioned_name` (platform ``None`` in the one-library form)."""
    target, _, version = name.rpartition("@")
    if ":" not in version:
        return target, {None: version}
    return target, {p: d for p, _, d in (part.partition(":") for part in version.split(","))}


def versioned_target(target: str, platforms: Sequence[str] | None = None) -> str | None:
    """The content-versioned name of ``target``, for its libraries on ``platforms`` (default: all it
    has), registered with XLA now if not yet; ``None`` where it has none of them."""
    with _lock:
        regs = {p: r for p, jp in JAX_PLATFORMS.items() if (r := _targets.get((target, jp))) is not None
                and (platforms is None or p in platforms)}
        if not regs:
            return None
        base = next(iter(regs.values())).base
        versioned = versioned_name(base, {p: r.digest for p, r in regs.items()})
        register_alias(versioned, target, list(regs))
        return versioned


def register_alias(name: str, target: str, platforms: Sequence[str]) -> None:
    """Register ``name`` for the handler of kernix's ``target`` on each of ``platforms`` unless it is
    already (a RegistrationError if ``name`` runs other code)."""
    with _lock:
        for p in platforms:
            reg = _targets[(target, JAX_PLATFORMS[p])]
            previous = _targets.get((name, reg.platform))
            if previous is None:
                alias = Registration(name, reg.platform, reg.digest, reg.library, reg.symbol, base=reg.base)
                _register(alias, *_capsules([alias]))
            elif not previous.same_code(reg.digest, reg.symbol):
                raise _taken(name, reg.platform, previous)


def loaded_code(target: str) -> dict[str, dict[str, str]]:
    """Each library registered for the plain ``target`` (under it or a versioned name), by platform:
    ``{platform: {SHA-256: a name it is registered under}}``, the one under ``target`` first."""
    with _lock:
        found: dict[str, dict[str, str]] = {}
        for p, jp in JAX_PLATFORMS.items():
            regs = sorted((r for r in _targets.values() if r.base == target and r.platform == jp),
                          key=lambda r: r.target != target)
            for r in regs:
                found.setdefault(p, {}).setdefault(r.digest, r.target)
        return found


def platforms_of(target: str) -> list[str]:
    """The kernix platforms (``"cpu"``, ``"cuda"``) on which kernix registered ``target``, sorted."""
    with _lock:
        return sorted(p for p, jax_platform in JAX_PLATFORMS.items() if (target, jax_platform) in _targets)


def list_registered_targets() -> dict[str, str]:
    """Targets kernix registered in this process: ``{target: platform}``."""
    with _lock:
        return {reg.target: reg.platform for reg in _targets.values()}


def loaded_libraries() -> list[str]:
    """Paths of the libraries this process has mapped through kernix."""
    with _lock:
        return list(_libraries)
