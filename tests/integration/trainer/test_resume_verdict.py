"""--check's resume verdict against real resumes (issue 54): 2 workers, SIGTERM at a
step and a retry, against an uninterrupted run; the final checkpoints compared.

tests/resume_verdict_tasks.py says why each task used to be misjudged; the verdict
itself is unit-tested in tests/unit/trainer/test_resume_verdict.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from trainer_helpers import error_lines, ledger, run_module, task_args

from spottrain import exits
from spottrain.trainer import launch

OK = "resumes are bit-identical as far as checked"
NOT = "resumes are exact in steps but not bit-identical"


def _final(out):
    """Every variable of the final checkpoint (step 40) but its save counter."""
    reader = tf.train.load_checkpoint(str(out / "checkpoints" / "ckpt-40"))
    names = [n for n, _ in tf.train.list_variables(str(out / "checkpoints" / "ckpt-40"))]
    return {n: reader.get_tensor(n) for n in names if "save_counter" not in n}


@pytest.mark.slow
@pytest.mark.parametrize(
    "task, identical", [("ShuffledAtLoad", True), ("TfShuffledAtLoad", True), ("NoisyStep", False)]
)  # fmt: skip
def test_the_verdict_is_what_a_real_resume_does(tmp_path, task, identical):
    def args(out):
        return task_args(out, f"tests.resume_verdict_tasks:{task}", threads=1)

    proc, _ = run_module("spottrain.trainer.task", ["--check", *args(tmp_path / "check")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (OK if identical else NOT) in proc.stdout, proc.stdout[-3000:]

    hit, clean = tmp_path / "interrupted", tmp_path / "uninterrupted"
    first = launch.ProcessLauncher(
        2, args(hit), preempt_at_step=12, signal_name="TERM", seed=0
    ).run()
    assert set(first.worker_codes.values()) == {exits.PREEMPTED}, first
    assert 0 < ledger(hit)[0]["saved_step"] < 40
    assert launch.ProcessLauncher(2, args(hit)).run().code == 0
    assert launch.ProcessLauncher(2, args(clean)).run().code == 0
    resumed, uninterrupted = _final(hit), _final(clean)
    assert resumed.keys() == uninterrupted.keys()
    same = all(np.array_equal(resumed[k], uninterrupted[k]) for k in resumed)
    assert same == identical, [
        k for k in resumed if not np.array_equal(resumed[k], uninterrupted[k])
    ]


def test_deterministic_refuses_such_a_step_before_its_first_step(tmp_path):
    """The run says what --check says, in one line (64), with nothing trained."""
    args = task_args(tmp_path, "tests.resume_verdict_tasks:NoisyStep", threads=1)
    proc, _ = run_module("spottrain.trainer.task", [*args, "--deterministic"])
    assert proc.returncode == exits.FATAL_CONFIG, proc.stderr[-3000:]
    (line,) = error_lines(proc)
    assert "--deterministic: the step draws from stateful random ops (RandomStandardNormal" in line
    assert not list((tmp_path / "checkpoints").glob("ckpt-*")), "it trained"
