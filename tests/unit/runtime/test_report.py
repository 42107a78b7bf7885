"""The attempts page (spottrain.runtime.report): drawn from a real preempted and resumed
run, every number on it compared with the ledger and the event files.

The in-process tests; those that start processes are in
tests/integration/runtime/test_report.py.
"""

from __future__ import annotations

from pathlib import Path

from html_elements import _parse

from spottrain import ledger
from spottrain.runtime import report


def test_a_task_without_a_confusion_matrix_logs_none_and_a_wrong_shape_is_refused():
    from kfp.dsl import ClassificationMetrics

    from spottrain.runtime.train import write_classification

    artifact = ClassificationMetrics(name="c", uri="/tmp/c")
    write_classification({"val_loss": 0.1}, artifact)
    write_classification({"class_names": ["a", "b"], "confusion_matrix": [[1, 2]]}, artifact)
    assert "confusionMatrix" not in artifact.metadata


def test_a_run_without_attempts_says_so_rather_than_drawing_nothing(tmp_path):
    out = tmp_path / "a.html"
    report.write_report(str(tmp_path / "no-checkpoints"), "", str(out))
    text = out.read_text()
    assert "No attempt has been recorded yet." in text and "No scalars were written." in text
    assert _parse(text).of("totals")[0]["data-attempts"] == "0"


def test_each_capacity_kind_has_its_colour_and_the_legend_names_only_those_drawn():
    records = [
        {"attempt": i + 1, "started": 100.0 * i, "ended": 100.0 * i + 90, "capacity": kind,
         "outcome": "preempted" if i < 2 else "success", "start_step": 10 * i,
         "saved_step": 10 * i + 10, "steps_lost": 0}
        for i, kind in enumerate(["spot", "flex-start", "standard"])
    ]  # fmt: skip
    page = report.page(records, ledger.totals(records), {})
    for kind in ("spot", "flex-start", "standard"):
        assert f'fill="{report.COLORS[kind]}"' in page and f"■</span> {kind}" in page
    assert "preemptible" not in page
    assert len(_parse(page).of("notice")) == 2


def test_a_report_that_cannot_be_drawn_never_fails_the_training(tmp_path, monkeypatch):
    from spottrain.runtime import train

    def broken(*a, **k):
        raise ValueError("bad <event> file")

    monkeypatch.setattr(report, "write_report", broken)
    out = type("Artifact", (), {"path": str(tmp_path / "r.html")})()
    train.write_report_safely(str(tmp_path), "", out)
    assert "bad &lt;event&gt; file" in Path(out.path).read_text()


def test_a_restart_runs_from_the_previous_end_until_training_resumed_and_says_its_parts():
    """The wait between attempts (nobody's machine), the start-up until the restored
    checkpoint (``resumed_at``) and from there to the first step (``first_step_at``: the
    input's fast-forward, issue 55), both paid, what ``lost`` prices; a refused run
    beside the holder has none; an attempt that ended before it trained was all
    start-up; a record from before ``first_step_at`` ends its restart at the restore."""
    recs = [
        {"attempt": 1, "started": 100.0, "resumed_at": 105.0, "ended": 160.0,
         "outcome": "preempted"},
        {"attempt": 2, "started": 130.0, "ended": 131.0, "outcome": "refused"},  # beside #1
        {"attempt": 3, "started": 178.5, "resumed_at": 190.0, "first_step_at": 194.0,
         "ended": 300.0, "outcome": "preempted", "start_step": 100_000},
        {"attempt": 4, "started": 300.0, "ended": 301.0, "outcome": "preempted"},
        {"attempt": 5, "started": 310.0, "resumed_at": 312.0, "ended": 330.0,
         "outcome": "success"},
    ]  # fmt: skip
    assert report.restarts(recs) == [
        None, None, (18.5, 11.5, 4.0), (0.0, 1.0, 0.0), (9.0, 2.0, 0.0),
    ]  # fmt: skip
    page = _parse(report.page(recs, ledger.totals(recs), {}))
    drawn = page.of("restart")
    assert [
        (r["data-seconds"], r["data-between"], r["data-start-up"], r["data-first-step"])
        for r in drawn
    ] == [
        ("34.0", "18.5", "11.5", "4.0"), ("1.0", "0.0", "1.0", "0.0"),
        ("11.0", "9.0", "2.0", "0.0"),
    ]  # fmt: skip
    text = "".join(page.text)
    assert "restart 34 s (16 s paid)" in text and "46 s in 3 restart(s)" in text
    assert "4 s from the restore to the first step (the input's fast-forward to step 100000" in (
        text
    )


def test_the_curves_mark_the_steps_attempts_were_preempted_at():
    recs = [
        {"attempt": 1, "started": 0.0, "ended": 50.0, "outcome": "preempted", "last_step": 30},
        {"attempt": 2, "started": 60.0, "ended": 90.0, "outcome": "success", "last_step": 100},
    ]  # fmt: skip
    loss = [(s, 1.0 / s) for s in range(5, 105, 5)]
    page = _parse(report.page(recs, ledger.totals(recs), {"loss": loss}))
    assert [m["data-step"] for m in page.of("preempted")] == ["30"]


def _priced_run(quote):
    """A preempted attempt (20 steps redone, the next one's 15 s restart) and its resume."""
    from spottrain.ledger import attempt_cost

    recs = [
        {"attempt": 1, "started": 0.0, "resumed_at": 10.0, "ended": 110.0, "seconds": 110.0,
         "workers": 2, "start_step": 0, "last_step": 100, "saved_step": 80, "steps_lost": 20,
         "outcome": "preempted_unsaved", "capacity": "spot", "machine_type": "n1-standard-8",
         "gpu_type": "nvidia-tesla-t4", "gpu_count": 1, "location": "us-central1",
         "platform": "gce", "usage_from": "node"},
        {"attempt": 2, "started": 130.0, "resumed_at": 145.0, "ended": 245.0, "seconds": 115.0,
         "workers": 2, "start_step": 80, "last_step": 200, "saved_step": 200, "steps_lost": 0,
         "outcome": "success", "capacity": "spot"},
    ]  # fmt: skip
    priced = attempt_cost.price_records(recs, lambda usage: quote)
    return priced, ledger.totals(priced)


def test_each_bar_carries_its_figures_and_the_page_the_runs():
    from spottrain.pricing import Quote

    recs, totals = _priced_run(Quote(0.36, 1.2, "USD", "stand-in"))
    page = _parse(report.page(recs, totals, {}))
    bars = page.of("attempt")
    for bar, rec in zip(bars, recs, strict=True):
        assert float(bar["data-spent"]) == rec["spent"] and bar["data-currency"] == "USD"
        assert float(bar["data-saved"]) == rec["saved"]
    assert float(bars[0]["data-lost"]) == recs[0]["lost"] and "data-lost" not in bars[1]
    (line,) = page.of("figures")
    assert (float(line["data-spent"]), float(line["data-saved"]), float(line["data-lost"])) == (
        totals["spent"], totals["saved"], totals["lost"],
    )  # fmt: skip
    text = "".join(page.text)
    assert f"spent {recs[0]['spent']:.4f}, lost {recs[0]['lost']:.4f}" in text
    assert f"Spent {totals['spent']:.4f} USD, lost to preemptions {totals['lost']:.4f}" in text


def test_the_page_says_what_its_money_is_priced_on():
    """Issue 57: the machine, its capacity and rate per hour, and where the prices came from."""
    from spottrain.pricing import Quote

    recs, totals = _priced_run(Quote(0.36, 1.2, "USD", "stand-in prices (SPOTTRAIN_PRICES)"))
    recs[1].update(machine_type="n1-standard-8", gpu_type="nvidia-tesla-t4", gpu_count=1,
                   location="us-central1")  # fmt: skip
    page = _parse(report.page(recs, totals, {}))
    (line,) = page.of("pricing")
    text = "".join(page.text)
    assert (
        "Priced per machine-hour: spot n1-standard-8 + 1 nvidia-tesla-t4 in us-central1 at "
        "0.3600 USD/h (on-demand 1.2000/h). Prices: stand-in prices (SPOTTRAIN_PRICES)."
    ) in text, text
    unknown, _ = _priced_run(Quote(None, None, reason="catalog unreachable"))
    assert not _parse(report.page(unknown, ledger.totals(unknown), {})).of("pricing")


def test_an_unknown_price_is_said_on_the_page_and_no_figure_is_drawn():
    from spottrain.pricing import Quote

    recs, totals = _priced_run(Quote(None, None, reason="catalog unreachable: 127.0.0.1:9"))
    page = _parse(report.page(recs, totals, {}))
    assert all("data-spent" not in bar for bar in page.of("attempt"))
    (line,) = page.of("figures")
    assert line["data-price-unknown"] == "attempt 1: catalog unreachable: 127.0.0.1:9"
    assert "price unknown (attempt 1: catalog unreachable" in "".join(page.text)


def test_the_figures_become_metrics_and_markdown_columns_or_price_unknown(tmp_path):
    """write_ledger prices attempts.json (a price function in, never the catalog here)."""
    import json

    from spottrain.pricing import Quote
    from spottrain.runtime.train import write_ledger

    recs, _ = _priced_run(Quote(None, None))
    (tmp_path / ledger.LEDGER).write_text(json.dumps({"attempts": recs}))

    class Out:
        def __init__(self, path):
            self.path, self.logged = str(path), {}

        def log_metric(self, name, value):
            self.logged[name] = value

    metrics, md = Out(tmp_path / "m"), Out(tmp_path / "a.md")
    totals = write_ledger(str(tmp_path), metrics, md, lambda u: Quote(0.36, 1.2, "USD", "s"))
    assert metrics.logged["ledger_spent"] == totals["spent"] > 0
    assert metrics.logged["ledger_lost"] == totals["lost"] > 0
    assert metrics.logged["ledger_saved"] == totals["saved"] > 0
    assert "ledger_currency" not in metrics.logged  # text is not a metric
    table = (tmp_path / "a.md").read_text()
    assert "| ran on | spent USD | saved USD | lost USD |" in table
    assert "n1-standard-8 + 1 nvidia-tesla-t4 in us-central1" in table
    assert (
        "Priced per machine-hour: spot n1-standard-8 + 1 nvidia-tesla-t4 in us-central1 at "
        in table
    )
    stored = ledger.read(str(tmp_path))
    assert (
        f"| {stored[0]['spent']:.4f} | {stored[0]['saved']:.4f} | {stored[0]['lost']:.4f} |"
        in table
    )

    metrics = Out(tmp_path / "m2")
    totals = write_ledger(str(tmp_path), metrics, md, lambda u: Quote(None, None, reason="down"))
    assert not any(k in metrics.logged for k in ("ledger_spent", "ledger_saved", "ledger_lost"))
    table = (tmp_path / "a.md").read_text()
    assert "price unknown: down" in table and "price unknown (attempt 1: down)" in table


def test_a_label_goes_beside_its_bar_in_one_line_else_two_never_on_it():
    did, cost = "#2 preemptible: steps 54→120 saved, success, 0 steps lost", "; spent 0.0013 USD"
    one, two = len(did + cost) * report.CHAR_PX, len(did) * report.CHAR_PX
    width, right_of = report.WIDTH, lambda x, w: x + w + 12
    cases = [  # (bar x, bar width) -> (anchor, lines)
        ((10, 50), ("start", [did + cost])),  # room on the right
        ((width - 60, 50), ("end", [did + cost])),  # room on the left only
        # Neither side holds one line (make run's second attempt): two, on the left.
        ((two + 10, width - two - 20), ("end", [did, "spent 0.0013 USD"])),
        ((10, width - 20), ("start", [did + cost])),  # no room anywhere: from the edge
    ]
    for (x, w), (anchor, lines) in cases:
        tx, got_anchor, got = report._place((did, cost), x, w)
        assert (got_anchor, got) == (anchor, lines), (x, w)
        if anchor == "start" and tx != report.LEFT:
            assert tx >= right_of(x, w)
        if anchor == "end":
            assert tx <= x and tx - max(map(len, lines)) * report.CHAR_PX >= 0
    assert one > two  # the case above tests what it says


def test_the_deadline_and_each_move_are_on_the_time_axis_and_in_one_line():
    # Two spot attempts, a move at 150 s, one on-demand attempt ending at 300 s; the
    # deadline at 400 s (within 3x the span: the axis reaches it).
    t = 1_800_000_000.0  # 08:00 UTC
    records = [
        {"attempt": 1, "started": t, "ended": t + 90, "capacity": "spot", "outcome": "preempted",
         "start_step": 0, "saved_step": 10, "steps_lost": 0, "spent": 0.01, "saved": 0.02,
         "currency": "USD"},
        {"attempt": 2, "started": t + 100, "ended": t + 150, "capacity": "spot",
         "outcome": "preempted", "start_step": 10, "saved_step": 20, "steps_lost": 0,
         "spent": 0.01, "saved": 0.02, "currency": "USD"},
        {"attempt": 3, "started": t + 160, "ended": t + 300, "capacity": "standard",
         "outcome": "success", "start_step": 20, "saved_step": 50, "steps_lost": 0,
         "spent": 0.25, "saved": 0.0, "currency": "USD"},
    ]  # fmt: skip
    move = {"at": t + 150, "to_capacity": "on-demand", "to_rung": "on-demand 1 x n1",
            "reason": "to finish by 08:06 UTC: ...", "finish_by": t + 400}  # fmt: skip
    ladder = {"rungs": ["spot 1 x n1", "on-demand 1 x n1"], "finish_by": t + 400}
    totals = ledger.totals(records)
    page = report.page(records, totals, {}, ladder, [move])
    elements = _parse(page)
    (deadline,) = elements.of("deadline")
    (moved,) = elements.of("move")
    assert deadline["data-beyond"] == "False" and float(deadline["data-finish-by"]) == t + 400
    assert float(moved["data-at"]) == t + 150 and moved["data-to-capacity"] == "on-demand"
    # x = LEFT + seconds x (WIDTH - 2 LEFT) / 400: the move at 150 s, the deadline at 400 s.
    scale = (report.WIDTH - 2 * report.LEFT) / 400
    assert f'x1="{report.LEFT + 150 * scale:.1f}"' in page
    assert f'x1="{report.LEFT + 400 * scale:.1f}"' in page
    line = report.deadline_line(records, totals, ladder, [move])
    assert line == (
        "finished 2 min before the deadline 08:06 UTC; spot saved 0.0400 USD; the move to "
        "on-demand at 08:02 UTC: 0.2500 USD spent after it"
    ), line
    assert f'class="deadline-line">{line}<' in page
    # A deadline far beyond the run stays at the right edge with an arrow.
    far = report.page(records, totals, {}, {**ladder, "finish_by": t + 7200}, [move])
    assert _parse(far).of("deadline")[0]["data-beyond"] == "True"
    assert "deadline 10:00 UTC →" in far
    # Without a ladder: no line, no marks (the page as before).
    plain = report.page(records, totals, {})
    assert "deadline" not in plain and not _parse(plain).of("move")


def test_an_attempt_a_move_ended_has_no_notice_marker_and_is_no_preemption():
    """Issue 56: the launcher's cancel for a move was booked as a preemption."""
    t = 1_800_000_000.0
    recs = [
        {"attempt": 1, "started": t, "ended": t + 50, "notice_at": t + 45, "capacity": "spot",
         "outcome": "preempted", "last_step": 30},
        {"attempt": 2, "started": t + 60, "ended": t + 90, "notice_at": t + 85,
         "capacity": "spot", "outcome": "preempted", "last_step": 60},
        {"attempt": 3, "started": t + 100, "ended": t + 150, "capacity": "standard",
         "outcome": "success", "last_step": 100},
    ]  # fmt: skip
    move = {"at": t + 84, "platform": "vertex", "to_capacity": "standard", "reason": "late"}
    stored = ledger.merge({"attempts": [], "moves": [move]}, recs)
    loss = [(s, 1.0 / s) for s in range(5, 105, 5)]
    html_page = report.page(stored["attempts"], stored["totals"], {"loss": loss}, None, [move])
    page = _parse(html_page)
    assert len(page.of("notice")) == 1
    assert [m["data-step"] for m in page.of("preempted")] == ["30"]
    assert "1 preemption(s)" in html_page and "1 attempt(s) left by a ladder move" in html_page
    assert page.of("attempt")[1]["data-moved-at"] == str(t + 84)
    # Its label says how it ended: by the move, not "preempted" (the first one was).
    # These never restored (no resumed_at): no "steps 0→0" (issue 57), an end in start-up.
    assert "#2 spot: ended in its start-up, left by a ladder move" in html_page
    assert "#1 spot: ended in its start-up, preempted" in html_page
    assert "→None" not in html_page
    # The standard job's start-up is the move's restart: in its cost, not lost.
    assert html_page.count("s paid, in the move cost") == 1
    assert html_page.count("s paid, in lost") == 1


def test_the_deadline_line_says_when_spot_cost_more_than_on_demand_alone():
    """Issue 56: saved below 0 is not "spot saved -0.0067"."""
    t = 1_800_000_000.0
    recs = [{"attempt": 1, "started": t, "ended": t + 90, "outcome": "success"}]
    ladder = {"rungs": ["spot 1 x n1"], "finish_by": t + 400}
    line = report.deadline_line(recs, {"saved": -0.0067, "currency": "USD"}, ladder, [])
    assert line.endswith("spot cost 0.0067 USD more than on-demand alone"), line
