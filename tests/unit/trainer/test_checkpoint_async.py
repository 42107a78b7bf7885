"""Asynchronous periodic saves: each checkpoint holds the values of its own step."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from spottrain.trainer import checkpoint_store, checkpointing
from spottrain.trainer.config import TrainConfig
from spottrain.trainer.distribution import Cluster


def _state(seed: int):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(4),
            keras.layers.BatchNormalization(),
            keras.layers.Dropout(0.5),
            keras.layers.Dense(2),
        ]
    )
    optimizer = keras.optimizers.Adam(0.01)
    optimizer.build(model.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64)
    # The same object graph as train_lib's checkpoint (RNG states included).
    ckpt = tf.train.Checkpoint(
        model=model,
        optimizer=optimizer,
        step=step,
        non_trainable=[v.value for v in model.non_trainable_variables],
    )
    return model, optimizer, step, ckpt


def _train_step(model, optimizer, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True)))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))


def _values(model, optimizer, step):
    return [v.numpy().copy() for v in [*model.variables, *optimizer.variables, step]]


def test_async_saves_snapshot_their_step_while_training_goes_on(tmp_path):
    cfg = TrainConfig(checkpoint_dir=str(tmp_path), keep_checkpoints=5)
    model, optimizer, step, ckpt = _state(0)
    store = checkpoint_store.CheckpointStore(cfg, Cluster("", 0, 1, True), ckpt)
    store.warm_up()
    x = np.random.default_rng(0).normal(size=(16, 8)).astype("float32")
    expected = {}
    for n in range(1, 4):
        _train_step(model, optimizer, x)
        step.assign(n)
        expected[n] = _values(model, optimizer, step)
        store.save(n, wait=False)
        # Training goes on while the files are written: they must not see this.
        _train_step(model, optimizer, x)
    store.close()
    assert [s for s, _ in checkpointing.list_checkpoints(str(tmp_path))] == [3, 2, 1]
    for n, values in expected.items():
        model2, optimizer2, step2, ckpt2 = _state(1)
        ckpt2.restore(f"{tmp_path}/ckpt-{n}").assert_existing_objects_matched()
        restored = _values(model2, optimizer2, step2)
        assert all(np.array_equal(a, b) for a, b in zip(values, restored, strict=True)), n


def test_the_keras_fix_is_still_needed():
    """When Keras stops creating a variable per copy, drop _fix_keras_async_copy."""
    from keras.src.backend.tensorflow import core

    checkpoint_store._fix_keras_async_copy()
    method = core.Variable._copy_trackable_to_cpu
    assert getattr(method, "_spottrain_fix", False), (
        "Keras changed _copy_trackable_to_cpu: check whether the fix is still needed"
    )
