"""A stand-in for ``fit_plan.FitPlan`` (the input side's): what the loop around the step reads.

The integrator swaps this module for ``spottrain/trainer/fit_plan.py``; only
:func:`plan` and the fields of :class:`FitPlan` are used (by :mod:`fit_loop`). It reads
``KerasTask.fit()`` (``FitArgs``) directly: steps per epoch as given, else the examples
over the global batch; the total steps from the flags, as before.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("trainer")


@dataclass(frozen=True)
class FitPlan:
    """How fit's epochs, callbacks and validation map onto the engine's steps."""

    steps_per_epoch: int
    epochs: int
    initial_epoch: int
    total_steps: int
    callbacks: list
    validation_data: Any
    validation_steps: int | None
    validation_batch_size: int | None
    validation_freq: Any


def plan(task, fit, global_batch: int, total_steps: int, epochs_flag: float = 0.0) -> FitPlan:
    """The plan of ``fit`` (a ``FitArgs``) for a run of ``total_steps`` at ``global_batch``."""
    spe = fit.steps_per_epoch or _examples(task) // global_batch
    if spe <= 0:  # the examples' number is unknown: the whole run is one epoch
        log.info("the number of examples is unknown: the run is one epoch of %d steps", total_steps)
        spe = total_steps
    epochs = math.ceil(total_steps / spe) + fit.initial_epoch
    if epochs_flag:
        epochs = max(epochs, math.ceil(epochs_flag))
    return FitPlan(
        steps_per_epoch=spe,
        epochs=epochs,
        initial_epoch=fit.initial_epoch,
        total_steps=total_steps,
        callbacks=list(fit.callbacks or []),
        validation_data=fit.validation_data,
        validation_steps=fit.validation_steps,
        validation_batch_size=fit.validation_batch_size or fit.batch_size or global_batch,
        validation_freq=fit.validation_freq,
    )


def _examples(task) -> int:
    known = task.num_train_examples()
    if known:
        return int(known)
    try:
        n = int(task.single_examples().cardinality())
    except Exception:  # noqa: BLE001 - a generator or a task without examples(): unknown
        return 0
    return max(n, 0)
