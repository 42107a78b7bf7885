"""The findings: one rule per concern, each an observation with its advice.

Each rule reads the trace summary, the run facts and the metrics computed so far,
may add metrics of its own, and appends its :class:`Finding` (if any) in report order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from spottrain.profiling.trace import DTYPES_16BIT, DTYPES_32BIT, TraceSummary

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


@dataclass
class Finding:
    """One observation with its advice; ``level`` is ``warn``, ``info`` or ``ok``."""

    key: str
    level: str
    title: str
    advice: str = ""


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


def fraction(part: float, whole: float) -> float:
    """``part / whole``, 0 when ``whole`` is 0."""
    return part / whole if whole > 0 else 0.0


def percent(x: float) -> str:
    """A share as a percentage for the report (one decimal below 1 %)."""
    return f"{100 * x:.0f} %" if x >= 0.01 or x == 0 else f"{100 * x:.1f} %"


def gib(n: int) -> str:
    """Bytes as GiB for the report."""
    return f"{n / 2**30:.1f} GiB"


def slowest_stages(trace: TraceSummary, n_steps: int, k: int = 3) -> list[tuple[str, float]]:
    """The ``k`` input stages or input ops with the most self time, in ms per step."""
    items = [(name, ps / 1e9 / n_steps) for name, ps in trace.input_stages.items()]
    items += [
        (f"{op.name} ({op.type})", op.self_ps / 1e9 / n_steps) for op in trace.input_ops.values()
    ]
    return sorted(items, key=lambda x: x[1], reverse=True)[:k]


def input_findings(trace, run, m, findings) -> None:
    """Input-bound, partly input-bound or not, with the slowest input work in the trace."""
    share = m["input_wait_share"]
    wait = m["input_wait_ms_per_step"]
    stages = slowest_stages(trace, len(run.steps))
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
                f"Input-bound: {percent(share)} of step time waits for the input pipeline "
                f"({wait:.1f} ms per step; threshold {percent(INPUT_BOUND_SHARE)}).{where}",
                advice,
            )
        )
    elif share >= INPUT_PARTLY_SHARE and wait >= INPUT_WAIT_FLOOR_MS:
        findings.append(
            Finding(
                "input_partly_bound",
                "warn",
                f"Partly input-bound: {percent(share)} of step time waits for input "
                f"({wait:.1f} ms per step; {percent(INPUT_PARTLY_SHARE)}-"
                f"{percent(INPUT_BOUND_SHARE)}).{where}",
                advice,
            )
        )
    else:
        findings.append(
            Finding(
                "input_ok",
                "ok",
                f"Not input-bound: {percent(share)} of step time waits for input "
                f"({wait:.2f} ms per step; threshold {percent(INPUT_BOUND_SHARE)}).",
            )
        )


def between_steps_finding(m, findings) -> None:
    """Host work outside the training step (gaps between steps)."""
    share = m["between_steps_share"]
    if share >= BETWEEN_STEPS_SHARE:
        findings.append(
            Finding(
                "between_steps",
                "warn",
                f"{percent(share)} of the profiled time passes between steps (host work outside "
                "the training step, the gaps in the Trace Viewer).",
                "Remove work between steps: log and write summaries less often "
                "(`--log-every-steps`), checkpoint less often (`--save-every-steps`, "
                "`--save-every-seconds`), and keep per-step Python callbacks and metric "
                "reads (`.numpy()`) out of the loop.",
            )
        )


def device_findings(trace, run, m, findings, window: float) -> None:
    """No accelerator, no device trace, device compute share and host-placed ops."""
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
    m["host_op_share"] = fraction(host_only_ps, host_only_ps + device_ps)
    if m["device_compute_share"] < LOW_DEVICE_COMPUTE_SHARE and not m["input_bound"]:
        findings.append(
            Finding(
                "low_device_compute",
                "warn",
                f"The accelerator computes only {percent(m['device_compute_share'])} of the "
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
                f"Device compute: {percent(m['device_compute_share'])} of the profiled time.",
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
                f"{percent(m['host_op_share'])} of op time runs on the host, not the device "
                f"(e.g. {', '.join(f'`{op.name}` ({op.type})' for op in slow)}).",
                "Keep the step on the device: avoid `tf.py_function`/NumPy inside the model, "
                "string and int64 ops without GPU kernels, and do preprocessing in tf.data "
                "rather than in the step.",
            )
        )


def precision_findings(trace, run, m, findings) -> None:
    """The 16- vs 32-bit share of op time (advice only with an accelerator)."""
    ops = list(trace.device_ops.values()) if trace.device_ops else list(trace.host_ops.values())
    total = sum(op.self_ps for op in ops)
    b16 = sum(op.self_ps for op in ops if op.dtype in DTYPES_16BIT)
    b32 = sum(op.self_ps for op in ops if op.dtype in DTYPES_32BIT)
    m["precision_16bit_share"] = fraction(b16, total)
    m["precision_32bit_share"] = fraction(b32, total)
    if not (run.accelerators or trace.device_planes):
        return
    if m["precision_16bit_share"] < LOW_16BIT_SHARE and not run.mixed_precision:
        findings.append(
            Finding(
                "precision_32bit",
                "warn",
                f"Compute precision: {percent(m['precision_32bit_share'])} of op time is 32-bit, "
                f"{percent(m['precision_16bit_share'])} 16-bit.",
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
                f"Compute precision: {percent(m['precision_16bit_share'])} of op time is 16-bit.",
            )
        )


def memory_findings(run, m, findings) -> None:
    """Device memory headroom or pressure, where the peak is known."""
    if run.memory_peak_bytes is None:
        return
    m["memory_peak_bytes"] = run.memory_peak_bytes
    if not run.memory_total_bytes:
        return
    share = run.memory_peak_bytes / run.memory_total_bytes
    m["memory_peak_share"] = share
    peak = f"{gib(run.memory_peak_bytes)} of {gib(run.memory_total_bytes)}"
    if share < LOW_MEMORY_SHARE:
        findings.append(
            Finding(
                "memory_headroom",
                "info",
                f"Device memory peak {peak} ({percent(share)}): room for a bigger batch.",
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
                f"Device memory peak {peak} ({percent(share)}): close to out of memory.",
                "Lower `--batch-size-per-replica` or `--image-size`, or use "
                "`--mixed-precision` (halves activation memory); an OOM exits 64.",
            )
        )


def allreduce_findings(trace, run, m, findings) -> None:
    """Measured gradient AllReduce time against the bandwidth estimate (several replicas)."""
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
    m["allreduce_share_of_step"] = fraction(measured, m["step_time_mean_ms"] / 1000)
    ratio = measured / estimate if estimate > 0 else float("inf")
    m["allreduce_ratio"] = ratio if math.isfinite(ratio) else -1.0
    detail = (
        f"AllReduce: {1000 * measured:.2f} ms per step measured vs {1000 * estimate:.2f} ms "
        f"estimated ({run.parameters:,} parameters x {BYTES_PER_PARAMETER} B / "
        f"{run.bandwidth_gbps:g} Gbit/s x {run.gradient_allreduces} gradient all-reduce(s) "
        f"per step); {percent(m['allreduce_share_of_step'])} of step time."
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


def uneven_steps_finding(m, findings) -> None:
    """A p90 step time far above the median."""
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
