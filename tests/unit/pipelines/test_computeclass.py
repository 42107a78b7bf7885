"""GKE custom ComputeClass: the manifest we write, the pods that select it, the JobSet
engine.

The in-process tests; those that start processes are in
tests/integration/pipelines/test_computeclass.py.
"""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml
from computeclass_check import CLASS, _gangs, check
from jobset_manifests import child_job
from jobset_manifests import validate as validate_k8s

from spottrain.ladder import Rung
from spottrain.pipelines import computeclass
from spottrain.placement import COMPUTE_CLASS_LABEL, Placement, PlacementError
from spottrain.runtime.train_job import jobset as js
from spottrain.runtime.train_job import status

REPO = Path(__file__).resolve().parents[3]


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


def test_pods_select_only_the_class_and_tolerate_its_taint():
    assert CLASS.node_selector == {COMPUTE_CLASS_LABEL: "spottrain-t4"}
    keys = {(t["key"], t["value"]) for t in CLASS.tolerations()}
    assert keys == {(COMPUTE_CLASS_LABEL, "spottrain-t4"), ("cloud.google.com/gke-spot", "true")}
    assert CLASS.resources()["limits"]["nvidia.com/gpu"] == "1"
    for bad in (dict(pool="preemptible"), dict(pool="spot", node_pool="p1")):
        with pytest.raises(PlacementError, match="chooses the capacity itself"):
            Placement(compute_class="spottrain-t4", **bad)


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


def test_a_ledger_record_names_the_capacity_the_pipeline_compiled_for(tmp_path, monkeypatch):
    """In-pod GKE tasks and Vertex replicas get SPOTTRAIN_CAPACITY; each record keeps it
    and the KFP UI's table shows it (JobSet-engine records have the node's kind instead)."""
    from spottrain import ledger as ledger_lib
    from spottrain.runtime.train import ledger_markdown

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


def test_the_compiled_tasks_carry_what_they_run_on_for_the_ledgers_prices():
    """The in-pod train task: its placement's GPUs (machine and zone are its node's);
    the Vertex job's replicas: its machine_spec; the fall-back launcher: the run's id."""
    from spottrain.ledger import usage

    def executors(name: str) -> dict:
        text = (REPO / "pipelines" / "compiled" / name).read_text()
        return next(d for d in yaml.safe_load_all(text) if d)["deploymentSpec"]["executors"]

    env = {e["name"]: e["value"] for e in executors("spottrain_gke_spot.yaml")["exec-train"]
           ["container"]["env"]}  # fmt: skip
    assert usage.from_env(env) == usage.from_placement("nvidia-tesla-t4", 1)
    text = (REPO / "pipelines" / "compiled" / "spottrain_vertex.yaml").read_text()
    assert usage.USAGE_ENV in text
    assert '"machine_type":"n1-standard-8","platform":"vertex"' in text
    args = executors("spottrain_vertex_fallback.yaml")
    (launcher,) = [e for e in args.values() if "--run_id" in e["container"].get("args", [])]
    argv = launcher["container"]["args"]
    assert argv[argv.index("--run_id") + 1] == "{{$.pipeline_job_uuid}}"


def test_a_ladder_becomes_the_class_priorities_in_its_order_and_valid():
    """One ladder for both platforms: the class's priorities are its rungs."""
    from spottrain.ladder import parse

    t4 = Rung("spot", "", "nvidia-tesla-t4", 1, 2)
    ladder = parse(
        '[{"capacity": "reservation"}, {"capacity": "spot", "machine_type": "n1-standard-16"},'
        ' {"capacity": "flex-start"}, {"capacity": "on-demand"}]',
        t4,
    )
    cls = computeclass.from_ladder("team-t4", ladder, reservation="res-1")
    check(cls)
    reserved, spot, flex, on_demand = cls["spec"]["priorities"]
    assert reserved["reservations"]["specific"] == [{"name": "res-1"}]
    gpu = {"type": "nvidia-tesla-t4", "count": 1, "driverVersion": "default"}
    assert spot == {"machineType": "n1-standard-16", "spot": True, "gpu": gpu}
    assert flex["flexStart"] == {"enabled": True} and "spot" not in flex
    assert on_demand["machineFamily"] == "n1" and set(on_demand) == {"machineFamily", "gpu"}
    # The manifest the make target writes is this same path, from a ladder it builds.
    assert computeclass.manifest("team-t4", "nvidia-tesla-t4", 1, flex_start=True) == (
        computeclass.from_ladder("team-t4", parse(
            '[{"capacity": "spot"}, {"capacity": "flex-start"}, {"capacity": "on-demand"}]', t4
        ))
    )  # fmt: skip


@pytest.mark.parametrize(
    ("rungs", "word"),
    [
        ('[{"capacity": "spot"}, {"capacity": "on-demand", "gpu_count": 2}]', "equal GPUs"),
        ('[{"capacity": "spot"}, {"capacity": "on-demand", "workers": 3}]', "GPUs or workers"),
        ('[{"capacity": "spot", "location": "us-east1"}]', "cluster's location"),
        ('[{"capacity": "reservation"}]', "name it"),
    ],
)
def test_a_ladder_a_class_cannot_express_is_one_line(rungs, word):
    from spottrain.ladder import LadderError, parse

    ladder = parse(rungs, Rung("spot", "", "nvidia-tesla-t4", 1, 2))
    with pytest.raises(LadderError, match=word):
        computeclass.from_ladder("team-t4", ladder)
