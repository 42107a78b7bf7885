"""``python -m tests.keras_io.fit_args_reference --task M:C ...``: a port's whole ``fit()``
under Keras's own ``model.fit``, on the engine's batches.

The other side of the epoch-level comparison in
``tests/integration/trainer/test_keras_io_fit_args.py``: the port's ``FitArgs``
(epochs, validation, callbacks, class_weight) given to ``model.fit`` as the user's
script gives them, except the training data, which is the batches the engine gives
one worker (``task.train_dataset``) with ``steps_per_epoch`` set, so that both sides
see the same batches. ``validation_split`` is cut as fit cuts it
(``keras/src/trainers/data_adapters/array_slicing.py``,
``train_validation_split``: the last fraction, before any shuffle). Writes each
epoch's logs as JSON.
"""

from __future__ import annotations

import argparse
import importlib
import json


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--task", required=True)
    p.add_argument("--steps-per-epoch", type=int, required=True)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)

    import keras
    import tensorflow as tf
    from keras.src.trainers.data_adapters.array_slicing import train_validation_split

    from spottrain.trainer import fit_plan
    from spottrain.trainer.task_api import TrainInput

    module, _, name = a.task.partition(":")
    task = getattr(importlib.import_module(module), name)({}, None)
    args = task.fit()
    keras.utils.set_random_seed(a.seed)  # as the engine, before the model is built
    validation = args.validation_data
    if validation is None and args.validation_split:
        data = (args.x, args.y, args.sample_weight)
        _, validation = train_validation_split(data, validation_split=args.validation_split)
        validation = tuple(v for v in validation if v is not None)
    steps = args.epochs * a.steps_per_epoch
    context = tf.distribute.InputContext(1, 0, 1)
    batch = fit_plan.resolve(task, None, 1).global_batch  # a PyDataset's: its own batches
    ds = task.train_dataset(TrainInput(context, batch, a.seed, 0, steps))
    model = task.build_model()
    epochs = []

    class Logs(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            epochs.append({k: float(v) for k, v in (logs or {}).items()})

    model.fit(
        ds,
        epochs=args.epochs,
        steps_per_epoch=a.steps_per_epoch,
        validation_data=validation,
        validation_steps=args.validation_steps,
        validation_batch_size=args.validation_batch_size,
        validation_freq=args.validation_freq,
        # None: the engine's batches carry class_weight's sample weights already
        # (spottrain/trainer/fit_sources.py), as fit's own data adapter adds them.
        class_weight=None,
        initial_epoch=args.initial_epoch,
        callbacks=[*(args.callbacks or []), Logs()],
        verbose=0,
    )
    with open(a.out, "w") as f:
        json.dump({"epochs": epochs}, f)


if __name__ == "__main__":
    main()
