"""What :func:`kernix.check` found: one :class:`CheckResult` per check, in a
:class:`CheckReport` that prints as a table and raises
:class:`~kernix.errors.CheckError` naming each failed check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Sequence

from ..errors import CheckError

__all__ = ["CHECKS", "CheckResult", "CheckReport", "Status"]

Status = Literal["passed", "failed", "n/a"]

#: Every check, in the order :func:`kernix.check` runs them, and what it compares.
CHECKS: dict[str, str] = {
    "eager": "the kernel called eagerly, against the reference",
    "jit": "the kernel under jax.jit, against the reference",
    "vmap": "jax.vmap of the kernel over a batch of examples, against the reference on each",
    "vmap_one_call": "jax.vmap over '...' dimensions compiles to one kernel call, no loop",
    "grad": "reverse-mode gradients (jax.vjp) against the reference's",
    "finite_differences": "reverse-mode gradients against finite differences (jax.test_util.check_grads)",
    "jvp": "forward-mode derivatives (jax.jvp, through the tangent kernel) against the reference's, and against "
           "finite differences (jax.test_util.check_grads)",
    "sharded": "jax.jit on inputs sharded over several devices, against one device",
    "export": "kernix.export, serialised and deserialised, against the reference",
    "buffers": "the kernel (and its backward kernel) run outside XLA on exact buffers under AddressSanitizer and "
               "UBSan in a child process: no access outside its buffers, no write into an input, every output "
               "element written, the same result each call, no crash",
    "drawn": "inputs drawn from the shape signature (hypothesis), against the reference",
}


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome.

    Attributes
    ----------
    name
        The check (a key of :data:`CHECKS`).
    status
        ``"passed"``, ``"failed"`` or ``"n/a"`` (not applicable).
    detail
        What was compared; for a failure, what differed (the parameter, the
        largest difference and its index); for ``"n/a"``, why.
    difference
        The largest absolute difference of a failure, when it has one.
    index
        Where the largest difference is, when it has one.
    parameter
        The input or output concerned, when one is.
    example
        For a failure of drawn inputs: the (shrunk) inputs that fail, as
        NumPy arrays, to reproduce it with.
    """

    name: str
    status: Status
    detail: str
    difference: float | None = None
    index: tuple[int, ...] | None = None
    parameter: str | None = None
    example: tuple[Any, ...] | None = None

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def failed(self) -> bool:
        return self.status == "failed"


class CheckReport(Sequence[CheckResult]):
    """Every check's :class:`CheckResult`, for one kernel.

    Index it by position or by check name (``report["grad"]``); ``str()``
    gives a table; :attr:`ok` says whether no check failed.
    """

    def __init__(self, function: str, results: Sequence[CheckResult]) -> None:
        self.function = function
        self.results = tuple(results)

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            for r in self.results:
                if r.name == key:
                    return r
            raise KeyError(f"no check {key!r} in this report; it has: {', '.join(r.name for r in self.results)}")
        return self.results[key]

    @property
    def ok(self) -> bool:
        """No check failed (checks that do not apply are not failures)."""
        return not self.failures

    @property
    def failures(self) -> list[CheckResult]:
        """The failed checks."""
        return [r for r in self.results if r.failed]

    def summary(self) -> str:
        count = {s: sum(r.status == s for r in self.results) for s in ("passed", "failed", "n/a")}
        return (f"kernix.check of {self.function}: {count['passed']} passed, {count['failed']} failed, "
                f"{count['n/a']} not applicable")

    def __str__(self) -> str:
        width = max((len(r.name) for r in self.results), default=0)
        return "\n".join([self.summary(), *(f"  {r.status:<6}  {r.name:<{width}}  {r.detail}" for r in self.results)])

    def __repr__(self) -> str:
        return f"<kernix.CheckReport {self.summary()}>"

    def error(self) -> CheckError:
        """The :class:`~kernix.errors.CheckError` naming each failed check."""
        failures = self.failures
        names = ", ".join(r.name for r in failures)
        lines = [f"{self.function} is not a correct JAX operation: {len(failures)} check(s) failed ({names})"]
        lines += [f"- {r.name}: {r.detail}" for r in failures]
        lines += ["", str(self)]
        return CheckError("\n".join(lines), self)
