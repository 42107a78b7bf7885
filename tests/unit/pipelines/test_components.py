"""The components: their runtime modules, kfp.local runs, and use from the YAML files alone.

The in-process tests; those that start processes are in
tests/integration/pipelines/test_components.py.
"""

import json

import pytest
import yaml

from spottrain import exits
from spottrain.pipelines.compile import COMPONENTS_DIR
from spottrain.runtime import train as rt
from spottrain.runtime.train_settings import TrainSettings
from spottrain.version import IMAGE

# kfp.local warns that it runs the image's code in this env: that is the point here.
pytestmark = pytest.mark.filterwarnings("ignore:You may be attemping:RuntimeWarning")


def test_exit_codes_are_described_by_the_one_table():
    for code in exits.RETRYABLE:
        assert code >= exits.RETRYABLE_MIN and "retryable" in exits.describe(code)
    for code in exits.FATAL:
        assert code < exits.RETRYABLE_MIN and "fatal" in exits.describe(code)
    assert "signal 9" in exits.describe(-9)


def test_trainer_flags_parse_with_the_trainers_own_parser():
    from spottrain.trainer import config

    flags = rt.trainer_flags(
        data_dir="gs://my-bucket/digits",
        checkpoint_dir="gs://my-bucket/ckpt",
        model_dir="/tmp/m",
        settings=TrainSettings(
            backbone="small_cnn",
            weights="none",
            image_size=32,
            batch_size_per_replica=8,
            train_steps=10,
            learning_rate=0.01,
            save_every_steps=5,
            mixed_precision=True,
            steps_per_loop="auto",
            jit_compile="off",
        ),
        extra_args=["--warmup-steps", "3"],
    )
    cfg = config.parse_args(flags, {})
    assert cfg.data == "gs://my-bucket/digits" and cfg.checkpoint_dir == "gs://my-bucket/ckpt"
    assert (cfg.train_steps, cfg.warmup_steps) == (10, 3)
    assert cfg.mixed_precision and cfg.learning_rate == 0.01
    assert (cfg.steps_per_loop, cfg.jit_compile) == (0, "off")  # 0: auto
    # The image task's settings travel as its task args.
    image = json.loads(cfg.task_args)
    assert image == {"backbone": "small_cnn", "weights": "none", "image_size": 32}


def test_flags_leave_the_image_settings_out_at_their_defaults_for_any_task():
    from spottrain.trainer import config

    flags = rt.trainer_flags(
        data_dir="d",
        checkpoint_dir="c",
        model_dir="m",
        settings=TrainSettings(
            backbone="resnet50",
            weights="imagenet",
            image_size=224,
            task="examples.regression:Regression",
        ),
    )
    assert not {"--backbone", "--weights", "--image-size"} & set(flags)
    cfg = config.parse_args(flags, {})  # another task refuses image flags: none came
    assert cfg.task == "examples.regression:Regression" and cfg.task_args == "{}"
    with pytest.raises(exits.ConfigError, match="--backbone: settings of the built-in"):
        config.parse_args(
            rt.trainer_flags(
                data_dir="d",
                checkpoint_dir="c",
                model_dir="m",
                settings=TrainSettings(backbone="small_cnn", task="examples.regression:Regression"),
            ),
            {},
        )


def test_launcher_is_used_only_for_several_workers_or_chaos():
    from spottrain.trainer import launch

    assert rt.launcher_argv(["--x"], local_workers=1, preempt_at_step=0) is None
    argv = rt.launcher_argv(["--train-steps", "9"], local_workers=2, preempt_at_step=4)
    args = launch.build_parser().parse_args(argv)
    assert (args.workers, args.preempt_at_step, args.signal) == (2, 4, "TERM")
    assert args.trainer_args[-2:] == ["--train-steps", "9"]
    with pytest.raises(ValueError, match="local_workers must be >= 1, got 0"):
        rt.launcher_argv([], local_workers=0, preempt_at_step=0)


@pytest.mark.parametrize(
    "tf_config, chief",
    [
        ("", True),
        ('{"cluster": {"chief": ["a"], "worker": ["b"]}, "task": {"type": "chief"}}', True),
        ('{"cluster": {"chief": ["a"], "worker": ["b"]}, "task": {"type": "worker"}}', False),
        ('{"cluster": {"worker": ["a", "b"]}, "task": {"type": "worker", "index": 0}}', True),
        ('{"cluster": {"worker": ["a", "b"]}, "task": {"type": "worker", "index": 1}}', False),
    ],
)
def test_only_the_chief_writes_outputs(tf_config, chief):
    assert rt.is_chief(tf_config) is chief


def test_component_yaml_carries_descriptions_image_and_types():
    spec = yaml.safe_load((COMPONENTS_DIR / "train" / "component.yaml").read_text())
    [executor] = spec["deploymentSpec"]["executors"].values()
    assert executor["container"]["image"] == IMAGE
    assert "pip install" not in json.dumps(executor)  # install_kfp_package=False
    inputs = spec["root"]["inputDefinitions"]
    assert inputs["artifacts"]["data"]["artifactType"]["schemaTitle"] == "system.Dataset"
    assert "resumes" in inputs["parameters"]["checkpoint_dir"]["description"]
    outputs = spec["root"]["outputDefinitions"]["artifacts"]
    assert outputs["model"]["artifactType"]["schemaTitle"] == "system.Model"
    assert outputs["metrics"]["artifactType"]["schemaTitle"] == "system.Metrics"


@pytest.mark.parametrize(
    "state, progress, decision",
    [
        ("FAILED", "incomplete", "resume"),
        # A killed launcher never publishes, so KFP OSS can report RUNNING after a failure.
        ("RUNNING", "incomplete", "resume"),
        ("", "incomplete", "resume"),
        # FAILED after a profile failure (or a retried attempt) with training done.
        ("FAILED", "completed", "completed"),
        ("COMPLETE", "completed", "completed"),
        ("FAILED", "fatal", "fatal"),
        ("CANCELED", "incomplete", "cancelled"),
    ],
)
def test_the_fallback_decides_by_the_checkpoint_not_the_state(state, progress, decision):
    from spottrain.runtime import fallback_decision

    assert fallback_decision.decide(state, progress) == decision


def test_chaos_preemption_comes_from_the_environment_not_a_signature():
    from spottrain.components.train.component import train

    assert "preempt_at_step" not in train.component_spec.inputs
    env = rt.CHAOS_PREEMPT_ENV
    assert rt.chaos_preempt_at_step({}) == 0
    assert rt.chaos_preempt_at_step({env: "25"}) == 25
    for bad in ("-3", "soon"):
        with pytest.raises(rt.TrainFailed) as err:
            rt.chaos_preempt_at_step({env: bad})
        assert err.value.code == exits.FATAL_CONFIG and repr(bad) in str(err.value)
