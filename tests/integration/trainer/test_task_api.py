"""The Task API: the docs' example task (docs/task-api.md) gets the engine's whole contract."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
from trainer_helpers import error_lines, ledger, run_module, summary

from spottrain import exits
from spottrain.trainer import launch

REGRESSION = ["--task", "examples.regression:Regression", "--task-args", '{"features": 8}']


KERAS = ["--task", "examples.keras_classifier:Classifier"]


TWO = ["--task", "examples.two_optimizers:TwoOptimizers"]


def _args(out, task=REGRESSION, **flags):
    args = [
        *task,
        "--train-steps", "240", "--batch-size-per-replica", "16", "--save-every-steps", "100",
        "--learning-rate", "0.01",
        "--log-every-steps", "5", "--threads", "1",
        "--checkpoint-dir", str(out / "checkpoints"), "--model-dir", str(out / "model"),
    ]  # fmt: skip
    for key, value in flags.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    return args


def _weights(out):
    model = keras.models.load_model(out / "model" / "model.keras", compile=False)
    return model.get_weights()


@pytest.mark.slow
@pytest.mark.parametrize(
    "task", [REGRESSION, KERAS, TWO], ids=["own-loss", "keras-adapter", "own-step"]
)
def test_a_user_task_gets_the_whole_contract_under_two_workers(tmp_path, task):
    """SIGTERM mid-run: every worker saves the same step, 0 lost; the resume ends at
    exactly the final step with the weights of an uninterrupted run (--deterministic:
    the resume probe passes and TensorFlow's op determinism is on)."""
    task = [*task, "--deterministic"]
    hit = tmp_path / "interrupted"
    first = launch.ProcessLauncher(
        2, _args(hit, task), preempt_at_step=60, signal_name="TERM", seed=0
    ).run()
    assert set(first.worker_codes.values()) == {exits.PREEMPTED}, first
    rec = ledger(hit)[0]
    assert rec["outcome"] == "preempted" and rec["steps_lost"] == 0, rec
    assert rec["saved_step"] == rec["last_step"] >= first.chaos["step"]
    second = launch.ProcessLauncher(2, _args(hit, task)).run()
    assert second.code == 0, second
    assert ledger(hit)[1]["start_step"] == rec["saved_step"]
    s = summary(hit)
    assert s["final_step"] == s["train_steps"] == 240 and s["num_workers"] == 2
    if task[:2] != KERAS:
        assert s["val_mse"] < 0.5, s  # it learned: the targets' variance is ~8

    clean = tmp_path / "uninterrupted"
    assert launch.ProcessLauncher(2, _args(clean, task)).run().code == 0
    for a, b in zip(_weights(hit), _weights(clean), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("task", ["Unseeded", "IgnoresStart"])
def test_deterministic_refuses_batches_a_resume_would_not_reproduce(tmp_path, task):
    """Without --deterministic the check only says so; with it, the check and the run
    refuse at once (one line, exit 64), before any step or checkpoint."""
    argv = ["--task", f"tests.task_fixtures:{task}", *_args(tmp_path)[2:]]
    proc, _ = run_module("spottrain.trainer.task", ["--check", *argv])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "resumes are exact in steps but not bit-identical: the batch of step 4" in proc.stdout
    named = "--deterministic: the batch of step 4 differs when the pipeline starts at step 3"
    for extra in (["--check"], []):
        proc, _ = run_module("spottrain.trainer.task", [*extra, *argv, "--deterministic"])
        assert proc.returncode == exits.FATAL_CONFIG, proc.stderr[-2000:]
        (line,) = error_lines(proc)
        assert named in line, line
    assert not list((tmp_path / "checkpoints").glob("ckpt-*")), "it trained"


@pytest.mark.slow
def test_the_docs_task_trains_through_a_preemption_from_the_docs_alone(tmp_path, monkeypatch):
    page = (Path(__file__).resolve().parents[3] / "docs" / "task-api.md").read_text()
    code = re.search(r"```python\n(# my_tasks\.py.*?)```", page, re.S).group(1)
    (tmp_path / "my_tasks.py").write_text(code)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    out = tmp_path / "run"
    args = ["--task", "my_tasks:Regression", "--train-steps", "150",
            "--batch-size-per-replica", "16", "--save-every-steps", "1000", "--threads", "1",
            "--checkpoint-dir", str(out / "checkpoints"),
            "--model-dir", str(out / "model")]  # fmt: skip
    first = launch.ProcessLauncher(2, args, preempt_at_step=40, signal_name="TERM", seed=0).run()
    assert set(first.worker_codes.values()) == {exits.PREEMPTED}, first
    rec = ledger(out)[0]
    assert rec["outcome"] == "preempted" and rec["steps_lost"] == 0, rec
    assert launch.ProcessLauncher(2, args).run().code == 0
    assert ledger(out)[1]["start_step"] == rec["saved_step"]
    assert summary(out)["final_step"] == 150


@pytest.mark.parametrize(
    "task, args, named",
    [
        (
            "no_such_module:Task",
            "{}",
            "--task 'no_such_module:Task': cannot import 'no_such_module'",
        ),
        ("tests.task_fixtures:Missing", "{}", "'tests.task_fixtures' has no 'Missing'"),
        (
            "tests.task_fixtures:NotATask",
            "{}",
            "is not a subclass of spottrain.trainer.task_api.Task",
        ),
        ("tests.task_fixtures:NoLoss", "{}", "does not implement loss"),
        ("tests.task_fixtures:KerasNoExamples", "{}", "does not implement examples"),
        ("tests.task_fixtures:KerasUncompiled", "{}", "model() must return a compiled model"),
        ("tests.task_fixtures", "{}", "expected <module>:<Class>"),
        ("examples.regression:Regression", "{bad", "--task-args '{bad' is not JSON"),
        ("examples.regression:Regression", "[1]", "must be a JSON object"),
        ("examples.regression:Regression", '{"featurez": 3}', "unknown ['featurez']"),
        ("tests.task_fixtures:PrepareBreaks", "{}", "prepare() raised KeyError: 'columns'"),
        ("", '{"a": 1}', "the image classifier has no setting a"),
        ("", '{"image_size": "big"}', "--image-size 'big' must be an integer"),
        ("", '{"backbone": "vgg"}', "--backbone 'vgg' is unknown"),
        (
            "tests.task_fixtures:BuildBreaks",
            "{}",
            "build_model() raised RuntimeError: no such layer",
        ),
        (
            "tests.task_fixtures:WrongShapes",
            "{}",
            "the task's batches do not fit its model at step 1",
        ),
        (
            "tests.task_fixtures:RunsOut",
            "{}",
            "the task's train_dataset() ended before step 5 of 10",
        ),
    ],
)
def test_a_bad_task_is_one_line_and_exit_64(tmp_path, task, args, named):
    argv = ["--task", task, "--task-args", args, "--train-steps", "10", "--checkpoint-dir",
            str(tmp_path / "c"), "--model-dir", str(tmp_path / "m")]  # fmt: skip
    if not task:
        argv[:2] = ["--image-dir", str(tmp_path)]
    proc, _ = run_module("spottrain.trainer.task", argv)
    assert proc.returncode == exits.FATAL_CONFIG, proc.stderr[-2000:]
    (line,) = error_lines(proc)
    assert named in line, line
    assert "Traceback" not in proc.stderr
    fatal = json.loads((tmp_path / "c" / "FATAL.json").read_text())
    assert named in fatal["error"] and fatal["exit_code"] == exits.FATAL_CONFIG


@pytest.mark.slow
def test_a_user_task_through_the_gke_pipeline_under_kfp_local(tmp_path, monkeypatch):
    """The shipped pipeline's task parameters: KFP's retry resumes the user's task after
    the injected SIGTERM and ends at exactly the final step."""
    from spottrain.pipelines import local

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[3]))
    result = local.run_local(
        tmp_path, workers=2, preempt_at_step=30, train_steps=80, limit=50, retries=2,
        task="examples.regression:Regression", task_args='{"features": 4}',
        learning_rate=0.01, steps_per_loop="7", jit_compile="off", log=tmp_path / "run.log",
    )  # fmt: skip
    assert result.ok, result.report()
    # The loop's pipeline parameters reached both workers of both attempts (the
    # profile task times one step a call: its total is its window's).
    lines = (tmp_path / "run.log").read_text().splitlines()
    starts = [ln for ln in lines if "start_step=" in ln and "total_steps=80 " in ln]
    assert len(starts) == 4 and all("steps_per_loop=7 xla=off" in ln for ln in starts), starts
    assert result.retries == {"train": 1}
    outcomes = [(a["outcome"], a["exit_code"], a["steps_lost"]) for a in result.attempts]
    assert outcomes == [("preempted", 143, 0), ("success", 0, 0)], outcomes
    assert result.summary["final_step"] == 80 and "val_mse" in result.summary


@pytest.mark.parametrize(
    "task, ok",
    [
        (REGRESSION, "task examples.regression:Regression builds a model of 321 parameters"),
        (KERAS, "task examples.keras_classifier:Classifier builds a model of 99 parameters"),
        (
            TWO,
            "task examples.two_optimizers:TwoOptimizers builds a model of 321 parameters and 2 "
            "optimizers",
        ),
        (["--task", "tests.task_fixtures:WrongShapes"], None),
    ],
    ids=["own-loss", "keras-adapter", "own-step", "wrong-shapes"],
)
def test_check_builds_one_batch_and_writes_nothing(tmp_path, task, ok):
    proc, seconds = run_module(
        "spottrain.trainer.task", ["--check", *task, *_args(tmp_path)[len(task) :]]
    )
    if ok:
        assert proc.returncode == 0, proc.stderr[-2000:]
        (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("check ok: ")]
        assert ok in line and "a batch of 16 fits it" in line
    else:
        assert proc.returncode == exits.FATAL_CONFIG
        (line,) = error_lines(proc)
        assert (
            "check failed: the task's batches do not fit its model at step 1 (the model from "
            "build_model() raised ValueError: Input 0" in line
        )
    assert not list(tmp_path.iterdir()), "a check wrote something"


def test_check_needs_no_train_steps(tmp_path):
    """``--check`` runs one step: the run's length is no business of it."""
    proc, _ = run_module("spottrain.trainer.task", ["--check", *TWO])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "check ok: task examples.two_optimizers:TwoOptimizers builds" in proc.stdout


def test_check_of_the_built_in_image_task(tmp_path, digits_dir):
    args = ["--check", "--image-dir", digits_dir, "--backbone", "small_cnn", "--weights", "none",
            "--image-size", "32", "--train-steps", "10", "--checkpoint-dir",
            str(tmp_path / "c"), "--model-dir", str(tmp_path / "m")]  # fmt: skip
    proc, _ = run_module("spottrain.trainer.task", args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "check ok: task spottrain.tasks.image.task:ImageClassificationTask builds" in proc.stdout
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "task, flags, named",
    [
        (TWO[1], ["--mixed-precision"], "--clip-norm and --mixed-precision belong to the engine"),
        ("tests.task_fixtures:UnbuiltOptimizers", [], "build encoder, head on their variables"),
    ],
)
def test_an_own_step_refuses_what_it_cannot_honour(tmp_path, task, flags, named):
    argv = ["--task", task, *flags, "--train-steps", "10", "--checkpoint-dir",
            str(tmp_path / "c"), "--model-dir", str(tmp_path / "m")]  # fmt: skip
    proc, _ = run_module("spottrain.trainer.task", argv)
    assert proc.returncode == exits.FATAL_CONFIG, proc.stderr[-2000:]
    (line,) = error_lines(proc)
    assert named in line, line


def test_a_checkpoint_dir_refuses_another_task_or_other_task_args(tmp_path):
    first, _ = run_module("spottrain.trainer.task", _args(tmp_path, train_steps=10))
    assert first.returncode == 0, first.stderr[-2000:]
    other = ["--task", "examples.regression:Regression", "--task-args", '{"features": 4}']
    proc, _ = run_module("spottrain.trainer.task", _args(tmp_path, other, train_steps=20))
    assert proc.returncode == exits.FATAL_CONFIG, proc.stderr[-2000:]
    (line,) = error_lines(proc)
    assert "holds a different run (task_args: {'features': 8} -> {'features': 4})" in line


def test_a_user_package_named_trainer_does_not_clash_with_the_engine(tmp_path):
    """Vertex AI's Python-package convention names the user's package ``trainer``
    (``python -m trainer.task``); the engine is ``spottrain.trainer``, so a user's
    ``trainer`` imports as theirs, beside the engine, and trains."""
    pkg = tmp_path / "user" / "trainer"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "task.py").write_text(
        "from examples.regression import Regression\n\n\nclass Mine(Regression):\n    pass\n"
    )
    user = {"PYTHONPATH": str(tmp_path / "user")}
    out = tmp_path / "run"
    task = ["--task", "trainer.task:Mine", "--task-args", '{"features": 8}']
    flags = [*task, *_args(out, task, train_steps=20)[len(task) :]]
    proc, _ = run_module("spottrain.trainer.task", ["--check", *flags], extra_env=user)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "check ok: task trainer.task:Mine builds a model of 321 parameters" in proc.stdout
    proc, _ = run_module("spottrain.trainer.task", flags, extra_env=user)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert summary(out)["final_step"] == 20


def test_the_pre_flight_skips_a_task_it_cannot_import_and_says_so():
    from spottrain.pipelines import task_check

    note = task_check.check_task({"task": "only_in_my_image.tasks:Mine"})
    assert "'only_in_my_image.tasks:Mine' is not importable here" in note
    assert "--check" in note
    assert task_check.check_task({"task": ""}) is None  # the built-in task: nothing to do
    ok = {"task": REGRESSION[1], "task_args": REGRESSION[3], "batch_size_per_replica": 8}
    assert task_check.check_task(ok) is None


def test_the_readme_task_passes_the_readme_check_command(tmp_path):
    """The README's KerasTask and its ``--check`` line, as a user pastes them."""
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    code = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "KerasTask" in b)
    line = next(
        ln.split("  #", 1)[0]
        for b in re.findall(r"```sh\n(.*?)```", readme, re.S)
        for ln in b.splitlines()
        if ln.startswith("python -m spottrain.trainer.task --check")
    )
    (tmp_path / "my_tasks.py").write_text(code)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    argv = [sys.executable, *shlex.split(line)[1:]]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "check ok: task my_tasks:Classifier" in proc.stdout, proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my_tasks.py"], "it wrote something"
    broken = code.replace("keras.Input((2,))", "keras.Input((3,))")  # the model no longer fits
    (tmp_path / "my_tasks.py").write_text(broken)
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == exits.FATAL_CONFIG, proc.stderr[-2000:]


# Issue 29, item 4: each mistake in a task's code, as --check and a run report it: one
# line naming the task's method and the real error (not an engine source line), exit 64.
MISTAKES = [
    ("OptimizersList", "the task's build_optimizers() must return a dict of Keras optimizers "
     "by name (e.g. {'encoder': sgd, 'head': adam}) or None, got list"),
    ("StepShapeBug", "the task's train_step() failed at step 1 (ValueError: Dimensions must be "
     "equal, but are 16 and 3"),
    ("StepIndexBug", "the task's train_step() failed at step 1 (InvalidArgumentError: "
     "indices[0] = 99 is not in [0, 16)"),
    ("ModelNone", "the task's build_model() must return a keras.Model, got None"),
    ("LossPerClass", "the task's loss() must return one value per example (shape [16]), "
     "got shape [16, 3]"),
    ("LossInt", "the task's loss() must return float losses (one per example), got int32"),
    ("StringFeatures", "the task's batches do not fit its model at step 1 (the model from "
     "build_model() raised UnimplementedError: Cast string to float is not supported)"),
    ("DatasetList", "the task's train_dataset() must return a tf.data.Dataset of "
     "(features, labels), got list"),
    ("FeaturesOnly", "the task's train_dataset() must return a tf.data.Dataset of "
     "(features, labels); its elements are single tensors (float32, shape [16, 8])"),
    ("KerasUnequalArrays", "KerasUnequalArrays.examples() must give what model.fit takes: "
     "arrays of one length, not "),
    ("KerasStepNoLoss", "the model's train_step() must return its loss as model.fit logs it: "
     "a dict with a 'loss' (or '..._loss') entry, got {'acc'}"),
    # Issue 57: a KerasTask's lines name the methods its author wrote, not the engine's.
    ("KerasModelRaises", "KerasModelRaises.model() raised ValueError: no such layer 'Dense3'"),
    ("KerasModelNotModel", "KerasModelNotModel.model() must return a keras.Model, got int"),
    ("KerasExamplesRaise", "KerasExamplesRaise.examples() raised FileNotFoundError: "
     "gs://my-bucket/train.csv"),
    ("KerasEmptyArrays", "KerasEmptyArrays.examples() gave no examples (an empty array or "
     "dataset)"),
    ("KerasEmptyFiltered", "KerasEmptyFiltered.examples() gave no batch for step 1: it is "
     "empty, or holds fewer examples than one global batch of 16"),
    ("broken_import:Broken", "--task 'broken_import:Broken': importing 'broken_import' raised "
     "KeyError: 'MY_TASK_SETTING' ({dir}/broken_import.py, line 4)"),
]  # fmt: skip


BROKEN_IMPORT = """import os

# A setting the user's image has and this environment lacks:
SETTING = os.environ["MY_TASK_SETTING"]
"""


@pytest.mark.parametrize("task, named", MISTAKES, ids=[m[0].split(":")[0] for m in MISTAKES])
def test_each_mistake_in_a_task_is_one_line_naming_it_in_check_and_in_a_run(tmp_path, task, named):
    """``--check`` (given no --train-steps: it needs none) runs what a run runs, so both
    name the same mistake in the same line; the run records it in FATAL.json."""
    (tmp_path / "broken_import.py").write_text(BROKEN_IMPORT)
    user = {"PYTHONPATH": str(tmp_path)}
    spec = task if ":" in task else f"tests.task_fixtures:{task}"
    named = named.replace("{dir}", str(tmp_path))
    flags = ["--task", spec, "--batch-size-per-replica", "16", "--threads", "1"]
    out = tmp_path / "run"
    dirs = ["--checkpoint-dir", str(out / "c"), "--model-dir", str(out / "m")]
    for argv in (["--check", *flags], [*flags, "--train-steps", "10", *dirs]):
        proc, _ = run_module("spottrain.trainer.task", argv, extra_env=user)
        assert proc.returncode == exits.FATAL_CONFIG, proc.stderr[-3000:]
        (line,) = error_lines(proc)
        assert named in line, line
        assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    fatal = json.loads((out / "c" / "FATAL.json").read_text())
    assert named in fatal["error"] and fatal["exit_code"] == exits.FATAL_CONFIG


def _launch(argv, extra_env=None, timeout=600):
    """``python -m spottrain.trainer.launch argv`` as a user runs it: (code, its output)."""
    proc, _ = run_module("spottrain.trainer.launch", argv, timeout=timeout, extra_env=extra_env)
    return proc.returncode, proc.stdout + proc.stderr


def test_a_task_error_under_the_launcher_is_the_same_line_on_every_worker(tmp_path):
    """A runtime OpError of the task (string features) under 2 MWMS workers: each worker
    names it (exit 64), the launcher exits 64, no traceback."""
    flags = ["--task", "tests.task_fixtures:StringFeatures", "--train-steps", "10",
             "--batch-size-per-replica", "16", "--threads", "1"]  # fmt: skip
    code, log = _launch(["--workers", "2", "--output-dir", str(tmp_path), "--", *flags])
    assert code == exits.FATAL_CONFIG, log[-3000:]
    named = (
        "the task's batches do not fit its model at step 1 (the model from build_model() "
        "raised UnimplementedError: Cast string to float is not supported)"
    )
    lines = [ln for ln in log.splitlines() if " ERROR trainer: " in ln]
    assert lines and all(named in ln for ln in lines), lines
    assert "Traceback" not in log
    fatal = json.loads((tmp_path / "checkpoints" / "FATAL.json").read_text())
    assert named in fatal["error"]


NO_SETTINGS_IMPORT = 'raise RuntimeError("no settings file")\n'


# Holds the chief back before it reads anything, so the other worker fails first
# whatever the machine's load (a slow import in the task itself was not enough:
# under load the chief could reach FATAL.json, written by its peer, first).
CHIEF_BEHIND = """import json, os, time
if json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("type") == "chief":
    time.sleep(600)
"""


def test_a_task_that_does_not_import_leaves_fatal_json_under_the_launcher(tmp_path):
    """The worker that fails first is not the chief, and the launcher stops the chief
    (SIGTERM) before it gets as far: the failed worker records FATAL.json itself, so the
    retry stops at once with the same line, naming who recorded it."""
    (tmp_path / "slow_chief.py").write_text(NO_SETTINGS_IMPORT)
    (tmp_path / "sitecustomize.py").write_text(CHIEF_BEHIND)
    user = {"PYTHONPATH": str(tmp_path)}
    argv = ["--workers", "2", "--output-dir", str(tmp_path / "out"), "--",
            "--task", "slow_chief:Task", "--train-steps", "10"]  # fmt: skip
    code, log = _launch(argv, extra_env=user)
    assert code == exits.FATAL_CONFIG, log[-3000:]
    assert "first failure worker-0" in log and "SIGTERM chief-0" in log, log[-3000:]
    named = (
        "importing 'slow_chief' raised RuntimeError: no settings file "
        f"({tmp_path}/slow_chief.py, line 1)"
    )
    fatal = json.loads((tmp_path / "out" / "checkpoints" / "FATAL.json").read_text())
    assert named in fatal["error"] and fatal["exit_code"] == exits.FATAL_CONFIG
    assert fatal["by"] == "worker-0", fatal
    (tmp_path / "sitecustomize.py").unlink()  # the retry: both workers stop at the marker
    code, log = _launch(argv, extra_env=user)
    assert code == exits.FATAL_CONFIG, log[-3000:]
    assert log.count("this config already failed fatally (worker-0 at ") == 2, log[-3000:]


@pytest.mark.slow
def test_the_two_optimizer_example_as_its_docs_run_it(tmp_path):
    """The own-step example's own command (its docstring), checked first with --check,
    then on 2 workers with a SIGTERM at step 40 and run again: it resumes the saved step
    with 0 lost and ends at exactly --train-steps."""
    doc = (Path(__file__).resolve().parents[3] / "examples" / "two_optimizers.py").read_text()
    lines = doc.splitlines()
    first = next(i for i, ln in enumerate(lines) if "python -m spottrain.trainer.launch" in ln)
    text = ""
    for ln in lines[first:]:  # the command and its continuation lines
        text += " " + ln.strip().rstrip("\\")
        if not ln.rstrip().endswith("\\"):
            break
    words = shlex.split(text)
    launcher, trainer = words[3 : words.index("--")], words[words.index("--") + 1 :]
    assert launcher[:2] == ["--workers", "2"], words
    trainer += ["--threads", "1", "--log-every-steps", "50"]
    proc, _ = run_module("spottrain.trainer.task", ["--check", *trainer])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "builds a model of 321 parameters and 2 optimizers" in proc.stdout, proc.stdout
    launcher[launcher.index("--output-dir") + 1] = str(tmp_path / "two")
    chaos = ["--preempt-at-step", "40", "--signal", "TERM", "--seed", "0"]
    code, log = _launch([*launcher, *chaos, "--", *trainer])
    assert code == exits.PREEMPTED, log[-3000:]
    out = tmp_path / "two"
    rec = ledger(out)[0]
    assert rec["outcome"] == "preempted" and rec["steps_lost"] == 0, rec
    code, log = _launch([*launcher, "--", *trainer])
    assert code == 0, log[-3000:]
    assert ledger(out)[1]["start_step"] == rec["saved_step"] >= 40
    s = summary(out)
    assert s["final_step"] == s["train_steps"] == int(trainer[trainer.index("--train-steps") + 1])
