"""Tasks whose saves or steps take long, to cut an attempt off in the middle of one.

examples.regression's MLP plus a non-trainable weight of ``BALLAST_MB`` that no
step reads: steps stay fast, while each save copies and writes it (a large model's
checkpoint in a small model's run). Used by tests/integration/trainer/test_ledger_truth.py.
"""

from examples.regression import Regression

BALLAST_MB = 200


class SlowToSave(Regression):
    def build_model(self):
        import keras

        class Ballast(keras.layers.Layer):
            def build(self, input_shape):
                self.ballast = self.add_weight(
                    shape=(BALLAST_MB * 2**18,), initializer="ones", trainable=False
                )

            def call(self, x):
                return x

        model = super().build_model()
        return keras.Sequential([keras.Input((self.features,)), Ballast(), *model.layers])


class SlowSteps(Regression):
    """Each batch takes ``STEP_S`` to produce: the trainer's main thread spends its
    steps waiting inside TensorFlow, where no Python signal handler runs.

    With ``MARK_ENV`` set, each wait first writes its start (``time.time()``) to that
    file: a test reads when a wait began from there, not from when a loaded machine
    handed it a step's log line."""

    STEP_S = 10.0
    MARK_ENV = "SLOW_STEPS_MARK"

    def train_dataset(self, spec):
        import os
        import time

        import tensorflow as tf

        mark = os.environ.get(self.MARK_ENV)

        def pause(x):
            if mark:
                with open(f"{mark}.tmp", "w") as f:
                    f.write(repr(time.time()))
                os.replace(f"{mark}.tmp", mark)
            time.sleep(self.STEP_S)
            return x

        def slow(x, y):
            out = tf.numpy_function(pause, [x], x.dtype, stateful=True)
            out.set_shape(x.shape)
            return out, y

        return super().train_dataset(spec).map(slow)
