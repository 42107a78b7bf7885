"""The attempts page the KFP UI draws: an HTML artifact with inline SVG.

The ledger's attempts on a time axis (capacity kind, notice, saved step, steps lost,
spent, saved and lost) and the loss curve from the run's own TensorBoard scalars.
Inline SVG and no plotting library: the image stays as it is, and the KFP UI shows an
``HTML`` artifact as is. Every number drawn is also an attribute of its element
(``data-*``), which the tests compare with the ledger.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from spottrain.ladder.decide import utc_clock
from spottrain.ledger.attempt_cost import TOTAL_FIELDS, basis_line, totals_line
from spottrain.ledger.schema import capacity, moved, preempted, trained_again

# One colour per capacity kind (the ledger's ``capacity`` or a Job pod's ``node_kind``).
COLORS = {
    "spot": "#2e7d32",
    "preemptible": "#00897b",
    "flex-start": "#6a1b9a",
    "reservation": "#1565c0",
    "on-demand": "#ef6c00",
    "standard": "#ef6c00",
    "compute-class": "#546e7a",
    "queued": "#546e7a",
}
UNKNOWN = "#9e9e9e"
# The restart before an attempt: from the previous one's end until this one trained
# again (the wait between them, then its start-up, gang and restore, then its input's
# fast-forward and first step, drawn darker).
RESTART = "#90a4ae"
FIRST_STEP = "#607d8b"
RESTART_DY = 20  # its line's top below its row's top (one-line labels): under their text
WIDTH = 900
ROW = 34
LEFT = 10
CHAR_PX = 6.6  # a generous width of one 12 px sans-serif character
WRAP_DY = 14  # a label's second line below its first


def _attrs(**values: Any) -> str:
    return " ".join(
        f'data-{k.replace("_", "-")}="{html.escape(str(v))}"' for k, v in values.items()
    )


def restarts(records: Sequence[Mapping[str, Any]]) -> list[tuple[float, float, float] | None]:
    """Per record, the restart before it: (between, start-up, first step) seconds.

    ``between``: since every attempt started before it had ended (no attempt running:
    the retry's scheduling, nobody's machine). ``start-up``: from its start to its
    restored checkpoint (``resumed_at``: TensorFlow's start, the gang, the restore; all
    of it when it ended before). ``first step``: from there to its first step done
    (``first_step_at``: the input's fast-forward to its start step, the step's first
    trace). The last two are paid, what ``lost`` prices (``attempt_cost``). None for
    the first record and for one that started while another was still running (a
    refused run beside the holder).
    """
    out: list[tuple[float, float, float] | None] = [None] * len(records)
    order = sorted(
        (i for i, r in enumerate(records) if r.get("started") is not None),
        key=lambda i: float(records[i]["started"]),
    )
    last_end: float | None = None
    for i in order:
        r = records[i]
        start = float(r["started"])
        if last_end is not None and start >= last_end:
            until = float(r.get("resumed_at") or trained_again(r) or r.get("ended") or start)
            first = float(trained_again(r) or until)
            out[i] = (start - last_end, max(0.0, until - start), max(0.0, first - until))
        end = float(r.get("ended") or start)
        last_end = end if last_end is None else max(last_end, end)
    return out


def figures(rec: Mapping[str, Any]) -> str:
    """An attempt's spent, lost and saved for its label (or why they are unknown)."""
    if "spent" in rec:
        lost = f", lost {rec['lost']:.4f}" if "lost" in rec else ""
        if "move_cost" in rec:
            lost = f", move cost {rec['move_cost']:.4f}"
        saved = f", saved {rec['saved']:.4f}" if "saved" in rec else ""
        return f"; spent {rec['spent']:.4f}{lost}{saved} {rec.get('currency', '')}".rstrip()
    if "price_unknown" in rec:
        return "; price unknown"
    return ""


def _labels(r: Mapping[str, Any]) -> tuple[str, str]:
    """An attempt's label: what it did, and what it cost (``""`` when nothing is known)."""
    # The launcher's own cancel for a move ends an attempt as a notice does: said as such.
    outcome = "left by a ladder move" if moved(r) else r.get("outcome")
    if r.get("resumed_at") is None and r.get("first_step_at") is None:
        # Ended before its restore: its steps are unknown, not 0→0 (it would have resumed
        # from the last save).
        return f"#{r.get('attempt')} {capacity(r)}: ended in its start-up, {outcome}", figures(r)
    did = (
        f"#{r.get('attempt')} {capacity(r)}: steps {r.get('start_step')}→"
        f"{r.get('saved_step')} saved, {outcome}, {r.get('steps_lost', 0)} steps lost"
    )
    return did, figures(r)


def _bar(r: Mapping[str, Any], t0: float, scale: float) -> tuple[float, float]:
    """An attempt's bar: its left edge and width in px."""
    start = float(r["started"])
    end = float(r.get("ended") or start)
    return LEFT + (start - t0) * scale, max((end - start) * scale, 2)


def _place(label: tuple[str, str], x: float, w: float) -> tuple[float, str, list[str]]:
    """Where a bar's label goes: (x, anchor, its lines).

    Beside the bar, never on it (dark on colour does not read): in one line right of
    it, else left of it; else in two lines (what it did, what it cost) on the wider
    side; else from the left edge.
    """
    one = "".join(label)
    lines = [label[0], label[1].lstrip(",; ")] if label[1] else [label[0]]
    right, left = WIDTH - (x + w + 12), x - 6
    for text in ([one], lines):
        room = max(len(t) for t in text) * CHAR_PX
        if room <= right:
            return x + w + 12, "start", text
        if room <= left:
            return x - 6, "end", text
    return LEFT, "start", [one]


def _restart(
    gap: tuple[float, float, float], r, x: float, y: float, ty: float, scale, after_move=False
) -> str:
    """The restart before the bar at ``x``, its length under it.

    Its parts on one line from the previous end, the first step's part darker.
    ``after_move``: a ladder move ended the attempt before it (the restart is the move's
    cost).
    """
    between, start_up, first = gap
    total, paid = between + start_up + first, start_up + first
    gx, gw = x - between * scale, (between + start_up) * scale
    title = (
        f"{total:.0f} s until training resumed: {between:.0f} s between attempts, "
        f"{start_up:.0f} s start-up and restore, {first:.0f} s from the restore to the first "
        f"step (the input's fast-forward to step {r.get('start_step')} and the step's first "
        f"trace); {paid:.0f} s paid, in {'the move cost' if after_move else 'lost'}"
    )
    seconds = _attrs(
        seconds=f"{total:.1f}", between=f"{between:.1f}", start_up=f"{start_up:.1f}",
        first_step=f"{first:.1f}",
    )  # fmt: skip
    first_rect = (
        f'<rect class="first-step" x="{gx + gw:.1f}" y="{y}" width="{first * scale:.1f}" '
        f'height="4" fill="{FIRST_STEP}"/>'
        if first
        else ""
    )
    mid = gx + (gw + first * scale) / 2
    return (
        f'<g class="restart" {seconds}><title>{title}</title><rect x="{gx:.1f}" y="{y}" '
        f'width="{gw:.1f}" height="4" fill="{RESTART}"/>{first_rect}<text x="{mid:.1f}" '
        f'y="{ty}" font-size="10" fill="#455a64" text-anchor="middle">'
        f"restart {total:.0f} s ({paid:.0f} s paid)</text></g>"
    )


def timeline_svg(
    records: Sequence[Mapping[str, Any]],
    finish_by: float | None = None,
    moves: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The attempts as bars on one time axis, one row each, with the moves and deadline."""
    timed = [r for r in records if r.get("started") is not None]
    gaps = restarts(timed)
    if not timed:
        return '<p class="empty">No attempt has been recorded yet.</p>'
    t0 = min(float(r["started"]) for r in timed)
    t1 = max(float(r.get("ended") or r["started"]) for r in timed)
    # The axis reaches the deadline when that does not squeeze the bars below a third.
    if finish_by and t1 < finish_by <= t0 + 3 * max(t1 - t0, 1e-9):
        t1 = finish_by
    span = max(t1 - t0, 1e-9)
    scale = (WIDTH - 2 * LEFT) / span
    bars = [_bar(r, t0, scale) for r in timed]
    labels = [_labels(r) for r in timed]
    places = [_place(label, x, w) for label, (x, w) in zip(labels, bars, strict=True)]
    # A label in two lines needs a taller row (every row, so the axis stays even).
    row = ROW + (WRAP_DY if any(len(lines) > 1 for _, _, lines in places) else 0)
    height = row * len(timed) + 30
    parts = [
        f'<svg class="timeline" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="attempts over time">'
    ]
    for i, r in enumerate(timed):
        (x, w), (tx, anchor, lines) = bars[i], places[i]
        y = 5 + i * row
        kind = capacity(r)
        lost = r.get("steps_lost", 0)
        gap = gaps[i]
        label = "".join(labels[i])
        money = {k: r[k] for k in ("spent", "saved", "lost", "move_cost", "currency", "moved_at")
                 if k in r}  # fmt: skip
        data = _attrs(
            attempt=r.get("attempt"), capacity=kind, outcome=r.get("outcome"),
            start_step=r.get("start_step"), saved_step=r.get("saved_step"), steps_lost=lost,
            seconds=r.get("seconds", ""), **money,
        )  # fmt: skip
        if gap is not None:
            # The restart before it, on its row from the previous end into its bar until
            # it trained: a line below the labels' text (which may stand left of the
            # bar) and its length under the line.
            after_move = i > 0 and moved(timed[i - 1])
            parts.append(
                _restart(gap, r, x, y + row - ROW + RESTART_DY, y + row - 2, scale, after_move)
            )
        parts.append(
            f'<g class="attempt" {data}><title>{html.escape(label)}</title>'
            f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{ROW - 12}" '
            f'fill="{COLORS.get(kind, UNKNOWN)}"/>'
        )
        if preempted(r):  # a notice ended it (a preemption's: not its run's own move)
            parts.append(
                f'<polygon class="notice" points="{x + w:.1f},{y} {x + w + 7:.1f},{y - 4} '
                f'{x + w + 7:.1f},{y + 4}" fill="#c62828"/>'
            )
        spans = "".join(
            f'<tspan x="{tx:.1f}" dy="{0 if n == 0 else WRAP_DY}">{html.escape(line)}</tspan>'
            for n, line in enumerate(lines)
        )
        parts.append(
            f'<text x="{tx:.1f}" y="{y + ROW - 18}" font-size="12" fill="#000" '
            f'text-anchor="{anchor}">{spans}</text></g>'
        )
    parts.append(_marks(t0, scale, height, finish_by, moves))
    parts.append(
        f'<text x="{LEFT}" y="{height - 4}" font-size="11" fill="#555">0 s</text>'
        f'<text x="{WIDTH - LEFT}" y="{height - 4}" font-size="11" fill="#555" '
        f'text-anchor="end">{span:.0f} s</text></svg>'
    )
    return "".join(parts)


DEADLINE = "#c62828"
MOVE = "#6a1b9a"


def _marks(
    t0: float, scale: float, height: float, finish_by: float | None, moves: Sequence[Mapping]
) -> str:
    """The deadline (right edge with an arrow when beyond the axis) and each move."""
    out = []
    for m in moves:
        x = LEFT + (float(m["at"]) - t0) * scale
        title = f"{utc_clock(m['at'])} moved to {m.get('to_rung')}: {m.get('reason')}"
        data = _attrs(at=m["at"], to_capacity=m.get("to_capacity"), reason=m.get("reason"))
        out.append(
            f'<g class="move" {data}><title>{html.escape(title)}</title>'
            f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{height - 16}" stroke="{MOVE}" '
            f'stroke-width="2"/><text x="{x + 3:.1f}" y="{height - 18}" font-size="11" '
            f'fill="{MOVE}">→ {html.escape(str(m.get("to_capacity")))} at '
            f"{utc_clock(m['at'])}</text></g>"
        )
    if finish_by:
        x = min(LEFT + (finish_by - t0) * scale, WIDTH - LEFT)
        beyond = LEFT + (finish_by - t0) * scale > WIDTH - LEFT + 0.5
        label = f"deadline {utc_clock(finish_by)}{' →' if beyond else ''}"
        out.append(
            f'<g class="deadline" {_attrs(finish_by=finish_by, beyond=beyond)}>'
            f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{height - 16}" stroke="{DEADLINE}" '
            f'stroke-dasharray="5,3" stroke-width="2"/><text x="{x - 3:.1f}" y="{height - 18}" '
            f'font-size="11" fill="{DEADLINE}" text-anchor="end">{label}</text></g>'
        )
    return "".join(out)


def deadline_line(
    records: Sequence[Mapping[str, Any]],
    totals: Mapping[str, Any],
    ladder: Mapping[str, Any] | None,
    moves: Sequence[Mapping[str, Any]],
) -> str:
    """How the run stood against its deadline and what its moves cost, in one line.

    ``finished 41 min before the deadline 06:00 UTC; spot saved 1.20 USD; the move to
    on-demand at 02:10 UTC: 3.40 USD spent after it``; ``""`` without a ladder.
    """
    if not ladder:
        return ""
    finish_by = ladder.get("finish_by")
    done = [r for r in records if r.get("outcome") == "success" and r.get("ended")]
    parts = []
    if finish_by and done:
        early = (finish_by - float(done[-1]["ended"])) / 60
        when = f"{abs(early):.0f} min {'before' if early >= 0 else 'after'}"
        parts.append(f"finished {when} the deadline {utc_clock(finish_by)}")
    elif finish_by:
        parts.append(f"deadline {utc_clock(finish_by)}")
    currency = totals.get("currency", "")
    if (saved := totals.get("saved")) is not None and saved < 0:
        parts.append(f"spot cost {-saved:.4f} {currency} more than on-demand alone".rstrip())
    elif saved is not None:
        parts.append(f"spot saved {saved:.4f} {currency}".rstrip())
    for m in moves:
        after = [r for r in records if float(r.get("started") or 0) >= float(m["at"])]
        spent = [float(r["spent"]) for r in after if r.get("spent") is not None]
        cost = f": {sum(spent):.4f} {currency} spent after it".rstrip() if spent else ""
        parts.append(f"the move to {m.get('to_capacity')} at {utc_clock(m['at'])}{cost}")
    return "; ".join(parts)


def curve_svg(
    name: str,
    points: Sequence[tuple[int, float]],
    height: int = 200,
    preempted_at: Sequence[int] = (),
) -> str:
    """One scalar over the steps as a polyline with its range labelled.

    A red dashed line marks each step an attempt was preempted at.
    """
    if not points:
        return ""
    steps = [s for s, _ in points]
    values = [v for _, v in points]
    s0, s1 = min(steps), max(steps)
    v0, v1 = min(values), max(values)
    sx = (WIDTH - 2 * LEFT - 60) / max(s1 - s0, 1)
    sy = (height - 40) / (v1 - v0 if v1 > v0 else 1.0)
    coords = " ".join(
        f"{LEFT + 60 + (s - s0) * sx:.1f},{height - 20 - (v - v0) * sy:.1f}" for s, v in points
    )
    data = _attrs(scalar=name, points=len(points), first_step=s0, last_step=s1,
                  min=f"{v0:.4g}", max=f"{v1:.4g}", last=f"{values[-1]:.4g}")  # fmt: skip
    marks = "".join(
        f'<line class="preempted" data-step="{step}" x1="{LEFT + 60 + (step - s0) * sx:.1f}" '
        f'y1="20" x2="{LEFT + 60 + (step - s0) * sx:.1f}" y2="{height - 20}" stroke="#c62828" '
        f'stroke-dasharray="4 3"><title>preempted at step {step}</title></line>'
        for step in preempted_at
        if s0 <= step <= s1
    )
    return (
        f'<svg class="curve" {data} width="{WIDTH}" height="{height}" role="img" '
        f'aria-label="{html.escape(name)}"><text x="{LEFT}" y="14" font-size="13">'
        f"{html.escape(name)} (last {values[-1]:.4g})</text>"
        f'<text x="{LEFT}" y="34" font-size="11" fill="#555">{v1:.4g}</text>'
        f'<text x="{LEFT}" y="{height - 20}" font-size="11" fill="#555">{v0:.4g}</text>'
        f'<polyline fill="none" stroke="#1565c0" stroke-width="1.5" points="{coords}"/>'
        f"{marks}"
        f'<text x="{LEFT + 60}" y="{height - 4}" font-size="11" fill="#555">step {s0}</text>'
        f'<text x="{WIDTH - LEFT}" y="{height - 4}" font-size="11" fill="#555" '
        f'text-anchor="end">step {s1}</text></svg>'
    )


def read_scalars(logdir: str) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the run's TensorBoard event files, by tag, in step order.

    A resumed run writes the steps it repeats again: the last value of a step wins. A
    sub-folder's tags are named after it (a Keras TensorBoard callback's ``train/`` and
    ``validation/`` both write ``epoch_loss``); a summary that is not one number (the
    model's config the callback writes as text) is not a scalar.
    """
    import tensorflow as tf

    found: dict[str, dict[int, float]] = {}
    if not logdir or not tf.io.gfile.exists(logdir):
        return {}
    for path in sorted(tf.io.gfile.glob(f"{logdir.rstrip('/')}/**/events.out.tfevents.*")) + sorted(
        tf.io.gfile.glob(f"{logdir.rstrip('/')}/events.out.tfevents.*")
    ):
        folder = path[len(logdir.rstrip("/")) + 1 :].rpartition("/")[0]
        try:
            for event in tf.compat.v1.train.summary_iterator(path):
                for value in event.summary.value:
                    if value.HasField("tensor"):
                        array = tf.make_ndarray(value.tensor)
                        if array.size != 1 or array.dtype.kind not in "fiub":
                            continue
                        number = float(array.reshape(()))
                    else:
                        number = value.simple_value
                    tag = f"{folder}/{value.tag}" if folder else value.tag
                    found.setdefault(tag, {})[int(event.step)] = number
        except tf.errors.DataLossError:
            continue  # a file cut by a preemption: its complete events are read
    return {tag: sorted(steps.items()) for tag, steps in found.items()}


def page(
    records: Sequence[Mapping[str, Any]],
    totals: Mapping[str, Any],
    scalars: Mapping[str, Sequence[tuple[int, float]]],
    ladder: Mapping[str, Any] | None = None,
    moves: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The whole HTML page (``ladder``, ``moves``: the ledger's, :mod:`spottrain.ledger.moves`)."""
    summary = (
        f"{totals.get('attempts', 0)} attempt(s), {totals.get('preemptions', 0)} "
        f"preemption(s), {totals.get('steps_lost', 0)} step(s) lost"
    )
    if totals.get("moved"):
        summary += f", {totals['moved']} attempt(s) left by a ladder move"
    gaps = [sum(g) for g in restarts(records) if g is not None]
    if gaps:
        summary += f", {sum(gaps):.0f} s in {len(gaps)} restart(s)"
    money = totals_line(totals)
    money_attrs = _attrs(**{k: totals[k] for k in TOTAL_FIELDS if k in totals})
    legend = "".join(
        f'<span style="color:{color}">■</span> {kind} '
        for kind, color in COLORS.items()
        if any(capacity(r) == kind for r in records)
    ) + (f'<span style="color:{RESTART}">■</span> restart (until training resumed)' if gaps else "")
    shown = {t: p for t, p in sorted(scalars.items()) if t != "steps_per_second"}
    preempted_at = sorted(
        {int(r["last_step"]) for r in records if preempted(r) and r.get("last_step") is not None}
    )  # fmt: skip
    curves = "".join(
        curve_svg(tag, pts, preempted_at=preempted_at) for tag, pts in shown.items() if len(pts) > 1
    )
    # A scalar written once (the validation after training) is a number, not a curve.
    finals = ", ".join(
        f'<span class="final" data-scalar="{html.escape(t)}" data-value="{p[0][1]:.4g}">'
        f"{html.escape(t)} {p[0][1]:.4g} at step {p[0][0]}</span>"
        for t, p in shown.items()
        if len(p) == 1
    )
    if finals:
        curves += f"<p>{finals}</p>"
    deadline = deadline_line(records, totals, ladder, moves)
    shown_totals = ("attempts", "preemptions", "steps_lost", "moved")
    totals_attrs = _attrs(**{k: totals[k] for k in shown_totals if k in totals})
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>Training attempts</title>'
        "<style>body{font-family:sans-serif;margin:16px}svg{display:block;margin:8px 0}"
        "</style></head><body>"
        f'<h2>Training attempts</h2><p class="totals" {totals_attrs}>{html.escape(summary)}</p>'
        + (f'<p class="figures" {money_attrs}>{html.escape(money)}</p>' if money else "")
        + (f'<p class="pricing">{html.escape(basis)}</p>' if (basis := basis_line(records)) else "")
        + (f'<p class="deadline-line">{html.escape(deadline)}</p>' if deadline else "")
        + f"<p>{legend}</p>{timeline_svg(records, (ladder or {}).get('finish_by'), moves)}"
        + (f"<h3>Curves</h3>{curves}" if curves else "<p>No scalars were written.</p>")
        + "</body></html>"
    )


def write_report(checkpoint_dir: str, tensorboard_dir: str, path: str) -> None:
    """Writes the page for the ledger in ``checkpoint_dir`` to ``path``.

    ``tensorboard_dir`` is resolved as the trainer resolves it
    (:func:`spottrain.trainer.checkpointing.tensorboard_dir`).
    """
    from spottrain import ledger
    from spottrain.ledger import moves
    from spottrain.trainer import checkpointing

    tensorboard_dir = checkpointing.tensorboard_dir(tensorboard_dir, checkpoint_dir)
    records = ledger.read(checkpoint_dir)
    ladder, moved = moves.read(checkpoint_dir)
    scalars = read_scalars(tensorboard_dir)
    with open(path, "w") as f:
        f.write(page(records, ledger.totals(records), scalars, ladder, moved))
