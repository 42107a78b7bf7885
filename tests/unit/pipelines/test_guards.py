"""Each pre-flight guard refuses a bad input with one line naming the value."""

import pytest

from spottrain import exits, placement
from spottrain.pipelines import compile as comp
from spottrain.pipelines import gke, guards, vertex
from spottrain.pipelines.guards import GuardError
from spottrain.version import IMAGE

GOOD = {"data_src": "gs://my-bucket/digits", "checkpoint_dir": "gs://my-bucket/ckpt"}


def one_line(err) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


@pytest.fixture(scope="module")
def gke_yaml(tmp_path_factory):
    path = tmp_path_factory.mktemp("t") / "gke.yaml"
    path.write_text(comp.compile_text(gke.build()))
    return path


def pools(chief_gpus, worker_gpus, chief_type="NVIDIA_TESLA_T4", worker_type="NVIDIA_TESLA_T4"):
    return [
        {"replica_count": 1.0, "machine_spec": {"accelerator_type": chief_type,
                                                "accelerator_count": chief_gpus}},
        {"replica_count": 2.0, "machine_spec": {"accelerator_type": worker_type,
                                                "accelerator_count": worker_gpus}},
    ]  # fmt: skip


def test_unequal_gpu_count_between_worker_pools_is_refused():
    with pytest.raises(GuardError) as err:
        guards.check_worker_pools(pools(1, 2))
    text = one_line(err)
    assert "pool 1 has 2 x NVIDIA_TESLA_T4" in text and "pool 0 (chief) has 1 x" in text
    guards.check_worker_pools(pools(2, 2))  # equal: fine
    guards.check_worker_pools(pools(1, 2)[:1])  # chief alone: fine


def test_unequal_gpu_type_between_worker_pools_is_refused():
    with pytest.raises(GuardError, match="NVIDIA_L4"):
        guards.check_worker_pools(pools(1, 1, worker_type="NVIDIA_L4"))


def test_vertex_build_refuses_a_worker_pool_override_with_other_gpus():
    settings = vertex.VertexTraining(
        replica_count=3, accelerator_count=1, worker_accelerator_count=2
    )
    with pytest.raises(GuardError, match="pool 1 has 2 x NVIDIA_TESLA_T4"):
        vertex.build(settings)
    # A bigger chief machine with the same GPUs is the legitimate use of the override.
    vertex.build(vertex.VertexTraining(replica_count=3, worker_machine_type="n1-standard-4"))


def test_preflight_catches_unequal_pools_in_an_edited_template(tmp_path):
    text = comp.compile_text(vertex.build(vertex.VertexTraining(replica_count=2)))
    edited = text.replace("accelerator_count: 1.0", "accelerator_count: 2.0", 1)
    assert edited != text
    path = tmp_path / "edited.yaml"
    path.write_text(edited)
    with pytest.raises(GuardError, match="MultiWorkerMirroredStrategy"):
        guards.preflight(path, GOOD)


@pytest.mark.parametrize(
    "image",
    [
        "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest",
        "tensorflow/tensorflow:2.21.0",
        "gcr.io/me/trainer:1.0-cpu",
    ],
)
def test_gpus_with_a_cpu_only_image_are_refused(image):
    with pytest.raises(GuardError) as err:
        guards.check_image_gpu(image, 1)
    assert repr(image) in one_line(err)
    guards.check_image_gpu(image, 0)


@pytest.mark.parametrize(
    "image",
    [IMAGE, "tensorflow/tensorflow:2.21.0-gpu", "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17"],
)
def test_gpu_images_pass(image):
    guards.check_image_gpu(image, 4)


def test_preflight_refuses_a_cpu_image_in_a_gpu_template(tmp_path):
    path = tmp_path / "cpu.yaml"
    cpu_image = "tensorflow/tensorflow:2.21.0"
    with comp.component_images(cpu_image):
        path.write_text(comp.compile_text(gke.build(), image=cpu_image))
    with pytest.raises(GuardError, match="CPU-only"):
        guards.preflight(path, GOOD)


def test_cpu_only_tf_build_is_refused_at_runtime():
    # The TF in this environment is CPU-only (no CUDA here): the train body refuses
    # to start when it was placed with GPUs, with the non-retryable config code.
    from spottrain.runtime import train

    with pytest.raises(train.TrainFailed) as err:
        train.check_gpus(1)
    assert err.value.code == exits.FATAL_CONFIG
    assert "expect_gpus=1" in str(err.value)
    train.check_gpus(0)


@pytest.mark.parametrize("ckpt", ["/tmp/ckpt", "ckpt", "s3://b/ckpt", ""])
def test_retries_with_a_non_persistent_checkpoint_dir_are_refused(gke_yaml, ckpt):
    with pytest.raises(GuardError) as err:
        guards.preflight(gke_yaml, {**GOOD, "checkpoint_dir": ckpt})
    assert f"checkpoint_dir={ckpt!r}" in one_line(err)


@pytest.mark.parametrize("ckpt", ["gs://my-bucket/ckpt", "/gcs/b/ckpt"])
def test_persistent_checkpoint_dirs_pass(gke_yaml, ckpt):
    guards.preflight(gke_yaml, {**GOOD, "checkpoint_dir": ckpt})


def test_local_checkpoint_dir_is_fine_without_retries_or_locally(tmp_path, gke_yaml):
    path = tmp_path / "noretry.yaml"
    path.write_text(comp.compile_text(gke.build(placement.Placement(retries=0))))
    guards.preflight(path, {**GOOD, "checkpoint_dir": "/tmp/ckpt"})
    guards.preflight(gke_yaml, {**GOOD, "checkpoint_dir": "/tmp/ckpt"}, local=True)


@pytest.mark.parametrize("timeout", ["", "0s", "0", "forever", "-5s"])
def test_vertex_job_without_a_timeout_is_refused(timeout):
    with pytest.raises(GuardError) as err:
        vertex.VertexTraining(timeout=timeout)
    assert f"timeout={timeout!r}" in one_line(err)


def test_preflight_catches_a_removed_timeout_in_a_template(tmp_path):
    text = comp.compile_text(vertex.build())
    edited = text.replace("defaultValue: 86400s", "defaultValue: ''")
    assert edited != text
    path = tmp_path / "notimeout.yaml"
    path.write_text(edited)
    with pytest.raises(GuardError, match="timeout=''"):
        guards.preflight(path, GOOD)


def test_unknown_parameter_name_is_refused_with_a_suggestion(gke_yaml):
    with pytest.raises(GuardError) as err:
        guards.preflight(gke_yaml, {**GOOD, "train_step": "10"})
    text = one_line(err)
    assert "unknown pipeline parameter 'train_step'" in text
    assert "did you mean 'train_steps'" in text


def test_missing_required_parameter_and_bad_value_are_refused(gke_yaml):
    with pytest.raises(GuardError, match="missing required pipeline parameter.*data_src"):
        guards.preflight(gke_yaml, {"checkpoint_dir": "gs://my-bucket/c"})
    with pytest.raises(GuardError, match="train_steps='ten'"):
        guards.preflight(gke_yaml, {**GOOD, "train_steps": "ten"})


def test_parameters_are_converted_to_the_template_types(gke_yaml):
    params = guards.preflight(
        gke_yaml, {**GOOD, "train_steps": "10", "learning_rate": "0.5", "mixed_precision": "true"}
    )
    assert params["train_steps"] == 10 and params["learning_rate"] == 0.5
    assert params["mixed_precision"] is True


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"pool": "cheap"}, "pool='cheap'"),
        ({"gpu_count": -1}, "gpu_count=-1"),
        ({"memory_limit": "48 gigs"}, "memory_limit='48 gigs'"),
        ({"backoff": "1m"}, "backoff='1m'"),
        ({"retries": -2}, "retries=-2"),
        ({"retry_window": "1h"}, "retry_window='1h'"),
        ({"backoff_factor": 1.5}, "backoff_factor=1.5: must be a whole number"),
    ],
)
def test_bad_placement_values_are_named(kwargs, needle):
    with pytest.raises(placement.PlacementError) as err:
        placement.Placement(**kwargs)
    assert needle in one_line(err)


def test_a_retry_window_shorter_than_the_run_timeout_is_refused():
    short = placement.Placement(retry_window="3600s")
    with pytest.raises(placement.PlacementError) as err:
        gke.build(short)
    text = one_line(err)
    assert "train placement retry_window='3600s'" in text and "'604800s'" in text
    gke.build(short, run_timeout="3600s")  # a one-hour run: fine
    gke.build(short.with_(retries=0))  # no retries, no window
    with pytest.raises(placement.PlacementError, match="fallback placement retry_window"):
        gke.build(fallback=placement.ON_DEMAND_PLACEMENT.with_(retry_window="86400s"))


def _edit(tmp_path, text, old, new):
    assert old in text
    path = tmp_path / "edited.yaml"
    path.write_text(text.replace(old, new))
    return path


def test_preflight_refuses_a_template_whose_retry_window_misses_the_run_timeout(tmp_path):
    text = comp.compile_text(gke.build())
    path = _edit(tmp_path, text, "backoffMaxDuration: 604800s", "backoffMaxDuration: 3600s")
    with pytest.raises(GuardError) as err:
        guards.preflight(path, GOOD)
    assert "backoffMaxDuration=3600s, shorter than the run timeout 604800s" in one_line(err)
    path = _edit(tmp_path, text, "activeDeadlineSeconds: 604800", "{}")
    with pytest.raises(GuardError, match="sets no run timeout"):
        guards.preflight(path, GOOD)


def test_preflight_refuses_a_task_that_depends_on_an_exit_task(tmp_path):
    text = (comp.COMPILED_DIR / comp.gke_yaml("spot", fallback=True)).read_text()
    guards.preflight(comp.COMPILED_DIR / comp.gke_yaml("spot", fallback=True), GOOD)
    path = _edit(
        tmp_path, text, "        taskInfo:\n          name: train on spot",
        "        dependentTasks:\n        - on-demand-fallback\n"
        "        taskInfo:\n          name: train on spot",
    )  # fmt: skip
    with pytest.raises(GuardError) as err:
        guards.preflight(path, GOOD)
    assert "task 'exit-handler-1' depends on 'on-demand-fallback'" in one_line(err)
