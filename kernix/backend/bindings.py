"""The generated C++ for the parameters beyond tensors, scalars and the stream.

:mod:`kernix.backend.codegen` writes the shims and handlers; this module
writes, for an in-place tensor (``inout``), an array or string attribute,
scratch memory, the per-instance state and the thread pool:

* what the shim passes the user's function (:func:`shim_argument`,
  :func:`shim_local`), built from the slot the handler filled;
* the handler's part (:func:`handler_part`): its parameters of the impl, its
  ``ffi::Ffi::Bind()`` bindings, the statements that fill its slot;
* for a function with state, the instantiate handler and the functions
  around it (:func:`state_shims`, :func:`state_handlers`).

Each slot is a ``void*``: a ``kernix::TensorView*`` (in-place tensor,
scratch), a ``kernix::ArrayView*`` (array, string), the state object itself,
a ``kernix::ThreadPoolView*``.
"""

from __future__ import annotations

from typing import NamedTuple

from ..language.dtypes import ARRAY_ATTR_DTYPES
from ..languages import Platform
from ..language.spec import FunctionSpec, Param

__all__ = [
    "SPECIAL_KINDS", "HandlerPart", "handler_part", "shim_argument", "shim_local", "state_shims",
    "state_handlers", "instantiate_symbol", "statetype_symbol",
]

#: The kinds (and the role) this module writes code for.
SPECIAL_KINDS = ("array", "string", "scratch", "state", "threads")


def _cxx_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _local(slot: int) -> str:
    return f"kernix_t{slot}"


def _type(param: Param) -> str:
    return "::" + param.canonical_type


def shim_local(param: Param, slot: int) -> str | None:
    """The local the shim builds for ``param`` (scratch, state, thread pool), or ``None``."""
    p = f"p[{slot}]"
    if param.kind == "scratch":
        return (f"  {_type(param)} {_local(slot)}(*static_cast<const ::kernix::TensorView*>({p}), "
                f"{_cxx_string(param.name)});")
    if param.kind == "state":
        return f"  {_type(param)} {_local(slot)} = ::kernix::detail::state_from<{_type(param)}>({p});"
    if param.kind == "threads":
        return f"  {_type(param)} {_local(slot)}(*static_cast<const ::kernix::ThreadPoolView*>({p}));"
    return None


def shim_argument(param: Param, slot: int) -> str:
    """The expression the shim passes for an array or string attribute, scratch, state or pool."""
    if param.kind in ("array", "string"):
        return f"::kernix::detail::array_from<{_type(param)}>(p[{slot}])"
    assert param.kind in ("scratch", "state", "threads"), param
    return _local(slot)


class HandlerPart(NamedTuple):
    """One parameter's share of an ffi.h handler."""

    decl: list[str]  # the impl's parameters
    bind: list[str]  # the binding chain
    prep: list[str]  # statements filling the slot
    slot: str  # the void* of the shim's array


def handler_part(param: Param, i: int, spec: FunctionSpec, platform: Platform) -> HandlerPart:
    """The handler's part for parameter ``i`` of ``spec`` (an in-place tensor or one of :data:`SPECIAL_KINDS`)."""
    if param.role == "inout":
        check = (f"  if (ffi::Error e = ::kernix::detail::check_aliased(b{i}in, *b{i}, {_cxx_string(spec.name)}, "
                 f"{_cxx_string(param.name)}); e.failure()) return e;")
        return HandlerPart(
            [f"ffi::AnyBuffer b{i}in", f"ffi::Result<ffi::AnyBuffer> b{i}"],
            [".Arg<ffi::AnyBuffer>()", ".Ret<ffi::AnyBuffer>()"],
            [check, f"  ::kernix::TensorView t{i} = ::kernix::detail::to_view(*b{i});"],
            f"&t{i}",
        )
    if param.kind == "array":
        assert param.dtype is not None
        span = f"ffi::Span<const {ARRAY_ATTR_DTYPES[param.dtype]}>"
        return HandlerPart(
            [f"{span} a{i}"], [f".Attr<{span}>({_cxx_string(param.name)})"],
            [f"  ::kernix::ArrayView v{i}{{a{i}.begin(), static_cast<int64_t>(a{i}.size())}};"], f"&v{i}",
        )
    if param.kind == "string":
        return HandlerPart(
            [f"std::string_view a{i}"], [f".Attr<std::string_view>({_cxx_string(param.name)})"],
            [f"  ::kernix::ArrayView v{i}{{a{i}.data(), static_cast<int64_t>(a{i}.size())}};"], f"&v{i}",
        )
    if param.kind == "scratch":
        return HandlerPart(
            [f"ffi::Result<ffi::AnyBuffer> b{i}"], [".Ret<ffi::AnyBuffer>()"],
            [f"  ::kernix::TensorView t{i} = ::kernix::detail::to_view(*b{i});"], f"&t{i}",
        )
    if param.kind == "state":
        return HandlerPart(
            [f"::kernix::detail::StateBox* st{i}"], [".Ctx<ffi::State<::kernix::detail::StateBox>>()"],
            [f"  void* v{i} = st{i}->object;"], f"v{i}",
        )
    assert param.kind == "threads", param
    if platform == "cpu":
        return HandlerPart(
            [f"ffi::ThreadPool tp{i}"], [".Ctx<ffi::ThreadPool>()"],
            [f"  ::kernix::ThreadPoolView v{i} = ::kernix::detail::pool_view(tp{i});"], f"&v{i}",
        )
    # CUDA functions run on the host thread that launches them: a pool of no threads.
    return HandlerPart([], [], [f"  ::kernix::ThreadPoolView v{i}{{nullptr, 0, nullptr}};"], f"&v{i}")


def _names(index: int, slug: str) -> tuple[str, str]:
    return f"kernix_state_new_{index}_{slug}", f"kernix_state_delete_{index}_{slug}"


def instantiate_symbol(handler: str) -> str:
    """The instantiate handler's symbol beside the handler ``kernix_handler_<i>_<name>``."""
    return "kernix_instantiate_" + handler.removeprefix("kernix_handler_")


def statetype_symbol(handler: str) -> str:
    """The symbol of the function returning the library's state type id and information."""
    return "kernix_statetype_" + handler.removeprefix("kernix_handler_")


def _state_param(spec: FunctionSpec) -> Param:
    return next(p for p in spec.params if p.role == "state")


def state_shims(spec: FunctionSpec, index: int, slug: str) -> list[str]:
    """The shim unit's functions making and deleting the state of ``spec`` (which has one)."""
    new, delete = _names(index, slug)
    state = _type(_state_param(spec))
    return [
        f"KERNIX_SHIM_EXPORT void* {new}() {{ return ::kernix::detail::new_state<{state}>(); }}",
        f"KERNIX_SHIM_EXPORT void {delete}(void* p) noexcept {{ ::kernix::detail::delete_state<{state}>(p); }}",
        "",
    ]


def state_handlers(spec: FunctionSpec, index: int, slug: str, handler: str) -> list[str]:
    """The handler unit's instantiate handler of ``spec`` and its state type's accessor."""
    new, delete = _names(index, slug)
    return [
        f'extern "C" void* {new}();',
        f'extern "C" void {delete}(void*) noexcept;',
        f"KERNIX_HANDLER_EXPORT XLA_FFI_Error* {instantiate_symbol(handler)}(XLA_FFI_CallFrame* f) {{",
        f"  return ::kernix::detail::instantiate(f, &{new}, &{delete}, {_cxx_string(spec.name)});",
        "}",
        f"KERNIX_HANDLER_EXPORT void* {statetype_symbol(handler)}(int which) {{",
        "  return ::kernix::detail::state_type(which);",
        "}",
        "",
    ]
