"""A fit user's task for the loop around the step: validation, callbacks, metrics, epochs.

``--task tests.fit_loop_task:FitUser --task-args '{"callbacks": ["plateau", "stop"]}'``.
A compiled functional model with a string loss and ``accuracy``, arrays, and
``FitArgs`` as the user's ``model.fit(...)`` call had them.
"""

from __future__ import annotations

import json
import os

import keras
import numpy as np

from spottrain import FitArgs, KerasTask

# 2 workers x 16: 480 examples are 15 steps an epoch.
EXAMPLES = 480


def _data(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    # Overlapping classes: the validation loss stops improving after a few epochs.
    points = np.array([[0, 1], [1, -1], [-1, -1]])[labels] + 1.2 * rng.normal(size=(n, 2))
    return points.astype("float32"), labels


def _worker() -> str:
    task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {})
    return f"{task.get('type', 'chief')}-{task.get('index', 0)}"


class Recorder(keras.callbacks.Callback):
    """A user's own callback: appends what it was called with to a JSON-lines file."""

    def __init__(self, path):
        super().__init__()
        self.path = path
        self.batches = 0  # its own state, kept across resumes

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1

    def on_epoch_end(self, epoch, logs=None):
        lr = float(self.model.optimizer.learning_rate.numpy())
        row = {"epoch": epoch, "logs": logs, "lr": lr, "batches": self.batches}
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")


class FitUser(KerasTask):
    def model(self):
        inputs = keras.Input((2,))
        hidden = keras.layers.Dense(16, activation="relu")(inputs)
        outputs = keras.layers.Dense(3, activation="softmax")(hidden)
        model = keras.Model(inputs, outputs)
        model.compile(
            optimizer=keras.optimizers.Adam(self.args.get("lr", 0.05)),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
        )
        return model

    def examples(self):
        return _data(EXAMPLES, 0)

    def fit(self):
        x, y = self.examples()
        callbacks = []
        for name in self.args.get("callbacks", []):
            if name == "plateau":
                callbacks.append(
                    keras.callbacks.ReduceLROnPlateau("val_loss", factor=0.5, patience=1)
                )
            elif name == "stop":
                callbacks.append(
                    keras.callbacks.EarlyStopping(
                        "val_loss", patience=self.args.get("patience", 3),
                        restore_best_weights=True,
                    )
                )  # fmt: skip
            elif name == "schedule":
                callbacks.append(keras.callbacks.LearningRateScheduler(lambda e, lr: lr * 0.9))
            elif name == "csv":
                callbacks.append(keras.callbacks.CSVLogger(self.args["csv"]))
            elif name == "record":
                callbacks.append(Recorder(f"{self.args['record']}.{_worker()}"))
            elif name == "tensorboard":  # writes into --tensorboard-dir instead
                callbacks.append(keras.callbacks.TensorBoard(self.args["elsewhere"]))
            elif name == "checkpoint":
                callbacks.append(keras.callbacks.ModelCheckpoint("/tmp/m.keras"))
        validation = _data(self.args.get("val", 150), 1) if self.args.get("val", 150) else None
        return FitArgs(
            x, y, epochs=20, validation_data=validation, callbacks=callbacks,
            validation_freq=self.args.get("freq", 1),
        )  # fmt: skip

    def evaluate(self, model, batch_size):
        if self.args.get("evaluate"):
            return model.evaluate(*_data(60, 2), batch_size=batch_size, return_dict=True)
        return {}
