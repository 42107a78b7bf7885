"""GKE custom ComputeClass: the manifest we write, the pods that select it, the JobSet engine.

The ComputeClass is checked against ``tests/schemas/computeclass.json``, written from
GKE's CRD reference and Google's CRD types (cited in the schema); no GKE cluster
runs here, so what GKE's own admission adds beyond them is not checked. A pod the
class moves back to spot (active migration drains the node: Eviction API evictions,
``DisruptionTarget``/``EvictionByEvictionAPI``) restarts the JobSet for free: shown
with the real JobSet, Job and eviction code in tests/test_train_job_jobset_real_kube.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from jobset_manifests import child_job
from jobset_manifests import validate as validate_k8s

from spottrain.pipelines import computeclass
from spottrain.placement import COMPUTE_CLASS_LABEL, Placement, PlacementError
from spottrain.runtime.train_job import component, status
from spottrain.runtime.train_job import jobset as js

REPO = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((REPO / "tests" / "schemas" / "computeclass.json").read_text())
CLASS = Placement(pool="spot", compute_class="spottrain-t4")


def check(cls: dict) -> None:
    jsonschema.validate(cls, SCHEMA, cls=jsonschema.Draft202012Validator)


def test_the_class_is_spot_then_on_demand_with_active_migration_and_valid():
    cls = computeclass.manifest("spottrain-t4", "nvidia-tesla-t4", 2)
    check(cls)
    spot, on_demand = cls["spec"]["priorities"]
    assert spot["spot"] is True and "spot" not in on_demand
    for p in (spot, on_demand):
        assert p["machineFamily"] == "n1" and p["gpu"]["type"] == "nvidia-tesla-t4"
        assert p["gpu"]["count"] == 2
    assert "nodeSystemConfig" not in spot  # GKE's default 30 s is not written out
    assert cls["spec"]["activeMigration"] == {"optimizeRulePriority": True}
    assert cls["spec"]["whenUnsatisfiable"] == "DoNotScaleUp"
    assert cls["spec"]["nodePoolAutoCreation"] == {"enabled": True}


def test_a_reservation_comes_first_and_a_long_spot_grace_only_on_spot():
    cls = computeclass.manifest(
        "team-a100", "nvidia-tesla-a100", 1, reservation="res-1",
        reservation_project="shared-proj", spot_grace_seconds=120,
    )  # fmt: skip
    check(cls)
    reserved, spot, on_demand = cls["spec"]["priorities"]
    assert reserved["reservations"] == {
        "affinity": "Specific",
        "specific": [{"name": "res-1", "project": "shared-proj"}],
    }
    assert reserved["machineFamily"] == "a2" and "spot" not in reserved
    kubelet = spot["nodeSystemConfig"]["kubeletConfig"]
    assert kubelet == {
        "shutdownGracePeriodSeconds": 120,
        "shutdownGracePeriodCriticalPodsSeconds": 15,
    }
    assert "nodeSystemConfig" not in on_demand and "nodeSystemConfig" not in reserved


def test_flex_start_sits_between_spot_and_on_demand():
    cls = computeclass.manifest("spottrain-l4", "nvidia-l4", 1, flex_start=True)
    check(cls)
    spot, flex, on_demand = cls["spec"]["priorities"]
    assert spot["spot"] and flex["flexStart"] == {"enabled": True} and "spot" not in flex
    assert "flexStart" not in on_demand and flex["machineFamily"] == "g2"
    flex["spot"] = True  # what the CRD refuses: a priority both flex-start and spot
    with pytest.raises(jsonschema.ValidationError):
        check(cls)


@pytest.mark.parametrize(
    "bad",
    [
        # What GKE's CRD refuses: the schema must refuse it too (it can fail).
        lambda c: c["spec"]["priorities"][0].update(reservations={"affinity": "None"}),
        lambda c: c["spec"]["priorities"][1].update(
            nodeSystemConfig={"kubeletConfig": {"shutdownGracePeriodSeconds": 120}}
        ),
        lambda c: c["spec"]["priorities"][0].update(machineType="n1-standard-8"),
        lambda c: c["spec"].update(whenUnsatisfiable="Wait"),
        lambda c: c["spec"]["priorities"][0]["gpu"].update(count=0),
        lambda c: c["spec"].update(activeMigration={"optimizeRulePriorities": True}),
        lambda c: c["metadata"].update(name="gke-t4"),
    ],
)
def test_the_schema_refuses_what_the_crd_refuses(bad):
    cls = computeclass.manifest("spottrain-t4", "nvidia-tesla-t4", 1)
    bad(cls)
    with pytest.raises(jsonschema.ValidationError):
        check(cls)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"name": "gke-gpu"}, "'gke-gpu'"),
        ({"name": "My_Class"}, "'My_Class'"),
        ({"gpu_type": "nvidia-t4"}, "'nvidia-t4'"),
        ({"gpu_count": 0}, "gpu count 0"),
        ({"spot_grace_seconds": 0}, "spot grace 0 s"),
        ({"spot_grace_seconds": 60}, "spot grace 60 s"),
        ({"reservation_project": "p"}, "without a reservation"),
    ],
)
def test_bad_class_settings_are_one_line_naming_the_value(kwargs, named):
    args = {"name": "spottrain-t4", "gpu_type": "nvidia-tesla-t4", "gpu_count": 1, **kwargs}
    with pytest.raises(PlacementError, match=named.replace("(", r"\(")):
        computeclass.manifest(args.pop("name"), args.pop("gpu_type"), args.pop("gpu_count"), **args)


@pytest.mark.integration
def test_the_cli_prints_valid_yaml_and_refuses_bad_values_in_one_line():
    run = [sys.executable, "-m", "spottrain.pipelines", "computeclass"]
    ok = subprocess.run([*run, "--name", "c1", "--gpus", "2"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    check(yaml.safe_load(ok.stdout))
    bad = subprocess.run([*run, "--spot-grace", "90"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr
    assert "spot grace 90 s: GKE accepts 30 or 120" in bad.stderr


def test_pods_select_only_the_class_and_tolerate_its_taint():
    assert CLASS.node_selector == {COMPUTE_CLASS_LABEL: "spottrain-t4"}
    keys = {(t["key"], t["value"]) for t in CLASS.tolerations()}
    assert keys == {(COMPUTE_CLASS_LABEL, "spottrain-t4"), ("cloud.google.com/gke-spot", "true")}
    assert CLASS.resources()["limits"]["nvidia.com/gpu"] == "1"
    for bad in (dict(pool="preemptible"), dict(pool="spot", node_pool="p1")):
        with pytest.raises(PlacementError, match="chooses the capacity itself"):
            Placement(compute_class="spottrain-t4", **bad)


def _gangs(placement):
    return component.worker_sets(
        run_id="run-1", task_name="train", namespace="kubeflow", image="trainer:test",
        args=("--train-steps", "10"), workers=2, placement=placement, on_demand=True,
    )  # fmt: skip


def node(name: str, labels: dict) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


def test_the_jobset_engine_with_a_class_has_no_fall_back_gang_and_valid_pods():
    (gang,) = _gangs(CLASS)  # the class moves pods to on-demand; no second JobSet
    assert len(_gangs(CLASS.with_(compute_class=""))) == 2
    job = child_job(js.jobset(gang))
    validate_k8s(job)
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {COMPUTE_CLASS_LABEL: "spottrain-t4"}
    assert {"key": COMPUTE_CLASS_LABEL, "operator": "Equal", "value": "spottrain-t4",
            "effect": "NoSchedule"} in pod["tolerations"]  # fmt: skip


@pytest.mark.integration
def test_a_flex_start_pool_and_the_job_pods_placed_on_it_match(tmp_path):
    """Outside a class: ``make gke-nodepool POOL=flex-start`` and ``compile --target
    gke-job --pool flex-start``. The pods select GKE's flex-start label (what GKE's
    flex-start page's pods select) and tolerate the taint our pool command sets; the
    launcher's on-demand gang stays for capacity that does not come."""
    from spottrain.pipelines import placement as pl

    flex = Placement(pool="flex-start")
    cmd = pl.nodepool_command(flex, cluster="c", zone="z")
    assert "--flex-start" in cmd and "--reservation-affinity=none" in cmd
    taint = next(f.split("=", 1)[1] for f in cmd if f.startswith("--node-taints="))
    spot_gang, on_demand = _gangs(flex)
    job = child_job(js.jobset(spot_gang))
    validate_k8s(job)
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-flex-start": "true",
        "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
    }
    key, rest = taint.split("=")
    value, effect = rest.split(":")
    assert {"key": key, "operator": "Equal", "value": value, "effect": effect} in pod[
        "tolerations"
    ]  # fmt: skip
    assert "cloud.google.com/gke-flex-start" not in json.dumps(js.jobset(on_demand))
    assert status_node_kind({"cloud.google.com/gke-flex-start": "true"}) == "flex-start"
    out = tmp_path / "fs.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "spottrain.pipelines", "compile", "--target", "gke-job",
         "--pool", "flex-start", "--out", str(out)], capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    spec = next(d for d in yaml.safe_load_all(out.read_text()) if d)
    train = spec["root"]["dag"]["tasks"]["train-job"]["inputs"]["parameters"]
    assert train["pool"]["runtimeValue"]["constant"] == "flex-start"
    with pytest.raises(PlacementError, match="flex-start VMs cannot consume reservations"):
        pl.nodepool_command(flex, cluster="c", zone="z", reservation="r1")


def status_node_kind(labels: dict) -> str:
    return status.node_kind({"metadata": {"labels": labels}})


@pytest.mark.integration
def test_a_compiled_jobset_engine_pipeline_selects_the_class(tmp_path):
    """``compile --target gke-job --pool spot --compute-class NAME``: the JobSet's pods get
    the class from the launcher's input, the profile task (a KFP pod on the training's
    kind of node) selects it in the platform spec; the launcher stays on on-demand CPU."""
    out = tmp_path / "cc.yaml"
    run = [sys.executable, "-m", "spottrain.pipelines", "compile", "--target", "gke-job",
           "--pool", "spot", "--compute-class", "spottrain-t4", "--out", str(out)]  # fmt: skip
    done = subprocess.run(run, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    spec, platform = [d for d in yaml.safe_load_all(out.read_text()) if d]
    train = spec["root"]["dag"]["tasks"]["train-job"]["inputs"]["parameters"]
    assert train["compute_class"]["runtimeValue"]["constant"] == "spottrain-t4"
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert k8s["exec-profile"]["nodeSelector"]["labels"] == {COMPUTE_CLASS_LABEL: "spottrain-t4"}
    tolerated = {(t["key"], t.get("value")) for t in k8s["exec-profile"]["tolerations"]}
    assert (COMPUTE_CLASS_LABEL, "spottrain-t4") in tolerated
    assert not k8s.get("exec-train-job", {}).get("nodeSelector")
    # The in-pod and fall-back variants do not take a class: one line, exit 2.
    for target in ("gke", "gke-fallback"):
        bad = subprocess.run([*run[:5], target, *run[6:]], capture_output=True, text=True)
        assert bad.returncode == 2 and "is for --target gke-job" in bad.stderr, bad.stderr


@pytest.mark.parametrize(
    ("labels", "kind"),
    [
        ({"cloud.google.com/gke-spot": "true"}, "spot"),
        ({"cloud.google.com/gke-preemptible": "true"}, "preemptible"),
        ({"cloud.google.com/gke-flex-start": "true"}, "flex-start"),
        ({"cloud.google.com/reservation-name": "res-1"}, "reservation"),
        ({COMPUTE_CLASS_LABEL: "spottrain-t4"}, "on-demand"),
    ],
)
def test_the_ledger_names_each_capacity_kind_from_the_node_labels(labels, kind):
    assert status.node_kind(node("n1", labels)) == kind


@pytest.mark.integration
def test_a_longer_spot_grace_reaches_the_job_pods(tmp_path):
    """``--spot-grace 120`` (the class's or the pool's kubelet setting): the pods ask
    for 105 s, what the kubelet gives them after the 15 s it keeps for system pods;
    the default stays the 30 s notice. Anything else GKE refuses is one line."""
    assert Placement().grace_seconds == 30
    job = child_job(js.jobset(_gangs(CLASS.with_(grace_seconds=105))[0]))
    validate_k8s(job)
    assert job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 105
    with pytest.raises(PlacementError, match="grace_seconds=10"):
        Placement(grace_seconds=10)
    out = tmp_path / "cc.yaml"
    run = [sys.executable, "-m", "spottrain.pipelines", "compile", "--target", "gke-job",
           "--pool", "spot", "--compute-class", "c1", "--out", str(out)]  # fmt: skip
    done = subprocess.run([*run, "--spot-grace", "120"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    spec = next(d for d in yaml.safe_load_all(out.read_text()) if d)
    train = spec["root"]["dag"]["tasks"]["train-job"]["inputs"]["parameters"]
    assert train["grace_seconds"]["runtimeValue"]["constant"] == 105
    bad = subprocess.run([*run, "--spot-grace", "60"], capture_output=True, text=True)
    assert bad.returncode == 2 and "spot grace 60 s: GKE accepts 30 or 120" in bad.stderr


def test_a_ledger_record_names_the_capacity_the_pipeline_compiled_for(tmp_path, monkeypatch):
    """In-pod GKE tasks and Vertex replicas get SPOTTRAIN_CAPACITY; each record keeps it
    and the KFP UI's table shows it (JobSet-engine records have the node's kind instead)."""
    from spottrain.runtime.train import ledger_markdown
    from spottrain.trainer import ledger as ledger_lib

    monkeypatch.setenv(ledger_lib.CAPACITY_ENV, "preemptible")
    book = ledger_lib.Ledger(str(tmp_path), True)
    book.begin(0)
    (rec,) = book.end(143) and ledger_lib.read(str(tmp_path))
    assert rec["capacity"] == "preemptible"
    table = ledger_markdown([rec], ledger_lib.totals([rec]))
    assert "| capacity |" in table and "| preemptible |" in table
    text = (REPO / "pipelines" / "compiled" / "spottrain_gke_spot.yaml").read_text()
    spec = next(d for d in yaml.safe_load_all(text) if d)
    env = spec["deploymentSpec"]["executors"]["exec-train"]["container"]["env"]
    assert {"name": "SPOTTRAIN_CAPACITY", "value": "spot"} in env
