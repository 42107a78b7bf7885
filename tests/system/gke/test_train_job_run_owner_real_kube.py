"""The gang outlives its launcher's pod, never its run (issue 57), on the real controllers.

kube-cp with JobSet's controller and Argo's own Workflow CRD (v4.0.5's minimal one,
from the sources ``make argoexec`` fetches); the Workflow and the launcher's pod are
objects as Argo makes them (the pod owned by the Workflow, on a node no kubelet serves,
so a delete leaves it terminating as a real kubelet would while the launcher ends);
the launcher is its own process (tests/jobset_launch_proc.py).

Before: a launcher whose pod was deleted (``kubectl delete pod``, before any retry
exists) took its SIGTERM for a terminated run and deleted the gang; the retry started
a new one, the run's clock and restarts from zero. And a run deleted left its gang
running with no launcher. Now a pod being deleted leaves the gang to the retry, which
re-attaches (same JobSet, same start), and the gang is owned by the run's Workflow,
so deleting the run deletes it, by Kubernetes' garbage collector.
"""

from __future__ import annotations

import signal

import pytest
import yaml
from jobset_launch_proc import Proc
from real_jobset import (
    MARKS,
    REPO,
    child_jobs,
    custom,
    get_jobset,
    gone,
    jobset_kube_fixture,  # noqa: F401 - the fixture, by import
    namespace,
    running_pods,
    wait_in,
)
from real_kube import wait_for

from spottrain.runtime.train_job.observe import RUN_STARTED_ANNOTATION

WORKFLOW_CRD = REPO / ".tools/argo-src/manifests/base/crds/minimal/argoproj.io_workflows.yaml"
pytestmark = [
    *MARKS,
    pytest.mark.skipif(not WORKFLOW_CRD.exists(), reason="needs `make argoexec` (Argo's CRDs)"),
]
NODE = "launcher-node"  # a Node no kubelet serves: a deleted pod there stays terminating


@pytest.fixture(scope="module")
def argo_kube(jobset_kube):
    from kubernetes import client as k8s

    cp = jobset_kube
    ext = k8s.ApiextensionsV1Api(cp.admin)
    crd = yaml.safe_load(WORKFLOW_CRD.read_text())
    ext.create_custom_resource_definition(crd)
    wait_for("the Workflow CRD Established", lambda: any(
        c.type == "Established" and c.status == "True"
        for c in ext.read_custom_resource_definition(crd["metadata"]["name"]).status.conditions
        or []), timeout=60)  # fmt: skip
    cp.add_node(NODE, {"role": "kfp"})
    return cp


def _run(cp, ns, workflow: str) -> dict:
    """A Workflow as the KFP run's, with nothing to run it (the launcher is the test's)."""
    namespace(cp, ns)
    spec = {"entrypoint": "x", "templates": []}
    body = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": workflow}, "spec": spec}  # fmt: skip
    return custom(cp).create_namespaced_custom_object(
        "argoproj.io", "v1alpha1", ns, "workflows", body
    )


def _launcher_pod(cp, ns, name: str, wf: dict) -> None:
    """The launcher's pod as Argo makes it: owned by its Workflow (workflowpod.go:211-213)."""
    meta = wf["metadata"]
    owner = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": meta["name"],
             "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    cp.core().create_namespaced_pod(ns, {
        "metadata": {"name": name, "ownerReferences": [owner]},
        "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "launcher"}]},
    })  # fmt: skip


def _started(cp, ns, name, pod: str) -> tuple[Proc, dict]:
    proc = Proc(cp, ns, name, retries=2, launch={"own_pod": pod})
    proc.line("created JobSet" if pod.endswith("-a") else "re-attaching", timeout=120)
    (job,) = wait_for("the child Job", lambda: child_jobs(cp, ns, name), timeout=60)
    running_pods(cp, ns, job.metadata.uid, 2)
    return proc, get_jobset(cp, ns, name)


def test_a_launcher_pod_deleted_leaves_the_gang_to_its_retry_with_the_runs_clock(argo_kube):
    cp, ns, name = argo_kube, "ro-deleted", "st-deleted"
    wf = _run(cp, ns, "run-deleted")
    _launcher_pod(cp, ns, "launcher-a", wf)
    first, before = _started(cp, ns, name, "launcher-a")
    cp.core().delete_namespaced_pod("launcher-a", ns)  # kubectl delete pod: then SIGTERM
    first.proc.send_signal(signal.SIGTERM)
    assert first.wait() == 143, first.text()
    assert "own pod is being disrupted or deleted; the JobSet runs on" in first.text()
    # The retry (Argo makes it once the deleted pod is gone) re-attaches: same gang.
    _launcher_pod(cp, ns, "launcher-b", wf)
    retry, after = _started(cp, ns, name, "launcher-b")
    assert after["metadata"]["uid"] == before["metadata"]["uid"], retry.text()
    started = RUN_STARTED_ANNOTATION
    assert after["metadata"]["annotations"][started] == before["metadata"]["annotations"][started]
    for pod in running_pods(cp, ns, child_jobs(cp, ns, name)[0].metadata.uid, 2):
        cp.kubelet.exit(pod, 0)
    assert retry.wait() == 0, retry.text()


def test_deleting_the_run_deletes_its_gang_with_no_launcher_left(argo_kube):
    cp, ns, name = argo_kube, "ro-run-gone", "st-run-gone"
    wf = _run(cp, ns, "run-gone")
    _launcher_pod(cp, ns, "launcher-a", wf)
    proc, jobset = _started(cp, ns, name, "launcher-a")
    (ref,) = jobset["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["uid"], ref["blockOwnerDeletion"]) == (
        "Workflow", wf["metadata"]["uid"], False)  # fmt: skip
    proc.proc.kill()
    proc.wait(timeout=30)
    custom(cp).delete_namespaced_custom_object(  # the run deleted in KFP
        "argoproj.io", "v1alpha1", ns, "workflows", "run-gone"
    )
    wait_in(cp, ns, "the gang deleted with its run", lambda: gone(cp, ns, name), timeout=120)
