"""The ``train`` component's body: runs the trainer and fills the KFP outputs.

The trainer runs in this process (``spottrain.trainer.task.main``) so that a SIGTERM sent
to the pod on preemption reaches its handler directly; with several local
workers or an injected preemption it goes through ``spottrain.trainer.launch.main``, which
starts and supervises the worker processes. A non-zero trainer exit code becomes
this process's exit code, which is what makes KFP's retry policy resume the run.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spottrain import exits
from spottrain.runtime import termination
from spottrain.runtime.train_settings import TrainSettings
from spottrain.trainer.train_lib import SUMMARY_FILE

log = logging.getLogger(__name__)

# Chaos for demos and tests (make run injects one preemption this way): SIGTERM the
# workers once when a run that started at step 0 passes this step. An environment
# variable, not a component input, so that no user-facing signature carries it.
CHAOS_PREEMPT_ENV = "SPOTTRAIN_CHAOS_PREEMPT_AT_STEP"

# Metadata key a ``gcs_copy`` output uses when the files live elsewhere (its ``dst``).
LOCATION_KEY = "location"


class TrainFailed(SystemExit):
    """The trainer exited non-zero; the exit code becomes the task's exit code."""

    def __init__(self, code: int, message: str):
        super().__init__(code)
        self.message = message

    def __str__(self) -> str:
        return self.message


def data_location(path: str, metadata: Mapping[str, Any] | None) -> str:
    """Where the training images are for a ``Dataset`` input.

    A ``gcs_copy`` output either holds the files itself (its ``path``) or points at
    the ``dst`` it copied to (``metadata["location"]``), e.g. a ``gs://`` folder the
    trainer streams from without KFP downloading it first.
    """
    location = (metadata or {}).get(LOCATION_KEY)
    return str(location) if location else path


def trainer_flags(
    *,
    data_dir: str,
    checkpoint_dir: str,
    model_dir: str,
    settings: TrainSettings,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """Builds the ``python -m spottrain.trainer.task`` flags for one training run.

    Args:
        data_dir: The run's input folder (``--data``; the image task's image folder,
            or its tfds data_dir when ``task_args`` names a dataset).
        checkpoint_dir: ``--checkpoint-dir``.
        model_dir: ``--model-dir``.
        settings: The training settings (:meth:`TrainSettings.trainer_flags`).
        extra_args: More trainer flags, appended as given.
    """
    flags = ["--data", data_dir, "--checkpoint-dir", checkpoint_dir, "--model-dir", model_dir]
    return flags + settings.trainer_flags() + [str(a) for a in extra_args]


def launcher_argv(
    flags: Sequence[str], *, local_workers: int, preempt_at_step: int, signal: str = "TERM"
) -> list[str] | None:
    """The ``spottrain.trainer.launch`` argv, or ``None`` when the trainer runs in-process alone."""
    if local_workers < 1:
        raise ValueError(f"local_workers must be >= 1, got {local_workers}")
    if preempt_at_step < 0:
        raise ValueError(f"preempt_at_step must be >= 0, got {preempt_at_step}")
    if local_workers == 1 and not preempt_at_step:
        return None
    # --verbose: every worker's every line, no log files: a pod's log is its only copy.
    argv = ["--verbose", "--workers", str(local_workers)]
    if preempt_at_step:
        argv += ["--preempt-at-step", str(preempt_at_step), "--signal", signal]
    return [*argv, "--", *flags]


def is_chief(tf_config: str | None = None) -> bool:
    """Whether this replica writes the outputs (``spottrain.trainer.distribution`` decides)."""
    from spottrain.trainer import distribution

    environ = None if tf_config is None else {"TF_CONFIG": tf_config}
    return distribution.read_cluster(environ).is_chief


def check_gpus(expected: int) -> None:
    """Fails fast when the task was placed for GPUs but TensorFlow cannot use them.

    A CPU-only image or TF build on a GPU node trains anyway, just tens of times
    slower and at GPU prices; refusing is cheaper.

    Raises:
        TrainFailed: with the non-retryable config exit code.
    """
    if expected <= 0:
        return
    import tensorflow as tf

    if not tf.test.is_built_with_cuda():
        raise TrainFailed(
            exits.FATAL_CONFIG,
            f"expect_gpus={expected} but TensorFlow {tf.__version__} in this image is a "
            "CPU-only build: use a CUDA image (make image) or set expect_gpus=0",
        )
    found = len(tf.config.list_physical_devices("GPU"))
    if found < expected:
        raise TrainFailed(
            exits.FATAL_CONFIG,
            f"expect_gpus={expected} but TensorFlow sees {found} GPU(s) on this node: "
            "check the node pool's accelerator and the NVIDIA driver installation",
        )


def run_trainer(flags: Sequence[str], *, local_workers: int = 1, preempt_at_step: int = 0) -> int:
    """Runs one training attempt and returns the trainer's exit code."""
    launch = launcher_argv(flags, local_workers=local_workers, preempt_at_step=preempt_at_step)
    if launch is None:
        from spottrain.trainer import task

        log.info("python -m spottrain.trainer.task %s", " ".join(flags))
        return int(task.main(list(flags)))
    from spottrain.trainer import launch as launcher

    log.info("python -m spottrain.trainer.launch %s", " ".join(launch))
    return int(launcher.main(launch))


def read_summary(model_dir: str) -> dict[str, Any]:
    """Reads the chief's ``training_summary.json`` from the model directory."""
    path = Path(model_dir) / SUMMARY_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise TrainFailed(
            exits.FATAL_CONFIG, f"the trainer exited 0 but wrote no {path}: is it the chief?"
        ) from None


def numeric_metrics(summary: Mapping[str, Any]) -> dict[str, float]:
    """The scalar numbers of a training summary, as KFP ``Metrics`` accepts them."""
    return {
        k: float(v)
        for k, v in summary.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


def train(
    *,
    data_dir: str,
    checkpoint_dir: str,
    model_dir: str,
    settings: TrainSettings,
    extra_args: Sequence[str] = (),
    local_workers: int = 1,
    preempt_at_step: int = 0,
    expect_gpus: int = 0,
) -> dict[str, Any] | None:
    """Runs the trainer; returns its summary (``None`` on a non-chief replica).

    Raises:
        TrainFailed: when the trainer exits non-zero, carrying its exit code.
    """
    if not checkpoint_dir:
        raise TrainFailed(
            exits.FATAL_CONFIG, "checkpoint_dir is empty: retries need somewhere to resume"
        )
    check_gpus(expect_gpus)
    flags = trainer_flags(
        data_dir=data_dir,
        checkpoint_dir=checkpoint_dir,
        model_dir=model_dir,
        settings=settings,
        extra_args=extra_args,
    )
    code = run_trainer(flags, local_workers=local_workers, preempt_at_step=preempt_at_step)
    if code != 0:
        raise TrainFailed(code, f"trainer exited {code}: {exits.describe(code)}")
    if not is_chief():
        log.info("not the chief: outputs are the chief's to write")
        return None
    return read_summary(model_dir)


def chaos_preempt_at_step(environ: Mapping[str, str] | None = None) -> int:
    """The injected preemption step from ``CHAOS_PREEMPT_ENV`` (0: none)."""
    raw = (os.environ if environ is None else environ).get(CHAOS_PREEMPT_ENV, "").strip()
    try:
        step = int(raw or 0)
    except ValueError:
        step = -1
    if step < 0:
        raise TrainFailed(
            exits.FATAL_CONFIG,
            f"{CHAOS_PREEMPT_ENV}={raw!r}: expected a step number >= 0 (0 = off)",
        )
    return step


def _money(value: Any) -> str:
    """A figure for the tables: 4 decimals; ``""`` when absent (unknown, never 0)."""
    return f"{value:.4f}" if isinstance(value, int | float) else ""


def ledger_markdown(records: Sequence[Mapping[str, Any]], totals: Mapping[str, Any]) -> str:
    """The attempt ledger as a Markdown table for the KFP UI."""
    from spottrain.ledger import attempt_cost, schema
    from spottrain.ledger.usage import describe

    # JobSet-engine runs also know where each attempt ran (spottrain.ledger.annotate).
    pods = any("node_kind" in r for r in records)
    # Where the pipeline knew the capacity kind when compiled (ledger.CAPACITY_ENV).
    capacity = not pods and any("capacity" in r for r in records)
    # What each attempt ran on (spottrain.ledger.usage) and its figures (attempt_cost).
    used = any("usage_from" in r for r in records)
    priced = any("spent" in r or "price_unknown" in r for r in records)
    currencies = [r["currency"] for r in records if "currency" in r]
    currency = totals.get("currency") or (currencies[0] if currencies else "")
    lines = [
        "# Training attempts",
        "",
        "| # | outcome | exit | start step | last step | saved step | steps lost | seconds "
        "|"
        + (" capacity |" if capacity else "")
        + (" ran on |" if used else "")
        + (f" spent {currency} | saved {currency} | lost {currency} |" if priced else "")
        + (" node | node kind | disruption | pod exit codes |" if pods else ""),
        "|---|---|---|---|---|---|---|---|"
        + ("---|" if capacity else "")
        + ("---|" if used else "")
        + ("---|---|---|" if priced else "")
        + ("---|---|---|---|" if pods else ""),
    ]
    for r in records:
        lost = r.get("steps_lost", "")
        if r.get("steps_lost_is_lower_bound"):
            lost = f"≥{lost}"
        # A ladder move's cancel ended it (its trainer saw a notice): the run's own decision.
        outcome = r.get("outcome")
        if schema.moved(r):
            outcome = f"{outcome}, left by a ladder move"
        row = (
            f"| {r.get('attempt')} | {outcome} | {r.get('exit_code', '')} "
            f"| {r.get('start_step')} | {r.get('last_step')} | {r.get('saved_step')} | {lost} "
            f"| {r.get('seconds', '')} |"
        )
        if capacity:
            row += f" {r.get('capacity', '')} |"
        if used:
            row += f" {describe(r) if 'usage_from' in r else ''} |"
        if priced:
            if "spent" in r:
                row += "".join(f" {_money(r.get(k))} |" for k in ("spent", "saved"))
                move = f"move cost {_money(r['move_cost'])}" if "move_cost" in r else ""
                row += f" {_money(r.get('lost')) or move} |"
            else:
                row += f" price unknown: {r.get('price_unknown', '')} | | |"
        if pods:
            exits = sorted((r.get("pod_exit_codes") or {}).items())
            codes = ", ".join(f"{i}: {c}" for i, c in exits)
            row += (
                f" {r.get('node', '')} | {r.get('node_kind', '')} | {r.get('disruption', '')} "
                f"| {codes} |"
            )
        lines.append(row)
    lines += [
        "",
        f"**{totals.get('attempts', 0)} attempt(s), "
        f"{totals.get('preemptions', 0)} preemption(s), "
        f"{totals.get('steps_lost', 0)} step(s) lost; "
        f"{totals.get('interruptions', 0)} interruption(s) in all (kills, lost peers, hangs "
        "included)"
        + (f"; {totals['moved']} attempt(s) left by a ladder move" if totals.get("moved") else "")
        + ".**",
    ]
    if line := attempt_cost.totals_line(totals):
        lines.append(line)
    if basis := attempt_cost.basis_line(records):
        lines += ["", basis]
    return "\n".join(lines) + "\n"


def write_ledger(checkpoint_dir: str, metrics, attempts, price=None) -> dict[str, Any]:
    """Prices ``attempts.json`` and exposes it as Metrics (``ledger_*``) and a Markdown table.

    The figures (``ledger_spent``, ``ledger_saved``, ``ledger_lost``) are logged only
    when known; ``price``: ``Usage -> Quote`` (:mod:`spottrain.ledger.attempt_cost`),
    by default :func:`spottrain.pricing.quote`.
    """
    from spottrain import ledger
    from spottrain.pricing import quote

    records = ledger.price(checkpoint_dir, price or quote)
    totals = ledger.totals(records)
    for name, value in totals.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            metrics.log_metric(f"ledger_{name}", float(value))
    with open(attempts.path, "w") as f:
        f.write(ledger_markdown(records, totals))
    return totals


def write_classification(summary: Mapping[str, Any], classification) -> None:
    """Logs a task's confusion matrix as KFP ``ClassificationMetrics`` (the UI draws it).

    A summary without ``confusion_matrix`` and ``class_names`` (a regression task)
    leaves the artifact empty.
    """
    matrix, names = summary.get("confusion_matrix"), summary.get("class_names")
    if classification is None or not matrix or not names:
        return
    if len(matrix) != len(names) or any(len(row) != len(names) for row in matrix):
        log.warning("confusion_matrix is not %d x %d (class_names): not logged", *[len(names)] * 2)
        return
    classification.log_confusion_matrix(
        [str(n) for n in names], [[int(c) for c in row] for row in matrix]
    )


def write_report_safely(checkpoint_dir: str, tensorboard_dir: str, report) -> None:
    """Writes the attempts page; a page that cannot be drawn never fails the training."""
    import html

    from spottrain.runtime.report import write_report

    try:
        write_report(checkpoint_dir, tensorboard_dir, report.path)
    except Exception as err:  # noqa: BLE001 - the trained model matters more
        log.warning("could not draw the attempts page: %s", err)
        with open(report.path, "w") as f:
            f.write(f"<p>The attempts page could not be drawn: {html.escape(str(err))}</p>")


def run_component(
    *,
    data,
    model,
    metrics,
    checkpoint_dir: str,
    settings: TrainSettings,
    attempts=None,
    report=None,
    classification=None,
    extra_args: Sequence[str] = (),
    local_workers: int = 1,
    expect_gpus: int = 0,
) -> None:
    """The ``train`` component body: trains and records the KFP outputs.

    Args:
        data: The ``Input[Dataset]`` with the run's data (``--data``).
        model: The ``Output[Model]``; its path is the trainer's ``--model-dir``.
        metrics: The ``Output[Metrics]`` filled from ``training_summary.json`` and
            the attempt ledger's totals (``ledger_*``).
        checkpoint_dir: The folder every retry resumes from.
        settings: The training settings.
        attempts: The ``Output[Markdown]`` for the attempt ledger table.
        report: The ``Output[HTML]`` for the attempts page (:mod:`spottrain.runtime.report`).
        classification: The ``Output[ClassificationMetrics]`` for the task's confusion
            matrix, when it gives one.
        extra_args: More trainer flags, appended as given.
        local_workers: Worker processes on this node (:func:`launcher_argv`).
        expect_gpus: GPUs the task was placed with (:func:`check_gpus`).
    """
    from spottrain.trainer import distribution
    from spottrain.trainer.stdio import survive_broken_pipes

    # KFP's launcher owns this process's stdout pipe and dies first on a preemption.
    survive_broken_pipes()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    os.makedirs(model.path, exist_ok=True)
    preempt_at_step = 0
    try:
        preempt_at_step = chaos_preempt_at_step()
        summary = train(
            data_dir=data_location(data.path, data.metadata),
            checkpoint_dir=checkpoint_dir,
            model_dir=model.path,
            settings=settings,
            extra_args=extra_args,
            local_workers=local_workers,
            preempt_at_step=preempt_at_step,
            expect_gpus=expect_gpus,
        )
    except TrainFailed as err:
        # SystemExit with an int code exits silently: say why before KFP sees the code.
        log.error("%s", err.message)
        termination.mark_exit(err.code, err.message)
        in_process = local_workers == 1 and not preempt_at_step  # no launcher_argv
        if distribution.in_cluster() and in_process:
            # The trainer ran in this process as one MWMS replica: a normal shutdown
            # would wait at the coordination service's barrier for peers that are gone.
            logging.shutdown()
            os._exit(err.code)
        raise
    if summary is None:
        return
    for name, value in numeric_metrics(summary).items():
        metrics.log_metric(name, value)
    write_classification(summary, classification)
    if attempts is not None:
        totals = write_ledger(checkpoint_dir, metrics, attempts)
        log.info("attempt ledger: %s", json.dumps(totals, sort_keys=True))
    if report is not None:
        write_report_safely(checkpoint_dir, settings.tensorboard_dir, report)
    update_model_metadata(model, checkpoint_dir, settings, summary)
    log.info("training summary: %s", json.dumps(summary, sort_keys=True))


def update_model_metadata(model, checkpoint_dir: str, settings: TrainSettings, summary) -> None:
    """The ``Output[Model]``'s metadata: what was trained, where, and its numbers."""
    model.metadata.update(
        framework="tensorflow",
        backbone=settings.backbone,
        image_size=settings.image_size,
        checkpoint_dir=checkpoint_dir,
        **numeric_metrics(summary),
    )
