"""The engine's optimizer, from its flags: Adam, SGD, RMSprop or AdamW, warmup, loss scaling.

A task trains with it unless it runs a whole custom step of its own.
"""

from __future__ import annotations

import math

import keras

from spottrain.trainer.config import DEFAULT_OPTIMIZER, TrainConfig


def build_optimizer(cfg: TrainConfig) -> keras.optimizers.Optimizer:
    """``--optimizer`` with linear warmup; wrapped for loss scaling under mixed precision."""
    lr = cfg.learning_rate
    if cfg.warmup_steps:
        lr = keras.optimizers.schedules.PolynomialDecay(
            initial_learning_rate=lr / cfg.warmup_steps,
            decay_steps=cfg.warmup_steps,
            end_learning_rate=lr,
            power=1.0,
        )
    name = cfg.optimizer or DEFAULT_OPTIMIZER
    if name == "sgd":
        opt = keras.optimizers.SGD(learning_rate=lr, momentum=0.9)
    elif name == "rmsprop":
        opt = keras.optimizers.RMSprop(learning_rate=lr)
    elif name == "adamw":
        opt = keras.optimizers.AdamW(learning_rate=lr)
    else:
        opt = keras.optimizers.Adam(learning_rate=lr)
    if cfg.mixed_precision:
        opt = keras.optimizers.LossScaleOptimizer(opt)
    return opt


def apply_learning_rate(opt: keras.optimizers.Optimizer, cfg: TrainConfig) -> bool:
    """Sets the flags' learning rate over the one a checkpoint restored; True if it changed.

    A float learning rate is an optimizer variable, so a restore brings the old
    run's back: a retry with a lower ``--learning-rate`` after a NaN stop would
    otherwise hit the NaN again. (A warmup schedule is built from the flags and
    is not restored.)
    """
    inner = getattr(opt, "inner_optimizer", opt)  # LossScaleOptimizer wraps the real one
    if cfg.warmup_steps or isinstance(
        inner._learning_rate, keras.optimizers.schedules.LearningRateSchedule
    ):
        return False
    # A float32 variable (a MirroredVariable under MWMS): compare as float32.
    restored = float(keras.ops.convert_to_numpy(inner._learning_rate))
    if math.isclose(restored, cfg.learning_rate, rel_tol=1e-6):
        return False
    inner.learning_rate = cfg.learning_rate
    return True
