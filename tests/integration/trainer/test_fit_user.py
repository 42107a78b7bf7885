"""A fit user's script (tests/fit_user/script.py) and its port (tests/fit_user/task.py).

The script is plain Keras (a compiled functional model, a string loss, ``accuracy``,
NumPy arrays of scikit-learn's digits, a LearningRateScheduler, ``validation_data``,
``model.fit``) and runs under plain ``python``. Its port trains, as written, on two
workers with one preemption, each epoch's accuracy and validation on its line.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from keras_io.fit_runs import epoch_logs, gang, port_args
from trainer_helpers import env, ledger, summary

SCRIPT = Path(__file__).resolve().parents[2] / "fit_user" / "script.py"
PORT = "tests.fit_user.task:Task"
EPOCHS, BATCH, TRAIN = 6, 32, 1500  # the script's fit: epochs, batch_size, len(x_train)


@pytest.mark.slow
def test_the_script_trains_under_plain_python(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], cwd=tmp_path, env=env(), capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("val_accuracy") == EPOCHS, proc.stdout[-3000:]
    assert (tmp_path / "digits.keras").exists()


@pytest.mark.slow
def test_the_port_as_written_shows_accuracy_and_validation_each_epoch(tmp_path):
    """Its fit() on two workers, one SIGTERM in the third epoch: 6 epochs of fit's
    steps, each epoch's line with loss, accuracy, val_loss, val_accuracy and the rate
    the LearningRateScheduler set (0.001 for two epochs, then times 0.7 each)."""
    per_epoch = {TRAIN // BATCH, math.ceil(TRAIN / BATCH)}
    args = port_args(PORT, tmp_path, "--deterministic")
    first = gang(tmp_path, args, "--preempt-at-step", str(2 * min(per_epoch) + 5), "--seed", "0")
    rec = ledger(tmp_path)[0]
    assert rec["outcome"] == "preempted" and rec["steps_lost"] == 0, (rec, first[-2000:])
    second = gang(tmp_path, args)
    s = summary(tmp_path)
    assert s["final_step"] == s["train_steps"] in {EPOCHS * n for n in per_epoch}, s
    logs = epoch_logs(first + second)
    assert sorted(logs) == list(range(1, EPOCHS + 1)), (sorted(logs), second[-2000:])
    for epoch, values in logs.items():
        assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= values.keys(), (epoch, values)
        rate = values.get("learning_rate", values.get("lr"))
        assert rate is not None and math.isclose(
            rate, 1e-3 * 0.7 ** max(0, epoch - 2), rel_tol=1e-4
        )
