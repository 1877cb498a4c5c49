// kernix/detail/state.h -- the per-instance state of a function (BE::State<T>).
//
// Not part of the public API.  XLA calls a stateful handler's instantiate
// stage once per instance of the call (once per compiled executable and
// device), keeps what it returns, passes it to every execution of that
// instance, and destroys it with the executable.  kernix's instantiate
// handler asks the shim (compiled with the user's code, which knows T) for a
// new T and keeps it in a StateBox, the one state type of a library, which
// also knows how to delete it.
//
// The instantiate handler is written against XLA's C API: ffi.h's would
// declare the state type in the handler's metadata, and XLA refuses such a
// handler when the type is not registered yet -- which it is not, when the
// handler is registered before JAX's backend starts (registrations are then
// queued, and types are registered after handlers).
#pragma once

#include <cstddef>
#include <cstdio>

// Relative to this file: a user's header named kernix/... cannot shadow it.
#include "run_shim.h"
#include "xla/ffi/api/c_api.h"

#ifndef KERNIX_HANDLER_EXPORT
#define KERNIX_HANDLER_EXPORT extern "C" __attribute__((visibility("default")))
#endif

namespace kernix {
namespace detail {

// One function's state: the user's object and how to delete it.
struct StateBox {
  // The library's state type, registered with XLA by kernix before any call
  // (jax.ffi.register_ffi_type): one object in the library (an inline variable).
  static inline XLA_FFI_TypeId id{0};

  void* object;
  void (*destroy)(void*) noexcept;

  ~StateBox() { destroy(object); }
};

inline void delete_box(void* box) { delete static_cast<StateBox*>(box); }

// What kernix registers the type with: its deleter is how XLA destroys a state
// (an inline variable: one object in the library).
inline XLA_FFI_TypeInfo state_type_info = {XLA_FFI_TypeInfo_STRUCT_SIZE, nullptr, &delete_box};

// The shim's functions: a new T (may throw), and its deletion.
using NewStateFn = void* (*)();
using DeleteStateFn = void (*)(void*) noexcept;

__attribute__((cold, noinline)) inline XLA_FFI_Error* state_error(const XLA_FFI_Api* api, const char* function,
                                                                  const char* what, int code) noexcept {
  char text[4200];
  std::snprintf(text, sizeof text, "kernix: %s: creating its state: %s", function, what);
  XLA_FFI_Error_Create_Args args;
  args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  args.extension_start = nullptr;
  args.message = text;
  args.errc = static_cast<XLA_FFI_Error_Code>(code);
  return api->XLA_FFI_Error_Create(&args);
}

// Calls `make` (through a shim-like function, so what it throws is caught).
struct MakeCall {
  NewStateFn make;
  void* made;
};
inline void call_make(void* const* slots) {
  MakeCall* call = static_cast<MakeCall*>(slots[0]);
  call->made = call->make();
}

// The instantiate handler of a stateful function.
inline XLA_FFI_Error* instantiate(XLA_FFI_CallFrame* frame, NewStateFn make, DeleteStateFn destroy,
                                  const char* function) noexcept {
  const XLA_FFI_Api* api = frame->api;
  if (frame->extension_start != nullptr && frame->extension_start->type == XLA_FFI_Extension_Metadata) {
    // The handler's FFI version, no traits, and no declared state type (see above).
    auto* extension = reinterpret_cast<XLA_FFI_Metadata_Extension*>(frame->extension_start);
    extension->metadata->api_version =
        XLA_FFI_Api_Version{XLA_FFI_Api_Version_STRUCT_SIZE, nullptr, XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR};
    extension->metadata->traits = 0;
    constexpr size_t kStateEnd = __builtin_offsetof(XLA_FFI_Metadata, state_type_id) + sizeof(XLA_FFI_TypeId);
    if (extension->metadata->struct_size >= kStateEnd) {
      extension->metadata->state_type_id = XLA_FFI_TypeId{0};
    }
    return nullptr;
  }
  if (frame->stage != XLA_FFI_ExecutionStage_INSTANTIATE) return nullptr;
  if (StateBox::id.type_id == 0) {
    return state_error(api, function, "its state type is not registered with XLA (kernix registers it with "
                       "the function; register the module before compiling a call)", 13);
  }
  MakeCall call{make, nullptr};
  void* slots[1] = {&call};
  int code = kErrorInternal;
  if (const char* message = run_shim(&call_make, slots, &code)) return state_error(api, function, message, code);
  StateBox* box;
  try {
    box = new StateBox{call.made, destroy};
  } catch (...) {
    destroy(call.made);
    return state_error(api, function, "out of memory", 8);  // RESOURCE_EXHAUSTED
  }
  XLA_FFI_State_Set_Args args;
  args.struct_size = XLA_FFI_State_Set_Args_STRUCT_SIZE;
  args.extension_start = nullptr;
  args.ctx = frame->ctx;
  args.type_id = &StateBox::id;
  args.state = box;
  args.stage = XLA_FFI_ExecutionStage_INSTANTIATE;
  XLA_FFI_Error* error = api->XLA_FFI_State_Set(&args);
  if (error != nullptr) delete box;
  return error;
}

}  // namespace detail
}  // namespace kernix

// The generated code exports, per stateful function, a function returning the
// library's state type id (which = 0) or its type information (which = 1):
//   KERNIX_HANDLER_EXPORT void* kernix_statetype_<i>_<name>(int which) {
//     return ::kernix::detail::state_type(which);
//   }
namespace kernix {
namespace detail {
inline void* state_type(int which) noexcept {
  return which == 0 ? static_cast<void*>(&StateBox::id) : static_cast<void*>(&state_type_info);
}
}  // namespace detail
}  // namespace kernix
