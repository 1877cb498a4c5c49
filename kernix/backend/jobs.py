"""How many jobs kernix runs at once: one answer for every parallel step.

``ninja -j`` (and so how the handlers are split into units, see
:func:`kernix.backend.ninja.handler_chunks`) and ``kernix inspect``'s parse
processes all ask :func:`parallel_jobs`.  In order:

1. the explicit count a caller passed (``ninja_workers=``, ``-j N``);
2. ``$KERNIX_JOBS``, a positive whole number (anything else is an error
   naming the variable, never a silent fallback);
3. the CPUs this process may run on: :func:`os.process_cpu_count` on Python
   3.13+ (which also honours ``-X cpu_count``), else the size of its CPU
   affinity mask (:func:`os.sched_getaffinity`; ``taskset``, cgroup
   ``cpuset``, a batch scheduler's allocation), else :func:`os.cpu_count`.
"""

from __future__ import annotations

import os

from ..errors import OptionError

__all__ = ["JOBS_VARIABLE", "available_cpus", "parallel_jobs"]

#: The environment variable that sets the default number of parallel jobs.
JOBS_VARIABLE = "KERNIX_JOBS"


def available_cpus() -> int:
    """The number of CPUs this process may run on (at least 1).

    Returns
    -------
    int
        :func:`os.process_cpu_count` where it exists (Python 3.13+), else the
        size of the process's CPU affinity mask, else :func:`os.cpu_count`.
    """
    process_cpu_count = getattr(os, "process_cpu_count", None)
    if process_cpu_count is not None:
        return process_cpu_count() or 1
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # (not on every platform)
        return os.cpu_count() or 1


def parallel_jobs(explicit: int | None = None) -> int:
    """The number of jobs to run at once.

    Parameters
    ----------
    explicit : int, optional
        A count the caller was given (``ninja_workers=``, ``-j``); wins when
        it is a positive int.  ``None`` or ``0``: not given.

    Returns
    -------
    int
        ``explicit``, else ``$KERNIX_JOBS``, else :func:`available_cpus`.

    Raises
    ------
    kernix.OptionError
        When ``$KERNIX_JOBS`` is set (and not empty) but is not a positive
        whole number.
    """
    if explicit is not None and explicit > 0:
        return explicit
    raw = os.environ.get(JOBS_VARIABLE, "").strip()
    if not raw:
        return available_cpus()
    value = int(raw) if raw.isascii() and raw.isdigit() else 0
    if value < 1:
        raise OptionError(
            f"{JOBS_VARIABLE}={os.environ[JOBS_VARIABLE]!r} is not a positive whole number of parallel jobs: "
            f"set it to a count such as {JOBS_VARIABLE}={available_cpus()} (the CPUs this process may use), "
            f"or unset it to use them all"
        )
    return value
