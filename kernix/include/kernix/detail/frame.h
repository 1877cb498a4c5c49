// kernix/detail/frame.h -- decodes an XLA FFI call frame through the C API alone.
//
// Not part of the public API.  A generated handler of a function that takes
// only BE::Tensor (in place or not), scalar, string and array attributes and
// the stream is one line: it hands the
// call frame, a constant description of the function's parameters and the
// shim to kernix::detail::dispatch.  Everything per function is data, so a
// handler unit costs the compiler this header (XLA's small C header and a few
// hundred lines) plus a table per function, instead of instantiating ffi.h's
// binding templates for each one.
//
// dispatch fills the shim's `void*` array exactly as the ffi.h-based handlers
// (handler.h) do -- a kernix::TensorView* per buffer (the result's, for a
// tensor updated in place), a pointer to a scalar attribute's value, a
// kernix::ArrayView* per string or array attribute, the state object, a
// kernix::ThreadPoolView*, a pointer to the stream handle -- so shims do not
// know which kind of handler called them.
#pragma once

#include <cstdint>
#include <cstring>

// Relative to this file: a user's header named kernix/... cannot shadow it.
#include "messages.h"
#include "run_shim.h"
#include "state.h"
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
  kInOut = 4,   // an operand and the result XLA aliases to it (a tensor updated in place)
  kString = 5,  // a string attribute, found by name
  kArray = 6,   // an array attribute, found by name
  kScratch = 7,    // scratch memory: a result buffer XLA allocates, of any type and rank
  kState = 8,      // the function's state (a StateBox made by its instantiate handler)
  kThreads = 9,    // XLA's intra-op thread pool
  kNoThreads = 10, // a pool of no threads (CUDA functions run on the thread that launches them)
};

// One parameter, in the order of the C++ signature (the shim's array order).
struct ParamDesc {
  Role role;
  // Buffers: the rank to require, or -1 for any.
  int32_t rank;
  // Buffers: the XLA_FFI_DataType to require, or XLA_FFI_DataType_INVALID for
  // any.  Attributes: the XLA_FFI_DataType the scalar (the array's elements)
  // must have; INVALID for a string.
  int32_t dtype;
  // Attributes: the name and where it sits in XLA's name-sorted attribute
  // list (computed when the handler is generated; checked on every call, and
  // searched for by name if it is not there).  A tensor updated in place: its
  // name, for messages (attr_index -1).
  const char* name;
  uint32_t name_len;
  int32_t attr_index;
};

// One function.
struct FunctionDesc {
  const char* name;  // the exported name, for messages
  const ParamDesc* params;
  int32_t n_params;
  int32_t n_args;  // operands (a tensor updated in place is one, and a result)
  int32_t n_rets;
  int32_t n_attrs;
  bool platform_stream;  // ask XLA for the stream (CUDA); else pass nullptr
  bool command_buffer;   // declare the handler command-buffer (CUDA graph) compatible
};

// Whether `a` is the name of attribute `p`.  Compared byte by byte here: the
// names are short, and std::memcmp is a call into the C library on every call
// of the handler (XLA's ffi.h compares its attribute names the same way).
inline bool same_name(const XLA_FFI_ByteSpan* a, const ParamDesc& p) noexcept {
  if (a->len != p.name_len) return false;
  for (size_t i = 0; i < a->len; ++i) {
    if (a->ptr[i] != p.name[i]) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------
// Cold paths: building an error message.  Out of line, so that the execute
// path stays a short straight loop, and compiled without optimization (as
// messages.cc is).
// ---------------------------------------------------------------------------
KERNIX_FAILURE_CODE_BEGIN

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

KERNIX_COLD inline void destroy_error(const XLA_FFI_Api* api, XLA_FFI_Error* error) noexcept {
  XLA_FFI_Error_Destroy_Args args;
  args.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
  args.extension_start = nullptr;
  args.error = error;
  api->XLA_FFI_Error_Destroy(&args);
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

// A buffer operand (`is_arg`) or result that is not what the signature says.
KERNIX_COLD inline XLA_FFI_Error* buffer_error(const XLA_FFI_Api* api, const FunctionDesc& fn, const ParamDesc& p,
                                               bool is_arg, int32_t position, const XLA_FFI_Buffer* buffer) noexcept {
  Message m;
  start(m, fn).add(is_arg ? "operand " : "result ").add_int(position);
  if (buffer == nullptr) {
    m.add(" is not a buffer");
  } else if (p.dtype != XLA_FFI_DataType_INVALID && buffer->dtype != p.dtype) {
    add_xla_type(add_xla_type(m.add(" has element type "), buffer->dtype).add(", expected "), p.dtype);
  } else {
    m.add(" has rank ").add_int(buffer->rank).add(", expected ").add_int(p.rank);
  }
  return make_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, m);
}

// "a scalar", "an array", ...: what kind of attribute XLA passed.
KERNIX_COLD inline const char* attr_kind(XLA_FFI_AttrType type) noexcept {
  switch (type) {
    case XLA_FFI_AttrType_ARRAY: return "an array";
    case XLA_FFI_AttrType_DICTIONARY: return "a dictionary";
    case XLA_FFI_AttrType_SCALAR: return "a scalar";
    case XLA_FFI_AttrType_STRING: return "a string";
    default: return "an attribute of unknown kind";
  }
}

// Attribute `p` is missing, not of its kind (scalar, string, array) or of
// another element type.
KERNIX_COLD inline XLA_FFI_Error* attr_error(const XLA_FFI_Api* api, const FunctionDesc& fn, const ParamDesc& p,
                                             XLA_FFI_AttrType type, const void* attr) noexcept {
  Message m;
  start(m, fn).add("attribute '").add(p.name, p.name_len).add("'");
  const XLA_FFI_AttrType want = p.role == Role::kString  ? XLA_FFI_AttrType_STRING
                                : p.role == Role::kArray ? XLA_FFI_AttrType_ARRAY
                                                         : XLA_FFI_AttrType_SCALAR;
  if (attr == nullptr) {
    m.add(" is missing");
  } else if (type != want && want == XLA_FFI_AttrType_SCALAR) {
    m.add(" is not a scalar");
  } else if (type != want) {
    m.add(" is ").add(attr_kind(type)).add(", expected ").add(attr_kind(want));
    if (want == XLA_FFI_AttrType_ARRAY) add_xla_type(m.add(" of "), p.dtype);
  } else if (want == XLA_FFI_AttrType_ARRAY) {
    int32_t got = static_cast<const XLA_FFI_Array*>(attr)->dtype;
    add_xla_type(add_xla_type(m.add(" is an array of "), got).add(", expected an array of "), p.dtype);
    m.add(": pass np.asarray(value, ").add_numpy_scalar(static_cast<DType>(p.dtype)).add(")");
  } else {
    int32_t got = static_cast<const XLA_FFI_Scalar*>(attr)->dtype;
    add_xla_type(add_xla_type(m.add(" has type "), got).add(", expected "), p.dtype);
    // A Python float arrives as F64 and a Python int as S64: name the NumPy scalar that arrives as expected.
    m.add(": pass ").add_numpy_scalar(static_cast<DType>(p.dtype)).add("(value)");
  }
  return make_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, m);
}

// The operand and the result of in-place parameter `p` are two buffers: the
// function would read the result's memory, which holds no input (the ffi.h
// handlers' check_aliased says the same, with the same code).
KERNIX_COLD inline XLA_FFI_Error* alias_error(const XLA_FFI_Api* api, const FunctionDesc& fn,
                                              const ParamDesc& p) noexcept {
  Message m;
  start(m, fn).add("the operand and the result of in-place parameter '").add(p.name, p.name_len)
      .add("' are different buffers (XLA did not alias them)");
  return make_error(api, XLA_FFI_Error_Code_INTERNAL, m);
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

// The attribute named like `p` anywhere in the frame, or -1 (when it is not
// where the sorted order puts it).
KERNIX_COLD inline int64_t find_attr(const XLA_FFI_Attrs& attrs, const ParamDesc& p) noexcept {
  for (int64_t k = 0; k < attrs.size; ++k) {
    if (same_name(attrs.names[k], p)) return k;
  }
  return -1;
}

inline bool is_attr(Role role) noexcept {
  return role == Role::kAttr || role == Role::kString || role == Role::kArray;
}

// Attributes of another number than `fn` takes: the count, then the names it
// lacks and those it does not take.
KERNIX_COLD inline XLA_FFI_Error* attr_count_error(const XLA_FFI_Api* api, const FunctionDesc& fn,
                                                   const XLA_FFI_Attrs& attrs) noexcept {
  Message m;
  start(m, fn).add("wrong number of attributes: expected ").add_int(fn.n_attrs).add(" but got ").add_int(attrs.size);
  const char* sep = ": missing ";
  for (int32_t i = 0; i < fn.n_params; ++i) {
    const ParamDesc& p = fn.params[i];
    if (!is_attr(p.role) || find_attr(attrs, p) >= 0) continue;
    m.add(sep).add("'").add(p.name, p.name_len).add("'");
    sep = ", ";
  }
  sep = sep[0] == ',' ? "; unexpected " : ": unexpected ";
  for (int64_t k = 0; k < attrs.size; ++k) {
    bool taken = false;
    for (int32_t i = 0; i < fn.n_params && !taken; ++i) {
      taken = is_attr(fn.params[i].role) && same_name(attrs.names[k], fn.params[i]);
    }
    if (taken) continue;
    m.add(sep).add("'").add(attrs.names[k]->ptr, attrs.names[k]->len).add("'");
    sep = ", ";
  }
  return make_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, m);
}

KERNIX_FAILURE_CODE_END

// ---------------------------------------------------------------------------
// The execute path.
// ---------------------------------------------------------------------------

// XLA's intra-op thread pool, as the C API reaches it (ffi.h's ThreadPool):
// valid during the call.
struct PoolContext {
  const XLA_FFI_Api* api;
  XLA_FFI_ExecutionContext* ctx;
};

// The pool's number of threads; 0 where XLA has none (as ffi.h, an error is
// not one).
inline int64_t pool_threads(const PoolContext& pool) noexcept {
  int64_t threads = 0;
  XLA_FFI_ThreadPool_NumThreads_Args args;
  args.struct_size = XLA_FFI_ThreadPool_NumThreads_Args_STRUCT_SIZE;
  args.extension_start = nullptr;
  args.ctx = pool.ctx;
  args.num_threads = &threads;
  if (XLA_FFI_Error* err = pool.api->XLA_FFI_ThreadPool_NumThreads(&args)) destroy_error(pool.api, err);
  return threads;
}

// Runs task(data) on one of the pool's threads, or at once on this one when
// XLA cannot schedule it (as ffi.h's ThreadPool::Schedule does).
inline void schedule_on_pool(void* context, void (*task)(void*), void* data) {
  const PoolContext& pool = *static_cast<const PoolContext*>(context);
  XLA_FFI_ThreadPool_Schedule_Args args;
  args.struct_size = XLA_FFI_ThreadPool_Schedule_Args_STRUCT_SIZE;
  args.extension_start = nullptr;
  args.ctx = pool.ctx;
  args.task = task;
  args.data = data;
  if (XLA_FFI_Error* err = pool.api->XLA_FFI_ThreadPool_Schedule(&args)) {
    destroy_error(pool.api, err);
    task(data);
  }
}

// Operand (`is_arg`) or result `position` into `*out` if it is a buffer of
// the element type and rank `p` asks for; else the error saying what it is.
__attribute__((always_inline)) inline XLA_FFI_Error* take_buffer(const XLA_FFI_CallFrame* frame, const FunctionDesc& fn,
                                                                 const ParamDesc& p, bool is_arg, int32_t position,
                                                                 const XLA_FFI_Buffer** out) noexcept {
  const bool is_buffer = is_arg ? frame->args.types[position] == XLA_FFI_ArgType_BUFFER
                                : frame->rets.types[position] == XLA_FFI_RetType_BUFFER;
  if (__builtin_expect(!is_buffer, 0)) return buffer_error(frame->api, fn, p, is_arg, position, nullptr);
  const XLA_FFI_Buffer* b =
      static_cast<const XLA_FFI_Buffer*>(is_arg ? frame->args.args[position] : frame->rets.rets[position]);
  if (__builtin_expect(
          (p.dtype != XLA_FFI_DataType_INVALID && b->dtype != p.dtype) || (p.rank >= 0 && b->rank != p.rank), 0)) {
    return buffer_error(frame->api, fn, p, is_arg, position, b);
  }
  *out = b;
  return nullptr;
}

// Whether `b` holds no bytes (ffi.h's size_bytes() == 0): no elements, or a
// type of no width.
inline bool holds_no_bytes(const XLA_FFI_Buffer* b) noexcept {
  if (b->dtype == XLA_FFI_DataType_INVALID || b->dtype == XLA_FFI_DataType_TOKEN) return true;
  for (int64_t d = 0; d < b->rank; ++d) {
    if (b->dims[d] == 0) return true;
  }
  return false;
}

// Decodes `frame` as `fn` describes, calls `shim` and returns what it threw,
// if anything (a failure the function returned included), as an FFI error.
// The handler passes the storage, sized for its function on its own stack:
// `slots` (one per parameter: the shim's array), `views` (one per tensor) and
// `arrays` (one per string or array attribute; nullptr if none).  Compiled
// once per handler unit (noinline): every handler of the unit shares it.
__attribute__((noinline)) inline XLA_FFI_Error* dispatch(XLA_FFI_CallFrame* frame, const FunctionDesc& fn,
                                                         ShimFn shim, void** slots, TensorView* views,
                                                         ArrayView* arrays = nullptr) noexcept {
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
    return attr_count_error(api, fn, frame->attrs);
  }

  void* stream = nullptr;
  PoolContext pool;             // what a kThreads parameter's view points to
  ThreadPoolView pool_view;     // what a kThreads or kNoThreads parameter's slot points to
  int32_t n_arg = 0;
  int32_t n_ret = 0;
  int32_t n_view = 0;
  int32_t n_array = 0;
  int32_t unaliased = -1;  // the first in-place parameter whose operand and result differ
  for (int32_t i = 0; i < fn.n_params; ++i) {
    const ParamDesc& p = fn.params[i];
    switch (p.role) {
      case Role::kArg:
      case Role::kRet:
      case Role::kInOut:
      case Role::kScratch: {
        // In place: the operand, then the result, which the shim gets.
        const XLA_FFI_Buffer* operand = nullptr;
        const XLA_FFI_Buffer* b = nullptr;
        if (p.role == Role::kArg || p.role == Role::kInOut) {
          if (XLA_FFI_Error* err = take_buffer(frame, fn, p, true, n_arg++, &operand)) return err;
          b = operand;
        }
        if (p.role != Role::kArg) {
          if (XLA_FFI_Error* err = take_buffer(frame, fn, p, false, n_ret++, &b)) return err;
        }
        if (__builtin_expect(p.role == Role::kInOut && operand->data != b->data, 0) && unaliased < 0 &&
            !holds_no_bytes(operand)) {
          unaliased = i;
        }
        TensorView* view = &views[n_view++];
        *view = TensorView{b->data, static_cast<int32_t>(b->dtype), b->rank, b->dims};
        slots[i] = view;
        break;
      }
      case Role::kAttr:
      case Role::kString:
      case Role::kArray: {
        int64_t k = p.attr_index;
        if (__builtin_expect(k >= frame->attrs.size || !same_name(frame->attrs.names[k], p), 0)) {
          k = find_attr(frame->attrs, p);
          if (k < 0) return attr_error(api, fn, p, XLA_FFI_AttrType_SCALAR, nullptr);
        }
        const XLA_FFI_AttrType type = frame->attrs.types[k];
        const void* attr = frame->attrs.attrs[k];
        if (p.role == Role::kAttr) {
          const XLA_FFI_Scalar* scalar = static_cast<const XLA_FFI_Scalar*>(attr);
          if (__builtin_expect(type != XLA_FFI_AttrType_SCALAR || scalar->dtype != p.dtype, 0)) {
            return attr_error(api, fn, p, type, attr);
          }
          // The value in XLA's own storage, of exactly the attribute's C type.
          slots[i] = scalar->value;
          break;
        }
        // A string or an array: its elements in XLA's storage.
        ArrayView* view = &arrays[n_array++];
        if (p.role == Role::kString) {
          if (__builtin_expect(type != XLA_FFI_AttrType_STRING, 0)) return attr_error(api, fn, p, type, attr);
          const XLA_FFI_ByteSpan* text = static_cast<const XLA_FFI_ByteSpan*>(attr);
          *view = ArrayView{text->ptr, static_cast<int64_t>(text->len)};
        } else {
          const XLA_FFI_Array* array = static_cast<const XLA_FFI_Array*>(attr);
          if (__builtin_expect(type != XLA_FFI_AttrType_ARRAY || array->dtype != p.dtype, 0)) {
            return attr_error(api, fn, p, type, attr);
          }
          *view = ArrayView{array->data, static_cast<int64_t>(array->size)};
        }
        slots[i] = view;
        break;
      }
      case Role::kStream:
        slots[i] = &stream;
        break;
      case Role::kState: {
        // As ffi.h's State<StateBox> finds it: made at the instantiate stage.
        XLA_FFI_State_Get_Args args;
        args.struct_size = XLA_FFI_State_Get_Args_STRUCT_SIZE;
        args.extension_start = nullptr;
        args.ctx = frame->ctx;
        args.stage = XLA_FFI_ExecutionStage_INSTANTIATE;
        args.type_id = &StateBox::id;
        args.state = nullptr;
        if (XLA_FFI_Error* err = api->XLA_FFI_State_Get(&args)) return err;
        slots[i] = static_cast<StateBox*>(args.state)->object;
        break;
      }
      case Role::kThreads:
        pool = PoolContext{api, frame->ctx};
        pool_view = ThreadPoolView{&pool, pool_threads(pool), &schedule_on_pool};
        slots[i] = &pool_view;
        break;
      case Role::kNoThreads:
        pool_view = ThreadPoolView{nullptr, 0, nullptr};
        slots[i] = &pool_view;
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
  // As ffi.h's handlers check it: once every parameter is decoded.
  if (__builtin_expect(unaliased >= 0, 0)) return alias_error(api, fn, fn.params[unaliased]);
  int code = kErrorInternal;
  if (const char* message = run_shim(shim, slots, &code)) return shim_error(api, fn, message, code);
  return nullptr;
}

}  // namespace detail
}  // namespace kernix
