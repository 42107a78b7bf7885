"""Renders an :class:`~spottrain.profiling.analysis.Analysis` as Markdown and as an HTML page."""

from __future__ import annotations

from collections.abc import Sequence

from spottrain.profiling.analysis import Analysis, percentile
from spottrain.profiling.findings import BYTES_PER_PARAMETER, fraction, percent, slowest_stages
from spottrain.profiling.trace import DTYPE_NAMES, OpTime

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
        f"{n} steps profiled after {run.skip_steps} skipped steps (tracing, autotuning); "
        f"{run.replicas} replica(s) on {run.workers} worker(s); "
        f"global batch {run.global_batch}; {hw}.",
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
        f"| waiting for input (`next(iterator)`) | {wait:.2f} | {percent(wait / window_ms)} |",
        f"| training step (compute and sync) | {step - wait:.2f} | "
        f"{percent((step - wait) / window_ms)} |",
        f"| between steps (host work outside the step) | {window_ms - step:.2f} | "
        f"{percent(m['between_steps_share'])} |",
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
            f"Device compute {percent(m['device_compute_share'])} of the profiled time on "
            f"{len(t.device_planes)} device(s); ops placed on the host (no device kernel): "
            f"{percent(m['host_op_share'])} of op time."
        )
    else:
        lines.append("No device activity in the trace (see findings).")
    other = max(0.0, 1 - m["precision_16bit_share"] - m["precision_32bit_share"])
    lines += [
        "",
        f"Compute precision ({'device' if t.device_ops else 'host'} op time): 16-bit "
        f"{percent(m['precision_16bit_share'])}, 32-bit {percent(m['precision_32bit_share'])}, "
        f"other or unknown {percent(other)}"
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
            f"| {DTYPE_NAMES.get(op.dtype, '-') if op.dtype else '-'} | {op.calls} "
            f"| {op.self_ps / 1e9 / n:.2f} | {percent(fraction(op.self_ps, total_ops))} |"
        )
    stages = slowest_stages(t, n, 5)
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
    lines += ["", "## This report and TensorBoard's Profile tab", "", profile_tab_note(run)]
    if run.notes:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in run.notes]
    return "\n".join(lines) + "\n"


def profile_tab_note(run) -> str:
    """How the report's numbers relate to TensorBoard's Profile tab (xprof) on the same trace.

    Checked against xprof 2.24 on this trainer's traces
    (tests/integration/profiling/test_profiling.py);
    thresholds from xprof's convert/op_stats_to_input_pipeline_analysis.cc
    (kHighlyInfeedBoundThresholdInPercent 20, kModeratelyInfeedBoundThresholdInPercent
    5, kModeratelyAllOtherBoundThresholdInPercent 3).
    """
    first, last = run.skip_steps + 1, run.skip_steps + len(run.steps)
    inner = f"{first + 1}-{last - 1}" if last - first >= 2 else "none"
    return (
        f"The Profile tab reads the same trace: every step is marked there as `train <step>`, "
        f"fetching its batch included. This report covers all profiled steps ({first}-{last}); "
        f"the Profile tab leaves out the first and the last of them (steps {inner}), and on "
        "the steps both show, their step times agree to about 0.01 ms. What counts as input "
        "differs: here the whole `next(iterator)` call is waiting for input; the Profile tab's "
        '"Input" is only the wait for tf.data, and the distributed iterator\'s Python '
        'overhead (about 0.5 ms per step) goes to its "All others", so its input share is '
        'a little lower. Both call a run input-bound from 20 % of step time (its "HIGHLY") '
        'and partly from 5 % (its "MODERATELY"; here also at least 1 ms per step); it '
        'also says "POTENTIALLY input-bound" when "All others" reaches 3 % of step time, '
        "which with short steps is mostly that Python overhead, where this report says "
        '"Not input-bound".'
    )


def _short(name: str, limit: int = 70) -> str:
    return name if len(name) <= limit else "…" + name[-(limit - 1) :]


def steps_svg(steps: Sequence[tuple[float, float]], width: int = 900, height: int = 220) -> str:
    """The profiled steps as bars: each step's time, its input wait in orange below.

    Inline SVG (no plotting library in the image); the numbers drawn are also the
    element's ``data-*`` attributes.
    """
    if not steps:
        return ""
    top = max(s for _, s in steps) or 1e-9
    bar = (width - 70) / len(steps)
    scale = (height - 40) / top
    parts = []
    for i, (wait, step) in enumerate(steps):
        x = 60 + i * bar
        h, w = step * scale, min(wait, step) * scale
        parts.append(
            f'<rect class="step" data-step-ms="{1000 * step:.2f}" '
            f'data-input-ms="{1000 * wait:.2f}" '
            f'x="{x:.1f}" y="{height - 20 - h:.1f}" width="{max(bar - 1, 1):.1f}" height="{h:.1f}" '
            f'fill="#1565c0"/><rect x="{x:.1f}" y="{height - 20 - w:.1f}" '
            f'width="{max(bar - 1, 1):.1f}" height="{w:.1f}" fill="#ef6c00"/>'
        )
    median = percentile([1000 * s for _, s in steps], 50)  # the report's own median
    wait_median = percentile([1000 * w for w, _ in steps], 50)
    return (
        f'<svg class="steps" data-steps="{len(steps)}" data-median-step-ms="{median:.2f}" '
        f'data-median-input-ms="{wait_median:.2f}" width="{width}" height="{height}" '
        'role="img" aria-label="step time and input wait">'
        f'<text x="4" y="14" font-size="11" fill="#555">{1000 * top:.1f} ms</text>'
        f'<text x="4" y="{height - 20}" font-size="11" fill="#555">0 ms</text>'
        + "".join(parts)
        + f'<text x="60" y="{height - 4}" font-size="11" fill="#555">{len(steps)} profiled '
        f"steps: median {median:.1f} ms, of which input {wait_median:.1f} ms "
        '(<tspan fill="#1565c0">■</tspan> step, <tspan fill="#ef6c00">■</tspan> input '
        "wait)</text></svg>"
    )


def render_html(markdown_text: str, steps: Sequence[tuple[float, float]] = ()) -> str:
    """The Markdown report as a standalone HTML page (KFP ``HTML`` artifact).

    With the profiled ``steps`` ((input seconds, step seconds) each), their chart
    comes under the title.
    """
    import markdown  # a TensorBoard dependency

    body = markdown.markdown(markdown_text, extensions=["tables"])
    if steps:
        chart = f"<h2>Step time and input wait</h2>{steps_svg(steps)}"
        body = body.replace("</h1>", "</h1>" + chart, 1) if "</h1>" in body else chart + body
    style = (
        "body{font-family:sans-serif;max-width:70em;margin:1em auto;padding:0 1em}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"
        "code{font-size:90%}"
    )
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>Training profile</title>'
        f"<style>{style}</style></head><body>{body}</body></html>\n"
    )


def append_markdown(page: str, markdown_text: str) -> str:
    """``page`` (from :func:`render_html`) with more Markdown rendered at its end."""
    import markdown

    return page.replace(
        "</body>", markdown.markdown(markdown_text, extensions=["tables"]) + "</body>", 1
    )
