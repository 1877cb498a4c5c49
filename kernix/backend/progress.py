"""What a build shows while ninja runs (the user's account: docs/reference/compiler-options.rst), read from
ninja's own status lines: :func:`run_ninja` hands each line to a :class:`BuildProgress`, which rewrites its
one stderr line in place with ``\\r`` (no terminal escapes, so notebooks render it too)."""

from __future__ import annotations

import locale
import os
import re
import selectors
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from ..errors import OptionError

__all__ = ["NINJA_STATUS", "PROGRESS_VARIABLE", "THRESHOLD_S", "BuildProgress", "progress_style", "run_ninja"]

#: Seconds a build runs before its progress is shown.
THRESHOLD_S = 1.0

#: The environment variable that turns progress on (``1``) or off (``0``).
PROGRESS_VARIABLE = "KERNIX_PROGRESS"

#: The status prefix ninja is told to print (its default, set so that a
#: user's own ``$NINJA_STATUS`` changes neither the progress nor error reports).
NINJA_STATUS = "[%f/%t] "

_STOP_POLL_S = 0.02  # seconds between two looks at a build's `stop` event
_STATUS_RE = re.compile(r"\[(\d+)/(\d+)\] ")


def progress_style(stream: TextIO, *, verbose: bool = False) -> bool:
    """Whether a build shows its progress line on ``stream``: on a terminal, in a
    Jupyter kernel or with ``$KERNIX_PROGRESS=1``; never with ``verbose`` or
    ``$KERNIX_PROGRESS=0`` (anything else is an :class:`kernix.OptionError`).
    """
    raw = os.environ.get(PROGRESS_VARIABLE, "").strip()
    if raw not in ("", "0", "1"):
        raise OptionError(
            f"{PROGRESS_VARIABLE}={os.environ[PROGRESS_VARIABLE]!r} is neither 0 nor 1: set {PROGRESS_VARIABLE}=1 "
            "to show build progress on stderr also when it is not a terminal, 0 to never show it, or unset it "
            "to show it on terminals and in notebooks"
        )
    if verbose or raw == "0":
        return False
    try:
        return raw == "1" or "ipykernel" in sys.modules or stream.isatty()
    except (AttributeError, ValueError, OSError):  # (a replaced or closed stream)
        return False


class BuildProgress:
    """The progress of one ninja run, fed its output lines.

    ``what`` names the build (``"module 'ops' (cpu)"``); ``show`` whether to show
    the line; ``echo`` copies every output line to ``stream``; nothing else shows
    before ``threshold`` seconds of ``clock``.
    """

    def __init__(
        self,
        what: str,
        show: bool,
        stream: TextIO,
        *,
        echo: bool = False,
        threshold: float = THRESHOLD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what, self.show, self.stream, self.echo = what, show, stream, echo
        self.threshold, self.clock = threshold, clock
        self.started = clock()
        self.done = 0
        self.total: int | None = None
        self.linked = False
        self._shown = ""  # the text on the line, "" while none is shown

    @property
    def compiled(self) -> int:
        """Compile steps finished so far (finished steps but the link)."""
        return self.done - self.linked

    def elapsed(self) -> float:
        """Seconds since the build started."""
        return self.clock() - self.started

    def feed(self, line: str) -> None:
        """Take one line of ninja's output (without its line break)."""
        if self.echo:
            self._write(line + "\n")
        m = _STATUS_RE.match(line)
        if m is None:
            return
        self.done, self.total = int(m.group(1)), int(m.group(2))
        # The link's description is "link module.so"; with -v its command ends "-o module.so".
        self.linked = self.linked or line.rstrip().endswith("module.so")
        self.tick()

    def tick(self) -> None:
        """Show the line, if it is time to."""
        if not self.show or self.elapsed() < self.threshold:
            return
        counts = f" [{self.done}/{self.total}]" if self.total is not None else ""
        text = f"kernix: building {self.what}{counts} {int(self.elapsed())} s"
        width = shutil.get_terminal_size().columns - 1
        text = text if len(text) <= width else text[:max(width - 3, 0)] + "..."
        if text != self._shown:
            self._write("\r" + text.ljust(len(self._shown)))
            self._shown = text

    def wait_s(self) -> float | None:
        """Seconds until :meth:`tick` has something new to show (``None``: never)."""
        if not self.show:
            return None
        elapsed = self.elapsed()
        return self.threshold - elapsed if elapsed < self.threshold else 1.0 - elapsed % 1.0

    def finish(self, summary: str | None) -> None:
        """End the display: the line (if shown) is replaced by ``summary``, or cleared when it is ``None``
        (a failed build, whose error says the rest); with ``echo`` the summary is printed too."""
        text = f"kernix: {summary}" if summary is not None else ""
        if self._shown:
            self._write("\r" + text.ljust(len(self._shown)) + ("\n" if text else "\r"))
        elif text and self.echo:
            self._write(text + "\n")
        self._shown = ""

    def _write(self, text: str) -> None:
        if self.stream is None:  # (sys.stderr is None under pythonw and some service managers)
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: the display stops, never the build
            self.stream = None


def run_ninja(cmd: Sequence[str], progress: BuildProgress, stop: threading.Event | None = None,
              started: Callable[[], None] | None = None) -> tuple[int, str]:
    """Run ninja (``cmd``), feeding ``progress`` each output line as it comes,
    calling ``started`` once it runs and stopping it once ``stop`` is set.

    Returns ninja's exit status and its whole output, decoded with ``errors="replace"``.
    """
    env = {**os.environ, "NINJA_STATUS": NINJA_STATUS}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    if started is not None:
        started()
    assert proc.stdout is not None
    encoding = locale.getpreferredencoding(False)
    chunks: list[bytes] = []
    pending = b""
    try:
        with selectors.DefaultSelector() as selector:  # (select.select fails on a descriptor past 1023)
            selector.register(proc.stdout, selectors.EVENT_READ)
            while stop is None or not stop.is_set():
                wait = progress.wait_s()
                if stop is not None:
                    wait = _STOP_POLL_S if wait is None else min(wait, _STOP_POLL_S)
                if selector.select(wait):
                    data = os.read(proc.stdout.fileno(), 65536)
                    if not data:
                        break
                    chunks.append(data)
                    *lines, pending = (pending + data).split(b"\n")
                    for line in lines:
                        _feed(progress, line, encoding)
                progress.tick()
        if stop is not None and stop.is_set():
            _stop(proc)
        if pending:
            _feed(progress, pending, encoding)
        returncode = proc.wait()
    except BaseException:  # (KeyboardInterrupt included: no ninja, nor a compiler it started, is left running)
        _stop(proc)
        raise
    finally:
        proc.stdout.close()
    return returncode, _text(b"".join(chunks), encoding)


def _text(data: bytes, encoding: str) -> str:
    """``data`` decoded as :func:`subprocess.run` with ``text=True, errors="replace"`` decodes it."""
    return data.decode(encoding, "replace").replace("\r\n", "\n").replace("\r", "\n")


def _feed(progress: BuildProgress, line: bytes, encoding: str) -> None:
    """Feed one line of output (a ``\\r`` inside it ends a line too, as in the text :func:`_text` gives)."""
    for part in _text(line.rstrip(b"\r"), encoding).split("\n"):
        progress.feed(part)


def _stop(proc: subprocess.Popen) -> None:
    """Stop ninja: SIGTERM first, which ninja passes on to the compilers it runs, then SIGKILL."""
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
