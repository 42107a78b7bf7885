"""The train_job component body: inputs refused in one line, outputs as the in-pod train's.

The launcher itself runs against the real JobSet and Job controllers in
tests/system/gke/test_train_job_launcher_real_kube.py (its component tests too: the image and
account from the launcher's own pod, exactly the RBAC rules). Here the component body's
own work is tested without a cluster: its input checks, and what it makes of a
launcher's :class:`Outcome` (the outputs, the ledger, the exit code). Where an outcome is
needed, ``launcher.JobSetLauncher`` is replaced by :class:`Ended`, a small stand-in that
returns one (what the real launcher returns is shown against the real controllers).
"""

from __future__ import annotations

import json
import logging
import signal
from types import SimpleNamespace

import pytest
from ended_launcher import ended

from spottrain import exits, ledger
from spottrain.ledger import usage
from spottrain.runtime import termination
from spottrain.runtime import train as in_pod
from spottrain.runtime.train_job import component, launcher
from spottrain.runtime.train_job.attempts import PodAttempt
from spottrain.runtime.train_job.inputs import InputError, RunInputs
from spottrain.runtime.train_settings import TrainSettings
from spottrain.trainer import checkpointing

BASE = dict(
    run_id="run-9", task_name="train-job", workers=2, pool="spot", gpu_type="nvidia-tesla-t4",
    gpus=1, memory_limit="48G", retries=5, unschedulable_timeout=300, on_demand=True,
    deadline="3600s", settings=TrainSettings(train_steps=20, backbone="small_cnn", weights="none"),
)  # fmt: skip


class FakeMetrics:
    def __init__(self):
        self.logged = {}

    def log_metric(self, name, value):
        self.logged[name] = value


class NoApi:
    """A cluster that must not be called: any API call fails the test."""

    namespace = "ns"

    def __getattr__(self, name):
        raise AssertionError(f"the component called the API ({name}) before refusing")


def artifact(path, **extra):
    return SimpleNamespace(path=str(path), metadata={}, uri="", **extra)


def chief_writes(ckpt, started):
    """What the chief trainer leaves behind: the model and its ledger record."""
    (ckpt / "model").mkdir(parents=True, exist_ok=True)
    (ckpt / "model" / in_pod.SUMMARY_FILE).write_text(
        json.dumps({"final_step": 20, "val_accuracy": 0.5})
    )
    (ckpt / "model" / "model.keras").write_bytes(b"weights")
    rec = {"attempt": 1, "started": started, "outcome": "success", "exit_code": 0,
           "start_step": 0, "last_step": 20, "saved_step": 20, "steps_lost": 0}  # fmt: skip
    (ckpt / ledger.LEDGER).write_text(json.dumps({"attempts": [rec]}))
    assert checkpointing.job_model_dir(str(ckpt)) == str(ckpt / "model")


@pytest.fixture
def local_paths(monkeypatch):
    # Pods on other nodes need gs://; here the "bucket" is a local folder.
    monkeypatch.setattr(RunInputs, "_check_where", lambda self: None)
    monkeypatch.delenv("HOSTNAME", raising=False)  # no own pod to read


def test_outputs_match_the_in_pod_train_and_the_ledger_gains_the_pods(
    tmp_path, local_paths, monkeypatch
):
    ckpt = tmp_path / "ckpt"
    chief_writes(ckpt, started=1000.0)
    t4 = usage.from_node(
        {"metadata": {"labels": {"node.kubernetes.io/instance-type": "n1-standard-8",
                                 "topology.kubernetes.io/zone": "us-central1-a",
                                 "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}}},
        {"spec": {"containers": [{"name": "trainer",
                                  "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}},
    )  # fmt: skip
    pods = [
        PodAttempt("st-x/0", "st-x-workers-0-0-a", 0, "gke-spot-1", "spot",
                   "TerminationByKubelet", 143, 999.0, 1500.0, usage=t4),
        PodAttempt("st-x/0", "st-x-workers-0-1-b", 1, "gke-spot-2", "spot", "", 143, 999.5, 1500.2),
    ]  # fmt: skip
    seen: list = []
    monkeypatch.setattr(
        launcher, "JobSetLauncher", ended(launcher.Outcome(0, "done", "st-x", attempts=pods), seen)
    )
    model, metrics, attempts = (
        artifact(tmp_path / "model"), FakeMetrics(), artifact(tmp_path / "attempts.md"),
    )  # fmt: skip
    component.run_component(
        data=artifact(tmp_path / "data"), model=model, metrics=metrics, attempts=attempts,
        k=NoApi(), checkpoint_dir=str(ckpt), **BASE,
    )  # fmt: skip
    [(sets, options)] = seen
    assert [ws.placement.pool for ws in sets] == ["spot", "on-demand"]
    assert (options["settings"].capacity_deadline, options["settings"].deadline) == (300, 3600)
    assert (tmp_path / "model" / "model.keras").read_bytes() == b"weights"
    assert metrics.logged["final_step"] == 20 and metrics.logged["ledger_attempts"] == 1
    assert model.metadata["checkpoint_dir"] == str(ckpt)
    [rec] = ledger.read(str(ckpt))
    assert rec["node"] == "gke-spot-1" and rec["node_kind"] == "spot"
    assert rec["pod_exit_codes"] == {"0": 143, "1": 143}
    # What the chief's node was, and the gang (JobSet and restart) the bill's labels name.
    assert (rec["machine_type"], rec["location"], rec["gpu_count"]) == (
        "n1-standard-8", "us-central1-a", 1,
    )  # fmt: skip
    assert rec["gang"] == "st-x/0" and rec["usage_from"] == "node"
    assert "price_unknown" in rec or "spent" in rec  # priced (or said why not) when written
    table = (tmp_path / "attempts.md").read_text()
    assert "| node | node kind | disruption | pod exit codes |" in table
    assert "gke-spot-1 | spot | TerminationByKubelet |" in table


def test_a_failed_run_exits_with_its_code_and_one_line(tmp_path, local_paths, monkeypatch, caplog):
    line = "JobSet st-x failed: pod st-x-workers-0-1-b exited 65 (NaN loss): kept for inspection"
    monkeypatch.setattr(launcher, "JobSetLauncher", ended(launcher.Outcome(65, line, "st-x"), []))
    # The kubelet's termination-message file, which Argo's retry expression reads.
    (tmp_path / "termination-log").touch()
    monkeypatch.setenv(termination.PATH_ENV, str(tmp_path / "termination-log"))
    before = signal.getsignal(signal.SIGTERM)
    with caplog.at_level(logging.ERROR), pytest.raises(SystemExit) as done:
        component.run_component(
            data=artifact(tmp_path / "d"), model=artifact(tmp_path / "m"),
            metrics=FakeMetrics(), attempts=artifact(tmp_path / "a.md"),
            k=NoApi(), checkpoint_dir=str(tmp_path / "c"), **BASE,
        )  # fmt: skip
    assert done.value.code == exits.FATAL_NAN
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [line]
    assert signal.getsignal(signal.SIGTERM) == before  # the handler was put back
    assert not (tmp_path / "m").exists()  # no outputs from a failed run
    assert (tmp_path / "termination-log").read_text() == f"{termination.FATAL_MARK} 65: {line}"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"checkpoint_dir": "/tmp/ckpt"}, "checkpoint_dir='/tmp/ckpt': the JobSet-engine train"),
        ({"checkpoint_dir": "/gcs/b/ckpt"}, "needs a gs:// folder"),
        ({"data_dir": "/minio/x"}, "data '/minio/x' is not in gs://"),
        ({"run_id": "{{$.pipeline_job_uuid}}"}, "run_id='{{$.pipeline_job_uuid}}': pass"),
        ({"task_name": ""}, "task_name='': pass"),
        ({"workers": 0}, "workers=0: expected 1 to 100000"),
        ({"workers": 100001}, "workers=100001: expected 1 to 100000"),
        ({"gpus": 0, "gpu_type": "nvidia-l4"}, "gpus=0 with gpu_type='nvidia-l4'"),
        ({"unschedulable_timeout": -1}, "unschedulable_timeout=-1"),
        ({"pool": "cheap"}, "pool='cheap'"),
        ({"gpu_type": "nvidia-t4"}, "--gpu-type 'nvidia-t4' is not a known accelerator"),
        ({"memory_limit": "48 GB"}, "memory_limit='48 GB'"),
        ({"deadline": "a week"}, "a week"),
    ],
)
def test_bad_inputs_are_one_line_and_fatal_before_any_api_call(change, message):
    kwargs = dict(BASE, data_dir="gs://my-bucket/data", checkpoint_dir="gs://my-bucket/ckpt")
    kwargs.update(change)
    with pytest.raises((InputError, in_pod.TrainFailed)) as err:
        component.launch(NoApi(), RunInputs(**kwargs))
    assert err.value.code == exits.FATAL_CONFIG
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_image_and_account_come_from_the_launchers_main_container():
    own = {
        "spec": {
            "serviceAccountName": "pipeline-runner",
            "containers": [{"name": "wait", "image": "argoexec"},
                           {"name": "main", "image": "registry/trainer:1.2"}],
        },
    }  # fmt: skip
    assert component.image_and_account(own, "default:0") == (
        "registry/trainer:1.2", "pipeline-runner",
    )  # fmt: skip
    assert component.image_and_account(None, "default:0") == ("default:0", "")
    assert component.image_and_account({"spec": {}}, "default:0") == ("default:0", "")


def test_a_compute_class_gets_no_second_jobset():
    from spottrain.placement import Placement

    common = dict(run_id="r", task_name="t", namespace="ns", image="i", args=(), workers=2)
    plain = component.worker_sets(placement=Placement(pool="spot"), on_demand=True, **common)
    assert [ws.name.endswith("-od") for ws in plain] == [False, True]
    cls = Placement(pool="spot", compute_class="spot-then-od")
    assert len(component.worker_sets(placement=cls, on_demand=True, **common)) == 1


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


def test_the_nodes_usage_replaces_the_placements_whole(tmp_path):
    """A record opened with the placement's GPUs (SPOTTRAIN_USAGE on the pods) gets the
    chief's node: machine, zone and the pod's GPUs, nothing of the placement's left."""
    placed = usage.from_placement("nvidia-tesla-t4", 2)
    rec = {"attempt": 1, "started": 1000.0, "outcome": "success", **placed}
    (tmp_path / ledger.LEDGER).write_text(json.dumps({"attempts": [rec]}))
    node = usage.from_node(
        {"metadata": {"labels": {"node.kubernetes.io/instance-type": "e2-standard-4",
                                 "topology.kubernetes.io/region": "us-east1"}}}
    )  # fmt: skip
    gang = {"started": 990.0, "finished": 1500.0, "node": "n1", "node_kind": "on-demand",
            "gang": "st-x-od/0", **node}  # fmt: skip
    assert ledger.annotate(str(tmp_path), [gang]) == 1
    (got,) = ledger.read(str(tmp_path))
    assert {k: got[k] for k in usage.FIELDS if k in got} == node
    assert "gpu_type" not in got and got["gang"] == "st-x-od/0"


WORKFLOW_REF = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "run-x",
                "uid": "u-1", "controller": True, "blockOwnerDeletion": True}  # fmt: skip


@pytest.mark.parametrize(
    ("metadata", "conditions", "going"),
    [
        ({}, [], False),  # Argo's terminate or stop: SIGTERM to a pod it does not delete
        ({"deletionTimestamp": "2026-12-03T10:00:00Z"}, [], True),  # kubectl delete pod
        ({}, [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}],
         True),  # a drain
        ({}, [{"type": "DisruptionTarget", "status": "False"}], False),
    ],
)  # fmt: skip
def test_a_sigterm_leaves_the_gang_to_a_retry_only_when_the_pod_itself_goes(
    metadata, conditions, going
):
    from spottrain.runtime.train_job.component import going_for_a_retry

    pod = {"metadata": {"name": "p", **metadata}, "status": {"conditions": conditions}}
    assert going_for_a_retry(pod) is going
    assert going_for_a_retry(None) is False


def test_the_gang_is_owned_by_the_runs_workflow_not_blocking_its_deletion():
    from dataclasses import replace

    from spottrain.runtime.train_job import jobset as js
    from spottrain.runtime.train_job.component import run_owner

    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u-0"}
    pod = {"metadata": {"ownerReferences": [other, WORKFLOW_REF]}}
    owner = run_owner(pod)
    assert owner == {k: WORKFLOW_REF[k] for k in ("apiVersion", "kind", "name", "uid")}
    assert run_owner({"metadata": {}}) is None and run_owner(None) is None
    ws = js.WorkerSet(name="g", namespace="n", image="i", args=(), workers=2,
                      placement=js.Placement(pool="spot"), owner=owner)  # fmt: skip
    (ref,) = js.jobset(ws)["metadata"]["ownerReferences"]
    assert ref == {**owner, "blockOwnerDeletion": False}
    assert "ownerReferences" not in js.jobset(replace(ws, owner=None))["metadata"]


@pytest.mark.parametrize(
    "change",
    [
        {"queue": "Team_A"},
        {"priority_class": "high"},  # without a queue
        {"queue": "team-a", "priority_class": "NOPE_"},
        {"queue": "team-a", "pool": "preemptible"},
        {"queue": "team-a", "compute_class": "spot-then-od"},
        {"prior_step_seconds": float("nan")},
        {"prior_step_seconds": -1.0},
        {"admission_timeout": -1},
    ],
)
def test_what_the_dry_run_refuses_the_launcher_refuses_with_the_same_words(change, kfp_api, capsys):
    """One check at both ends (train_job/inputs.py): submit never passes what the pod refuses."""
    kwargs = dict(BASE, data_dir="gs://my-bucket/data", checkpoint_dir="gs://my-bucket/ckpt",
                  pool="spot")  # fmt: skip
    kwargs.update(change)
    with pytest.raises((InputError, in_pod.TrainFailed)) as err:
        component.launch(NoApi(), RunInputs(**kwargs))
    assert err.value.code == exits.FATAL_CONFIG
    from kfp_api import run_cli

    params = [f"{k}={v}" for k, v in change.items() if k not in ("pool", "compute_class")]
    flags = ["--pool", "spot"] if change.get("pool", "spot") == "spot" else []
    if {"compute_class", "admission_timeout"} & set(change):
        return  # train_job's inputs, not our pipelines' parameters: a user's own pipeline
    code, out, said = run_cli(
        "run-gke", "--dry-run", *flags, "data_src=gs://my-bucket/d",
        "checkpoint_dir=gs://my-bucket/c", *params, capsys=capsys,
    )  # fmt: skip
    assert code == 2 and out == "", said
    assert said.strip().endswith(str(err.value)), (said, str(err.value))


@pytest.mark.parametrize(
    "finish_by", ["0", "0.001s", "30s", "banana", "2020-01-01T00:00:00Z", "2026-12-31T00:00:00",
                  "99999999999999999999d"],
)  # fmt: skip
def test_a_finish_by_the_dry_run_refuses_the_launcher_refuses(finish_by, tmp_path, kfp_api, capsys):
    from kfp_api import run_cli

    code, out, said = run_cli(
        "run-gke", "--dry-run", "data_src=gs://my-bucket/d", "checkpoint_dir=gs://my-bucket/c",
        f"finish_by={finish_by}", capsys=capsys,
    )  # fmt: skip
    assert code == 2 and out == "" and f"finish_by={finish_by!r}" in said, said
    with pytest.raises(in_pod.TrainFailed) as err:
        component.for_the_deadline(finish_by, str(tmp_path), TrainSettings(), [])
    assert err.value.code == exits.FATAL_CONFIG
    assert said.strip().endswith(str(err.value)), (said, str(err.value))
