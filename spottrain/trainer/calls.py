"""How steps are grouped into ``tf.function`` calls, and read back to the host.

``--steps-per-loop N`` (or ``auto``) runs N steps a call (:class:`LoopSizes`); one
step a call runs the next step before reading the last one's vote
(:class:`StepAhead`), so that a GPU never idles while the host reads.
"""

from __future__ import annotations

import logging

from spottrain.trainer import config

log = logging.getLogger("trainer")

# A fixed --steps-per-loop whose calls take longer than this gets a warning.
SLOW_CALL_SECONDS = 5.0


class LoopSizes:
    """How many steps the next call runs: 1, ``--steps-per-loop N``, or auto's choice.

    Auto times calls of one step (after the first, which traces), agrees on the mean
    with the other workers (every worker must run the same steps per call, or their
    collectives would not match) and then runs as many steps a call as take about
    ``AUTO_LOOP_SECONDS``: a notice is heard between calls.
    """

    PROBE_CALLS = 10

    def __init__(self, cfg: config.TrainConfig, allowed: bool, agree):
        self.looped = allowed and cfg.steps_per_loop != 1  # a profiled run times each step
        self.auto = self.looped and cfg.steps_per_loop == 0
        self.now = cfg.steps_per_loop if self.looped and not self.auto else 1
        self._agree, self._calls, self._seconds, self._steps = agree, 0, 0.0, 0

    def measured(self, done: int, seconds: float) -> None:
        """After each call: auto chooses once it has timed its probe calls."""
        self._calls += 1
        if self._calls == 2 and self.looped and not self.auto and seconds > SLOW_CALL_SECONDS:
            # A notice waits for the running call, and the watchdog hears of progress
            # only between calls: a fixed N can make both too late.
            log.warning(
                "--steps-per-loop %d: a call takes %.1f s, and a preemption notice waits "
                "for it (GKE gives a pod 15-30 s); use --steps-per-loop auto",
                self.now,
                seconds,
            )
        if not self.auto or self._calls == 1:
            return  # the first call traced the loop
        self._seconds, self._steps = self._seconds + seconds, self._steps + done
        if self._calls <= self.PROBE_CALLS:
            return
        per_step = max(self._agree(self._seconds / self._steps), 1e-6)
        self.now = max(1, min(config.MAX_STEPS_PER_LOOP, int(config.AUTO_LOOP_SECONDS / per_step)))
        self.auto = False
        log.info(
            "--steps-per-loop auto: %d steps a call (%.2f ms a step over %d steps, all workers)",
            self.now,
            1000 * per_step,
            self._steps,
        )


class StepAhead:
    """One step a call, the host a step behind the device.

    Step j+1 is dispatched before step j's ``[loss, stop, save]`` is read, so that a
    GPU has the next step queued while the host reads (fit does not wait on each step
    either). A stop or save vote is then acted on one step later.

    Whether to run ahead must be the same on every worker (a worker that ran ahead
    acts on a vote one step later than one that did not): the caller decides it from
    what all workers share, the step number and the all-reduced votes, never from a
    worker's own flags. An error of the step run ahead is raised when it is that
    step's turn, so that it names its own step.
    """

    def __init__(self, call):
        self._call = call
        self._ahead = None  # (outputs, error) of the step dispatched ahead

    @property
    def ahead(self) -> bool:
        """Whether the next step is already dispatched."""
        return self._ahead is not None

    def step(self, flags, then=None) -> list[float]:
        """This step's ``[loss, stop, save]``.

        The step run ahead, else one run now with ``flags``; with ``then`` (the next
        step's flags), the next step is dispatched before this one is read.
        """
        import numpy as np

        if self._ahead is not None:
            out, error = self._ahead
            self._ahead = None
            if error is not None:
                raise error
        else:
            out = self._call(*flags)
        if then is not None:
            try:
                self._ahead = (self._call(*then), None)
            except Exception as e:  # noqa: BLE001 - the next step's, raised at its turn
                self._ahead = (None, e)
        return np.asarray(out).tolist()
