"""keras-io examples/nlp/text_classification_from_scratch.py (Keras 3): sentiment of raw
movie-review text.

What it exercises: a non-image pipeline of raw strings, batched as
``text_dataset_from_directory`` gives it, vectorised by a ``TextVectorization`` layer
mapped over the dataset (adapted on its text), cached; the string loss
``"binary_crossentropy"`` on labels of shape ``[B]`` against outputs ``[B, 1]`` (fit's
loss wrapper reconciles the ranks); string optimizer and metric.
"""

import re
import string

import keras
import numpy as np
import tensorflow as tf
from keras import layers

from spottrain import KerasTask

max_features = 20000
embedding_dim = 128
sequence_length = 500


def custom_standardization(input_data):
    lowercase = tf.strings.lower(input_data)
    stripped_html = tf.strings.regex_replace(lowercase, "<br />", " ")
    return tf.strings.regex_replace(stripped_html, f"[{re.escape(string.punctuation)}]", "")


def raw_train_ds():
    """``text_dataset_from_directory(..., batch_size=32)``'s elements: (strings, int32 labels)."""
    rng = np.random.default_rng(3)
    good = ["great", "wonderful", "moving", "superb", "fun"]
    bad = ["awful", "boring", "dull", "terrible", "weak"]
    common = ["the", "film", "was", "a", "plot", "actors", "and", "<br />", "story", "!"]
    labels = rng.integers(0, 2, 640).astype("int32")
    texts = [
        " ".join(rng.choice(common + (good if y else bad), size=rng.integers(20, 80)))
        for y in labels
    ]
    return tf.data.Dataset.from_tensor_slices((texts, labels)).batch(32)


def make_vectorize_layer():
    vectorize_layer = keras.layers.TextVectorization(
        standardize=custom_standardization,
        max_tokens=max_features,
        output_mode="int",
        output_sequence_length=sequence_length,
    )
    text_ds = raw_train_ds().map(lambda x, y: x)
    vectorize_layer.adapt(text_ds)
    return vectorize_layer


def train_ds():
    vectorize_layer = make_vectorize_layer()

    def vectorize_text(text, label):
        text = tf.expand_dims(text, -1)
        return vectorize_layer(text), label

    ds = raw_train_ds().map(vectorize_text)
    return ds.cache().prefetch(buffer_size=10)


def compiled_model():
    inputs = keras.Input(shape=(None,), dtype="int64")
    x = layers.Embedding(max_features, embedding_dim)(inputs)
    x = layers.Dropout(0.5)(x)
    x = layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
    x = layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
    x = layers.GlobalMaxPooling1D()(x)
    x = layers.Dense(128, activation="relu")(x)
    x = layers.Dropout(0.5)(x)
    predictions = layers.Dense(1, activation="sigmoid", name="predictions")(x)
    model = keras.Model(inputs, predictions)
    model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
    return model


fit_data = train_ds


# -- the port --
class Task(KerasTask):
    def model(self):
        return compiled_model()

    def examples(self):
        return train_ds()


PORT_LINES = 6
