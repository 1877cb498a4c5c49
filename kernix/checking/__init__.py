"""``kernix.check``: the checks that make a kernel a correct JAX operation.

One module per job: :mod:`~kernix.checking.subject` (the kernel, its
reference and the example), :mod:`~kernix.checking.compare` (tolerances, the
largest difference and where), :mod:`~kernix.checking.transforms` (eager,
jit, vmap, grad, sharding, export), :mod:`~kernix.checking.drawing` (inputs
drawn from the shape signature with hypothesis), :mod:`~kernix.checking.memory`
with :mod:`~kernix.checking.sanitized` (the kernel outside XLA on exact
buffers, under sanitizers, in a child process), :mod:`~kernix.checking.report` (the rows and
the error) and :mod:`~kernix.checking.api` (``check`` itself).
"""

from __future__ import annotations

from .api import check
from .compare import TOLERANCES
from .drawing import Drawing
from .report import CHECKS, CheckReport, CheckResult

__all__ = ["check", "Drawing", "CheckReport", "CheckResult", "CHECKS", "TOLERANCES"]
