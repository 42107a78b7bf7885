"""Hang watchdog: a stuck job prints nothing and burns money, so make it speak and stop.

A daemon thread watches the step heartbeat. When no step finishes within
``--hang-timeout`` seconds (``--startup-timeout`` before the first step, which
also covers a peer that never arrives and MWMS waits on forever), it dumps
every thread's Python stack with ``py-spy dump`` (needs ptrace: add
``SYS_PTRACE`` to the pod's capabilities on Kubernetes) or, failing that,
``faulthandler``, to the log and to a file, then exits with HUNG (171) so the
orchestrator retries instead of paying for an idle GPU.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from trainer.preemption import HUNG

log = logging.getLogger(__name__)


def dump_stacks(pid: int | None = None, timeout_s: float = 20.0) -> tuple[str, str]:
    """Returns (tool, text) with every thread's stack of process ``pid`` (default: this one)."""
    pid = pid or os.getpid()
    py_spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.path.exists(py_spy):
        try:
            proc = subprocess.run(
                [py_spy, "dump", "--pid", str(pid)],
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
            if proc.returncode == 0 and proc.stdout.strip():
                return "py-spy", proc.stdout
            reason = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            log.warning("py-spy dump failed (%s); using faulthandler", reason[0])
        except (OSError, subprocess.TimeoutExpired) as e:
            log.warning("py-spy dump failed (%s); using faulthandler", e)
    if pid != os.getpid():
        return "none", f"cannot dump process {pid} without py-spy"
    # faulthandler writes to a real file descriptor only.
    with tempfile.TemporaryFile("w+") as f:
        faulthandler.dump_traceback(file=f, all_threads=True)
        f.seek(0)
        return "faulthandler", f.read()


class Watchdog:
    """Exits the process with HUNG when the heartbeat stops."""

    def __init__(
        self,
        hang_timeout_s: float,
        startup_timeout_s: float,
        dump_path: str,
        name: str,
        exit_fn=os._exit,
    ):
        self.hang_timeout_s = hang_timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.dump_path = dump_path
        self.name = name
        self._exit = exit_fn
        self._last_beat = time.monotonic()
        self._step: int | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="hang-watchdog", daemon=True)
        self.fired_after: float | None = None

    def start(self) -> Watchdog:
        """Starts watching (the start-up timeout runs from now)."""
        self._last_beat = time.monotonic()
        self._thread.start()
        return self

    def beat(self, step: int) -> None:
        """Records that ``step`` finished."""
        self._step = step
        self._last_beat = time.monotonic()

    def stop(self) -> None:
        """Stops watching (training ended, or it is saving/exporting on purpose)."""
        self._stopped.set()

    def _watch(self) -> None:
        while not self._stopped.wait(min(1.0, self.hang_timeout_s / 4)):
            limit = self.startup_timeout_s if self._step is None else self.hang_timeout_s
            idle = time.monotonic() - self._last_beat
            if idle >= limit:
                self.fired_after = idle
                self._fire(idle)
                return

    def _fire(self, idle: float) -> None:
        where = "before the first step" if self._step is None else f"after step {self._step}"
        header = (
            f"HANG: no training step finished for {idle:.0f} s ({where}) on "
            f"{self.name}, pid {os.getpid()}"
        )
        log.error(header)
        tool, text = dump_stacks()
        report = f"{header}\nstacks ({tool}):\n{text}"
        print(report, flush=True)
        try:
            import tensorflow as tf

            tf.io.gfile.makedirs(os.path.dirname(self.dump_path))
            with tf.io.gfile.GFile(self.dump_path, "w") as f:
                f.write(report)
            log.error("stack dump written to %s; exiting %d (retryable)", self.dump_path, HUNG)
        except Exception as e:  # noqa: BLE001 - exiting matters more than the file
            log.error("could not write %s: %s", self.dump_path, e)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        self._exit(HUNG)
