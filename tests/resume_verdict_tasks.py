"""Tasks on which --check's resume verdict used to be wrong (issue 54), one each way.

Used by tests/unit/trainer/test_resume_verdict.py (the verdict) and
tests/integration/trainer/test_resume_verdict.py (real resumes on 2 workers):

- ``ShuffledAtLoad``: ``examples()`` shuffles once with NumPy's global generator,
  unseeded. Every real process seeds it (``keras.utils.set_random_seed``) before, so a
  resume reads the same order; the probe, which built two pipelines in one process,
  said "not bit-identical".
- ``TfShuffledAtLoad``: ``examples()`` is a dataset with an unseeded ``shuffle``: its op
  seed comes from TensorFlow's global seed and a counter of ops drawn so far, the same
  in every fresh process; the probe's second pipeline drew the counter's next one.
- ``NoisyStep``: the model's ``train_step`` adds ``tf.random.normal`` noise, a stateful
  op whose position no checkpoint keeps: a resume draws other noise; the probe, which
  read only batches, said "resumes reproduce the batches".
- ``SeededNoisyStep``: the same noise from ``keras.random.normal`` with the model's own
  ``SeedGenerator`` (its state is a variable the engine checkpoints): resumes exactly.
"""

import keras
import numpy as np
import tensorflow as tf

from spottrain import KerasTask


def _arrays(n=640):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(n, 4)).astype("float32")
    return x, (x @ np.array([1.0, -2.0, 0.5, 3.0]) + 0.1).astype("float32")


class _Regression(KerasTask):
    model_class = keras.Sequential

    def model(self):
        model = self.model_class([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        return model

    def examples(self):
        return _arrays()


class ShuffledAtLoad(_Regression):
    def examples(self):
        x, y = _arrays()
        order = np.random.permutation(len(x))  # NumPy's global generator, no seed
        return x[order], y[order]


class TfShuffledAtLoad(_Regression):
    def examples(self):
        return tf.data.Dataset.from_tensor_slices(_arrays()).shuffle(640)  # no seed


class NoisyModel(keras.Sequential):
    def train_step(self, data):
        x, y = data
        return super().train_step((x + tf.random.normal(tf.shape(x), stddev=0.3), y))


class NoisyStep(_Regression):
    model_class = NoisyModel


class SeededNoisyModel(keras.Sequential):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.noise_seed = keras.random.SeedGenerator(7)

    def train_step(self, data):
        x, y = data
        noise = keras.random.normal(tf.shape(x), stddev=0.3, seed=self.noise_seed)
        return super().train_step((x + noise, y))


class SeededNoisyStep(_Regression):
    model_class = SeededNoisyModel
