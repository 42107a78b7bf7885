"""keras-io examples/vision/mnist_convnet.py (Keras 3): a simple MNIST convnet.

What it exercises (fit's arguments): arrays ``x_train, y_train`` with ``batch_size=128``,
``epochs=15`` and ``validation_split=0.1`` (fit holds out the last 10 % before it
shuffles); the string loss ``"categorical_crossentropy"`` on one-hot labels
(``to_categorical``), the string optimizer ``"adam"`` and the compiled metric
``"accuracy"``, a Dropout layer.

Changed: MNIST's download is 1 280 generated 28x28 digits of its shapes and dtypes
(60 000 in the example: the CPU scale), each class a bright square at its own place,
so accuracy rises. The model, compile and fit arguments are the example's.
"""

import keras
import numpy as np
from keras import layers

from spottrain import FitArgs, KerasTask

# Model / data parameters
num_classes = 10
input_shape = (28, 28, 1)


def load_data():
    """``keras.datasets.mnist.load_data()``'s training half: uint8 images, int labels."""
    rng = np.random.default_rng(10)
    y_train = rng.integers(0, num_classes, 1280)
    x_train = rng.integers(0, 96, (1280, 28, 28)).astype("uint8")
    for i, y in enumerate(y_train):
        r, c = 2 + 8 * (y // 4), 2 + 6 * (y % 4)
        x_train[i, r : r + 6, c : c + 6] = 255
    return x_train, y_train


def prepared_data():
    """The example's preparation, unchanged: scale to [0, 1], a channel axis, one-hot."""
    x_train, y_train = load_data()
    # Scale images to the [0, 1] range
    x_train = x_train.astype("float32") / 255
    # Make sure images have shape (28, 28, 1)
    x_train = np.expand_dims(x_train, -1)
    # convert class vectors to binary class matrices
    y_train = keras.utils.to_categorical(y_train, num_classes)
    return x_train, y_train


def compiled_model():
    model = keras.Sequential(
        [
            keras.Input(shape=input_shape),
            layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
            layers.MaxPooling2D(pool_size=(2, 2)),
            layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
            layers.MaxPooling2D(pool_size=(2, 2)),
            layers.Flatten(),
            layers.Dropout(0.5),
            layers.Dense(num_classes, activation="softmax"),
        ]
    )
    model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
    return model


batch_size = 128
epochs = 15


# -- the port --
class Task(KerasTask):
    def model(self):
        return compiled_model()

    def fit(self):
        x_train, y_train = prepared_data()
        return FitArgs(x_train, y_train, batch_size=batch_size, epochs=epochs, validation_split=0.1)


PORT_LINES = 10
