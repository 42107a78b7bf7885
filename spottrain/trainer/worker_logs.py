"""The local launcher's console: one line per event, each worker's whole log in a file.

Two workers print 160–460 lines a run, mostly TensorFlow's and absl's INFO lines twice
over. :func:`is_event` keeps what a user follows: the chief's steps and saves, a save
that ends the attempt on every worker (each must make it), every warning and error,
a hang report. Everything, events included, goes to ``<log dir>/<worker>.log``; a
worker that ends badly without its one ``exit N:`` line (a crash) gets its last lines
printed, where a traceback ends.
"""

from __future__ import annotations

import collections
import os
import re
import tempfile
import time
from typing import IO

# The trainer's logging format (task.py): "2026-11-28 13:39:17,427 INFO trainer: ...".
_LOGGED = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<level>[A-Z]+) (?P<name>\S+): (?P<msg>.*)"
)
# TensorFlow's C++ lines (absl): I/W/E/F, then MMDD.
_NATIVE = re.compile(r"^[IWEF]\d{4} ")
# The chief's own INFO lines that are events (its peers repeat them).
_CHIEF_INFO = ("first step done", "done: ", "saved ", "model: ", "restored ", "attempt ")
# A save in the background does not end the attempt: the chief's line is enough.
_BACKGROUND = "writing in the background)"
# The trainer's one line for how an attempt ended ("exit 64: ...").
_EXIT_LINE = re.compile(r" trainer: exit \d+: ")
# Noise no tail shows: TensorFlow's C++ lines and absl's note before its logging starts.
_ABSL_NOTE = "WARNING: All log messages before absl::InitializeLog()"
TAIL_LINES = 15


def is_event(line: str, chief: bool) -> bool:
    """Whether a worker's log line is shown on the console (``chief``: it is the chief's)."""
    text = line.rstrip("\n")
    # The step loop's own prints (fit's loop: an epoch's line, an early stop).
    if text.startswith(("step ", "start_step=", "epoch ", "stopped early ")):
        return chief
    if text.startswith("HANG"):  # watchdog's report
        return True
    m = _LOGGED.match(text)
    if m is None:
        # TensorFlow's C++ lines but a fatal one; tracebacks and other prints are in the
        # tail a bad ending prints.
        return text.startswith("F") and bool(_NATIVE.match(text))
    if m["level"] in ("WARNING", "ERROR", "CRITICAL"):
        return True
    msg = m["msg"]
    if msg.startswith("saved ") and not msg.endswith(_BACKGROUND):
        return True  # a notice's or the final save, waited for: every worker's
    return (
        chief
        and m["name"].startswith(("trainer", "spottrain.trainer"))
        and (msg.startswith(_CHIEF_INFO))
    )


def default_dir(output_dir: str) -> str:
    """``<output_dir>/worker-logs`` for a local output dir, else a new temporary folder."""
    if output_dir and "://" not in output_dir:
        return os.path.join(output_dir, "worker-logs")
    return tempfile.mkdtemp(prefix="spottrain-worker-logs-")


class WorkerLog:
    """One worker's log file (appended: a retry's launch keeps the attempt before it)."""

    def __init__(self, folder: str, name: str, chief: bool):
        os.makedirs(folder, exist_ok=True)
        self.path = os.path.join(folder, f"{name}.log")
        self.chief = chief
        self._file: IO[str] = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self._file.write(f"== launched {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        # The last lines the console did not show, but TensorFlow's C++ ones.
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.said_exit = False  # the trainer's own "exit N:" line was shown

    def write(self, line: str) -> bool:
        """Writes ``line`` (no newline); returns whether the console shows it."""
        self._file.write(line + "\n")
        self._file.flush()
        shown = is_event(line, self.chief)
        if shown:
            self.said_exit = self.said_exit or bool(_EXIT_LINE.search(line))
        elif not _NATIVE.match(line) and not line.startswith(_ABSL_NOTE):
            self.tail.append(line)
        return shown

    def crash_tail(self) -> list[str]:
        """The last lines not shown, when the trainer did not say how it ended (a crash)."""
        return [] if self.said_exit else list(self.tail)

    def close(self) -> None:
        """Closes the file (the worker's output has ended)."""
        self._file.close()
