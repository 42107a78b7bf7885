"""What fit leaves behind (issue 54): with ``use_ema=True`` the export is the moving averages.

fit ends with ``optimizer.finalize_variable_values`` (``keras/src/backend/tensorflow/
trainer.py``, ``TensorFlowTrainer.fit``); the engine does it after its final save, so
the checkpoint keeps the raw weights (exact resume) and the export holds the EMA ones.
Before: the export was the raw weights.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from keras_io.harness import exported_weights
from trainer_helpers import summary

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
    kernels = [exported[k] for k in sorted(exported) if k.startswith("layers/dense")]
    assert len(kernels) == len(averages) == 4, sorted(exported)
    by_shape = sorted(kernels, key=lambda a: (a.shape, a.ravel()[0]))
    assert not any(np.array_equal(a, r) for a in kernels for r in raw)  # not the raw weights
    for avg in sorted(averages, key=lambda a: (a.shape, a.ravel()[0])):
        assert any(np.array_equal(avg, e) for e in by_shape), avg  # the averages, exactly

    # A retry of the finished run restores the raw weights and exports the same again.
    assert launch.ProcessLauncher(2, args).run().code == 0
    again = exported_weights(tmp_path / "model")
    for key in exported:
        np.testing.assert_array_equal(again[key], exported[key], err_msg=key)
