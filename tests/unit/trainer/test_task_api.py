"""The Task API: the docs' example task (docs/task-api.md) gets the engine's whole contract.

The in-process tests; those that start processes are in
tests/integration/trainer/test_task_api.py.
"""

from __future__ import annotations


def test_a_keras_tasks_batches_are_prefetched_and_unchanged():
    """KerasTask ends its pipeline with prefetch (issue 32): the same batches, made ahead."""
    import tensorflow as tf

    from spottrain.trainer.task_api import KerasTask, TrainInput

    class Toy(KerasTask):
        def examples(self):
            x = tf.reshape(tf.range(64, dtype=tf.float32), [32, 2])
            return tf.data.Dataset.from_tensor_slices((x, tf.range(32)))

    spec = TrainInput(tf.distribute.InputContext(), 8, 7, 3, 9)
    ds = Toy({}, None).train_dataset(spec)
    chain, node = [], ds
    while node is not None:  # the pipeline from its end back to its source
        chain.append(type(node).__name__)
        node = getattr(node, "_input_dataset", None)
    assert "Prefetch" in chain[1], chain  # the last step before the options
    batches = [b for _, b in ds.as_numpy_iterator()]
    assert len(batches) == 6 and all(len(b) == 8 for b in batches)
    again = [b for _, b in Toy({}, None).train_dataset(spec).as_numpy_iterator()]
    assert all((a == b).all() for a, b in zip(batches, again, strict=True))
