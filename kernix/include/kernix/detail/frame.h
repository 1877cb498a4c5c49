// kernix/detail/frame.h -- decodes an XLA FFI call frame through the C API alone.
//
// Not part of the public API.  A generated handler of a function that takes
// only BE::Tensor, scalar attributes and the stream is one line: it hands the
// call frame, a constant description of the function's parameters and the
// shim to kernix::detail::dispatch.  Everything per function is data, so a
// handler unit costs the compiler this header (XLA's small C header and a few
// hundred lines) plus a table per function, instead of instantiating ffi.h's
// binding templates for each one.
//
// dispatch fills the shim's `void*` array exactly as the ffi.h-based handlers
// (handler.h) do -- a kernix::TensorView* per buffer, a pointer to the
// attribute's value, a pointer to the stream handle -- so shims do not know
// which kind of handler called them.
#pragma once

#include <cstdint>
#include <cstring>

// Relative to this file: a user's header named kernix/... cannot shadow it.
#include "messages.h"
#include "run_shim.h"
#include "tensor_view.h"
#include "xla/ffi/api/c_api.h"

// Handlers are the library's only exported symbols (everything else is compiled
// with -fvisibility=hidden).
#ifndef KERNIX_HANDLER_EXPORT
#define KERNIX_HANDLER_EXPORT extern "C" __attribute__((visibility("default")))
#endif

namespace kernix {
namespace detail {

// What a parameter is on the XLA side.
enum class Role : uint8_t {
  kArg = 0,     // an operand buffer
  kRet = 1,     // a result buffer
  kAttr = 2,    // a scalar attribute, found by name
  kStream = 3,  // the platform stream (nullptr for C++ functions)
};

// One parameter, in the order of the C++ signature (the shim's array order).
struct ParamDesc {
  Role role;
  // Buffers: the rank to require, or -1 for any.
  int32_t rank;
  // Buffers: the XLA_FFI_DataType to require, or XLA_FFI_DataType_INVALID for
  // any.  Attributes: the XLA_FFI_DataType the scalar must have.
  int32_t dtype;
  // Attributes: the name and where it sits in XLA's name-sorted attribute
  // list (computed when the handler is generated; checked on every call, and
  // searched for by name if it is not there).
  const char* name;
  uint32_t name_len;
  int32_t attr_index;
};

// One function.
struct FunctionDesc {
  const char* name;  // the exported name, for messages
  const ParamDesc* params;
  int32_t n_params;
  int32_t n_args;
  int32_t n_rets;
  int32_t n_attrs;
  bool platform_stream;  // ask XLA for the stream (CUDA); else pass nullptr
  bool command_buffer;   // declare the handler command-buffer (CUDA graph) compatible
};

// ---------------------------------------------------------------------------
// Cold paths: building an error message.  Out of line, so that the execute
// path stays a short straight loop.
// ---------------------------------------------------------------------------

// The XLA name of a data type ("F32"), as kernix.dtypes spells it.
KERNIX_COLD inline const char* xla_type_name(int32_t dtype) noexcept {
  switch (dtype) {
    case XLA_FFI_DataType_PRED: return "PRED";
    case XLA_FFI_DataType_S8: return "S8";
    case XLA_FFI_DataType_S16: return "S16";
    case XLA_FFI_DataType_S32: return "S32";
    case XLA_FFI_DataType_S64: return "S64";
    case XLA_FFI_DataType_U8: return "U8";
    case XLA_FFI_DataType_U16: return "U16";
    case XLA_FFI_DataType_U32: return "U32";
    case XLA_FFI_DataType_U64: return "U64";
    case XLA_FFI_DataType_F16: return "F16";
    case XLA_FFI_DataType_BF16: return "BF16";
    case XLA_FFI_DataType_F32: return "F32";
    case XLA_FFI_DataType_F64: return "F64";
    case XLA_FFI_DataType_C64: return "C64";
    case XLA_FFI_DataType_C128: return "C128";
    case XLA_FFI_DataType_F8E5M2: return "F8E5M2";
    case XLA_FFI_DataType_F8E4M3FN: return "F8E4M3FN";
    default: return nullptr;
  }
}

KERNIX_COLD inline Message& add_xla_type(Message& m, int32_t dtype) noexcept {
  if (const char* name = xla_type_name(dtype)) return m.add(name);
  return m.add("data type ").add_int(dtype);
}

KERNIX_COLD inline XLA_FFI_Error* make_error(const XLA_FFI_Api* api, XLA_FFI_Error_Code code,
                                             const Message& m) noexcept {
  XLA_FFI_Error_Create_Args args;
  args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  args.extension_start = nullptr;
  args.message = m.c_str();  // XLA copies the text
  args.errc = code;
  return api->XLA_FFI_Error_Create(&args);
}

// "kernix: <function>: " -- every message names the function.
KERNIX_COLD inline Message& start(Message& m, const FunctionDesc& fn) noexcept {
  return m.add("kernix: ").add(fn.name).add(": ");
}

// The shim's error, with the text and code the ffi.h handlers give it.
KERNIX_COLD inline XLA_FFI_Error* shim_error(const XLA_FFI_Api* api, const FunctionDesc& fn,
                                             const char* message, int code) noexcept {
  Message m;
  start(m, fn).add(message);
  return make_error(api, static_cast<XLA_FFI_Error_Code>(code), m);
}

KERNIX_COLD inline XLA_FFI_Error* count_error(const XLA_FFI_Api* api, const FunctionDesc& fn, const char* what,
                                              int64_t expected, int64_t got) noexcept {
  Message m;
  start(m, fn).add("wrong number of ").add(what).add(": expected ").add_int(expected).add(" but got ").add_int(got);
  return make_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, m);
}

KERNIX_COLD inline XLA_FFI_Error* frame_error(const XLA_FFI_Api* api, const FunctionDesc& fn, const char* what,
                                              int64_t expected, int64_t got) noexcept {
  Message m;
  start(m, fn).add(what).add(": expected ").add_int(expected).add(" got ").add_int(got);
  return make_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, m);
}

// A buffer operand or result that is not what the signature says.
KERNIX_COLD inline XLA_FFI_Error* buffer_error(const XLA_FFI_Api* api, const FunctionDesc& fn, const ParamDesc& p,
                                               int32_t position, const XLA_FFI_Buffer* buffer) noexcept {
  Message m;
  start(m, fn).add(p.role == Role::kArg ? "operand " : "result ").add_int(position);
  if (buffer == nullptr) {
    m.add(" is not a buffer");
  } else if (p.dtype != XLA_FFI_DataType_INVALID && buffer->dtype != p.dtype) {
    add_xla_type(add_xla_type(m.add(" has element type "), buffer->dtype).add(", expected "), p.dtype);
  } else {
    m.add(" has rank ").add_int(buffer->rank).add(", expected ").add_int(p.rank);
  }
  return make_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, m);
}

// Attribute `p` is missing or not a scalar of the expected type.
KERNIX_COLD inline XLA_FFI_Error* attr_error(const XLA_FFI_Api* api, const FunctionDesc& fn, const ParamDesc& p,
                                             XLA_FFI_AttrType type, const void* attr) noexcept {
  Message m;
  start(m, fn).add("attribute '").add(p.name, p.name_len).add("'");
  if (attr == nullptr) {
    m.add(" is missing");
  } else if (type != XLA_FFI_AttrType_SCALAR) {
    m.add(" is not a scalar");
  } else {
    int32_t got = static_cast<const XLA_FFI_Scalar*>(attr)->dtype;
    add_xla_type(add_xla_type(m.add(" has type "), got).add(", expected "), p.dtype);
    // A Python float arrives as F64 and a Python int as S64: name the NumPy scalar that arrives as expected.
    m.add(": pass ").add_numpy_scalar(static_cast<DType>(p.dtype)).add("(value)");
  }
  return make_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, m);
}

KERNIX_COLD inline XLA_FFI_Error* stage_error(const XLA_FFI_Api* api, const FunctionDesc& fn,
                                              int64_t stage) noexcept {
  Message m;
  start(m, fn).add("wrong execution stage: expected ").add_int(XLA_FFI_ExecutionStage_EXECUTE).add(" but got ")
      .add_int(stage);
  return make_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, m);
}

// The metadata query XLA sends when the handler is registered: the FFI
// version the handler was compiled against and its traits (as ffi.h's
// Handler::PopulateMetadata answers it).
KERNIX_COLD inline XLA_FFI_Error* metadata(const XLA_FFI_Api* api, const FunctionDesc& fn,
                                           XLA_FFI_Metadata_Extension* extension) noexcept {
  if (extension->extension_base.struct_size < XLA_FFI_Metadata_Extension_STRUCT_SIZE) {
    return frame_error(api, fn, "unexpected XLA_FFI_Metadata_Extension size",
                       XLA_FFI_Metadata_Extension_STRUCT_SIZE, extension->extension_base.struct_size);
  }
  if (extension->metadata->struct_size < XLA_FFI_Metadata_STRUCT_SIZE) {
    return frame_error(api, fn, "unexpected XLA_FFI_Metadata size", XLA_FFI_Metadata_STRUCT_SIZE,
                       extension->metadata->struct_size);
  }
  extension->metadata->api_version = XLA_FFI_Api_Version{
      XLA_FFI_Api_Version_STRUCT_SIZE,
      /*extension_start=*/nullptr,
      XLA_FFI_API_MAJOR,
      XLA_FFI_API_MINOR,
  };
  extension->metadata->traits = fn.command_buffer ? XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE : 0;
  // No handler state (what ffi.h writes for a stateless handler); the field
  // lies past the struct's versioned size, so write it only where the caller's
  // struct has it.
  constexpr size_t kStateEnd =
      __builtin_offsetof(XLA_FFI_Metadata, state_type_id) + sizeof(XLA_FFI_TypeId);
  if (extension->metadata->struct_size >= kStateEnd) {
    extension->metadata->state_type_id = XLA_FFI_UNKNOWN_TYPE_ID;
  }
  return nullptr;
}

inline bool same_name(const XLA_FFI_ByteSpan* a, const ParamDesc& p) noexcept {
  return a->len == p.name_len && std::memcmp(a->ptr, p.name, p.name_len) == 0;
}

// The attribute named like `p` anywhere in the frame, or -1 (when it is not
// where the sorted order puts it).
KERNIX_COLD inline int64_t find_attr(const XLA_FFI_Attrs& attrs, const ParamDesc& p) noexcept {
  for (int64_t k = 0; k < attrs.size; ++k) {
    if (same_name(attrs.names[k], p)) return k;
  }
  return -1;
}

// ---------------------------------------------------------------------------
// The execute path.
// ---------------------------------------------------------------------------

// Decodes `frame` as `fn` describes, calls `shim` and returns what it threw,
// if anything (a failure the function returned included), as an FFI error.  The handler passes the storage, sized for its
// function on its own stack: `slots` (one per parameter: the shim's array)
// and `views` (one per buffer).  Compiled once per handler unit (noinline):
// every handler of the unit shares it.
__attribute__((noinline)) inline XLA_FFI_Error* dispatch(XLA_FFI_CallFrame* frame, const FunctionDesc& fn,
                                                         ShimFn shim, void** slots, TensorView* views) noexcept {
  const XLA_FFI_Api* api = frame->api;
  // Same checks, in the same order, as an ffi.h handler.
  if (__builtin_expect(frame->struct_size != XLA_FFI_CallFrame_STRUCT_SIZE, 0)) {
    return frame_error(api, fn, "unexpected XLA_FFI_CallFrame size (check installed software versions)",
                       XLA_FFI_CallFrame_STRUCT_SIZE, frame->struct_size);
  }
  if (__builtin_expect(frame->extension_start != nullptr &&
                           frame->extension_start->type == XLA_FFI_Extension_Metadata,
                       0)) {
    return metadata(api, fn, reinterpret_cast<XLA_FFI_Metadata_Extension*>(frame->extension_start));
  }
  if (__builtin_expect(frame->stage != XLA_FFI_ExecutionStage_EXECUTE, 0)) {
    return stage_error(api, fn, frame->stage);
  }
  if (__builtin_expect(frame->args.size != fn.n_args, 0)) {
    return count_error(api, fn, "operands", fn.n_args, frame->args.size);
  }
  if (__builtin_expect(frame->rets.size != fn.n_rets, 0)) {
    return count_error(api, fn, "results", fn.n_rets, frame->rets.size);
  }
  // Like ffi.h: extra attributes are an error only when some are expected.
  if (__builtin_expect(fn.n_attrs > 0 && frame->attrs.size != fn.n_attrs, 0)) {
    return count_error(api, fn, "attributes", fn.n_attrs, frame->attrs.size);
  }

  void* stream = nullptr;
  int32_t n_arg = 0;
  int32_t n_ret = 0;
  for (int32_t i = 0; i < fn.n_params; ++i) {
    const ParamDesc& p = fn.params[i];
    switch (p.role) {
      case Role::kArg:
      case Role::kRet: {
        const bool is_arg = p.role == Role::kArg;
        const int32_t position = is_arg ? n_arg++ : n_ret++;
        const bool is_buffer = is_arg ? frame->args.types[position] == XLA_FFI_ArgType_BUFFER
                                      : frame->rets.types[position] == XLA_FFI_RetType_BUFFER;
        if (__builtin_expect(!is_buffer, 0)) return buffer_error(api, fn, p, position, nullptr);
        const XLA_FFI_Buffer* b =
            static_cast<const XLA_FFI_Buffer*>(is_arg ? frame->args.args[position] : frame->rets.rets[position]);
        if (__builtin_expect((p.dtype != XLA_FFI_DataType_INVALID && b->dtype != p.dtype) ||
                                 (p.rank >= 0 && b->rank != p.rank),
                             0)) {
          return buffer_error(api, fn, p, position, b);
        }
        TensorView* view = &views[n_arg + n_ret - 1];
        *view = TensorView{b->data, static_cast<int32_t>(b->dtype), b->rank, b->dims};
        slots[i] = view;
        break;
      }
      case Role::kAttr: {
        int64_t k = p.attr_index;
        if (__builtin_expect(k >= frame->attrs.size || !same_name(frame->attrs.names[k], p), 0)) {
          k = find_attr(frame->attrs, p);
          if (k < 0) return attr_error(api, fn, p, XLA_FFI_AttrType_SCALAR, nullptr);
        }
        const XLA_FFI_Scalar* scalar = static_cast<const XLA_FFI_Scalar*>(frame->attrs.attrs[k]);
        if (__builtin_expect(frame->attrs.types[k] != XLA_FFI_AttrType_SCALAR || scalar->dtype != p.dtype, 0)) {
          return attr_error(api, fn, p, frame->attrs.types[k], scalar);
        }
        // The value in XLA's own storage, of exactly the attribute's C type.
        slots[i] = scalar->value;
        break;
      }
      case Role::kStream:
        slots[i] = &stream;
        break;
    }
  }
  if (fn.platform_stream) {
    XLA_FFI_Stream_Get_Args args;
    args.struct_size = XLA_FFI_Stream_Get_Args_STRUCT_SIZE;
    args.extension_start = nullptr;
    args.ctx = frame->ctx;
    args.stream = nullptr;
    // XLA's own error (the C API of every jaxlib version can pass it on, not read it).
    if (XLA_FFI_Error* err = api->XLA_FFI_Stream_Get(&args)) return err;
    stream = args.stream;
  }
  int code = kErrorInternal;
  if (const char* message = run_shim(shim, slots, &code)) return shim_error(api, fn, message, code);
  return nullptr;
}

}  // namespace detail
}  // namespace kernix
