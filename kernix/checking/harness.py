"""The guarded-call harness: runs one kernix handler on buffers kernix.check allocated.

:func:`load` compiles (once per process, against the running jaxlib's
``xla/ffi/api/c_api.h``) a small library that builds an XLA FFI call frame
around caller-provided buffers and calls a handler as XLA would, with a
minimal ``XLA_FFI_Api`` (errors and the platform stream). The guard bytes
around each buffer are checked by :mod:`kernix.checking.guarded`.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
import threading
from typing import Any, Sequence

from ..backend import toolchain
from ..language.dtypes import DTYPES
from ..errors import KernixError

__all__ = ["Harness", "load", "HARNESS_SOURCE"]

HARNESS_SOURCE = r"""
// kernix.check's guarded call: one XLA FFI handler called on caller-provided buffers.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "xla/ffi/api/c_api.h"

struct XLA_FFI_Error {
  XLA_FFI_Error_Code code;
  std::string message;
};

// The context the harness passes: only the stream.  XLA declares its
// context type opaque (and, in newer versions, as an alias of another
// struct), so the harness keeps its own and casts the pointer.
struct HarnessContext {
  void* stream;
};

namespace {

XLA_FFI_Error* create_error(XLA_FFI_Error_Create_Args* args) {
  return new XLA_FFI_Error{args->errc, args->message ? args->message : ""};
}
void destroy_error(XLA_FFI_Error_Destroy_Args* args) { delete args->error; }
XLA_FFI_Error* get_stream(XLA_FFI_Stream_Get_Args* args) {
  args->stream = args->ctx ? reinterpret_cast<HarnessContext*>(args->ctx)->stream : nullptr;
  return nullptr;
}

// Only what a handler calls: creating (and destroying) an error, and the stream.
XLA_FFI_Api make_api() {
  XLA_FFI_Api api;
  std::memset(static_cast<void*>(&api), 0, sizeof api);
  api.struct_size = XLA_FFI_Api_STRUCT_SIZE;
  api.api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;
  api.api_version.major_version = XLA_FFI_API_MAJOR;
  api.api_version.minor_version = XLA_FFI_API_MINOR;
  api.XLA_FFI_Error_Create = create_error;
  api.XLA_FFI_Error_Destroy = destroy_error;
  api.XLA_FFI_Stream_Get = get_stream;
  return api;
}

const XLA_FFI_Api kApi = make_api();

struct Row {
  const char* name;
  int code;
};
#define KERNIX_ROW(N) {#N, XLA_FFI_DataType_##N},
const Row kTypes[] = {KERNIX_DTYPE_NAMES};
#undef KERNIX_ROW

std::vector<XLA_FFI_Buffer> buffers(int64_t n, const int32_t* dtypes, const int64_t* ranks, int64_t* dims,
                                    void* const* data) {
  std::vector<XLA_FFI_Buffer> out(static_cast<size_t>(n));
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    XLA_FFI_Buffer& b = out[static_cast<size_t>(i)];
    std::memset(static_cast<void*>(&b), 0, sizeof b);
    b.struct_size = XLA_FFI_Buffer_STRUCT_SIZE;
    b.dtype = static_cast<XLA_FFI_DataType>(dtypes[i]);
    b.data = data[i];
    b.rank = ranks[i];
    b.dims = dims + offset;
    offset += ranks[i];
  }
  return out;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int kernix_guarded_dtype(const char* name) {
  for (const Row& row : kTypes) {
    if (std::strcmp(row.name, name) == 0) return row.code;
  }
  return -1;
}

// Calls `handler` once.  Buffers: their XLA dtype codes, ranks, dims (all
// buffers' dims one after the other) and data pointers.  Attributes: sorted
// by name, each a scalar of the given XLA dtype at `attr_values[i]`.
// Returns 0, or the error code of the error the handler returned, its message
// copied into `message`.
extern "C" __attribute__((visibility("default"))) int kernix_guarded_call(
    void* handler, int64_t n_args, const int32_t* arg_dtypes, const int64_t* arg_ranks, int64_t* arg_dims,
    void* const* arg_data, int64_t n_rets, const int32_t* ret_dtypes, const int64_t* ret_ranks, int64_t* ret_dims,
    void* const* ret_data, int64_t n_attrs, const char* const* attr_names, const int32_t* attr_dtypes,
    void* const* attr_values, void* stream, char* message, size_t message_size) {
  std::vector<XLA_FFI_Buffer> args = buffers(n_args, arg_dtypes, arg_ranks, arg_dims, arg_data);
  std::vector<XLA_FFI_Buffer> rets = buffers(n_rets, ret_dtypes, ret_ranks, ret_dims, ret_data);
  std::vector<void*> arg_ptrs, ret_ptrs, attr_ptrs;
  std::vector<XLA_FFI_ArgType> arg_types(static_cast<size_t>(n_args), XLA_FFI_ArgType_BUFFER);
  std::vector<XLA_FFI_RetType> ret_types(static_cast<size_t>(n_rets), XLA_FFI_RetType_BUFFER);
  for (auto& b : args) arg_ptrs.push_back(&b);
  for (auto& b : rets) ret_ptrs.push_back(&b);
  std::vector<XLA_FFI_ByteSpan> spans(static_cast<size_t>(n_attrs));
  std::vector<XLA_FFI_ByteSpan*> names;
  std::vector<XLA_FFI_Scalar> scalars(static_cast<size_t>(n_attrs));
  std::vector<XLA_FFI_AttrType> attr_types(static_cast<size_t>(n_attrs), XLA_FFI_AttrType_SCALAR);
  for (int64_t i = 0; i < n_attrs; ++i) {
    spans[static_cast<size_t>(i)] = XLA_FFI_ByteSpan{attr_names[i], std::strlen(attr_names[i])};
    names.push_back(&spans[static_cast<size_t>(i)]);
    scalars[static_cast<size_t>(i)] = XLA_FFI_Scalar{static_cast<XLA_FFI_DataType>(attr_dtypes[i]), attr_values[i]};
    attr_ptrs.push_back(&scalars[static_cast<size_t>(i)]);
  }
  HarnessContext ctx{stream};
  XLA_FFI_CallFrame frame;
  std::memset(static_cast<void*>(&frame), 0, sizeof frame);
  frame.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;
  frame.api = &kApi;
  frame.ctx = reinterpret_cast<XLA_FFI_ExecutionContext*>(&ctx);
  frame.stage = XLA_FFI_ExecutionStage_EXECUTE;
  frame.args = XLA_FFI_Args{XLA_FFI_Args_STRUCT_SIZE, nullptr, n_args, arg_types.data(), arg_ptrs.data()};
  frame.rets = XLA_FFI_Rets{XLA_FFI_Rets_STRUCT_SIZE, nullptr, n_rets, ret_types.data(), ret_ptrs.data()};
  frame.attrs = XLA_FFI_Attrs{XLA_FFI_Attrs_STRUCT_SIZE, nullptr, n_attrs, attr_types.data(), names.data(),
                              attr_ptrs.data()};
  auto* call = reinterpret_cast<XLA_FFI_Error* (*)(XLA_FFI_CallFrame*)>(handler);
  XLA_FFI_Error* error = call(&frame);
  if (error == nullptr) return 0;
  std::snprintf(message, message_size, "%s", error->message.c_str());
  int code = static_cast<int>(error->code);
  delete error;
  return code ? code : 2;
}
"""

_lock = threading.Lock()
_loaded: Harness | None = None


class Harness:
    """The loaded harness library; ``codes`` maps XLA FFI ``DataType`` names to the running jaxlib's numbers."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self.library = library
        dtype_of = library.kernix_guarded_dtype
        dtype_of.argtypes = [ctypes.c_char_p]
        dtype_of.restype = ctypes.c_int
        self.codes = {d.xla: dtype_of(d.xla.encode()) for d in DTYPES}
        call = library.kernix_guarded_call
        p = ctypes.c_void_p
        i64, i32p, i64p = ctypes.c_int64, ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int64)
        call.argtypes = [p, i64, i32p, i64p, i64p, ctypes.POINTER(p), i64, i32p, i64p, i64p, ctypes.POINTER(p),
                         i64, ctypes.POINTER(ctypes.c_char_p), i32p, ctypes.POINTER(p), p, ctypes.c_char_p,
                         ctypes.c_size_t]
        call.restype = ctypes.c_int
        self._call = call

    def call(
        self, handler: int, args: Sequence[tuple[str, Sequence[int], int]],
        rets: Sequence[tuple[str, Sequence[int], int]], attrs: Sequence[tuple[str, str, int]],
        stream: int | None = None,
    ) -> str | None:
        """Call the handler at address ``handler`` once; the error message it returned, or ``None``.

        ``args``/``rets`` are ``(XLA dtype name, shape, address)``, ``attrs``
        ``(name, XLA dtype name, address of the value)``; ``stream`` ``None`` is the
        default stream.
        """

        def buffers(items: Sequence[tuple[str, Sequence[int], int]]) -> tuple[Any, ...]:
            n = len(items)
            dims = [int(d) for _, shape, _ in items for d in shape]
            return (
                n,
                (ctypes.c_int32 * max(n, 1))(*(self.codes[x] for x, _, _ in items)),
                (ctypes.c_int64 * max(n, 1))(*(len(s) for _, s, _ in items)),
                (ctypes.c_int64 * max(len(dims), 1))(*dims),
                (ctypes.c_void_p * max(n, 1))(*(a for _, _, a in items)),
            )

        ordered = sorted(attrs, key=lambda a: a[0].encode())
        names = (ctypes.c_char_p * max(len(ordered), 1))(*(a[0].encode() for a in ordered))
        codes = (ctypes.c_int32 * max(len(ordered), 1))(*(self.codes[a[1]] for a in ordered))
        values = (ctypes.c_void_p * max(len(ordered), 1))(*(a[2] for a in ordered))
        message = ctypes.create_string_buffer(4096)
        code = self._call(handler, *buffers(args), *buffers(rets), len(ordered), names, codes, values, stream,
                          message, len(message))
        return None if code == 0 else message.value.decode(errors="replace")


def _compile() -> Harness:
    compiler = toolchain.host_compiler_path()
    include = toolchain.jax_ffi_include_dir()
    rows = " ".join(f"KERNIX_ROW({d.xla})" for d in DTYPES)
    with tempfile.TemporaryDirectory(prefix="kernix-check-") as tmp:
        source = os.path.join(tmp, "guarded_call.cc")
        library = os.path.join(tmp, "guarded_call.so")
        with open(source, "w") as f:
            f.write(HARNESS_SOURCE)
        argv = [compiler, f"-std={toolchain.CXX_STANDARD}", "-O1", "-shared", "-fPIC", "-fvisibility=hidden",
                f"-DKERNIX_DTYPE_NAMES={rows}", "-isystem", include, source, "-o", library]
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL,
                              check=False)
        if proc.returncode != 0:
            raise KernixError(
                "kernix.check could not compile its guarded-call harness with "
                f"{compiler} (exit code {proc.returncode}):\n{(proc.stderr or proc.stdout)[-2000:]}"
            )
        return Harness(ctypes.CDLL(library, mode=ctypes.RTLD_LOCAL))  # mapped: the file may go


def load() -> Harness:
    """The harness, compiled on first use in this process; a :class:`KernixError` when it cannot be."""
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = _compile()
        return _loaded
