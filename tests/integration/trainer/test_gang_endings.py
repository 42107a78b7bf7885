"""How a gang of workers ends: real processes under ``spottrain.trainer.launch``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


@pytest.mark.slow
def test_workers_exit_within_seconds_of_their_last_save(digits_dir, tmp_path):
    """After the last save a worker evaluates, exports and exits: seconds, not the
    ~15 s (2 workers, 150 steps) to ~40 s (3 workers, 300 steps) that interpreter
    shutdown spent freeing the training iterator behind tf.data's autotuning thread.

    The bound is the run's own pace, not an idle machine's seconds: that stall took
    longer than the whole run up to its last save (start-up, gang, 150 steps), while
    evaluation and export take a small part of it (~1.3 s of ~10 s here), and a busy
    machine slows both alike."""
    cmd = [
        sys.executable, "-m", "spottrain.trainer.launch", "--workers", "2",
        "--log-dir", str(tmp_path / "worker-logs"), "--",
        "--image-dir", digits_dir, "--backbone", "small_cnn", "--weights", "none",
        "--image-size", "32", "--batch-size-per-replica", "16", "--train-steps", "150",
        "--save-every-steps", "1000", "--log-every-steps", "50",
        "--checkpoint-dir", str(tmp_path / "ckpt"), "--model-dir", str(tmp_path / "model"),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": REPO, "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)  # fmt: skip
    saved, lines = {}, []
    for line in proc.stdout:
        lines.append(line)
        m = re.match(r"\[(\S+)\] .*trainer: saved .* at step 150 ", line)
        if m:
            saved[m.group(1)] = time.monotonic()
    assert proc.wait(timeout=300) == 0, "".join(lines[-40:])
    ended = time.monotonic()  # the launcher ends once both workers have
    assert set(saved) == {"chief-0", "worker-0"}, "".join(lines[-40:])
    gaps = {name: round(ended - at, 2) for name, at in saved.items()}
    run_s = max(saved.values()) - started
    assert max(gaps.values()) < 0.5 * run_s, (gaps, f"{run_s:.1f} s to the last save")


@pytest.mark.slow
def test_a_frozen_chief_is_dumped_from_outside_and_its_attempt_recorded_truly(digits_dir, tmp_path):
    """A frozen worker (its supervisor frozen with it, as a frozen VM) cannot dump or
    exit by itself: the peer exits 170 on the coordination service's heartbeats, then
    the launcher dumps the frozen one's stacks with py-spy into ``diagnostics/``, kills
    it and counts it hung (171). The retry's ledger closes the frozen attempt as a
    hang, with the steps it really lost and the seconds it held its machines."""
    from trainer_helpers import ledger, tiny_args

    from spottrain import exits
    from spottrain.trainer import launch

    out = tmp_path / "run"
    args = tiny_args(digits_dir, out, train_steps=300, save_every_steps=20, hang_timeout=300)
    frozen_run = launch.ProcessLauncher(
        2, args, preempt_at_step=30, signal_name="FREEZE", preempt_worker="0"
    )
    began = time.time()
    result = frozen_run.run()
    assert result.chaos and result.chaos["worker"] == "chief-0", result
    by_name = {w.name: w for w in frozen_run.workers}
    assert by_name["worker-0"].code == exits.PEER_LOST, result.worker_codes
    assert by_name["chief-0"].code == exits.HUNG, result.worker_codes
    # Not the 300 s hang timeout: the peer's heartbeat failure, then the dump.
    assert by_name["chief-0"].ended_at - result.chaos["at"] < 60, result
    (dump,) = (out / "checkpoints" / "diagnostics").glob("hang-chief-0-*.txt")
    text = dump.read_text()
    assert "frozen (stopped)" in text and "dumped by the launcher" in text
    assert "stacks (py-spy)" in text and "train" in text, text[:2000]
    frozen_at = int(re.search(r"after step (\d+)", text).group(1))
    assert frozen_at >= result.chaos["step"]

    resumed = launch.ProcessLauncher(2, args).run()
    assert resumed.code == 0, resumed
    first, second = ledger(out)
    saved = second["start_step"]  # the last complete checkpoint before the freeze
    assert saved % 20 == 0 and saved <= frozen_at < saved + 20
    assert first["outcome"] == "hang" and first["last_step"] == frozen_at, first
    assert first["steps_lost"] == frozen_at - saved, first
    # It held its machines from its start until the launcher killed it.
    killed_after = dump.stat().st_mtime - first["started"]
    assert first["seconds"] == pytest.approx(killed_after, abs=0.05), (first, killed_after)
    assert first["started"] >= began and second["last_step"] == 300


@pytest.mark.slow
def test_a_worker_never_claims_a_notice_save_the_chief_did_not_complete(tmp_path):
    """The chief's notice save fails (its disk is full: a tmpfs here) while the other
    worker's private copy is written: the worker passes no barrier with the chief, so
    it exits 170 saying the chief did not confirm its save, not 143 and "0 steps lost"."""
    import threading

    from tmpfs import fill, mount_tmpfs

    from spottrain import exits
    from spottrain.trainer import launch

    with mount_tmpfs(tmp_path / "disk", "600k") as disk:
        args = [
            "--task", "examples.regression:Regression", "--threads", "1",
            "--train-steps", "100000", "--batch-size-per-replica", "16",
            "--save-every-steps", "100000", "--save-every-seconds", "0",
            "--log-every-steps", "1000", "--checkpoint-dir", str(disk / "ckpt"),
            "--model-dir", str(tmp_path / "model"),
        ]  # fmt: skip
        lines: list[str] = []

        class Stream:
            def write(self, text):
                lines.append(text)

            def flush(self):
                pass

        gang = launch.ProcessLauncher(2, args, stream=Stream(), kill_after=60)
        runner = threading.Thread(target=lambda: setattr(gang, "result", gang.run()))
        runner.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (
            len(gang.workers) < 2 or min(w.last_step for w in gang.workers) < 20
        ):
            time.sleep(0.05)
        fill(disk)
        gang._forward(15, None)  # SIGTERM to both, as a preemption notice
        runner.join(timeout=180)
    text = "".join(lines)
    codes = gang.result.worker_codes
    assert codes["chief-0"] == exits.FATAL_CONFIG, text[-4000:]
    assert codes["worker-0"] == exits.PEER_LOST, text[-4000:]
    assert "the chief did not confirm its save" in text, text[-4000:]
    assert "the chief's save is complete" not in text
