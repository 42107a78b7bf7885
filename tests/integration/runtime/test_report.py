"""The attempts page (spottrain.runtime.report): drawn from a real preempted and
resumed run, every number on it compared with the ledger and the event files."""

from __future__ import annotations

import json

import pytest
from html_elements import _parse
from trainer_helpers import ledger as read_ledger
from trainer_helpers import run_module, tiny_args

from spottrain import ledger
from spottrain.runtime import report


@pytest.mark.slow
def test_the_page_of_a_preempted_and_resumed_run_shows_the_ledger_and_the_loss(
    digits_dir, tmp_path
):
    args = tiny_args(digits_dir, tmp_path, train_steps=60, price_per_hour=0.35,
                     on_demand_price_per_hour=1.2)  # fmt: skip
    first, _ = run_module(
        "spottrain.trainer.launch",
        [
            "--workers",
            "1",
            "--preempt-at-step",
            "25",
            "--signal",
            "TERM",
            "--log-dir",
            str(tmp_path / "worker-logs"),
            "--",
            *args,
        ],
        extra_env={ledger.CAPACITY_ENV: "spot"},
    )
    assert first.returncode == 143, first.stdout + first.stderr
    second, _ = run_module(
        "spottrain.trainer.task", args, extra_env={ledger.CAPACITY_ENV: "standard"}
    )
    assert second.returncode == 0, second.stderr
    out = tmp_path / "attempts.html"
    # As the train component does (write_ledger, then the page): priced by the flags.
    ledger.price(str(tmp_path / "checkpoints"), None)
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
    # The restart: from the first attempt's end until the second trained again (the wait
    # between them, its start-up and restore, then its input's fast-forward and first
    # step: the last two are the seconds its lost prices).
    (restart,) = page.of("restart")
    gap = records[1]["started"] - records[0]["ended"]
    start_up = records[1]["resumed_at"] - records[1]["started"]
    first = records[1]["first_step_at"] - records[1]["resumed_at"]
    assert gap > 0 and float(restart["data-between"]) == pytest.approx(gap, abs=0.1)
    assert float(restart["data-start-up"]) == pytest.approx(start_up, abs=0.1)
    assert first > 0 and float(restart["data-first-step"]) == pytest.approx(first, abs=0.1)
    assert float(restart["data-seconds"]) == pytest.approx(gap + start_up + first, abs=0.1)
    assert records[0]["lost_restart_seconds"] == pytest.approx(start_up + first, abs=0.02)
    (shown,) = page.of("totals")
    assert shown["data-attempts"] == "2" and shown["data-preemptions"] == "1"
    text = "".join(page.text)
    # One set of words: the --price-per-hour flags' prices are spent, lost and saved too.
    assert "against $" not in text and "saving" not in text
    assert f"Spent {ledger.totals(records)['spent']:.4f} USD" in text

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
