"""What ``model.fit`` takes as data, as one dataset of single examples for a ``KerasTask``.

fit takes arrays (``x``, ``(x, y)``, ``(x, y, sample_weight)``; lists and dicts of
arrays for several inputs or outputs) and ``tf.data`` datasets whose elements are
*batches*. A ``KerasTask.examples()`` may return any of these, or a dataset of single
examples: the engine needs single examples, to batch them at the run's global batch
(every worker must cut the same global batch) and to skip to a resumed step.
"""

from __future__ import annotations

import logging

from spottrain.exits import ConfigError

log = logging.getLogger("trainer")

# tf.data's own dataset classes (tensorflow/python/data/ops/*_op.py) whose elements are
# batches, and the one that makes single examples of batches again.
_BATCHING = {
    "_BatchDataset",
    "_PaddedBatchDataset",
    "_ParallelBatchDataset",
    "_RebatchDataset",
    "_DenseToRaggedDataset",
    "_DenseToSparseBatchDataset",
    "_GroupByWindowDataset",
}
_UNBATCHING = {"_UnbatchDataset"}


def is_batched(ds) -> bool:
    """Whether a dataset's elements are batches: a batch op nearer to it than an unbatch.

    Walks the chain of tf.data's own datasets from the outermost (its ``_inputs()``);
    a dataset whose origin it cannot see (``from_generator``) counts as single examples.
    """
    seen = 0
    while ds is not None and seen < 10_000:
        name = type(ds).__name__
        if name in _BATCHING:
            return True
        if name in _UNBATCHING:
            return False
        inputs = ds._inputs() if hasattr(ds, "_inputs") else []
        ds, seen = (inputs[0] if inputs else None), seen + 1
    return False


def _tuples(value):
    """Lists as tuples, at every depth (``from_tensor_slices`` would stack a list)."""
    if isinstance(value, list | tuple):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


def examples_dataset(value, batched: bool | None, owner: str, say: bool = True):
    """A dataset of single examples from what ``examples()`` returned (see the module).

    Args:
        value: ``examples()``'s return value.
        batched: The task's ``batched`` (``None``: detect it on a dataset).
        owner: How a line names the method, e.g. ``"Digits.examples()"``.
        say: Log that a dataset of batches is unbatched (once a task, not a pipeline).
    """
    import tensorflow as tf

    if isinstance(value, tf.data.Dataset):
        batches = is_batched(value) if batched is None else batched
        if batches and say:
            log.info(
                "%s gives batches (as model.fit takes): the engine unbatches them and "
                "batches at the run's global batch",
                owner,
            )
        if batches:
            return value.unbatch()
        return value
    if value is None:
        raise ConfigError(f"{owner} returned None: return the data model.fit would take")
    # fit's x / (x, y) / (x, y, sample_weight), as arrays (keras' unpack_x_y_sample_weight).
    data = _tuples(value)
    try:
        return tf.data.Dataset.from_tensor_slices(data)
    except (TypeError, ValueError) as e:
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise ConfigError(
            f"{owner} must return what model.fit takes (arrays x, (x, y) or "
            f"(x, y, sample_weight), dicts or lists of arrays, or a tf.data.Dataset); "
            f"got {type(value).__name__}: {first}"
        ) from None
