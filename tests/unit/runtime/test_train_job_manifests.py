"""What the train_job component sends for the committed GKE JobSet pipelines, schema-checked.

The component body runs with the inputs the committed pipelines give it, for 1 and 2
workers; its launcher is replaced by a stand-in that keeps the JobSets it is given
(the real launcher runs against the real JobSet controller in
tests/system/gke/test_train_job_launcher_real_kube.py, whose webhooks admit these manifests). Each
JobSet's child Job is validated with ``kubernetes-validate`` against the official
OpenAPI schemas of a pinned recent Kubernetes version, strictly (an unknown field is an
error, as the API server's strict field validation makes it); the JobSet CRD's own
validation runs in the real-controller tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from jobset_manifests import child, child_job, validate

from spottrain.ledger import bill_labels, usage
from spottrain.pipelines import compile as comp
from spottrain.runtime import train as in_pod
from spottrain.runtime.train_job import component, launcher, names, rbac
from spottrain.runtime.train_job import jobset as js
from spottrain.runtime.train_job.inputs import RunInputs
from spottrain.runtime.train_settings import TrainSettings
from spottrain.trainer import gang_env

JOB_PIPELINES = [comp.gke_yaml(pool, engine="job") for pool in ("preemptible", "spot")]


def launcher_inputs(path: Path) -> dict:
    """The train-job task's inputs in a compiled pipeline: constants, else defaults."""
    spec = next(d for d in yaml.safe_load_all(path.read_text()) if d)
    task = spec["root"]["dag"]["tasks"]["train-job"]
    component_params = spec["components"]["comp-train-job"]["inputDefinitions"]["parameters"]
    root_params = spec["root"]["inputDefinitions"]["parameters"]
    given = task["inputs"]["parameters"]
    out = {}
    for name, definition in component_params.items():
        value = definition.get("defaultValue")
        if name in given:
            source = given[name]
            if "runtimeValue" in source:
                value = source["runtimeValue"]["constant"]
            else:
                value = root_params[source["componentInputParameter"]].get("defaultValue")
        out[name] = int(value) if definition["parameterType"] == "NUMBER_INTEGER" else value
    return out


def sent(path: Path, workers: int, monkeypatch) -> tuple[dict, list[dict]]:
    """The compiled pipeline's inputs and the JobSet manifests its component would send."""
    inputs = launcher_inputs(path)
    assert inputs["run_id"] == "{{$.pipeline_job_uuid}}"  # resolved by KFP's driver
    assert inputs["task_name"] == "{{$.pipeline_task_name}}"
    inputs.update(
        run_id="4f1c-run", task_name="train-job", workers=workers,
        checkpoint_dir="gs://bucket/ckpt",
    )  # fmt: skip
    given: list[js.WorkerSet] = []

    class Keep:
        def __init__(self, kube, sets, **options):
            given.extend(sets)
            self.stop = SimpleNamespace(set=lambda: None)

        def run(self):
            return launcher.Outcome(0, "kept")

    monkeypatch.setattr(launcher, "JobSetLauncher", Keep)
    monkeypatch.setattr(component.ledger, "annotate", lambda *a, **k: 0)
    monkeypatch.delenv("HOSTNAME", raising=False)
    settings = TrainSettings.from_params(inputs)
    others = {k: v for k, v in inputs.items() if k not in TrainSettings.names()}
    run = RunInputs(data_dir="gs://bucket/data", settings=settings, **others)
    component.launch(SimpleNamespace(namespace="kubeflow"), run, default_image="trainer:test")
    return inputs, [js.jobset(ws) for ws in given]


@pytest.mark.parametrize("workers", [1, 2], ids=["1-node", "2-node"])
@pytest.mark.parametrize("pipeline", JOB_PIPELINES)
def test_manifests_from_the_compiled_pipeline_are_schema_valid(pipeline, workers, monkeypatch):
    inputs, manifests = sent(comp.COMPILED_DIR / pipeline, workers, monkeypatch)
    spot, on_demand = manifests  # the spot JobSet and the on-demand one it may move to
    assert on_demand["metadata"]["name"] == spot["metadata"]["name"] + names.ON_DEMAND_SUFFIX
    for manifest in manifests:
        validate(child_job(manifest))
        spec = child(manifest)
        assert spec["completionMode"] == "Indexed"
        assert spec["completions"] == spec["parallelism"] == workers
        assert manifest["spec"]["failurePolicy"]["maxRestarts"] == inputs["retries"]
        pod = spec["template"]["spec"]
        [trainer] = pod["containers"]
        # tini (the image's init) as PID 1, then the trainer's entry point: no shell
        assert trainer["command"] == ["tini", "--", "python", "-m", "spottrain.trainer.task"]
        assert manifest["spec"]["network"]["subdomain"] == manifest["metadata"]["name"]
        assert trainer["resources"]["limits"] == {"nvidia.com/gpu": "1", "memory": "48G"}
    spot_pod = child(spot)["template"]["spec"]
    pool = inputs["pool"]
    assert spot_pod["nodeSelector"][f"cloud.google.com/gke-{pool}"] == "true"
    assert len(spot_pod["tolerations"]) == 1
    od_pod = child(on_demand)["template"]["spec"]
    assert (
        "tolerations" not in od_pod and f"cloud.google.com/gke-{pool}" not in od_pod["nodeSelector"]
    )


def test_the_pod_contract_and_the_args_of_the_in_pod_train(monkeypatch):
    inputs, (spot, _) = sent(comp.COMPILED_DIR / JOB_PIPELINES[0], 2, monkeypatch)
    [trainer] = child(spot)["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in trainer["env"]}
    name = spot["metadata"]["name"]
    labels = json.loads(env.pop(bill_labels.LABELS_ENV))
    assert labels == {k: v for k, v in spot["metadata"]["labels"].items() if "spottrain.dev" in k}
    assert labels[bill_labels.K8S_ATTEMPT] == "1" and labels[bill_labels.K8S_RUN]
    assert usage.from_env({usage.USAGE_ENV: env.pop(usage.USAGE_ENV)}) == {
        "gpu_type": "nvidia-tesla-t4", "gpu_count": 1, "platform": "gce", "usage_from": "placement"
    }  # fmt: skip
    assert env == {
        gang_env.JOB_NAME: f"{name}-workers-0",  # the child Job JobSet creates
        gang_env.SERVICE: name,
        gang_env.WORKERS: "2",
        gang_env.PORT: str(gang_env.DEFAULT_PORT),
    }
    assert gang_env.JOB_COMPLETION_INDEX not in env  # Kubernetes sets it
    assert trainer["ports"] == [{"name": "grpc", "containerPort": gang_env.DEFAULT_PORT}]
    # The same flag builder as the in-pod train component: the two cannot drift.
    assert trainer["args"] == in_pod.trainer_flags(
        data_dir="gs://bucket/data", checkpoint_dir="gs://bucket/ckpt",
        model_dir="gs://bucket/ckpt/model", settings=TrainSettings.from_params(inputs),
        extra_args=inputs["extra_args"],
    )  # fmt: skip
    assert child(spot)["template"]["spec"]["terminationGracePeriodSeconds"] == 30


def test_rbac_manifests_are_schema_valid():
    for manifest in rbac.manifests("kubeflow", "pipeline-runner"):
        validate(manifest)


@pytest.mark.parametrize("pipeline", JOB_PIPELINES)
def test_the_launcher_runs_on_demand_on_cpu_and_is_retried_to_reattach(pipeline):
    docs = [d for d in yaml.safe_load_all((comp.COMPILED_DIR / pipeline).read_text()) if d]
    spec, platform = docs
    task = spec["root"]["dag"]["tasks"]["train-job"]
    # KFP retries the launcher (re-attach) within the run's whole timeout.
    assert task["retryPolicy"]["maxRetryCount"] == 5
    assert task["retryPolicy"]["backoffMaxDuration"] == "604800s"
    executor = spec["deploymentSpec"]["executors"]["exec-train-job"]["container"]
    assert "accelerator" not in executor.get("resources", {})
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert not k8s.get("exec-train-job", {}).get("tolerations")  # never on a spot node
    assert not k8s.get("exec-train-job", {}).get("nodeSelector")
    # The profile still measures the training's own GPU node kind.
    assert k8s["exec-profile"]["tolerations"] and k8s["exec-profile"]["nodeSelector"]
