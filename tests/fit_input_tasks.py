"""KerasTasks giving model.fit's inputs through fit(): arrays, a PyDataset, a generator, a dataset.

``Slices`` is read by index (spottrain/trainer/fit_slices.py), ``Data`` as a stream
(spottrain/trainer/fit_dataset.py). Used by tests/integration/trainer/test_fit_inputs.py
(2 workers, SIGTERM, retry).
"""

from __future__ import annotations

import keras
import numpy as np

from spottrain import FitArgs, KerasTask


def _model():
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)]
    )
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer="adam", loss=loss, metrics=["accuracy"])
    return model


def _points(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    centres = np.array([[0, 3, 1, 0], [3, -2, 0, 1], [-3, -2, 1, 1]], dtype="float32")
    return (centres[labels] + rng.normal(size=(n, 4))).astype("float32"), labels


class Arrays(KerasTask):
    """Arrays with fit's batch_size, class_weight and validation_split: --epochs says how long."""

    def model(self):
        return _model()

    def fit(self):
        x, y = _points(250)  # 200 to train after the split: 12 steps of 16, 8 dropped
        return FitArgs(
            x, y, batch_size=16, validation_split=0.2, class_weight={0: 1.0, 1: 2.0, 2: 0.5}
        )


class Batches(keras.utils.PyDataset):
    """Batch i: 16 points, made from i alone (index-based, as PyDataset is)."""

    def __len__(self):
        return 10

    def __getitem__(self, i):
        return _points(16, seed=100 + i)


class PyData(KerasTask):
    """A PyDataset and fit's epochs: no length flag at all."""

    def model(self):
        return _model()

    def fit(self):
        return FitArgs(Batches(), epochs=4)


class Generator(KerasTask):
    """A generator (made anew by each fit() call) with steps_per_epoch and epochs."""

    def model(self):
        return _model()

    def fit(self):
        def batches():
            for i in range(10_000):
                yield _points(16, seed=1000 + i)

        return FitArgs(batches(), steps_per_epoch=10, epochs=3)


class Data(KerasTask):
    """A tf.data dataset of single examples with a stateless jitter: each epoch its own pass."""

    def model(self):
        return _model()

    def fit(self):
        import tensorflow as tf

        def jitter(i, xy):
            x, y = xy
            noise = tf.random.stateless_normal([4], seed=tf.stack([i, tf.constant(3, tf.int64)]))
            return x + 0.1 * noise, y

        ds = tf.data.Dataset.from_tensor_slices(_points(200)).enumerate().map(jitter)
        return FitArgs(ds, batch_size=16, epochs=4)  # 12 steps an epoch, 8 dropped


class Slices(KerasTask):
    """from_tensor_slices, a shuffle and a stateless jitter by example id: read by index."""

    def model(self):
        return _model()

    def fit(self):
        import tensorflow as tf

        def jitter(x, y, i):
            noise = tf.random.stateless_normal([4], seed=tf.stack([i, tf.constant(3, tf.int64)]))
            return x + 0.1 * noise, y

        x, y = _points(200)
        ds = tf.data.Dataset.from_tensor_slices((x, y, np.arange(200))).shuffle(64).map(jitter)
        return FitArgs(ds.batch(10), batch_size=16, epochs=4)  # 12 steps of 16, 8 dropped


# Where the file-backed tasks read: written or prepared by the test before it launches
# the workers (tests/integration/trainer/test_fit_inputs.py).
DATA_ENV = "SPOTTRAIN_TEST_FIT_DATA"


def write_records(folder: str, shards: int = 4) -> None:
    """``_points(200)`` as TFRecord files of serialized ``(x, y)``, example i in shard i % 4."""
    import tensorflow as tf

    x, y = _points(200)
    for shard in range(shards):
        with tf.io.TFRecordWriter(f"{folder}/points-{shard}.tfrecord") as w:
            for i in range(shard, 200, shards):
                w.write(tf.io.serialize_tensor(np.append(x[i], y[i]).astype("float32")).numpy())


class Records(KerasTask):
    """TFRecord files, parsed and jittered by a map: a stream whose maps run on each share."""

    def model(self):
        return _model()

    def fit(self):
        import os

        import tensorflow as tf

        def parse(record):
            row = tf.io.parse_tensor(record, tf.float32)
            row.set_shape([5])
            return row[:4], tf.cast(row[4], tf.int64)

        files = sorted(tf.io.gfile.glob(os.path.join(os.environ[DATA_ENV], "*.tfrecord")))
        ds = tf.data.TFRecordDataset(files).map(parse)
        return FitArgs(ds, batch_size=16, epochs=4, steps_per_epoch=12)


class Tfds(KerasTask):
    """A prepared tfds dataset (tests/tfds_digits: 1,600 digits), decoded by tfds' maps."""

    def model(self):
        model = keras.Sequential(
            [keras.Input((64,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(10)]
        )
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(optimizer="adam", loss=loss)
        return model

    def fit(self):
        import os

        import tensorflow as tf
        import tensorflow_datasets as tfds

        from tests import tfds_digits  # noqa: F401 - registers digits_sklearn

        ds = tfds.load(
            "digits_sklearn", split="train", data_dir=os.environ[DATA_ENV], as_supervised=True
        )
        ds = ds.map(lambda x, y: (tf.reshape(tf.cast(x, tf.float32) / 255.0, [64]), y))
        return FitArgs(ds, batch_size=64, epochs=2)  # 25 steps an epoch


class Stream(KerasTask):
    """A dataset of unknown length, and no steps_per_epoch: --epochs cannot say how long."""

    def model(self):
        return _model()

    def fit(self):
        import tensorflow as tf

        x, y = _points(64)
        return FitArgs(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16))
