"""A build's progress (kernix/backend/progress.py) and its log line.

The display is tested on ninja-like output: lines fed by hand with a fake
clock, and a fake ninja (a Python script) read through a pty.  One tiny C++
module is built for the INFO line and the silence of a warm load."""

from __future__ import annotations

import io
import logging
import os
import pty
import re
import select
import subprocess
import sys
import textwrap
import threading
import time
import types
from pathlib import Path

import pytest
from helpers import unique_name

import kernix
from kernix.backend import progress
from kernix.backend.progress import BuildProgress, progress_style, run_ninja
from kernix.errors import OptionError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def _no_progress_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KERNIX_PROGRESS", raising=False)
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    monkeypatch.setenv("COLUMNS", "200")


def _shown(out: str) -> list[str]:
    """What a ``\\r``-rewritten line showed, each state in turn (padding dropped)."""
    return [s.rstrip() for s in re.split(r"[\r\n]", out) if s.strip()]


def test_one_line_rewritten_in_place_then_the_summary() -> None:
    clock, out = Clock(), io.StringIO()
    p = BuildProgress("module 'ops' (cpu)", True, out, clock=clock)
    clock.now += 0.5
    p.feed("[1/4] compile shim_0.cpp")
    p.tick()
    assert out.getvalue() == ""  # not before THRESHOLD_S
    clock.now += progress.THRESHOLD_S
    p.tick()
    clock.now += 0.2
    p.tick()  # the same second: nothing new
    p.feed("compiler chatter")  # not a status line
    p.feed("[2/4] compile handlers_0.cpp")
    clock.now += 1.0
    p.tick()
    p.feed("[12/14] compile shim_11.cpp")
    p.feed("[13/14] compile shim_9.cpp")
    assert _shown(out.getvalue()) == [
        "kernix: building module 'ops' (cpu) [1/4] 1 s",
        "kernix: building module 'ops' (cpu) [2/4] 1 s",
        "kernix: building module 'ops' (cpu) [2/4] 2 s",
        "kernix: building module 'ops' (cpu) [12/14] 2 s",
        "kernix: building module 'ops' (cpu) [13/14] 2 s",
    ]
    assert "\n" not in out.getvalue() and out.getvalue().count("\r") == 5
    assert "\x1b" not in out.getvalue()  # no escape codes: a notebook shows '\r' lines as a terminal does
    p.feed("[14/14] link module.so")
    assert (p.done, p.total, p.compiled) == (14, 14, 13)
    before = out.getvalue()
    p.finish("built module 'ops' (cpu): 13 of 13 units compiled in 2.50 s")
    end = out.getvalue()[len(before):]
    assert end.startswith("\r") and end.endswith("\n")
    assert end.strip() == "kernix: built module 'ops' (cpu): 13 of 13 units compiled in 2.50 s"
    assert len(end) - 2 >= len(_shown(before)[-1])  # covers the longer line it replaces


def test_the_line_is_cleared_when_the_build_fails() -> None:
    clock, out = Clock(), io.StringIO()
    p = BuildProgress("module 'ops' (cpu)", True, out, clock=clock)
    clock.now += 1.5
    p.feed("[1/2] compile shim_0.cpp")
    shown = out.getvalue()
    p.finish(None)
    end = out.getvalue()[len(shown):]
    assert re.fullmatch(r"\r +\r", end) and len(end) == len(_shown(shown)[-1]) + 2


def test_a_quick_build_shows_nothing() -> None:
    clock, out = Clock(), io.StringIO()
    p = BuildProgress("module 'ops' (cpu)", True, out, clock=clock)
    p.feed("[1/2] compile shim_0.cpp")
    clock.now += progress.THRESHOLD_S * 0.9
    p.tick()
    p.feed("[2/2] link module.so")
    p.finish("built it")
    assert out.getvalue() == ""


def test_verbose_echoes_ninja_and_ends_with_the_summary() -> None:
    out = io.StringIO()
    p = BuildProgress("module 'ops' (cpu)", False, out, echo=True)
    lines = ["[1/2] g++ -c shim_0.cpp -o shim_0.o", "shim_0.cpp:1: warning: x", "[2/2] g++ shim_0.o -o module.so"]
    for line in lines:
        p.feed(line)
    p.finish("built module 'ops' (cpu): 1 of 1 units compiled in 0.10 s")
    assert out.getvalue().splitlines() == [*lines, "kernix: built module 'ops' (cpu): 1 of 1 units compiled in 0.10 s"]
    assert p.compiled == 1  # the link found by its output in the command, too


def test_a_long_line_is_cut_to_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    clock, out = Clock(), io.StringIO()
    p = BuildProgress("module 'a_rather_long_module_name' (cuda)", True, out, clock=clock)
    clock.now += 2
    p.tick()
    (shown,) = _shown(out.getvalue())
    assert len(shown) == 39 and shown.endswith("...")


def test_the_line_shows_on_a_terminal_in_a_notebook_or_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty, os.fdopen(master, "rb"):
        assert progress_style(tty) is True
        assert progress_style(tty, verbose=True) is False  # verbose echoes ninja instead
        monkeypatch.setenv("KERNIX_PROGRESS", "0")
        assert progress_style(tty) is False
    piped = io.StringIO()
    monkeypatch.setenv("KERNIX_PROGRESS", "1")
    assert progress_style(piped) is True
    monkeypatch.delenv("KERNIX_PROGRESS")
    assert progress_style(piped) is False
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    assert progress_style(piped) is True  # a Jupyter kernel's stderr is no terminal, but shows '\r' lines


@pytest.mark.parametrize("value", ["yes", "2", "true"])
def test_a_bad_progress_value_is_an_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("KERNIX_PROGRESS", value)
    expected = f"KERNIX_PROGRESS={value!r} is neither 0 nor 1: set KERNIX_PROGRESS=1"
    with pytest.raises(OptionError, match=re.escape(expected)):
        progress_style(io.StringIO())
    monkeypatch.setenv("KERNIX_PROGRESS", "1")  # the fix it suggests
    assert progress_style(io.StringIO()) is True


# A stand-in for ninja: its status lines, a compiler's output with CRLF and a
# byte that is no UTF-8, pauses between steps, and a failure.
FAKE_NINJA = textwrap.dedent(
    """
    import os, sys, time
    out = sys.stdout.buffer
    out.write(("[1/3] compile shim_0.cpp NINJA_STATUS=" + repr(os.environ.get("NINJA_STATUS")) + "\\n").encode())
    out.flush()
    time.sleep(float(sys.argv[1]))
    out.write(b"shim_0.cpp:1:2: warning: caf\\xe9\\r\\nsecond\\rthird\\n[2/3] compile handlers_0.cpp\\n")
    out.flush()
    time.sleep(float(sys.argv[2]))
    sys.stderr.write("FAILED: module.so\\n")
    out.write(b"[3/3] link module.so")  # (no line break at the end)
    sys.exit(3)
    """
)


def _fake_ninja(tmp_path: Path, first_pause: float, second_pause: float) -> list[str]:
    script = tmp_path / "fake_ninja.py"
    script.write_text(FAKE_NINJA)
    return [sys.executable, str(script), str(first_pause), str(second_pause)]


def _read_all(fd: int) -> str:
    """What was written to a pty, read from its master side ``fd``."""
    data = b""
    while select.select([fd], [], [], 0.1)[0]:
        data += os.read(fd, 4096)
    return data.decode()


def test_ninja_is_read_as_it_runs_and_its_output_kept_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NINJA_STATUS", "%p ")  # a user's own format changes nothing
    cmd = _fake_ninja(tmp_path, 0.02, 0.02)
    seen: list[str] = []
    p = BuildProgress("module 'ops' (cpu)", False, io.StringIO())
    p.feed = seen.append  # type: ignore[method-assign]
    code, text = run_ninja(cmd, p)
    # What the build read before: subprocess.run(text=True, errors="replace") of ninja's stdout and stderr.
    before = subprocess.run(cmd, check=False, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", env={**os.environ, "NINJA_STATUS": progress.NINJA_STATUS})
    assert before.returncode == 3 and (code, text) == (before.returncode, before.stdout)
    assert "NINJA_STATUS='[%f/%t] '" in seen[0]
    # The lines fed are those of that text: a lone carriage return ends a line there too.
    assert seen[1:] == ["shim_0.cpp:1:2: warning: caf\ufffd", "second", "third", "[2/3] compile handlers_0.cpp",
                        "FAILED: module.so", "[3/3] link module.so"]


def test_the_line_updates_on_a_terminal_while_ninja_is_silent(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty, os.fdopen(master, "rb", buffering=0) as screen:
        p = BuildProgress("module 'ops' (cpu)", progress_style(tty), tty, threshold=0.2)
        code, _ = run_ninja(_fake_ninja(tmp_path, 1.3, 0.01), p)  # ninja silent past the first whole second
        assert code == 3
        assert p.wait_s() is not None and 0 < p.wait_s() <= 1.0
        p.finish(f"built module 'ops' (cpu): {p.compiled} of 2 units compiled in 1.40 s")
        shown = _read_all(screen.fileno())
    states = _shown(shown)
    assert "kernix: building module 'ops' (cpu) [1/3] 1 s" in states  # drawn by the timer alone
    assert states.index("kernix: building module 'ops' (cpu) [1/3] 1 s") < len(states) - 2
    assert re.fullmatch(r"kernix: building module 'ops' \(cpu\) \[3/3\] [12] s", states[-2])
    assert states[-1] == "kernix: built module 'ops' (cpu): 2 of 2 units compiled in 1.40 s"
    assert shown.count("\n") == 1 and shown.endswith("\n")  # one line, ended once (the pty adds its \r)


def test_ninja_is_stopped_when_reading_fails(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = tmp_path / "slow_ninja.py"
    script.write_text(f"import os, sys, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                      "print('[1/2] compile shim_0.cpp', flush=True)\ntime.sleep(60)\n")
    p = BuildProgress("module 'ops' (cpu)", False, io.StringIO())

    def interrupted(line: str) -> None:
        raise KeyboardInterrupt

    p.feed = interrupted  # type: ignore[method-assign]
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_ninja([sys.executable, str(script)], p)
    assert time.monotonic() - started < 30
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(int(pid_file.read_text()), 0)


def test_ninja_is_stopped_once_its_stop_event_is_set(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = tmp_path / "slow_ninja.py"
    script.write_text(f"import os, sys, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                      "print('[1/2] compile shim_0.cpp', flush=True)\ntime.sleep(60)\n")
    stop = threading.Event()
    timer = threading.Timer(0.5, stop.set)
    timer.start()
    started = time.monotonic()
    code, text = run_ninja([sys.executable, str(script)], BuildProgress("m", False, io.StringIO()), stop)
    assert code != 0 and "[1/2] compile shim_0.cpp" in text
    assert time.monotonic() - started < 30
    with pytest.raises(ProcessLookupError):  # stopped and reaped
        os.kill(int(pid_file.read_text()), 0)


SOURCE = textwrap.dedent(
    """\
    #include "kernix/common.h"
    // @BE twice
    void twice(const BE::Tensor& x, BE::Tensor& y) {
      for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = 2 * x.data_ptr<float>()[i];
    }
    """
)


def test_a_build_logs_one_info_line_and_a_warm_load_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    name = unique_name("progress_log")
    caplog.set_level(logging.INFO, logger="kernix")
    kernix.load_cpp_inline(name, SOURCE, build_directory=str(tmp_path), auto_register=False)
    infos = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert len(infos) == 1
    assert re.fullmatch(rf"built module '{name}' \(cpu\): 3 of 3 units compiled in \d+\.\d\d s", infos[0])
    assert capfd.readouterr().err == ""  # not a terminal, not asked: silent
    caplog.clear()
    kernix.load_cpp_inline(name, SOURCE, build_directory=str(tmp_path), auto_register=False)
    assert [r for r in caplog.records if r.levelno >= logging.INFO] == []
    assert capfd.readouterr().err == ""


def test_ninja_is_read_in_a_process_with_a_thousand_files_open(tmp_path: Path) -> None:
    """Reading ninja does not depend on the descriptor numbers: ``select.select`` refuses one past 1023."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip(f"the hard limit of open files here is {hard}: a descriptor past 1023 needs 1100")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1100), hard))
    held = []
    try:
        while not held or held[-1] < 1030:
            held.append(os.open(os.devnull, os.O_RDONLY))
        code, text = run_ninja(_fake_ninja(tmp_path, 0.01, 0.01), BuildProgress("m", False, io.StringIO()))
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert code == 3 and "[3/3] link module.so" in text


def test_a_closed_stream_stops_the_display_not_the_build() -> None:
    stream = io.StringIO()
    p = BuildProgress("module 'ops' (cpu)", True, stream, threshold=0.0)
    stream.close()
    p.feed("[1/2] compile shim_0.cpp")  # would raise ValueError: I/O operation on closed file
    p.finish("built module 'ops' (cpu): 1 of 1 units compiled in 0.10 s")
    assert p.stream is None
