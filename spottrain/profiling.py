r"""Profiles a short window of the real training setup and says what limits it.

``profile`` builds the trainer exactly as ``python -m trainer.task`` does (same
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

Under ``trainer.launch`` (``module="spottrain.profiling"``) every worker runs the
same window; only the chief records the trace and writes the report.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

DEFAULT_WARMUP_STEPS = 5
DEFAULT_PROFILE_STEPS = 20
# Between VMs on Google Cloud: 10-32 Gbit/s egress depending on machine size.
DEFAULT_BANDWIDTH_GBPS = 10.0
# Gradients are all-reduced as float32 even under mixed precision.
BYTES_PER_PARAMETER = 4

# Thresholds of the findings (shares of step time or of the profiled window).
# 20 % / 5 % are the TensorFlow Profiler's own "highly" / "moderately" input-bound.
INPUT_BOUND_SHARE = 0.20
INPUT_PARTLY_SHARE = 0.05
# Below this the wait is the iterator call itself (~0.5 ms on a prefetched pipeline),
# not a pipeline that falls behind; it only looks big next to tiny CPU steps.
INPUT_WAIT_FLOOR_MS = 1.0
BETWEEN_STEPS_SHARE = 0.10
LOW_DEVICE_COMPUTE_SHARE = 0.50
HOST_OP_SHARE = 0.10
LOW_16BIT_SHARE = 0.10
LOW_MEMORY_SHARE = 0.50
HIGH_MEMORY_SHARE = 0.90
UNEVEN_P90_OVER_MEDIAN = 1.5
SLOW_ALLREDUCE_RATIO = 2.0
TOP_OPS = 10

PROFILE_SUBDIR = "plugins/profile"
# tensorflow/core/framework/types.proto
_DT_NAMES = {1: "float32", 2: "float64", 14: "bfloat16", 19: "float16"}
_16BIT = {14, 19}
_32BIT = {1}
_COLLECTIVE = re.compile(r"Collective(Reduce|Gather|Bcast|AllToAll)|Nccl|AllReduce", re.I)
_DEVICE_COLLECTIVE = re.compile(r"nccl|allreduce", re.I)
_MEMCPY = re.compile(r"^(Memcpy|Memset|memcpy|memset)")


class ProfileError(RuntimeError):
    """The profile could not be taken or read; the message names the value."""


# -- Trace reading ------------------------------------------------------------------------


@dataclass
class OpTime:
    """Self time of one op (by node name) inside the profiled window."""

    name: str
    type: str
    where: str  # "host", "device" or "input"
    calls: int = 0
    self_ps: int = 0
    dtype: int | None = None  # tensorflow DataType enum of its output, when known


@dataclass
class TraceSummary:
    """What the analysis needs from an XSpace (times in picoseconds)."""

    host_ops: dict[str, OpTime] = field(default_factory=dict)
    input_ops: dict[str, OpTime] = field(default_factory=dict)
    input_stages: dict[str, int] = field(default_factory=dict)  # tf.data iterator self time
    device_ops: dict[str, OpTime] = field(default_factory=dict)
    device_planes: list[str] = field(default_factory=list)
    device_busy_ps: list[int] = field(default_factory=list)  # compute per device plane
    collective_ps: int = 0  # host collective ops (CPU / gRPC ring)
    device_collective_ps: int = 0  # device collective kernels (NCCL)
    span_ps: int = 0  # first to last event on the host
    dtypes: dict[str, int] = field(default_factory=dict)  # op name -> output dtype


def find_xplanes(run_dir: str) -> list[str]:
    """The ``*.xplane.pb`` files of one profile run directory."""
    import tensorflow as tf

    return sorted(tf.io.gfile.glob(f"{run_dir.rstrip('/')}/*.xplane.pb"))


def load_xspace(path: str):
    """Parses one ``.xplane.pb`` file into an XSpace message."""
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with tf.io.gfile.GFile(path, "rb") as f:
        space.ParseFromString(f.read())
    return space


def _stat_value(plane, stat):
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        meta = plane.stat_metadata.get(stat.ref_value)
        return meta.name if meta is not None else ""
    return getattr(stat, kind) if kind else None


def _stats(plane, stats) -> dict:
    return {
        plane.stat_metadata[s.metadata_id].name: _stat_value(plane, s)
        for s in stats
        if s.metadata_id in plane.stat_metadata
    }


def _op_of(meta) -> tuple[str, str] | None:
    """``(node name, op type)`` of a TF op event (named ``node:Type``), else None."""
    op_type = meta.display_name
    if op_type and meta.name.endswith(":" + op_type) and "::" not in op_type:
        return meta.name[: -len(op_type) - 1], op_type
    return None


def _self_times(events: list[tuple[int, int, object]]) -> Iterable[tuple[object, int]]:
    """Self time of nested intervals on one thread: ``(start, duration, key)`` in."""
    events.sort(key=lambda e: (e[0], -e[1]))
    stack: list[list] = []  # [end, key, self]
    for start, dur, key in events:
        while stack and stack[-1][0] <= start:
            end, k, own = stack.pop()
            yield k, own
        if stack:
            stack[-1][2] -= min(dur, stack[-1][0] - start)
        stack.append([start + dur, key, dur])
    while stack:
        _, k, own = stack.pop()
        yield k, own


def _add(table: dict[str, OpTime], name: str, op_type: str, where: str, ps: int) -> None:
    op = table.get(name)
    if op is None:
        op = table[name] = OpTime(name, op_type, where)
    op.calls += 1
    op.self_ps += max(ps, 0)


def _union_ps(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, -1
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def graph_dtypes(tf_function) -> dict[str, int]:
    """Op name -> DataType enum of its first floating output (or input) in a tf.function.

    The trace names ops by graph node, so this fills in the precision of ops the
    allocator did not tag. Best effort: an unknown TensorFlow internal gives ``{}``.
    """
    found: dict[str, int] = {}
    try:
        functions = tf_function._list_all_concrete_functions()
    except Exception as e:  # a private API: degrade to the allocator's tags only
        log.warning("cannot list the concrete functions for op dtypes (%s)", e)
        return found
    for concrete in functions:
        graphs = [concrete.graph]
        graphs += [
            f.graph
            for f in getattr(concrete.graph, "_functions", {}).values()
            if hasattr(f, "graph")
        ]
        for graph in graphs:
            for op in graph.get_operations():
                tensors = list(op.outputs) or list(op.inputs)
                floats = [t.dtype for t in tensors if t.dtype.is_floating]
                dtypes = floats or [t.dtype for t in tensors]
                if dtypes:
                    found.setdefault(op.name, dtypes[0].as_datatype_enum)
    return found


def summarize_xspace(spaces: Sequence, dtypes: dict[str, int] | None = None) -> TraceSummary:
    """Reduces XSpaces (one per host) to op times, device busy time and collectives.

    Args:
        spaces: XSpace messages.
        dtypes: Op name -> DataType from the graph, for ops the trace does not tag.
    """
    out = TraceSummary()
    first, last = None, None
    for space in spaces:
        for plane in space.planes:
            if plane.name.startswith("/host:"):
                first, last = _read_host_plane(plane, out, first, last)
            elif plane.name.startswith("/device:") and not plane.name.startswith("/device:CUSTOM"):
                _read_device_plane(plane, out)
    out.span_ps = (last - first) if first is not None else 0
    for name, dtype in (dtypes or {}).items():
        out.dtypes.setdefault(name, dtype)
    for table in (out.host_ops, out.device_ops, out.input_ops):
        for op in table.values():
            op.dtype = out.dtypes.get(op.name)
    return out


def _read_host_plane(plane, out: TraceSummary, first, last):
    for line in plane.lines:
        base = line.timestamp_ns * 1000
        is_input = line.name.startswith("tf_data")
        events = []  # ops and tf.data stages, nested together so each gets its self time
        for ev in line.events:
            start = base + ev.offset_ps
            first = start if first is None else min(first, start)
            last = max(last or 0, start + ev.duration_ps)
            meta = plane.event_metadata.get(ev.metadata_id)
            if meta is None:
                continue
            if meta.name == "MemoryAllocation":
                # The allocator tags each output buffer with its op and dtype:
                # the trace's own record of an op's precision.
                stats = _stats(plane, ev.stats)
                op, dtype = stats.get("tf_op"), stats.get("data_type")
                if op and dtype:
                    out.dtypes.setdefault(str(op), int(dtype))
                continue
            parsed = _op_of(meta)
            if parsed is not None:
                events.append((start, ev.duration_ps, parsed))
            elif is_input and meta.display_name.startswith("Iterator::"):
                # Producer threads only: on the consumer thread a stage's time is
                # mostly waiting for the buffer, a symptom rather than work.
                events.append((start, ev.duration_ps, meta.display_name))
        for key, own in _self_times(events):
            if isinstance(key, str):
                out.input_stages[key] = out.input_stages.get(key, 0) + max(own, 0)
                continue
            name, op_type = key
            table = out.input_ops if is_input else out.host_ops
            _add(table, name, op_type, "input" if is_input else "host", own)
            if not is_input and _COLLECTIVE.search(op_type):
                out.collective_ps += max(own, 0)
    return first, last


def _read_device_plane(plane, out: TraceSummary) -> None:
    out.device_planes.append(plane.name)
    busy = []
    for line in plane.lines:
        base = line.timestamp_ns * 1000
        for ev in line.events:
            meta = plane.event_metadata.get(ev.metadata_id)
            kernel = meta.name if meta is not None else ""
            if _MEMCPY.match(kernel) or "memcpy" in line.name.lower():
                continue
            start = base + ev.offset_ps
            busy.append((start, start + ev.duration_ps))
            stats = _stats(plane, ev.stats)
            tf_op = str(stats.get("tf_op") or stats.get("level 0") or "")
            name, _, op_type = tf_op.rpartition(":")
            if not name:
                name, op_type = tf_op or kernel, "kernel"
            _add(out.device_ops, name, op_type, "device", ev.duration_ps)
            if _DEVICE_COLLECTIVE.search(kernel) or _COLLECTIVE.search(op_type):
                out.device_collective_ps += ev.duration_ps
    out.device_busy_ps.append(_union_ps(busy))


# -- Analysis -----------------------------------------------------------------------------


@dataclass
class RunInfo:
    """Facts about the profiled run that are not in the trace."""

    steps: list[tuple[float, float]]  # (input seconds, step seconds) of profiled steps
    window_seconds: float  # wall time from profiler start to stop
    warmup_steps: int = DEFAULT_WARMUP_STEPS
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
class Finding:
    """One observation with its advice; ``level`` is ``warn``, ``info`` or ``ok``."""

    key: str
    level: str
    title: str
    advice: str = ""


@dataclass
class Analysis:
    """The report's content: numbers, findings and tables."""

    run: RunInfo
    trace: TraceSummary
    metrics: dict[str, float]
    findings: list[Finding]
    top_ops: list[OpTime]

    def has(self, key: str) -> bool:
        """Whether a finding with this key was made."""
        return any(f.key == key for f in self.findings)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def allreduce_estimate_seconds(parameters: int, bandwidth_gbps: float) -> float:
    """``parameters x 4 bytes / bandwidth``: one gradient all-reduce, in seconds.

    Args:
        parameters: Trainable parameters (their gradients are all-reduced).
        bandwidth_gbps: Link bandwidth between replicas in Gbit/s.

    Raises:
        ValueError: a negative parameter count or a non-positive bandwidth.
    """
    if parameters < 0:
        raise ValueError(f"parameters={parameters} must be >= 0")
    if not (bandwidth_gbps > 0 and math.isfinite(bandwidth_gbps)):
        raise ValueError(f"bandwidth_gbps={bandwidth_gbps} must be a positive number")
    return parameters * BYTES_PER_PARAMETER / (bandwidth_gbps * 1e9 / 8)


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %" if x >= 0.01 or x == 0 else f"{100 * x:.1f} %"


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


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
        "warmup_steps": run.warmup_steps,
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
        "input_wait_share": _share(input_s, step_s),
        "input_wait_ms_per_step": 1000 * input_s / n,
        "between_steps_share": _share(window - step_s, window),
    }
    m["input_bound"] = float(m["input_wait_share"] >= INPUT_BOUND_SHARE)
    findings: list[Finding] = []
    _input_findings(trace, run, m, findings)
    _between_steps_finding(m, findings)
    _device_findings(trace, run, m, findings, window)
    _precision_findings(trace, run, m, findings)
    _memory_findings(run, m, findings)
    _allreduce_findings(trace, run, m, findings)
    if m["step_time_p90_ms"] > UNEVEN_P90_OVER_MEDIAN * m["step_time_median_ms"]:
        findings.append(
            Finding(
                "uneven_steps",
                "warn",
                f"Uneven step times: p90 {m['step_time_p90_ms']:.1f} ms is "
                f"{m['step_time_p90_ms'] / m['step_time_median_ms']:.1f}x the median "
                f"{m['step_time_median_ms']:.1f} ms.",
                "Look for a straggler replica, other processes on the host, or Python "
                "garbage collection; pin the thread pools (--threads) on shared machines.",
            )
        )
    ops = [*trace.host_ops.values(), *trace.device_ops.values()]
    top = sorted(ops, key=lambda o: o.self_ps, reverse=True)[:TOP_OPS]
    m["warnings"] = sum(f.level == "warn" for f in findings)
    return Analysis(run, trace, m, findings, top)


def _slowest_stages(trace: TraceSummary, n_steps: int, k: int = 3) -> list[tuple[str, float]]:
    items = [(name, ps / 1e9 / n_steps) for name, ps in trace.input_stages.items()]
    items += [
        (f"{op.name} ({op.type})", op.self_ps / 1e9 / n_steps) for op in trace.input_ops.values()
    ]
    return sorted(items, key=lambda x: x[1], reverse=True)[:k]


def _input_findings(trace, run, m, findings) -> None:
    share = m["input_wait_share"]
    wait = m["input_wait_ms_per_step"]
    stages = _slowest_stages(trace, len(run.steps))
    where = (
        " Slowest input work in the trace: "
        + ", ".join(f"`{name}` {ms:.1f} ms/step" for name, ms in stages)
        + "."
        if stages
        else ""
    )
    advice = (
        "Make the next batch ready before the step ends: parallelise the map "
        "(`num_parallel_calls=tf.data.AUTOTUNE`), cache decoded images in memory (this "
        "trainer: raise `--cache-max-mb` until the decoded training set fits), keep "
        "`prefetch(tf.data.AUTOTUNE)` last, read many files at once (`interleave`) or copy "
        "the data to local disk first (gcs_copy), and move expensive preprocessing (resizing, "
        "decoding large JPEGs) offline."
    )
    if share >= INPUT_BOUND_SHARE:
        findings.append(
            Finding(
                "input_bound",
                "warn",
                f"Input-bound: {_pct(share)} of step time waits for the input pipeline "
                f"({wait:.1f} ms per step; threshold {_pct(INPUT_BOUND_SHARE)}).{where}",
                advice,
            )
        )
    elif share >= INPUT_PARTLY_SHARE and wait >= INPUT_WAIT_FLOOR_MS:
        findings.append(
            Finding(
                "input_partly_bound",
                "warn",
                f"Partly input-bound: {_pct(share)} of step time waits for input "
                f"({wait:.1f} ms per step; {_pct(INPUT_PARTLY_SHARE)}-{_pct(INPUT_BOUND_SHARE)}"
                f").{where}",
                advice,
            )
        )
    else:
        findings.append(
            Finding(
                "input_ok",
                "ok",
                f"Not input-bound: {_pct(share)} of step time waits for input "
                f"({wait:.2f} ms per step; threshold {_pct(INPUT_BOUND_SHARE)}).",
            )
        )


def _between_steps_finding(m, findings) -> None:
    share = m["between_steps_share"]
    if share >= BETWEEN_STEPS_SHARE:
        findings.append(
            Finding(
                "between_steps",
                "warn",
                f"{_pct(share)} of the profiled time passes between steps (host work outside "
                "the training step, the gaps in the Trace Viewer).",
                "Remove work between steps: log and write summaries less often "
                "(`--log-every-steps`), checkpoint less often (`--save-every-steps`, "
                "`--save-every-seconds`), and keep per-step Python callbacks and metric "
                "reads (`.numpy()`) out of the loop.",
            )
        )


def _device_findings(trace, run, m, findings, window: float) -> None:
    host_ps = sum(op.self_ps for op in trace.host_ops.values())
    device_ps = sum(op.self_ps for op in trace.device_ops.values())
    m["host_op_ms_per_step"] = host_ps / 1e9 / len(run.steps)
    m["input_op_ms_per_step"] = (
        sum(op.self_ps for op in trace.input_ops.values()) / 1e9 / len(run.steps)
    )
    if not run.accelerators and not trace.device_planes:
        m["host_op_share"] = 1.0
        findings.append(
            Finding(
                "no_accelerator",
                "info",
                "No accelerator: TensorFlow sees no GPU or TPU, so every op ran on the host "
                "CPU. Device compute share, op placement and the 16-bit speed-up do not apply; "
                "the numbers below are host numbers.",
                "If this should have run on a GPU node, check that the image is a CUDA build "
                "and the NVIDIA driver is installed (the train component's `expect_gpus` "
                "fails fast on both).",
            )
        )
        return
    if not trace.device_planes:
        findings.append(
            Finding(
                "no_device_trace",
                "warn",
                f"TensorFlow sees {', '.join(run.accelerators)} but the trace has no device "
                "activity: device compute share and placement are not measured.",
                "GPU tracing needs CUPTI (libcupti from the CUDA toolkit on the library "
                "path); in containers it may also need the `SYS_ADMIN` capability or "
                "`NVreg_RestrictProfilingToAdminUsers=0`.",
            )
        )
        return
    # Only ops that never ran a kernel count as host-placed: a GPU op's launch on a
    # host thread is not host compute.
    on_device = set(trace.device_ops)
    host_only_ps = sum(op.self_ps for op in trace.host_ops.values() if op.name not in on_device)
    share_device = sum(trace.device_busy_ps) / len(trace.device_busy_ps) / (window * 1e12)
    m["device_compute_share"] = min(share_device, 1.0)
    m["host_op_share"] = _share(host_only_ps, host_only_ps + device_ps)
    if m["device_compute_share"] < LOW_DEVICE_COMPUTE_SHARE and not m["input_bound"]:
        findings.append(
            Finding(
                "low_device_compute",
                "warn",
                f"The accelerator computes only {_pct(m['device_compute_share'])} of the "
                "profiled time and the input is not the cause.",
                "Give it bigger steps: raise the batch size if memory allows (scale the "
                "learning rate with it), fuse small ops (`jit_compile=True`/XLA), and remove "
                "host work between steps.",
            )
        )
    else:
        findings.append(
            Finding(
                "device_compute",
                "ok" if m["device_compute_share"] >= LOW_DEVICE_COMPUTE_SHARE else "info",
                f"Device compute: {_pct(m['device_compute_share'])} of the profiled time.",
            )
        )
    if m["host_op_share"] >= HOST_OP_SHARE:
        slow = sorted(
            (op for op in trace.host_ops.values() if op.name not in on_device),
            key=lambda o: o.self_ps,
            reverse=True,
        )[:3]
        findings.append(
            Finding(
                "host_ops",
                "warn",
                f"{_pct(m['host_op_share'])} of op time runs on the host, not the device "
                f"(e.g. {', '.join(f'`{op.name}` ({op.type})' for op in slow)}).",
                "Keep the step on the device: avoid `tf.py_function`/NumPy inside the model, "
                "string and int64 ops without GPU kernels, and do preprocessing in tf.data "
                "rather than in the step.",
            )
        )


def _precision_findings(trace, run, m, findings) -> None:
    ops = list(trace.device_ops.values()) if trace.device_ops else list(trace.host_ops.values())
    total = sum(op.self_ps for op in ops)
    b16 = sum(op.self_ps for op in ops if op.dtype in _16BIT)
    b32 = sum(op.self_ps for op in ops if op.dtype in _32BIT)
    m["precision_16bit_share"] = _share(b16, total)
    m["precision_32bit_share"] = _share(b32, total)
    if not (run.accelerators or trace.device_planes):
        return
    if m["precision_16bit_share"] < LOW_16BIT_SHARE and not run.mixed_precision:
        findings.append(
            Finding(
                "precision_32bit",
                "warn",
                f"Compute precision: {_pct(m['precision_32bit_share'])} of op time is 32-bit, "
                f"{_pct(m['precision_16bit_share'])} 16-bit.",
                "Turn on mixed precision (`--mixed-precision`: float16 compute with loss "
                "scaling, float32 weights); Tensor Cores (T4, V100, A100, L4) run 16-bit "
                "matrix math several times faster. Check that the loss stays finite.",
            )
        )
    else:
        findings.append(
            Finding(
                "precision",
                "ok",
                f"Compute precision: {_pct(m['precision_16bit_share'])} of op time is 16-bit.",
            )
        )


def _memory_findings(run, m, findings) -> None:
    if run.memory_peak_bytes is None:
        return
    m["memory_peak_bytes"] = run.memory_peak_bytes
    if not run.memory_total_bytes:
        return
    share = run.memory_peak_bytes / run.memory_total_bytes
    m["memory_peak_share"] = share
    peak = f"{_gib(run.memory_peak_bytes)} of {_gib(run.memory_total_bytes)}"
    if share < LOW_MEMORY_SHARE:
        findings.append(
            Finding(
                "memory_headroom",
                "info",
                f"Device memory peak {peak} ({_pct(share)}): room for a bigger batch.",
                "A bigger per-replica batch uses the device better and splits the AllReduce "
                "cost over more examples; raise `--batch-size-per-replica` (and the learning "
                "rate) while the peak stays below ~90 %.",
            )
        )
    elif share > HIGH_MEMORY_SHARE:
        findings.append(
            Finding(
                "memory_tight",
                "warn",
                f"Device memory peak {peak} ({_pct(share)}): close to out of memory.",
                "Lower `--batch-size-per-replica` or `--image-size`, or use "
                "`--mixed-precision` (halves activation memory); an OOM exits 64.",
            )
        )


def _allreduce_findings(trace, run, m, findings) -> None:
    if run.replicas <= 1:
        return
    n = len(run.steps)
    measured_ps = trace.device_collective_ps or trace.collective_ps
    measured = measured_ps / 1e12 / n
    per_reduce = allreduce_estimate_seconds(run.parameters, run.bandwidth_gbps)
    estimate = per_reduce * run.gradient_allreduces
    m["allreduce_ms_per_step"] = 1000 * measured
    m["allreduce_estimate_ms_per_step"] = 1000 * estimate
    m["bandwidth_gbps"] = run.bandwidth_gbps
    m["allreduce_share_of_step"] = _share(measured, m["step_time_mean_ms"] / 1000)
    ratio = measured / estimate if estimate > 0 else float("inf")
    m["allreduce_ratio"] = ratio if math.isfinite(ratio) else -1.0
    detail = (
        f"AllReduce: {1000 * measured:.2f} ms per step measured vs {1000 * estimate:.2f} ms "
        f"estimated ({run.parameters:,} parameters x {BYTES_PER_PARAMETER} B / "
        f"{run.bandwidth_gbps:g} Gbit/s x {run.gradient_allreduces} gradient all-reduce(s) "
        f"per step); {_pct(m['allreduce_share_of_step'])} of step time."
    )
    if measured_ps == 0:
        findings.append(
            Finding(
                "allreduce_unmeasured",
                "warn",
                f"{run.replicas} replicas but no collective op in the trace.",
                "The trace may have missed the collective threads; compare steps/s with one "
                "replica to see the communication overhead.",
            )
        )
    elif ratio > SLOW_ALLREDUCE_RATIO:
        findings.append(
            Finding(
                "allreduce_slow",
                "warn",
                f"{detail} That is {ratio:.1f}x the estimate.",
                "Extra overhead beyond the bandwidth: the measured time includes waiting for "
                "the slowest replica (check it is not input-bound or on a busier host), and "
                "this trainer all-reduces the gradients twice with `--clip-norm` or "
                "`--mixed-precision`. Check the real link bandwidth (`--bandwidth-gbps`), "
                "prefer NCCL on GPUs, and raise the per-replica batch so each all-reduce "
                "serves more examples.",
            )
        )
    else:
        findings.append(Finding("allreduce", "ok", f"{detail} Within {SLOW_ALLREDUCE_RATIO:g}x."))


# -- Rendering ----------------------------------------------------------------------------

_ICON = {"warn": "⚠️", "info": "ℹ️", "ok": "✅"}


def _where_label(op: OpTime, accelerators: bool) -> str:
    if op.where == "host":
        return "host (CPU)" if not accelerators else "host"
    return op.where


def render_markdown(a: Analysis) -> str:
    """The report as Markdown (what the KFP UI shows for a ``Markdown`` artifact)."""
    run, m, t = a.run, a.metrics, a.trace
    n = len(run.steps)
    accel = bool(run.accelerators or t.device_planes)
    hw = ", ".join(run.accelerators) if run.accelerators else "CPU only, no accelerator"
    lines = [
        f"# Training profile{': ' + run.description if run.description else ''}",
        "",
        f"{n} steps profiled after {run.warmup_steps} warm-up steps; {run.replicas} "
        f"replica(s) on {run.workers} worker(s); global batch {run.global_batch}; {hw}.",
    ]
    if run.trace_dir:
        lines += [
            "",
            f"Trace: `{run.trace_dir}` (TensorBoard: `tensorboard --logdir {run.logdir}`, "
            "Profile tab).",
        ]
    lines += ["", "## Findings", ""]
    for i, f in enumerate(a.findings, 1):
        lines.append(f"{i}. {_ICON[f.level]} **{f.title}**")
        if f.advice:
            lines.append(f"   *Advice:* {f.advice}")
    lines += [
        "",
        "## Step time",
        "",
        "| mean | median | p90 | min | max | steps/s | examples/s |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {m['step_time_mean_ms']:.1f} ms | {m['step_time_median_ms']:.1f} ms "
        f"| {m['step_time_p90_ms']:.1f} ms | {m['step_time_min_ms']:.1f} ms "
        f"| {m['step_time_max_ms']:.1f} ms | {m['steps_per_second']:.1f} "
        f"| {m['examples_per_second']:.0f} |",
        "",
        "| where the profiled time went | ms per step | share |",
        "|---|---:|---:|",
    ]
    window_ms = 1000 * max(run.window_seconds, sum(s for _, s in run.steps)) / n
    wait = m["input_wait_ms_per_step"]
    step = m["step_time_mean_ms"]
    lines += [
        f"| waiting for input (`next(iterator)`) | {wait:.2f} | {_pct(wait / window_ms)} |",
        f"| training step (compute and sync) | {step - wait:.2f} | "
        f"{_pct((step - wait) / window_ms)} |",
        f"| between steps (host work outside the step) | {window_ms - step:.2f} | "
        f"{_pct(m['between_steps_share'])} |",
        "",
        "## Device and placement",
        "",
    ]
    if not accel:
        lines.append(
            "No accelerator: there is no device compute share to report. Host CPU op time "
            f"{m['host_op_ms_per_step']:.1f} ms per step in the model's ops, "
            f"{m['input_op_ms_per_step']:.1f} ms per step in input-pipeline ops (100 % of "
            "op time on the host)."
        )
    elif "device_compute_share" in m:
        lines.append(
            f"Device compute {_pct(m['device_compute_share'])} of the profiled time on "
            f"{len(t.device_planes)} device(s); ops placed on the host (no device kernel): "
            f"{_pct(m['host_op_share'])} of op time."
        )
    else:
        lines.append("No device activity in the trace (see findings).")
    other = max(0.0, 1 - m["precision_16bit_share"] - m["precision_32bit_share"])
    lines += [
        "",
        f"Compute precision ({'device' if t.device_ops else 'host'} op time): 16-bit "
        f"{_pct(m['precision_16bit_share'])}, 32-bit {_pct(m['precision_32bit_share'])}, "
        f"other or unknown {_pct(other)}"
        f"{'' if accel else ' (informational: 16-bit pays off on GPUs/TPUs)'}.",
        "",
        f"## Top {len(a.top_ops)} ops by self time",
        "",
        "| op | type | where | dtype | calls | ms per step | share of op time |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    total_ops = sum(op.self_ps for op in (*t.host_ops.values(), *t.device_ops.values()))
    for op in a.top_ops:
        lines.append(
            f"| `{_short(op.name)}` | {op.type} | {_where_label(op, accel)} "
            f"| {_DT_NAMES.get(op.dtype, '-') if op.dtype else '-'} | {op.calls} "
            f"| {op.self_ps / 1e9 / n:.2f} | {_pct(_share(op.self_ps, total_ops))} |"
        )
    stages = _slowest_stages(t, n, 5)
    if stages:
        lines += ["", "## Input pipeline (tf.data, host)", "", "| stage or op | ms per step |"]
        lines.append("|---|---:|")
        lines += [f"| `{_short(name)}` | {ms:.2f} |" for name, ms in stages]
    lines += ["", "## AllReduce", ""]
    if run.replicas <= 1:
        lines.append("One replica: no gradient AllReduce.")
    else:
        lines.append(
            f"{m['allreduce_ms_per_step']:.2f} ms per step measured (collective ops in the "
            f"trace, including waits for the slowest replica) vs "
            f"{m['allreduce_estimate_ms_per_step']:.2f} ms estimated = {run.parameters:,} "
            f"parameters x {BYTES_PER_PARAMETER} B / {run.bandwidth_gbps:g} Gbit/s x "
            f"{run.gradient_allreduces} per step."
        )
    if run.notes:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in run.notes]
    return "\n".join(lines) + "\n"


def _short(name: str, limit: int = 70) -> str:
    return name if len(name) <= limit else "…" + name[-(limit - 1) :]


def render_html(markdown_text: str) -> str:
    """The Markdown report as a standalone HTML page (KFP ``HTML`` artifact)."""
    import markdown  # a TensorBoard dependency

    body = markdown.markdown(markdown_text, extensions=["tables"])
    style = (
        "body{font-family:sans-serif;max-width:70em;margin:1em auto;padding:0 1em}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"
        "code{font-size:90%}"
    )
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>Training profile</title>'
        f"<style>{style}</style></head><body>{body}</body></html>\n"
    )


# -- Running the profiled window ------------------------------------------------------------


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


def _slow_input(trainer, delay_ms: float) -> None:
    """Adds a sleep per batch to the trainer's input pipeline (an input-bound demo/test).

    A sequential map, like an unparallelised decode: the producer cannot run ahead
    of the delay however deep the prefetch buffer is.
    """
    import numpy as np
    import tensorflow as tf

    original = trainer.pipelines.train_dataset
    seconds = delay_ms / 1000

    def _sleep():
        time.sleep(seconds)
        return np.int64(0)

    def delayed(images, labels):
        done = tf.numpy_function(_sleep, [], tf.int64, stateful=True)
        with tf.control_dependencies([done]):
            return tf.identity(images), tf.identity(labels)

    def train_dataset(*args, **kwargs):
        return original(*args, **kwargs).map(delayed).prefetch(tf.data.AUTOTUNE)

    trainer.pipelines.train_dataset = train_dataset


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
    warmup_steps: int = DEFAULT_WARMUP_STEPS,
    profile_steps: int = DEFAULT_PROFILE_STEPS,
    bandwidth_gbps: float = DEFAULT_BANDWIDTH_GBPS,
    input_delay_ms: float = 0.0,
    cloud_profiler: bool = False,
    environ: dict | None = None,
) -> ProfileResult:
    """Profiles ``warmup + profile`` steps of the training ``trainer_argv`` describes.

    The trainer's checkpoint and model dirs are replaced by a temporary dir (the
    real run's checkpoints are never read or written) and its TensorBoard dir is
    dropped (no profile losses among the training curves).

    Args:
        trainer_argv: ``python -m trainer.task`` flags of the training to profile.
        logdir: TensorBoard log dir; the trace goes to ``<logdir>/plugins/profile/<run>``.
        warmup_steps: Steps before the window (tracing, autotuning, caches).
        profile_steps: Steps inside the window.
        bandwidth_gbps: Link bandwidth between replicas for the AllReduce estimate.
        input_delay_ms: Sleep this long per batch in the input pipeline (tests, demos).
        cloud_profiler: Also start Vertex AI's profiler plugin (custom jobs only).
        environ: Environment for ``TF_CONFIG``/``AIP_*`` (default ``os.environ``).

    Returns:
        The report, metrics and trace dir (chief), or ``is_chief=False``.

    Raises:
        ValueError: bad window, bandwidth or delay.
        trainer.preemption.TrainerExit: the trainer's own errors (ConfigError: exit 64).
        ProfileError: the trace is missing.
    """
    if warmup_steps < 1:
        raise ValueError(
            f"warmup_steps={warmup_steps} must be >= 1 (the first step traces the function)"
        )
    if profile_steps < 1:
        raise ValueError(f"profile_steps={profile_steps} must be >= 1")
    if input_delay_ms < 0:
        raise ValueError(f"input_delay_ms={input_delay_ms} must be >= 0")
    allreduce_estimate_seconds(0, bandwidth_gbps)  # validates the bandwidth early
    if not logdir:
        raise ValueError("logdir is empty: pass --logdir or set AIP_TENSORBOARD_LOG_DIR")

    import tensorflow as tf

    from trainer import ledger as ledger_lib
    from trainer import train_lib

    cfg, cluster = train_lib.prepare(list(trainer_argv), environ)
    scratch = tempfile.mkdtemp(prefix=f"spottrain-profile-{cluster.name}-")
    trainer = window = None
    try:
        cfg.checkpoint_dir = f"{scratch}/checkpoints"
        cfg.model_dir = f"{scratch}/model"
        cfg.tensorboard_dir = ""
        cfg.train_steps, cfg.epochs = warmup_steps + profile_steps, 0.0
        cfg.save_every_steps, cfg.save_every_seconds = 10**9, 0.0
        index = train_lib.validate_all(cfg, cluster)
        if cloud_profiler:
            start_cloud_profiler()
        trainer = train_lib.Trainer(
            cfg, cluster, index, ledger_lib.Ledger(cfg.checkpoint_dir, enabled=False)
        )
        trainer.build()
        if input_delay_ms:
            _slow_input(trainer, input_delay_ms)
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
            warmup_steps + 1,
            warmup_steps + profile_steps,
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
        steps = list(trainer.step_times)[warmup_steps : warmup_steps + profile_steps]
        peak, total = _gpu_memory(accelerators)
        new_runs = sorted(_profile_runs(logdir) - before)
        if not new_runs:
            raise ProfileError(f"the profiler wrote no run under {logdir}/{PROFILE_SUBDIR}")
        run_dir = new_runs[-1]
        files = find_xplanes(run_dir)
        if not files:
            raise ProfileError(f"no .xplane.pb file in {run_dir}")
        summary = summarize_xspace(
            [load_xspace(p) for p in files], graph_dtypes(trainer._train_step)
        )
        variables = trainer.model.trainable_variables
        run = RunInfo(
            steps=steps,
            window_seconds=(window.stopped or 0) - (window.started or 0),
            warmup_steps=warmup_steps,
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
            description=f"{cfg.backbone}, {cfg.image_size} px, "
            f"batch {cfg.batch_size_per_replica}/replica"
            + (", mixed precision" if cfg.mixed_precision else ""),
            trace_dir=run_dir,
            logdir=logdir,
        )
        if input_delay_ms:
            run.notes.append(
                f"The input pipeline was slowed down on purpose by {input_delay_ms:g} ms per "
                "batch (input_delay_ms)."
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
            html=render_html(text),
            metrics=dict(analysis.metrics),
            analysis=analysis,
        )
    finally:
        if window is not None:
            window.close()
        if trainer is not None:
            trainer.close()
        shutil.rmtree(scratch, ignore_errors=True)


# -- Command line ---------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The profiler's command line (trainer flags follow ``--``)."""
    p = argparse.ArgumentParser(
        prog="python -m spottrain.profiling",
        description="Profile a short window of the real training and report what limits it.",
        epilog="Example: python -m spottrain.profiling --logdir out/logs --report out/p.md -- "
        "--image-dir out/digits --backbone small_cnn --weights none --image-size 32",
    )
    p.add_argument(
        "--logdir",
        default=os.environ.get("AIP_TENSORBOARD_LOG_DIR", ""),
        help="TensorBoard log dir for the trace (default $AIP_TENSORBOARD_LOG_DIR).",
    )
    p.add_argument("--warmup-steps", type=int, default=DEFAULT_WARMUP_STEPS)
    p.add_argument("--profile-steps", type=int, default=DEFAULT_PROFILE_STEPS)
    p.add_argument(
        "--bandwidth-gbps",
        type=float,
        default=DEFAULT_BANDWIDTH_GBPS,
        help="Bandwidth between replicas for the AllReduce estimate, Gbit/s.",
    )
    p.add_argument("--report", default="", help="Write the Markdown report here.")
    p.add_argument("--html", default="", help="Write the HTML report here.")
    p.add_argument("--metrics-json", default="", help="Write the metrics as JSON here.")
    p.add_argument(
        "--input-delay-ms",
        type=float,
        default=0.0,
        help="Slow the input pipeline down by this much per batch (tests, demos).",
    )
    p.add_argument(
        "--cloud-profiler",
        action="store_true",
        help="Also start Vertex AI's cloud_profiler plugin (custom jobs with a TensorBoard).",
    )
    p.add_argument("trainer_args", nargs=argparse.REMAINDER)
    return p


def _write(path: str, text: str) -> None:
    import tensorflow as tf

    parent = os.path.dirname(path)
    if parent:
        tf.io.gfile.makedirs(parent)
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(text)


def main(argv: list[str] | None = None, print_fn: Callable[[str], None] = print) -> int:
    """CLI entry point; returns the exit code (the trainer's codes for its errors)."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    trainer_args = args.trainer_args
    if trainer_args and trainer_args[0] == "--":
        trainer_args = trainer_args[1:]
    from trainer import watchdog
    from trainer.preemption import TrainerExit

    if watchdog.should_supervise(trainer_args):
        # Like trainer.task: a hung MWMS start-up or step stops with exit 171
        # (retryable) and a stack dump instead of holding a GPU node forever.
        own_argv = sys.argv[1:] if argv is None else argv
        cmd = [sys.executable, "-m", "spottrain.profiling", *own_argv]
        return watchdog.supervise(cmd, trainer_args, name="profile")
    try:
        result = profile(
            trainer_args,
            args.logdir,
            warmup_steps=args.warmup_steps,
            profile_steps=args.profile_steps,
            bandwidth_gbps=args.bandwidth_gbps,
            input_delay_ms=args.input_delay_ms,
            cloud_profiler=args.cloud_profiler,
        )
    except TrainerExit as e:
        log.error("exit %d: %s", e.code, e)
        return e.code
    except (ValueError, ProfileError) as e:
        log.error("%s", e)
        return 2
    if not result.is_chief:
        return 0
    for path, text in (
        (args.report, result.markdown),
        (args.html, result.html),
        (args.metrics_json, json.dumps(result.metrics, indent=2, sort_keys=True) + "\n"),
    ):
        if path:
            _write(path, text)
    if args.report:
        print_fn(f"profile report: {args.report} (trace: {result.trace_dir})")
    else:
        print_fn(result.markdown)
    return 0


if __name__ == "__main__":
    from trainer.preemption import exit_process

    exit_process(main())
