"""The trainer's side of the hang watchdog: it reports progress over a pipe.

The supervisor's side (the parent process, which reads these lines, dumps and kills
a hung trainer) is :mod:`spottrain.trainer.watchdog`; the trainer imports only this.
"""

from __future__ import annotations

import faulthandler
import os
import signal

HEARTBEAT_FD_ENV = "SPOTTRAIN_HEARTBEAT_FD"
# The same line protocol one level up: a supervisor relays its trainer's "start",
# "step" and "dump" lines to this fd (set by spottrain.trainer.launch), so the launcher follows
# progress without reading logs. An unsupervised trainer writes to it directly.
PROGRESS_FD_ENV = "SPOTTRAIN_PROGRESS_FD"
FAULTHANDLER_FILE_ENV = "SPOTTRAIN_FAULTHANDLER_FILE"


class Heartbeat:
    """The trainer's side: reports progress to the supervisor (no-op when unsupervised)."""

    def __init__(self, environ: dict | None = None):
        env = os.environ if environ is None else environ
        self.fd = int(env.get(HEARTBEAT_FD_ENV) or env.get(PROGRESS_FD_ENV) or "-1")
        path = env.get(FAULTHANDLER_FILE_ENV)
        if path:
            # Kept open for the process lifetime: faulthandler writes to the raw fd.
            self._fault_file = open(path, "w")  # noqa: SIM115
            faulthandler.register(signal.SIGUSR1, file=self._fault_file, all_threads=True)

    def _send(self, line: str) -> None:
        if self.fd < 0:
            return
        try:
            os.write(self.fd, f"{line}\n".encode())
        except OSError:  # supervisor gone: nothing to report to
            self.fd = -1

    def dump_path(self, path: str) -> None:
        """Tells the supervisor where a hang's stack dump should go."""
        self._send(f"dump {path}")

    def start(self, step: int) -> None:
        """Reports the step this attempt resumes from (before its first step)."""
        self._send(f"start {step}")

    def beat(self, step: int) -> None:
        """Reports a finished step."""
        self._send(f"step {step}")

    def saving(self) -> None:
        """A save the step waits for begins (the final one, or on notice).

        It is watched with the start-up timeout, not the step's: a model's save can
        take longer than its steps.
        """
        self._send("save")

    def doing(self, what: str) -> None:
        """Says where the attempt is before its first step (for a notice it cannot act on)."""
        self._send(f"doing {what}")

    def heard(self) -> None:
        """A notice was heard; the trainer acts on it itself (saves, or finishes)."""
        self._send("heard")

    def done(self) -> None:
        """Training steps are over; evaluation and export are not watched."""
        self._send("done")
