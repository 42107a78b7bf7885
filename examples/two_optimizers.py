r"""A whole step of your own: two losses and two optimizers (``Task.train_step``).

The encoder learns with SGD from the fit loss plus a small penalty on its
activations; the head learns with Adam from the fit loss alone. The data is the
regression example's, so the batch of step *s* is again a function of ``(seed, s)``::

    python -m spottrain.trainer.launch --workers 2 --output-dir out/two -- \\
        --task examples.two_optimizers:TwoOptimizers --train-steps 300
"""

from __future__ import annotations

import keras
import tensorflow as tf

from examples.regression import Regression


class TwoOptimizers(Regression):
    """An encoder (SGD, fit + activation penalty) and a head (Adam, fit only)."""

    def build_model(self):
        """Encoder and head, as named layers of one model (saved and exported together)."""
        return keras.Sequential(
            [
                keras.Input((self.features,)),
                keras.layers.Dense(self.hidden, activation="relu", name="encoder"),
                keras.layers.Dense(1, name="head"),
            ]
        )

    def build_optimizers(self, model):
        """One optimizer per part, built on its variables (their slots are checkpointed)."""
        encoder = keras.optimizers.SGD(learning_rate=0.05, momentum=0.9)
        encoder.build(model.get_layer("encoder").trainable_variables)
        head = keras.optimizers.Adam(learning_rate=0.01)
        head.build(model.get_layer("head").trainable_variables)
        return {"encoder": encoder, "head": head}

    def train_step(self, model, optimizers, features, labels, global_batch):
        """Both losses, each part's gradients to its own optimizer."""
        encoder, head = model.get_layer("encoder"), model.get_layer("head")
        with tf.GradientTape(persistent=True) as tape:
            hidden = encoder(features, training=True)
            outputs = head(hidden, training=True)
            fit = tf.nn.compute_average_loss(
                self.loss(labels, outputs), global_batch_size=global_batch
            )
            penalty = tf.nn.compute_average_loss(
                1e-4 * tf.reduce_sum(tf.square(hidden), axis=-1), global_batch_size=global_batch
            )
            total = fit + penalty
        for part, loss, name in ((encoder, total, "encoder"), (head, fit, "head")):
            grads = tape.gradient(loss, part.trainable_variables)
            optimizers[name].apply_gradients(zip(grads, part.trainable_variables, strict=True))
        del tape
        return total
