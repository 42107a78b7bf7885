"""--check's resume verdict, right both ways (issue 54); real resumes agree with it in
tests/integration/trainer/test_resume_verdict.py.

Before: an unseeded NumPy shuffle in examples() was "not bit-identical" (the probe
built both pipelines in one process, the second after the first's draws), and a
train_step drawing from tf.random.normal was "resumes reproduce the batches" (the
probe read batches only).
"""

from __future__ import annotations

import pytest

from spottrain.trainer import check

OK = "resumes are bit-identical as far as checked: the batches of steps 4-7"
NOT = "resumes are exact in steps but not bit-identical: "


def _verdict(capsys, task: str, *extra: str) -> str:
    argv = ["--task", f"tests.resume_verdict_tasks:{task}", "--batch-size-per-replica", "16",
            "--train-steps", "40", *extra]  # fmt: skip
    code = check.run(argv)
    out = capsys.readouterr().out
    assert code == 0, out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("check ok: ")]
    return line


@pytest.mark.parametrize("task", ["ShuffledAtLoad", "SeededNoisyStep"])
def test_resumes_that_are_bit_identical_are_said_to_be(capsys, task):
    line = _verdict(capsys, task)
    assert OK in line and NOT not in line, line
    assert "the traced step holds no stateful random op" in line, line


def test_a_step_drawing_from_stateful_random_ops_is_not_bit_identical(capsys):
    line = _verdict(capsys, "NoisyStep")
    assert NOT + "the step draws from stateful random ops (RandomStandardNormal" in line, line
    assert "keras.random.SeedGenerator" in line, line


def test_deterministic_refuses_it_in_one_line(caplog):
    argv = ["--task", "tests.resume_verdict_tasks:NoisyStep", "--batch-size-per-replica", "16",
            "--train-steps", "40", "--deterministic"]  # fmt: skip
    # Not public: tensorflow/python/framework/config.py, disable_op_determinism.
    from tensorflow.python.framework import config as tf_config

    try:
        assert check.run(argv) == 64
    finally:  # --deterministic turned TensorFlow's op determinism on for this process
        tf_config.disable_op_determinism()
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert line.startswith("check failed: --deterministic: the step draws from stateful"), line
