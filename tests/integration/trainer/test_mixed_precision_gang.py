"""``mixed_float16`` on a gang (issue 54): no hang; a resume ends as an uninterrupted run.

The task (tests/mixed_precision_task.py) makes the first worker's float16 gradients
overflow at steps 5 and 120 while the others' stay finite. Before the fix every
``LossScaleOptimizer`` judged its own replica's gradients: the worker that overflowed
skipped the inner optimizer's apply, and with it the gradients' all-reduce the others
waited in (``keras/src/optimizers/loss_scale_optimizer.py``, ``_tf_apply`` /
``_common_apply``). The gang hung at step 5; here the watchdog's ``--hang-timeout``
then ends it (exit 171), so this test fails in about a minute instead of hanging.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from keras_io.harness import exported_weights
from trainer_helpers import ledger, summary

from spottrain import exits
from spottrain.trainer import launch

STEPS, PREEMPT_AT = 200, 60
# A step of this model takes milliseconds (a save: well under a second); a busy
# machine stretches that a hundredfold, not to a minute. Old code hangs here for ever.
HANG_S = 60


def _args(out, how: str) -> list[str]:
    task_args = {"overflow_steps": [5, 120]}
    extra = []
    if how == "flag":  # the engine's --mixed-precision sets the policy; the task does not
        task_args["policy"] = None
        extra = ["--mixed-precision"]
    return [
        "--task", "tests.mixed_precision_task:Task", "--task-args", json.dumps(task_args),
        "--train-steps", str(STEPS), "--batch-size-per-replica", "16",
        "--save-every-steps", "100", "--log-every-steps", "50", "--threads", "1",
        "--deterministic", "--hang-timeout", str(HANG_S),
        "--checkpoint-dir", str(out / "checkpoints"), "--model-dir", str(out / "model"), *extra,
    ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "workers"), [("compiled", 2), ("compiled", 4), ("flag", 2)], ids=str
)
def test_mixed_float16_gang_overflowing_on_one_worker_trains_and_resumes_exactly(
    tmp_path, how, workers
):
    """A compiled mixed_float16 policy (or --mixed-precision): 200 steps, SIGTERM + retry."""
    clean = launch.ProcessLauncher(workers, _args(tmp_path / "clean", how)).run()
    assert clean.code == 0, clean  # 171 (the watchdog) on the old code: the gang hung
    s = summary(tmp_path / "clean")
    assert s["final_step"] == STEPS and s["num_workers"] == workers, s

    args = _args(tmp_path / "hit", how)
    first = launch.ProcessLauncher(
        workers, args, preempt_at_step=PREEMPT_AT, signal_name="TERM", seed=0
    ).run()
    assert set(first.worker_codes.values()) == {exits.PREEMPTED}, first
    rec = ledger(tmp_path / "hit")[0]
    assert rec["outcome"] == "preempted" and rec["steps_lost"] == 0, rec
    assert 0 < rec["saved_step"] < 120, rec  # the second overflow comes after the resume
    second = launch.ProcessLauncher(workers, args).run()
    assert second.code == 0, second
    assert summary(tmp_path / "hit")["final_step"] == STEPS

    hit, ref = exported_weights(tmp_path / "hit/model"), exported_weights(tmp_path / "clean/model")
    assert hit.keys() == ref.keys() and hit, (hit.keys(), ref.keys())
    for key in hit:  # the model's weights and the optimizer's, the loss scale's state too
        np.testing.assert_array_equal(hit[key], ref[key], err_msg=key)
