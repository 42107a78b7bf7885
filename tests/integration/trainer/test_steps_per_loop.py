"""Several steps per compiled call (``--steps-per-loop``) and XLA (``--jit-compile``).

Real trainer processes on CPU: the vote is taken inside the loop, so every worker
still stops and saves at the same step, and the steps are the same computation as
one step per call (bit-identical weights).
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from trainer_helpers import error_lines, ledger, run_module, tiny_args

from spottrain import exits
from spottrain.tasks.image import model as _model  # noqa: F401 - registers Preprocess for load_model
from spottrain.trainer import launch

REGRESSION = ["--task", "examples.regression:Regression", "--train-steps", "30",
              "--batch-size-per-replica", "16", "--threads", "1"]  # fmt: skip


def _weights(out):
    return keras.models.load_model(out / "model" / "model.keras").get_weights()


# The interval save comes late: the injected SIGTERM follows the step log lines, which a
# loaded machine (two test workers) hands over seconds late, and a notice that lands
# after the interval save cannot be told from it.
NOTICE_RUN = dict(train_steps=150, save_every_steps=125, batch_size_per_replica=16)


@pytest.fixture(scope="module")
def uninterrupted(digits_dir, tmp_path_factory):
    """The weights of an uninterrupted 2-worker run of one step per call (run once)."""
    clean = tmp_path_factory.mktemp("clean")
    assert launch.ProcessLauncher(2, tiny_args(digits_dir, clean, **NOTICE_RUN)).run().code == 0
    return _weights(clean)


@pytest.mark.slow
@pytest.mark.parametrize("steps_per_loop", ["1", "7", "auto"])  # 1: a step run ahead
def test_a_notice_inside_a_loop_saves_the_same_step_everywhere_and_resumes_exactly(
    digits_dir, tmp_path, steps_per_loop, uninterrupted
):
    """2 workers, SIGTERM mid-run: both save the same step, at most one call (one step
    a call: the step run ahead) after the notice, 0 lost; the resumed run ends with
    the weights of an uninterrupted run of one step per call."""
    steps, hit = NOTICE_RUN, tmp_path / "hit"
    looped = tiny_args(digits_dir, hit, steps_per_loop=steps_per_loop, **steps)
    first = launch.ProcessLauncher(2, looped, preempt_at_step=22, signal_name="TERM", seed=0).run()
    assert set(first.worker_codes.values()) == {exits.PREEMPTED}, first
    rec = ledger(hit)[0]
    assert rec["outcome"] == "preempted" and rec["steps_lost"] == 0, rec
    assert rec["saved_step"] == rec["last_step"] >= first.chaos["step"], (rec, first.chaos)
    assert rec["saved_step"] < 125, rec  # the notice's save, not the interval's
    again = launch.ProcessLauncher(2, looped).run()
    assert again.code == 0, again
    assert ledger(hit)[1]["start_step"] == rec["saved_step"]
    for a, b in zip(uninterrupted, _weights(hit), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_a_loop_stops_at_the_first_non_finite_step(digits_dir, tmp_path):
    """The NaN guard inside a loop names the same step as one step per call."""
    steps = {}
    for n in (1, 16):
        out = tmp_path / f"n{n}"
        args = tiny_args(
            digits_dir, out, mixed_precision=True, learning_rate=5.0, train_steps=30,
            save_every_steps=100, log_every_steps=1, steps_per_loop=n,
        )  # fmt: skip
        proc, _ = run_module("spottrain.trainer.task", args)
        assert proc.returncode == exits.FATAL_NAN, proc.stdout[-3000:]
        (line,) = error_lines(proc)
        steps[n] = int(line.split(" at step ")[1].split(";")[0])
    assert steps[1] == steps[16], steps


def test_xla_trains_and_an_op_it_cannot_compile_is_one_line(tmp_path):
    """--jit-compile on (XLA runs on CPU too) trains the example task; a model with an
    op XLA has no kernel for is refused in one line naming the op, exit 64."""
    out = tmp_path / "ok"
    flags = ["--checkpoint-dir", str(out / "ck"), "--model-dir", str(out / "m")]
    proc, _ = run_module(
        "spottrain.trainer.task", [*REGRESSION, "--jit-compile", "on", "--steps-per-loop", "4",
                                   *flags],
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    bad = tmp_path / "bad"
    flags = ["--checkpoint-dir", str(bad / "ck"), "--model-dir", str(bad / "m")]
    args = [*REGRESSION, "--task", "tests.task_fixtures:HostOpInModel", "--jit-compile", "on"]
    proc, _ = run_module("spottrain.trainer.task", [*args, *flags])
    assert proc.returncode == exits.FATAL_CONFIG, proc.stdout[-3000:]
    (line,) = error_lines(proc)
    assert "--jit-compile on: XLA cannot compile the training step: op PyFunc" in line, line
    assert line.endswith("run with --jit-compile off"), line
    check, _ = run_module("spottrain.trainer.task", [*args, "--check"])  # the same line
    assert check.returncode == exits.FATAL_CONFIG, check.stdout[-3000:]
    (checked,) = error_lines(check)
    assert checked.split("check failed: ")[1] == line.split("exit 64: ")[1], (checked, line)
    proc, _ = run_module("spottrain.trainer.task", [*args[:-1], "off", *flags[:1],
                                                    str(bad / "ck2"), *flags[2:]])  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
