"""The components: their runtime modules, kfp.local runs, and use from the YAML files alone."""

import json
from pathlib import Path

import kfp.local
import pytest
import yaml
from kfp import components, dsl

import spottrain.trainer.preemption
from spottrain.components.gcs_copy.component import gcs_copy
from spottrain.pipelines.compile import COMPONENTS_DIR
from spottrain.runtime import train as rt
from spottrain.runtime.train_settings import TrainSettings
from spottrain.version import IMAGE

# kfp.local warns that it runs the image's code in this env: that is the point here.
pytestmark = pytest.mark.filterwarnings("ignore:You may be attemping:RuntimeWarning")


@pytest.fixture
def kfp_local(tmp_path):
    kfp.local.init(
        runner=kfp.local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root")
    )
    return tmp_path


def test_exit_codes_are_described_by_the_one_table():
    preemption = spottrain.trainer.preemption
    for code in preemption.RETRYABLE:
        assert code >= preemption.RETRYABLE_MIN and "retryable" in preemption.describe(code)
    for code in preemption.FATAL:
        assert code < preemption.RETRYABLE_MIN and "fatal" in preemption.describe(code)
    assert "signal 9" in preemption.describe(-9)


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
    with pytest.raises(
        spottrain.trainer.preemption.ConfigError, match="--backbone: settings of the built-in"
    ):
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


@pytest.mark.integration
def test_copy_component_copies_from_gcs_into_its_artifact(kfp_local, gcs_bucket):
    for name in ("a/1.png", "b/2.png"):
        gcs_bucket.blob(f"imgs/{name}").upload_from_string(b"x" * 10)
    task = gcs_copy(src=f"gs://{gcs_bucket.name}/imgs")
    copied = task.outputs["copied"]
    assert sorted(p.name for p in Path(copied.path).rglob("*.png")) == ["1.png", "2.png"]
    assert copied.metadata["files_copied"] == 2 and "location" not in copied.metadata
    stats = task.outputs["metrics"].metadata
    assert stats["files_copied"] == 2.0 and stats["bytes_copied"] == 20.0
    # Train reads the artifact's own path when the files are in it.
    assert rt.data_location(copied.path, copied.metadata) == copied.path


@pytest.mark.integration
def test_copy_component_to_a_destination_records_where(kfp_local, gcs_bucket):
    gcs_bucket.blob("ckpt/ckpt-5.index").upload_from_string(b"new")
    dst = kfp_local / "ckpt"
    dst.mkdir()
    (dst / "ckpt-5.index").write_bytes(b"resumed")  # a newer checkpoint a rerun must keep
    task = gcs_copy(src=f"gs://{gcs_bucket.name}/ckpt", dst=str(dst), no_clobber=True)
    copied = task.outputs["copied"]
    assert (dst / "ckpt-5.index").read_bytes() == b"resumed"
    assert copied.metadata["files_refused"] == 1
    assert task.outputs["metrics"].metadata["files_refused"] == 1.0
    assert rt.data_location(copied.path, copied.metadata) == str(dst)
    manifest = json.loads((Path(copied.path) / "copy_summary.json").read_text())
    assert manifest["location"] == str(dst)


@pytest.mark.integration
def test_copy_component_with_no_source_is_a_no_op(kfp_local):
    task = gcs_copy(src="", dst=str(kfp_local / "ckpt"))
    assert task.outputs["copied"].metadata["files_copied"] == 0
    assert task.outputs["metrics"].metadata["files_refused"] == 0.0


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


@pytest.mark.integration
def test_a_new_pipeline_built_from_the_yaml_files_alone_runs_locally(kfp_local, digits_dir):
    copy_op = components.load_component_from_file(str(COMPONENTS_DIR / "gcs_copy/component.yaml"))
    train_op = components.load_component_from_file(str(COMPONENTS_DIR / "train/component.yaml"))
    status_op = components.load_component_from_file(
        str(COMPONENTS_DIR / "training_status/component.yaml")
    )

    @dsl.pipeline(name="from-yaml")
    def from_yaml(src: str, checkpoint_dir: str, steps: int) -> str:
        data = copy_op(src=src)
        trained = train_op(
            data=data.outputs["copied"],
            checkpoint_dir=checkpoint_dir,
            backbone="small_cnn",
            weights="none",
            image_size=16,
            batch_size_per_replica=16,
            train_steps=steps,
            save_every_steps=10,
        )
        return status_op(checkpoint_dir=checkpoint_dir, train_steps=steps).after(trained).output

    ckpt = kfp_local / "ckpt"
    task = from_yaml(src=digits_dir, checkpoint_dir=str(ckpt), steps=10)
    assert task.output == "completed"
    assert (ckpt / "ckpt-10.index").is_file()
    # The same status step on a shorter goal than reached and on an empty dir.
    from spottrain.runtime.training_status import training_status

    assert training_status(str(ckpt), 11) == "incomplete"
    assert training_status(str(kfp_local / "nothing"), 1) == "incomplete"


# -- The on-demand fall-back (spottrain.runtime.fallback_decision) ------------------------------


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


@pytest.mark.integration
def test_fallback_decision_component_from_its_yaml(kfp_local):
    decide_op = components.load_component_from_file(
        str(COMPONENTS_DIR / "fallback_decision/component.yaml")
    )
    ckpt = kfp_local / "ckpt"
    ckpt.mkdir()
    status = {"state": "FAILED", "pipelineTaskName": "exit-handler-1"}
    assert decide_op(status=status, checkpoint_dir=str(ckpt), train_steps=5).output == "resume"
    (ckpt / "FATAL.json").write_text('{"error": "bad backbone"}')
    assert decide_op(status=status, checkpoint_dir=str(ckpt), train_steps=5).output == "fatal"


def test_chaos_preemption_comes_from_the_environment_not_a_signature():
    from spottrain.components.train.component import train

    assert "preempt_at_step" not in train.component_spec.inputs
    env = rt.CHAOS_PREEMPT_ENV
    assert rt.chaos_preempt_at_step({}) == 0
    assert rt.chaos_preempt_at_step({env: "25"}) == 25
    for bad in ("-3", "soon"):
        with pytest.raises(rt.TrainFailed) as err:
            rt.chaos_preempt_at_step({env: bad})
        assert err.value.code == spottrain.trainer.preemption.FATAL_CONFIG and repr(bad) in str(
            err.value
        )
