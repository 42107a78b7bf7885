"""run-local's console: one line per event, and everything else into a log file.

Under ``kfp.local`` every task's whole output reaches the terminal: its executor input
as JSON, TensorFlow's C++ start-up lines (no CUDA driver, ``cuInit`` failing on a
machine without a GPU), each worker's log. ``make run`` printed ~950 lines that way.
:class:`Console` sends file descriptors 1 and 2 (this process's and, inherited, every
task's) to the log file and reads that file as it grows, printing one line for each
event a newcomer follows: a copy, a task or attempt started, training steps, the
notice, the save on it, the attempt's end, KFP's retry, the end.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SAY = ">>> "  # the prefix of run-local's own lines in the log
_CHIEF = r"\[chief-0\] "  # the launcher's prefix of the chief's lines (workers repeat them)


def _events() -> list[tuple[re.Pattern, Callable[[re.Match, Console], str | None]]]:
    def task_started(m: re.Match, c: Console) -> str:
        task = m["task"]
        c.task = task
        c.attempts[task] = c.attempts.get(task, 0) + 1
        n = c.attempts[task]
        return f"{task}: started" if n == 1 else f"{task}: attempt {n} started"

    def finished(m: re.Match, c: Console) -> str:
        task, status = m["task"], m["status"]
        if status == "SUCCESS":
            return f"{task}: done"
        return f"{task}: attempt {c.attempts.get(task, 1)} ended ({status.lower()})"

    table = [
        ("^" + re.escape(_SAY) + "(?P<said>.*)", lambda m, c: m["said"]),
        (r"Executing task '(?P<task>[^']+)'", task_started),
        (r"Task '(?P<task>[^']+)' finished with status (?P<status>\w+)", finished),
        (
            r"Task (?P<task>\S+) failed \(attempt (?P<n>\d+)/(?P<of>\d+)\)\. "
            r"Retrying in (?P<s>\S+?)\.*$",
            lambda m, c: (
                f"{m['task']}: KFP retries it in {m['s']} (attempt {int(m['n']) + 1} of {m['of']})"
            ),
        ),
        (
            r"copied (?P<n>\d+) files \((?P<size>[^)]*)\), skipped (?P<skipped>\d+) identical, "
            r"refused (?P<refused>\d+) in (?P<s>[\d.]+) s",
            lambda m, c: (
                f"{c.task or 'upload'}: copied {m['n']} files ({m['size']}) in {m['s']} s"
                + (f", {m['refused']} refused" if m["refused"] != "0" else "")
            ),
        ),
        (
            r"\[launcher\] started (?P<n>\d+) worker",
            lambda m, c: (
                f"{c.task}: {m['n']} worker(s) starting (TensorFlow's start-up takes a while)"
            ),
        ),
        (
            _CHIEF + r"start_step=(?P<start>\d+) total_steps=(?P<total>\d+)",
            lambda m, c: f"{c.task}: training from step {m['start']} of {m['total']}",
        ),
        (
            _CHIEF + r"step (?P<step>\d+)/(?P<total>\d+) (?P<loss>loss=\S+)",
            lambda m, c: f"{c.task}: step {m['step']}/{m['total']} {m['loss']}",
        ),
        (
            r"\[launcher\] chaos: sending (?P<sig>SIG\w+) to (?P<who>\S+) at step (?P<step>\d+)",
            lambda m, c: (
                f"{c.task}: notice: {m['sig']} to {m['who']} at step {m['step']} "
                "(the injected preemption)"
            ),
        ),
        (
            _CHIEF + r".*trainer: saved \S+ at step (?P<step>\d+) \(preemption, (?P<ms>\d+ ms)",
            lambda m, c: f"{c.task}: saved step {m['step']} on the notice ({m['ms']})",
        ),
        (_CHIEF + r".*trainer: (?P<what>exit \d+: .*)", lambda m, c: f"{c.task}: {m['what']}"),
        (
            _CHIEF + r'.*trainer: done: \{"final_step": (?P<step>\d+)',
            lambda m, c: f"{c.task}: finished at step {m['step']}",
        ),
        (r"\[KFP Executor [^\]]* ERROR\]: (?P<what>.*)", lambda m, c: f"{c.task}: {m['what']}"),
        (
            r"Pipeline '(?P<name>[^']+)' finished with status (?P<status>\w+)",
            lambda m, c: f"pipeline {m['name']}: {m['status']}",
        ),
    ]
    return [(re.compile(p), f) for p, f in table]


class Console:
    """Sends fds 1 and 2 to ``log`` while open and prints the events in it to the terminal.

    With ``log`` None it only prints what :meth:`say` is given (everything else stays
    on the terminal as before).
    """

    def __init__(self, log: Path | None, stream: IO[str] | None = None):
        self.log = log
        self.task = ""
        self.attempts: dict[str, int] = {}
        self._stream = stream
        self._events = _events()
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._lock = threading.Lock()

    def say(self, message: str) -> None:
        """Prints one line to the terminal; while logging, through the log (in its order)."""
        if self.log is not None:
            print(f"{_SAY}{message}", flush=True)  # fd 1 is the log now: the reader prints it
        else:
            print(f"[{time.monotonic() - self._started:5.0f} s] {message}",
                  file=self._stream or sys.stdout, flush=True)  # fmt: skip

    def event(self, line: str) -> str | None:
        """The console line for one log line, or None when it is not an event."""
        text = _ANSI.sub("", line).strip()
        for pattern, describe in self._events:
            m = pattern.search(text)
            if m:
                return describe(m, self)
        return None

    def __enter__(self) -> Console:
        if self.log is None:
            return self
        for s in (sys.stdout, sys.stderr):
            s.flush()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._saved = (os.dup(1), os.dup(2))
        self._out = self._stream or os.fdopen(os.dup(self._saved[0]), "w", buffering=1)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        # Python's own writes too, line by line (sys.stdout need not be fd 1: pytest's
        # capture, a notebook), so the events come as they happen.
        self._sys = (sys.stdout, sys.stderr)
        sys.stdout = sys.stderr = os.fdopen(
            os.dup(1), "w", buffering=1, encoding="utf-8", errors="replace"
        )
        # The root logger's records (kfp.local's retries among them) into the log as
        # well, unless a handler already writes them to fd 1 or 2 (the CLI's).
        self._handler = None
        if not any(_to_fd_1_or_2(h) for h in logging.getLogger().handlers):
            self._handler = logging.StreamHandler(sys.stdout)
            self._handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
            logging.getLogger().addHandler(self._handler)
        self._reader = threading.Thread(target=self._follow, name="console", daemon=True)
        self._reader.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.log is None:
            return
        if self._handler is not None:
            logging.getLogger().removeHandler(self._handler)
        sys.stdout.flush()
        self._stop.set()
        self._reader.join(timeout=30)
        sys.stdout.close()
        sys.stdout, sys.stderr = self._sys
        for target, saved in zip((1, 2), self._saved, strict=True):
            os.dup2(saved, target)
            os.close(saved)
        if self._out is not self._stream:
            self._out.close()

    def _follow(self) -> None:
        """Reads the log as it grows; at the end, to its last byte."""
        pending = ""
        with open(self.log, encoding="utf-8", errors="replace") as f:
            while True:
                chunk = f.read()
                if not chunk:
                    if self._stop.is_set():
                        break
                    time.sleep(0.2)
                    continue
                pending += chunk
                *lines, pending = pending.split("\n")
                for line in lines:
                    self._print_event(line)
        if pending:
            self._print_event(pending)

    def _print_event(self, line: str) -> None:
        try:
            message = self.event(line)
        except Exception as err:  # noqa: BLE001 - a line we misread never stops the run
            message = f"(could not read a log line: {err})"
        if message:
            with self._lock:
                print(f"[{time.monotonic() - self._started:5.0f} s] {message}", file=self._out,
                      flush=True)  # fmt: skip


def _to_fd_1_or_2(handler: logging.Handler) -> bool:
    try:
        return handler.stream.fileno() in (1, 2)  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):  # no stream, or not a file's
        return False
