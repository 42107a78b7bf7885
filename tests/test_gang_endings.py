"""How a gang of workers ends: real processes under ``spottrain.trainer.launch``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_workers_exit_within_seconds_of_their_last_save(digits_dir, tmp_path):
    """After the last save a worker evaluates, exports and exits: seconds, not the
    ~15 s (2 workers, 150 steps) to ~40 s (3 workers, 300 steps) that interpreter
    shutdown spent freeing the training iterator behind tf.data's autotuning thread."""
    cmd = [
        sys.executable, "-m", "spottrain.trainer.launch", "--workers", "2", "--",
        "--image-dir", digits_dir, "--backbone", "small_cnn", "--weights", "none",
        "--image-size", "32", "--batch-size-per-replica", "16", "--train-steps", "150",
        "--save-every-steps", "1000", "--log-every-steps", "50",
        "--checkpoint-dir", str(tmp_path / "ckpt"), "--model-dir", str(tmp_path / "model"),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": REPO, "PYTHONUNBUFFERED": "1"}
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
    gaps = {name: ended - at for name, at in saved.items()}
    assert max(gaps.values()) < 8, gaps  # evaluation and export included (~1.3 s here)
