"""Python signatures, docstrings and ``.pyi`` stubs of exported functions, from their
:class:`~kernix.language.spec.FunctionSpec` (no jax import)."""

from __future__ import annotations

import keyword
from typing import Any, Iterable

from ..language.spec import FunctionSpec, Param
from ..language.templates import family_overloads

__all__ = ["docstring", "input_names", "out_required", "call_signature", "stub_text"]


def python_type(param: Param) -> str:
    """The Python type an attribute takes (``bool``, ``int``, ``float``, ``str``, ``Sequence[...]``)."""
    if param.kind == "string":
        return "str"
    if param.kind == "array":
        return "Sequence[float]" if param.dtype in ("float32", "float64") else "Sequence[int]"
    if param.dtype == "bool":
        return "bool"
    if param.dtype in ("float16", "bfloat16", "float32", "float64"):
        return "float"
    return "int"


def declaration(spec: FunctionSpec) -> str:
    """The C++ declaration as inference saw it (parameter types as written)."""
    params = ", ".join(f"{p.type or p.canonical_type} {p.name}".strip() for p in spec.params)
    return f"{spec.qualified_name}({params})"


def _attr_doc(p: Param) -> str:
    if p.kind == "string":
        return f"    Attribute ``{p.type}`` (a string)."
    if p.kind == "array":
        return f"    Attribute ``{p.type}`` (a tuple, list or 1-D NumPy array, passed as {p.dtype})."
    return f"    Attribute ``{p.type}`` (passed as {p.dtype})."


def _returns(spec: FunctionSpec) -> str:
    n = len(spec.outputs)
    return "jax.Array" if n == 1 else "tuple[" + ", ".join(["jax.Array"] * n) + "]"


def out_required(spec: FunctionSpec) -> bool:
    """Whether a call must pass ``out=``: no shape signature, and an output not updated in place."""
    return spec.signature is None and any(p.role == "ret" for p in spec.outputs)


def _python_params(spec: FunctionSpec) -> str:
    parts = input_names(spec)
    if parts:
        parts.append("/")
    parts.append("*")
    parts += [f"{p.name}: {python_type(p)}" for p in spec.attrs]
    parts += ["out" if out_required(spec) else "out=None", "vmap_method='sequential'"]
    return ", ".join(parts)


def docstring(spec: FunctionSpec, *, backward: str | None = None, tangent: str | None = None) -> str:
    """A numpydoc docstring from the spec, its shape signature and its C++ declaration."""
    lines = [f"{spec.name}({_python_params(spec)})", ""]
    if spec.doc:
        lines += [spec.doc, ""]
    lines += [f"C++: ``{declaration(spec)}``"]
    if spec.file:
        lines += [f"Declared at {spec.file}:{spec.line}."]
    lines += [f"arg_spec: ``{' '.join(spec.arg_spec)}``"]
    facts = [("Shape signature: ``{}``", spec.signature), ("Backward kernel of ``{}``.", spec.vjp_of),
             ("Tangent kernel of ``{}``.", spec.jvp_of), ("Differentiable (reverse mode) through ``{}``.", backward),
             ("Differentiable (forward mode) through ``{}``.", tangent)]
    lines += [text.format(value) for text, value in facts if value]
    if spec.has_side_effect:
        lines += ["Has side effects: every call runs, even when its results are unused."]
    about = {"scratch": "Scratch memory ``{p.name}``: {spec.scratch} bytes per problem, allocated by XLA.",
             "state": "State ``{p.type} {p.name}``: made once per compiled instance of the call.",
             "threads": "Runs on XLA's intra-op thread pool (``{p.name}``)."}
    lines += [about[p.role].format(p=p, spec=spec) for p in spec.params if p.role in about]
    lines += ["", "Parameters", "----------"]
    for p in spec.inputs:
        extra = f", {p.dtype}" if p.dtype else ""
        what = "Updated in place (its new value is returned)" if p.role == "inout" else "Input"
        lines += [f"{p.name} : array_like", f"    {what} ``{p.type}``{extra}."]
    for p in spec.attrs:
        lines += [f"{p.name} : {python_type(p)}", _attr_doc(p)]
    if spec.signature:
        out = "The output shapes and dtypes (must agree with the signature)."
    else:
        out = "The output shapes and dtypes, one for each output (required: no shape signature gives them)."
    lines += [
        "out : jax.ShapeDtypeStruct or sequence of them" + ("" if out_required(spec) else ", optional"),
        "    " + out,
        "vmap_method : str, optional",
        "    How jax.vmap runs the kernel when it cannot batch it as one call.",
        "",
        "Returns",
        "-------",
    ]
    for p in spec.outputs:
        what = "The new value of in-place" if p.role == "inout" else "Output"
        lines += [f"{p.name} : jax.Array", f"    {what} ``{p.type}``."]
    return "\n".join(lines)


def input_names(spec: FunctionSpec) -> list[str]:
    """The Python names of ``spec``'s (positional-only) inputs: the C++ names, with ``_`` added to a
    keyword or a name the call already uses (``out``, ``vmap_method``, ``self``, an attribute)."""
    taken = {"out", "vmap_method", "self", *(p.name for p in spec.attrs)}
    names = []
    for p in spec.inputs:
        name = p.name
        while keyword.iskeyword(name) or name in taken:
            name += "_"
        taken.add(name)
        names.append(name)
    return names


def call_signature(spec: FunctionSpec) -> Any:
    """The ``inspect.Signature`` of a function's callable."""
    import inspect
    from typing import Sequence

    P = inspect.Parameter
    types = {"bool": bool, "int": int, "float": float, "str": str, "Sequence[int]": Sequence[int],
             "Sequence[float]": Sequence[float]}
    params = [P(name, P.POSITIONAL_ONLY) for name in input_names(spec)]
    params += [P(p.name, P.KEYWORD_ONLY, annotation=types[python_type(p)]) for p in spec.attrs]
    params += [P("out", P.KEYWORD_ONLY, default=P.empty if out_required(spec) else None),
               P("vmap_method", P.KEYWORD_ONLY, default="sequential", annotation=str)]
    return inspect.Signature(params)


# An attribute's type in a stub: what the call accepts (NumPy scalars too; an int where a float goes).
_STUB_TYPES = {"bool": "bool | np.bool_", "int": "int | np.integer", "float": "float | np.floating", "str": "str",
               "Sequence[int]": "Sequence[int] | np.ndarray", "Sequence[float]": "Sequence[float] | np.ndarray"}


def _indent(text: str) -> str:
    return "\n".join(("    " + ln) if ln else ln for ln in text.split("\n"))


def stub_text(specs: Iterable[FunctionSpec], *, source: str = "") -> str:
    """A ``.pyi`` declaring each function, and a ``Module`` protocol with them as attributes."""
    specs = list(specs)
    backward = {s.vjp_of: s.name for s in specs if s.vjp_of}
    tangent = {s.jvp_of: s.name for s in specs if s.jvp_of}
    head = [
        f'"""Type stubs of the kernix functions{" of " + source if source else ""} (generated by `kernix stubs`)."""',
        "",
        "from typing import Literal, Protocol, Sequence, overload",
        "",
        "import jax",
        "import numpy as np",
        "from jax.typing import ArrayLike",
        "",
        "_Out = jax.ShapeDtypeStruct | Sequence[jax.ShapeDtypeStruct]",
        "",
    ]
    body: list[str] = []
    methods: list[str] = []
    signatures: dict[str, list[str]] = {}
    for s in specs:
        inputs = [f"{name}: ArrayLike" for name in input_names(s)]  # NumPy arrays and scalars too
        params = inputs + (["/"] if inputs else []) + ["*"]
        params += [f"{p.name}: {_STUB_TYPES[python_type(p)]}" for p in s.attrs]
        many = sum(p.role == "ret" for p in s.outputs) > 1
        out = "Sequence[jax.ShapeDtypeStruct]" if many else "_Out"  # (one output: an array either way)
        params += [f"out: {out}" if out_required(s) else f"out: {out} | None = None", "vmap_method: str = 'sequential'"]
        signatures[s.name] = params
        doc = docstring(s, backward=backward.get(s.name), tangent=tangent.get(s.name)).replace("\\", "\\\\").replace('"""', "'''")
        sig = f"def {s.name}({', '.join(params)}) -> {_returns(s)}:"
        body += [sig, _indent(f'"""{doc}\n"""'), "    ...", "", ""]
        methods += [_indent(f"def {s.name}(self, {', '.join(params)}) -> {_returns(s)}: ...")]
    more, more_methods = family_overloads(specs, signatures, {s.name: _returns(s) for s in specs})
    protocol = ["class Module(Protocol):", '    """A loaded module exporting these functions."""', ""]
    return "\n".join(head + ["", *body, *more] + protocol + [*methods, *more_methods, ""])
