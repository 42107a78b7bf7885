"""The ``profile`` component's body: profiles the training setup and fills the KFP outputs.

The profiled window runs in this process (:func:`spottrain.profiling.profile`), or,
with several local workers, under ``spottrain.trainer.launch`` running
``python -m spottrain.profiling`` per worker, so that the window uses the same
MultiWorkerMirroredStrategy (and AllReduce) as the training it describes.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spottrain import exits
from spottrain.runtime import termination
from spottrain.runtime import train as train_rt
from spottrain.runtime.train_settings import TrainSettings

log = logging.getLogger(__name__)

# The profile replaces the trainer's checkpoint and model dirs with a temporary
# dir of its own; this value only satisfies the trainer's flag parser.
_REPLACED_DIR = "/tmp/spottrain-profile-replaced"


@dataclass
class ProfileOutput:
    """The chief's report, metrics and trace run dir (empty on other replicas)."""

    markdown: str = ""
    html: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    trace_dir: str = ""


def profile_flags(
    *, data_dir: str, settings: TrainSettings, extra_args: Sequence[str] = ()
) -> list[str]:
    """The ``spottrain.trainer.task`` flags of the training to profile (the train task's own)."""
    return train_rt.trainer_flags(
        data_dir=data_dir,
        checkpoint_dir=_REPLACED_DIR,
        model_dir=_REPLACED_DIR,
        settings=settings.for_profile(),
        extra_args=extra_args,
    )


def run_profile(
    flags: Sequence[str],
    logdir: str,
    *,
    local_workers: int = 1,
    skip_steps: int = 5,
    profile_steps: int = 20,
    bandwidth_gbps: float = 10.0,
    cloud_profiler: bool = False,
) -> ProfileOutput:
    """Profiles the training ``flags`` describe, in-process or with local workers.

    Raises:
        train_rt.TrainFailed: the profile run exited non-zero (its exit code).
    """
    options = dict(
        skip_steps=skip_steps,
        profile_steps=profile_steps,
        bandwidth_gbps=bandwidth_gbps,
        cloud_profiler=cloud_profiler,
    )
    if local_workers < 1:
        raise ValueError(f"local_workers must be >= 1, got {local_workers}")
    if local_workers == 1:
        from spottrain import profiling
        from spottrain.exits import TrainerExit

        try:
            result = profiling.profile(flags, logdir, **options)
        except TrainerExit as e:
            raise train_rt.TrainFailed(e.code, f"profile: {e}") from e
        return ProfileOutput(result.markdown, result.html, result.metrics, result.trace_dir)
    from spottrain.trainer import launch

    with tempfile.TemporaryDirectory(prefix="spottrain-profile-") as tmp:
        argv = [
            "--logdir", logdir,
            "--skip-steps", str(skip_steps),
            "--profile-steps", str(profile_steps),
            "--bandwidth-gbps", repr(float(bandwidth_gbps)),
            "--report", f"{tmp}/report.md",
            "--html", f"{tmp}/report.html",
            "--metrics-json", f"{tmp}/metrics.json",
        ]  # fmt: skip
        if cloud_profiler:
            argv.append("--cloud-profiler")
        log.info("python -m spottrain.profiling under %d local workers", local_workers)
        code = (
            launch.ProcessLauncher(
                local_workers, [*argv, "--", *flags], module="spottrain.profiling"
            )
            .run()
            .code
        )
        if code != 0:
            raise train_rt.TrainFailed(code, f"profile exited {code}: {exits.describe(code)}")
        out = Path(tmp)
        runs = sorted(Path(logdir, "plugins", "profile").glob("*"))
        return ProfileOutput(
            markdown=(out / "report.md").read_text(),
            html=(out / "report.html").read_text(),
            metrics=json.loads((out / "metrics.json").read_text()),
            trace_dir=str(runs[-1]) if runs else "",
        )


def training_note(summary: Mapping[str, Any], metrics: Mapping[str, float]) -> str:
    """A Markdown section comparing the profiled setup with the train task's summary."""
    lines = [
        "## The training it describes",
        "",
        f"The train task ran {summary.get('final_step', '?')} steps with global batch "
        f"{summary.get('global_batch_size', '?')} on {summary.get('replicas', '?')} "
        f"replica(s), {summary.get('num_workers', '?')} worker(s).",
    ]
    differs = [
        f"{label} {metrics.get(key, 0):g} vs {summary[skey]}"
        for label, key, skey in (
            ("replicas", "replicas", "replicas"),
            ("global batch", "global_batch_size", "global_batch_size"),
        )
        if skey in summary and float(summary[skey]) != metrics.get(key)
    ]
    if differs:
        lines.append(
            "The profile ran a different setup (" + "; ".join(differs) + "): its AllReduce and "
            "throughput numbers do not carry over one to one (a Vertex job's replicas on other "
            "machines are not profiled here)."
        )
    return "\n".join(lines) + "\n"


def copy_trace(trace_dir: str, tensorboard_dir: str) -> str:
    """Copies a profile run dir to ``<tensorboard_dir>/plugins/profile/<run>``; returns it.

    Beside the training's own logs, TensorBoard (or a Vertex TensorBoard uploading
    that dir) shows the profile next to the loss curves.
    """
    import tensorflow as tf

    dst = f"{tensorboard_dir.rstrip('/')}/plugins/profile/{os.path.basename(trace_dir)}"
    tf.io.gfile.makedirs(dst)
    for path in tf.io.gfile.glob(f"{trace_dir}/*"):
        tf.io.gfile.copy(path, f"{dst}/{os.path.basename(path)}", overwrite=True)
    return dst


# projects/{project}/locations/{location}/tensorboards/{id}: the form GCPC's custom
# job passes on as CustomJobSpec.tensorboard (google/cloud/aiplatform_v1/types/custom_job.py).
_TENSORBOARD = re.compile(r"^projects/([^/]+)/locations/([^/]+)/tensorboards/([^/]+)$")
# Vertex TensorBoard experiment ids: [a-z0-9][a-z0-9-]{0,127}.
_EXPERIMENT_CHARS = re.compile(r"[^a-z0-9-]+")


def parse_tensorboard(resource: str) -> tuple[str, str, str]:
    """``(project, location, tensorboard id)`` of a Vertex TensorBoard resource name.

    Raises:
        ValueError: not ``projects/P/locations/L/tensorboards/ID`` (names the value).
    """
    match = _TENSORBOARD.match(resource)
    if not match:
        raise ValueError(
            f"tensorboard={resource!r} is not a Vertex TensorBoard resource name: expected "
            "projects/<project>/locations/<region>/tensorboards/<id>"
        )
    return match.group(1), match.group(2), match.group(3)


def experiment_name(name: str) -> str:
    """A valid Vertex TensorBoard experiment id made from ``name`` (e.g. the pipeline job)."""
    cleaned = _EXPERIMENT_CHARS.sub("-", name.lower()).strip("-")[:128].rstrip("-")
    return cleaned or "spottrain-profile"


def upload_to_vertex_tensorboard(logdir: str, tensorboard: str, experiment: str) -> str:
    """Uploads the profile under ``logdir`` to a Vertex TensorBoard, once; returns the experiment.

    The profile task is a pipeline task, not the custom job whose TensorBoard
    logs Vertex uploads while it runs (that upload ends with the job), so it
    uploads itself with the SDK's one-shot uploader. Without a run-name prefix that
    uploader sends ``<logdir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/`` as the
    "profile" run (google-cloud-aiplatform 1.165: tensorboard/uploader.py
    ``_should_profile``, "profile" is in uploader_constants.ALLOWED_PLUGINS;
    plugins/tf_profiler/profile_uploader.py ``_profile_dir`` and
    ``_ProfileSessionLoader.PROF_PATH_REGEX``). Needs the image's ``vertex`` extra.
    """
    project, location, tensorboard_id = parse_tensorboard(tensorboard)
    from google.cloud import aiplatform

    experiment = experiment_name(experiment)
    aiplatform.upload_tb_log(
        tensorboard_experiment_name=experiment,
        logdir=logdir,
        tensorboard_id=tensorboard_id,
        project=project,
        location=location,
        experiment_display_name=experiment,
        description="spottrain profile (TensorFlow Profiler trace)",
    )
    return experiment


def upload_or_refuse(logdir: str, tensorboard: str, experiment: str) -> str:
    """:func:`upload_to_vertex_tensorboard`; a refusal that no retry changes is fatal.

    A missing role, TensorBoard or credentials, or a request Vertex rejects, is
    the same on every retry: exit 64 with one line. gRPC (the SDK's default) and
    REST transports raise different classes for the same refusal (403 is
    ``PermissionDenied`` over gRPC, ``Forbidden`` over REST; google-api-core
    ``exceptions.py``), so both are listed. Anything else (5xx, timeouts) stays
    an error the platform retries.

    Raises:
        train_rt.TrainFailed: FATAL_CONFIG for a refusal.
    """
    from google.api_core import exceptions as api

    refusals = (
        api.PermissionDenied, api.Forbidden, api.Unauthenticated, api.Unauthorized,
        api.NotFound, api.InvalidArgument, api.BadRequest,
    )  # fmt: skip
    try:
        return upload_to_vertex_tensorboard(logdir, tensorboard, experiment)
    except refusals as err:
        from spottrain.exits import FATAL_CONFIG

        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        message = f"cannot upload the profile to tensorboard={tensorboard!r}: {first}"
        log.error("%s", message)
        raise train_rt.TrainFailed(FATAL_CONFIG, message) from None


def run_component(
    *,
    data,
    model,
    report,
    report_html,
    metrics,
    trace,
    settings: TrainSettings,
    extra_args: Sequence[str] = (),
    local_workers: int = 1,
    expect_gpus: int = 0,
    skip_steps: int = 5,
    profile_steps: int = 20,
    bandwidth_gbps: float = 10.0,
    cloud_profiler: bool = False,
    tensorboard: str = "",
    tensorboard_experiment: str = "",
) -> ProfileOutput:
    """The ``profile`` component body.

    Takes the component's inputs and outputs by their names (components/profile
    documents each) and the training's settings as ``settings``
    (:meth:`TrainSettings.for_profile`; the trace is also copied under its
    ``tensorboard_dir``). ``model`` is the train task's ``Input[Model]`` (``None`` when
    not wired), for context; ``report``, ``report_html``, ``metrics`` and ``trace``
    (a TensorBoard log dir) are filled.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    train_rt.check_gpus(expect_gpus)
    tensorboard_dir = settings.tensorboard_dir
    if tensorboard:
        try:
            parse_tensorboard(tensorboard)  # a bad name fails before the profile runs
        except ValueError as err:
            from spottrain.exits import FATAL_CONFIG

            log.error("%s", err)
            raise train_rt.TrainFailed(FATAL_CONFIG, str(err)) from None
    flags = profile_flags(
        data_dir=train_rt.data_location(data.path, data.metadata),
        settings=settings,
        extra_args=extra_args,
    )
    os.makedirs(trace.path, exist_ok=True)
    try:
        out = run_profile(
            flags,
            trace.path,
            local_workers=local_workers,
            skip_steps=skip_steps,
            profile_steps=profile_steps,
            bandwidth_gbps=bandwidth_gbps,
            cloud_profiler=cloud_profiler,
        )
    except train_rt.TrainFailed as err:
        log.error("%s", err.message)
        termination.mark_exit(err.code, err.message)
        raise
    if not train_rt.is_chief():
        return out
    summary_path = Path(model.path) / train_rt.SUMMARY_FILE if model is not None else None
    if summary_path is not None and summary_path.is_file():
        note = training_note(json.loads(summary_path.read_text()), out.metrics)
        out.markdown += "\n" + note
        from spottrain.profiling.report import append_markdown

        out.html = append_markdown(out.html, note)
    Path(report.path).parent.mkdir(parents=True, exist_ok=True)
    Path(report.path).write_text(out.markdown)
    Path(report_html.path).parent.mkdir(parents=True, exist_ok=True)
    Path(report_html.path).write_text(out.html)
    for name, value in sorted(out.metrics.items()):
        metrics.log_metric(name, float(value))
    trace.metadata.update(run=os.path.basename(out.trace_dir), logdir_hint="tensorboard --logdir")
    if tensorboard_dir and out.trace_dir:
        trace.metadata["tensorboard_copy"] = copy_trace(out.trace_dir, tensorboard_dir)
    if tensorboard and out.trace_dir:
        trace.metadata["vertex_tensorboard"] = tensorboard
        trace.metadata["vertex_tensorboard_experiment"] = upload_or_refuse(
            trace.path, tensorboard, tensorboard_experiment
        )
    log.info("profile report:\n%s", out.markdown)
    return out
