"""The path of the training settings from a pipeline to the trainer is written out.

Each training component names every parameter it passes on (no ``locals()``); a
pipeline takes ``settings`` once (``train_settings.as_parameters`` gives KFP a
parameter per setting), and the runtime functions on the way take typed parameters
(no ``**kwargs``, but for the JobSet component's body, which hands the run's inputs
whole to the frozen dataclass that types them, ``RunInputs``): a reader, a linter or a
type checker can follow each setting.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from spottrain.runtime import profile as profile_rt
from spottrain.runtime import train as train_rt
from spottrain.runtime.train_settings import DEFAULT_SETTINGS, HELP, TrainSettings, as_parameters
from spottrain.trainer import config

ROOT = Path(__file__).resolve().parents[3]
PIPELINES = ["pipelines/gke.py", "pipelines/gke_jobset.py", "pipelines/vertex.py"]
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
    return bool({"backbone", "settings"} & {a.arg for a in fn.args.args + fn.args.kwonlyargs})


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


# The one body that takes the run's inputs as **: it hands them whole to a frozen
# dataclass whose fields type them (tests/unit/runtime/test_run_inputs.py ties those to
# the component's signature), so they are written out there, not a second time here.
HANDED_WHOLE = {("spottrain/runtime/train_job/component.py", "run_component"): "RunInputs"}


def _hands_kwargs_whole(fn: ast.FunctionDef, to: str) -> bool:
    """Whether ``fn``'s ``**kwargs`` is named once, and that once as ``to(..., **kwargs)``."""
    name = fn.args.kwarg.arg
    uses = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == name]
    calls = [
        c
        for c in ast.walk(fn)
        if isinstance(c, ast.Call)
        and isinstance(c.func, ast.Name)
        and c.func.id == to
        and any(k.arg is None and getattr(k.value, "id", "") == name for k in c.keywords)
    ]
    return len(uses) == len(calls) == 1


@pytest.mark.parametrize("path", RUNTIME + ["spottrain/runtime/train_settings.py"])
def test_the_runtime_on_the_path_takes_typed_parameters(path):
    for fn in _functions(path):
        if path.endswith("train_settings.py") and fn.name == "pipeline":
            continue  # as_parameters' wrapper: its parameters are its __signature__ (below)
        if fn.args.kwarg is not None and (path, fn.name) in HANDED_WHOLE:
            to = HANDED_WHOLE[path, fn.name]
            assert _hands_kwargs_whole(fn, to), f"{path}:{fn.lineno} {fn.name}: only {to}(**)"
            continue
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


@pytest.mark.parametrize("path", sorted((ROOT / "pipelines" / "compiled").glob("*.yaml")))
def test_every_compiled_pipeline_has_each_setting_and_its_train_task_takes_it(path):
    """as_parameters: one root parameter per setting, described, at its default, which
    the training task reads (Vertex leaves tensorboard_dir to AIP_TENSORBOARD_LOG_DIR)."""
    import yaml

    spec = next(yaml.safe_load_all(path.read_text()))
    params = spec["root"]["inputDefinitions"]["parameters"]
    names = [
        n for n in TrainSettings.names() if not (n == "tensorboard_dir" and "vertex" in path.name)
    ]
    for name in names:
        assert params[name]["description"].replace("\n", " ") == HELP[name], name
        default = getattr(TrainSettings(), name)
        assert params[name].get("defaultValue", default) == default, name
    trains = [t for n, t in spec["root"]["dag"]["tasks"].items()
              if n in ("train", "train-job", "on-demand-fallback")]  # fmt: skip
    assert trains, [*spec["root"]["dag"]["tasks"]]
    for task in trains:
        given = task["inputs"]["parameters"]
        for name in names:
            assert given[name] == {"componentInputParameter": name}, (name, given.get(name))


def test_as_parameters_gives_kfp_each_setting_and_the_function_one_settings():
    """The function KFP sees (its signature, its docstring's Args) and what it hands on."""
    import inspect

    seen = []

    @as_parameters(without=("tensorboard_dir",))
    def pipeline(data_src: str, settings: TrainSettings = DEFAULT_SETTINGS, workers: int = 1):
        """Trains.

        Args:
            data_src: The data.
            settings: The training settings.
            workers: Pods.
        """
        seen.append((data_src, settings, workers))

    params = list(inspect.signature(pipeline).parameters)
    names = [n for n in TrainSettings.names() if n != "tensorboard_dir"]
    assert params == ["data_src", *names, "workers"]
    assert "settings: " not in pipeline.__doc__
    assert f"    backbone: {HELP['backbone']}\n" in pipeline.__doc__
    assert pipeline.__doc__.rstrip().endswith("workers: Pods.")
    pipeline("d", "small_cnn", workers=3, train_steps=7)  # as KFP calls it: positionally
    ((data, settings, workers),) = seen
    assert (data, workers) == ("d", 3)
    assert settings == TrainSettings(backbone="small_cnn", train_steps=7)
