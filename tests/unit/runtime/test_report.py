"""The attempts page (spottrain.runtime.report): drawn from a real preempted and resumed
run, every number on it compared with the ledger and the event files.

The in-process tests; those that start processes are in
tests/integration/runtime/test_report.py.
"""

from __future__ import annotations

from pathlib import Path

from html_elements import _parse

from spottrain.runtime import report
from spottrain.trainer import ledger


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


def test_a_restart_is_the_time_no_attempt_ran_and_a_refused_run_beside_the_holder_is_none():
    recs = [
        {"attempt": 1, "started": 100.0, "ended": 160.0, "outcome": "preempted"},
        {"attempt": 2, "started": 130.0, "ended": 131.0, "outcome": "refused"},  # beside #1
        {"attempt": 3, "started": 178.5, "ended": 300.0, "outcome": "success"},
        {"attempt": 4, "started": 300.0, "ended": 301.0, "outcome": "success"},  # no gap
    ]
    assert report.restart_gaps(recs) == [None, None, 18.5, None]
    page = _parse(report.page(recs, ledger.totals(recs), {}))
    assert [r["data-seconds"] for r in page.of("restart")] == ["18.5"]
    assert "restart 18 s" in "".join(page.text)
