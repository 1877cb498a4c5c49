"""What a caller asks to export: the ``functions=`` argument, and an explicit arg_spec (given there or
in an annotation) checked against the inferred one."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from ..errors import ArgSpecError, SourceError
from .names import check_function_name
from .spec import FunctionSpec, Param, parse_arg_spec
from ..notes import warn_at

__all__ = ["InputDeclaredOnNonConstTensor", "Requested", "check_spec_matches", "normalize_functions"]


#: Attribute dtypes that may name a ``uint16_t`` parameter, which receives the raw 16 bits.
_HALF_BITS_DTYPES = ("float16", "bfloat16")


class InputDeclaredOnNonConstTensor(UserWarning):
    """An explicit ``"arg"`` names a non-const ``BE::Tensor&``: the function
    could write to a buffer XLA considers an input."""


def check_spec_matches(
    declared: Sequence[str] | str, spec: FunctionSpec, *, source: str = "explicit"
) -> FunctionSpec:
    """Check that a declared arg_spec agrees with the real signature.

    Three declarations that differ from what kernix infers are accepted, and the returned spec follows them:

    * ``"arg"`` for a non-const ``BE::Tensor`` parameter: an input (for a non-const *reference*, with
      an :class:`InputDeclaredOnNonConstTensor` warning);
    * ``attr.x:float16`` / ``attr.x:bfloat16`` for a ``uint16_t`` parameter, which receives the 16 raw bits;
    * ``"inout"`` for a non-const ``BE::Tensor`` parameter: updated in place (``BE::InOut``'s meaning).

    Parameters
    ----------
    declared
        The spec the user gave (in an annotation or a ``functions`` dict).
    spec
        The spec inferred from the C++ signature.
    source
        Where ``declared`` came from, for the message (``"explicit"`` or ``"annotation"``).

    Returns
    -------
    FunctionSpec
        ``spec`` with the roles and attribute dtypes the declaration chose: the one to export.

    Raises
    ------
    SourceError
        Naming the file, line, function and first disagreeing parameter.
    """
    tokens = parse_arg_spec(declared, function=spec.name)

    def fail(msg: str, param: str | None = None) -> None:
        raise SourceError(
            f"{source} arg_spec of {spec.name!r} disagrees with its C++ signature: {msg}. "
            f"The signature gives: {' '.join(spec.arg_spec)}. "
            "Fix the spec (or drop it: kernix infers it from the signature).",
            file=spec.file,
            line=spec.line,
            function=spec.name,
            parameter=param,
        )

    if len(tokens) != len(spec.params):
        fail(f"it has {len(tokens)} tokens but the function has {len(spec.params)} parameters")
    params: list[Param] = []
    for i, (tok, param) in enumerate(zip(tokens, spec.params)):
        if tok.role != param.role:
            if tok.role in ("arg", "inout") and param.role == "ret" and param.kind == "tensor":
                if tok.role == "arg" and "&" in param.type:
                    warn_at(
                        f"{spec.file or '<source>'}:{spec.line}: {source} arg_spec of {spec.name!r} calls "
                        f"parameter {param.name!r} (type '{param.type}') an input; it is a non-const "
                        "reference, so the function could write to an input buffer: declare it "
                        "`const BE::Tensor&`",
                        InputDeclaredOnNonConstTensor, spec.file, spec.line,
                    )
                param = dataclasses.replace(param, role=tok.role)
            else:
                fail(f"parameter {i + 1} ({param.name!r}, type '{param.type}') is {param.role!r}, not {tok.role!r}",
                     param.name)
        if tok.role == "attr":
            if tok.name != param.name:
                fail(f"parameter {i + 1} is named {param.name!r}, not {tok.name!r}", param.name)
            if tok.dtype is not None and tok.dtype != param.attr_type:
                if tok.dtype in _HALF_BITS_DTYPES and param.dtype == "uint16" and param.kind == "scalar":
                    param = dataclasses.replace(param, dtype=tok.dtype)
                else:
                    fail(
                        f"attribute {param.name!r} has type '{param.type}' (dtype {param.attr_type}), "
                        f"not {tok.dtype}"
                        + (" (a float16/bfloat16 attribute may be a uint16_t parameter: it gets the raw bits)"
                           if tok.dtype in _HALF_BITS_DTYPES else ""),
                        param.name,
                    )
        params.append(param)
    return dataclasses.replace(spec, params=tuple(params))


#: A normalised ``functions=`` argument: exported name -> explicit arg_spec
#: (canonical token strings), or ``None`` where only the name was given.
Requested = dict[str, tuple[str, ...] | None]


def normalize_functions(functions: Any, *, parse: bool = True) -> Requested | None:
    """Validate and normalise a ``functions=`` argument.

    ``None`` stays ``None`` (every annotated function); a sequence of names becomes ``{name: None}``;
    ``{name: arg_spec}`` becomes ``{name: parsed tokens}`` (``None``: infer it), or with ``parse=False``
    only split tokens (for a caller that reports a malformed spec at the function's source line).
    Raises :class:`~kernix.errors.ArgSpecError` (a bare string, a repeated name, a malformed arg_spec)
    or :class:`~kernix.errors.InvalidNameError`.
    """
    if functions is None:
        return None
    if isinstance(functions, str):
        raise ArgSpecError(
            f"functions must be a list of names or a dict of arg_specs, not the string {functions!r} "
            f"(did you mean functions=[{functions!r}]?)"
        )
    if isinstance(functions, Mapping):
        def tokens_of(name: str, tokens: Any) -> tuple[str, ...] | None:
            if tokens is None:
                return None
            if not parse:
                return tuple(tokens.split() if isinstance(tokens, str) else map(str, tokens))
            return tuple(str(t) for t in parse_arg_spec(tokens, function=name))

        return {check_function_name(name): tokens_of(name, tokens) for name, tokens in functions.items()}
    names = [check_function_name(name) for name in functions]
    if len(set(names)) != len(names):
        raise ArgSpecError(f"functions lists a name twice: {names}")
    return dict.fromkeys(names)
