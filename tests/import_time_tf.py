"""A task module that creates TensorFlow objects when it is imported, as keras-io
examples write their vocabularies (e.g. keras-io examples/structured_data/
structured_data_classification_with_feature_space.py's top-level lookups).

Used by tests/integration/trainer/test_import_time_tf.py: a module-level
``StringLookup(vocabulary=...)``, a ``tf.constant`` and a ``TextVectorization``
adapted at import, all used by the model and the input pipeline.
"""

import keras
import numpy as np
import tensorflow as tf

from spottrain import KerasTask

COLOURS = ["red", "green", "blue", "yellow"]
# Each creates TensorFlow state at import: the eager context starts here.
colour_lookup = keras.layers.StringLookup(vocabulary=COLOURS, output_mode="int")
SCALE = tf.constant(0.5)
words = keras.layers.TextVectorization(max_tokens=20, output_sequence_length=4)
words.adapt(["a small red box", "a big green ball", "one blue cube", "the yellow sun"])


def _data(n=512):
    rng = np.random.default_rng(0)
    colour = rng.integers(0, len(COLOURS), n)
    x = rng.normal(size=(n, 3)).astype("float32")
    y = (x.sum(axis=1) * float(SCALE) + colour).astype("float32")
    return np.array(COLOURS)[colour], x, y


class Colours(KerasTask):
    """A regression on three numbers, a colour's id and a phrase's token ids."""

    def model(self):
        colour = keras.Input((), dtype="int64", name="colour")
        x = keras.Input((3,), name="x")
        tokens = keras.Input((4,), dtype="int64", name="tokens")
        embedded = keras.layers.Embedding(colour_lookup.vocabulary_size(), 4)(colour)
        phrase = keras.layers.Flatten()(keras.layers.Embedding(20, 2)(tokens))
        h = keras.layers.Concatenate()([embedded, x, phrase])
        model = keras.Model([colour, x, tokens], keras.layers.Dense(1)(h))
        model.compile(optimizer="adam", loss="mse")
        return model

    def examples(self):
        colour, x, y = _data()

        # The lookup and the adapted vectorizer run in the input pipeline, as keras-io
        # examples map them.
        def features(c, x, y):
            phrase = tf.strings.join(["a", c, "box"], separator=" ")
            return (colour_lookup(c), x, words(phrase)), y

        return tf.data.Dataset.from_tensor_slices((colour, x, y)).map(features)
