"""The engine's optimizer, from its flags: Adam or SGD, warmup, loss scaling.

A task trains with it unless it runs a whole custom step of its own.
"""

from __future__ import annotations

import keras

from spottrain.trainer.config import TrainConfig


def build_optimizer(cfg: TrainConfig) -> keras.optimizers.Optimizer:
    """Adam or SGD with linear warmup; wrapped for loss scaling under mixed precision."""
    lr = cfg.learning_rate
    if cfg.warmup_steps:
        lr = keras.optimizers.schedules.PolynomialDecay(
            initial_learning_rate=lr / cfg.warmup_steps,
            decay_steps=cfg.warmup_steps,
            end_learning_rate=lr,
            power=1.0,
        )
    if cfg.optimizer == "sgd":
        opt = keras.optimizers.SGD(learning_rate=lr, momentum=0.9)
    else:
        opt = keras.optimizers.Adam(learning_rate=lr)
    if cfg.mixed_precision:
        opt = keras.optimizers.LossScaleOptimizer(opt)
    return opt
