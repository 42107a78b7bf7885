"""Full and read-only file systems under a real trainer: one line, the right code, nothing left.

Each test mounts a small tmpfs (root here, as in CI; the same ENOSPC and EROFS a
full persistent disk or a read-only mount gives in a pod) and runs
``python -m spottrain.trainer.task`` on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from tmpfs import fill, mount_tmpfs

from spottrain import exits
from spottrain import ledger as ledger_lib

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def _trainer(ckpt, model, steps, *extra, env=None, supervised=False):
    argv = [
        sys.executable, "-m", "spottrain.trainer.task",
        *([] if supervised else ["--no-supervisor"]),
        "--task", "examples.regression:Regression", "--threads", "1",
        "--train-steps", str(steps), "--batch-size-per-replica", "16",
        "--save-every-steps", "50", "--log-every-steps", "50", "--lease-seconds", "3",
        "--checkpoint-dir", str(ckpt), "--model-dir", str(model), *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": REPO, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for_a_checkpoint(ckpt, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not list(ckpt.glob("ckpt-*.index")) and time.monotonic() < deadline:
        time.sleep(0.05)


def _exit_lines(text: str, code: int) -> list[str]:
    return [ln for ln in text.splitlines() if f"exit {code}:" in ln]


@pytest.mark.slow
def test_a_disk_that_fills_during_a_save_is_one_line_and_leaves_nothing(tmp_path):
    """The disk fills while training: the next save fails with 64 naming the path and
    the flag, its half-written files are removed, the ledger's saved_step is a complete
    checkpoint, no FATAL.json; once space is freed the same command resumes and ends
    at exactly the requested step."""
    with mount_tmpfs(tmp_path / "disk", "600k") as disk:
        ckpt = disk / "ckpt"
        first = _trainer(ckpt, tmp_path / "model", 100_000)
        _wait_for_a_checkpoint(ckpt)
        # And for a progress record past step 0 (written every 2 s), so the ledger
        # holds steps the full disk then costs.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not ledger_lib.read(str(ckpt))[0]["last_step"]:
            time.sleep(0.05)
        fill(disk)
        out, err = first.communicate(timeout=120)
        assert first.returncode == exits.FATAL_CONFIG, err[-3000:]
        (line,) = _exit_lines(out + err, 64)
        assert "cannot write '" + str(ckpt) in line and "(--checkpoint-dir)" in line, line
        assert line.endswith("No space left on device"), line
        assert not list(ckpt.glob("*_temp")) and not list(ckpt.glob("*.tmp*")), os.listdir(ckpt)
        indexed = {int(p.name[5:-6]) for p in ckpt.glob("ckpt-*.index")}
        for data in ckpt.glob("ckpt-*.data-*"):  # no data file without its index
            assert int(data.name.split(".")[0][5:]) in indexed, data
        (record,) = ledger_lib.read(str(ckpt))
        assert record["saved_step"] in indexed | {0}, (record, indexed)
        assert record["saved_step"] < record["last_step"]
        assert not (ckpt / "FATAL.json").exists()  # a retry after the fix must run

        (disk / "filler").unlink()
        second = _trainer(ckpt, tmp_path / "model", 300)
        out, err = second.communicate(timeout=180)
        assert second.returncode == 0, err[-3000:]
    done = json.loads((tmp_path / "model" / "training_summary.json").read_text())
    # Resumed from a whole checkpoint, never before what the ledger counted as saved. Not
    # always the newest index: a disk that fills after a save's index but before TF's
    # "checkpoint" state file names it leaves that save whole but uncommitted (seen
    # twice under load: ckpt-100 indexed, resumed from 50, the ledger's saved step).
    assert done["final_step"] == 300 and done["start_step"] in indexed, (done, indexed)
    assert done["start_step"] >= record["saved_step"], (done, record)


@pytest.mark.slow
def test_a_full_model_dir_is_blamed_on_the_model_dir(tmp_path):
    """Training ends, the export finds its disk full: 64 naming --model-dir (not the
    checkpoint dir), and no FATAL.json to block the run once the disk is freed."""
    with mount_tmpfs(tmp_path / "disk", "256k") as disk:
        ckpt = tmp_path / "ckpt"
        trainer = _trainer(ckpt, disk / "model", 400)
        _wait_for_a_checkpoint(ckpt)
        fill(disk)  # after the up-front check wrote and removed its probe
        out, err = trainer.communicate(timeout=120)
        assert trainer.returncode == exits.FATAL_CONFIG, err[-3000:]
        (line,) = _exit_lines(out + err, 64)
        assert "(--model-dir)" in line and str(disk / "model") in line, line
        assert "No space left on device" in line, line
        assert not (ckpt / "FATAL.json").exists()
        assert ledger_lib.read(str(ckpt))[-1]["exit_code"] == 64


def test_a_read_only_tensorboard_dir_from_vertex_fails_before_training(tmp_path, read_only_dir):
    """AIP_TENSORBOARD_LOG_DIR on a read-only mount: the supervisor's checks say so in
    one line naming the variable, exit 64 in seconds, without starting TensorFlow."""
    ro = read_only_dir
    env = {"AIP_TENSORBOARD_LOG_DIR": str(ro / "tb")}
    started = time.monotonic()
    proc = _trainer(tmp_path / "ckpt", tmp_path / "model", 100, env=env, supervised=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == exits.FATAL_CONFIG, err[-3000:]
    assert time.monotonic() - started < 15
    (line,) = _exit_lines(out + err, 64)
    assert f"AIP_TENSORBOARD_LOG_DIR '{ro / 'tb'}' is not writable: Read-only" in line
    assert "Traceback" not in out + err
    assert not (tmp_path / "ckpt" / "FATAL.json").exists()
    assert not list(tmp_path.glob("ckpt/ckpt-*"))


@pytest.mark.slow
def test_the_next_holder_removes_what_cut_saves_left(tmp_path):
    """A killed save's temp folder, data files without an index and old temp files are
    removed once the next run holds the dir; complete checkpoints are kept."""
    ckpt = tmp_path / "ckpt"
    first = _trainer(ckpt, tmp_path / "model", 100)
    assert first.wait(timeout=120) == 0, first.stderr.read()[-3000:]
    (ckpt / "ckpt-150_temp").mkdir()
    (ckpt / "ckpt-150_temp" / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x")
    (ckpt / "ckpt-140.data-00000-of-00001").write_bytes(b"half")  # its index never came
    stale = ckpt / "attempts.json.tmp"
    stale.write_text("{")
    os.utime(stale, (time.time() - 600, time.time() - 600))
    fresh = ckpt / "FATAL.json.tmp"  # as young as another writer's write in flight
    fresh.write_text("{")
    second = _trainer(ckpt, tmp_path / "model", 200, "--lease-seconds", "600")
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err[-3000:]
    assert not (ckpt / "ckpt-150_temp").exists()
    assert not (ckpt / "ckpt-140.data-00000-of-00001").exists()
    assert not stale.exists() and fresh.exists()
    assert (ckpt / "ckpt-200.index").exists() and (ckpt / "ckpt-100.index").exists()
    assert "removed " + str(ckpt / "ckpt-150_temp") in out + err
