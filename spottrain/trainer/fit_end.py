"""What ``model.fit`` does after its last step, done once the final checkpoint is written.

fit ends (``keras/src/backend/tensorflow/trainer.py``, ``TensorFlowTrainer.fit``, after
the epoch loop, when ``epochs > 0``) with ``self.optimizer.finalize_variable_values(
self.trainable_weights)``: with ``use_ema=True`` that overwrites every trainable
variable with its moving average (``keras/src/optimizers/base_optimizer.py``,
``BaseOptimizer.finalize_variable_values`` → ``_overwrite_model_variables_with_average_value``;
a ``LossScaleOptimizer`` passes it on to its inner optimizer). So what a fit user
evaluates and saves afterwards is the EMA weights.

The engine does the same, but only after the final save: checkpoints keep the raw
weights and the averages apart, so a resume continues the raw trajectory exactly,
and a retry of a finished run restores them and finalizes again to the same export.
"""

from __future__ import annotations

import logging

log = logging.getLogger("trainer")


def finalize(task, model) -> bool:
    """Leaves ``model`` as fit leaves it (a ``KerasTask``'s compiled optimizer); True if changed.

    Call on every worker (the variables are mirrored) after the final checkpoint,
    before evaluation and export.
    """
    import keras

    if not task.fit_step():
        return False
    optimizer = getattr(model, "optimizer", None)
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        return False
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    optimizer.finalize_variable_values(model.trainable_weights)
    if inner.use_ema:
        log.info(
            "the optimizer's use_ema: evaluated and exported with its moving averages, "
            "as model.fit leaves them (checkpoints keep the raw weights)"
        )
        return True
    return False
