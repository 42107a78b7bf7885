"""A task module that creates TensorFlow objects at import trains (issue 54).

keras-io examples write their vocabularies at module level (``StringLookup``,
``TextVectorization.adapt``): the task's module starts TensorFlow's eager context when
it is imported. Before the engine configured TensorFlow and created its strategy ahead
of that import (spottrain/trainer/process_setup.py), every worker exited 1 on every
retry: "Intra op parallelism cannot be modified after initialization" with
``--threads``, "Collective ops must be configured at program startup" on 2 workers,
while ``--check`` said ok. A module without TensorFlow at import is still imported
before the gang forms (test_task_api.py's
test_a_task_that_does_not_import_leaves_fatal_json_under_the_launcher).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from trainer_helpers import REPO, env, run_module, summary, task_args

from spottrain.trainer import launch

TASK = "tests.import_time_tf:Colours"


@pytest.mark.parametrize(
    "workers, threads", [(1, "1"), (1, None), (2, "1"), (2, None)],
    ids=["1-worker-threads", "1-worker", "2-workers-threads", "2-workers"],
)  # fmt: skip
def test_a_module_with_tensorflow_objects_at_import_trains(tmp_path, workers, threads):
    out = tmp_path / "run"
    args = task_args(out, TASK, train_steps=30, threads=threads)
    if workers == 1:
        proc, _ = run_module("spottrain.trainer.task", args)
        assert proc.returncode == 0, proc.stderr[-3000:]
    else:
        result = launch.ProcessLauncher(workers, args).run()
        assert result.code == 0, result
    s = summary(out)
    assert s["final_step"] == 30 and s["num_workers"] == workers, s
    assert "model.keras" in s["exported"], s


def test_check_says_ok_and_the_run_agrees(tmp_path):
    """--check imports the module after the run's own TensorFlow settings (--threads)."""
    args = task_args(tmp_path, TASK, train_steps=30, threads="1")
    proc, _ = run_module("spottrain.trainer.task", ["--check", *args])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "check ok: task tests.import_time_tf:Colours" in proc.stdout


PRELOAD = """
import sys
from spottrain.trainer import task_loader
from tensorflow.python.eager import context
print(task_loader.preload("examples.regression:Regression", "{}"))
print(task_loader.preload("tests.import_time_tf:Colours", "{}"))
print("tests.import_time_tf" in sys.modules, context.context()._initialized)
"""


def test_only_a_module_that_starts_tensorflow_waits_for_the_set_up():
    """Any other module is imported (and a broken one refused) before the gang forms;
    this one is stopped at its first TensorFlow object, with TensorFlow not started."""
    proc = subprocess.run(
        [sys.executable, "-c", PRELOAD], cwd=REPO, env=env(), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["True", "False", "False", "False"], proc.stdout
