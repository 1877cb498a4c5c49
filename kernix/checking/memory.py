"""Memory for the guarded call: the host's (NumPy) for C++ kernels, the
GPU's (the CUDA driver API, through :mod:`ctypes`) for CUDA kernels.

Both give raw addresses that kernix.check hands to a handler, with the same
four operations: allocate, write, read back, free; :meth:`synchronize` waits
for the kernel.  GPU memory is allocated in the device's primary context,
the one JAX uses, made current on this thread while the memory is in use.
"""

from __future__ import annotations

import ctypes
from typing import Any, Self

import numpy as np

from ..errors import KernixError

__all__ = ["HostMemory", "CudaMemory", "ALIGNMENT"]

#: Every buffer starts at a multiple of this many bytes (XLA aligns its buffers to 64 on the CPU, 256 on GPUs).
ALIGNMENT = 256


class HostMemory:
    """Host memory, for kernels of C++ modules (the handler runs on this thread)."""

    stream: int | None = None

    def __init__(self) -> None:
        self._arrays: dict[int, np.ndarray] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._arrays.clear()

    def allocate(self, nbytes: int) -> int:
        raw = np.empty(nbytes + ALIGNMENT, np.uint8)
        start = (-raw.ctypes.data) % ALIGNMENT
        view = raw[start:start + nbytes]
        self._arrays[view.ctypes.data] = view
        return view.ctypes.data

    def write(self, address: int, data: np.ndarray) -> None:
        self._arrays[address][: data.nbytes] = data.view(np.uint8).reshape(-1)

    def read(self, address: int, nbytes: int) -> np.ndarray:
        return self._arrays[address][:nbytes].copy()

    def synchronize(self) -> str | None:
        return None

    def free(self, address: int) -> None:
        self._arrays.pop(address, None)


class CudaMemory:
    """GPU memory of CUDA device ``ordinal`` (as the driver numbers the visible GPUs).

    The handler gets the legacy default stream (``nullptr``), and
    :meth:`synchronize` waits for the whole context.
    """

    stream: int | None = None

    def __init__(self, ordinal: int) -> None:
        try:
            self._lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise KernixError(f"the CUDA driver (libcuda.so.1) cannot be loaded: {exc}") from None
        lib = self._lib
        u64, size = ctypes.c_uint64, ctypes.c_size_t
        lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(u64), size]
        lib.cuMemFree_v2.argtypes = [u64]
        lib.cuMemcpyHtoD_v2.argtypes = [u64, ctypes.c_void_p, size]
        lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, u64, size]
        self._ordinal = ordinal
        self._device = ctypes.c_int()
        self._context = ctypes.c_void_p()
        self._call("cuInit", 0)
        self._call("cuDeviceGet", ctypes.byref(self._device), ordinal)

    def _error(self, name: str, rc: int) -> str:
        text = ctypes.c_char_p()
        self._lib.cuGetErrorName(rc, ctypes.byref(text))
        return f"the CUDA driver's {name} failed on GPU {self._ordinal}: {(text.value or b'?').decode()} ({rc})"

    def _call(self, name: str, *args: Any) -> None:
        rc = getattr(self._lib, name)(*args)
        if rc:
            raise KernixError(self._error(name, rc))

    def __enter__(self) -> Self:
        self._call("cuDevicePrimaryCtxRetain", ctypes.byref(self._context), self._device)
        self._call("cuCtxPushCurrent_v2", self._context)
        return self

    def __exit__(self, *exc: object) -> None:
        popped = ctypes.c_void_p()
        self._lib.cuCtxPopCurrent_v2(ctypes.byref(popped))
        self._lib.cuDevicePrimaryCtxRelease_v2(self._device)

    def allocate(self, nbytes: int) -> int:
        address = ctypes.c_uint64()
        self._call("cuMemAlloc_v2", ctypes.byref(address), max(nbytes, 1))  # aligned to at least 256 bytes
        return address.value

    def write(self, address: int, data: np.ndarray) -> None:
        data = np.ascontiguousarray(data)
        self._call("cuMemcpyHtoD_v2", address, data.ctypes.data, data.nbytes)

    def read(self, address: int, nbytes: int) -> np.ndarray:
        out = np.empty(nbytes, np.uint8)
        self._call("cuMemcpyDtoH_v2", out.ctypes.data, address, nbytes)
        return out

    def synchronize(self) -> str | None:
        """Wait for the kernel; the driver's error (a fault in the kernel) as a message, or ``None``."""
        rc = self._lib.cuCtxSynchronize()
        return None if rc == 0 else self._error("cuCtxSynchronize", rc)

    def free(self, address: int) -> None:
        self._lib.cuMemFree_v2(address)
