"""One writer per checkpoint dir: the lease (spottrain/trainer/lease.py), local and gs://.

The gs:// store runs against fake-gcs-server through google-cloud-storage, whose
generation preconditions are what the lease relies on in production.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from spottrain import exits
from spottrain import ledger as ledger_lib
from spottrain.trainer import lease as lease_lib


@pytest.fixture(params=["local", "gs"])
def lease_dir(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "ckpt")
    bucket = request.getfixturevalue("gcs_bucket")
    return f"gs://{bucket.name}/runs/one"


def test_a_second_holder_is_refused_naming_the_first(lease_dir):
    first = lease_lib.Lease(lease_dir, "run-a", seconds=30)
    assert first.acquire(wait_seconds=0) is None
    second = lease_lib.Lease(lease_dir, "run-b", seconds=30)
    started = time.monotonic()
    with pytest.raises(lease_lib.LeaseHeld) as held:
        second.acquire(wait_seconds=0.5)
    assert 0.5 <= time.monotonic() - started < 5
    assert held.value.holder["run"] == "run-a"
    assert f"run run-a on {os.uname().nodename} (pid {os.getpid()})" in str(held.value)
    assert first.renew() and not first.lost.is_set()
    first.release()  # let go: the next one gets it at once
    assert second.acquire(wait_seconds=0) is None
    second.release()


def test_an_expired_lease_is_taken_over_and_its_holder_learns_it_lost(lease_dir):
    dead = lease_lib.Lease(lease_dir, "run-a", seconds=1)
    dead.acquire(wait_seconds=0)  # and never renewed: a SIGKILLed holder
    new = lease_lib.Lease(lease_dir, "run-a", seconds=30)
    started = time.monotonic()
    taken = new.acquire(wait_seconds=10)
    assert taken is not None and taken["token"] == dead.record["token"]
    assert time.monotonic() - started < 3
    assert dead.renew() is False and dead.lost.is_set()  # it stops writing
    assert new.renew() is True
    dead.release()  # not its own any more: leaves the new holder's alone
    assert new.renew() is True
    new.release()


def test_a_dead_holder_of_this_host_is_taken_over_at_once(lease_dir):
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid names no process now
    dead = lease_lib.Lease(lease_dir, "run-a", seconds=600)
    dead.record["pid"] = gone.pid
    dead.acquire(wait_seconds=0)
    started = time.monotonic()
    taken = lease_lib.Lease(lease_dir, "run-a", seconds=600).acquire(wait_seconds=30)
    assert taken is not None and taken["pid"] == gone.pid
    assert time.monotonic() - started < 2  # not the 600 s of its lease
    elsewhere = lease_lib.Lease(lease_dir, "run-b", seconds=600)
    with pytest.raises(lease_lib.LeaseHeld):  # the live holder (this process) is not
        elsewhere.acquire(wait_seconds=0)


def test_only_one_of_many_racing_takers_wins(lease_dir):
    takers = [lease_lib.Lease(lease_dir, f"run-{i}", seconds=30) for i in range(6)]
    won = []
    for taker in takers:
        try:
            taker.acquire(wait_seconds=0)
            won.append(taker)
        except lease_lib.LeaseHeld:
            pass
    assert len(won) == 1


REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def _trainer(out, ckpt, steps, *extra):
    argv = [
        sys.executable, "-m", "spottrain.trainer.task", "--no-supervisor",
        "--task", "examples.regression:Regression", "--threads", "1",
        "--train-steps", str(steps), "--batch-size-per-replica", "16",
        "--save-every-steps", "50", "--log-every-steps", "50", "--lease-seconds", "3",
        "--checkpoint-dir", str(ckpt), "--model-dir", str(out / "model"), *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": REPO, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for(predicate, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("same_run", [False, True], ids=["another-run", "same-run"])
def test_a_second_run_on_a_busy_dir_never_trains(tmp_path, same_run):
    """Two runs at once: the second waits 1.25 x --lease-seconds, then exits (64 for
    another run's settings, 172 for this run's), writing nothing; the first ends at its
    exact final step with its ledger intact."""
    ckpt = tmp_path / "ckpt"
    first = _trainer(tmp_path / "a", ckpt, 100_000)
    assert _wait_for(lambda: (ckpt / "attempts.json").exists()), first.stderr
    second = _trainer(tmp_path / ("a" if same_run else "b"), ckpt, 100_000)
    started = time.monotonic()
    out, err = second.communicate(timeout=120)
    waited = time.monotonic() - started
    want = exits.UNAVAILABLE if same_run else exits.FATAL_CONFIG
    assert second.returncode == want, err[-2000:]
    (line,) = [ln for ln in (out + err).splitlines() if f"exit {want}:" in ln]
    assert "is being written by another" in line and "since" in line, line
    assert 3.75 <= waited < 60, waited
    assert "start_step=" not in out  # it never trained
    assert not list(tmp_path.glob("*/model/model.keras"))
    # The first run's record, still open, and the second's, merged beside it.
    running, refused = ledger_lib.read(str(ckpt))
    assert running["outcome"] == "running" and refused["outcome"] == "refused"
    assert refused["exit_code"] == want and "is being written by" in refused["message"]
    assert 3.75 <= refused["seconds"] < 60
    assert not (ckpt / "FATAL.json").exists()
    first.send_signal(signal.SIGTERM)  # a preemption: it saves and exits 143
    first.communicate(timeout=120)
    assert first.returncode == exits.PREEMPTED
    records = ledger_lib.read(str(ckpt))
    assert [r["outcome"] for r in records] == ["preempted", "refused"]
    assert ledger_lib.totals(records)["refused"] == 1


@pytest.mark.slow
def test_a_sigkilled_holder_is_taken_over_and_the_run_ends_exactly(tmp_path):
    ckpt = tmp_path / "ckpt"
    first = _trainer(tmp_path / "a", ckpt, 100_000)
    assert _wait_for(lambda: list(ckpt.glob("ckpt-*.index"))), first.stderr
    first.kill()  # no notice, no release: the lease expires by itself
    first.communicate()
    killed = time.monotonic()
    second = _trainer(tmp_path / "a", ckpt, 400)
    out, err = second.communicate(timeout=180)
    assert second.returncode == 0, err[-2000:]
    assert "took over the lease of run" in out + err, (out + err)[-2000:]
    assert time.monotonic() - killed < 120
    done = json.loads((tmp_path / "a" / "model" / "training_summary.json").read_text())
    assert done["final_step"] == 400
    assert not (ckpt / "lease.json").exists()  # released at the end


@pytest.mark.slow
def test_a_holder_that_lost_its_lease_stops_without_writing_more(tmp_path):
    """Its lease taken over (as after a partition): the next renewal finds it, the
    loop stops with 172 and writes nothing more (no ledger close, no FATAL.json)."""
    ckpt = tmp_path / "ckpt"
    first = _trainer(tmp_path / "a", ckpt, 100_000)
    assert _wait_for(lambda: list(ckpt.glob("ckpt-*.index"))), first.stderr
    usurper = lease_lib.Lease(str(ckpt), "run-usurper", seconds=600)
    store = usurper.store
    _, version = store.read()
    record = {**usurper.record, "expires": time.time() + 600}
    assert store.swap(record, version) is not False  # the takeover, behind its back
    took = time.monotonic()
    out, err = first.communicate(timeout=60)
    assert first.returncode == exits.UNAVAILABLE, err[-2000:]
    assert time.monotonic() - took < 3 + 5  # one renewal period (3 s / 4) and a step
    assert "lost the lease on --checkpoint-dir" in out + err
    assert [r["outcome"] for r in ledger_lib.read(str(ckpt))] == ["running"]
    assert not (ckpt / "FATAL.json").exists()
    assert json.loads((ckpt / "lease.json").read_text())["run"] == "run-usurper"


def test_a_bucket_that_does_not_exist_is_one_fatal_line(fake_gcs):
    from spottrain.trainer import checkpointing, config, distribution

    cfg = config.TrainConfig(checkpoint_dir="gs://no-such-bucket-for-a-lease/run", lease_seconds=2)
    chief = distribution.Cluster(task_type="", task_id=0, num_workers=1, is_chief=True)
    with pytest.raises(exits.NotTheWriter) as e:
        checkpointing.acquire_lease(cfg, chief)
    assert e.value.code == exits.FATAL_CONFIG
    assert (
        "storage refused taking the writer lease on --checkpoint-dir 'gs://no-such-bucket"
        in str(e.value)
    )
    assert "\n" not in str(e.value)
    worker = distribution.Cluster(task_type="worker", task_id=0, num_workers=2, is_chief=False)
    assert checkpointing.acquire_lease(cfg, worker) is None  # workers share the chief's


def test_the_ledger_keeps_every_record_of_concurrent_writers(lease_dir):
    """The holder writes its progress while eight refused runs add their records at
    once: every write merges by compare-and-swap, so none is lost or renumbered twice."""
    holder = ledger_lib.Ledger(lease_dir, True, min_interval_s=0)
    holder.begin(0)
    errors = []

    def refused(i):
        try:
            ledger_lib.Ledger(lease_dir, True).refused(64, f"refused {i}", time.time())
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=refused, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for step in range(1, 31):
        holder.progress(step)
    for t in threads:
        t.join()
    holder.end(exits.OK)
    assert not errors
    records = ledger_lib.read(lease_dir)
    assert [r["attempt"] for r in records] == list(range(1, 10))
    assert records[0]["outcome"] == "success" and records[0]["last_step"] == 30
    assert sorted(r["message"] for r in records[1:]) == [f"refused {i}" for i in range(8)]
    assert ledger_lib.totals(records)["refused"] == 8


def _put_raw(lease_dir: str, text: str) -> None:
    """Writes ``lease.json`` as is, bypassing the store (a hand edit, another tool)."""
    if lease_dir.startswith("gs://"):
        from spottrain.storage import default_client

        bucket, _, prefix = lease_dir[len("gs://") :].partition("/")
        default_client().bucket(bucket).blob(f"{prefix}/lease.json").upload_from_string(text)
        return
    os.makedirs(lease_dir, exist_ok=True)
    with open(os.path.join(lease_dir, "lease.json"), "w") as f:
        f.write(text)


INVALID_RECORDS = {
    "a word for its expiry": '{"run": "x", "expires": "tomorrow"}',
    "a list": "[1, 2]",
    "an endless expiry": '{"run": "x", "host": "h", "pid": 1, "expires": 1e400}',
    "a far expiry": '{"run": "x", "expires": 1e15}',
    "no JSON": '{"run": ',
}


@pytest.mark.parametrize("text", INVALID_RECORDS.values(), ids=INVALID_RECORDS.keys())
def test_an_invalid_record_is_replaced_in_one_named_line_not_retried(lease_dir, text, caplog):
    """No holder wrote it, so nobody will let go, and a retry reads it again: the
    chief takes the lease at once (no 172, no wait) and names the record it replaced."""
    from spottrain.trainer import checkpointing, config, distribution

    _put_raw(lease_dir, text)
    cfg = config.TrainConfig(checkpoint_dir=lease_dir, lease_seconds=4)
    chief = distribution.Cluster(task_type="", task_id=0, num_workers=1, is_chief=True)
    started = time.monotonic()
    lease = checkpointing.acquire_lease(cfg, chief)
    waited = time.monotonic() - started
    try:
        assert waited < 1.25 * cfg.lease_seconds  # not the wait for a live holder
        (line,) = [r.getMessage() for r in caplog.records if "invalid lease record" in r.message]
        assert f"{lease_dir}/lease.json" in line, line
        assert lease.store.read()[0]["token"] == lease.record["token"]
    finally:
        lease.release()
