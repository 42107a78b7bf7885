"""``python -m spottrain.trainer.task --check …``: the task imports, builds and fits, on CPU, fast.

Run it before paying for GPUs (in your image: ``docker run IMAGE --check --task …``):
it loads the task with the run's flags, runs its ``prepare()``, builds its model and
optimizers and runs the run's own compiled step (the engine's, or the task's own
``train_step``) once on the batch of step 1 from its input pipeline (one replica, one
worker; :mod:`spottrain.trainer.task_calls` checks each call as a run does), and
probes whether a resume would be bit-identical: its batches, and the random state
of its traced step (:mod:`spottrain.trainer.resume_probe`; a failed probe fails the
check only with ``--deterministic``). Nothing is trained and nothing is written:
no checkpoint, ledger record, run config or ``FATAL.json`` (so the output dirs
may be left out). It prints one line and
exits 0, or names the problem in one line and exits 64.
"""

from __future__ import annotations

import logging

from spottrain.exits import OK, ConfigError, TrainerExit
from spottrain.trainer import config, task_api, task_loader

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
    from spottrain.trainer import process_setup

    # As a run does before it imports the task's module (its TensorFlow objects at import).
    process_setup.configure(cfg)
    process_setup.seed(cfg)
    task = attempt.load_and_prepare(cfg)
    import keras
    import numpy as np
    import tensorflow as tf

    from spottrain.trainer import fit_step, run_length, steps, task_calls

    batch = cfg.batch_size_per_replica
    length = ""
    if task.fit_step():
        # The run's own plan on one replica: the length and batch errors the run would stop
        # with (--epochs on data of no length, a batch_size the replicas cannot split).
        plan = run_length.plan(task, cfg, 1, need_length=bool(cfg.train_steps or cfg.epochs))
        batch, planned = plan.global_batch, plan.total_steps
        if cfg.train_steps or cfg.epochs or plan.steps_per_epoch:
            length = f"{planned} steps ({plan.steps_per_epoch or '?'} an epoch); "
    else:
        planned = run_length.of(task, cfg, 1)[1] if cfg.train_steps or cfg.epochs else 0
    # The run's horizon, at least long enough that the probe is not a short pipeline's
    # (the pre-flight checks with --train-steps 1; --check needs no --train-steps).
    total = max(planned, 100)
    if cfg.mixed_precision:
        keras.mixed_precision.set_global_policy("mixed_float16")
    keras.utils.set_random_seed(cfg.seed)
    strategy = tf.distribute.get_strategy()  # the default: this process, one replica
    model = task_calls.build_model(task)
    context = tf.distribute.InputContext(
        num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1
    )
    dataset = task_calls.dataset(task, task_api.TrainInput(context, batch, cfg.seed, 0, total))
    if task.fit_step():
        optimizer, optimizers = fit_step.prepare(model, dataset.element_spec, cfg)
    else:
        optimizer, optimizers = task_calls.build_optimizers(task, model, cfg)
    blame = task_calls.Blame()
    fns = steps.make_step_functions(
        steps.StepParts(cfg, task, model, optimizer, optimizers, strategy, batch, 1, blame)
    )
    zero = tf.constant(0.0)
    try:
        step_fn = fns.make_train_next(iter(dataset))
        out = np.asarray(step_fn(zero, zero))
        loss, bad = float(out[0]), float(out[3])
    except (StopIteration, tf.errors.OutOfRangeError):
        raise task_calls.no_batch(task, 1, batch) from None
    except TrainerExit:
        raise
    except Exception as e:
        xla = fns.xla and cfg.jit_compile
        failure = task_calls.step_failure(e, 1, task, blame, batch, False, xla)
        if failure is None:
            raise
        raise failure from e
    if not np.isfinite(loss):
        raise ConfigError(f"the task's loss is {loss} on the first batch (step 1)")
    if bad:
        raise ConfigError(
            f"the gradients are not finite on the first batch (step 1; loss {loss:.4f})"
        )
    # count_params() needs the model itself built; a subclassed one may never be (no call).
    params = sum(int(np.prod(v.shape)) for v in model.weights)
    if task.fit_step():
        step = " trained by its own train_step (model.fit's)"
    else:
        step = f" and {len(optimizers)} optimizers" if task.has_own_step() else ""
    exported = _export_line(model)
    from spottrain.trainer import fit_loop, resume_probe

    step += fit_loop.check(task, model, strategy, cfg)

    what = task_calls.named(task, "train_dataset")
    problem = task_loader.call_task(
        what, resume_probe.probe, task, context, batch, cfg.seed, total
    ) or resume_probe.step_problem(step_fn.graph)
    if problem and cfg.deterministic:
        raise ConfigError(f"--deterministic: {problem}")
    resumes = (
        f"resumes are bit-identical as far as checked: {resume_probe.checked(total)}"
        if not problem
        else f"resumes are exact in steps but not bit-identical: {problem}"
    )
    return (
        f"task {cfg.task or task_loader.DEFAULT_TASK} builds a model of {params:,} parameters"
        f"{step}; {length}"
        f"a batch of {batch} fits it; mean loss {loss:.4g}; {resumes}; its export {exported}"
    )


def _export_line(model) -> str:
    """What the run's export would write, tried now on the built model (into a temp dir)."""
    import shutil
    import tempfile

    from spottrain.trainer import export

    where = tempfile.mkdtemp(prefix="spottrain-check-export-")
    try:
        return export.line(export.write(model, where))
    finally:
        shutil.rmtree(where, ignore_errors=True)
