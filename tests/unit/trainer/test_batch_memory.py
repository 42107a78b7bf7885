"""batch_memory.layer_bytes: the floor of a step's memory read from the model's graph."""

from __future__ import annotations

import keras
from keras import layers

from spottrain.trainer import batch_memory


def test_the_largest_layer_input_and_output_per_example():
    inputs = keras.Input((32, 32, 3), dtype="uint8")
    x = layers.Rescaling(1 / 255)(inputs)  # 3 KiB in, 12 KiB out
    x = layers.Conv2D(32, 3, padding="same", name="conv")(x)  # 12 KiB in, 128 KiB out
    x = layers.Flatten()(x)  # a view of its input: not counted as 256 KiB
    model = keras.Model(inputs, layers.Dense(10)(x))
    assert batch_memory.layer_bytes(model) == (12 * 1024 + 128 * 1024, "conv")


def test_layers_inside_a_nested_model_count_on_their_own():
    inner_in = keras.Input((8,))
    inner = keras.Model(inner_in, layers.Dense(1000, name="wide")(inner_in), name="inner")
    outer_in = keras.Input((8,))
    model = keras.Model(outer_in, layers.Dense(1)(inner(outer_in)))
    assert batch_memory.layer_bytes(model) == (8 * 4 + 1000 * 4, "wide")


def test_a_model_without_a_graph_of_layers_has_no_estimate():
    class Subclassed(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = layers.Dense(4)

        def call(self, x):
            return self.dense(x)

    model = Subclassed()
    model(keras.ops.ones((2, 3)))
    assert batch_memory.layer_bytes(model) == (0, "")
