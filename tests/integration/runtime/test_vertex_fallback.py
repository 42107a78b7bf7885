"""The Vertex fall-back (spottrain.runtime.vertex_job): spot jobs, then standard ones,
resuming one checkpoint dir, in one pipeline task that ends Succeeded.

The decision is tested as a table; the payloads of the compiled pipeline go through
GCPC's own launcher code into the real ``CreateCustomJobRequest``; and the launcher
runs against the real ``aiplatform_v1.JobServiceClient`` over gRPC, served by the
stand-in ``spottrain/testing/vertex_jobs.py`` whose jobs run the real trainer locally.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from google.cloud import aiplatform_v1
from google_cloud_pipeline_components.container.v1.gcp_launcher import job_remote_runner
from google_cloud_pipeline_components.container.v1.gcp_launcher.utils import json_util
from trainer_helpers import REPO, env, tiny_args
from vertex_helpers import compile_vertex, filled_payload, gcpc_request

from spottrain import exits, ledger
from spottrain.ledger import moves as ledger_moves
from spottrain.runtime import vertex_job as vj
from spottrain.testing.demo_deadline import calibrate, deadline_for, slowed_s
from spottrain.testing.vertex_jobs import JobService
from spottrain.trainer import checkpointing

BILLING = {"vertex-ai-pipelines-run-billing-id": "4242"}


def test_the_compiled_task_runs_our_launcher_and_its_spot_and_standard_jobs_parse_in_gcpc(
    tmp_path, monkeypatch
):
    spec = compile_vertex(tmp_path, "--fallback-strategy", "STANDARD", "--replica-count", "2")
    container = spec["deploymentSpec"]["executors"]["exec-train"]["container"]
    assert container["command"][-1] == "spottrain.runtime.vertex_job"
    assert spec["root"]["dag"]["tasks"]["train"]["retryPolicy"]["maxRetryCount"] == 1
    # The task's arguments, placeholders filled, are the launcher's.
    fills = {"checkpoint_dir": "gs://b/ck", "train_steps": "1000", "project": "p",
             "location": "us-central1", "prior_step_seconds": ""}  # fmt: skip
    argv = [next((v for k, v in fills.items() if f"['{k}']" in a), a) for a in container["args"]]
    argv[argv.index("--payload") + 1] = filled_payload(spec)
    args = vj.parse_args(argv)
    assert (args.checkpoint_dir, args.train_steps, args.fallback_strategy) == (
        "gs://b/ck", 1000, "STANDARD",
    )  # fmt: skip
    payload = json.loads(args.payload, strict=False)
    # Ours drops what GCPC's launcher drops before it creates a job.
    assert vj.remove_empty(json.loads(json.dumps(payload))) == json_util.recursive_remove_empty(
        payload
    )
    monkeypatch.setenv("VERTEX_AI_PIPELINES_RUN_LABELS", json.dumps(BILLING))
    for strategy, kind in (("SPOT", "spot"), ("STANDARD", "standard")):
        sent = vj.job_for(payload, strategy, 1, location="us-central1")
        job = gcpc_request(json.dumps(sent), tmp_path).custom_job
        assert job.job_spec.scheduling.strategy.name == strategy
        assert len(job.job_spec.worker_pool_specs) == 2
        for pool in job.job_spec.worker_pool_specs:
            env_ = {e.name: e.value for e in pool.container_spec.env}
            assert env_["SPOTTRAIN_CAPACITY"] == kind
            assert json.loads(env_["SPOTTRAIN_USAGE"])["location"] == "us-central1"
            assert pool.container_spec.command[:2] == ["tini", "--"]
        # The run's billing id also as ours (no --run_id here), and the attempt.
        ours = {"spottrain-run": "4242", "spottrain-attempt": f"{kind}-1"}
        assert dict(job.labels) == {**BILLING, **ours}
        assert job.display_name.endswith(f"-{kind}-1")


def _payload(digits_dir: str, out: Path, *extra: str, steps: int = 60) -> dict:
    args = tiny_args(digits_dir, out, train_steps=steps)
    pool = {
        "machine_spec": {"machine_type": "n1-standard-4"},
        "replica_count": 1,
        "container_spec": {
            "image_uri": "us-docker.pkg.dev/p/r/trainer:1",
            "command": [sys.executable, "-m", "spottrain.trainer.task"],
            "args": [*args, *extra],
            "env": [{"name": "SPOTTRAIN_CAPACITY", "value": "spot"}],
        },
    }
    return {
        "display_name": "spottrain-train",
        "job_spec": {
            "worker_pool_specs": [pool],
            "scheduling": {"strategy": "SPOT", "timeout": "3600s", "max_wait_duration": ""},
        },
        "labels": {},
    }


def _launch(
    svc: JobService, tmp_path: Path, payload: dict, steps: int = 60, *extra: str
) -> subprocess.Popen:
    argv = [
        sys.executable, "-m", "spottrain.runtime.vertex_job", "--project", "p",
        "--location", "us-central1", "--payload", json.dumps(payload),
        "--gcp_resources", str(tmp_path / "gcp_resources"),
        "--checkpoint_dir", str(tmp_path / "checkpoints"), "--train_steps", str(steps), *extra,
    ]  # fmt: skip
    e = {**env(), vj.API_ENV: svc.address, vj.POLL_ENV: "0.2",
         "VERTEX_AI_PIPELINES_RUN_LABELS": json.dumps(BILLING)}  # fmt: skip
    return subprocess.Popen(argv, cwd=REPO, env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip


def _newest(tmp_path: Path) -> int:
    return max(s for s, _ in checkpointing.list_checkpoints(str(tmp_path / "checkpoints")))


def _gcpc_reads_resources(tmp_path: Path) -> str:
    runner = job_remote_runner.JobRemoteRunner.__new__(job_remote_runner.JobRemoteRunner)
    runner.job_type, runner.gcp_resources = "CustomJob", str(tmp_path / "gcp_resources")
    runner.job_uri_prefix = "https://us-central1-aiplatform.googleapis.com/v1/"
    return runner.check_if_job_exists()


@pytest.mark.slow
def test_preempted_then_no_spot_capacity_then_standard_ends_trained(digits_dir, tmp_path):
    with JobService(["preempt@20", "stockout", "run"], env=env(), log_dir=tmp_path) as svc:
        proc = _launch(svc, tmp_path, _payload(digits_dir, tmp_path))
        out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    strategies = [j.job_spec.scheduling.strategy.name for j in svc.jobs]
    assert strategies == ["SPOT", "SPOT", "STANDARD"], out
    kinds = [{e.name: e.value for e in j.job_spec.worker_pool_specs[0].container_spec.env}
             ["SPOTTRAIN_CAPACITY"] for j in svc.jobs]  # fmt: skip
    assert kinds == ["spot", "spot", "standard"]
    # The run's billing id also as spottrain-run (no --run_id given), and each attempt.
    attempts = ["spot-1", "spot-2", "standard-1"]
    assert [dict(j.labels) for j in svc.jobs] == [
        {**BILLING, "spottrain-run": "4242", "spottrain-attempt": a} for a in attempts
    ]
    assert _newest(tmp_path) == 60
    # The ledger: the preempted spot attempt, then the standard one (the stockout never ran).
    records = json.loads((tmp_path / "checkpoints" / "attempts.json").read_text())["attempts"]
    assert [(r["capacity"], r["outcome"]) for r in records] == [
        ("spot", "preempted"), ("standard", "success"),
    ], records  # fmt: skip
    assert records[1]["start_step"] == records[0]["saved_step"] > 0, records
    # Each record: what its job's pool ran on, in the job's region, and the job's labels.
    assert [(r["machine_type"], r["location"], r["platform"]) for r in records] == [
        ("n1-standard-4", "us-central1", "vertex")
    ] * 2, records
    assert [r["bill_labels"]["spottrain-attempt"] for r in records] == ["spot-1", "standard-1"]
    # gcp_resources names the last job, readable by GCPC's own re-attach code.
    assert _gcpc_reads_resources(tmp_path) == svc.jobs[-1].name
    # The stockout made no progress, so it went to standard with spot attempts left.
    stockout = r"JOB_STATE_FAILED \(checkpoint step (\d+) -> \1; .*stockout.*: resume on STANDARD"
    assert re.search(stockout, out)


def test_a_fatal_training_error_stops_after_one_job(digits_dir, tmp_path):
    payload = _payload(digits_dir, tmp_path, "--learning-rate", "nan")
    with JobService(["run", "run"], env=env()) as svc:
        proc = _launch(svc, tmp_path, payload)
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == exits.FATAL_CONFIG, out
    assert len(svc.jobs) == 1, out  # no standard job paid for a config error
    assert "fatal after SPOT JOB_STATE_FAILED" in out, out


def test_a_job_vertex_refuses_is_one_line_and_fatal(digits_dir, tmp_path):
    with JobService(["refuse"]) as svc:
        proc = _launch(svc, tmp_path, _payload(digits_dir, tmp_path))
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == exits.FATAL_CONFIG, out
    errors = [line for line in out.splitlines() if "ERROR" in line or "refused" in line]
    assert len(errors) == 1 and "bad spec" in errors[0], out
    # Not retried: a second create would have been answered "run" and made a job.
    assert "Traceback" not in out and not svc.jobs, out


@pytest.mark.parametrize("answer", ["quota", "unreachable"])
def test_a_quota_or_an_unreachable_api_is_retryable(digits_dir, tmp_path, answer):
    with JobService([answer]) as svc:
        if answer == "unreachable":
            svc.server.stop(0)
        proc = _launch(svc, tmp_path, _payload(digits_dir, tmp_path))
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == exits.UNAVAILABLE, out
    assert exits.is_retryable(proc.returncode) and "Traceback" not in out
    assert not svc.jobs


@pytest.mark.slow
def test_cancelling_the_task_cancels_its_job_and_the_trainer_saves(digits_dir, tmp_path):
    payload = _payload(digits_dir, tmp_path, steps=100_000)
    with JobService(["run"], env=env(), log_dir=tmp_path) as svc:
        proc = _launch(svc, tmp_path, payload, steps=100_000)
        deadline = time.monotonic() + 120
        while not list(checkpointing.list_checkpoints(str(tmp_path / "checkpoints"))):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        trainer = svc._procs[svc.jobs[0].name]
        trainer.wait(timeout=60)
    assert proc.returncode == exits.PREEMPTED, out
    assert svc.cancelled == [svc.jobs[0].name]
    assert trainer.returncode == exits.PREEMPTED  # the notice reached it: saved
    assert _newest(tmp_path) > 0


@pytest.mark.slow
def test_a_retried_task_follows_the_job_it_left_instead_of_creating_one(digits_dir, tmp_path):
    import grpc
    from google.cloud.aiplatform_v1.services.job_service.transports import (
        JobServiceGrpcTransport,
    )

    with JobService(["run", "run"], env=env()) as svc:
        client = aiplatform_v1.JobServiceClient(
            transport=JobServiceGrpcTransport(channel=grpc.insecure_channel(svc.address))
        )
        job = client.create_custom_job(
            parent="projects/p/locations/us-central1",
            custom_job=vj.job_for(_payload(digits_dir, tmp_path), "SPOT", 1),
        )
        vj.write_resources(str(tmp_path / "gcp_resources"), "us-central1", job.name)
        proc = _launch(svc, tmp_path, _payload(digits_dir, tmp_path))
        out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert len(svc.jobs) == 1 and _newest(tmp_path) == 60


@pytest.mark.slow
def test_a_deadline_moves_the_run_from_preempted_spot_to_standard_in_time(digits_dir, tmp_path):
    """Spot is preempted every few seconds: the walk stays on spot while standard could
    still finish by the deadline from the next look, then moves (cancelling the spot
    job: it saves on the notice), writes the move in the ledger, and finishes in time.

    The deadline is set from this machine's speed, measured first: standard alone
    needs the start-up ``s`` and the work ``w``; the deadline gives ``2 s + 1.2 w`` and
    a 60 s margin, so spot (4 s of training between restarts) is safe at first and
    stops being safe before it could finish.
    """
    steps, margin = 2000, 60
    startup, per_step = calibrate(Path(digits_dir), tmp_path, env=env())
    finish_by = deadline_for(startup, per_step, steps, margin)
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(finish_by))
    payload = _payload(digits_dir, tmp_path, "--save-every-seconds", "2", steps=steps)
    with JobService([], env=env(), log_dir=tmp_path, by_strategy={"SPOT": "preempt~4"}) as svc:
        proc = _launch(svc, tmp_path, payload, steps, "--finish_by", iso,
                       "--first_attempts", "100", "--look_every_seconds", "2",
                       "--save_every_seconds", "2", "--margin_seconds", str(margin),
                       "--prior_restart_seconds", str(startup),
                       "--prior_step_seconds", str(per_step))  # fmt: skip
        out, _ = proc.communicate(timeout=int(finish_by - time.time()) + 300)
    ended = time.time()
    assert proc.returncode == 0, out
    strategies = [j.job_spec.scheduling.strategy.name for j in svc.jobs]
    # Spot first (restarted after each preemption), then one standard job.
    assert strategies[-1] == "STANDARD" and strategies.count("STANDARD") == 1, strategies
    assert set(strategies[:-1]) == {"SPOT"} and len(strategies) >= 3, strategies
    assert _newest(tmp_path) == steps
    ladder, moves = ledger_moves.read(str(tmp_path / "checkpoints"))
    assert ladder["asked"] == iso and abs(ladder["finish_by"] - finish_by) < 1, ladder
    assert ladder["rungs"] == ["spot 1 x n1-standard-4", "on-demand 1 x n1-standard-4"]
    (move,) = moves
    assert (move["from_capacity"], move["to_capacity"]) == ("spot", "on-demand"), move
    assert move["left"] == svc.jobs[-2].name and move["finish_by"] == ladder["finish_by"]
    # Moved for the deadline (not for capacity or the budget): before the next look would
    # be late, or, had a look come later than due, once inside the margin.
    assert re.search("to finish by|leaves less than the margin", move["reason"]), move
    records = ledger.read(str(tmp_path / "checkpoints"))
    assert records[-2]["outcome"] == "preempted" and records[-2]["steps_lost"] == 0  # saved
    totals = ledger.totals(records)
    if svc.cancelled:
        assert svc.cancelled == [svc.jobs[-2].name]  # the spot job left was cancelled ...
        # ... and its record is the move's, not a preemption (issue 56): each other was.
        moved_at = [None] * (len(records) - 2) + [move["at"], None]
        assert [r.get("moved_at") for r in records] == moved_at
        assert (totals["moved"], totals["preemptions"]) == (1, len(records) - 2), totals
    else:
        # The look that moved came just after a preemption had ended the spot job (a
        # loaded machine's timing): nothing to cancel, and every spot job a preemption.
        assert [r.get("moved_at") for r in records] == [None] * len(records)
        assert (totals["moved"], totals["preemptions"]) == (0, len(records) - 1), totals
    assert move["forecast_finish"] <= finish_by
    slowed = slowed_s(records, startup, per_step)  # the machine slower than calibrated
    assert ended <= finish_by + slowed, (
        f"finished {ended - finish_by:.0f} s after the deadline ({slowed:.0f} s of it the "
        "machine's slowing since the calibration)"
    )
    # The task ended with the standard job, not with its last checkpoint (its outputs).
    assert svc.jobs[-1].state == aiplatform_v1.JobState.JOB_STATE_SUCCEEDED
    assert re.search(r"STANDARD job \S+ ended JOB_STATE_SUCCEEDED", out), out[-2000:]
    if svc.cancelled:
        assert re.search(r"SPOT job \S+ left: JOB_STATE_CANCELLED", out), out[-2000:]
    print(f"deadline move: start-up {startup:.1f} s, {per_step * 1000:.1f} ms/step, "
          f"{len(strategies) - 1} spot jobs, moved at {finish_by - move['at']:.0f} s before "
          f"the deadline, finished {finish_by - ended:.0f} s before it, "
          f"{'a cancel' if svc.cancelled else 'no cancel'}, slowed {slowed:.0f} s")  # fmt: skip


@pytest.mark.slow
def test_make_run_deadline_goes_back_to_spot_and_finishes_in_time(tmp_path, capsys, monkeypatch):
    """``make run-deadline`` as a user runs it: no step estimate, so standard first;
    back to spot once ahead; standard again if spot stops being safe; in time, each
    move in the ledger and on the attempts page (its exit code says most of that)."""
    from spottrain.testing import demo_deadline

    # The demo sets its illustrative prices when unset: set here, undone after the test.
    monkeypatch.setenv("SPOTTRAIN_PRICES", json.dumps(demo_deadline.PRICES))
    code = demo_deadline.main(["--out", str(tmp_path / "deadline")])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    _, moved = ledger_moves.read(str(tmp_path / "deadline" / "run" / "checkpoints"))
    kinds = [(m["from_capacity"], m["to_capacity"], m.get("rule")) for m in moved]
    assert kinds[:2] == [("spot", "on-demand", "estimate"), ("on-demand", "spot", "ahead")]
    # Then standard again for the deadline, unless spot finished first (how far spot
    # gets between its preemptions depends on this machine's load).
    assert all(k[:2] == ("spot", "on-demand") for k in kinds[2:]) and len(kinds) <= 3, kinds
    page = (tmp_path / "deadline" / "attempts.html").read_text()
    assert "→ spot at" in page and page.count("→ on-demand at") == len(kinds) - 1
    print(f"make run-deadline: moves {kinds}")


@pytest.mark.slow
def test_a_ladder_rung_whose_capacity_does_not_come_is_left_after_its_patience(
    digits_dir, tmp_path
):
    """A flex-start job that stays pending is cancelled once its rung's patience is used
    (no deadline: the ladder's own rule) and the next rung's job trains; the move is in
    the ledger with its reason, and the pending job never ran a trainer."""
    ladder = json.dumps([{"capacity": "flex-start", "patience": "3s"}, {"capacity": "on-demand"}])
    with JobService(["wait"], env=env(), log_dir=tmp_path) as svc:
        proc = _launch(svc, tmp_path, _payload(digits_dir, tmp_path), 60, "--ladder", ladder,
                       "--look_every_seconds", "1")  # fmt: skip
        out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    flex, standard = svc.jobs
    assert flex.job_spec.scheduling.strategy.name == "FLEX_START"
    assert flex.job_spec.scheduling.max_wait_duration.seconds == 3  # the rung's patience
    assert standard.job_spec.scheduling.strategy.name == "STANDARD"
    assert svc.cancelled == [flex.name] and flex.name not in svc._procs
    assert [dict(j.labels)["spottrain-rung"] for j in svc.jobs] == ["0", "1"]
    _, (move,) = ledger_moves.read(str(tmp_path / "checkpoints"))
    assert (move["from_capacity"], move["to_capacity"], move["left"]) == (
        "flex-start", "on-demand", flex.name)  # fmt: skip
    assert "no flex-start capacity for" in move["reason"] and "(its patience)" in move["reason"]
    assert _newest(tmp_path) == 60
    records = ledger.read(str(tmp_path / "checkpoints"))
    assert [r["capacity"] for r in records] == ["standard"]  # the pending job left no record
