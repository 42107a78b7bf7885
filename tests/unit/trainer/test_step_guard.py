"""The engine's step votes on its gradients, not only its loss (the NaN guard).

A NaN input that a fused MatMul+BiasAdd+Relu turns into 0 (oneDNN on a CPU) leaves
the loss finite while the gradient makes the weights NaN: the vote's fourth entry
counts the replicas whose gradients were not finite. In-process, one replica.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from spottrain import Task
from spottrain.trainer import config, steps, task_calls


class _Task(Task):
    def __init__(self, model, cfg):
        super().__init__({}, cfg)
        self._model = model

    def build_model(self):
        return self._model

    def train_dataset(self, spec):  # not read: the test hands the step its batch
        raise NotImplementedError

    def loss(self, labels, outputs):
        return tf.reduce_sum(tf.square(tf.reshape(outputs, [tf.shape(labels)[0], -1])), axis=1)


def _vote(model, x):
    cfg = config.TrainConfig(jit_compile="off")
    task = _Task(model, cfg)
    optimizer, optimizers = task_calls.build_optimizers(task, model, cfg)
    parts = steps.StepParts(
        cfg, task, model, optimizer, optimizers, tf.distribute.get_strategy(), 4, 1,
        task_calls.Blame(),
    )  # fmt: skip
    zero = tf.constant(0.0)
    return np.asarray(steps.make_step_functions(parts).train_step((x, tf.zeros([4])), zero, zero))


def test_nan_in_a_batch_is_never_a_finite_loss_with_finite_gradients():
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    )
    x = np.ones((4, 3), "float32")
    x[1, 2] = np.nan
    loss, stop, save, bad = _vote(model, tf.constant(x))[:4]
    assert (stop, save) == (0, 0)
    # Which of the two this CPU gives depends on its kernels; a green step is neither.
    assert not np.isfinite(loss) or bad == 1, (loss, bad)


def test_an_embeddings_sparse_gradient_is_checked_and_a_finite_step_votes_0():
    model = keras.Sequential(
        [keras.Input((3,), dtype="int32"), keras.layers.Embedding(50, 4), keras.layers.Flatten()]
    )
    loss, _, _, bad = _vote(model, tf.constant([[1, 2, 3]] * 4))[:4]
    assert np.isfinite(loss) and bad == 0
