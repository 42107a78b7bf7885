r"""A task that is not an image classifier: tabular regression with its own loss.

Its data is generated, one batch per step: the batch of step *s* is drawn with a
stateless RNG seeded by ``(seed, s)``, so resuming at any step reproduces exactly
the batches an uninterrupted run sees (the Task API's exact-resume contract), and
an interrupted run ends with the same weights. Train it with::

    python -m spottrain.trainer.launch --workers 2 --output-dir out/regression -- \\
        --task examples.regression:Regression --task-args '{"features": 8}' \\
        --train-steps 300 --batch-size-per-replica 32

In a real task, ``train_dataset`` reads your files instead (see docs/task-api.md).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from spottrain import ConfigError, Task, TrainInput


class Regression(Task):
    """``y = x · w + noise`` for a fixed random ``w``, fitted by an MLP with a Huber loss.

    Task args: ``features`` (8), ``hidden`` (32), ``noise`` (0.1), ``delta`` (1.0).
    """

    def prepare(self) -> None:
        """Checks the task args (one line naming a bad one)."""
        unknown = set(self.args) - {"features", "hidden", "noise", "delta"}
        if unknown:
            raise ConfigError(f"--task-args: unknown {sorted(unknown)}")
        self.features = int(self.args.get("features", 8))
        self.hidden = int(self.args.get("hidden", 32))
        self.noise = float(self.args.get("noise", 0.1))
        self.delta = float(self.args.get("delta", 1.0))
        if self.features < 1 or self.hidden < 1:
            raise ConfigError(f"--task-args: features and hidden must be >= 1: {self.args}")

    def build_model(self):
        """A small MLP."""
        return keras.Sequential(
            [
                keras.Input((self.features,)),
                keras.layers.Dense(self.hidden, activation="relu"),
                keras.layers.Dense(1),
            ]
        )

    def train_dataset(self, spec: TrainInput):
        """This worker's share of step *s*'s batch, drawn from ``(seed, s)``."""
        w = tf.random.stateless_normal([self.features, 1], seed=[spec.seed, -1])
        part = spec.worker_slice

        def batch_of_step(step):
            seed = tf.stack([tf.cast(spec.seed, tf.int64), step])
            x = tf.random.stateless_normal([spec.global_batch, self.features], seed=seed)
            noise = tf.random.stateless_normal([spec.global_batch, 1], seed=seed + 1)
            y = x @ w + self.noise * noise
            return x[part.start : part.stop], y[part.start : part.stop]

        ds = tf.data.Dataset.range(spec.start_step, spec.total_steps).map(batch_of_step)
        return ds.rebatch(spec.per_replica_batch, drop_remainder=True)

    def loss(self, labels, outputs):
        """Huber loss per example."""
        err = tf.abs(tf.reshape(outputs, [-1]) - tf.reshape(labels, [-1]))
        quadratic = tf.minimum(err, self.delta)
        return 0.5 * quadratic**2 + self.delta * (err - quadratic)

    def evaluate(self, model, batch_size: int) -> dict[str, float]:
        """Mean squared error on 1,024 held-out examples (their own seed)."""
        w = tf.random.stateless_normal([self.features, 1], seed=[self.cfg.seed, -1])
        x = tf.random.stateless_normal([1024, self.features], seed=[self.cfg.seed, -2])
        y = x @ w
        mse = float(tf.reduce_mean((model(x, training=False) - y) ** 2))
        return {"val_mse": mse, "val_examples": 1024}
