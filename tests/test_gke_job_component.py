"""The train_job component body: inputs refused in one line, outputs as the in-pod train's.

The cluster is the API stand-in (tests/standins/kube_api.py); the pods' work (the
chief's model and ledger in the checkpoint dir) is written by the test where the
trainer would write it.
"""

from __future__ import annotations

import json
import logging
import signal
from types import SimpleNamespace

import pytest
from standins.kube_api import FakeCluster, on_demand_node, spot_node

from spottrain.runtime import train as in_pod
from spottrain.runtime.gke_job import component, control, kube, names, rbac
from spottrain.trainer import checkpointing, ledger, preemption

BASE = dict(
    run_id="run-9", task_name="train-job", workers=2, pool="spot", gpu_type="nvidia-tesla-t4",
    gpus=1, memory_limit="48G", retries=5, unschedulable_timeout=300, on_demand=True,
    deadline="3600s", train_steps=20, backbone="small_cnn", weights="none",
)  # fmt: skip


class FakeMetrics:
    def __init__(self):
        self.logged = {}

    def log_metric(self, name, value):
        self.logged[name] = value


def artifact(path, **extra):
    return SimpleNamespace(path=str(path), metadata={}, uri="", **extra)


def chief_writes(ckpt, started):
    """What the chief trainer leaves behind: the model and its ledger record."""
    model = checkpointing.job_model_dir(str(ckpt))
    (ckpt / "model").mkdir(parents=True, exist_ok=True)
    (ckpt / "model" / in_pod.SUMMARY_FILE).write_text(
        json.dumps({"final_step": 20, "val_accuracy": 0.5})
    )
    (ckpt / "model" / "model.keras").write_bytes(b"weights")
    rec = {"attempt": 1, "started": started, "outcome": "success", "exit_code": 0,
           "start_step": 0, "last_step": 20, "saved_step": 20, "steps_lost": 0}  # fmt: skip
    (ckpt / ledger.LEDGER).write_text(json.dumps({"attempts": [rec]}))
    return model


@pytest.fixture
def local_paths(monkeypatch):
    # Pods on other nodes need gs://; here the "bucket" is a local folder.
    monkeypatch.setattr(component, "check_inputs", lambda **kwargs: None)


def test_outputs_match_the_in_pod_train_and_the_ledger_gains_the_pods(tmp_path, local_paths):
    ckpt = tmp_path / "ckpt"
    job = names.job_name("run-9", "train-job")

    def script(cluster, poll):
        if poll == 2:
            cluster.terminate(job, 1, preemption.PREEMPTED, disruption="TerminationByKubelet")
            cluster.terminate(job, 0, preemption.PEER_LOST)
        if poll == 4:
            started = cluster.current_pod(job, 0)["status"]["containerStatuses"][0]["state"]
            chief_writes(ckpt, _epoch(started["running"]["startedAt"]) + 3)
            cluster.succeed_all(job)

    cluster = FakeCluster([spot_node()], script=script)
    model, metrics, attempts = (
        artifact(tmp_path / "model"),
        FakeMetrics(),
        artifact(tmp_path / "attempts.md"),
    )
    real_launch = component.launch

    def launch(k, **kwargs):
        kwargs.update(poll_seconds=0, launcher_options={"now": cluster.now, "sink": print})
        return real_launch(k, **kwargs)

    component.launch, saved = launch, component.launch
    try:
        component.run_component(
            data=artifact(tmp_path / "data"), model=model, metrics=metrics, attempts=attempts,
            k=kube.Kube(cluster, cluster, "kubeflow"), checkpoint_dir=str(ckpt), **BASE,
        )  # fmt: skip
    finally:
        component.launch = saved
    assert (tmp_path / "model" / "model.keras").read_bytes() == b"weights"
    assert metrics.logged["final_step"] == 20 and metrics.logged["ledger_attempts"] == 1
    assert model.metadata["checkpoint_dir"] == str(ckpt)
    [rec] = ledger.read(str(ckpt))
    assert rec["node"] == "gke-spot-1" and rec["node_kind"] == "spot"
    assert rec["pod_exit_codes"] == {"0": 0, "1": 0}
    table = (tmp_path / "attempts.md").read_text()
    assert "| node | node kind | disruption | pod exit codes |" in table
    assert "gke-spot-1 | spot |" in table


def _epoch(text):
    from spottrain.runtime.gke_job import status

    return status.parse_time(text).timestamp()


def test_a_failed_job_exits_with_its_code_and_one_line(tmp_path, local_paths, caplog):
    job = names.job_name("run-9", "train-job")
    cluster = FakeCluster(
        [spot_node()], script=lambda c, p: p == 2 and c.terminate(job, 0, preemption.FATAL_NAN)
    )
    saved = component.launch

    def launch(k, **kwargs):
        kwargs.update(poll_seconds=0, launcher_options={"now": cluster.now})
        return saved(k, **kwargs)

    component.launch = launch
    try:
        with caplog.at_level(logging.ERROR), pytest.raises(SystemExit) as done:
            component.run_component(
                data=artifact(tmp_path / "d"), model=artifact(tmp_path / "m"),
                metrics=FakeMetrics(), attempts=artifact(tmp_path / "a.md"),
                k=kube.Kube(cluster, cluster, "kubeflow"), checkpoint_dir=str(tmp_path / "c"),
                **BASE,
            )  # fmt: skip
    finally:
        component.launch = saved
    assert done.value.code == preemption.FATAL_NAN
    [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "exit 65" in line and "NaN" in line and "\n" not in line
    assert signal.getsignal(signal.SIGTERM) is not None  # the handler was put back


@pytest.mark.parametrize(
    "change, message",
    [
        ({"checkpoint_dir": "/tmp/ckpt"}, "checkpoint_dir='/tmp/ckpt': the Job-engine train needs"),
        ({"checkpoint_dir": "/gcs/b/ckpt"}, "needs a gs:// folder"),
        ({"data_dir": "/minio/x"}, "data '/minio/x' is not in gs://"),
        ({"run_id": "{{$.pipeline_job_uuid}}"}, "run_id='{{$.pipeline_job_uuid}}': pass"),
        ({"task_name": ""}, "task_name='': pass"),
        ({"workers": 0}, "workers=0: must be >= 1"),
        ({"unschedulable_timeout": -1}, "unschedulable_timeout=-1"),
        ({"pool": "cheap"}, "pool='cheap'"),
        ({"gpu_type": "nvidia-t4"}, "--gpu-type 'nvidia-t4' is not a known accelerator"),
        ({"memory_limit": "48 GB"}, "memory_limit='48 GB'"),
    ],
)
def test_bad_inputs_are_one_line_and_fatal(change, message):
    cluster = FakeCluster([spot_node()])
    kwargs = dict(BASE, data_dir="gs://my-bucket/data", checkpoint_dir="gs://my-bucket/ckpt")
    kwargs.update(change)
    with pytest.raises(in_pod.TrainFailed) as err:
        component.launch(kube.Kube(cluster, cluster, "ns"), **kwargs)
    assert err.value.code == preemption.FATAL_CONFIG
    assert message in str(err.value) and "\n" not in str(err.value)
    assert cluster.created("Job") == []  # refused before anything was sent


def test_image_and_account_come_from_the_launchers_own_pod(monkeypatch):
    own = {
        "metadata": {"name": "launcher-pod"},
        "spec": {
            "serviceAccountName": "pipeline-runner",
            "containers": [{"name": "wait", "image": "argoexec"},
                           {"name": "main", "image": "registry/trainer:1.2"}],
        },
        "status": {"conditions": []},
    }  # fmt: skip
    job = names.job_name("run-9", "train-job")
    cluster = FakeCluster([spot_node()], script=lambda c, p: p == 2 and c.succeed_all(job))
    cluster.pods["launcher-pod"] = own
    monkeypatch.setenv("HOSTNAME", "launcher-pod")
    monkeypatch.setattr(component.ledger, "annotate", lambda *a, **k: 0)
    out = component.launch(
        kube.Kube(cluster, cluster, "ns"), data_dir="gs://my-bucket/d", checkpoint_dir="gs://my-bucket/c",
        default_image="default:0", poll_seconds=0, launcher_options={"now": cluster.now},
        **BASE,
    )  # fmt: skip
    assert out.code == 0
    pod = cluster.sent[1]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "registry/trainer:1.2"
    assert pod["serviceAccountName"] == "pipeline-runner"


def test_sigterm_while_the_launchers_own_pod_is_disrupted_keeps_the_job(monkeypatch):
    import os

    own = {"metadata": {"name": "launcher-pod"}, "spec": {"containers": []},
           "status": {"conditions": []}}  # fmt: skip
    job = names.job_name("run-9", "train-job")

    def script(cluster, poll):
        if poll == 2:  # a node drain: the eviction marks the pod, then SIGTERM
            cluster.pods["launcher-pod"]["status"]["conditions"].append(
                {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
            )
            os.kill(os.getpid(), signal.SIGTERM)

    cluster = FakeCluster([spot_node()], script=script)
    cluster.pods["launcher-pod"] = own
    monkeypatch.setenv("HOSTNAME", "launcher-pod")
    monkeypatch.setattr(component.ledger, "annotate", lambda *a, **k: 0)
    out = component.launch(
        kube.Kube(cluster, cluster, "ns"), data_dir="gs://my-bucket/d", checkpoint_dir="gs://my-bucket/c",
        default_image="i", poll_seconds=0, launcher_options={"now": cluster.now}, **BASE,
    )  # fmt: skip
    assert out.code == preemption.PREEMPTED and job in cluster.jobs and job in cluster.services


# The API calls the launcher makes, as RBAC resources and verbs
# (https://kubernetes.io/docs/reference/access-authn-authz/authorization/#determine-the-request-verb).
CALL_PERMISSIONS = {
    "create_namespaced_job": ("batch", "jobs", "create"),
    "read_namespaced_job": ("batch", "jobs", "get"),
    "delete_namespaced_job": ("batch", "jobs", "delete"),
    "patch_namespaced_job": ("batch", "jobs", "patch"),
    "create_namespaced_service": ("", "services", "create"),
    "read_namespaced_service": ("", "services", "get"),
    "delete_namespaced_service": ("", "services", "delete"),
    "list_namespaced_pod": ("", "pods", "list"),
    "read_namespaced_pod": ("", "pods", "get"),
    "delete_namespaced_pod": ("", "pods", "delete"),
    "read_namespaced_pod_log": ("", "pods/log", "get"),
    "read_node": ("", "nodes", "get"),
}


def test_rbac_grants_exactly_the_calls_the_launcher_makes(monkeypatch):
    own = {"metadata": {"name": "launcher-pod"}, "spec": {"containers": []}, "status": {}}
    spot, od = (
        names.job_name("run-9", "train-job"),
        names.job_name("run-9", "train-job", on_demand=True),
    )

    def script(cluster, poll):
        if od in cluster.jobs:
            cluster.succeed_all(od)
        elif poll == 2:  # a frozen pod the launcher deletes (~120 s on), then retries run out
            cluster.freeze(spot, 1)
            cluster.terminate(spot, 0, preemption.PEER_LOST)
        elif poll == 25:
            cluster.terminate(spot, 0, preemption.PEER_LOST)

    cluster = FakeCluster([on_demand_node()], script=script)
    cluster.nodes.update({"gke-spot-1": spot_node()})
    cluster.pods["launcher-pod"] = own
    monkeypatch.setenv("HOSTNAME", "launcher-pod")
    monkeypatch.setattr(component.ledger, "annotate", lambda *a, **k: 0)
    component.launch(
        kube.Kube(cluster, cluster, "ns"), data_dir="gs://my-bucket/d", checkpoint_dir="gs://my-bucket/c",
        default_image="i", poll_seconds=0, launcher_options={"now": cluster.now},
        **dict(BASE, retries=1, workers=2),
    )  # fmt: skip
    assert any(c[0] == "delete_namespaced_pod" for c in cluster.calls)
    for t in control.threading.enumerate():
        if t.name.startswith("log-"):
            t.join(5)
    used = {CALL_PERMISSIONS[c[0]] for c in cluster.calls}
    granted = {
        (group, res, verb)
        for rule in rbac.RULES + rbac.CLUSTER_RULES
        for group in rule["apiGroups"]
        for res in rule["resources"]
        for verb in rule["verbs"]
    }
    # A recreation (the Job's patch) needs the real controller's back-off, which the
    # stand-in does not have: tests/test_gke_job_backoff_real_kube.py recreates a Job as
    # a service account holding exactly these rules.
    assert ("batch", "jobs", "patch") not in used
    used.add(("batch", "jobs", "patch"))
    assert used == granted  # every call allowed, and nothing granted that is not used


def test_ledger_annotate_matches_records_by_time(tmp_path):
    recs = [
        {"attempt": 1, "started": 1000.0, "outcome": "killed"},
        {"attempt": 2, "started": 2000.0, "outcome": "success"},
    ]
    (tmp_path / ledger.LEDGER).write_text(json.dumps({"attempts": recs}))
    gangs = [
        {"started": 1995.0, "finished": 2500.0, "node": "n2", "node_kind": "on-demand",
         "disruption": "", "pod_exit_codes": {"0": 0}},
        {"started": 990.0, "finished": 1500.0, "node": "n1", "node_kind": "spot",
         "disruption": "TerminationByKubelet", "pod_exit_codes": {"0": 143}},
        {"started": 5000.0, "finished": 5100.0, "node": "n3", "node_kind": "spot"},
    ]  # fmt: skip
    assert ledger.annotate(str(tmp_path), gangs) == 2
    first, second = ledger.read(str(tmp_path))
    assert (first["node"], first["node_kind"], first["disruption"]) == (
        "n1", "spot", "TerminationByKubelet",
    )  # fmt: skip
    assert second["node"] == "n2" and second["pod_exit_codes"] == {"0": 0}
