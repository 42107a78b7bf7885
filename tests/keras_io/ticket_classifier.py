"""keras-io guides/functional_api.py (Keras 3), "Models with multiple inputs and outputs":
a ticket classifier with three inputs and two outputs.

What it exercises: dicts of arrays for inputs and targets, a loss per output by name,
``loss_weights``, features that are integer token sequences (two LSTMs), a
multi-hot input.
"""

import keras
import numpy as np
from keras import layers

from spottrain import KerasTask

num_tags = 12  # Number of unique issue tags
num_words = 10000  # Size of vocabulary obtained when preprocessing text data
num_departments = 4  # Number of departments for predictions


def make_model():
    title_input = keras.Input(shape=(None,), name="title")  # Variable-length sequence of ints
    body_input = keras.Input(shape=(None,), name="body")  # Variable-length sequence of ints
    tags_input = keras.Input(shape=(num_tags,), name="tags")  # Binary vectors of size `num_tags`

    title_features = layers.Embedding(num_words, 64)(title_input)
    body_features = layers.Embedding(num_words, 64)(body_input)
    title_features = layers.LSTM(128)(title_features)
    body_features = layers.LSTM(32)(body_features)

    x = layers.concatenate([title_features, body_features, tags_input])

    priority_pred = layers.Dense(1, name="priority")(x)
    department_pred = layers.Dense(num_departments, name="department")(x)

    return keras.Model(
        inputs=[title_input, body_input, tags_input],
        outputs={"priority": priority_pred, "department": department_pred},
    )


def compiled_model():
    model = make_model()
    model.compile(
        optimizer=keras.optimizers.RMSprop(1e-3),
        loss={
            "priority": keras.losses.BinaryCrossentropy(from_logits=True),
            "department": keras.losses.CategoricalCrossentropy(from_logits=True),
        },
        loss_weights={"priority": 1.0, "department": 0.2},
    )
    return model


def fit_data():
    """The guide's dummy data: token ids, multi-hot tags, two targets, as dicts."""
    rng = np.random.default_rng(5)
    title_data = rng.integers(num_words, size=(1280, 10))
    body_data = rng.integers(num_words, size=(1280, 100))
    tags_data = rng.integers(2, size=(1280, num_tags)).astype("float32")
    priority_targets = rng.random(size=(1280, 1))
    dept_targets = rng.integers(2, size=(1280, num_departments))
    return (
        {"title": title_data, "body": body_data, "tags": tags_data},
        {"priority": priority_targets, "department": dept_targets},
    )


# -- the port --
class Task(KerasTask):
    def model(self):
        return compiled_model()

    def examples(self):
        return fit_data()


PORT_LINES = 6
