"""keras-io examples/vision/mlp_image_classification.py (Keras 3): the MLP-Mixer on
CIFAR-100 (the example's first model; it then trains FNet and gMLP the same way).

What it exercises (fit's arguments): ``x=x_train, y=y_train``, ``batch_size=128``,
``epochs=50``, ``validation_split=0.1``, ``callbacks=[early_stopping, reduce_lr]``:
``EarlyStopping(monitor="val_loss", patience=10, restore_best_weights=True)`` (its
best weights must resume too, and are what fit leaves in the model) and
``ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=5)`` (sets the
optimizer's learning rate: its ``wait`` and the rate must resume); ``AdamW`` with
weight decay; two named metric objects (``"acc"``, ``"top5-acc"``); a loss object with
``from_logits``; random augmentation layers inside the model (``RandomFlip``,
``RandomZoom``: their ``SeedGenerator`` state is the step's random state) after a
``Normalization`` adapted on the training images; custom layers.

Changed: CIFAR-100's download is 640 generated 32x32x3 uint8 images of 100 classes
(50 000 in the example); the CPU scale: ``image_size`` 32 (64), ``embedding_dim`` 64
(256), ``num_blocks`` 1 (4). The augmentation ``Sequential`` and its ``adapt`` are
module-level statements in the example; here made in ``build_classifier`` (a module
that creates TensorFlow objects at import is another part of issue 54).
"""

import keras
import numpy as np
from keras import layers

from spottrain import FitArgs, KerasTask

num_classes = 100
input_shape = (32, 32, 3)

weight_decay = 0.0001
batch_size = 128
num_epochs = 50
dropout_rate = 0.2
image_size = 32  # We'll resize input images to this size (64 in the example).
patch_size = 8  # Size of the patches to be extracted from the input images.
num_patches = (image_size // patch_size) ** 2  # Size of the data array.
embedding_dim = 64  # Number of hidden units (256 in the example).
num_blocks = 1  # Number of blocks (4 in the example).
learning_rate = 0.005


def load_data():
    """``keras.datasets.cifar100.load_data()``'s training half: uint8 images, ``[N, 1]`` labels."""
    rng = np.random.default_rng(13)
    y_train = rng.integers(0, num_classes, (640, 1))
    x_train = rng.integers(0, 256, (640, *input_shape)).astype("uint8")
    x_train[:, :4, :4, 0] = (y_train * 2).reshape(-1, 1, 1)  # a class mark in a corner
    return x_train, y_train


def build_classifier(blocks, x_train):
    data_augmentation = keras.Sequential(
        [
            layers.Normalization(),
            layers.Resizing(image_size, image_size),
            layers.RandomFlip("horizontal"),
            layers.RandomZoom(height_factor=0.2, width_factor=0.2),
        ],
        name="data_augmentation",
    )
    # Compute the mean and the variance of the training data for normalization.
    data_augmentation.layers[0].adapt(x_train)

    inputs = layers.Input(shape=input_shape)
    # Augment data.
    augmented = data_augmentation(inputs)
    # Create patches.
    patches = Patches(patch_size)(augmented)
    # Encode patches to generate a [batch_size, num_patches, embedding_dim] tensor.
    x = layers.Dense(units=embedding_dim)(patches)
    # Process x using the module blocks.
    x = blocks(x)
    # Apply global average pooling to generate a [batch_size, embedding_dim] representation tensor.
    representation = layers.GlobalAveragePooling1D()(x)
    # Apply dropout.
    representation = layers.Dropout(rate=dropout_rate)(representation)
    # Compute logits outputs.
    logits = layers.Dense(num_classes)(representation)
    # Create the Keras model.
    return keras.Model(inputs=inputs, outputs=logits)


class Patches(layers.Layer):
    def __init__(self, patch_size, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = patch_size

    def call(self, x):
        patches = keras.ops.image.extract_patches(x, self.patch_size)
        batch_size = keras.ops.shape(patches)[0]
        num_patches = keras.ops.shape(patches)[1] * keras.ops.shape(patches)[2]
        patch_dim = keras.ops.shape(patches)[3]
        out = keras.ops.reshape(patches, (batch_size, num_patches, patch_dim))
        return out


class MLPMixerLayer(layers.Layer):
    def __init__(self, num_patches, hidden_units, dropout_rate, *args, **kwargs):
        super().__init__(*args, **kwargs)

        self.mlp1 = keras.Sequential(
            [
                layers.Dense(units=num_patches, activation="gelu"),
                layers.Dense(units=num_patches),
                layers.Dropout(rate=dropout_rate),
            ]
        )
        self.mlp2 = keras.Sequential(
            [
                layers.Dense(units=num_patches, activation="gelu"),
                layers.Dense(units=hidden_units),
                layers.Dropout(rate=dropout_rate),
            ]
        )
        self.normalize = layers.LayerNormalization(epsilon=1e-6)

    def build(self, input_shape):
        return super().build(input_shape)

    def call(self, inputs):
        # Apply layer normalization.
        x = self.normalize(inputs)
        # Transpose inputs from [num_batches, num_patches, hidden_units] to [num_batches, hidden_units, num_patches].
        x_channels = keras.ops.transpose(x, axes=(0, 2, 1))
        # Apply mlp1 on each channel independently.
        mlp1_outputs = self.mlp1(x_channels)
        # Transpose mlp1_outputs from [num_batches, hidden_dim, num_patches] to [num_batches, num_patches, hidden_units].
        mlp1_outputs = keras.ops.transpose(mlp1_outputs, axes=(0, 2, 1))
        # Add skip connection.
        x = mlp1_outputs + inputs
        # Apply layer normalization.
        x_patches = self.normalize(x)
        # Apply mlp2 on each patch independtenly.
        mlp2_outputs = self.mlp2(x_patches)
        # Add skip connection.
        x = x + mlp2_outputs
        return x


def compiled_model():
    x_train, _ = load_data()
    mlpmixer_blocks = keras.Sequential(
        [MLPMixerLayer(num_patches, embedding_dim, dropout_rate) for _ in range(num_blocks)]
    )
    model = build_classifier(mlpmixer_blocks, x_train)
    # Create Adam optimizer with weight decay.
    optimizer = keras.optimizers.AdamW(learning_rate=learning_rate, weight_decay=weight_decay)
    # Compile the model.
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[
            keras.metrics.SparseCategoricalAccuracy(name="acc"),
            keras.metrics.SparseTopKCategoricalAccuracy(5, name="top5-acc"),
        ],
    )
    return model


# -- the port --
class Task(KerasTask):
    def model(self):
        return compiled_model()

    def fit(self):
        x_train, y_train = load_data()
        # Create a learning rate scheduler callback.
        reduce_lr = keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=5)
        # Create an early stopping callback.
        early_stopping = keras.callbacks.EarlyStopping(
            monitor="val_loss", patience=10, restore_best_weights=True
        )
        return FitArgs(
            x=x_train,
            y=y_train,
            batch_size=batch_size,
            epochs=num_epochs,
            validation_split=0.1,
            callbacks=[early_stopping, reduce_lr],
        )


PORT_LINES = 20
