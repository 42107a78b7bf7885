"""What a preemption notice does, by where the attempt is (docs/preemption.md).

* **Starting** (TensorFlow and the task start, the gang forms, a checkpoint is
  restored, the first step is traced or compiled and runs): nothing was trained
  since the checkpoint this attempt resumes from, so there is nothing to save. The
  attempt ends at once, from the thread that heard the notice, whatever the main
  thread is blocked in (a gang waiting for a peer, a restore, an XLA compile can
  outlast the notice period): exit 143, its record closed. A notice before the
  record is open (during TensorFlow's import) ends it as soon as it is.
* **Training**: every worker saves at the next step boundary, the same step, and
  exits 143 (the step loop's vote, train_lib).
* **Finishing** (after the final save: evaluation, export): the checkpoint is
  complete. Evaluation and export go on: done within the notice period, the run
  ends 0 and needs no retry; if the platform kills it first, the next attempt
  only evaluates and exports.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from spottrain import exits
from spottrain.trainer import preemption

log = logging.getLogger("trainer")

STARTING, TRAINING, FINISHING = "starting", "training", "finishing"


class Phases:
    """Where this attempt is; a lock keeps a notice and a change of phase apart.

    Args:
        end_now: ``end_now(reason, doing)`` ends the attempt (it does not return);
            called under the lock, so the main thread cannot start training meanwhile.
        on_doing: Told each new ``doing`` (the supervisor hears it: where TensorFlow
            holds Python's lock, the gang's start-up, it is the supervisor that ends
            the attempt, watchdog.Supervisor).
    """

    def __init__(
        self,
        end_now: Callable[[str, str], None],
        on_doing: Callable[[str], None] = lambda _doing: None,
    ):
        self._lock = threading.Lock()
        self._end_now = end_now
        self._on_doing = on_doing
        self.phase = STARTING
        self.doing = "while TensorFlow and the task started"
        self.record_open = False
        self.heard: str | None = None

    def opened(self) -> None:
        """The attempt's record is open: a notice heard before it ends the attempt now."""
        with self._lock:
            self.record_open = True
            if self.heard is not None and self.phase == STARTING:
                self._end_now(self.heard, self.doing)

    def starting(self, doing: str) -> None:
        """Names what the attempt does now, for the line a notice ends it with."""
        with self._lock:
            self.doing = doing
            self._on_doing(doing)

    def enter(self, phase: str) -> None:
        """Moves on to ``TRAINING`` (the first step is done) or ``FINISHING``."""
        with self._lock:
            self.phase = phase

    def notice(self, reason: str) -> str:
        """Called by the thread that heard the notice; may end the attempt here.

        Returns:
            The phase the notice came in (the caller says what happens then).
        """
        with self._lock:
            self.heard = reason
            if self.phase == STARTING and self.record_open:
                self._end_now(reason, self.doing)
            return self.phase


def say(phase: str, reason: str, final_step: int) -> None:
    """The one line saying what the attempt does with a notice in ``phase``."""
    if phase == STARTING:
        log.warning("%s received: the attempt ends once its record is open", reason)
    elif phase == TRAINING:
        log.warning("%s received: saving at the next step boundary, then exiting", reason)
    else:
        log.warning(
            "%s received after the final save at step %d: the checkpoint is complete; "
            "evaluation and export go on (stopped first, the next attempt does only them)",
            reason,
            final_step,
        )


def end_attempt(ledger, lease, reason: str, doing: str, step: int) -> None:
    """Ends an attempt that saved nothing since ``step``: one line, its record, 143.

    Runs in the thread that heard the notice, while the main thread may be anywhere.
    """
    since = f"its checkpoint of step {step}" if step else "the start"
    message = (
        f"preempted ({reason}) {doing}: nothing trained since {since}, nothing to save, "
        "0 steps lost"
    )
    log.warning("exit %d: %s", exits.PREEMPTED, message)
    try:
        ledger.end(exits.PREEMPTED, message, notice=(step, reason))
    except Exception as e:  # noqa: BLE001 - the exit code is what the platform acts on
        log.warning("could not close the attempt's ledger record: %s", e)
    if lease is not None:
        lease.release()
    preemption.exit_process(exits.PREEMPTED)
