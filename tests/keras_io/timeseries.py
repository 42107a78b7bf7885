"""keras-io examples/timeseries/timeseries_classification_from_scratch.py (Keras 3): FordA
engine-noise series classified by a fully convolutional network.

What it exercises: NumPy arrays ``(x_train, y_train)`` as fit takes them, the string
loss ``"sparse_categorical_crossentropy"`` with a string metric, BatchNormalization
(moving statistics that must resume too), a functional model.
"""

import keras
import numpy as np

from spottrain import KerasTask

num_classes = 2


def make_model(input_shape):
    input_layer = keras.layers.Input(input_shape)

    conv1 = keras.layers.Conv1D(filters=64, kernel_size=3, padding="same")(input_layer)
    conv1 = keras.layers.BatchNormalization()(conv1)
    conv1 = keras.layers.ReLU()(conv1)

    conv2 = keras.layers.Conv1D(filters=64, kernel_size=3, padding="same")(conv1)
    conv2 = keras.layers.BatchNormalization()(conv2)
    conv2 = keras.layers.ReLU()(conv2)

    conv3 = keras.layers.Conv1D(filters=64, kernel_size=3, padding="same")(conv2)
    conv3 = keras.layers.BatchNormalization()(conv3)
    conv3 = keras.layers.ReLU()(conv3)

    gap = keras.layers.GlobalAveragePooling1D()(conv3)

    output_layer = keras.layers.Dense(num_classes, activation="softmax")(gap)

    return keras.models.Model(inputs=input_layer, outputs=output_layer)


def fit_data():
    """FordA's shapes: 500 steps of one channel, labels 0/1 (the example's x_train, y_train)."""
    rng = np.random.default_rng(4)
    y_train = rng.integers(0, 2, 512)
    t = np.linspace(0, 1, 500)
    x_train = np.sin(2 * np.pi * (3 + 4 * y_train[:, None]) * t) + rng.normal(size=(512, 500))
    return x_train.reshape((512, 500, 1)).astype("float32"), y_train


def compiled_model():
    model = make_model(input_shape=(500, 1))
    model.compile(
        optimizer="adam",
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"],
    )
    return model


# -- the port --
class Task(KerasTask):
    def model(self):
        return compiled_model()

    def examples(self):
        return fit_data()


PORT_LINES = 6
