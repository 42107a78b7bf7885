"""``python -m tests.keras_io.fit_reference --task M:C ...``: the same model under ``model.fit``.

Trains a ``KerasTask``'s model with Keras's own ``fit`` on exactly the batches the
engine gives one worker (``task.train_dataset`` with one input pipeline), from the
same seed, one step an epoch so that each logged loss is that step's (fit resets
its metrics every epoch), and writes the per-step losses as JSON. The engine's own
run with the same flags is the other side of
``tests/integration/trainer/test_keras_io_fit.py``.
"""

from __future__ import annotations

import argparse
import importlib
import json


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--task", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--optimizer", default="", help="the engine's, as --optimizer replaces it")
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)

    import keras
    import tensorflow as tf

    from spottrain.trainer.task_api import TrainInput

    module, _, name = a.task.partition(":")
    task = getattr(importlib.import_module(module), name)({}, None)
    keras.utils.set_random_seed(a.seed)  # as the engine, before the model is built
    context = tf.distribute.InputContext(1, 0, 1)
    ds = task.train_dataset(TrainInput(context, a.batch, a.seed, 0, a.steps))
    model = task.build_model()
    if a.optimizer:
        from spottrain.trainer import config, optimizer

        cfg = config.TrainConfig(optimizer=a.optimizer, learning_rate=a.learning_rate)
        model.optimizer = optimizer.build_optimizer(cfg)
    losses = []

    class PerStep(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            losses.append(float(logs["loss"]) if "loss" in logs else _loss_sum(logs))

    model.fit(ds, epochs=a.steps, steps_per_epoch=1, verbose=0, callbacks=[PerStep()])
    with open(a.out, "w") as f:
        json.dump({"losses": losses}, f)


def _loss_sum(logs: dict) -> float:
    return float(sum(v for k, v in logs.items() if k.endswith("loss")))


if __name__ == "__main__":
    main()
