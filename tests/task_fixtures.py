"""Broken tasks, for the one-line refusals of ``--task``.

Used by tests/integration/trainer/test_task_api.py.
"""

from spottrain.trainer.task_api import KerasTask, Task


class NotATask:
    """Has the methods, but is not a Task."""

    def build_model(self):
        return None


class NoLoss(Task):
    def build_model(self):
        return None

    def train_dataset(self, spec):
        return None


class PrepareBreaks(Task):
    def prepare(self):
        raise KeyError("columns")

    def build_model(self):
        return None

    def train_dataset(self, spec):
        return None

    def loss(self, labels, outputs):
        return None


class BuildBreaks(PrepareBreaks):
    def prepare(self):
        pass

    def build_model(self):
        raise RuntimeError("no such layer: Dense2")


def _regression():
    from examples.regression import Regression

    return Regression


class WrongShapes(_regression()):
    """The model takes 5 features; the data has 8."""

    def build_model(self):
        import keras

        return keras.Sequential([keras.Input((5,)), keras.layers.Dense(1)])


class RunsOut(_regression()):
    """Its dataset ends after 4 steps (no repeat)."""

    def train_dataset(self, spec):
        return super().train_dataset(spec).take(4 * spec.context.num_replicas_in_sync)


class Unseeded(_regression()):
    """Shuffles its batches without a seed: a resume trains on other batches."""

    def train_dataset(self, spec):
        return super().train_dataset(spec).shuffle(64)


class IgnoresStart(_regression()):
    """Always starts at step 0: a resume repeats the batches it already trained on."""

    def train_dataset(self, spec):
        import dataclasses

        return super().train_dataset(dataclasses.replace(spec, start_step=0))


class KerasNoExamples(KerasTask):
    def model(self):
        return None


class KerasUncompiled(KerasTask):
    def model(self):
        import keras

        return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])

    def examples(self):  # good data: the model is what is wrong
        import numpy as np

        return np.zeros((64, 2), "float32"), np.zeros((64, 1), "float32")


def _two():
    from examples.two_optimizers import TwoOptimizers

    return TwoOptimizers


class UnbuiltOptimizers(_two()):
    def build_optimizers(self, model):
        import keras

        return {"encoder": keras.optimizers.SGD(), "head": keras.optimizers.Adam()}


# -- issue 29 item 4: each mistake in a task is one line naming the real error and the method


class OptimizersList(_two()):
    """build_optimizers() returns a list, not a dict by name."""

    def build_optimizers(self, model):
        return list(super().build_optimizers(model).values())


class StepShapeBug(_two()):
    """Its own train_step subtracts a [3, 3] tensor from the [16, 1] outputs."""

    def train_step(self, model, optimizers, features, labels, global_batch):
        import tensorflow as tf

        return tf.reduce_mean(model(features) - tf.ones([3, 3]))


class StepIndexBug(_two()):
    """Its own train_step reads example 99 of a batch of 16: fails when run, not traced."""

    def train_step(self, model, optimizers, features, labels, global_batch):
        import tensorflow as tf

        return tf.reduce_mean(tf.gather(model(features), [99]))


class ModelNone(_regression()):
    def build_model(self):
        return None


class LossPerClass(_regression()):
    """Its loss is [batch, k]: one value per example and output, not per example."""

    def loss(self, labels, outputs):
        import tensorflow as tf

        return tf.square(outputs - labels) * tf.ones([1, 3])


class LossInt(_regression()):
    def loss(self, labels, outputs):
        import tensorflow as tf

        return tf.cast(tf.square(outputs - labels)[:, 0], tf.int32)


class StringFeatures(_regression()):
    """Its features are strings (a CSV read but never parsed)."""

    def train_dataset(self, spec):
        import tensorflow as tf

        ds = super().train_dataset(spec)
        return ds.map(lambda x, y: (tf.strings.as_string(x), y))


class DatasetList(_regression()):
    def train_dataset(self, spec):
        return [1, 2, 3]


class FeaturesOnly(_regression()):
    def train_dataset(self, spec):
        return super().train_dataset(spec).map(lambda x, y: x)


class HostOpInModel(_regression()):
    """A layer that calls back into Python: runs, but XLA cannot compile it."""

    def build_model(self):
        import keras
        import tensorflow as tf

        class Host(keras.layers.Layer):
            def call(self, x):
                y = tf.numpy_function(lambda a: a, [x], tf.float32)
                return tf.ensure_shape(y, x.shape)

        return keras.Sequential([keras.Input((8,)), Host(), keras.layers.Dense(1)])


# -- issue 41: a KerasTask's mistakes (what fit would refuse too) are one line


def _dense_model(optimizer="adam", loss="mse"):
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=optimizer, loss=loss)
    return model


class KerasUnequalArrays(KerasTask):
    """x and y of different lengths: fit refuses them too."""

    def model(self):
        return _dense_model()

    def examples(self):
        import numpy as np

        return np.zeros((64, 3), "float32"), np.zeros(60, "float32")


class KerasStepNoLoss(KerasTask):
    """An own train_step that returns only an accuracy: nothing to guard or log."""

    def model(self):
        import keras

        class NoLoss(keras.Sequential):
            def train_step(self, data):
                super().train_step(data)
                return {"acc": 1.0}

        model = NoLoss([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse")
        return model

    def examples(self):
        import numpy as np

        return np.zeros((64, 3), "float32"), np.zeros(64, "float32")


# -- issue 42: NaN in the data, not in the training


class NanFeatures(_regression()):
    """From step 4 (``from_step`` + 1) on, feature 3 of the first ``nan_rows`` examples is NaN.

    ``nan_rows`` (task arg, default 5) counts from the start of the global batch; with
    ``tail: true`` they are its last rows instead (another worker's share on 2 workers).
    """

    def prepare(self):
        self.nan_rows = int(self.args.pop("nan_rows", 5))
        self.tail = bool(self.args.pop("tail", False))
        self.from_step = int(self.args.pop("from_step", 3))  # 0-based: step 4
        super().prepare()

    def train_dataset(self, spec):
        import tensorflow as tf

        rows, tail, features, spoiled = self.nan_rows, self.tail, self.features, self.from_step
        ds = super().train_dataset(spec)
        part, batch = spec.worker_slice, spec.global_batch
        first = batch - rows if tail else 0

        def spoil(step, xy):
            x, y = xy
            global_rows = tf.range(part.start, part.stop)
            bad = (global_rows >= first) & (global_rows < first + rows) & (step >= spoiled)
            column = tf.one_hot(3, features, on_value=True, off_value=False)
            mask = bad[:, None] & column[None, :]
            return tf.where(mask, tf.constant(float("nan")), x), y

        return ds.enumerate(spec.start_step).map(spoil)


class KerasModelRaises(KerasTask):
    """model() raises: the line names model(), the method the author wrote."""

    def model(self):
        raise ValueError("no such layer 'Dense3'")

    def examples(self):
        import numpy as np

        return np.zeros((64, 3), "float32"), np.zeros(64, "float32")


class KerasModelNotModel(KerasModelRaises):
    def model(self):
        return 42


class KerasExamplesRaise(KerasTask):
    """examples() raises (called through fit()'s default): the line names examples()."""

    def model(self):
        return _dense_model()

    def examples(self):
        raise FileNotFoundError("gs://my-bucket/train.csv")


class KerasEmptyArrays(KerasExamplesRaise):
    def examples(self):
        import numpy as np

        return np.zeros((0, 3), "float32"), np.zeros(0, "float32")


class KerasEmptyFiltered(KerasExamplesRaise):
    """A dataset of no known length that yields nothing (every example filtered out)."""

    def examples(self):
        import numpy as np
        import tensorflow as tf

        x, y = np.zeros((64, 3), "float32"), np.zeros(64, "float32")
        return tf.data.Dataset.from_tensor_slices((x, y)).filter(lambda a, b: b > 1)
