"""The Job controller's replacement back-off and the launcher's recreation, on kube-cp.

Settles question (1) of the real-control-plane work: every failed pod, disruptions
included, lengthens the wait before the next pods (k8s.io/kubernetes v1.34.3
``pkg/controller/job/backoff_utils.go``), and the launcher recreates the Job when that
wait is long (``spottrain.runtime.gke_job.recreate``). Runs before
tests/test_gke_job_real_kube.py (file order), whose last test checks the fake nodes.
"""

from __future__ import annotations

import json
import time

import pytest
from real_kube import (
    ACCELERATOR_LABEL,
    GPU,
    NODEPOOL_LABEL,
    SPOT_LABEL,
    SPOT_TAINT,
    real_kube_fixture,  # noqa: F401 - the fixture
    wait_for,
)
from real_kube_launch import Background, gangs, launcher, pods, running

from spottrain.runtime.gke_job import recreate
from spottrain.trainer import preemption

pytestmark = pytest.mark.slow


# -- (c) and settle (1) ----------------------------------------------------------------------
def test_c_disruptions_are_free_and_a_long_replacement_back_off_is_skipped(real_kube, capsys):
    """The real Job controller delays replacements 10 s x 2^(n-1) after the n-th failed
    pod, ignored disruptions included (the 2nd disruption waits 20 s, not 10). From a
    wait of 40 s on, the launcher recreates the Job instead, carrying over the counted
    failures (backoffLimit 1 - 1) and the time left (spottrain.runtime.gke_job.recreate)."""
    cp, ns = real_kube, "real-c"
    client = cp.namespace_with_launcher_account(ns)
    gs = gangs(ns, "run-c", workers=1, retries=1)  # backoffLimit 1
    job = gs[0].name
    first_uid = None
    run = Background(launcher(client, ns, gs))
    delays = []
    # two disruptions, a counted failure (exit 170: the 3rd failed pod, 40 s), one more disruption
    for n, end in enumerate(("shut_down", "shut_down", 170, "shut_down"), start=1):
        (pod,) = running(cp, ns, job, 1, timeout=300)
        first_uid = first_uid or cp.batch().read_namespaced_job(job, ns).metadata.uid
        old = pod.metadata.uid
        failed_at = time.time()
        if end == "shut_down":
            cp.kubelet.shut_down(pod)
        else:
            cp.kubelet.exit(pod, end)

        def replacement(old=old):
            return [
                p for p in pods(cp, ns, job) if p.metadata.uid != old and p.status.phase != "Failed"
            ]

        (new,) = wait_for(f"replacement {n}", replacement, timeout=300, every=0.1)
        delays.append((n, round(time.time() - failed_at, 1)))
    (pod,) = running(cp, ns, job, 1, timeout=300)
    cp.kubelet.exit(pod, 0)
    out = run.result(60)
    done = cp.batch().read_namespaced_job(job, ns)
    with capsys.disabled():
        print(f"\nreplacements (n, s after the failure): {delays}; recreations {out.recreations}")
        print(
            f"new Job: backoffLimit={done.spec.backoff_limit} "
            f"activeDeadlineSeconds={done.spec.active_deadline_seconds} failed={done.status.failed}"
        )
    assert out.code == 0, out.message
    shutdown = "TerminationByKubelet"
    assert [a.disruption for a in out.attempts] == [shutdown, shutdown, "", shutdown, ""]
    assert [a.exit_code for a in out.attempts] == [143, 143, 170, 143, 0]
    assert out.recreations == 1 and done.metadata.uid != first_uid
    assert done.metadata.annotations[recreate.COUNT_ANNOTATION] == "1"
    # What the first Job used: its one counted failure and the time it ran.
    assert done.spec.backoff_limit == 0 and not done.status.failed
    assert 3600 - 120 < done.spec.active_deadline_seconds < 3600
    # backoff_utils.go: 10 s x 2^(n-1) after the n-th failed pod, ignored ones included
    # (the 2nd waits 20 s); the 3rd would wait 40 s: the recreated Job starts at once; the
    # 4th is the new Job's first failure (10 s).
    (_, one), (_, two), (_, three), (_, four) = delays
    assert 8.5 <= one <= 16 and 18.5 <= two <= 26, delays
    assert three <= 10, delays
    assert 8.5 <= four <= 16, delays


def test_c_a_gang_preempted_three_times_restarts_without_the_long_waits(real_kube, capsys):
    """A 2-pod gang counts two failed pods per preemption (the preempted pod and its
    peer's 170): without the recreation its 2nd restart waits 80 s, its 3rd 320 s."""
    cp, ns = real_kube, "real-c3"
    client = cp.namespace_with_launcher_account(ns)
    gs = gangs(ns, "run-c3", workers=2, retries=2)  # backoffLimit 4
    job = gs[0].name
    run = Background(launcher(client, ns, gs))
    restarts = []
    for n in range(1, 4):
        chief, worker = running(cp, ns, job, 2, timeout=300)
        failed_at = time.time()
        cp.kubelet.shut_down(worker)
        cp.kubelet.exit(chief, preemption.PEER_LOST)
        running(cp, ns, job, 2, timeout=300)
        restarts.append((n, round(time.time() - failed_at, 1)))
    for p in running(cp, ns, job, 2):
        cp.kubelet.exit(p, 0)
    out = run.result(60)
    done = cp.batch().read_namespaced_job(job, ns)
    with capsys.disabled():
        print(
            f"\ngang restarts (n, s after the preemption): {restarts}; "
            f"recreations {out.recreations}; new Job backoffLimit {done.spec.backoff_limit}"
        )
    assert out.code == 0, out.message
    (_, one), (_, two), (_, three) = restarts
    assert 18.5 <= one <= 27 and two <= 10 and 18.5 <= three <= 27, restarts
    assert out.recreations == 1
    assert done.spec.backoff_limit == 2  # 4, less the two peers' 170 of the first Job


def test_c_disruptions_the_real_control_plane_marks_are_never_counted(real_kube, capsys):
    """Three more ways GKE takes a pod away, each marked ``DisruptionTarget`` by the
    upstream code itself (not by our kubelet): a NoExecute taint (the taint-eviction
    controller, DeletionByTaintManager), a drain (the apiserver's eviction subresource,
    EvictionByEvictionAPI) and a higher-priority pod (the scheduler, PreemptionByScheduler).
    With backoffLimit 0 one counted failure would fail the Job."""
    from kubernetes import client as k8s

    cp, ns = real_kube, "real-c4"
    client = cp.namespace_with_launcher_account(ns)
    node, accelerator = "gke-spot-a100-1", "nvidia-tesla-a100"  # its own node: one GPU
    labels = {SPOT_LABEL: "true", ACCELERATOR_LABEL: accelerator, NODEPOOL_LABEL: "spot-a100"}
    cp.add_node(node, labels, [SPOT_TAINT], gpus=1)
    cp.kubelet.nodes.add(node)
    gs = gangs(ns, "run-c4", gpu=accelerator, workers=1, retries=0, on_demand=False)
    job = gs[0].name
    reasons = {}

    def disrupted(uid):
        for p in pods(cp, ns, job):
            for c in p.status.conditions or []:
                if p.metadata.uid == uid and c.type == "DisruptionTarget" and c.status == "True":
                    reasons[uid] = c.reason
        return reasons.get(uid)

    run = Background(launcher(client, ns, gs))
    # 1. a NoExecute taint the pod does not tolerate
    (pod,) = running(cp, ns, job, 1)
    evict = {"key": "spottrain.dev/test-maintenance", "value": "true", "effect": "NoExecute"}
    cp.core().patch_node(node, {"spec": {"taints": [SPOT_TAINT, evict]}})
    wait_for("the taint manager's DisruptionTarget", lambda: disrupted(pod.metadata.uid), 30, 0.05)
    wait_for("the pod gone", lambda: pod.metadata.uid not in
             {p.metadata.uid for p in pods(cp, ns, job)} or None, 30)  # fmt: skip
    cp.core().patch_node(node, {"spec": {"taints": [SPOT_TAINT]}})
    # 2. a drain: the Eviction API
    (pod,) = running(cp, ns, job, 1, timeout=60)
    cp.core().create_namespaced_pod_eviction(
        pod.metadata.name, ns,
        k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=pod.metadata.name, namespace=ns)),
    )  # fmt: skip
    wait_for("the eviction's DisruptionTarget", lambda: disrupted(pod.metadata.uid), 30, 0.05)
    # 3. preemption by a pod of a higher priority that needs the node's only GPU
    (pod,) = running(cp, ns, job, 1, timeout=60)
    k8s.SchedulingV1Api(cp.admin).create_priority_class(
        k8s.V1PriorityClass(metadata=k8s.V1ObjectMeta(name="test-high"), value=1000000)
    )
    cp.core().create_namespaced_pod(ns, {
        "metadata": {"name": "urgent"},
        "spec": {
            "priorityClassName": "test-high", "nodeSelector": {ACCELERATOR_LABEL: accelerator},
            "tolerations": [{"key": SPOT_LABEL, "operator": "Equal", "value": "true",
                             "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "urgent:1", "resources": {"limits": {GPU: "1"}}}],
        },
    })  # fmt: skip
    wait_for("the scheduler's DisruptionTarget", lambda: disrupted(pod.metadata.uid), 30, 0.05)
    wait_for("the urgent pod placed", lambda: cp.core().read_namespaced_pod("urgent", ns)
             .spec.node_name, 30)  # fmt: skip
    cp.core().delete_namespaced_pod("urgent", ns)
    (pod,) = running(cp, ns, job, 1, timeout=120)
    cp.kubelet.exit(pod, 0)
    out = run.result(60)
    done = cp.batch().read_namespaced_job(job, ns)
    seen = [a.disruption for a in out.attempts]
    with capsys.disabled():
        print(
            f"\ndisruptions set by the control plane: {list(reasons.values())}; "
            f"the launcher recorded {seen}; recreations {out.recreations}"
        )
    assert list(reasons.values()) == [
        "DeletionByTaintManager", "EvictionByEvictionAPI", "PreemptionByScheduler",
    ]  # fmt: skip
    assert out.code == 0, out.message
    # What the launcher's ledger names: each pod it saw end (a deleted pod can leave the
    # API between two of its looks, within a second of ending).
    assert seen[-1] == "" and set(seen[:-1]) <= set(reasons.values()), seen
    assert done.spec.backoff_limit == 0 and not done.status.failed  # none counted
    # The 3rd one's 40 s wait was skipped, whether the launcher counted the three
    # failures or found no pod running for 30 s.
    assert out.recreations == 1
    cp.core().delete_node(node)
    cp.kubelet.nodes.discard(node)


def test_c2_a_restarted_launcher_finishes_a_recreation_it_finds_half_done(real_kube):
    """The launcher marks the Job before deleting it to recreate it: a launcher started
    while that Job is still being deleted creates it again with the carried budget."""
    cp, ns = real_kube, "real-c2"
    client = cp.namespace_with_launcher_account(ns)
    gs = gangs(ns, "run-c2", workers=1, on_demand=False)
    job = gs[0].name
    first = Background(launcher(client, ns, gs, keep_on_cancel=lambda: True))
    (pod,) = running(cp, ns, job, 1)
    first.launcher.stop.set()  # the launcher's own pod goes away mid-recreation
    assert first.result(30).code == preemption.PREEMPTED
    budget = {"backoffLimit": 2, "activeDeadlineSeconds": 1800, "recreations": 3}
    cp.batch().patch_namespaced_job(
        job, ns, {"metadata": {"annotations": {recreate.ANNOTATION: json.dumps(budget)}}}
    )
    cp.kubelet.frozen.add(pod.metadata.uid)  # keeps the deletion waiting
    cp.batch().delete_namespaced_job(job, ns, propagation_policy="Foreground")
    wait_for("the Job being deleted", lambda: cp.batch().read_namespaced_job(job, ns)
             .metadata.deletion_timestamp, 10)  # fmt: skip
    second = Background(launcher(client, ns, gs))
    time.sleep(2)
    cp.kubelet.frozen.discard(pod.metadata.uid)
    (new,) = running(cp, ns, job, 1, timeout=60)
    cp.kubelet.exit(new, 0)
    out = second.result(60)
    assert out.code == 0, out.message
    done = cp.batch().read_namespaced_job(job, ns)
    assert (done.spec.backoff_limit, done.spec.active_deadline_seconds) == (2, 1800)
    assert done.metadata.annotations[recreate.COUNT_ANNOTATION] == "3"
    assert recreate.ANNOTATION not in (done.metadata.annotations or {})
