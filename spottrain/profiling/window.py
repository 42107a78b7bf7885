"""Runs the profiled window over the real training setup and reads back its trace.

``profile`` builds the trainer exactly as ``python -m spottrain.trainer.task`` does, with a
temporary checkpoint dir, and records the steps after the warm-up with the
TensorFlow Profiler.
"""

from __future__ import annotations

import logging
import math
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from spottrain.profiling.analysis import (
    DEFAULT_PROFILE_STEPS,
    DEFAULT_SKIP_STEPS,
    Analysis,
    RunInfo,
    analyse,
)
from spottrain.profiling.findings import DEFAULT_BANDWIDTH_GBPS, allreduce_estimate_seconds
from spottrain.profiling.report import render_html, render_markdown
from spottrain.profiling.trace import (
    ProfileError,
    find_xplanes,
    graph_dtypes,
    load_xspace,
    summarize_xspace,
)

log = logging.getLogger(__name__)

PROFILE_SUBDIR = "plugins/profile"


@dataclass
class ProfileResult:
    """What ``profile`` produced (report fields empty on a non-chief worker)."""

    is_chief: bool
    trace_dir: str = ""
    markdown: str = ""
    html: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    analysis: Analysis | None = None


class _Window:
    """The ``on_step`` callback: opens and closes the profiler around the profiled steps."""

    def __init__(self, logdir: str, first: int, last: int, record: bool, on_open=None):
        self.logdir, self.first, self.last, self.record = logdir, first, last, record
        self.on_open = on_open
        self.started = self.stopped = None
        self.active = False

    def __call__(self, step: int, input_seconds: float, step_seconds: float) -> None:
        import tensorflow as tf

        if step == self.first - 1:
            if self.on_open is not None:
                self.on_open()
            if self.record:
                tf.profiler.experimental.start(self.logdir)
                self.active = True
            self.started = time.perf_counter()  # after start(): its cost is not a step's
        elif step == self.last:
            self.stopped = time.perf_counter()
            self.close()

    def close(self) -> None:
        """Stops the profiler if it runs (also after an error inside the window)."""
        import tensorflow as tf

        if self.active:
            self.active = False
            tf.profiler.experimental.stop()


def _gpu_memory(accelerators: list[str]) -> tuple[int | None, int | None]:
    """(peak bytes on GPU:0 since the last reset, total bytes) where TF and nvidia-smi tell."""
    import tensorflow as tf

    if not any(a.startswith("GPU") for a in accelerators):
        return None, None
    try:
        peak = int(tf.config.experimental.get_memory_info("GPU:0")["peak"])
    except (ValueError, RuntimeError):
        return None, None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        total = int(float(out.strip().splitlines()[0]) * 2**20)
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        total = None
    return peak, total


def _profile_runs(logdir: str) -> set[str]:
    import tensorflow as tf

    return set(tf.io.gfile.glob(f"{logdir.rstrip('/')}/{PROFILE_SUBDIR}/*"))


def start_cloud_profiler() -> None:
    """Starts Vertex AI's profiler plugin (the Vertex TensorBoard's "Capture profile").

    Needs google-cloud-aiplatform's ``cloud_profiler`` extra and a custom job that
    has a Vertex TensorBoard attached; it reads the job's environment.
    """
    from google.cloud.aiplatform.training_utils import cloud_profiler

    cloud_profiler.init()


def profile(
    trainer_argv: Sequence[str],
    logdir: str,
    *,
    skip_steps: int = DEFAULT_SKIP_STEPS,
    profile_steps: int = DEFAULT_PROFILE_STEPS,
    bandwidth_gbps: float = DEFAULT_BANDWIDTH_GBPS,
    cloud_profiler: bool = False,
    environ: dict | None = None,
) -> ProfileResult:
    """Profiles ``warmup + profile`` steps of the training ``trainer_argv`` describes.

    The trainer's checkpoint and model dirs are replaced by a temporary dir (the
    real run's checkpoints are never read or written) and its TensorBoard dir is
    dropped (no profile losses among the training curves).

    Args:
        trainer_argv: ``python -m spottrain.trainer.task`` flags of the training to profile.
        logdir: TensorBoard log dir; the trace goes to ``<logdir>/plugins/profile/<run>``.
        skip_steps: Steps before the window (tracing, autotuning, caches).
        profile_steps: Steps inside the window.
        bandwidth_gbps: Link bandwidth between replicas for the AllReduce estimate.
        cloud_profiler: Also start Vertex AI's profiler plugin (custom jobs only).
        environ: Environment for ``TF_CONFIG``/``AIP_*`` (default ``os.environ``).

    Returns:
        The report, metrics and trace dir (chief), or ``is_chief=False``.

    Raises:
        ValueError: bad window or bandwidth.
        spottrain.exits.TrainerExit: the trainer's own errors (ConfigError: exit 64).
        ProfileError: the trace is missing.
    """
    if skip_steps < 1:
        raise ValueError(
            f"skip_steps={skip_steps} must be >= 1 (the first step traces the function)"
        )
    if profile_steps < 1:
        raise ValueError(f"profile_steps={profile_steps} must be >= 1")
    allreduce_estimate_seconds(0, bandwidth_gbps)  # validates the bandwidth early
    if not logdir:
        raise ValueError("logdir is empty: pass --logdir or set AIP_TENSORBOARD_LOG_DIR")

    import tensorflow as tf

    from spottrain import ledger as ledger_lib
    from spottrain.trainer import attempt

    cfg, cluster = attempt.prepare(list(trainer_argv), environ)
    scratch = tempfile.mkdtemp(prefix=f"spottrain-profile-{cluster.name}-")
    trainer = window = None
    try:
        cfg.checkpoint_dir = f"{scratch}/checkpoints"
        cfg.model_dir = f"{scratch}/model"
        cfg.tensorboard_dir = ""
        cfg.train_steps, cfg.epochs = skip_steps + profile_steps, 0.0
        cfg.save_every_steps, cfg.save_every_seconds = 10**9, 0.0
        # TensorFlow configured and the strategy made before the task's module runs.
        trainer = attempt.start_trainer(
            cfg, cluster, ledger_lib.Ledger(cfg.checkpoint_dir, enabled=False)
        )
        if cloud_profiler:
            start_cloud_profiler()
        trainer.build()
        accelerators = [
            d.name.replace("/physical_device:", "")
            for kind in ("GPU", "TPU")
            for d in tf.config.list_physical_devices(kind)
        ]

        def reset_memory():
            if accelerators and accelerators[0].startswith("GPU"):
                tf.config.experimental.reset_memory_stats("GPU:0")

        before = _profile_runs(logdir) if cluster.is_chief else set()
        window = _Window(
            logdir,
            skip_steps + 1,
            skip_steps + profile_steps,
            record=cluster.is_chief,
            on_open=reset_memory,
        )
        log.info(
            "profiling steps %d..%d into %s",
            window.first,
            window.last,
            logdir if cluster.is_chief else "(chief only)",
        )
        trainer.train(on_step=window)
        window.close()
        if not cluster.is_chief:
            return ProfileResult(is_chief=False)
        steps = list(trainer.step_times)[skip_steps : skip_steps + profile_steps]
        peak, total = _gpu_memory(accelerators)
        new_runs = sorted(_profile_runs(logdir) - before)
        if not new_runs:
            raise ProfileError(f"the profiler wrote no run under {logdir}/{PROFILE_SUBDIR}")
        run_dir = new_runs[-1]
        files = find_xplanes(run_dir)
        if not files:
            raise ProfileError(f"no .xplane.pb file in {run_dir}")
        summary = summarize_xspace(
            [load_xspace(p) for p in files], graph_dtypes(trainer.steps.train_step)
        )
        variables = trainer.model.trainable_variables
        run = RunInfo(
            steps=steps,
            window_seconds=(window.stopped or 0) - (window.started or 0),
            skip_steps=skip_steps,
            replicas=trainer.replicas,
            workers=cluster.num_workers,
            global_batch=trainer.global_batch,
            parameters=int(sum(math.prod(v.shape) for v in variables)),
            gradient_allreduces=2 if (cfg.clip_norm or cfg.mixed_precision) else 1,
            accelerators=accelerators,
            mixed_precision=cfg.mixed_precision,
            bandwidth_gbps=bandwidth_gbps,
            memory_peak_bytes=peak,
            memory_total_bytes=total,
            description=f"{trainer.task}, "
            f"batch {cfg.batch_size_per_replica}/replica"
            + (", mixed precision" if cfg.mixed_precision else ""),
            trace_dir=run_dir,
            logdir=logdir,
        )
        run.notes.append(
            "Times are measured with the profiler on, which adds some overhead to every step."
        )
        analysis = analyse(summary, run)
        text = render_markdown(analysis)
        return ProfileResult(
            is_chief=True,
            trace_dir=run_dir,
            markdown=text,
            html=render_html(text, run.steps),
            metrics=dict(analysis.metrics),
            analysis=analysis,
        )
    finally:
        if window is not None:
            window.close()
        if trainer is not None:
            trainer.close()
        shutil.rmtree(scratch, ignore_errors=True)
