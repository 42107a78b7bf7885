"""Which inputs of a batch are not finite, when the loss goes NaN.

A diverging run and NaN in the data end the same way, a non-finite loss, but their
remedies differ: a lower learning rate cannot help a batch that holds NaN, and its
retry reaches the same batch again. So, once the loss is not finite, the batch of that
step is read again from the task's pipeline (the Task API's exact-resume contract
makes it a function of ``(seed, step)``), every worker's share of it, and its
floating-point tensors are checked. Nothing is added to the step itself.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from spottrain.trainer import advice, task_calls
from spottrain.trainer.task_api import TrainInput

log = logging.getLogger(__name__)

# Names of the parts of a (features, labels[, sample weights]) element.
_PARTS = ("features", "labels", "sample weights")
# Columns named per tensor, at most.
_COLUMNS = 5


def what(loss: float, bad_grads: int) -> str:
    """What was not finite: the loss, or the gradients of a finite loss (on N replicas)."""
    if not math.isfinite(loss):
        return f"loss is {loss}"
    on = f" on {bad_grads} replica{'s' * (bad_grads != 1)}" if bad_grads else ""
    return f"gradients are not finite{on} (loss {loss:.4f}, the weights would go NaN)"


def remedy(trainer, step: int) -> str:
    """The NaN line's remedy: fix the data when step ``step``'s batch is not finite.

    Else the remedies for a diverging run (:func:`advice.nan_advice`).
    """
    contexts = getattr(trainer, "_contexts", [])[:1]  # this worker's input pipeline
    found = "".join(
        scan(trainer.task, c, trainer.global_batch, trainer.cfg.seed, step, trainer.total_steps)
        for c in contexts
    )
    task = trainer.task
    if found:
        return advice.nan_in_data(step, found, task_calls.named(task, "train_dataset"))
    compiled = task_calls.named(task, "build_model") if task_calls.is_keras_task(task) else ""
    return advice.nan_advice(trainer.cfg, compiled)


def scan(task, context: Any, global_batch: int, seed: int, step: int, total_steps: int) -> str:
    """What is not finite in step ``step``'s batch, across all workers; ``""`` if nothing.

    Never raises: the NaN line must not depend on this reading (logged when it fails).

    Args:
        task: The prepared task.
        context: This worker's ``tf.distribute.InputContext`` (the others are made alike).
        global_batch: Examples per step across all replicas.
        seed: The run's seed.
        step: The step whose loss was not finite (1-based).
        total_steps: The run's final step.
    """
    try:
        return _scan(task, context, global_batch, seed, step, total_steps)
    except Exception as e:  # noqa: BLE001 - the NaN exit goes on without it
        log.warning("could not read step %d's batch again to check its inputs: %s", step, e)
        return ""


def _scan(task, context, global_batch, seed, step, total_steps) -> str:
    import numpy as np
    import tensorflow as tf

    from spottrain.trainer import task_calls

    local = max(1, context.num_replicas_in_sync // context.num_input_pipelines)
    counts: dict[str, list[int]] = {}  # name -> [NaN, inf], in the order found
    columns: dict[str, dict[int, int]] = {}
    for pipeline in range(context.num_input_pipelines):
        ctx = tf.distribute.InputContext(
            context.num_input_pipelines, pipeline, context.num_replicas_in_sync
        )
        spec = TrainInput(ctx, global_batch, seed, step - 1, total_steps)
        ds = task_calls.dataset(task, spec)
        for element in ds.take(local).as_numpy_iterator():
            for name, value in _leaves(element):
                value = np.asarray(value)
                if not np.issubdtype(value.dtype, np.floating):
                    continue
                nan, inf = np.isnan(value), np.isinf(value)
                if not (nan.any() or inf.any()):
                    continue
                seen = counts.setdefault(name, [0, 0])
                seen[0] += int(nan.sum())
                seen[1] += int(inf.sum())
                if value.ndim == 2:  # (examples, features): which features
                    per_column = (nan | inf).sum(axis=0)
                    for col in np.flatnonzero(per_column):
                        cols = columns.setdefault(name, {})
                        cols[int(col)] = cols.get(int(col), 0) + int(per_column[col])
    return "; ".join(
        _describe(name, nan, inf, columns.get(name)) for name, (nan, inf) in counts.items()
    )


def _describe(name: str, nan: int, inf: int, cols: dict[int, int] | None) -> str:
    what = " and ".join(f"{n} {kind}" for n, kind in ((nan, "NaN"), (inf, "inf")) if n)
    if cols:
        shown = sorted(cols)[:_COLUMNS]
        more = f" (and {len(cols) - len(shown)} more)" if len(cols) > len(shown) else ""
        where = ", ".join(map(str, shown))
        return f"{name} column{'s' if len(cols) > 1 else ''} {where}{more}: {what}"
    return f"{name}: {what}"


def _leaves(element, name: str = ""):
    """(name, tensor) of every tensor of a dataset element, named for the line."""
    if isinstance(element, dict):
        for key, value in element.items():
            yield from _leaves(value, f"{name}[{key!r}]" if name else str(key))
    elif isinstance(element, (tuple, list)):
        top = not name and 2 <= len(element) <= 3
        for i, value in enumerate(element):
            yield from _leaves(value, _PARTS[i] if top else f"{name or 'features'}[{i}]")
    else:
        yield name or "features", element
