r"""The shortest path: a compiled Keras model and a tf.data pipeline, nothing else.

::

    python -m spottrain.trainer.launch --workers 2 --output-dir out/keras -- \\
        --task examples.keras_classifier:Classifier --train-steps 300
"""

import keras
import numpy as np
import tensorflow as tf

from spottrain import KerasTask


class Classifier(KerasTask):
    """Three classes of points around three centres (generated; bring your own data)."""

    def model(self):
        """A compiled model; its loss is what the engine minimises."""
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dense(3)])  # fmt: skip
        model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    def examples(self):
        """One epoch of (point, class) examples, always in the same order."""
        rng = np.random.default_rng(0)
        labels = rng.integers(0, 3, 3000)
        points = np.array([[0, 3], [3, -2], [-3, -2]])[labels] + rng.normal(size=(3000, 2))
        return tf.data.Dataset.from_tensor_slices((points.astype("float32"), labels))
