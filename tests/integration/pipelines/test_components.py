"""The components: their runtime modules, kfp.local runs, and use from the YAML files alone."""

import json
from pathlib import Path

import kfp.local
import pytest
from kfp import components, dsl

from spottrain.components.gcs_copy.component import gcs_copy
from spottrain.pipelines.compile import COMPONENTS_DIR
from spottrain.runtime import train as rt

# kfp.local warns that it runs the image's code in this env: that is the point here.
pytestmark = pytest.mark.filterwarnings("ignore:You may be attemping:RuntimeWarning")


@pytest.fixture
def kfp_local(tmp_path):
    kfp.local.init(
        runner=kfp.local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root")
    )
    return tmp_path


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


def test_copy_component_with_no_source_is_a_no_op(kfp_local):
    task = gcs_copy(src="", dst=str(kfp_local / "ckpt"))
    assert task.outputs["copied"].metadata["files_copied"] == 0
    assert task.outputs["metrics"].metadata["files_refused"] == 0.0


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
