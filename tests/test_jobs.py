"""How many jobs run at once (kernix/backend/jobs.py): an explicit count, then
$KERNIX_JOBS, then the CPUs the process may use; ``ninja -j`` and ``kernix
inspect -j`` follow it.  No compiler runs here: ninja is replaced."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from helpers import FIXTURES

from kernix.backend import jobs, ninja
from kernix.backend.flags import BuildConfig
from kernix.cli import main
from kernix.errors import CompilationError, OptionError


@pytest.fixture(autouse=True)
def _no_jobs_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KERNIX_JOBS", raising=False)


def test_the_variable_sets_the_count_and_an_explicit_count_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNIX_JOBS", " 3 ")
    assert jobs.parallel_jobs() == 3
    assert jobs.parallel_jobs(None) == 3 and jobs.parallel_jobs(0) == 3  # (0: not given, as `-j 0`)
    assert jobs.parallel_jobs(5) == 5


def test_without_the_variable_the_count_is_the_cpus_the_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = os.process_cpu_count() if hasattr(os, "process_cpu_count") else len(os.sched_getaffinity(0))
    assert jobs.parallel_jobs() == jobs.available_cpus() == expected
    monkeypatch.setenv("KERNIX_JOBS", "")  # empty: as unset
    assert jobs.parallel_jobs() == expected


def test_the_affinity_mask_comes_before_the_machine_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "process_cpu_count", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 5}, raising=False)
    assert jobs.available_cpus() == 2

    def refused(pid: int) -> set[int]:
        raise OSError("not supported")

    monkeypatch.setattr(os, "sched_getaffinity", refused, raising=False)
    assert jobs.available_cpus() == 64
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    assert jobs.available_cpus() == 64
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert jobs.available_cpus() == 1


def test_process_cpu_count_wins_where_python_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "process_cpu_count", lambda: 7, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert jobs.parallel_jobs() == 7


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5", "4_0", "+3", "²"])
def test_a_bad_value_is_an_error_naming_the_variable_with_a_fix_that_works(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("KERNIX_JOBS", value)
    with pytest.raises(OptionError, match=re.escape(f"KERNIX_JOBS={value!r} is not a positive whole number")) as info:
        jobs.parallel_jobs()
    suggested = re.search(r"such as KERNIX_JOBS=(\S+)", str(info.value))
    assert suggested is not None, str(info.value)
    monkeypatch.setenv("KERNIX_JOBS", suggested.group(1))
    assert jobs.parallel_jobs() == int(suggested.group(1))
    assert jobs.parallel_jobs(2) == 2  # an explicit count never reads the variable


def _ninja_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workers: int | None) -> list[str]:
    """The ninja command :func:`kernix.backend.ninja.compile_library` runs (ninja replaced by a failure)."""
    monkeypatch.setattr(ninja, "run_ninja", lambda cmd, progress, *_: (1, "stopped here"))
    with pytest.raises(CompilationError) as info:
        ninja.compile_library(tmp_path / "build", [], BuildConfig(platform="cpu"), workers=workers, name="jobs")
    assert info.value.output == "stopped here"
    return list(info.value.command)


def test_ninja_runs_with_the_count(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KERNIX_JOBS", "3")
    assert _ninja_command(monkeypatch, tmp_path, None)[-1] == "-j3"
    assert _ninja_command(monkeypatch, tmp_path, 2)[-1] == "-j2"  # ninja_workers= wins
    monkeypatch.delenv("KERNIX_JOBS")
    assert _ninja_command(monkeypatch, tmp_path, None)[-1] == f"-j{jobs.available_cpus()}"


def test_a_bad_value_stops_a_build_before_ninja_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KERNIX_JOBS", "all")
    ran = []
    monkeypatch.setattr(ninja, "run_ninja", lambda cmd, progress, *_: ran.append(cmd) or (0, ""))
    with pytest.raises(OptionError, match="KERNIX_JOBS='all'"):
        ninja.compile_library(tmp_path / "build", [], BuildConfig(platform="cpu"), name="jobs")
    assert ran == []


def test_inspect_reports_a_bad_value(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KERNIX_JOBS", "many")
    assert main(["inspect", "--no-cache", str(FIXTURES / "rules.cpp")]) == 2
    assert "KERNIX_JOBS='many' is not a positive whole number" in capsys.readouterr().err


@pytest.mark.parametrize("text, quota", [("150000 100000\n", 2), ("400000 100000", 4), ("max 100000", None),
                                         ("", None), ("garbage", None)])
def test_the_cgroup_cpu_quota_bounds_the_count(text: str, quota: int | None, tmp_path, monkeypatch) -> None:
    """``docker --cpus 1.5`` writes "150000 100000" to the cgroup's cpu.max: 2 jobs on a 64-CPU host."""
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text(text)
    assert jobs.cpu_quota(str(cpu_max)) == quota
    monkeypatch.delenv("KERNIX_JOBS", raising=False)
    monkeypatch.setattr(jobs, "CPU_MAX", str(cpu_max))
    monkeypatch.setattr(os, "process_cpu_count", lambda: 64, raising=False)
    assert jobs.parallel_jobs() == (64 if quota is None else quota)
    assert jobs.cpu_quota(str(tmp_path / "missing")) is None
