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

from spottrain.trainer.stateful_ops import STATEFUL_RANDOM_OPS
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

    state = _GlobalRandomState()

    def elements(start: int, skip_steps: int) -> list:
        # Each pipeline from the same global random state: a resumed process builds
        # its pipeline after the same draws as an uninterrupted one (both seeded by
        # --seed first, spottrain.trainer.process_setup.seed), so an unseeded
        # np.random.shuffle in examples() reads the same order in both.
        state.restore()
        ds = task.train_dataset(TrainInput(context, global_batch, seed, start, total_steps))
        return list(ds.skip(skip_steps * local).take(count * local).as_numpy_iterator())

    try:
        from_zero, from_step = elements(0, step), elements(step, 0)
    finally:
        state.restore()  # the probe leaves the run's random state as it found it
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


class _GlobalRandomState:
    """The process's global generators as they are now, to put back (see ``probe``).

    Python's ``random``, NumPy's global ``np.random`` and TensorFlow's source of op
    seeds for ops without one (``Context._internal_operation_seed`` draws from
    ``Context._rng``, set by ``tf.random.set_seed``: an unseeded ``shuffle`` in a
    pipeline takes its seed from it; ``tensorflow/python/eager/context.py``).
    """

    def __init__(self):
        import random

        import numpy as np
        from tensorflow.python.eager import context

        self._python, self._numpy = random.getstate(), np.random.get_state()
        rng = getattr(context.context(), "_rng", None)
        self._tf = (rng, rng.getstate()) if rng is not None else None

    def restore(self) -> None:
        import random

        import numpy as np

        random.setstate(self._python)
        np.random.set_state(self._numpy)
        if self._tf is not None:
            self._tf[0].setstate(self._tf[1])


def _floats(x) -> bool:
    import numpy as np

    return np.issubdtype(np.asarray(x).dtype, np.floating)


def stateful_random_ops(graph) -> list[tuple[str, str]]:
    """``(op type, node name)`` of the stateful random ops in a traced step's graph.

    Searches the graph and every function in its library (a model's or train_step's
    nested tf.functions, while-loop and cond bodies are functions there).
    """
    graph_def = graph.as_graph_def()
    nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
    return sorted({(n.op, n.name) for n in nodes if n.op in STATEFUL_RANDOM_OPS})


def step_problem(graph) -> str | None:
    """``None`` when the traced step draws from no stateful random op, else what it draws."""
    found = stateful_random_ops(graph)
    if not found:
        return None
    kinds = sorted({op for op, _ in found})
    return (
        f"the step draws from stateful random ops ({', '.join(kinds)}, e.g. {found[0][1]!r}), "
        "whose position no checkpoint keeps, so a resumed run draws other numbers: use "
        "keras.random.* with a keras.random.SeedGenerator of the model's (saved with it) "
        "or tf.random.stateless_*"
    )


def checked(total_steps: int) -> str:
    """What :func:`probe` and :func:`step_problem` checked, for ``--check``'s line."""
    step = min(PROBE_STEP, total_steps - 1)
    count = min(PROBE_STEPS, total_steps - step)
    if step < 1:
        return "the step draws from no stateful random op (a run too short to probe batches)"
    return (
        f"the batches of steps {step + 1}-{step + count} read from step 0 and from a resume "
        f"at step {step} agree (each pipeline built from the same global random state, as "
        "in a fresh process), and the traced step holds no stateful random op (tf.random.*"
        " without stateless_)"
    )
