"""A NaN loss from NaN in the data says so and names it (issue 42, 4).

Before, every non-finite loss got the advice for a diverging run ("lower
--learning-rate ..."), which cannot help when the task's batches hold NaN: the
retry with a lower rate reaches the same batch and stops the same way.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from trainer_helpers import REPO, env, error_lines, run_module

from spottrain import exits

TASK = ["--task", "tests.task_fixtures:NanFeatures", "--batch-size-per-replica", "8"]


def _args(out, task_args: dict) -> list[str]:
    return [
        *TASK, "--task-args", json.dumps(task_args), "--train-steps", "20",
        "--save-every-steps", "2", "--log-every-steps", "1",
        "--checkpoint-dir", str(out / "ck"), "--model-dir", str(out / "m"),
    ]  # fmt: skip


def test_nan_features_are_named_and_the_advice_is_the_data(tmp_path):
    proc, _ = run_module("spottrain.trainer.task", _args(tmp_path, {"nan_rows": 5}))
    out = proc.stdout + proc.stderr
    assert proc.returncode == exits.FATAL_NAN, out[-3000:]
    (line,) = error_lines(proc)
    # The loss itself, or (where a fused MatMul+BiasAdd+Relu turns NaN into 0, as oneDNN
    # did on this CPU) the gradients of a finite loss: both stop at the step of the batch.
    grads = r"gradients are not finite on 1 replica \(loss [\d.]+, the weights would go NaN\)"
    what = f"(loss is nan|{grads})"
    assert re.search(what + " at step 4;", line), line
    assert "the batch of step 4 holds non-finite inputs: features column 3: 5 NaN" in line
    assert "fix the task's data" in line and "--learning-rate" not in line, line
    assert "Traceback" not in out


def test_a_peer_s_nan_rows_are_named_by_every_worker(tmp_path):
    """On 2 workers the NaN rows are all in worker 1's share of the global batch of 16:
    the chief, whose own batches are finite, names them too."""
    argv = [
        sys.executable, "-m", "spottrain.trainer.launch", "--workers", "2",
        "--output-dir", str(tmp_path / "launch"), "--",
        *_args(tmp_path, {"nan_rows": 3, "tail": True}),
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == exits.FATAL_NAN, out[-3000:]
    errors = {ln.split("]", 1)[0]: ln for ln in out.splitlines() if " ERROR trainer: exit 65" in ln}
    assert set(errors) == {"[chief-0", "[worker-0"}, out[-3000:]
    for line in errors.values():
        assert "holds non-finite inputs: features column 3: 3 NaN" in line, line


def test_check_stops_on_nan_in_the_first_batch(tmp_path):
    """--check trains one step: NaN in its batch is one line, 64, before any GPU time."""
    args = _args(tmp_path, {"nan_rows": 5, "from_step": 0})
    proc, _ = run_module("spottrain.trainer.task", ["--check", *args])
    assert proc.returncode == exits.FATAL_CONFIG, (proc.stdout + proc.stderr)[-3000:]
    (line,) = error_lines(proc)
    said = ("the task's loss is nan on the first batch", "gradients are not finite on the first")
    assert any(s in line for s in said), line
