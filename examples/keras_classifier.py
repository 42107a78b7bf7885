r"""The shortest path: the compiled model and the data you would pass to ``model.fit``.

::

    python -m spottrain.trainer.launch --workers 2 --output-dir out/keras -- \\
        --task examples.keras_classifier:Classifier --train-steps 300
"""

import keras
import numpy as np

from spottrain import KerasTask


class Classifier(KerasTask):
    """Three classes of points around three centres (generated; bring your own data)."""

    def model(self):
        """The compiled model: each step is its own train_step, as under fit."""
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dense(3)])  # fmt: skip
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(optimizer="adam", loss=loss, metrics=["accuracy"])
        return model

    def examples(self):
        """One epoch of (point, class), always in the same order: fit's (x, y)."""
        rng = np.random.default_rng(0)
        labels = rng.integers(0, 3, 3000)
        points = np.array([[0, 3], [3, -2], [-3, -2]])[labels] + rng.normal(size=(3000, 2))
        return points.astype("float32"), labels
