"""Public Keras 3 examples (tests/keras_io) train under the engine as under model.fit.

One worker, the same seed and the same batches (the engine's pipeline, handed to fit):
each step's loss agrees with fit's to 4 digits, so the engine's step is fit's step
(the compiled loss and optimizer, an own train_step or compute_loss, the metrics).
"""

from __future__ import annotations

import json
import re

import pytest
from keras_io.harness import EXAMPLES, engine_args, task
from trainer_helpers import run_module

STEPS, BATCH = 20, 16
_STEP = re.compile(r"^step (\d+)/\d+ loss=(\S+) ", re.M)


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES)
def test_each_steps_loss_agrees_with_model_fit(tmp_path, name):
    args = engine_args(name, tmp_path, STEPS, BATCH, "--log-every-steps", "1", "--seed", "7")
    proc, _ = run_module("spottrain.trainer.task", args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ours = {int(s): float(v) for s, v in _STEP.findall(proc.stdout)}
    assert sorted(ours) == list(range(1, STEPS + 1)), proc.stdout[-2000:]

    out = tmp_path / "fit.json"
    fit_args = ["--task", task(name), "--steps", str(STEPS), "--batch", str(BATCH)]
    proc, _ = run_module(
        "tests.keras_io.fit_reference", [*fit_args, "--seed", "7", "--out", str(out)]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    fits = json.loads(out.read_text())["losses"]
    assert len(fits) == STEPS
    for step, fit in enumerate(fits, start=1):
        # Our line prints 4 decimals: equal to that, or to 4 significant digits.
        assert abs(ours[step] - fit) <= max(5.1e-5, 1e-4 * abs(fit)), (step, ours[step], fit)
    assert fits[0] != fits[-1]  # it trained
