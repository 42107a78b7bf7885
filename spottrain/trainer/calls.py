"""How steps are grouped into ``tf.function`` calls, and read back to the host.

``--steps-per-loop N`` (or ``auto``) runs N steps a call (:class:`LoopSizes`); one
step a call runs the next step before reading the last one's vote
(:class:`StepAhead`), so that a GPU never idles while the host reads.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from spottrain.trainer import config

log = logging.getLogger("trainer")

# A fixed --steps-per-loop whose calls take longer than this gets a warning.
SLOW_CALL_SECONDS = 5.0


def per_call(cfg: config.TrainConfig, profiled: bool) -> int:
    """Steps a call, as asked: ``--steps-per-loop`` (0: auto), or 1 when profiled.

    The one place this is decided (the start line says it, :class:`LoopSizes` runs it):
    a profiled run times each step.
    """
    return 1 if profiled else cfg.steps_per_loop


class LoopSizes:
    """How many steps the next call runs: 1, ``--steps-per-loop N``, or auto's choice.

    Auto times calls of one step (after the first, which traces), agrees on the mean
    with the other workers (every worker must run the same steps per call, or their
    collectives would not match) and then runs as many steps a call as take about
    ``AUTO_LOOP_SECONDS``: a notice is heard between calls.
    """

    PROBE_CALLS = 10

    def __init__(self, cfg: config.TrainConfig, allowed: bool, agree):
        asked = per_call(cfg, profiled=not allowed)
        self.looped = asked != 1
        self.auto = asked == 0
        self.now = asked if self.looped and not self.auto else 1
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

    Step j+1 is dispatched before step j's ``[loss, stop, save, bad]`` is read, so that a
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
        """This step's ``[loss, stop, save, bad, *metrics]``.

        The step run ahead, else one run now with ``flags``; with ``then`` (the next
        step's flags), the next step is dispatched before this one is read.
        """
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
        return _read(out)


@dataclass
class Call:
    """What one call did: its steps, the first and last step's loss, the votes."""

    done: int
    first: float
    loss: float
    stop_votes: float
    save_votes: float
    input_s: float  # waiting for the batch, where it is fetched outside the step
    seconds: float  # the whole call
    # A fit step's logs besides the loss (StepFunctions.metric_names), the last step's
    # means over replicas; and the sums over the call's steps of [loss, *metrics].
    metrics: list[float] = field(default_factory=list)
    sums: list[float] = field(default_factory=list)
    bad_grads: int = 0  # replicas whose gradients in the call's last step were not finite


@dataclass
class LoopState:
    """The training loop's state between calls."""

    step: int
    last_log_step: int  # the step of the last step line (the start step at first)
    last_save: float = field(default_factory=time.monotonic)
    last_log: float = field(default_factory=time.monotonic)
    logged: int = 0  # step // log_every_steps before the last call
    held: tuple[float, float] | None = None  # votes that wait for the step run ahead


class Caller:
    """Runs the next call of the loop (step and vote) and maps its failures to one line.

    One step a call when profiled (the batch fetched outside, for the input wait), N
    steps a call in a ``tf.while_loop`` (``--steps-per-loop``), else one step a call
    with the next run ahead (:class:`StepAhead`).
    """

    def __init__(
        self, steps, iterator, on_step=None, *, cfg: config.TrainConfig, total_steps: int,
        stop, multi_worker: bool, agree, blame, step_error, epoch_steps: int = 0,
    ):  # fmt: skip
        """Calls ``steps`` (steps.StepFunctions), the engine's parts named.

        ``epoch_steps``: steps per epoch (0: no epochs); no call runs past an epoch's end
        and the step that ends one is not run ahead, so that what the epoch's end does
        (validation, callbacks that set the learning rate) comes before the next step.

        ``stop``: the notice's flag; ``agree``: the mean of a number over the workers;
        ``blame``: which part of the task a failure came from; ``step_error``: a failed
        call's one line, or None.
        """
        import tensorflow as tf

        self.steps, self.iterator, self.profiled = steps, iterator, on_step is not None
        self.cfg, self.total_steps = cfg, total_steps
        self.stop, self.multi_worker = stop, multi_worker
        self.blame, self.step_error = blame, step_error
        self.epoch_steps = epoch_steps
        self.sizes = LoopSizes(cfg, not self.profiled, agree)
        self._flag = {False: tf.constant(0.0), True: tf.constant(1.0)}  # the vote's inputs
        # Traced at the first call, inside its error handling.
        self._next: StepAhead | None = None
        self._loop = None

    @property
    def ahead(self) -> bool:
        """Whether the next step is already dispatched (its votes wait for it)."""
        return self._next is not None and self._next.ahead

    def run(self, loop: LoopState) -> Call:
        """The next call from ``loop.step``."""
        import tensorflow as tf

        cfg, step = self.cfg, loop.step
        timed_save = bool(cfg.save_every_seconds) and (
            time.monotonic() - loop.last_save >= cfg.save_every_seconds
        )
        # A call never runs past a step-count save or the end.
        next_save = (step // cfg.save_every_steps + 1) * cfg.save_every_steps
        if self.epoch_steps:  # nor past an epoch's end (the same steps whatever the restarts)
            next_save = min(next_save, (step // self.epoch_steps + 1) * self.epoch_steps)
        n = min(self.sizes.now, next_save - step, self.total_steps - step)
        flags = (self._flag[self.stop.is_set()], self._flag[timed_save])
        try:
            # The step marker TensorBoard's Profile tab (xprof) counts steps by: a root
            # ("_r=1") host event per step, around the batch fetch too so xprof sees
            # the input wait inside the step. Without a running profiler it is one
            # flag check (bench/step_marker.py).
            with tf.profiler.experimental.Trace("train", step_num=step + 1, _r=1):
                t0 = time.perf_counter()
                if self.profiled:
                    with self.blame("train_dataset"):
                        batch = next(self.iterator)
                    t1 = time.perf_counter()
                    loss, stop, save, bad, *metrics = _read(self.steps.train_step(batch, *flags))
                    done, first, sums = 1, loss, [loss, *metrics]
                elif self.sizes.looped:
                    if self._loop is None:
                        self._loop = self.steps.make_train_loop(self.iterator)
                    out = _read(self._loop(tf.constant(n, tf.int32), *flags))
                    k = (len(out) - 7) // 2  # [done, first, loss, stop, save, bad, *k, *(1 + k)]
                    done, first, loss, stop, save, bad = out[:6]
                    metrics, sums = out[6 : 6 + k], out[6 + k :]
                    done, t1 = int(done), t0
                else:
                    if self._next is None:
                        self._next = StepAhead(self.steps.make_train_next(self.iterator))
                    # Ahead unless this step ends at a save by count or the end, or a
                    # vote held from the last step waits for it: what all workers share.
                    # A worker alone need agree with no one: a notice stops it at once.
                    last = step + 1 == next_save or step + 1 >= self.total_steps
                    alone_stopping = not self.multi_worker and self.stop.is_set()
                    then = None if loop.held or last or alone_stopping else flags
                    loss, stop, save, bad, *metrics = self._next.step(flags, then)
                    done, first, t1 = 1, loss, t0  # the input wait is inside the step
                    sums = [loss, *metrics]
        except Exception as e:
            failure = self.step_error(e, step, n)
            if failure is None:
                raise
            raise failure from e
        seconds = time.perf_counter() - t0
        self.sizes.measured(done, seconds)
        return Call(done, first, loss, stop, save, t1 - t0, seconds, metrics, sums, int(bad))


def _read(out) -> list[float]:
    """A call's outputs on the host (this waits for the call to finish)."""
    import numpy as np

    return np.asarray(out).tolist()
