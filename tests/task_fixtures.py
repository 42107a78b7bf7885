"""Broken tasks, for the one-line refusals of ``--task`` (tests/test_task_api.py)."""

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

    def examples(self):
        return None


def _two():
    from examples.two_optimizers import TwoOptimizers

    return TwoOptimizers


class UnbuiltOptimizers(_two()):
    def build_optimizers(self, model):
        import keras

        return {"encoder": keras.optimizers.SGD(), "head": keras.optimizers.Adam()}
