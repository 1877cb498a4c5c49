"""Comparing a kernel's results with a reference's: tolerances per dtype, and
the largest difference and where it is (:func:`compare`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

__all__ = ["TOLERANCES", "Mismatch", "Tolerance", "compare", "first_change", "show"]

#: Default ``(rtol, atol)`` per floating dtype: a few units in the last place
#: of the dtype, enough for a kernel that sums in another order than the
#: reference.  Integer and bool results must be equal.  Complex dtypes use
#: their components' tolerances.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float8_e4m3fn": (1.25e-1, 1.25e-1),
    "float8_e5m2": (2.5e-1, 2.5e-1),
    "bfloat16": (2e-2, 2e-2),
    "float16": (2e-3, 2e-3),
    "float32": (2e-5, 1e-6),
    "float64": (1e-10, 1e-12),
    "complex64": (2e-5, 1e-6),
    "complex128": (1e-10, 1e-12),
}


@dataclass(frozen=True)
class Tolerance:
    """The tolerances of one check: ``|kernel - reference| <= atol + rtol * |reference|``.

    ``rtol`` and ``atol`` override the defaults of :data:`TOLERANCES`: a
    number for every dtype, or a mapping from dtype name to a number (the
    others keep their defaults).  ``scale`` multiplies the defaults (not the
    overrides): gradients, a composition of two kernels, get 10.  ``floor`` is the least ``atol`` of a
    floating dtype: inputs far from zero round every result by a few of their units in the last place.
    """

    rtol: float | Mapping[str, float] | None = None
    atol: float | Mapping[str, float] | None = None
    scale: float = 1.0
    floor: float = 0.0

    def of(self, dtype: Any) -> tuple[float, float]:
        """``(rtol, atol)`` for results of ``dtype``."""
        name = np.dtype(dtype).name
        if name not in TOLERANCES:
            return 0.0, 0.0  # integers, bool: exact
        rtol, atol = (t * self.scale for t in TOLERANCES[name])
        return _pick(self.rtol, name, rtol), max(_pick(self.atol, name, atol), self.floor)


def _pick(override: float | Mapping[str, float] | None, name: str, default: float) -> float:
    if isinstance(override, Mapping):
        return float(override.get(name, default))
    return default if override is None else float(override)


@dataclass(frozen=True)
class Mismatch:
    """Why a result is not the expected one: ``message``, and the largest absolute
    ``difference`` (``nan`` for an unmatched NaN) and its ``index``, both ``None``
    when shapes or dtypes differ.
    """

    message: str
    difference: float | None = None
    index: tuple[int, ...] | None = None


def show(x: Any) -> str:
    """One element, as NumPy prints it in its own dtype (``0.1`` for a float32, not ``0.10000000149011612``)."""
    return np.array2string(np.asarray(x), precision=8, floatmode="maxprec_equal")


def first_change(before: np.ndarray, after: np.ndarray) -> tuple[int, ...] | None:
    """The index of the first element whose bytes differ in ``after`` (``None``: none do)."""
    if after.tobytes() == before.tobytes():
        return None
    flat = int(np.flatnonzero(after.reshape(-1).view(np.uint8) != before.reshape(-1).view(np.uint8))[0])
    return tuple(int(i) for i in np.unravel_index(flat // max(before.itemsize, 1), before.shape))


def compare(what: str, got: Any, want: Any, tolerance: Tolerance, against: str = "the reference") -> Mismatch | None:
    """``None`` when ``got`` agrees with ``want``, named ``what`` and ``against`` in messages.

    Shapes and dtypes must be equal, NaNs and infinities where the reference has
    them, other elements within ``tolerance``.
    """
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return Mismatch(f"{what} has shape {got.shape}, {against} {want.shape}")
    if got.dtype != want.dtype:
        return Mismatch(f"{what} is {got.dtype}, {against} {want.dtype}")
    rtol, atol = tolerance.of(want.dtype)
    if np.issubdtype(got.dtype, np.inexact) or got.dtype.kind == "V" or got.dtype.name in TOLERANCES:
        kind = np.complex128 if np.iscomplexobj(got) else np.float64
        with np.errstate(invalid="ignore", over="ignore"):  # (NaN and infinity compare below, as values)
            g, w = got.astype(kind), want.astype(kind)
            nan_g, nan_w = np.isnan(g), np.isnan(w)
            diff = np.abs(g - w)
            diff = np.where(g == w, 0.0, diff)  # equal infinities: no difference
            bad = (nan_g != nan_w) | (~nan_w & ~(diff <= atol + rtol * np.abs(w)))
        diff = np.where(nan_g != nan_w, np.inf, np.where(nan_w, 0.0, diff))
    else:
        bad = got != want
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    count = int(np.count_nonzero(bad))
    if not count:
        return None
    flat = int(np.argmax(np.where(bad, diff, -1.0)))
    index = tuple(int(i) for i in np.unravel_index(flat, got.shape))
    largest = float(diff.reshape(-1)[flat])
    if np.isinf(largest) and (np.isnan(got.reshape(-1)[flat]) != np.isnan(want.reshape(-1)[flat])):
        largest = float("nan")
    where = f"index {index}" if index else "the scalar"
    tol = f"rtol={rtol:g}, atol={atol:g}" if (rtol or atol) else "exact"
    return Mismatch(
        f"{what} differs from {against} at {count} of {got.size} elements; the largest difference is "
        f"{largest:.3g} at {where} ({show(got.reshape(-1)[flat])} where {against} has "
        f"{show(want.reshape(-1)[flat])}; {tol})",
        largest, index,
    )
