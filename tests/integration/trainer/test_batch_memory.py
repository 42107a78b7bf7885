"""A batch whose input fits but whose step does not is one fatal line (issue 42, 4).

The input check (two decoded batches against the memory available) let
``--batch-size-per-replica`` values through whose first step then grew the process
until the kernel's OOM killer ended it: exit 137, retryable, no line. Here the
trainer runs in a memory cgroup of 3 GiB (a pod's limit), so that without the check
only it is killed.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from memory_cgroup import limited
from trainer_helpers import REPO, env, error_lines

from spottrain import exits

LIMIT = 3 * 2**30


def test_a_step_that_cannot_fit_is_one_fatal_line_before_it_runs(digits_dir, tmp_path):
    # 32x32x3 uint8 images: 3 KiB an example. An eighth of a GiB of them passes the
    # input check (two batches, 0.25 GiB, in what is left of 3 GiB once TensorFlow is
    # loaded); the small CNN's first convolution writes 128 KiB of float32 for each,
    # which its pooling reads while writing 32 KiB: 6.7 GiB for the batch, beyond the
    # whole limit.
    batch = 2**27 // (32 * 32 * 3)
    argv = [
        sys.executable, "-m", "spottrain.trainer.task", "--backbone", "small_cnn",
        "--weights", "none", "--train-steps", "2", "--image-dir", str(digits_dir),
        "--image-size", "32", "--batch-size-per-replica", str(batch),
        "--checkpoint-dir", str(tmp_path / "ck"), "--model-dir", str(tmp_path / "m"),
    ]  # fmt: skip
    try:
        with limited(LIMIT, "spottrain-test-step-memory") as prefix:
            proc = subprocess.run(
                [*prefix, *argv], cwd=REPO, env=env(), capture_output=True, text=True,
                timeout=300,
            )  # fmt: skip
    except LookupError as e:
        pytest.skip(str(e))
    out = proc.stdout + proc.stderr
    assert proc.returncode == exits.FATAL_CONFIG, out[-3000:]
    (line,) = error_lines(proc)
    assert f"--batch-size-per-replica {batch}: a step on this worker needs at least" in line
    assert (
        "(the input and output of layer 'max_pooling2d' for" in line
        and "of memory available; lower it" in line
    ), line
    assert "Traceback" not in out and "step 1/" not in out
    (record,) = json.loads((tmp_path / "ck" / "attempts.json").read_text())["attempts"]
    assert record["outcome"] == "fatal_config"
