"""How many jobs kernix runs at once (``ninja -j``, ``kernix inspect``'s parses): :func:`parallel_jobs`; the
user's account of the rule: ``KERNIX_JOBS`` in docs/reference/environment.rst."""

from __future__ import annotations

import math
import os

from ..errors import OptionError

__all__ = ["CPU_MAX", "JOBS_VARIABLE", "available_cpus", "cpu_quota", "parallel_jobs"]

#: The environment variable that sets the default number of parallel jobs.
JOBS_VARIABLE = "KERNIX_JOBS"

#: The cgroup v2 file holding the CPU quota of this process's cgroup (``"<quota> <period>"`` or ``"max ..."``).
CPU_MAX = "/sys/fs/cgroup/cpu.max"


def available_cpus() -> int:
    """The CPUs this process may run on (at least 1), at most :func:`cpu_quota`."""
    process_cpu_count = getattr(os, "process_cpu_count", None)
    if process_cpu_count is not None:
        cpus = process_cpu_count() or 1
    else:
        try:
            cpus = len(os.sched_getaffinity(0)) or 1
        except (AttributeError, OSError):  # (not on every platform)
            cpus = os.cpu_count() or 1
    quota = cpu_quota()
    return cpus if quota is None else max(1, min(cpus, quota))


def cpu_quota(path: str | None = None) -> int | None:
    """The CPUs' worth of time the process's cgroup may use (its ``cpu.max``
    quota over its period, rounded up), or ``None`` without a quota.
    ``path``: the file to read (default :data:`CPU_MAX`)."""
    try:
        with open(path or CPU_MAX) as f:
            quota, period = f.read().split()[:2]
        return math.ceil(int(quota) / int(period)) if quota != "max" and int(period) > 0 else None
    except (OSError, ValueError):  # no cgroup v2 here, or a file not as documented
        return None


def parallel_jobs(explicit: int | None = None) -> int:
    """The number of jobs to run at once: ``explicit`` (``ninja_workers=``, ``-j``)
    when a positive int, else ``$KERNIX_JOBS``, else :func:`available_cpus`.

    Raises :class:`kernix.OptionError` when ``$KERNIX_JOBS`` is set but is not a
    positive whole number.
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
