"""What an exported function may return, read from its declaration.

Nothing a function returns reaches JAX except a failure: an exported function
writes its results to its ``BE::Tensor&`` (or ``xla::ffi::Result``) outputs and
returns ``void``, or returns an ``xla::ffi::Error`` (as JAX's own FFI examples
do) whose failure the call reports as a JAX error.  Any other return type is
refused, since the generated code would have to drop the value: a function
returning ``int`` or ``cudaError_t`` as its status would fail silently.

The decision is made on the *canonical* return type, so aliases
(``namespace ffi = xla::ffi; ffi::Error``, ``using Status = xla::ffi::Error``)
are recognised as what they name.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["ERROR_TYPE", "return_kind"]

#: The canonical spelling of XLA's FFI error type.
ERROR_TYPE = "xla::ffi::Error"

_CV = re.compile(r"^(?:(?:const|volatile)\s+)+|\s+(?:const|volatile)$")

_FIX = ("return `void` and write results to a `BE::Tensor&` output, or return `xla::ffi::Error` "
        "(from \"xla/ffi/api/ffi.h\") to report a failure")


def return_kind(cursor: Any) -> tuple[bool, str]:
    """How the function at ``cursor`` returns.

    Parameters
    ----------
    cursor
        A libclang function (or function template) cursor.

    Returns
    -------
    tuple
        Whether it returns ``xla::ffi::Error`` (:attr:`kernix.FunctionSpec.returns_error`),
        and ``""`` when it can be exported (``void`` or that), else the message
        that names the type and says what to write instead (the caller places
        it at the function).
    """
    name = cursor.spelling
    written_type = cursor.result_type
    written = " ".join(written_type.spelling.split())
    canonical = written_type.get_canonical()
    kind = canonical.kind.name
    if kind == "VOID":
        return False, ""
    where = f"function {name!r} returns `{written}`"
    if kind in ("LVALUEREFERENCE", "RVALUEREFERENCE"):
        pointee = _CV.sub("", canonical.get_pointee().get_canonical().spelling.strip())
        if pointee == ERROR_TYPE:
            return False, f"{where}, a reference: return `xla::ffi::Error` by value"
    bare = _CV.sub("", canonical.spelling.strip())
    if bare == ERROR_TYPE:
        return True, ""
    if bare.startswith(ERROR_TYPE + "Or<"):
        return False, (f"{where}: the value an `xla::ffi::ErrorOr<T>` carries cannot reach JAX (results are "
                      f"written to outputs); return `xla::ffi::Error` and write the value to a `BE::Tensor&` output")
    if kind in ("AUTO", "UNEXPOSED") and "auto" in written.split():
        return False, (f"{where}, and no body that deduces it is in this file; write the return type out: "
                      f"{_FIX}")
    return False, (f"{where}: a return value cannot reach JAX, and its value would be dropped "
                  f"(a status returned this way would be ignored); {_FIX}")
