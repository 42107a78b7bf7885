"""The step ``model.fit`` runs, run by the engine: a ``KerasTask`` trains as fit trains it.

Keras 3's fit calls ``model.train_step(data)`` once a step inside ``strategy.run``
(``keras/src/backend/tensorflow/trainer.py``: ``make_train_function`` →
``one_step_on_data``). That method is Keras's own (the forward pass; ``compute_loss``
with the compiled losses by name or object, per output with ``loss_weights``, each
reconciling label and output ranks; the loss scaled by 1/replicas for
``tf.distribute`` in ``losses/loss.py`` ``scale_loss_for_distribution``; the compiled
optimizer; the compiled metrics) or the model's override, and ``compute_loss`` may be
the model's too. The engine calls the same method in its own ``strategy.run``, so
what fit trains it trains with the same maths; the loop, the vote, every save and
resume stay the engine's.
"""

from __future__ import annotations

import logging

from spottrain.exits import ConfigError

log = logging.getLogger("trainer")

# How fit names the loss in what train_step returns (Keras' own step: its loss tracker).
LOSS_KEY = "loss"


def prepare(model, element_spec, cfg):
    """Makes ``model`` ready to step before a checkpoint is restored.

    Returns ``(its optimizer, every optimizer it holds by name)``, as
    ``task_calls.build_optimizers`` does for a task.

    Builds what fit builds before its first step (``Trainer._symbolic_build``: the
    model from the spec of one replica's batch, the compiled loss and metrics, the
    optimizer), so that every variable exists and is restored. ``--optimizer``
    replaces the compiled optimizer with the engine's.

    Args:
        model: The task's compiled model (in the strategy's scope).
        element_spec: The spec of one element of the task's training dataset.
        cfg: The engine's settings.
    """
    if cfg.clip_norm:
        raise ConfigError(
            f"--clip-norm {cfg.clip_norm:g}: a KerasTask trains with its model's own step; "
            "clip as model.fit does, with clipnorm or global_clipnorm on the optimizer "
            "the model is compiled with"
        )
    if getattr(model, "run_eagerly", False):
        # fit then calls train_step without tf.function (keras/src/backend/tensorflow/
        # trainer.py, make_train_function): a debugging mode, one process. The engine's
        # step is a tf.function around strategy.run (its vote, its loops), never eager.
        raise ConfigError(
            "compile(run_eagerly=True): the engine runs the model's train_step as a "
            "tf.function, as model.fit does by default; debug it eagerly with model.fit, "
            "then compile without run_eagerly to train here"
        )
    per_execution = getattr(model, "steps_per_execution", 1) or 1
    if per_execution > 1 and cfg.steps_per_loop != per_execution:
        # The steps per call are the engine's flag (its loop ends a call at a vote, an
        # epoch's end or a NaN); said, not silently dropped.
        log.info(
            "compile(steps_per_execution=%d) is not read: the engine runs --steps-per-loop "
            "%s steps a call (give --steps-per-loop %d for fit's)",
            per_execution, cfg.steps_per_loop or "auto", per_execution,
        )  # fmt: skip
    if cfg.optimizer:
        from spottrain.trainer import optimizer as optimizer_lib

        model.optimizer = optimizer_lib.build_optimizer(cfg)
    if not all(layer.built for layer in model._flatten_layers()):
        try:
            # fit's own build (keras/src/trainers/trainer.py, Trainer._symbolic_build).
            model._symbolic_build(data_batch=element_spec)
        except Exception:  # noqa: BLE001 - as fit without a strategy: built at its first step
            pass
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and not optimizer.built:
        optimizer.build(model.trainable_variables)
    return optimizer, _optimizers(model)


def _optimizers(model) -> dict:
    """The Keras optimizers the model holds, by attribute (a GAN's two, or the compiled one)."""
    import keras

    found = {"optimizer": model.optimizer} if getattr(model, "optimizer", None) else {}
    for name, value in vars(model).items():
        if isinstance(value, keras.optimizers.Optimizer) and value not in found.values():
            found[name.lstrip("_")] = value
    return found


def step_loss(logs, replicas: int):
    """The replica's share of the step's loss, from what ``train_step`` returned.

    fit logs ``"loss"`` (or, from an own step, every ``*loss`` entry: a GAN's
    ``d_loss`` and ``g_loss``, summed). Divided by the replicas, so that the engine's
    sum over replicas is their mean.
    """
    import tensorflow as tf

    values = logs if isinstance(logs, dict) else {LOSS_KEY: logs}
    keys = [LOSS_KEY] if LOSS_KEY in values else [k for k in values if str(k).endswith("loss")]
    if not keys:
        raise ConfigError(
            "the model's train_step() must return its loss as model.fit logs it: a dict "
            f"with a 'loss' (or '..._loss') entry, got {_names(values)}"
        )
    total = 0.0
    for key in keys:
        value = tf.convert_to_tensor(values[key])
        if not value.dtype.is_floating or value.shape.rank not in (0, None):
            raise ConfigError(
                f"the model's train_step() returned {key!r} of {value.dtype.name} "
                f"shape {value.shape.as_list()}: it must be a float scalar"
            )
        total += tf.cast(value, tf.float32)
    return total / replicas


def step_metrics(logs, replicas: int) -> tuple[list[str], list]:
    """The logs fit shows besides the loss (compiled metrics: ``accuracy``, ...), as shares.

    Each is this replica's value on its own batch divided by the replicas, so that the
    engine's sum over replicas is their mean (with equal batches, the global batch's
    value for a mean metric such as accuracy). Keras metric variables are
    ``synchronization="on_read"`` (``keras/src/metrics/metric.py``, ``Metric.add_variable``):
    read inside ``strategy.run`` they are this replica's. Only float (or int) scalars are
    carried; the loss entries are the loss's (:func:`step_loss`).
    """
    import tensorflow as tf

    if not isinstance(logs, dict):
        return [], []
    keys = [LOSS_KEY] if LOSS_KEY in logs else [k for k in logs if str(k).endswith("loss")]
    names, values = [], []
    for key, value in logs.items():
        if key in keys or not isinstance(key, str):
            continue
        try:
            value = tf.convert_to_tensor(value)
        except (TypeError, ValueError):
            continue
        if value.shape.rank != 0 or not (value.dtype.is_floating or value.dtype.is_integer):
            continue
        names.append(key)
        values.append(tf.cast(value, tf.float32) / replicas)
    return names, values


def _names(values: dict) -> str:
    return "{" + ", ".join(repr(k) for k in values) + "}" if values else "nothing"


def reset_metrics(model) -> None:
    """Each step's metrics are its own: fit's logged ``loss`` is then this step's."""
    for metric in model.metrics:
        metric.reset_state()
