"""The fault-tolerance contract (docs/preemption.md), each line with real processes.

1. Resume from the latest checkpoint; exactly the requested steps.
2. SIGTERM: every worker saves at the next step boundary, exits 143, 0 steps lost.
3. SIGKILL of a worker: the others exit (retryable) in bounded time; lost <= save interval.
4. A corrupt latest checkpoint falls back to the previous one.
5. An incompatible config on an existing checkpoint dir fails fast.
"""

from __future__ import annotations

import time

import keras
import numpy as np
import pytest
from trainer_helpers import error_lines, ledger, run_module, summary, tiny_args

from spottrain import exits
from spottrain.tasks.image import model as _model  # noqa: F401 - registers Preprocess for load_model
from spottrain.trainer import launch

pytestmark = pytest.mark.slow


def _launch(workers, args, **kw):
    return launch.ProcessLauncher(workers, args, **kw).run()


def test_two_workers_sigterm_resume_exact_steps_zero_lost_and_accurate(digits_dir, tmp_path):
    out = tmp_path / "run"
    args = tiny_args(
        digits_dir, out, train_steps=200, save_every_steps=50, batch_size_per_replica=16
    )
    first = _launch(2, args, preempt_at_step=70, signal_name="TERM", seed=0)
    assert first.chaos and first.chaos["signal"] == "SIGTERM"
    # Every worker, not only the signalled one, stopped cleanly with the retryable code.
    assert set(first.worker_codes.values()) == {exits.PREEMPTED}, first.worker_codes
    rec = ledger(out)[0]
    assert rec["outcome"] == "preempted" and rec["steps_lost"] == 0
    assert rec["saved_step"] == rec["last_step"] >= first.chaos["step"]
    assert (out / "checkpoints" / f"ckpt-{rec['saved_step']}.index").exists()

    second = _launch(2, args, preempt_at_step=70, signal_name="TERM", seed=0)
    assert second.code == 0 and second.chaos is None, second
    rec2 = ledger(out)[1]
    # The retry starts exactly where the preempted attempt stopped: 0 steps lost.
    assert rec2["start_step"] == rec["saved_step"]
    s = summary(out)
    assert s["final_step"] == s["train_steps"] == 200
    assert s["num_workers"] == 2 and s["replicas"] == 2 and s["global_batch_size"] == 32
    assert s["val_accuracy"] >= 0.90, s


def test_sigkill_of_a_worker_survivor_exits_bounded_then_resumes(digits_dir, tmp_path):
    out = tmp_path / "run"
    save_every = 20
    args = tiny_args(digits_dir, out, train_steps=80, save_every_steps=save_every)
    launcher = launch.ProcessLauncher(
        2, args, preempt_at_step=30, signal_name="KILL", preempt_worker="1", grace=90
    )  # let the chief fail on its own
    killed_at = None
    result = launcher.run()
    assert result.chaos and result.chaos["worker"] == "worker-0"
    assert result.worker_codes["worker-0"] == 137
    chief = next(w for w in launcher.workers if w.name == "chief-0")
    killed_at = next(w for w in launcher.workers if w.name == "worker-0").ended_at
    assert exits.is_retryable(chief.code), chief.code
    assert chief.ended_at - killed_at < 45, "survivor hung after its peer died"
    first = ledger(out)[0]
    assert first["outcome"] == "worker_lost"

    again = _launch(2, args)
    assert again.code == 0
    second = ledger(out)[1]
    lost = result.chaos["step"] - second["start_step"]
    assert 0 <= lost <= save_every, (result.chaos, second)
    assert summary(out)["final_step"] == 80


def test_corrupt_latest_checkpoint_falls_back_to_previous(digits_dir, tmp_path):
    out = tmp_path / "run"
    proc, _ = run_module("spottrain.trainer.task", tiny_args(digits_dir, out, train_steps=60))
    assert proc.returncode == 0, proc.stdout[-3000:]
    ckpts = out / "checkpoints"
    data = ckpts / "ckpt-60.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 3])  # truncated upload
    proc, _ = run_module("spottrain.trainer.task", tiny_args(digits_dir, out, train_steps=80))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "ckpt-60 is unreadable" in proc.stdout and "falling back" in proc.stdout
    assert "start_step=40 " in proc.stdout
    assert (ckpts / "quarantine" / "ckpt-60.index").exists()  # moved aside, not deleted
    assert summary(out)["final_step"] == 80


@pytest.mark.parametrize("garbage", [b"\x00\xff garbage \x12", b"not: [a state file"])
def test_a_garbage_checkpoint_state_file_is_moved_aside(digits_dir, tmp_path, garbage):
    """CheckpointManager parses ``checkpoint`` first; garbage there was a traceback."""
    out = tmp_path / "run"
    proc, _ = run_module("spottrain.trainer.task", tiny_args(digits_dir, out, train_steps=20))
    assert proc.returncode == 0, proc.stdout[-3000:]
    ckpts = out / "checkpoints"
    (ckpts / "checkpoint").write_bytes(garbage)
    proc, _ = run_module("spottrain.trainer.task", tiny_args(digits_dir, out, train_steps=30))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "the checkpoint state file is unreadable" in proc.stdout
    assert "start_step=20 " in proc.stdout  # resumed from the checkpoint files themselves
    (moved,) = (ckpts / "quarantine").glob("checkpoint.*")
    assert moved.read_bytes() == garbage
    assert summary(out)["final_step"] == 30


def test_incompatible_config_on_existing_checkpoints_fails_fast(digits_dir, tmp_path):
    out = tmp_path / "run"
    proc, _ = run_module(
        "spottrain.trainer.task", tiny_args(digits_dir, out, train_steps=4, save_every_steps=2)
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    proc, seconds = run_module(
        "spottrain.trainer.task", tiny_args(digits_dir, out, train_steps=8, image_size=40)
    )
    assert proc.returncode == exits.FATAL_CONFIG
    errors = error_lines(proc)
    assert len(errors) == 1 and "image_size: 32 -> 40" in errors[0], proc.stdout
    assert seconds < 30
    assert not (out / "checkpoints" / "ckpt-8.index").exists()


def _weights(path):
    return keras.models.load_model(path).get_weights()


@pytest.mark.parametrize("workers", [1, 2])
def test_interrupted_run_is_bit_identical_to_uninterrupted(digits_dir, tmp_path, workers):
    clean, broken = tmp_path / "clean", tmp_path / "broken"
    steps = dict(train_steps=50, save_every_steps=20, batch_size_per_replica=32 // workers)
    assert _launch(workers, tiny_args(digits_dir, clean, **steps)).code == 0
    hit = _launch(
        workers,
        tiny_args(digits_dir, broken, **steps),
        preempt_at_step=25,
        signal_name="TERM",
        seed=1,
    )
    assert hit.code == exits.PREEMPTED and hit.chaos["step"] >= 25
    assert _launch(workers, tiny_args(digits_dir, broken, **steps)).code == 0
    # Really resumed mid-run, from the step boundary at or after the signal (the
    # launcher now hears of a step as soon as it ends, so this can be step 25 itself).
    assert hit.chaos["step"] <= ledger(broken)[1]["start_step"] < 50
    a, b = _weights(clean / "model" / "model.keras"), _weights(broken / "model" / "model.keras")
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def test_launcher_sigterm_is_forwarded_and_workers_save(digits_dir, tmp_path):
    """KFP deleting the pod sends SIGTERM to the launcher: the workers must still save."""
    import signal
    import subprocess
    import sys

    from trainer_helpers import REPO, env

    out = tmp_path / "run"
    args = tiny_args(digits_dir, out, train_steps=100000, save_every_steps=100000)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "spottrain.trainer.launch",
            "--workers",
            "2",
            "--log-dir",
            str(tmp_path / "worker-logs"),
            "--",
            *args,
        ],
        cwd=REPO,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    pids = []
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        if "started 2 worker(s)" in line:
            pids = [int(p.split(",")[0]) for p in line.split("pid ")[1:]]
        if line.startswith("[chief-0] step 10/"):
            proc.send_signal(signal.SIGTERM)
            break
        assert time.monotonic() < deadline
    rest = proc.communicate(timeout=60)[0]
    assert proc.returncode == exits.PREEMPTED, rest
    rec = ledger(out)[0]
    assert rec["outcome"] == "preempted" and rec["steps_lost"] == 0
    assert rec["saved_step"] >= 10
    for pid in pids:  # no orphan left behind
        with pytest.raises(ProcessLookupError):
            import os

            os.kill(pid, 0)
