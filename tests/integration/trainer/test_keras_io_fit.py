"""Public Keras 3 examples (tests/keras_io) train under the engine as under model.fit.

The same seed and the same batches (the engine's pipeline, handed to fit): each step's
loss agrees with fit's to 4 digits, so the engine's step is fit's step (the compiled
loss and optimizer, an own train_step or compute_loss, the metrics), on one worker and,
where nothing differs per replica by design, on two.
"""

from __future__ import annotations

import json
import re

import pytest
from keras_io.harness import EXAMPLES, engine_args, task
from trainer_helpers import run_module

STEPS, BATCH = 20, 16
_STEP = re.compile(r"^(?:\[chief-0\] )?step (\d+)/\d+ loss=(\S+) ", re.M)


def _fit_losses(tmp_path, name, *extra: str) -> list[float]:
    out = tmp_path / "fit.json"
    fit_args = ["--task", task(name), "--steps", str(STEPS), "--batch", str(BATCH), *extra]
    proc, _ = run_module(
        "tests.keras_io.fit_reference", [*fit_args, "--seed", "7", "--out", str(out)]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    fits = json.loads(out.read_text())["losses"]
    assert len(fits) == STEPS and fits[0] != fits[-1]  # it trained
    return fits


def _agree(log: str, fits: list[float]) -> None:
    ours = {int(s): float(v) for s, v in _STEP.findall(log)}
    assert sorted(ours) == list(range(1, STEPS + 1)), log[-2000:]
    for step, fit in enumerate(fits, start=1):
        # Our line prints 4 decimals: equal to that, or to 4 significant digits.
        assert abs(ours[step] - fit) <= max(5.1e-5, 1e-4 * abs(fit)), (step, ours[step], fit)


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES)
def test_each_steps_loss_agrees_with_model_fit(tmp_path, name):
    args = engine_args(name, tmp_path, STEPS, BATCH, "--log-every-steps", "1", "--seed", "7")
    proc, _ = run_module("spottrain.trainer.task", args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _agree(proc.stdout, _fit_losses(tmp_path, name))


@pytest.mark.slow
def test_two_workers_scale_fits_losses_as_one_does(tmp_path):
    """Two workers, half the global batch each: per-output losses with loss_weights,
    scaled for the replicas by Keras as under fit, train as fit does on one process on
    the same global batches. (No BatchNormalization or dropout in this model: those
    differ per replica by design.) On SGD, which unlike Adam or RMSprop moves twice as
    far on a gradient twice too large: a wrong scaling shows."""
    name = "ticket_classifier"
    sgd = ("--optimizer", "sgd", "--learning-rate", "0.05")
    flags = ("--log-every-steps", "1", "--seed", "7", *sgd)
    args = engine_args(name, tmp_path, STEPS, BATCH // 2, *flags)
    argv = ["--workers", "2", "--output-dir", str(tmp_path / "two"), "--", *args]
    proc, _ = run_module("spottrain.trainer.launch", argv, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    _agree(proc.stdout + proc.stderr, _fit_losses(tmp_path, name, *sgd))
