"""The metrics of a finished run: the task's ``evaluate()`` and fit's last validation.

A task's ``evaluate(model, batch_size)`` that calls ``model.evaluate(...)`` fails under
MultiWorkerMirroredStrategy in Keras 3 (``keras/src/backend/tensorflow/trainer.py``,
``reduce_per_replica``: a ``PerReplica`` cannot be converted to a Tensor) after every
step has run. It used to end the attempt (exit 1) before the export; it is now one
line, and the model and its summary are exported without those metrics.
"""

from __future__ import annotations

import logging

from spottrain.exits import TrainerExit

log = logging.getLogger("trainer")


def metrics(task, model, global_batch: int, fit_loop=None) -> dict:
    """The run's last validation logs (``validation_data``), updated by ``task.evaluate``'s."""
    out = fit_loop.metrics() if fit_loop is not None else {}
    try:
        out.update(task.evaluate(model, max(64, global_batch)) or {})
    except TrainerExit:
        raise
    except Exception as e:  # noqa: BLE001 - a user's evaluate(): one line, the export goes on
        first = (str(e).strip().splitlines() or [""])[0][:200]
        hint = (
            "model.evaluate cannot run under MultiWorkerMirroredStrategy in Keras 3; "
            "give FitArgs(validation_data=...) to validate every epoch as fit does"
            if "PerReplica" in str(e)
            else "fix evaluate()"
        )
        log.error(
            "the task's evaluate() raised %s: %s; the model is exported without its metrics (%s)",
            type(e).__name__,
            first,
            hint,
        )
    return out
