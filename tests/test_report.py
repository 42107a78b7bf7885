"""The attempts page (spottrain.runtime.report): drawn from a real preempted and
resumed run, every number on it compared with the ledger and the event files."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from trainer_helpers import ledger as read_ledger
from trainer_helpers import run_module, tiny_args

from spottrain.runtime import report
from spottrain.trainer import ledger


class _Elements(HTMLParser):
    """The page's elements with a class, their attributes, and its visible text."""

    def __init__(self):
        super().__init__()
        self.found: list[tuple[str, str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("class"):
            self.found.append((tag, attrs["class"], attrs))

    def handle_data(self, data):
        self.text.append(data)

    def of(self, cls: str) -> list[dict]:
        return [a for _, c, a in self.found if c == cls]


def _parse(page: str) -> _Elements:
    parsed = _Elements()
    parsed.feed(page)
    return parsed


@pytest.mark.slow
def test_the_page_of_a_preempted_and_resumed_run_shows_the_ledger_and_the_loss(
    digits_dir, tmp_path
):
    args = tiny_args(digits_dir, tmp_path, train_steps=60, price_per_hour=0.35,
                     on_demand_price_per_hour=1.2)  # fmt: skip
    first, _ = run_module(
        "spottrain.trainer.launch",
        ["--workers", "1", "--preempt-at-step", "25", "--signal", "TERM", "--", *args],
        extra_env={ledger.CAPACITY_ENV: "spot"},
    )
    assert first.returncode == 143, first.stdout + first.stderr
    second, _ = run_module(
        "spottrain.trainer.task", args, extra_env={ledger.CAPACITY_ENV: "standard"}
    )
    assert second.returncode == 0, second.stderr
    out = tmp_path / "attempts.html"
    report.write_report(str(tmp_path / "checkpoints"), "", str(out))
    page = _parse(out.read_text())

    records = read_ledger(tmp_path)
    drawn = page.of("attempt")
    assert len(drawn) == len(records) == 2
    for bar, rec in zip(drawn, records, strict=True):
        assert bar["data-attempt"] == str(rec["attempt"])
        assert bar["data-capacity"] == rec["capacity"]
        assert bar["data-outcome"] == rec["outcome"]
        assert bar["data-saved-step"] == str(rec["saved_step"])
        assert bar["data-steps-lost"] == str(rec["steps_lost"])
    assert [b["data-capacity"] for b in drawn] == ["spot", "standard"]
    assert len(page.of("notice")) == 1  # the preempted attempt ends on a notice
    # The restart between them (no attempt running) is drawn and labelled with its length.
    (restart,) = page.of("restart")
    gap = records[1]["started"] - records[0]["ended"]
    assert gap > 0 and float(restart["data-seconds"]) == pytest.approx(gap, abs=0.1)
    totals = ledger.totals(records)
    (shown,) = page.of("totals")
    assert shown["data-attempts"] == "2" and shown["data-preemptions"] == "1"
    text = "".join(page.text)
    assert f"${totals['cost']:.4f} against ${totals['on_demand_cost']:.4f}" in text

    scalars = report.read_scalars(str(tmp_path / "checkpoints" / "tensorboard"))
    (loss,) = [c for c in page.of("curve") if c["data-scalar"] == "loss"]
    assert int(loss["data-points"]) == len(scalars["loss"]) >= 10
    assert loss["data-last-step"] == "60"
    # The last loss the trainer printed is the curve's last value.
    printed = [ln for ln in second.stdout.splitlines() if ln.startswith("step 60/60")]
    assert printed and f"loss={float(loss['data-last']):.4f}" in printed[0]
    assert "steps_per_second" not in [c["data-scalar"] for c in page.of("curve")]

    # The image task's confusion matrix, logged as the ClassificationMetrics the KFP UI
    # draws: it counts every validation example, and its diagonal is the accuracy.
    from kfp.dsl import ClassificationMetrics

    from spottrain.runtime.train import write_classification

    summary = json.loads((tmp_path / "model" / "training_summary.json").read_text())
    # The validation, written once, is shown as its number, not as a one-point curve.
    finals = {f["data-scalar"]: float(f["data-value"]) for f in page.of("final")}
    assert finals["val_accuracy"] == pytest.approx(summary["val_accuracy"], rel=1e-3)
    assert "val_accuracy" not in [c["data-scalar"] for c in page.of("curve")]
    matrix = summary["confusion_matrix"]
    assert len(matrix) == len(summary["class_names"]) == 10
    assert sum(map(sum, matrix)) == summary["val_examples"]
    diagonal = sum(matrix[i][i] for i in range(10))
    assert diagonal / summary["val_examples"] == pytest.approx(summary["val_accuracy"])
    artifact = ClassificationMetrics(name="classification", uri=str(tmp_path / "c"))
    write_classification(summary, artifact)
    logged = artifact.metadata["confusionMatrix"]
    assert [c["displayName"] for c in logged["annotationSpecs"]] == summary["class_names"]
    assert [r["row"] for r in logged["rows"]] == matrix


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
