"""The path of the training settings from a pipeline to the trainer is written out.

Each pipeline and training component names every parameter it passes on (no
``locals()``), and the runtime functions on the way take typed parameters (no
``**kwargs``): a reader, a linter or a type checker can follow each setting.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from spottrain.runtime import profile as profile_rt
from spottrain.runtime import train as train_rt
from spottrain.runtime.train_settings import TrainSettings
from spottrain.trainer import config

ROOT = Path(__file__).resolve().parents[3]
PIPELINES = ["pipelines/gke.py", "pipelines/gke_job.py", "pipelines/vertex.py"]
COMPONENTS = [f"components/{n}/component.py" for n in ("train", "train_job", "profile")]
RUNTIME = [
    "spottrain/runtime/train.py",
    "spottrain/runtime/profile.py",
    "spottrain/runtime/train_job/component.py",
]


def _functions(path: str) -> list[ast.FunctionDef]:
    tree = ast.parse((ROOT / path).read_text())
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]


def _takes_settings(fn: ast.FunctionDef) -> bool:
    return "backbone" in {a.arg for a in fn.args.args + fn.args.kwonlyargs}


@pytest.mark.parametrize("path", PIPELINES + COMPONENTS)
def test_every_parameter_of_a_pipeline_or_component_goes_somewhere_by_name(path):
    functions = [fn for fn in _functions(path) if _takes_settings(fn)]
    assert functions, f"{path}: no pipeline or component function found"
    for fn in functions:
        calls = {
            n.func.id
            for n in ast.walk(fn)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        }
        assert "locals" not in calls, f"{path}:{fn.lineno} {fn.name} passes on locals()"
        used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
        params = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
        unused = sorted(params - used)
        assert not unused, f"{path}:{fn.lineno} {fn.name} never names {unused}"


@pytest.mark.parametrize("path", RUNTIME + ["spottrain/runtime/train_settings.py"])
def test_the_runtime_on_the_path_takes_typed_parameters(path):
    for fn in _functions(path):
        assert fn.args.kwarg is None, (
            f"{path}:{fn.lineno} {fn.name} takes **{fn.args.kwarg.arg}: name its parameters"
        )


def test_the_settings_flags_are_the_trainers_and_leave_the_image_task_at_its_defaults():
    settings = TrainSettings(
        backbone="small_cnn", train_steps=7, learning_rate=0.5, mixed_precision=True
    )
    flags = train_rt.trainer_flags(
        data_dir="d", checkpoint_dir="c", model_dir="m", settings=settings, extra_args=["--seed", 3]
    )
    cfg = config.parse_args(flags, {})
    assert (cfg.train_steps, cfg.learning_rate, cfg.mixed_precision, cfg.seed) == (7, 0.5, True, 3)
    assert "--backbone" in flags and not {"--weights", "--image-size"} & set(flags)
    assert "--tensorboard-dir" not in flags  # empty: the trainer's default holds


def test_the_profile_runs_the_trainings_settings_without_its_steps_or_tensorboard():
    settings = TrainSettings(
        batch_size_per_replica=8, train_steps=500, save_every_steps=50, steps_per_loop="auto",
        tensorboard_dir="/tb",
    )  # fmt: skip
    flags = profile_rt.profile_flags(data_dir="d", settings=settings)
    cfg = config.parse_args(flags, {})
    assert (cfg.batch_size_per_replica, cfg.train_steps, cfg.save_every_steps) == (8, 1, 1)
    assert not {"--steps-per-loop", "--tensorboard-dir"} & set(flags)
    assert set(settings.profile_inputs()) == set(TrainSettings.names()) - {
        "train_steps", "save_every_steps", "steps_per_loop",
    }  # fmt: skip
