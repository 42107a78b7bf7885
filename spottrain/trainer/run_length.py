"""How long a run is, and at what global batch: a ``KerasTask``'s ``fit()``, else the flags.

Its own module, not :mod:`spottrain.trainer.fit_plan`'s: the flags' path needs
:mod:`spottrain.trainer.config`, which imports the task loader and so the Task API,
whose ``KerasTask.train_dataset`` calls ``fit_plan``: a circle the layer guard counts.
"""

from __future__ import annotations

import logging

from spottrain.exits import ConfigError
from spottrain.trainer import config, fit_plan

log = logging.getLogger("trainer")


def plan(task, cfg, replicas: int, *, need_length: bool = True) -> fit_plan.FitPlan:
    """A ``KerasTask``'s :class:`~spottrain.trainer.fit_plan.FitPlan`, its length bounded."""
    resolved = fit_plan.resolve(task, cfg, replicas, need_length=need_length)
    if resolved.total_steps > config.MAX_STEPS:
        raise ConfigError(
            f"{type(task).__name__}.fit(): {resolved.total_steps} steps are more than "
            f"{config.MAX_STEPS}"
        )
    return resolved


def of(task, cfg, replicas: int) -> tuple[int, int, fit_plan.FitPlan | None]:
    """``(global_batch, total_steps, plan)`` of a run: a ``KerasTask``'s plan, else the flags'."""
    if task.fit_step():
        resolved = plan(task, cfg, replicas)
        log.info(
            "fit plan: %s, %s examples, global batch %d, %s steps an epoch, epochs %d..%g: "
            "%d steps",
            resolved.kind, resolved.examples if resolved.examples is not None else "unknown",
            resolved.global_batch, resolved.steps_per_epoch or "unknown", resolved.initial_epoch,
            resolved.epochs, resolved.total_steps,
        )  # fmt: skip
        return resolved.global_batch, resolved.total_steps, resolved
    global_batch = config.global_batch(cfg, replicas)
    if cfg.train_steps:
        return global_batch, cfg.train_steps, None
    if not cfg.epochs:
        raise ConfigError(
            f"give --train-steps ({cfg.train_steps}) or --epochs ({cfg.epochs:g}), positive: "
            f"{type(task).__name__} is a Task, not a KerasTask, with no fit() to say how long"
        )
    examples = task.num_train_examples()
    if not examples:
        raise ConfigError(
            f"--epochs {cfg.epochs:g} needs a task that knows its number of examples "
            f"({type(task).__name__}.num_train_examples())"
        )
    return global_batch, config.steps_for_epochs(cfg.epochs, examples, global_batch), None
