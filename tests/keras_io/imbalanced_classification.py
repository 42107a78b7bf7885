"""keras-io examples/structured_data/imbalanced_classification.py (Keras 3): credit card
fraud detection on highly imbalanced classes.

What it exercises (fit's arguments): arrays with ``batch_size=2048``, ``epochs=30``,
``verbose=2``, ``validation_data=(val_features, val_targets)``, ``class_weight={0: w0,
1: w1}`` and ``callbacks=[ModelCheckpoint("fraud_model_at_epoch_{epoch}.keras")]`` (the
engine refuses it in one line naming its own saves: ``Task`` is the example as
written; ``Trained`` is the same port with that one callback removed, as its user does
after the line); six compiled metric objects (``FalseNegatives`` ... ``Recall``), the
string loss ``"binary_crossentropy"``, ``Adam(1e-2)``, Dropout.

Changed: Kaggle's ``creditcard.csv`` (284 807 rows of 30 features, 0.17 % fraud) is
10 240 generated rows of 30 features with 2 % fraud (the CPU scale; one step is still
the example's 2 048 rows); its preparation (the last 20 % for validation, class
weights from the counts, normalised with the training statistics) is the example's.
"""

import dataclasses

import keras
import numpy as np

from spottrain import FitArgs, KerasTask


def vectorized_csv():
    """The CSV's ``features`` (float32 ``[N, 30]``) and ``targets`` (uint8 ``[N, 1]``)."""
    rng = np.random.default_rng(12)
    targets = (rng.random((10240, 1)) < 0.02).astype("uint8")
    features = rng.normal(size=(10240, 30)).astype("float32") * 3 + 50
    features[:, :4] += 4 * targets  # fraud moves a few features
    return features, targets


def prepared():
    features, targets = vectorized_csv()
    num_val_samples = int(len(features) * 0.2)
    train_features = features[:-num_val_samples]
    train_targets = targets[:-num_val_samples]
    val_features = features[-num_val_samples:]
    val_targets = targets[-num_val_samples:]

    counts = np.bincount(train_targets[:, 0])
    weight_for_0 = 1.0 / counts[0]
    weight_for_1 = 1.0 / counts[1]

    mean = np.mean(train_features, axis=0)
    train_features -= mean
    val_features -= mean
    std = np.std(train_features, axis=0)
    train_features /= std
    val_features /= std
    class_weight = {0: weight_for_0, 1: weight_for_1}
    return train_features, train_targets, val_features, val_targets, class_weight


def compiled_model(train_features):
    model = keras.Sequential(
        [
            keras.Input(shape=train_features.shape[1:]),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dropout(0.3),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dropout(0.3),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    metrics = [
        keras.metrics.FalseNegatives(name="fn"),
        keras.metrics.FalsePositives(name="fp"),
        keras.metrics.TrueNegatives(name="tn"),
        keras.metrics.TruePositives(name="tp"),
        keras.metrics.Precision(name="precision"),
        keras.metrics.Recall(name="recall"),
    ]
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy", metrics=metrics
    )
    return model


# -- the port --
class Task(KerasTask):
    def model(self):
        return compiled_model(prepared()[0])

    def fit(self):
        train_features, train_targets, val_features, val_targets, class_weight = prepared()
        callbacks = [keras.callbacks.ModelCheckpoint("fraud_model_at_epoch_{epoch}.keras")]
        return FitArgs(
            train_features,
            train_targets,
            batch_size=2048,
            epochs=30,
            verbose=2,
            callbacks=callbacks,
            validation_data=(val_features, val_targets),
            class_weight=class_weight,
        )


PORT_LINES = 18


class Trained(Task):
    """The port after the engine's line: the same fit call without its ModelCheckpoint."""

    def fit(self):
        return dataclasses.replace(super().fit(), callbacks=[])
