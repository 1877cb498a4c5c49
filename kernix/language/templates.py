"""Function templates exported once per instantiation, each under its :func:`instance_name` (the annotation's
template list, ``// @BE tile<T: float, double; BLOCK: 128, 256>``, is described in docs/reference/arg-spec.rst),
and families.

A module's family ``name`` -- the instantiations of template ``name``, or
functions named ``name_`` and a dtype suffix (``scale_f32``, ``scale_float32``:
:data:`SUFFIX_DTYPES`), as brainevent's macros define them -- is one callable
(:class:`~kernix.runtime.function.Dispatcher`): a call runs the member
:func:`select` picks from the inputs' dtypes, and the ``.pyi`` stubs give it
one ``@overload`` per distinct Python signature (:func:`family_overloads`).  A member fits a call when

1. every input whose parameter pins a dtype (``BE::TensorOf<T>``, ``Buffer<T>``) has that dtype;
2. unless a pinned input fixes its dtype -- the first template argument that is a dtype's
   element type, or its name's suffix --, that dtype is the first unpinned input's (indices
   pinned to ``int32`` beside data of type ``T`` dispatch on the data);
3. each non-dtype template argument given by keyword has the value given
   (``mod.tile(x, BLOCK=128)``);
4. where the inputs leave several members (a type parameter only outputs use: dequantize, cast,
   random numbers), ``out=`` chooses: every output whose parameter pins a dtype has that dtype in
   ``out=``, and, unless a pinned input or output fixes the member's dtype, the first other output
   has it.

Pure Python, no dependencies: a spec read back from the cache is checked here,
and a warm load dispatches without reading the spec grammar.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import CallError
from .dtypes import BUFFER_DTYPES
from .names import is_identifier

__all__ = [
    "template_name", "annotated_name", "TemplateList", "check_template_args", "instance_name", "is_template_argument",
    "parse_template_list", "Member", "family", "family_names", "select", "family_overloads", "parse_tune",
]

# A template argument written into generated code: no ';', braces, quotes, '#', '/' or parentheses.
_ARGUMENT = re.compile(r"[A-Za-z0-9_:<>,*& +-]+")


def is_template_argument(text: str) -> bool:
    """Whether ``text`` may be written into generated C++ as a template argument."""
    return bool(_ARGUMENT.fullmatch(text)) and text.count("<") == text.count(">") and text.strip() == text


@dataclass(frozen=True)
class TemplateList:
    """An annotation's template list: ``scale<T: float, double; BLOCK: 128>``."""

    name: str  #: the template's name (``scale``)
    groups: tuple[tuple[str, tuple[str, ...]], ...]  #: ``(parameter name or "", arguments)`` per group
    rest: tuple[str, ...]  #: the annotation's tokens after the list


def _split_top(text: str, sep: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def parse_template_list(name: str, tokens: Sequence[str]) -> TemplateList | None:
    """The template list of an annotation whose first word is ``name``, or ``None`` if it has none
    (a ``ValueError`` says what is wrong with the list and how to write it)."""
    if "<" not in name:
        return None
    text = " ".join((name, *tokens))
    base, _, body = text.partition("<")
    depth, end = 1, -1
    for i, ch in enumerate(body):
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if depth == 0:
            end = i
            break
    example = "`// @BE scale<T: float, double>` or `// @BE tile<T: float, double; BLOCK: 128, 256>`"
    if not is_identifier(base.strip()) or base != base.strip():
        raise ValueError(f"{base!r} is not a function name: write the template's name right before `<`, "
                         f"e.g. {example}")
    if end < 0:
        raise ValueError(f"the template list after {base!r} has no closing `>`: write it as {example}")
    inner, after = body[:end], body[end + 1:]
    if after and not after.startswith(" "):
        raise ValueError(f"put a space after the template list's closing `>` (before {after.split()[0]!r})")
    groups: list[tuple[str, tuple[str, ...]]] = []
    raw_groups = _split_top(inner, ";")
    for group in raw_groups:
        param, colon, values = group.partition(":")
        if not colon or values.startswith(":"):  # (no parameter, or a `::` qualified name)
            param, values = "", group
        param = param.strip()
        if param and not is_identifier(param):
            raise ValueError(f"{param!r} is not a template parameter's name (in `{group}`): write {example}")
        if not param and len(raw_groups) > 1:
            raise ValueError(f"`{group}`: with several groups, each names its template parameter, as in {example}")
        args = tuple(_split_top(values, ","))
        if not all(args):
            raise ValueError(f"`{group}` has an empty template argument: list them separated by commas, "
                             f"as in {example}")
        bad = [a for a in args if not is_template_argument(a)]
        if bad:
            raise ValueError(f"template argument {bad[0]!r} cannot be written into generated code: it may hold "
                             "names, `::`, numbers, `<>`, `*`, `&`, a sign and spaces (no parentheses)")
        if len(set(args)) != len(args):
            raise ValueError(f"`{group}` lists an argument twice")
        groups.append((param, args))
    names = [p for p, _ in groups if p]
    if len(set(names)) != len(names):
        raise ValueError("a template parameter is listed in two groups: list each once")
    return TemplateList(base, tuple(groups), tuple(after.split()))


def instance_suffix(key: str) -> str:
    """The name suffix of one template argument, from its key (dtype, integer value or spelling)."""
    if re.fullmatch(r"-\d+", key):
        return "m" + key[1:]
    return re.sub(r"_+", "_", re.sub(r"[^0-9A-Za-z]", "_", key)).strip("_") or "x"


def instance_name(template: str, keys: Sequence[str]) -> str:
    """The exported name of the instantiation of ``template`` whose arguments have ``keys``:
    ``scale`` and ``("float32", "128")`` -> ``scale_float32_128``.  A key is the dtype name of a type that is
    one dtype's element type (``float`` -> ``float32``, ``__half`` -> ``float16``), the value of an integer
    (``-1`` gives the suffix ``m1``), else the argument as written (every other character made ``_``)."""
    return "_".join((template, *(instance_suffix(k) for k in keys)))


def check_template_args(data: Any) -> tuple[tuple[str, str, str], ...]:
    """Validate a spec's ``template_args`` read from JSON, ``[[parameter, written, key], ...]`` (ValueError)."""
    if not isinstance(data, (list, tuple)):
        raise ValueError(f"bad template_args {data!r}")
    for entry in data:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 3 and all(isinstance(x, str) for x in entry)
                and is_identifier(entry[0]) and is_template_argument(entry[1]) and is_template_argument(entry[2])):
            raise ValueError(f"bad template argument {entry!r}")
    return tuple(tuple(entry) for entry in data)


def parse_tune(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The value of an annotation's ``tune=``: the template parameters timing chooses, and the dimensions
    that key the choice (``BLOCK,WARPS@m,n`` -> ``(("BLOCK", "WARPS"), ("m", "n"))``; without ``@``, ``()``:
    every dimension of the inputs).  A ``ValueError`` says how to write it."""
    params, at, dims = text.partition("@")
    names, keyed = params.split(","), dims.split(",") if at else []
    bad = next((n for n in (*names, *keyed) if not is_identifier(n)), None)
    if bad is not None or len(set(names)) < len(names) or len(set(keyed)) < len(keyed):
        what = f"{bad!r} is not a name" if bad is not None else "a name is given twice"
        raise ValueError(f"tune={text}: {what}; write the template parameters to time, separated by commas "
                         "(tune=BLOCK or tune=BLOCK,WARPS), and optionally `@` and the dimensions of the shape "
                         "signature that key the choice (tune=BLOCK@n)")
    return tuple(names), tuple(keyed)


def template_name(spec: Any) -> str:
    """The unqualified name of the template ``spec`` (an instantiation) is of: ``scale`` for
    ``ops::scale<float>``."""
    return spec.qualified_name.partition("<")[0].rpartition("::")[2]


def annotated_name(spec: Any) -> str:
    """The name a message's suggested annotation gives ``spec``'s function: its own, or for a
    template's instantiation the template's with its list elided (``scale<...>``)."""
    return template_name(spec) + "<...>" if spec.template_args else spec.name


#: Name suffix -> dtype, for families of functions written one per dtype (and every dtype's own name).
SUFFIX_DTYPES: dict[str, str] = {
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "c64": "complex64", "c128": "complex128", "half": "float16", "float": "float32", "double": "float64",
    **{d: d for d in BUFFER_DTYPES},
}


@dataclass(frozen=True)
class Member:
    """One function of a family."""

    name: str  #: its exported name
    dtype: str | None  #: the dtype it is for (rule 2 of the module docstring), or ``None``
    static: tuple[tuple[str, str], ...]  #: ``(template parameter, value)`` of its non-dtype arguments
    shown: str  #: how a message describes it (``T=float, BLOCK=128``)


def family(functions: Mapping[str, Any], name: str) -> list[Member]:
    """The members of family ``name`` among a module's ``functions`` (exported name -> spec; empty
    if there is none, or if the module exports ``name`` itself)."""
    if name in functions:
        return []
    members = []
    for fname, spec in functions.items():
        if spec.template_args and template_name(spec) == name and spec.vjp_of is spec.jvp_of is None:
            dtypes = [key for _, _, key in spec.template_args if key in BUFFER_DTYPES]
            static = tuple((p, key) for p, _, key in spec.template_args if key not in BUFFER_DTYPES)
            members.append(Member(fname, dtypes[0] if dtypes else None, static,
                                  ", ".join(f"{p}={w}" for p, w, _ in spec.template_args)))
    if members:
        return members
    prefix = name + "_"
    for fname, spec in functions.items():
        suffix = fname[len(prefix):] if fname.startswith(prefix) else ""
        if suffix in SUFFIX_DTYPES and not spec.template_args and spec.vjp_of is spec.jvp_of is None:
            members.append(Member(fname, SUFFIX_DTYPES[suffix], (), SUFFIX_DTYPES[suffix]))
    return members


def family_names(specs: Iterable[Any]) -> list[str]:
    """The names under which a module's specs form a family, in order of first member."""
    specs = list(specs)
    functions = {s.name: s for s in specs}
    names: list[str] = []
    for s in specs:
        if s.template_args:
            candidate = template_name(s)
        else:
            candidate, _, suffix = s.name.rpartition("_")
            if suffix not in SUFFIX_DTYPES:
                continue
        if candidate and candidate not in names and family(functions, candidate):
            names.append(candidate)
    return names


def _same_value(given: Any, key: str) -> bool:
    """Whether keyword value ``given`` is the template argument whose key is ``key``."""
    if isinstance(given, bool):
        return key == ("true" if given else "false")
    if isinstance(given, numbers.Integral):  # (NumPy's integers too)
        return str(int(given)) == key
    return isinstance(given, str) and given == key


def _fits(m: Member, spec: Any, dtypes: Sequence[str | None], static: Mapping[str, Any]) -> bool:
    if len(spec.inputs) != len(dtypes):
        return False
    pinned = [(p.dtype, d) for p, d in zip(spec.inputs, dtypes) if p.dtype]
    if any(want != got for want, got in pinned):
        return False
    free = [d for p, d in zip(spec.inputs, dtypes) if not p.dtype]
    if m.dtype is not None and m.dtype not in {want for want, _ in pinned} and free and free[0] != m.dtype:
        return False
    keys = dict(m.static)
    return all(p in keys and _same_value(v, keys[p]) for p, v in static.items())


def _wanted_out(m: Member, spec: Any) -> tuple[str | None, ...]:
    """The dtype ``out=`` gives each ``ret`` output of a call ``m`` fits (``None``: any), by rule 4."""
    rets = [p for p in spec.outputs if p.role == "ret"]
    fixed = m.dtype is None or any(p.dtype == m.dtype for p in spec.params if p.role in ("arg", "inout", "ret"))
    free = next((p for p in rets if not p.dtype), None)
    return tuple(p.dtype or (m.dtype if p is free and not fixed else None) for p in rets)


def select(where: str, members: Sequence[Member], functions: Mapping[str, Any], dtypes: Sequence[str | None],
           static: Mapping[str, Any], out_dtypes: Sequence[str | None] | None = None) -> str:
    """The name of the member (of ``members``, their specs in ``functions``) that a call with inputs of
    ``dtypes``, the non-dtype template arguments ``static`` and (where given) ``out=`` of ``out_dtypes``
    (one per output it describes) runs (rules in the module docstring); a :class:`~kernix.errors.CallError`
    lists them when none or several fit."""
    fits = [m for m in members if _fits(m, functions[m.name], dtypes, static)]
    got = f"inputs of dtype {', '.join(str(d) for d in dtypes)}" if dtypes else "a call without inputs"
    given = "".join(f", {p}={v!r}" for p, v in static.items())
    if len(fits) > 1 and out_dtypes is not None:  # the inputs leave it open: out= chooses (rule 4)
        wanted = {m.name: _wanted_out(m, functions[m.name]) for m in fits}
        chosen = [m for m in fits if len(wanted[m.name]) == len(out_dtypes) and all(
            w is None or w == d for w, d in zip(wanted[m.name], out_dtypes))]
        given += f" with out= of dtype {', '.join(str(d) for d in out_dtypes) or 'nothing'}"
        if not chosen:
            raise CallError(
                f"{where}(): no instantiation fits {got}{given}; the candidates are "
                f"{'; '.join(f'{m.name} ({m.shown})' for m in fits)}; "
                f"{_by_out(fits, functions) or 'call one of them directly (module.<name>)'}")
        fits = chosen
    if len(fits) == 1:
        return fits[0].name
    if not fits:
        available = "; ".join(f"{m.name} ({m.shown})" for m in members)
        raise CallError(
            f"{where}(): no instantiation fits {got}{given}; the available ones are: {available}. "
            "Cast the inputs to one of these dtypes, or add an instantiation for this one")
    params = sorted({p for m in fits for p, _ in m.static} - set(static))
    hint = (f"pass {' and '.join(f'{p}=...' for p in params)} to choose" if params else
            (out_dtypes is None and _by_out(fits, functions)) or "call one of them directly (module.<name>)")
    raise CallError(
        f"{where}(): {got}{given} {'fit' if dtypes else 'fits'} several instantiations: "
        f"{'; '.join(f'{m.name} ({m.shown})' for m in fits)}; {hint}")


def _by_out(fits: Sequence[Member], functions: Mapping[str, Any]) -> str:
    """How ``out=`` would choose among ``fits`` (``""`` when it cannot)."""
    by = {m.name: _wanted_out(m, functions[m.name]) for m in fits}
    if any(not w or None in w for w in by.values()) or len(set(by.values())) < len(by):
        return ""
    return ("pass out=jax.ShapeDtypeStruct(shape, dtype) with the output's dtype to choose: "
            + ", ".join(f"{' and '.join(map(str, w))} for {name}" for name, w in by.items()))


def _literal(key: str) -> str:
    """A template argument's key as a Python literal (``128``, ``True``, ``'Mode::Fast'``)."""
    if key.lstrip("-").isdigit():
        return key
    return {"true": "True", "false": "False"}.get(key, repr(key))


def family_overloads(specs: Sequence[Any], params: Mapping[str, list[str]], returns: Mapping[str, str]
                     ) -> tuple[list[str], list[str]]:
    """Each family's stub (given each member's stub ``params`` and ``returns``): module-level lines, and
    ``Module`` method lines.  One ``@overload`` per distinct signature (non-dtype template arguments as
    ``Literal`` keywords), a plain function if there is one: Python's types do not tell a float32 array
    from a float64 one, and identical overloads are an error to type checkers."""
    functions = {s.name: s for s in specs}
    body: list[str] = []
    methods: list[str] = []
    for name in family_names(specs):
        shared: dict[str, list[Member]] = {}
        members = family(functions, name)
        for m in members:
            own = params[m.name]
            star = own.index("*")
            tuned = functions[m.name].tune  # (optional: every value of the group, which timing chooses from)
            values = {p: dict.fromkeys(_literal(dict(o.static)[p]) for o in members) for p in tuned}
            full = [*own[:star + 1], *(f"{p}: Literal[{', '.join(values[p])}] = ..." if p in tuned else
                                       f"{p}: Literal[{_literal(v)}]" for p, v in m.static), *own[star + 1:]]
            shared.setdefault(f"{', '.join(full)}) -> {returns[m.name]}", []).append(m)
        deco = ["@overload"] if len(shared) > 1 else []  # (one alone is no overload)
        for signature, members in shared.items():
            runs = " or ".join(f"``{m.name}`` ({m.shown})" for m in members)
            how = ", whichever the dtypes of the inputs (or of ``out=``) fit" if len(members) > 1 else ""
            tuned = functions[members[0].name].tune
            how += f" ({', '.join(tuned)} left out: the fastest, by timing)" if tuned else ""
            body += [*deco, f"def {name}({signature}:", f'    """Runs {runs}{how}."""', "    ...", "", ""]
            methods += [*("    " + d for d in deco), f"    def {name}(self, {signature}: ..."]
    return body, methods
