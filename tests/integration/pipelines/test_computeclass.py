"""GKE custom ComputeClass: the manifest we write, the pods that select it, the JobSet engine.

The ComputeClass is checked against ``tests/schemas/computeclass.json``, written from
GKE's CRD reference and Google's CRD types (cited in the schema); no GKE cluster
runs here, so what GKE's own admission adds beyond them is not checked. A pod the
class moves back to spot (active migration drains the node: Eviction API evictions,
``DisruptionTarget``/``EvictionByEvictionAPI``) restarts the JobSet for free: shown
with the real JobSet, Job and eviction code in tests/system/gke/test_train_job_jobset_real_kube.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from computeclass_check import CLASS, _gangs, check
from jobset_manifests import child_job
from jobset_manifests import validate as validate_k8s

from spottrain.placement import COMPUTE_CLASS_LABEL, Placement, PlacementError
from spottrain.runtime.train_job import jobset as js
from spottrain.runtime.train_job import status

REPO = Path(__file__).resolve().parents[3]


def test_the_cli_prints_valid_yaml_and_refuses_bad_values_in_one_line():
    run = [sys.executable, "-m", "spottrain.pipelines", "computeclass"]
    ok = subprocess.run([*run, "--name", "c1", "--gpus", "2"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    check(yaml.safe_load(ok.stdout))
    bad = subprocess.run([*run, "--spot-grace", "90"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr
    assert "spot grace 90 s: GKE accepts 30 or 120" in bad.stderr


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
