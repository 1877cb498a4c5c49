"""The exceptions kernix raises.

Every error kernix raises on purpose is a :class:`KernixError`, so callers can
catch the whole family with one ``except`` clause.  Errors about a place in a
source file carry that place (:attr:`SourceError.file`, ``line``, ``column``)
and put it at the front of the message in the ``FILE:LINE:COL: message`` form
that compilers and editors understand.
"""

from __future__ import annotations

class KernixError(Exception):
    """Base class of every error kernix raises on purpose."""


class ArgSpecError(KernixError, ValueError):
    """An arg_spec token list is malformed (unknown token, bad dtype, ...)."""


class OptionError(KernixError, TypeError, ValueError):
    """A loader was given an option it does not take, or a value it cannot use."""


class InvalidNameError(KernixError, ValueError):
    """A module name, target prefix or function name is not acceptable."""


class SourceNotFoundError(KernixError, FileNotFoundError):
    """A source file or directory to load does not exist (or is not a file / directory)."""


class CallError(KernixError, TypeError):
    """A kernel was called with the wrong inputs or attributes."""


class KernelRuntimeError(KernixError, RuntimeError):
    """A kernel called eagerly on the CPU reported an error as it ran: a ``BE::Error``, a failed ``BE_CHECK``,
    ``data_ptr<T>()`` of a tensor of another dtype, or a returned ``xla::ffi::Error``.

    The message is XLA's (its error code, then ``kernix: <function>: `` and the kernel's text); the
    ``JaxRuntimeError`` it replaces is its ``__cause__``. Under ``jax.jit``, and on a GPU (where a call
    returns before its work runs), the kernel runs when XLA runs the computation, so the error stays JAX's
    ``JaxRuntimeError`` (a ``RuntimeError`` too), with the same text, raised where the result is used."""


class CheckError(KernixError, AssertionError):
    """:func:`kernix.check` found a kernel that is not a correct JAX operation.

    An :class:`AssertionError` too, so a plain ``kernix.check(...)`` in a
    test fails the test with the message: each failed check, what differed and
    where.

    Attributes
    ----------
    report
        The :class:`kernix.CheckReport`, every check's row.
    """

    def __init__(self, message: str, report: object = None) -> None:
        super().__init__(message)
        self.report = report


class SignatureError(ArgSpecError):
    """A shape signature (``(m,k),(k,n)->(m,n)``) is malformed."""


class SourceError(KernixError):
    """An error tied to a place in a source file.

    Parameters
    ----------
    message
        What is wrong and how to fix it.
    file, line, column
        Where it is; ``line`` and ``column`` are 1-based, 0 when unknown.
    function, parameter
        The function and parameter concerned, when there is one.
    reason
        A short machine-readable cause, for code that acts on one kind of
        error: ``"not_declared"`` (a name ``functions=`` asks for that the
        file does not declare, which a module of several sources looks up in
        the others), or ``"declared_in_header"`` (the same, where a header
        the file includes declares it); ``None`` for the rest.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str = "",
        line: int = 0,
        column: int = 0,
        function: str | None = None,
        parameter: str | None = None,
        reason: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.column = column
        self.function = function
        self.parameter = parameter
        self.reason = reason
        super().__init__(self.format())

    def location(self) -> str:
        """``FILE:LINE:COL`` (the parts that are known)."""
        where = self.file or "<source>"
        if self.line:
            where += f":{self.line}"
            if self.column:
                where += f":{self.column}"
        return where

    def format(self) -> str:
        """Return ``FILE:LINE:COL: message`` (the place parts that are known)."""
        return f"{self.location()}: {self.message}"

    #: The keyword parameters, each kept as the attribute of its name.
    _FIELDS = ("file", "line", "column", "function", "parameter", "reason")

    def to_json(self) -> dict[str, object]:
        """The error as a JSON object (``message``, ``file``, ``line``, ``column``,
        ``function``, ``parameter``, and ``reason`` where there is one), as the
        spec cache and ``kernix inspect --json`` hold it."""
        data = {k: getattr(self, k) for k in ("message", *self._FIELDS)}
        if self.reason is None:
            del data["reason"]
        return data

    @classmethod
    def from_json(cls, data: dict[str, object]) -> SourceError:
        """The error of a :meth:`to_json` record."""
        return cls(data["message"], **{k: data[k] for k in cls._FIELDS if k in data})  # type: ignore[arg-type]


class InferenceError(SourceError):
    """An annotated signature could not be turned into an arg_spec.

    Holds every problem found in one translation unit in :attr:`errors`, so
    one run reports them all; the exception's message lists each on its own
    line.
    """

    def __init__(self, errors: list[SourceError]) -> None:
        if not errors:
            raise KernixError("InferenceError needs at least one error")
        self.errors = list(errors)
        first = self.errors[0]
        super().__init__(first.message, **{k: getattr(first, k) for k in self._FIELDS})

    def format(self) -> str:  # noqa: D102 - see SourceError.format
        return "\n".join(SourceError.format(e) for e in self.errors)


class CompilationError(KernixError):
    """The compiler or linker failed.

    Attributes
    ----------
    output
        What the compiler printed (its diagnostics name the user's file).
    command
        The failing command, as an argument list, when known.
    """

    def __init__(self, message: str, output: str = "", command: list[str] | None = None) -> None:
        self.output = output
        self.command = command
        text = message
        if output:
            text += "\n" + output.rstrip()
        super().__init__(text)


class ToolchainError(KernixError):
    """A compiler, header set or GPU architecture could not be found."""


class CacheError(KernixError):
    """The build cache cannot be used (permissions, space, damage)."""


class PrebuiltError(KernixError):
    """A prebuilt module that cannot be used here.

    Attributes
    ----------
    reason
        A short machine-readable cause: ``"missing"``, ``"format"``,
        ``"trust"``, ``"stale"``, ``"version"``, ``"hash"``, ``"ffi_api"``,
        ``"platform"``, ``"arch"`` or ``"load"``.
    """

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class RegistrationError(KernixError):
    """An FFI target could not be registered with JAX."""


class AnnotationWarning(KernixError, UserWarning):
    """A comment that looks like a ``// @BE`` annotation but is not one
    (``// @Be f``, ``/* @BE f */``, ``/// @BE f``): the function it seems to
    export is not exported.  The message names the file and line and what to
    write instead.  A :class:`KernixError` too, so that with warnings turned
    into errors it is caught like the others."""


class ReloadWarning(KernixError, UserWarning):
    """Code was loaded under an FFI target name that this process had already
    registered with other code (a module edited and loaded again under the
    same name).  XLA cannot replace a registered handler, so the plain name
    ``"<prefix>.<function>"`` keeps running the code first loaded, and the
    new module's functions call the new code under its content-versioned name
    ``"<prefix>.<function>@<12 hex digits>"`` (``module.targets`` gives it).
    Issued once per target name; the message names the new names, for code
    that calls the target through ``jax.ffi.ffi_call`` itself.  A
    :class:`KernixError` too, like :class:`AnnotationWarning`."""


class TuningWarning(KernixError, UserWarning):
    """A variant of a ``tune=`` template was left out of the timing: it failed, or its results disagreed
    with the other variants'; or no timing could be made.  The message names the variant."""


# brainevent's names for the same errors, as aliases (docs/coming-from-brainevent.rst says why).
BrainEventError = KernixError
KernelError = KernixError
KernelCompilationError = CompilationError
KernelToolchainError = ToolchainError
NvccNotFoundError = ToolchainError
HostCompilerNotFoundError = ToolchainError
HeaderNotFoundError = ToolchainError
GpuArchDetectionError = ToolchainError
UnsupportedArchError = ToolchainError
KernelLoadError = RegistrationError
KernelRegistrationError = RegistrationError

#: Every class above and each alias is public.
__all__ = [name for name, value in globals().items() if isinstance(value, type)]
