"""What a fit user's compile() asks for (issue 54), through the real trainer.

With ``use_ema=True`` the export is the moving averages: fit ends with
``optimizer.finalize_variable_values`` (``keras/src/backend/tensorflow/trainer.py``,
``TensorFlowTrainer.fit``); the engine does it after its final save, so the checkpoint
keeps the raw weights (exact resume) and the export holds the EMA ones. Before: the
export was the raw weights. ``run_eagerly=True`` is refused in one line.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from keras_io.harness import exported_weights
from trainer_helpers import error_lines, run_module, summary

from spottrain import exits
from spottrain.trainer import launch

STEPS = 40


def _checkpointed(ckpt_dir, task_args):
    """The raw weights and the optimizer's averages the final checkpoint holds."""
    import tensorflow as tf
    from fit_end_tasks import Regression

    model = Regression(task_args, None).model()
    model.optimizer.build(model.trainable_variables)
    tf.train.Checkpoint(model=model, optimizer=model.optimizer).read(
        f"{ckpt_dir}/ckpt-{STEPS}"
    ).expect_partial()
    averages = model.optimizer._model_variables_moving_average
    return [v.numpy() for v in model.trainable_variables], [v.numpy() for v in averages]


@pytest.mark.slow
def test_use_ema_exports_the_averages_as_fit_leaves_them_and_checkpoints_keep_raw(tmp_path):
    task_args = {"use_ema": True}
    args = [
        "--task", "tests.fit_end_tasks:Regression", "--task-args", json.dumps(task_args),
        "--train-steps", str(STEPS), "--batch-size-per-replica", "16",
        "--save-every-steps", "100", "--threads", "1",
        "--checkpoint-dir", str(tmp_path / "ck"), "--model-dir", str(tmp_path / "model"),
    ]  # fmt: skip
    assert launch.ProcessLauncher(2, args).run().code == 0
    assert summary(tmp_path)["final_step"] == STEPS
    raw, averages = _checkpointed(tmp_path / "ck", task_args)
    exported = exported_weights(tmp_path / "model")
    # model.keras's weights: layers/dense/vars/0 (kernel), /1 (bias), then dense_1's.
    weights = [exported[k] for k in sorted(exported) if k.startswith("layers/")]
    assert len(weights) == len(averages) == len(raw) == 4, sorted(exported)
    for got, avg, old in zip(weights, averages, raw, strict=True):
        np.testing.assert_array_equal(got, avg)  # the averages, exactly
        assert not np.array_equal(got, old)  # not the raw weights (the old export)

    # A retry of the finished run restores the raw weights and exports the same again.
    assert launch.ProcessLauncher(2, args).run().code == 0
    again = exported_weights(tmp_path / "model")
    for key in exported:
        np.testing.assert_array_equal(again[key], exported[key], err_msg=key)


def test_run_eagerly_is_refused_by_check_in_one_line():
    compile_args = json.dumps({"compile": {"run_eagerly": True}})
    check = ["--check", "--task", "tests.fit_end_tasks:Regression", "--task-args", compile_args]
    proc, _ = run_module("spottrain.trainer.task", check)
    assert proc.returncode == exits.FATAL_CONFIG, proc.stderr[-2000:]
    (line,) = error_lines(proc)
    assert "compile(run_eagerly=True): the engine runs the model's train_step" in line, line
