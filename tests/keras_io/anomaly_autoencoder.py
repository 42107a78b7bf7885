"""keras-io examples/timeseries/timeseries_anomaly_detection.py (Keras 3): a convolutional
reconstruction autoencoder for timeseries anomalies.

What it exercises (fit's arguments): the same array as input and target
(``x_train, x_train``), ``epochs=50``, ``batch_size=128``, ``validation_split=0.1``, and
``callbacks=[EarlyStopping(monitor="val_loss", patience=5, mode="min")]`` (its ``wait``
and ``best`` must resume, so that a resumed run stops at the same epoch); the string
loss ``"mse"``, ``Conv1DTranspose``, Dropout.

Changed: the NAB CSV ``art_daily_small_noise.csv`` (4 032 points, every 5 min for 14
days) is a generated daily wave with small noise of 1 000 points (the CPU scale: 713
sequences of ``TIME_STEPS = 288``, not 3 745), normalised as the example does.
"""

import keras
import numpy as np
from keras import layers

from spottrain import FitArgs, KerasTask

TIME_STEPS = 288


def training_values():
    """``(df_small_noise - training_mean) / training_std``'s values: shape ``[N, 1]``."""
    rng = np.random.default_rng(11)
    t = np.arange(1000)
    daily = 20 + 60 * (np.sin(2 * np.pi * t / 288) > 0) + rng.normal(0, 2, t.shape)
    values = daily.reshape(-1, 1)
    return (values - values.mean()) / values.std()


# Generated training sequences for use in the model.
def create_sequences(values, time_steps=TIME_STEPS):
    output = []
    for i in range(len(values) - time_steps + 1):
        output.append(values[i : (i + time_steps)])
    return np.stack(output)


def compiled_model(x_train):
    model = keras.Sequential(
        [
            layers.Input(shape=(x_train.shape[1], x_train.shape[2])),
            layers.Conv1D(filters=32, kernel_size=7, padding="same", strides=2, activation="relu"),
            layers.Dropout(rate=0.2),
            layers.Conv1D(filters=16, kernel_size=7, padding="same", strides=2, activation="relu"),
            layers.Conv1DTranspose(
                filters=16, kernel_size=7, padding="same", strides=2, activation="relu"
            ),
            layers.Dropout(rate=0.2),
            layers.Conv1DTranspose(
                filters=32, kernel_size=7, padding="same", strides=2, activation="relu"
            ),
            layers.Conv1DTranspose(filters=1, kernel_size=7, padding="same"),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.001), loss="mse")
    return model


def x_train_data():
    return create_sequences(training_values()).astype("float32")


# -- the port --
class Task(KerasTask):
    def model(self):
        return compiled_model(x_train_data())

    def fit(self):
        x_train = x_train_data()
        return FitArgs(
            x_train,
            x_train,
            epochs=50,
            batch_size=128,
            validation_split=0.1,
            callbacks=[keras.callbacks.EarlyStopping(monitor="val_loss", patience=5, mode="min")],
        )


PORT_LINES = 15
