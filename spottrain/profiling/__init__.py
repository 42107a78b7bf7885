r"""Profiles a short window of the real training setup and says what limits it.

``profile`` builds the trainer exactly as ``python -m spottrain.trainer.task`` does (same
flags, model, tf.data pipeline and distribution strategy) but points it at a
temporary checkpoint dir, runs ``warmup + profiled`` steps, and records the
profiled steps with the TensorFlow Profiler into ``<logdir>/plugins/profile/<run>/``,
where TensorBoard's Profile tab finds them. It then reads the trace (the XSpace
protobuf the profiler writes) and the trainer's own per-step timings and turns
them into findings with advice, instead of leaving five TensorBoard views to read:

* step time (mean, median, p90, min, max) and throughput;
* the share of step time spent waiting for the input pipeline (input-bound?);
* time between steps (host work outside the step);
* device compute share, op placement (host vs device) and compute precision
  (16- vs 32-bit share of op time), or a plain "no accelerator" on CPU;
* the top ops by self time, and the slowest tf.data stages;
* for several replicas, the measured AllReduce time against the estimate
  ``parameters x 4 bytes / bandwidth`` (gradients travel as float32).

Command line (trainer flags after ``--``)::

    python -m spottrain.profiling --logdir out/logs --report out/profile.md \
        -- --image-dir out/digits --backbone small_cnn --weights none --image-size 32

Under ``spottrain.trainer.launch`` (``module="spottrain.profiling"``) every worker runs the
same window; only the chief records the trace and writes the report.

One module per job, each importing only the ones listed before it:

* :mod:`~spottrain.profiling.trace`: reads the XSpace into a :class:`TraceSummary`;
* :mod:`~spottrain.profiling.findings`: the rules (thresholds, advice) per concern;
* :mod:`~spottrain.profiling.analysis`: step timings + trace summary -> :class:`Analysis`;
* :mod:`~spottrain.profiling.report`: the analysis as Markdown and HTML;
* :mod:`~spottrain.profiling.window`: :func:`profile`, the profiled window itself;
* :mod:`~spottrain.profiling.cli`: the command line (``__main__`` runs it).
"""

from spottrain.profiling.analysis import (
    DEFAULT_PROFILE_STEPS,
    DEFAULT_SKIP_STEPS,
    TOP_OPS,
    Analysis,
    RunInfo,
    analyse,
    percentile,
)
from spottrain.profiling.cli import build_parser, main
from spottrain.profiling.findings import (
    BETWEEN_STEPS_SHARE,
    BYTES_PER_PARAMETER,
    DEFAULT_BANDWIDTH_GBPS,
    HIGH_MEMORY_SHARE,
    HOST_OP_SHARE,
    INPUT_BOUND_SHARE,
    INPUT_PARTLY_SHARE,
    INPUT_WAIT_FLOOR_MS,
    LOW_16BIT_SHARE,
    LOW_DEVICE_COMPUTE_SHARE,
    LOW_MEMORY_SHARE,
    SLOW_ALLREDUCE_RATIO,
    UNEVEN_P90_OVER_MEDIAN,
    Finding,
    allreduce_estimate_seconds,
)
from spottrain.profiling.report import render_html, render_markdown
from spottrain.profiling.trace import (
    OpTime,
    ProfileError,
    TraceSummary,
    find_xplanes,
    graph_dtypes,
    load_xspace,
    summarize_xspace,
)
from spottrain.profiling.window import (
    PROFILE_SUBDIR,
    ProfileResult,
    profile,
    start_cloud_profiler,
)

__all__ = [
    "BETWEEN_STEPS_SHARE",
    "BYTES_PER_PARAMETER",
    "DEFAULT_BANDWIDTH_GBPS",
    "DEFAULT_PROFILE_STEPS",
    "DEFAULT_SKIP_STEPS",
    "HIGH_MEMORY_SHARE",
    "HOST_OP_SHARE",
    "INPUT_BOUND_SHARE",
    "INPUT_PARTLY_SHARE",
    "INPUT_WAIT_FLOOR_MS",
    "LOW_16BIT_SHARE",
    "LOW_DEVICE_COMPUTE_SHARE",
    "LOW_MEMORY_SHARE",
    "PROFILE_SUBDIR",
    "SLOW_ALLREDUCE_RATIO",
    "TOP_OPS",
    "UNEVEN_P90_OVER_MEDIAN",
    "Analysis",
    "Finding",
    "OpTime",
    "ProfileError",
    "ProfileResult",
    "RunInfo",
    "TraceSummary",
    "allreduce_estimate_seconds",
    "analyse",
    "build_parser",
    "find_xplanes",
    "graph_dtypes",
    "load_xspace",
    "main",
    "percentile",
    "profile",
    "render_html",
    "render_markdown",
    "start_cloud_profiler",
    "summarize_xspace",
]
