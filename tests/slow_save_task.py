"""A task whose checkpoints take long to write, to kill an attempt during a save.

examples.regression's MLP plus a non-trainable weight of ``BALLAST_MB`` that no
step reads: steps stay fast, while each save copies and writes it (a large model's
checkpoint in a small model's run). Used by tests/test_ledger_truth.py.
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
