"""Every manifest the Job-engine launcher sends, checked against Kubernetes' own schemas.

The launcher runs (against the API stand-in) with the inputs the committed GKE Job
pipelines give it, for 1 and 2 workers, through a fall-back to on-demand, so the
spot and on-demand Job and Service are all sent; each one is validated with
``kubernetes-validate`` against the official OpenAPI schemas of a pinned recent
Kubernetes version, strictly (an unknown field is an error, as the API server's
strict field validation makes it).
"""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from standins.kube_api import FakeCluster, on_demand_node, preemptible_node, spot_node

from spottrain.pipelines import compile as comp
from spottrain.runtime import train as in_pod
from spottrain.runtime.gke_job import component, kube, manifests, names, rbac
from spottrain.trainer import config, gang_env, preemption

# GKE's regular channel runs 1.33-1.34 (late 2026); podReplacementPolicy is GA in 1.34.
K8S_VERSION = "1.34.0"
JOB_PIPELINES = [comp.gke_yaml(pool, engine="job") for pool in ("preemptible", "spot")]


def validate(manifest: dict) -> None:
    kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


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


def node_for(pool: str) -> dict:
    return {"spot": spot_node, "preemptible": preemptible_node}[pool]()


def run_compiled(path: Path, workers: int, spot_capacity: bool):
    inputs = launcher_inputs(path)
    assert inputs["run_id"] == "{{$.pipeline_job_uuid}}"  # resolved by KFP's driver
    assert inputs["task_name"] == "{{$.pipeline_task_name}}"
    inputs.update(
        run_id="4f1c-run", task_name="train-job", workers=workers,
        checkpoint_dir="gs://bucket/ckpt",
    )  # fmt: skip
    spot = names.job_name("4f1c-run", "train-job")
    od = names.job_name("4f1c-run", "train-job", on_demand=True)

    def script(cluster, poll):
        for job in (spot, od):
            if job in cluster.jobs and poll % 200 == 3:
                cluster.succeed_all(job)

    nodes = [node_for(inputs["pool"])] if spot_capacity else [on_demand_node()]
    cluster = FakeCluster(nodes, script=script)
    cluster.max_polls = 400
    k = kube.Kube(cluster, cluster, "kubeflow")
    outcome = component.launch(
        k, data_dir="gs://bucket/data", default_image="trainer:test", poll_seconds=0,
        launcher_options={"now": cluster.now, "sink": lambda line: None}, **inputs,
    )  # fmt: skip
    return inputs, outcome, cluster


@pytest.fixture(autouse=True)
def no_ledger(monkeypatch):
    # The ledger lives in gs:// here; what the launcher adds to it is tested elsewhere.
    monkeypatch.setattr(component.ledger, "annotate", lambda *a, **k: 0)


@pytest.mark.parametrize("workers", [1, 2], ids=["1-node", "2-node"])
@pytest.mark.parametrize("pipeline", JOB_PIPELINES)
def test_manifests_from_the_compiled_pipeline_are_schema_valid(pipeline, workers):
    inputs, outcome, cluster = run_compiled(comp.COMPILED_DIR / pipeline, workers, False)
    assert outcome.code == 0 and outcome.failed_over  # sent spot and on-demand objects
    kinds = [
        (m["kind"], m["metadata"]["name"].endswith(names.ON_DEMAND_SUFFIX)) for m in cluster.sent
    ]
    assert kinds == [("Service", False), ("Job", False), ("Service", True), ("Job", True)]
    for manifest in cluster.sent:
        validate(manifest)
    spot_job, od_job = cluster.sent[1], cluster.sent[3]
    for job in (spot_job, od_job):
        spec = job["spec"]
        assert spec["completionMode"] == "Indexed"
        assert spec["completions"] == spec["parallelism"] == workers
        assert spec["backoffLimit"] == inputs["retries"] * workers
        assert spec["activeDeadlineSeconds"] == 604800
        pod = spec["template"]["spec"]
        [trainer] = pod["containers"]
        # tini (the image's init) as PID 1, then the trainer's entry point: no shell
        assert trainer["command"] == ["tini", "--", "python", "-m", "spottrain.trainer.task"]
        assert pod["subdomain"] == job["metadata"]["name"]
        assert trainer["resources"]["limits"] == {"nvidia.com/gpu": "1", "memory": "48G"}
    spot_pod = spot_job["spec"]["template"]["spec"]
    pool = inputs["pool"]
    assert spot_pod["nodeSelector"][f"cloud.google.com/gke-{pool}"] == "true"
    assert len(spot_pod["tolerations"]) == 1
    od_pod = od_job["spec"]["template"]["spec"]
    assert (
        "tolerations" not in od_pod and f"cloud.google.com/gke-{pool}" not in od_pod["nodeSelector"]
    )


def test_the_pod_contract_and_the_args_of_the_in_pod_train():
    inputs, _, cluster = run_compiled(comp.COMPILED_DIR / JOB_PIPELINES[0], 2, True)
    job, service = cluster.sent[1], cluster.sent[0]
    [trainer] = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in trainer["env"]}
    name = job["metadata"]["name"]
    assert env == {
        gang_env.JOB_NAME: name,
        gang_env.SERVICE: service["metadata"]["name"],
        gang_env.WORKERS: "2",
        gang_env.PORT: str(gang_env.DEFAULT_PORT),
    }
    assert gang_env.JOB_COMPLETION_INDEX not in env  # Kubernetes sets it
    assert trainer["ports"] == [{"name": "grpc", "containerPort": gang_env.DEFAULT_PORT}]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {names.GANG_LABEL: name}
    assert job["spec"]["template"]["metadata"]["labels"][names.GANG_LABEL] == name
    # The same flag builder as the in-pod train component: the two cannot drift.
    hyper = {k: inputs[k] for k in config.PIPELINE_HYPERPARAMETERS}
    assert trainer["args"] == in_pod.trainer_flags(
        data_dir="gs://bucket/data", checkpoint_dir="gs://bucket/ckpt",
        model_dir="gs://bucket/ckpt/model", extra_args=inputs["extra_args"], **hyper,
    )  # fmt: skip
    assert job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 30


def test_the_trainer_in_each_pod_finds_its_peers_where_the_manifests_put_them():
    """The two halves of the contract together: manifest env -> trainer's cluster."""
    from spottrain.trainer import distribution

    _, _, cluster = run_compiled(comp.COMPILED_DIR / JOB_PIPELINES[0], 2, True)
    job, service = cluster.sent[1], cluster.sent[0]
    pod = job["spec"]["template"]["spec"]
    [trainer] = pod["containers"]
    env = {e["name"]: e["value"] for e in trainer["env"]}
    name, port = job["metadata"]["name"], trainer["ports"][0]["containerPort"]
    # Kubernetes: hostname <job>-<index>, subdomain = the headless Service.
    assert pod["subdomain"] == service["metadata"]["name"]
    assert job["spec"]["completionMode"] == "Indexed"
    for index in range(2):
        got = distribution.read_cluster({**env, gang_env.JOB_COMPLETION_INDEX: str(index)})
        assert got.is_chief == (index == 0) and got.num_workers == 2
        assert distribution.job_tf_config({**env, gang_env.JOB_COMPLETION_INDEX: str(index)})[
            "cluster"
        ]["worker"] == [f"{name}-{i}.{pod['subdomain']}:{port}" for i in range(2)]


def test_pod_failure_policy_comes_from_the_exit_code_table():
    rules = manifests.pod_failure_policy()["rules"]
    assert rules[0] == {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }
    assert rules[1]["action"] == "FailJob"
    assert rules[1]["onExitCodes"]["values"] == [64, 65] == sorted(preemption.FATAL)
    assert rules[2]["action"] == "Count"
    assert {143, 170, 171} <= set(rules[2]["onExitCodes"]["values"])


def test_a_broken_manifest_is_caught_by_the_schema_check():
    gang = manifests.Gang(
        name="st-x", namespace="ns", image="i", args=(), workers=1,
        placement=component.Placement(), deadline_seconds=10,
    )  # fmt: skip
    job = manifests.job(gang)
    job["spec"]["podFailurePolicy"]["rules"][0]["onPodCondition"] = []  # a typo'd field
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(job)
    service = manifests.service(gang)
    service["spec"]["ports"][0]["port"] = "2222"  # a string where an integer belongs
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(service)


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
