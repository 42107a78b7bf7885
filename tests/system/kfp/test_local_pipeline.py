"""The preemptible pipeline end to end under kfp.local with fake GCS and a real preemption."""

import pytest

from spottrain.pipelines import local
from spottrain.pricing import sources

pytestmark = pytest.mark.slow


def test_preempted_train_task_is_retried_by_kfp_and_resumes_to_the_exact_step(tmp_path, capfd):
    log = tmp_path / "run.log"
    result = local.run_local(
        tmp_path, workers=2, preempt_at_step=30, train_steps=60, limit=300, retries=2, log=log
    )
    console = capfd.readouterr().out
    assert result.ok, result.report() + console
    # The console: one line per event (make run printed ~950 lines before). Everything
    # else is in the log, TensorFlow's start-up errors on a machine without a GPU too.
    assert len(console.splitlines()) < 60, console
    written = log.read_text()
    for noise in ("cuInit", "Got executor_input", "[worker-0] step", "FAILURE"):
        assert noise in written and noise not in console, noise
    for event in ("upload: copied 300 files", "gcs-copy: copied 300 files", "train: started",
                  "train: training from step 0 of 60", "train: step 30/60",
                  "train: notice: SIGTERM to ", " at step 30 (the injected preemption)",
                  "train: saved step 3",
                  "train: exit 143: preempted", "train: KFP retries it", "train: attempt 2 started",
                  "train: finished at step 60", "train: done", "profile: done",
                  ": SUCCESS"):  # fmt: skip
        assert event in console, (event, console)
    # Ours, at the source: the gang's closing barrier no longer runs a collective eagerly.
    assert "eagerly has significant overhead" not in written
    assert "Connection pool is full" not in console
    # One SIGTERM at step 30 failed the task once (exit 143); KFP's retry finished it.
    assert result.retries == {"train": 1}
    assert result.failed_tasks == []
    summary = result.summary
    assert summary["final_step"] == 60 and summary["train_steps"] == 60
    assert 30 <= summary["start_step"] < 60  # the retry resumed from the preemption save
    assert summary["num_workers"] == 2 and summary["global_batch_size"] == 32
    assert result.metrics["final_step"] == 60.0
    assert result.model_dir.name == "model" and (result.model_dir / "model.keras").is_file()
    assert (tmp_path / "checkpoints" / "ckpt-60.index").is_file()
    # The trainer's own ledger agrees: a preempted attempt, then a resumed success.
    outcomes = [(a["outcome"], a["exit_code"]) for a in result.attempts]
    assert outcomes == [("preempted", 143), ("success", 0)]
    assert result.attempts[1]["start_step"] == summary["start_step"]
    # The attempts page the KFP UI shows: both attempts, the preempted one's notice.
    page = result.attempts_page.read_text()
    assert page.count('<g class="attempt"') == 2 and page.count('class="notice"') == 1
    assert 'data-scalar="loss"' in page
    # The profile page: the step chart under its title, the note on the training after.
    profile = result.profile_page.read_text()
    assert '<svg class="steps"' in profile and "The training it describes" in profile
    report = result.report()
    assert "SUCCEEDED" in report and "train failed 1x and was retried by KFP" in report
    # Pages a browser renders: .html copies
    # (tests/integration/runtime/test_pages_in_chromium.py opens them).
    assert f"attempts page:  {(tmp_path / 'attempts.html').as_uri()}" in report
    assert f"profile page:   {(tmp_path / 'profile.html').as_uri()}" in report
    assert f"full log:       {log}" in report
    # What the attempts ran on (assumed, and said so) and the three figures, priced from
    # the stand-in catalog run_local starts (issue 34's acceptance).
    assert "ran on:         n1-standard-8 + 1 nvidia-tesla-t4 in us-central1, assumed" in report
    assert "cost:           Spent " in report and "price unknown" not in report, report
    assert all(a["resumed_at"] >= a["started"] for a in result.attempts)
    first, second = result.attempts
    # The first's saved carries the restart it caused (its sign is how long it trained
    # against that restart); the second, on spot and never interrupted, saved.
    assert first["spent"] > 0 and "saved" in first and first["lost"] > 0, first
    assert second["spent"] > 0 and second["saved"] > 0 and "lost" not in second, second
    assert result.cost["spent"] == pytest.approx(first["spent"] + second["spent"], abs=1e-4)
    assert result.cost["saved"] == pytest.approx(first["saved"] + second["saved"], abs=1e-4)


def test_on_demand_fallback_resumes_when_spot_retries_run_out(tmp_path, monkeypatch):
    # No catalog answers (a closed port): the figures say "price unknown", the run succeeds.
    monkeypatch.setenv(sources.ENDPOINT_ENV, "127.0.0.1:9")
    monkeypatch.setenv(sources.CACHE_ENV, str(tmp_path / "no-prices.json"))
    result = local.run_local(
        tmp_path, workers=1, preempt_at_step=10, train_steps=100, limit=300, fallback=True
    )
    assert result.ok, result.report()
    # No spot retries: the preemption failed the spot task for good; the exit
    # handler's decision saw an incomplete checkpoint and the on-demand task resumed it.
    # (Chaos fires from the step log lines: a wide margin to the end keeps the
    # SIGTERM ahead of a fast single worker.)
    assert result.failed_tasks == ["train"], result.report()
    assert result.model_dir.parent.name == "train-on-demand"
    assert result.summary["final_step"] == 100
    assert 10 <= result.summary["start_step"] < 100
    assert "cost:           Spent, lost, saved: price unknown (" in result.report()
    assert result.attempts and all(a["price_unknown"] for a in result.attempts)
    assert not any("spent" in a for a in result.attempts), result.attempts
