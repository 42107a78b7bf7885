"""``python -m spottrain.trainer.task --check …``: the task imports, builds and fits, on CPU, fast.

Run it before paying for GPUs (in your image: ``docker run IMAGE --check --task …``):
it loads the task with the run's flags, runs its ``prepare()``, builds its model,
takes one replica's batch of step 0 from its input pipeline (a single-worker input
context) and computes the loss on it, and probes whether a resume would reproduce the
batches (:mod:`spottrain.trainer.resume_probe`; a failed probe fails the check only
with ``--deterministic``). Nothing is trained and nothing is written:
no checkpoint, ledger record, run config or ``FATAL.json`` (so the output dirs
may be left out). It prints one line and
exits 0, or names the problem in one line and exits 64.
"""

from __future__ import annotations

import logging

from spottrain.trainer import config, task_api
from spottrain.trainer.preemption import OK, ConfigError, TrainerExit

log = logging.getLogger("trainer")


def run(argv: list[str]) -> int:
    """Checks the task the flags ``argv`` name; returns the exit code."""
    from spottrain.trainer import attempt

    try:
        cfg, _ = attempt.prepare(argv)
        summary = _check(cfg)
    except TrainerExit as e:
        log.error("check failed: %s", e)
        return e.code
    print(f"check ok: {summary}", flush=True)
    return OK


def _check(cfg: config.TrainConfig) -> str:
    from spottrain.trainer import attempt

    config.validate(cfg, outputs=False)
    task = attempt.load_and_prepare(cfg)
    import numpy as np
    import tensorflow as tf

    from spottrain.trainer.advice import cause, misfit_error
    from spottrain.trainer.train_lib import build_model

    batch = cfg.batch_size_per_replica
    model = build_model(task)
    context = tf.distribute.InputContext(
        num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1
    )
    spec = task_api.TrainInput(context, batch, cfg.seed, 0, 1)
    try:
        features, labels = next(iter(task.train_dataset(spec)))
    except StopIteration:
        raise ConfigError("the task's train_dataset() is empty at step 0") from None
    except (ValueError, TypeError) as e:
        raise ConfigError(f"the task's train_dataset() failed: {cause(e)}") from e
    try:
        loss = task.loss(labels, model(features, training=False))
    except (ValueError, TypeError, tf.errors.InvalidArgumentError) as e:
        raise misfit_error(e, 1) from e
    loss = np.asarray(loss)
    if loss.ndim != 1 or loss.shape[0] != batch:
        raise ConfigError(
            f"the task's loss() must return one value per example (shape [{batch}]), "
            f"got shape {list(loss.shape)}"
        )
    if not np.all(np.isfinite(loss)):
        raise ConfigError("the task's loss is not finite on the first batch")
    params = model.count_params()
    from spottrain.trainer import resume_probe

    # The run's horizon, at least long enough that the probe is not a short pipeline's
    # (the pre-flight checks with --train-steps 1).
    total = max(cfg.train_steps, 100)
    problem = task_api.call_task(
        "the task's train_dataset()", resume_probe.probe, task, context, batch, cfg.seed, total
    )
    if problem and cfg.deterministic:
        raise ConfigError(f"--deterministic: {problem}")
    resumes = (
        "resumes reproduce the batches (steps read from step 0 and from a resume agree)"
        if not problem
        else f"resumes are exact in steps but not bit-identical: {problem}"
    )
    return (
        f"task {cfg.task or task_api.DEFAULT_TASK} builds a model of {params:,} parameters; "
        f"a batch of {batch} fits it; mean loss {float(loss.mean()):.4g}; {resumes}"
    )
