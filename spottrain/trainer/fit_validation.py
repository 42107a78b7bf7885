"""fit's validation at an epoch's end, distributed over the workers: ``val_`` logs.

``model.evaluate`` cannot run under MultiWorkerMirroredStrategy in Keras 3 (its
``reduce_per_replica`` meets a ``PerReplica`` it cannot convert to a Tensor), so the
engine runs what evaluate runs, ``model.test_step`` (``keras/src/backend/tensorflow/
trainer.py``, ``TensorFlowTrainer.test_step``), under ``strategy.run`` itself.

Each of the R replicas (over all workers) takes its own contiguous share of the
validation examples, ``N // R`` of them, in batches of ``validation_batch_size // R``,
and updates the compiled metrics on it alone: Keras metric variables are
``synchronization="on_read", aggregation="sum"`` (``keras/src/metrics/metric.py``,
``Metric.add_variable``), so inside ``strategy.run`` each replica updates its own copy
and no collective runs per batch.
At the end one all-reduce sums every metric variable over the replicas, which is how
metric states merge (a mean's total and count, a confusion matrix's counts): the
result is the metric over all the examples, as one ``evaluate`` would give. The
``N mod R`` examples left over (fewer than the replicas) are not evaluated; a log
line says so once.
"""

from __future__ import annotations

import logging
import math

from spottrain.exits import ConfigError

log = logging.getLogger("trainer")


def should_run(epoch: int, freq) -> bool:
    """Whether 0-based ``epoch`` validates: fit's ``validation_freq`` rule (``_should_eval``)."""
    if isinstance(freq, int):
        return (epoch + 1) % freq == 0
    if isinstance(freq, list | tuple | set | range):
        return epoch + 1 in freq
    raise ConfigError(
        f"validation_freq {freq!r} must be an integer or a list of epochs, as model.fit takes"
    )


class Validation:
    """Runs fit's validation on ``data`` (what ``validation_data`` takes) on every worker."""

    def __init__(self, model, strategy, data, batch_size: int, steps: int | None):
        import numpy as np
        import tensorflow as tf

        from spottrain.trainer import fit_input

        self.model, self.strategy = model, strategy
        self.replicas = strategy.num_replicas_in_sync
        self.examples = fit_input.examples_dataset(
            _pydataset_arrays(data), None, "FitArgs.validation_data", False
        )
        n = int(self.examples.cardinality())
        if n == tf.data.INFINITE_CARDINALITY:
            raise ConfigError(
                "FitArgs.validation_data repeats forever: give arrays or a finite "
                "tf.data.Dataset (fit's validation_steps bounds it only when it is finite)"
            )
        if n < 0:  # unknown (an unbatched or filtered dataset): counted once, here
            n = int(self.examples.reduce(np.int64(0), lambda count, _: count + 1))
        self.share = n // self.replicas
        if self.share == 0:
            raise ConfigError(
                f"FitArgs.validation_data has {n} examples: fewer than the {self.replicas} "
                "replicas that share it"
            )
        self.batch = max(1, batch_size // self.replicas)
        self.batches = math.ceil(self.share / self.batch)
        if steps:
            self.batches = min(self.batches, int(steps))
        if n % self.replicas:
            log.info(
                "validation: %d examples on %d replicas, %d each; the last %d are not evaluated",
                n,
                self.replicas,
                self.share,
                n % self.replicas,
            )

        def reset():
            for metric in model.metrics:
                metric.reset_state()

        def merge():
            ctx = tf.distribute.get_replica_context()
            variables = list(model.metrics_variables)
            # One all-reduce of every state as float64 (exact for counts below 2**53).
            flat = [tf.reshape(tf.cast(tf.identity(v.value), tf.float64), [-1]) for v in variables]
            summed = ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.concat(flat, 0))
            parts = tf.split(summed, [int(np.prod(v.shape)) for v in variables])
            for variable, value in zip(variables, parts, strict=True):
                variable.assign(tf.cast(tf.reshape(value, variable.shape), variable.dtype))
            return model.get_metrics_result()

        self._reset = tf.function(lambda: strategy.run(reset))
        self._step = tf.function(
            lambda batch: strategy.run(model.test_step, args=(batch,)), reduce_retracing=True
        )

        @tf.function
        def merged():
            return strategy.experimental_local_results(strategy.run(merge))[0]

        self._merged = merged

    def _share_of(self, replica: int):
        start = replica * self.share
        return iter(self.examples.skip(start).take(self.share).batch(self.batch))

    def run(self) -> dict[str, float]:
        """The validation's logs, ``val_``-named as fit names them; the same on every worker."""
        shares: dict[int, object] = {}

        def batch_of(ctx):
            replica = ctx.replica_id_in_sync_group
            if replica not in shares:
                shares[replica] = self._share_of(replica)
            return next(shares[replica])

        self._reset()
        for _ in range(self.batches):
            self._step(self.strategy.experimental_distribute_values_from_function(batch_of))
        logs = {f"val_{k}": float(v) for k, v in self._merged().items() if _scalar(v)}
        # The compiled metrics are training's too: the next step must not start from the
        # validation's states (its own reset may have been traced before they existed).
        self._reset()
        return logs


def _scalar(value) -> bool:
    shape = getattr(value, "shape", ())
    return len(shape) == 0


def _pydataset_arrays(data):
    """A ``keras.utils.PyDataset`` (fit takes one as ``validation_data``) as its arrays.

    Its batches read once, in order, and joined: every replica must see its own equal
    share of the examples, which index arithmetic over batches of the PyDataset's own
    size cannot cut. Anything else is returned as it is.
    """
    import keras
    import numpy as np
    import tensorflow as tf

    if not isinstance(data, keras.utils.PyDataset):
        return data
    batches = [data[i] for i in range(len(data))]
    if not batches:
        raise ConfigError("FitArgs.validation_data is a PyDataset of no batches")
    return tf.nest.map_structure(lambda *parts: np.concatenate(parts), *batches)
