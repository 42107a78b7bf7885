"""The analysis: the run's step timings plus the trace summary into metrics and findings."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import spottrain.profiling.findings as rules
from spottrain.profiling.findings import (
    DEFAULT_BANDWIDTH_GBPS,
    INPUT_BOUND_SHARE,
    Finding,
    fraction,
)
from spottrain.profiling.trace import OpTime, ProfileError, TraceSummary

DEFAULT_SKIP_STEPS = 5
DEFAULT_PROFILE_STEPS = 20
TOP_OPS = 10


@dataclass
class RunInfo:
    """Facts about the profiled run that are not in the trace."""

    steps: list[tuple[float, float]]  # (input seconds, step seconds) of profiled steps
    window_seconds: float  # wall time from profiler start to stop
    skip_steps: int = DEFAULT_SKIP_STEPS
    replicas: int = 1
    workers: int = 1
    global_batch: int = 0
    parameters: int = 0  # trainable: what the gradient all-reduce moves
    gradient_allreduces: int = 1  # per step (2 with --clip-norm or --mixed-precision here)
    accelerators: list[str] = field(default_factory=list)  # e.g. ["GPU:0"]
    mixed_precision: bool = False
    bandwidth_gbps: float = DEFAULT_BANDWIDTH_GBPS
    memory_peak_bytes: int | None = None
    memory_total_bytes: int | None = None
    description: str = ""
    trace_dir: str = ""
    logdir: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass
class Analysis:
    """The report's content: numbers, findings and tables."""

    run: RunInfo
    trace: TraceSummary
    metrics: dict[str, float]
    findings: list[Finding]
    top_ops: list[OpTime]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def analyse(trace: TraceSummary, run: RunInfo) -> Analysis:
    """Turns a trace summary and the run's step timings into metrics and findings."""
    if not run.steps:
        raise ProfileError("no profiled steps: the training ended before the profile window")
    n = len(run.steps)
    step_ms = [1000 * s for _, s in run.steps]
    input_s = sum(i for i, _ in run.steps)
    step_s = sum(s for _, s in run.steps)
    window = max(run.window_seconds, step_s)
    m: dict[str, float] = {
        "profiled_steps": n,
        "skip_steps": run.skip_steps,
        "replicas": run.replicas,
        "workers": run.workers,
        "global_batch_size": run.global_batch,
        "parameters": run.parameters,
        "accelerators": len(run.accelerators),
        "step_time_mean_ms": sum(step_ms) / n,
        "step_time_median_ms": percentile(step_ms, 50),
        "step_time_p90_ms": percentile(step_ms, 90),
        "step_time_min_ms": min(step_ms),
        "step_time_max_ms": max(step_ms),
        "steps_per_second": n / window,
        "examples_per_second": n * run.global_batch / window,
        "input_wait_share": fraction(input_s, step_s),
        "input_wait_ms_per_step": 1000 * input_s / n,
        "between_steps_share": fraction(window - step_s, window),
    }
    m["input_bound"] = float(m["input_wait_share"] >= INPUT_BOUND_SHARE)
    findings: list[Finding] = []
    rules.input_findings(trace, run, m, findings)
    rules.between_steps_finding(m, findings)
    rules.device_findings(trace, run, m, findings, window)
    rules.precision_findings(trace, run, m, findings)
    rules.memory_findings(run, m, findings)
    rules.allreduce_findings(trace, run, m, findings)
    rules.uneven_steps_finding(m, findings)
    ops = [*trace.host_ops.values(), *trace.device_ops.values()]
    top = sorted(ops, key=lambda o: o.self_ps, reverse=True)[:TOP_OPS]
    m["warnings"] = sum(f.level == "warn" for f in findings)
    return Analysis(run, trace, m, findings, top)
