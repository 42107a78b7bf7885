"""keras-io examples/vision/siamese_contrastive.py (Keras 3): a siamese network with a
contrastive loss on pairs of digits.

What it exercises: a two-input model fed a list of two arrays, a custom loss that
returns the *batch mean* (not one value per example), a ``Lambda`` layer, a string
optimizer (``"RMSprop"``) and a string metric.
"""

import keras
import numpy as np
from keras import layers, ops

from spottrain import KerasTask

margin = 1  # Margin for contrastive loss.


def euclidean_distance(vects):
    x, y = vects
    sum_square = ops.sum(ops.square(x - y), axis=1, keepdims=True)
    return ops.sqrt(ops.maximum(sum_square, keras.backend.epsilon()))


def make_siamese():
    input = keras.layers.Input((28, 28, 1))
    x = keras.layers.BatchNormalization()(input)
    x = layers.Conv2D(4, (5, 5), activation="tanh")(x)
    x = layers.AveragePooling2D(pool_size=(2, 2))(x)
    x = layers.Conv2D(16, (5, 5), activation="tanh")(x)
    x = layers.AveragePooling2D(pool_size=(2, 2))(x)
    x = layers.Flatten()(x)
    x = keras.layers.BatchNormalization()(x)
    x = layers.Dense(10, activation="tanh")(x)
    embedding_network = keras.Model(input, x)

    input_1 = keras.layers.Input((28, 28, 1))
    input_2 = keras.layers.Input((28, 28, 1))
    tower_1 = embedding_network(input_1)
    tower_2 = embedding_network(input_2)
    merge_layer = keras.layers.Lambda(euclidean_distance, output_shape=(1,))([tower_1, tower_2])
    normal_layer = keras.layers.BatchNormalization()(merge_layer)
    output_layer = layers.Dense(1, activation="sigmoid")(normal_layer)
    return keras.Model(inputs=[input_1, input_2], outputs=output_layer)


def loss(margin=1):
    def contrastive_loss(y_true, y_pred):
        square_pred = ops.square(y_pred)
        margin_square = ops.square(ops.maximum(margin - (y_pred), 0))
        return ops.mean((1 - y_true) * square_pred + (y_true) * margin_square)

    return contrastive_loss


def compiled_model():
    siamese = make_siamese()
    siamese.compile(loss=loss(margin=margin), optimizer="RMSprop", metrics=["accuracy"])
    return siamese


def fit_data():
    """The example's ``[x_train_1, x_train_2], labels_train``: pairs and 0/1 labels."""
    rng = np.random.default_rng(2)
    x_1 = rng.random((512, 28, 28, 1)).astype("float32")
    x_2 = rng.random((512, 28, 28, 1)).astype("float32")
    return [x_1, x_2], rng.integers(0, 2, 512).astype("float32")


# -- the port --
class Task(KerasTask):
    def model(self):
        return compiled_model()

    def examples(self):
        return fit_data()


PORT_LINES = 6
