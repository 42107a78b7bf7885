"""A fit user's mixed-precision convnet (issue 54): ``mixed_float16``, BatchNorm, Dropout.

``model()`` sets the ``mixed_float16`` policy and compiles, so Keras wraps the
optimizer in a ``LossScaleOptimizer`` (``keras/src/trainers/trainer.py``,
``Trainer.compile``). The data make the replicas disagree on purpose: at each step of
``overflow_steps`` the first worker's examples weigh ``overflow_weight``, so that its
float16 gradients overflow (inf) while the other workers' stay finite. Batches are a
function of ``(seed, step, worker)`` (stateless ops), so a resumed run reads the same
ones and the test does not depend on when a natural overflow happens.
"""

from __future__ import annotations

from spottrain.trainer.task_api import KerasTask

SIDE, CLASSES = 8, 4


class Task(KerasTask):
    """Args: ``overflow_steps`` (list of steps, default ``[5, 120]``), ``overflow_weight``,
    ``policy`` (default ``mixed_float16``; ``None``: the engine's ``--mixed-precision``)."""

    def model(self):
        import keras

        policy = self.args.get("policy", "mixed_float16")
        if policy:
            keras.mixed_precision.set_global_policy(policy)
        inputs = keras.Input((SIDE, SIDE, 1))
        x = keras.layers.Conv2D(8, 3, padding="same")(inputs)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.Dropout(0.2)(x)
        x = keras.layers.Flatten()(x)
        x = keras.layers.Dense(CLASSES)(x)
        # As Keras's mixed-precision guide writes it: the softmax in float32.
        outputs = keras.layers.Activation("softmax", dtype="float32")(x)
        model = keras.Model(inputs, outputs)
        model.compile(
            optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"]
        )
        return model

    def examples(self):  # --check's and the docs' view; train_dataset is what trains
        import numpy as np

        rng = np.random.default_rng(0)
        x = rng.normal(size=(256, SIDE, SIDE, 1)).astype("float32")
        return x, (x.mean(axis=(1, 2, 3)) > 0).astype("int32")

    def train_dataset(self, spec):
        import tensorflow as tf

        overflow = tf.constant(self.args.get("overflow_steps", [5, 120]) or [-1], tf.int64)
        weight = float(self.args.get("overflow_weight", 1e6))
        worker = spec.context.input_pipeline_id
        n = spec.per_replica_batch

        def batch(step):
            seed = tf.stack([tf.cast(spec.seed, tf.int64), step * 1000 + worker])
            x = tf.random.stateless_normal([n, SIDE, SIDE, 1], seed=seed)
            # A learnable label: the sign of the image's mean, two bits of it.
            y = tf.cast(tf.reduce_mean(x, [1, 2, 3]) > 0, tf.int32) * 2
            y += tf.cast(tf.reduce_mean(x[:, :, : SIDE // 2], [1, 2, 3]) > 0, tf.int32)
            hit = tf.reduce_any(tf.equal(overflow, step)) & tf.equal(worker, 0)
            w = tf.fill([n], tf.where(hit, weight, 1.0))
            return x, y, w

        ds = tf.data.Dataset.range(spec.start_step, spec.total_steps).map(batch)
        # One element per replica: this worker's replicas take consecutive elements.
        per_worker = spec.context.num_replicas_in_sync // spec.context.num_input_pipelines
        return ds.flat_map(lambda *e: tf.data.Dataset.from_tensors(e).repeat(per_worker))
