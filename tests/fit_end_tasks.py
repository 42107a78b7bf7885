"""KerasTasks of a fit user's compile options (issue 54): EMA, jit_compile, run_eagerly."""

from __future__ import annotations

from spottrain.trainer.task_api import KerasTask


def compiled(**compile_args):
    """A small regression model, compiled with Adam and ``compile_args``."""
    import keras

    optimizer = compile_args.pop("optimizer", None) or keras.optimizers.Adam(0.01)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=optimizer, loss="mse", **compile_args)
    return model


class Regression(KerasTask):
    """``y = x @ w``; args: ``compile`` (the keyword arguments of compile), ``use_ema``."""

    def model(self):
        import keras

        args = dict(self.args.get("compile", {}))
        if self.args.get("use_ema"):
            args["optimizer"] = keras.optimizers.Adam(0.01, use_ema=True, ema_momentum=0.9)
        return compiled(**args)

    def examples(self):
        import numpy as np

        rng = np.random.default_rng(0)
        x = rng.normal(size=(256, 4)).astype("float32")
        return x, x @ np.array([1.0, -2.0, 0.5, 3.0], "float32")
