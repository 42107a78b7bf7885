"""keras-io guides/training_with_built_in_methods.py (Keras 3), "Using a
``keras.utils.PyDataset`` object as input": MNIST digits from a ``PyDataset``.

What it exercises (fit's arguments): ``x`` a ``keras.utils.PyDataset`` (index-based
batches of its own size, 32: fit ignores ``batch_size=64`` for it, as the guide's call
passes it), ``validation_data`` another ``PyDataset``, ``epochs=1``; the guide's
``get_compiled_model()``: a functional MLP, ``"rmsprop"``,
``"sparse_categorical_crossentropy"``, ``["sparse_categorical_accuracy"]``.

Changed: MNIST's 50 000 training and 10 000 validation digits (the guide reserves
the last 10 000) are 1 280 and 256 generated ones of its shapes (784 floats in
[0, 1], float32 labels). The store this was written from holds the guide's
TensorFlow 2 text (a ``Sequence``); the ``PyDataset`` class and fit call are the
Keras 3 guide's as its users read them.
"""

import keras
import numpy as np
from keras import layers

from spottrain import FitArgs, KerasTask


def load_data():
    """The guide's preprocessed MNIST: ``x`` ``[N, 784]`` float32 in [0, 1], float32 labels."""
    rng = np.random.default_rng(14)
    y = rng.integers(0, 10, 1536)
    x = rng.random((1536, 784)).astype("float32") * 0.5
    for i, label in enumerate(y):
        x[i, 78 * label : 78 * label + 78] += 0.5
    x_train, y_train = x[:-256], y[:-256].astype("float32")
    x_val, y_val = x[-256:], y[-256:].astype("float32")
    return x_train, y_train, x_val, y_val


def get_uncompiled_model():
    inputs = keras.Input(shape=(784,), name="digits")
    x = layers.Dense(64, activation="relu", name="dense_1")(inputs)
    x = layers.Dense(64, activation="relu", name="dense_2")(x)
    outputs = layers.Dense(10, activation="softmax", name="predictions")(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    return model


def get_compiled_model():
    model = get_uncompiled_model()
    model.compile(
        optimizer="rmsprop",
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"],
    )
    return model


class ExamplePyDataset(keras.utils.PyDataset):
    def __init__(self, x, y, batch_size, **kwargs):
        super().__init__(**kwargs)
        self.x = x
        self.y = y
        self.batch_size = batch_size

    def __len__(self):
        return int(np.ceil(len(self.x) / float(self.batch_size)))

    def __getitem__(self, idx):
        batch_x = self.x[idx * self.batch_size : (idx + 1) * self.batch_size]
        batch_y = self.y[idx * self.batch_size : (idx + 1) * self.batch_size]
        return batch_x, batch_y


# -- the port --
class Task(KerasTask):
    def model(self):
        return get_compiled_model()

    def fit(self):
        x_train, y_train, x_val, y_val = load_data()
        train_py_dataset = ExamplePyDataset(x_train, y_train, batch_size=32)
        val_py_dataset = ExamplePyDataset(x_val, y_val, batch_size=32)
        return FitArgs(train_py_dataset, batch_size=64, validation_data=val_py_dataset, epochs=1)


PORT_LINES = 12
