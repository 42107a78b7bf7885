"""Does a task's input pipeline meet the exact-resume contract?

The engine resumes at the checkpointed step and asks the task for the batches from
there (:class:`spottrain.trainer.task_api.TrainInput` ``start_step``): resumed weights
are bit-identical to an uninterrupted run's only when the batch of step *s* is a
function of ``(seed, s)``. The probe reads step ``s``'s batch twice, from a pipeline
started at 0 and from a fresh one started at ``s``, and compares them: a pipeline
that ignores ``start_step``, shuffles without a seed or reads files in an
unstable order fails it. It costs ``s + 1`` steps of input, no training.
"""

from __future__ import annotations

from typing import Any

from spottrain.trainer.task_api import TrainInput

# Resume at step 3 (a pipeline that ignores start_step still agrees at 0) and compare
# 4 steps from there: an unseeded shuffle agrees on one step by chance, not on four.
PROBE_STEP = 3
PROBE_STEPS = 4


def probe(task, context: Any, global_batch: int, seed: int, total_steps: int) -> str | None:
    """``None`` when the batches from ``PROBE_STEP`` on agree read both ways, else what differs.

    Args:
        task: The prepared task.
        context: The ``tf.distribute.InputContext`` of this worker's pipeline.
        global_batch: Examples per step across all replicas.
        seed: The run's seed.
        total_steps: The run's final step (the probe needs at least ``PROBE_STEP + 1``).
    """
    import numpy as np
    import tensorflow as tf

    step = min(PROBE_STEP, total_steps - 1)
    if step < 1:
        return None
    count = min(PROBE_STEPS, total_steps - step)
    local = max(1, context.num_replicas_in_sync // context.num_input_pipelines)

    def elements(start: int, skip_steps: int) -> list:
        ds = task.train_dataset(TrainInput(context, global_batch, seed, start, total_steps))
        return list(ds.skip(skip_steps * local).take(count * local).as_numpy_iterator())

    from_zero, from_step = elements(0, step), elements(step, 0)
    for k in range(count):
        a, b = from_zero[k * local : (k + 1) * local], from_step[k * local : (k + 1) * local]
        if len(a) != local or len(b) != local:
            return f"the pipeline yields no batch for step {step + k + 1}"
        flat_a, flat_b = tf.nest.flatten(a), tf.nest.flatten(b)
        if len(flat_a) != len(flat_b) or not all(
            np.shape(x) == np.shape(y) and np.array_equal(x, y, equal_nan=_floats(x))
            for x, y in zip(flat_a, flat_b, strict=True)
        ):
            return (
                f"the batch of step {step + k + 1} differs when the pipeline starts at step "
                f"{step} (as a resume does) from when it starts at 0: it must be a function "
                "of (seed, step) (seeded or stateless randomness, a fixed order, positioned "
                "at TrainInput.start_step)"
            )
    return None


def _floats(x) -> bool:
    import numpy as np

    return np.issubdtype(np.asarray(x).dtype, np.floating)
