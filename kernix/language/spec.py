"""The arg_spec grammar (one token per parameter: ``arg``, ``ret``, ``inout``, ``stream``, ``attr.<name>``
with an optional ``:<dtype>``, ``:<dtype>[]`` or ``:str``, ``scratch``, ``state``, ``threads``; each described in
docs/reference/arg-spec.rst) and the :class:`FunctionSpec` value type."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, Sequence

from .dtypes import ARRAY_ATTR_DTYPES, ATTR_DTYPES, BUFFER_DTYPES
from ..errors import ArgSpecError, SignatureError
from .templates import check_template_args, is_template_argument
from .names import is_identifier
from .shapes import check_against_spec, parse_signature
from .sizes import parse_size
from .spelling import is_function_type, is_qualified_name, is_type_spelling

__all__ = ["Role", "Token", "Param", "FunctionSpec", "parse_token", "parse_arg_spec"]

Role = Literal["arg", "ret", "inout", "stream", "attr", "scratch", "state", "threads"]

#: Roles whose token is the role itself, each at most once per function but ``arg``, ``ret`` and ``inout``.
_PLAIN_ROLES = ("arg", "ret", "inout", "stream", "scratch", "state", "threads")
_ONCE = ("stream", "scratch", "state", "threads")

_ALIASES = {"args": "arg", "rets": "ret", "ctx.stream": "stream"}


@dataclass(frozen=True)
class Token:
    """One parsed arg_spec token: its ``role``, and an attribute's ``name`` and the ``dtype`` the token
    pins (``"float32"``, ``"int64[]"``, ``"str"``; ``None`` where it pins none or for other roles)."""

    role: Role
    name: str | None = None
    dtype: str | None = None

    def __str__(self) -> str:
        if self.role != "attr":
            return self.role
        return f"attr.{self.name}" + (f":{self.dtype}" if self.dtype else "")


def parse_token(token: str) -> Token:
    """Parse one arg_spec token, normalising aliases.

    Raises
    ------
    ArgSpecError
        For an unknown token, a bad attribute name or an unknown dtype.
    """
    if not isinstance(token, str):
        raise ArgSpecError(f"arg_spec tokens must be strings, got {token!r} ({type(token).__name__})")
    text = token.strip()
    text = _ALIASES.get(text, text)
    if text in _PLAIN_ROLES:
        return Token(text)  # type: ignore[arg-type]
    if not text.startswith(("attr.", "attrs.")):
        raise ArgSpecError(
            f"unknown arg_spec token {token!r}; expected 'arg', 'ret', 'inout', 'stream', "
            "'attr.<name>', 'attr.<name>:<dtype>', 'attr.<name>:<dtype>[]', 'attr.<name>:str', "
            "'scratch', 'state' or 'threads' (aliases: 'args', 'rets', 'ctx.stream', 'attrs.<name>')"
        )
    name, sep, dtype = text.partition(".")[2].partition(":")
    if not is_identifier(name):
        raise ArgSpecError(
            f"bad attribute name {name!r} in arg_spec token {token!r}: it must be a "
            "C++ identifier (letters, digits, '_', not starting with a digit, not a keyword)"
        )
    if sep:
        if dtype.endswith("[]") and dtype[:-2] not in ARRAY_ATTR_DTYPES:
            raise ArgSpecError(
                f"unknown array attribute dtype {dtype[:-2]!r} in arg_spec token {token!r}; "
                f"expected one of: {', '.join(ARRAY_ATTR_DTYPES)} (XLA has no array attribute of other types)"
            )
        if dtype not in ATTR_DTYPES and dtype != "str" and not dtype.endswith("[]"):
            raise ArgSpecError(
                f"unknown attribute dtype {dtype!r} in arg_spec token {token!r}; "
                f"expected one of: {', '.join(ATTR_DTYPES)}, an array of one (e.g. int64[]) or str"
            )
    return Token("attr", name, dtype or None)


def parse_arg_spec(tokens: Sequence[str] | str, *, function: str | None = None) -> tuple[Token, ...]:
    """Parse and validate a whole arg_spec.

    Parameters
    ----------
    tokens
        A list of tokens, or one whitespace-separated string of them.
    function
        The function the spec belongs to, named in error messages.

    Raises
    ------
    ArgSpecError
        For a bad token, a duplicate attribute name, two streams or no ``ret``.
    """
    if isinstance(tokens, str):
        tokens = tokens.split()
    where = f" of function {function!r}" if function else ""
    try:
        parsed = tuple(parse_token(t) for t in tokens)
    except ArgSpecError as exc:
        raise ArgSpecError(f"in the arg_spec{where}: {exc}") from None
    names = [t.name for t in parsed if t.role == "attr"]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ArgSpecError(f"attribute {name!r} appears twice in the arg_spec{where}")
    for role in _ONCE:
        if sum(t.role == role for t in parsed) > 1:
            raise ArgSpecError(f"the arg_spec{where} has more than one {role!r} token; a function takes at most one "
                               f"{role}")
    if not any(t.role in ("ret", "inout") for t in parsed):
        raise ArgSpecError(
            f"the arg_spec{where} has no 'ret' token: a function must write at least one "
            "output buffer (a non-const BE::Tensor, or a BE::InOut updated in place)"
        )
    return parsed


@dataclass(frozen=True)
class Param:
    """One parameter of an annotated function, as inference found it.

    Attributes
    ----------
    name
        The parameter's name in the C++ declaration.
    role
        One of :data:`Role`.
    type
        The type as written in the source (e.g. ``const BE::Tensor &``).
    canonical_type
        The fully resolved C++ type, valid after the user's code (``float`` for ``using real = float``).
    kind
        How the native function takes the value: ``"tensor"`` (``BE::Tensor`` and its typed and
        in-place forms), ``"ffi"`` (an XLA FFI buffer or result type), ``"scalar"``, ``"array"`` (a span
        or vector of scalars), ``"string"``, ``"stream"``, ``"scratch"``, ``"state"`` or ``"threads"``.
    dtype
        A scalar attribute's dtype, an array attribute's element dtype, or the element dtype a typed
        buffer fixes; ``None`` when not fixed (and for strings).
    rank
        The rank a typed FFI buffer fixes; ``None`` when not fixed.
    """

    name: str
    role: Role
    type: str = ""
    canonical_type: str = ""
    kind: Literal["tensor", "ffi", "scalar", "array", "string", "stream", "scratch", "state", "threads"] = "tensor"
    dtype: str | None = None
    rank: int | None = None

    @property
    def attr_type(self) -> str:
        """An attribute's type as its token spells it: ``"float32"``, ``"int64[]"`` or ``"str"``."""
        if self.kind == "string":
            return "str"
        return f"{self.dtype}[]" if self.kind == "array" else str(self.dtype)

    @property
    def token(self) -> str:
        """The canonical arg_spec token of this parameter."""
        if self.role == "attr":
            return f"attr.{self.name}:{self.attr_type}"
        return self.role


@dataclass(frozen=True)
class FunctionSpec:
    """Everything kernix knows about one exported function.

    Attributes
    ----------
    name
        The exported name: the FFI target is ``"<prefix>.<name>"``.
    qualified_name
        The C++ name to call, with namespaces (``ops::scale_by``).
    params
        The parameters in declaration order.
    file, line
        Where the declaration is (for messages); ``""`` / 0 if unknown.
    signature
        The shape signature in canonical form (``"(...,d),(d)->(...,d)"``), or ``None``.
    vjp_of
        For a backward kernel (``vjp=NAME``), the forward function's name.
    jvp_of
        For a tangent kernel (``jvp=NAME``), the name of the function whose tangents it computes.
    doc
        The comment directly above the declaration (``""`` if none).
    function_type
        The function's exact C++ type, spelled validly at file scope (``void (const BE::Tensor &,
        BE::Tensor &, float)``), or ``""`` where inference could not spell it or the spec was written by
        hand.  The shim calls the function through a pointer of that type, so its body is not compiled
        again there.  Comparisons ignore it.
    returns_error
        The function returns an ``xla::ffi::Error``, whose failure the call reports (else ``void``).
    has_side_effect
        Every call runs, even when its results are unused, and identical calls are never merged.
    scratch
        The size expression of the ``scratch`` parameter, in bytes per problem (``scratch=n*4``), or ``None``.
    tune, tune_dims
        For a template's instantiation, the template parameters ``tune=`` has timing choose, and the
        dimensions of the shape signature that key the choice (``()``: every dimension of the inputs).
    """

    name: str
    qualified_name: str
    params: tuple[Param, ...]
    file: str = ""
    line: int = 0
    signature: str | None = None
    vjp_of: str | None = None
    doc: str = ""
    jvp_of: str | None = None
    function_type: str = dataclasses.field(default="", compare=False)
    returns_error: bool = False
    has_side_effect: bool = False
    scratch: str | None = None
    #: For an instantiation of a function template: ``(parameter, argument as written, key)`` per
    #: listed template argument, the key being the dtype, integer value or spelling (see :mod:`kernix.language.templates`).
    template_args: tuple[tuple[str, str, str], ...] = ()
    tune: tuple[str, ...] = ()
    tune_dims: tuple[str, ...] = ()

    @property
    def arg_spec(self) -> tuple[str, ...]:
        """The canonical token list (``attr`` tokens always carry a dtype)."""
        return tuple(p.token for p in self.params)

    @property
    def inputs(self) -> tuple[Param, ...]:
        """The ``arg`` and ``inout`` parameters, in call order."""
        return tuple(p for p in self.params if p.role in ("arg", "inout"))

    @property
    def outputs(self) -> tuple[Param, ...]:
        """The ``ret`` and ``inout`` parameters, in result order."""
        return tuple(p for p in self.params if p.role in ("ret", "inout"))

    @property
    def results(self) -> tuple[Param, ...]:
        """The buffers XLA allocates for a call, in the call frame's order:
        the outputs and the ``scratch`` parameter, in declaration order."""
        return tuple(p for p in self.params if p.role in ("ret", "inout", "scratch"))

    def has(self, role: str) -> bool:
        """Whether a parameter has ``role`` (``"scratch"``, ``"state"``, ``"threads"``, ...)."""
        return any(p.role == role for p in self.params)

    @property
    def attrs(self) -> tuple[Param, ...]:
        """The attribute parameters, in declaration order."""
        return tuple(p for p in self.params if p.role == "attr")

    @property
    def has_stream(self) -> bool:
        """Whether the function takes the platform stream."""
        return any(p.role == "stream" for p in self.params)

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict (stable key order; optional fields only when set) for :meth:`from_json`."""
        data: dict[str, Any] = {
            "name": self.name,
            "qualified_name": self.qualified_name,
            "file": self.file,
            "line": self.line,
            "arg_spec": list(self.arg_spec),
            "params": [dataclasses.asdict(p) for p in self.params],
        }
        for key in ("signature", "vjp_of", "jvp_of", "doc", "function_type", "returns_error", "has_side_effect",
                    "scratch"):
            if getattr(self, key):
                data[key] = getattr(self, key)
        if self.template_args:
            data["template_args"] = [list(t) for t in self.template_args]
        data.update({k: list(getattr(self, k)) for k in ("tune", "tune_dims") if getattr(self, k)})
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "FunctionSpec":
        """Rebuild a spec from :meth:`to_json` output, validating every field (it is written into
        generated C++: names, type spellings, roles, kinds and dtypes); a ``ValueError`` names the bad one."""
        params = tuple(_checked_param(Param(**p)) for p in data["params"])
        name, qualified = data["name"], data["qualified_name"]
        if not (isinstance(name, str) and is_identifier(name)):
            raise ValueError(f"bad function name {name!r}")
        template_args = check_template_args(data.get("template_args", ()))
        if not (isinstance(qualified, str) and _is_callee(qualified, bool(template_args))):
            raise ValueError(f"bad qualified name {qualified!r}")
        function_type = data.get("function_type", "")
        if not (isinstance(function_type, str) and is_function_type(function_type)):
            raise ValueError(f"bad function type {function_type!r}")
        vjp_of, jvp_of, doc = data.get("vjp_of"), data.get("jvp_of"), data.get("doc", "")
        for key, value in (("vjp_of", vjp_of), ("jvp_of", jvp_of)):
            if value is not None and not (isinstance(value, str) and is_identifier(value)):
                raise ValueError(f"bad {key} {value!r}")
        if not isinstance(doc, str):
            raise ValueError(f"bad doc {doc!r}")
        spec = cls(
            name=name,
            qualified_name=qualified,
            params=params,
            file=str(data.get("file", "")),
            line=int(data.get("line", 0)),
            vjp_of=vjp_of,
            doc=doc,
            jvp_of=jvp_of,
            function_type=function_type,
            returns_error=data.get("returns_error", False) is True,  # (only JSON's true, nothing else)
            has_side_effect=data.get("has_side_effect", False) is True,
            scratch=_checked_scratch(data.get("scratch"), params),
            template_args=template_args,
            tune=_names(data.get("tune", ())),
            tune_dims=_names(data.get("tune_dims", ())),
        )
        if data.get("signature") is None:
            return spec
        try:
            signature = parse_signature(data["signature"])
        except SignatureError as exc:
            raise ValueError(f"bad signature of {name!r}: {exc}") from None
        problems = check_against_spec(signature, spec)
        if problems:
            raise ValueError(f"bad signature of {name!r}: {problems[0]}")
        return dataclasses.replace(spec, signature=str(signature))


def _names(data: Any) -> tuple[str, ...]:
    if not (isinstance(data, (list, tuple)) and all(isinstance(n, str) and is_identifier(n) for n in data)):
        raise ValueError(f"bad tune= names {data!r}")
    return tuple(data)


def _is_callee(qualified: str, instance: bool) -> bool:
    """Whether ``qualified`` names a function (an instantiation ``ns::f<float, 128>`` when ``instance``)."""
    if not instance or "<" not in qualified:
        return is_qualified_name(qualified)
    base, _, args = qualified.partition("<")
    return is_qualified_name(base) and args.endswith(">") and is_template_argument(args[:-1].strip())


#: Each kind -> the roles a parameter of that kind may have.
_KIND_ROLES = {
    "tensor": ("arg", "ret", "inout"), "ffi": ("arg", "ret"), "scalar": ("attr",), "array": ("attr",),
    "string": ("attr",), "stream": ("stream",), "scratch": ("scratch",), "state": ("state",),
    "threads": ("threads",),
}
#: The types whose template argument fixes a tensor's dtype.
_TYPED_TENSORS = ("BE::TensorOf<", "BE::InOutOf<")


def _checked_param(p: Param) -> Param:
    ok = (
        isinstance(p.name, str) and is_identifier(p.name)
        and p.kind in _KIND_ROLES and p.role in _KIND_ROLES[p.kind]
        and isinstance(p.canonical_type, str) and is_type_spelling(p.canonical_type)
        and (p.dtype is None or p.dtype in BUFFER_DTYPES)
        and (p.kind != "scalar" or p.dtype in ATTR_DTYPES)
        and (p.kind != "array" or p.dtype in ARRAY_ATTR_DTYPES)
        and (p.kind != "string" or p.dtype is None)
        and (p.rank is None or (isinstance(p.rank, int) and p.rank >= 0))
        and (p.kind != "tensor" or p.rank is None and (p.dtype is not None) == (  # only a typed tensor fixes a dtype
            p.canonical_type.startswith(_TYPED_TENSORS) and p.canonical_type.endswith(">")))
    )
    if not ok:
        raise ValueError(f"bad parameter {p!r}")
    return p


def _checked_scratch(text: Any, params: Sequence[Param]) -> str | None:
    # A size expression exactly when a parameter is scratch.
    if (text is None) == any(p.role == "scratch" for p in params):
        raise ValueError("a scratch size without a scratch parameter, or the reverse")
    if text is not None:
        parse_size(text)  # raises ValueError
    return text
