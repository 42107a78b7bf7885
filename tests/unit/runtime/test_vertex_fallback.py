"""The Vertex fall-back (spottrain.runtime.vertex_job): spot jobs, then standard ones,
resuming one checkpoint dir, in one pipeline task that ends Succeeded.

The in-process tests; those that start processes are in
tests/integration/runtime/test_vertex_fallback.py.
"""

from __future__ import annotations

import time

import pytest

from spottrain import exits
from spottrain.runtime.vertex_job import Attempt, Plan, decide

PLAN = Plan(first="SPOT", fallback="STANDARD", first_attempts=3, fallback_attempts=2)


def _a(strategy, state="JOB_STATE_FAILED", before=-1, after=-1):
    return Attempt(strategy, "j", state=state, step_before=before, step_after=after)


@pytest.mark.parametrize(
    ("attempts", "progress", "expected"),
    [
        ([_a("SPOT", "JOB_STATE_SUCCEEDED", -1, 60)], "completed", "completed"),
        ([_a("SPOT", after=20)], "completed", "completed"),  # saved the last step, then failed
        ([_a("SPOT", after=20)], "fatal", "fatal"),
        ([_a("SPOT", "JOB_STATE_CANCELLED", after=20)], "incomplete", "cancelled"),
        ([_a("SPOT", after=20)], "incomplete", "SPOT"),  # preempted: spot again
        ([_a("SPOT")], "incomplete", "STANDARD"),  # no progress: no capacity
        ([_a("SPOT", after=20), _a("SPOT", before=20, after=20)], "incomplete", "STANDARD"),
        ([_a("SPOT", before=20 * i, after=20 * i + 20) for i in range(3)], "incomplete",
         "STANDARD"),  # spot attempts used up, though each one progressed
        ([_a("SPOT"), _a("STANDARD", before=-1, after=20)], "incomplete", "STANDARD"),
        ([_a("SPOT"), _a("STANDARD"), _a("STANDARD")], "incomplete", "incomplete"),
        ([_a("SPOT"), _a("STANDARD", "JOB_STATE_SUCCEEDED", -1, 60)], "completed", "completed"),
    ],
)  # fmt: skip
def test_the_checkpoint_dir_and_the_budgets_decide_what_follows_a_job(attempts, progress, expected):
    assert decide(PLAN, attempts, progress) == expected


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        (dict(fallback="SPOT"), "fallback='SPOT'"),
        (dict(fallback="STANDARD", strategy="STANDARD"), "strategy='STANDARD'"),
        (dict(fallback="STANDARD", spot_attempts=0), "spot_attempts=0"),
    ],
)
def test_a_fallback_that_cannot_run_is_refused_in_one_line(settings, named):
    from spottrain.pipelines.vertex import VertexConfigError, VertexTraining

    with pytest.raises(VertexConfigError, match=named):
        VertexTraining(**settings)


def test_run_vertex_fallback_submits_the_fallback_pipeline(capsys):
    from kfp_api import run_cli

    from spottrain.pipelines import __main__ as cli

    argv = ["run-vertex", "--project", "my-project", "--region", "us-central1", "--bucket",
            "b-1", "data_src=gs://my-bucket/d", "checkpoint_dir=gs://my-bucket/c"]  # fmt: skip
    for flags, name in (
        ([], "spottrain_vertex.yaml"),
        (["--fallback"], "spottrain_vertex_fallback.yaml"),
    ):
        code, _, err = run_cli(*argv, *flags, capsys=capsys)
        # Refused before any request (the placeholder image), naming the template it picked.
        assert code == cli.ERROR_EXIT and f"compiled/{name} runs the placeholder image" in err, err


@pytest.mark.parametrize(("kind", "price"), [("spot", 0.35), ("standard", 1.2), ("on-demand", 1.2)])
def test_a_fallback_attempt_is_costed_at_the_on_demand_price(tmp_path, monkeypatch, kind, price):
    """The spot and standard jobs run the same flags (one --price-per-hour); the
    ledger prices each attempt by the capacity it ran on."""
    from spottrain import ledger
    from spottrain.ledger import attempt_cost

    monkeypatch.setenv(ledger.CAPACITY_ENV, kind)
    book = ledger.Ledger(str(tmp_path), True, price_per_hour=0.35, on_demand_price_per_hour=1.2)
    book.begin(0)
    an_hour_later = time.time() + 3600
    monkeypatch.setattr(ledger.time, "time", lambda: an_hour_later)
    (rec,) = book.end(exits.OK) and ledger.read(str(tmp_path))
    assert rec["capacity"] == kind and rec["seconds"] == pytest.approx(3600, abs=5)
    (priced,) = attempt_cost.price_records([rec], None)
    assert priced["spent"] == pytest.approx(price, rel=0.01)
    assert priced["saved"] == pytest.approx(1.2 - price, rel=0.01)


def test_each_job_carries_the_run_and_attempt_labels_and_what_its_pools_run_on(monkeypatch):
    """job_for: GCP-valid labels, and in each pool's env its own machine_spec in the
    job's region and those labels, which the ledger copies into the attempt's record."""
    import json

    from spottrain.ledger import bill_labels, usage
    from spottrain.runtime import vertex_job as vj

    monkeypatch.delenv("VERTEX_AI_PIPELINES_RUN_LABELS", raising=False)
    pools = [
        {"machine_spec": {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
                          "accelerator_count": 1}, "replica_count": 1,
         "container_spec": {"image_uri": "i",
                            "env": [{"name": "SPOTTRAIN_USAGE", "value": "old"}]}},
        {"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 2,
         "container_spec": {"image_uri": "i"}},
    ]  # fmt: skip
    payload = {"display_name": "t", "job_spec": {"worker_pool_specs": pools}}
    job = vj.job_for(payload, "STANDARD", 2, location="europe-west4", run="Run_ABC/7")
    assert job["labels"] == {"spottrain-run": "run_abc-7", "spottrain-attempt": "standard-2"}
    chief, workers = (
        {e["name"]: e["value"] for e in p["container_spec"]["env"]}
        for p in job["job_spec"]["worker_pool_specs"]
    )
    assert usage.from_env(chief) == {
        "location": "europe-west4", "machine_type": "n1-standard-8",
        "gpu_type": "NVIDIA_TESLA_T4", "gpu_count": 1, "platform": "vertex",
        "usage_from": "vertex job",
    }  # fmt: skip
    assert usage.from_env(workers)["machine_type"] == "n1-standard-4"
    assert bill_labels.from_env(chief) == job["labels"]
    assert json.loads(chief[bill_labels.LABELS_ENV]) == job["labels"]
    # No run id and no system labels: only the attempt.
    assert vj.job_for(payload, "SPOT", 1)["labels"] == {"spottrain-attempt": "spot-1"}
