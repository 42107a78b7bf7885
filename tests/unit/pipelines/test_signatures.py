"""Component and pipeline signatures stay tied to TrainSettings, and it to TrainConfig.

KFP needs every signature written out with literal defaults, so the training
settings appear in several signatures; this test reads them from the committed
YAML (what users get) and fails when a name or a default drifts from
``spottrain.runtime.train_settings.TrainSettings``, whose defaults are the engine's
(``TrainConfig``) and the built-in image task's (``ImageSettings``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from spottrain.pipelines import compile as comp
from spottrain.runtime import train_settings
from spottrain.runtime.train_settings import TrainSettings
from spottrain.tasks.image.settings import ImageSettings
from spottrain.trainer import config

# The engine's settings; the built-in image task's are its task args (ImageSettings),
# of which the pipelines expose train_settings.IMAGE_SETTINGS.
TRAIN_FIELDS = {f.name for f in dataclasses.fields(config.TrainConfig)}
IMAGE_FIELDS = {f.name for f in dataclasses.fields(ImageSettings)}
SETTINGS = {f.name: f for f in dataclasses.fields(TrainSettings)}
# Where a pipeline's default is not the trainer's, and why.
PIPELINE_OWN_DEFAULTS = {
    "train_steps": "pipelines train a step count (no epochs); the trainer's 0 means epochs",
    "steps_per_loop": "one type for a parameter: the flag's string ('1' or 'auto')",
}
# Inputs that are not training settings, and why they are not in TrainConfig.
NOT_TRAINING = {
    "checkpoint_dir": "the run's folder every retry resumes from, passed apart from the settings",
    "data": "the copied data artifact (the trainer's --data)",
    "data_src": "where the copy step reads the images",
    "data_dst": "where the copy step writes them",
    "initial_checkpoint": "what the seeding copy puts into checkpoint_dir",
    "extra_args": "more trainer flags, passed as given",
    "local_workers": "worker processes per node (spottrain.trainer.launch)",
    "expect_gpus": "the GPUs the task was placed with (a pre-flight check)",
    "status": "the spot run's final status (the fall-back's exit task)",
    "service_account": "Vertex job identity",
    "tensorboard": "Vertex TensorBoard resource",
    "tensorboard_experiment": "Vertex TensorBoard experiment of the profile upload",
    "base_output_directory": "Vertex AIP_* output dirs",
    "finish_by": "the deadline the capacity ladder is walked for (Vertex, GKE JobSet)",
    "ladder": "the capacity ladder the Vertex fall-back walks",
    "prior_step_seconds": "seconds per step before one is measured, for the deadline",
    "queue": "the Kueue LocalQueue the JobSet gang is submitted to",
    "priority_class": "the Kueue WorkloadPriorityClass of the queued gang",
    "admission_timeout": "how long the queued gang may wait for Kueue's admission",
    "profile_steps": "profiler window length",
    "skip_steps": "steps run before the profiler window",
    "bandwidth_gbps": "profiler AllReduce estimate",
    "cloud_profiler": "profiler upload switch",
    "workers": "pods of the JobSet-engine train (one MWMS worker each)",
    "unschedulable_timeout": "seconds the JobSet-engine pods may wait for spot capacity",
    "run_id": "the KFP run id (names the JobSet-engine train's JobSet)",
    "task_name": "the KFP task name (names the JobSet-engine train's JobSet)",
    "pool": "the node pool kind the JobSet-engine pods run on first",
    "gpu_type": "the JobSet-engine pods' accelerator",
    "gpus": "GPUs per JobSet-engine pod",
    "memory_limit": "memory per JobSet-engine pod",
    "retries": "the JobSet-engine gang restarts after real failures",
    "on_demand": "whether the JobSet-engine train moves to the on-demand pool",
    "deadline": "the JobSet-engine run's deadline",
    "compute_class": "the GKE ComputeClass the JobSet-engine pods select",
    "grace_seconds": "the JobSet-engine pods' terminationGracePeriodSeconds",
}


def _signatures() -> list[tuple[str, dict]]:
    found = []
    paths = [comp.COMPONENTS_DIR / n / "component.yaml" for n in ("train", "train_job", "profile")]
    paths += sorted(comp.COMPILED_DIR.glob("*.yaml"))
    for path in paths:
        spec = next(d for d in yaml.safe_load_all(Path(path).read_text()) if d)
        name = path.parent.name if path.name == "component.yaml" else path.stem
        found.append((name, spec["root"].get("inputDefinitions", {}).get("parameters", {})))
        fallback = spec["components"].get("comp-on-demand-fallback")
        if fallback:
            found.append((f"{name}/fallback", fallback["inputDefinitions"]["parameters"]))
    return found


SIGNATURES = _signatures()


def test_settings_take_their_types_and_defaults_from_the_engine_and_the_image_task():
    assert set(train_settings.IMAGE_SETTINGS) == IMAGE_FIELDS & set(SETTINGS)
    for name, field in SETTINGS.items():
        owner = ImageSettings if name in IMAGE_FIELDS else config.TrainConfig
        assert name in TRAIN_FIELDS | IMAGE_FIELDS, f"{name} is neither the engine's nor the task's"
        expected = getattr(owner, name)
        if name in PIPELINE_OWN_DEFAULTS:
            assert field.default != expected, f"{name}: drop it from PIPELINE_OWN_DEFAULTS"
            continue
        assert field.default == expected and type(field.default) is type(expected), (
            f"TrainSettings.{name} defaults to {field.default!r}, {owner.__name__} to {expected!r}"
        )


def test_every_signature_was_found():
    names = [n for n, _ in SIGNATURES]
    assert {"train", "train_job", "profile", "spottrain_vertex"} <= set(names)
    assert sum(n.endswith("/fallback") for n in names) == 2
    assert sum(n.startswith("spottrain_gke_") for n in names) == 8
    assert sum(n.endswith("_job") for n in names) == 3


@pytest.mark.parametrize("where, params", SIGNATURES, ids=[n for n, _ in SIGNATURES])
def test_names_and_defaults_match_train_config(where, params):
    for name, spec in params.items():
        assert name in SETTINGS or name in NOT_TRAINING, (
            f"{where}: input {name!r} is neither a TrainSettings field nor a known "
            "non-training input (renamed hyper-parameter?)"
        )
        if name in SETTINGS and "defaultValue" in spec:
            expected = SETTINGS[name].default
            assert spec["defaultValue"] == expected, (
                f"{where}: {name} defaults to {spec['defaultValue']!r}, "
                f"TrainSettings to {expected!r}"
            )


@pytest.mark.parametrize("where, params", SIGNATURES, ids=[n for n, _ in SIGNATURES])
def test_training_signatures_expose_every_pipeline_hyperparameter(where, params):
    missing = set(SETTINGS) - set(params)
    if where == "profile":
        # Profiles a window: no steps or checkpoints of its own.
        missing -= set(train_settings.NOT_PROFILED)
    if where.startswith("spottrain_vertex"):
        missing.discard("tensorboard_dir")  # Vertex: AIP_TENSORBOARD_LOG_DIR
    assert not missing, f"{where} lacks {sorted(missing)}"


def test_a_drifted_default_is_caught():
    params = dict(SIGNATURES)["train"]
    drifted = {**params, "image_size": {**params["image_size"], "defaultValue": 256.0}}
    with pytest.raises(AssertionError, match="image_size defaults to 256.0"):
        test_names_and_defaults_match_train_config("train", drifted)
    renamed = {**params, "lr": params["learning_rate"]}
    with pytest.raises(AssertionError, match="'lr'"):
        test_names_and_defaults_match_train_config("train", renamed)
