"""The NVIDIA GPUs this process can use, asked of the driver through
:mod:`ctypes`, never of JAX (whose backend, once started, holds the GPU's
memory and refuses a later ``jax.distributed.initialize()``): NVML, whose
list :func:`visible` narrows to what ``CUDA_VISIBLE_DEVICES`` shows, else the
CUDA driver API (a container started with ``NVIDIA_DRIVER_CAPABILITIES=compute``
has ``libcuda.so.1`` but not NVML); the answer remembered in the cache (a
``"gpus"`` memo) under a key of what ``/proc/driver/nvidia`` shows.  The
user's view of it: "The GPU's architecture, from the driver" in
docs/multi-host.rst.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from collections.abc import Sequence

__all__ = ["CUDA_LIBRARY", "DRIVER_PROC", "NVML_LIBRARY", "Gpu", "Survey", "survey", "visible"]

#: The libraries and the driver's /proc directory (module attributes, so tests can stand in for them).
NVML_LIBRARY = "libnvidia-ml.so.1"
CUDA_LIBRARY = "libcuda.so.1"
DRIVER_PROC = "/proc/driver/nvidia"
_MEMO_FORMAT = 1
_CU_MAJOR, _CU_MINOR = 75, 76  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR
_CUDA_ERROR_NO_DEVICE = 100


class Gpu(tuple):
    """One GPU: its architecture (``"sm_90"``) and name (``"NVIDIA H100 80GB HBM3"``), an ``(arch, name)`` tuple."""

    # Tuples with properties rather than NamedTuples: a CUDA warm load defines these classes, and
    # typing.NamedTuple takes about 0.3 ms a class to define on an H100 host.
    __slots__ = ()
    arch = property(lambda self: self[0])
    name = property(lambda self: self[1])

    def __new__(cls, arch: str, name: str) -> Gpu:
        return tuple.__new__(cls, (arch, name))


class Survey(tuple):
    """The GPUs this process can use (``gpus``), where the answer came from
    (``source``: ``"nvml"``, ``"cuda driver"``, or ``""`` when neither answered)
    and, when there are none, why (``problem``, for the error that names the fix)."""

    __slots__ = ()
    gpus = property(lambda self: self[0])
    source = property(lambda self: self[1])
    problem = property(lambda self: self[2])

    def __new__(cls, gpus: tuple[Gpu, ...], source: str, problem: str) -> Survey:
        return tuple.__new__(cls, (gpus, source, problem))


class _Device(Gpu):
    """A GPU as NVML lists it (all of them, in PCI bus order): ``(arch, name, uuid)``."""

    __slots__ = ()
    uuid = property(lambda self: self[2])

    def __new__(cls, arch: str, name: str, uuid: str) -> _Device:
        return tuple.__new__(cls, (arch, name, uuid))


_known: dict[tuple[str | None, str | None], Survey] = {}  # this process's answers, by the two variables


def _text(buffer: ctypes.Array) -> str:  # type: ignore[type-arg]
    return buffer.value.decode("utf-8", "replace").strip()


class _Failed(Exception):
    """A driver library call that returned an error (its message says which)."""


def _nvml() -> list[_Device] | str:
    """Every GPU NVML lists, or why NVML gave no answer."""
    try:
        lib = ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return f"{NVML_LIBRARY} cannot be loaded"
    lib.nvmlErrorString.restype = ctypes.c_char_p

    def call(name: str, *args: object) -> None:
        rc = getattr(lib, name)(*args)
        if rc:
            raise _Failed(f"NVML's {name} failed: {(lib.nvmlErrorString(rc) or b'?').decode()} ({rc})")

    try:
        call("nvmlInit_v2")
    except _Failed as exc:
        return str(exc)
    try:
        count = ctypes.c_uint()
        call("nvmlDeviceGetCount_v2", ctypes.byref(count))
        devices = []
        for i in range(count.value):
            handle = ctypes.c_void_p()
            major, minor = ctypes.c_int(), ctypes.c_int()
            name, uuid = ctypes.create_string_buffer(96), ctypes.create_string_buffer(96)
            call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(i), ctypes.byref(handle))
            call("nvmlDeviceGetCudaComputeCapability", handle, ctypes.byref(major), ctypes.byref(minor))
            call("nvmlDeviceGetName", handle, name, ctypes.c_uint(len(name)))
            call("nvmlDeviceGetUUID", handle, uuid, ctypes.c_uint(len(uuid)))
            devices.append(_Device(f"sm_{major.value}{minor.value}", _text(name), _text(uuid)))
        return devices
    except _Failed as exc:
        return str(exc)
    finally:
        lib.nvmlShutdown()


def _cuda_driver() -> list[Gpu] | str:
    """The GPUs the CUDA driver shows this process (``CUDA_VISIBLE_DEVICES``
    applied by the driver), or why it gave no answer."""
    try:
        lib = ctypes.CDLL(CUDA_LIBRARY)
    except OSError:
        return f"{CUDA_LIBRARY} cannot be loaded"

    def check(name: str, rc: int) -> None:
        if rc:
            text = ctypes.c_char_p()
            lib.cuGetErrorName(rc, ctypes.byref(text))
            raise _Failed(f"the CUDA driver's {name} failed: {(text.value or b'?').decode()} ({rc})")

    def call(name: str, *args: object) -> None:
        check(name, getattr(lib, name)(*args))

    try:
        rc = lib.cuInit(0)
        if rc == _CUDA_ERROR_NO_DEVICE:
            return []
        check("cuInit", rc)
        count = ctypes.c_int()
        call("cuDeviceGetCount", ctypes.byref(count))
        gpus = []
        for i in range(count.value):
            device, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
            name = ctypes.create_string_buffer(256)
            call("cuDeviceGet", ctypes.byref(device), i)
            call("cuDeviceGetAttribute", ctypes.byref(major), _CU_MAJOR, device)
            call("cuDeviceGetAttribute", ctypes.byref(minor), _CU_MINOR, device)
            call("cuDeviceGetName", name, len(name), device)
            gpus.append(Gpu(f"sm_{major.value}{minor.value}", _text(name)))
        return gpus
    except _Failed as exc:
        return str(exc)


def visible(devices: Sequence[_Device]) -> list[_Device]:
    """The GPUs of ``devices`` (all, in PCI bus order) that ``CUDA_VISIBLE_DEVICES`` shows.

    As CUDA reads it: a comma-separated list of indices or UUIDs
    (``GPU-...``, a unique prefix), ending at the first entry that names no
    GPU or one already named.  An index counts in CUDA's order, which is
    the bus order when ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` or when every GPU is
    the same model; otherwise (and for ``MIG-...`` entries) which GPU an
    entry names is not known here, and every GPU is returned: a module built
    for all of their architectures runs on whichever it is.
    """
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return list(devices)
    bus_order = os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID" or len({d.name for d in devices}) <= 1
    chosen: list[_Device] = []
    for item in (e.strip() for e in env.split(",")):
        if item.isdigit() and int(item) < len(devices):
            if not bus_order:
                return list(devices)
            found = [devices[int(item)]]
        elif item.startswith("GPU-"):
            found = [d for d in devices if d.uuid.startswith(item)]
        elif item.startswith("MIG-"):
            return list(devices)
        else:
            found = []
        if len(found) != 1 or found[0] in chosen:
            break
        chosen.append(found[0])
    return chosen


def _identity() -> str | None:
    """A key for the driver and its GPUs, from ``/proc/driver/nvidia`` and
    the variables that choose among the GPUs; ``None`` without that directory."""
    parts = [f"{_MEMO_FORMAT}", *(f"{v}={os.environ.get(v)}" for v in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"))]
    try:
        with open(os.path.join(DRIVER_PROC, "version"), "rb") as f:
            parts.append(f.read().decode("utf-8", "replace"))
        gpus = os.path.join(DRIVER_PROC, "gpus")
        for bus in sorted(os.listdir(gpus)):
            with open(os.path.join(gpus, bus, "information"), "rb") as f:
                parts.append(bus + "\n" + f.read().decode("utf-8", "replace"))
    except OSError:
        return None
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


def _ask() -> Survey:
    """Ask NVML, then the CUDA driver."""
    problems = []
    for source, probe in (("nvml", _nvml), ("cuda driver", _cuda_driver)):
        answer = probe()
        if isinstance(answer, str):
            problems.append(answer)
            continue
        shown = answer if source == "cuda driver" else visible(answer)  # type: ignore[arg-type]
        gpus = tuple(Gpu(d.arch, d.name) for d in shown)
        if gpus:
            return Survey(gpus, source, "")
        hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
        if hidden is None:
            why = f"the driver lists no GPU ({source})"
        elif answer:
            why = f"CUDA_VISIBLE_DEVICES={hidden!r} shows none of the {len(answer)} GPUs ({source})"
        else:
            why = f"no GPU is visible with CUDA_VISIBLE_DEVICES={hidden!r} ({source})"
        return Survey((), source, why)
    return Survey((), "", "no NVIDIA driver answered: " + "; ".join(problems))


def _read_memo(key: str, root: str | os.PathLike[str] | None) -> Survey | None:
    from ..store import recall

    try:
        value = recall("gpus", key, root=root)
        gpus = tuple(Gpu(str(a), str(n)) for a, n in value["gpus"])
        source = str(value["source"])
    except (ValueError, KeyError, TypeError):  # missing, untrusted or damaged: asked again
        return None
    return Survey(gpus, source, "") if gpus and all(g.arch.startswith("sm_") for g in gpus) else None


def survey(root: str | os.PathLike[str] | None = None, *, remember: bool = True) -> Survey:
    """The GPUs this process can use (see the module's description), asking
    the driver only when neither this process nor the memo under ``root``
    (default: the cache root) has the answer.

    Parameters
    ----------
    root
        The cache root that holds the memo.
    remember
        Write a new answer to the memo (``False``: write nothing to the cache).

    Returns
    -------
    Survey
        Never raises: with no GPU, ``gpus`` is empty and ``problem`` says why.
    """
    env = (os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("CUDA_DEVICE_ORDER"))
    if env in _known:
        return _known[env]
    key = _identity()
    found = _read_memo(key, root) if key is not None else None
    if found is None:
        found = _ask()
        if found.gpus and key is not None and remember:
            from ..store import remember as keep

            keep("gpus", key, {"source": found.source, "gpus": [list(g) for g in found.gpus]}, root=root)
    if found.gpus:
        _known[env] = found
    return found
