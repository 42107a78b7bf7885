"""The ledger counts what was really lost (issue 29, item 6), with real trainer processes.

The task's checkpoints take long to write (tests/slow_save_task.py), so a save is
still running when the fault comes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ports import held_port
from trainer_helpers import REPO, env, ledger, run_module, task_args

from spottrain import exits
from spottrain.trainer import launch, local_cluster

pytestmark = pytest.mark.slow


def _args(out: Path, **overrides) -> list[str]:
    flags = {"task": "tests.slow_save_task:SlowToSave", **overrides}
    return task_args(out, **flags)


def _saved(out: Path) -> list[int]:
    return sorted(int(p.name[5:-6]) for p in (out / "checkpoints").glob("ckpt-*.index"))


def test_a_save_that_completes_as_a_peer_dies_is_the_one_the_record_names(tmp_path):
    """A non-chief worker dies right after the interval save at step 20, while the
    chief's background write of it runs; the chief exits 170 once the collective
    fails, and its record names the save its write completed (the one the next
    attempt resumes from), not the one before."""
    out = tmp_path / "run"
    launcher = launch.ProcessLauncher(
        3, _args(out, train_steps=200), preempt_at_step=21, signal_name="KILL",
        preempt_worker="1", grace=90,
    )  # fmt: skip
    result = launcher.run()
    assert result.chaos, result
    chief = {w.name: w for w in launcher.workers}["chief-0"]
    assert chief.code == exits.PEER_LOST, result.worker_codes
    rec = ledger(out)[-1]
    assert rec["outcome"] == "worker_lost", rec
    newest = _saved(out)[-1]
    assert newest == 20, _saved(out)
    assert rec["saved_step"] == newest, rec
    assert rec["steps_lost"] == rec["last_step"] - newest, rec


def test_a_chief_killed_during_a_save_is_charged_the_steps_up_to_it(tmp_path):
    """Killed while writing the final checkpoint (its temp folder exists): the record
    reaches that step, so the next attempt, resuming from the save before it,
    counts every step it redoes."""
    out = tmp_path / "run"
    args = _args(out)
    proc = subprocess.Popen(
        [sys.executable, "-m", "spottrain.trainer.task", *args],
        cwd=REPO,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    temp = out / "checkpoints" / "ckpt-40_temp"
    try:
        deadline = time.monotonic() + 300
        while not temp.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.returncode
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGKILL)  # the supervisor and the trainer
    finally:
        proc.wait(timeout=60)
    assert 40 not in _saved(out) and _saved(out)[-1] == 20, _saved(out)
    again, _ = run_module("spottrain.trainer.task", args)
    assert again.returncode == exits.OK, again.stdout[-3000:]
    killed, success = ledger(out)[-2:]
    assert success["start_step"] == 20, success
    assert killed["outcome"] == "killed" and killed["last_step"] == 40, killed
    assert killed["steps_lost"] == 40 - 20, killed


def test_a_gang_that_never_formed_is_charged_from_its_start(digits_dir, tmp_path):
    """The worker never starts; the chief waits in MWMS start-up until its supervisor
    stops it. Its record counts from the supervisor's start, as the deputy's record
    of a chief that never started does, not from its opening after TensorFlow's
    import (issue 29: 39 s recorded where the gang waited 64 s)."""
    import json

    from trainer_helpers import startup_timeout_here, tiny_args

    # Longer than a TensorFlow import here, measured: the record must open first.
    timeout = startup_timeout_here()
    out = tmp_path / "run"
    args = tiny_args(digits_dir, out, startup_timeout=timeout)
    with held_port() as worker:  # refuses connections; no one else can listen there
        chief = local_cluster.free_ports(1)[0]
        tf_config = {
            "cluster": {"chief": [f"127.0.0.1:{chief}"], "worker": [f"127.0.0.1:{worker}"]},
            "task": {"type": "chief", "index": 0},
        }
        proc, seconds = run_module(
            "spottrain.trainer.task",
            args,
            extra_env={"TF_CONFIG": json.dumps(tf_config)},
            timeout=timeout + 120,
        )
    assert proc.returncode == exits.HUNG, proc.stdout[-3000:]
    again, _ = run_module("spottrain.trainer.task", tiny_args(digits_dir, out, train_steps=2))
    assert again.returncode == exits.OK, again.stdout[-3000:]
    hang = ledger(out)[0]
    assert hang["outcome"] == "hang", hang
    # The supervisor waited the whole start-up timeout before its kill (the dump).
    assert timeout <= hang["seconds"] <= seconds + 1, (hang, timeout, seconds)


def _into_slow_steps(out: Path) -> tuple[subprocess.Popen, float]:
    """A trainer of SlowSteps in its steady state: (it, when its current batch wait
    began, by ``time.time()``), returned within STEP_S / 4 of that start, so most of
    the wait, with the main thread inside TensorFlow, is still ahead."""
    from slow_save_task import SlowSteps

    args = _args(out, task="tests.slow_save_task:SlowSteps", train_steps=100)
    mark = out.parent / f"{out.name}.wait-began"
    proc = subprocess.Popen(
        [sys.executable, "-m", "spottrain.trainer.task", *args],
        cwd=REPO,
        env={**env(), SlowSteps.MARK_ENV: str(mark)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    # Training: a step has been taken (batches made before it may be a probe's).
    for line in proc.stdout:
        if line.startswith("step "):
            break
    else:
        raise AssertionError(f"the trainer ended before its first step: {proc.wait()}")
    # A wait that began since; one this busy machine let us see late is passed over.
    seen = None
    while proc.poll() is None:
        began = float(mark.read_text()) if mark.exists() else None
        if began is not None and began != seen:
            if time.time() - began < SlowSteps.STEP_S / 4:
                return proc, began
            seen = began
        time.sleep(0.05)
    raise AssertionError(f"the trainer ended before its steady state: {proc.returncode}")


def test_a_notice_cut_off_mid_step_is_recorded_as_a_preemption(tmp_path):
    """The platform kills the attempt a moment after its notice, before the step it
    is in ends and its notice save can start: the notice was recorded when it came
    (noted by the supervisor), so the next attempt records a preemption that could
    not save, not an unexplained kill."""
    from slow_save_task import SlowSteps

    from spottrain import ledger as ledger_lib

    out = tmp_path / "run"
    proc, began = _into_slow_steps(out)
    try:
        os.kill(proc.pid, signal.SIGTERM)  # the supervisor, which passes it on
        time.sleep(0.05)  # a platform's short grace, far within the step
        os.killpg(proc.pid, signal.SIGKILL)
        cut = time.time() - began
    finally:
        proc.wait(timeout=60)
    assert cut < SlowSteps.STEP_S / 2, cut  # well inside the step's wait
    # The trainer could not close its record (the kill): the next attempt does.
    assert ledger(out)[-1]["outcome"] == "running"
    # What the next attempt writes into the ledger about this one.
    nxt = ledger_lib.Ledger(str(out / "checkpoints"), True)
    nxt.begin(0)
    closed = nxt.records[-2]
    assert closed["outcome"] == "preempted_unsaved", closed


def test_the_trainer_records_a_notice_while_its_step_runs(tmp_path):
    """A KFP pod is killed about a second after its SIGTERM
    (tests/system/kfp/test_platform_kfp_argo.py).

    The trainer's main thread is inside TensorFlow for the whole step, where a Python
    signal handler cannot run; the notice is recorded by a thread woken by the
    signal's wakeup pipe, so the attempt's own record names it before the step ends."""
    from slow_save_task import SlowSteps

    out = tmp_path / "run"
    proc, began = _into_slow_steps(out)
    try:
        # Into the wait: the step's call waits for the batch that takes STEP_S.
        time.sleep(max(0.0, began + SlowSteps.STEP_S * 0.3 - time.time()))
        before = ledger(out)[-1]
        os.kill(proc.pid, signal.SIGTERM)
        sent = time.monotonic()
        record = before
        # The step this lands in has most of STEP_S left: the notice must come within it.
        while "notice_step" not in record and time.monotonic() < sent + SlowSteps.STEP_S / 2:
            time.sleep(0.05)
            record = ledger(out)[-1]
        heard = time.monotonic() - sent
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert "notice_step" in record, (heard, record)
    assert record["notice_reason"] == "SIGTERM", record
    # Recorded from within the step: at the step before it (a handler that waited for
    # the step to end would record the step after).
    assert record["last_step"] == before["last_step"] == record["notice_step"], (before, record)
