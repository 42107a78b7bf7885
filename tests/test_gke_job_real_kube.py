"""The Job-engine launcher against a real Kubernetes control plane (v1.34.3).

``tests/real_kube.py`` starts ``.tools/bin/kube-cp`` (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler from upstream source, in one process) and
plays the kubelets of three fake GKE nodes. The launcher is the real one
(``spottrain.runtime.gke_job.control.Launcher`` over ``kube.Kube``, as
``tests/test_gke_job_control.py`` drives it against the stand-in) with the official
``kubernetes`` client, authenticated as a service account that has exactly the
RBAC of ``spottrain.runtime.gke_job.rbac`` (a TokenRequest token). Pods are placed
by the real scheduler and created, counted and replaced by the real Job
controller; only the kubelet's status writes are played (``real_kube.Kubelet``).
Skips without the binary (``make kube-cp``).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import pytest
from real_kube import (
    real_kube_fixture,  # noqa: F401 - the fixture
    wait_for,
)
from real_kube_launch import (
    Background,
    JobWatcher,
    condition_types,
    gangs,
    job_gone,
    launcher,
    pods,
    running,
    service_gone,
)

from spottrain.runtime.gke_job import control, kube, rbac
from spottrain.trainer import preemption

pytestmark = pytest.mark.slow


# -- (a) ---------------------------------------------------------------------------------
def test_a_pods_land_on_the_spot_node_all_succeed_exit_0(real_kube):
    cp, ns = real_kube, "real-a"
    client = cp.namespace_with_launcher_account(ns)
    gs = gangs(ns, "run-a")
    job = gs[0].name
    lines = []
    run = Background(launcher(client, ns, gs, lines))
    live = running(cp, ns, job, 2)
    # The real scheduler: nodeSelector gke-spot + gke-accelerator, the spot taint tolerated.
    assert {p.spec.node_name for p in live} == {"gke-spot-t4-1"}
    assert [p.spec.hostname for p in live] == [f"{job}-0", f"{job}-1"]
    assert {p.spec.subdomain for p in live} == {job}
    for p in live:
        cp.kubelet.exit(p, 0)
    out = run.result(60)
    assert out.code == 0 and not out.failed_over, out.message
    assert [a.exit_code for a in out.attempts] == [0, 0]
    assert {a.node_kind for a in out.attempts} == {"spot"}  # nodes get via the ClusterRole
    done = cp.batch().read_namespaced_job(job, ns)
    # The real controller adds SuccessCriteriaMet before Complete (v1.31+).
    assert condition_types(done) == ["SuccessCriteriaMet", "Complete"], condition_types(done)
    assert wait_for("the Service deleted", lambda: service_gone(cp, ns, job), 10)


# -- (b) ---------------------------------------------------------------------------------
def test_b_exit_64_fails_the_job_at_once_failure_target_then_failed(real_kube):
    cp, ns = real_kube, "real-b"
    client = cp.namespace_with_launcher_account(ns)
    gs = gangs(ns, "run-b")
    job = gs[0].name
    run = Background(launcher(client, ns, gs))
    chief, worker = running(cp, ns, job, 2)
    watch = JobWatcher(cp, ns, job)
    # The worker's kubelet does not answer for now: it keeps the pod Terminating.
    cp.kubelet.frozen.add(worker.metadata.uid)
    cp.kubelet.exit(chief, preemption.FATAL_CONFIG)
    wait_for("FailureTarget", lambda: "FailureTarget" in watch.first, 30)
    deleting = wait_for(
        "the Job controller deleting the worker",
        lambda: cp.core().read_namespaced_pod(worker.metadata.name, ns).metadata.deletion_timestamp,
        30,
    )
    assert deleting
    time.sleep(3)
    # FailureTarget, not Failed, while a pod of the Job may still run.
    held = cp.batch().read_namespaced_job(job, ns)
    assert "FailureTarget" in condition_types(held) and "Failed" not in condition_types(held)
    assert run.thread.is_alive()  # the launcher waits for Failed
    cp.kubelet.frozen.discard(worker.metadata.uid)  # the kubelet answers: 143, deleted
    out = run.result(60)
    first = watch.done()
    assert out.code == preemption.FATAL_CONFIG and "exit 64" in out.message, out.message
    assert not out.failed_over
    assert first["Failed"] - first["FailureTarget"] >= 3
    assert wait_for("Job deleted", lambda: job_gone(cp, ns, job), 30)
    assert wait_for("Service deleted", lambda: service_gone(cp, ns, job), 30)
    assert job_gone(cp, ns, gs[1].name)  # no fall-back


# -- (d) ---------------------------------------------------------------------------------
def test_d_unschedulable_spot_gang_moves_to_the_on_demand_pool(real_kube):
    cp, ns = real_kube, "real-d"
    client = cp.namespace_with_launcher_account(ns)
    gs = gangs(ns, "run-d", gpu="nvidia-l4")  # no spot L4 node
    spot, od = gs[0].name, gs[1].name
    run = Background(launcher(client, ns, gs, unschedulable_seconds=5))

    def unschedulable():
        found = []
        for p in pods(cp, ns, spot):
            for c in p.status.conditions or []:
                if c.type == "PodScheduled" and c.status == "False":
                    found.append((c.reason, c.message))
        return found if len(found) == 2 else None

    seen = wait_for("the scheduler's Unschedulable", unschedulable, 30, every=0.1)
    assert {reason for reason, _ in seen} == {"Unschedulable"}, seen
    live = running(cp, ns, od, 2, timeout=90)
    assert {p.spec.node_name for p in live} == {"gke-std-l4-1"}
    assert job_gone(cp, ns, spot) and service_gone(cp, ns, spot)
    for p in live:
        cp.kubelet.exit(p, 0)
    out = run.result(60)
    assert out.code == 0 and out.failed_over and out.job == od, out.message
    assert {a.node_kind for a in out.attempts} == {"on-demand"}
    print("scheduler message:", seen[0][1])


def test_d_a_spot_job_that_uses_up_its_retries_moves_to_on_demand(real_kube, caplog):
    """Two counted failures (171, hung) against backoffLimit 1: the real controller
    fails the Job with BackoffLimitExceeded and the gang goes on on-demand.

    The launcher's own reading of the Failed condition is the evidence: a watcher
    polling beside it missed the condition once, the launcher having seen it first and
    the Foreground delete of a Job with no running pod taking ~0.1 s."""
    cp, ns = real_kube, "real-d2"
    client = cp.namespace_with_launcher_account(ns)
    gs = gangs(ns, "run-d2", workers=1, retries=1)
    spot, od = gs[0].name, gs[1].name
    caplog.set_level(logging.WARNING, logger="spottrain.runtime.gke_job.control")
    run = Background(launcher(client, ns, gs))
    for _ in range(2):
        (pod,) = running(cp, ns, spot, 1, timeout=60)
        cp.kubelet.exit(pod, preemption.HUNG)
    (pod,) = running(cp, ns, od, 1, timeout=90)
    assert pod.spec.node_name == "gke-std-t4-1"
    cp.kubelet.exit(pod, 0)
    out = run.result(60)
    assert out.code == 0 and out.failed_over and out.job == od, out.message
    assert [a.exit_code for a in out.attempts] == [171, 171, 0]
    assert [a.node_kind for a in out.attempts] == ["spot", "spot", "on-demand"]
    # control._ended: this message only for a Failed condition with reason
    # BackoffLimitExceeded.
    moved = (
        f"Job {spot} used up its retries (1 counted pod failures; last exit 171); moving to {od}"
    )
    assert moved in caplog.text and out.recreations == 0
    assert job_gone(cp, ns, spot) and service_gone(cp, ns, spot)


# -- (e) ---------------------------------------------------------------------------------
def test_e_a_restarted_launcher_reattaches_to_its_job(real_kube):
    cp, ns = real_kube, "real-e"
    client = cp.namespace_with_launcher_account(ns)
    gs = gangs(ns, "run-e")
    job = gs[0].name
    first = Background(launcher(client, ns, gs, keep_on_cancel=lambda: True))
    live = running(cp, ns, job, 2)
    uid = cp.batch().read_namespaced_job(job, ns).metadata.uid
    first.launcher.stop.set()  # its pod is disrupted: the Job runs on
    assert first.result(30).code == preemption.PREEMPTED
    assert not job_gone(cp, ns, job) and not service_gone(cp, ns, job)
    second = Background(launcher(client, ns, gs))
    time.sleep(2)
    for p in live:
        cp.kubelet.exit(p, 0)
    out = second.result(60)
    assert out.code == 0, out.message
    assert cp.batch().read_namespaced_job(job, ns).metadata.uid == uid  # no second Job
    assert {p.metadata.uid for p in pods(cp, ns, job)} == {p.metadata.uid for p in live}


# -- (f) ---------------------------------------------------------------------------------
def test_f_sigterm_cancels_and_deletes_the_job_and_service(real_kube):
    cp, ns = real_kube, "real-f"
    client = cp.namespace_with_launcher_account(ns)
    gs = gangs(ns, "run-f")
    job = gs[0].name
    launch = launcher(client, ns, gs)

    def cancel():
        running(cp, ns, job, 2)
        os.kill(os.getpid(), signal.SIGTERM)  # KFP terminates the run

    killer = threading.Thread(target=cancel, daemon=True)
    previous = control.install_sigterm(launch)
    try:
        killer.start()
        out = launch.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert out.code == preemption.PREEMPTED and out.message.startswith("cancelled"), out.message
    assert wait_for("Job deleted", lambda: job_gone(cp, ns, job), 30)
    assert wait_for("Service deleted", lambda: service_gone(cp, ns, job), 30)
    assert wait_for("pods deleted", lambda: not pods(cp, ns, job), 30)


# -- (g) ---------------------------------------------------------------------------------
def test_g_a_missing_verb_is_a_403_and_a_one_line_fatal(real_kube):
    cp, ns = real_kube, "real-g"
    rules = [dict(r) for r in rbac.RULES]
    rules[0] = {**rules[0], "verbs": ["get", "delete"]}  # jobs: no create
    client = cp.namespace_with_launcher_account(ns, rules=rules)
    gs = gangs(ns, "run-g")
    with pytest.raises(kube.KubeError) as caught:
        launcher(client, ns, gs).run()
    assert caught.value.code == preemption.FATAL_CONFIG
    text = str(caught.value)
    assert "403 Forbidden" in text and f"Job {gs[0].name}" in text
    assert "\n" not in text and "make gke-rbac" in text
    assert service_gone(cp, ns, gs[0].name)  # created first, then removed: nothing left


def test_g_without_the_node_cluster_role_node_kinds_are_unknown(real_kube):
    cp, ns = real_kube, "real-g2"
    client = cp.namespace_with_launcher_account(ns, cluster_rules=[])
    gs = gangs(ns, "run-g2", workers=1)
    run = Background(launcher(client, ns, gs))
    (pod,) = running(cp, ns, gs[0].name, 1)
    cp.kubelet.exit(pod, 0)
    out = run.result(60)
    assert out.code == 0 and [a.node_kind for a in out.attempts] == ["unknown"]


# -- settle (3) --------------------------------------------------------------------------
def test_h_a_restarted_launcher_never_reattaches_to_a_job_someone_else_is_deleting(
    real_kube, caplog
):
    cp, ns = real_kube, "real-h"
    client = cp.namespace_with_launcher_account(ns)
    gs = gangs(ns, "run-h", on_demand=False)
    job = gs[0].name
    first = Background(launcher(client, ns, gs, keep_on_cancel=lambda: True))
    chief, worker = running(cp, ns, job, 2)
    first.launcher.stop.set()
    assert first.result(30).code == preemption.PREEMPTED
    cp.kubelet.frozen.add(worker.metadata.uid)  # keeps the deletion waiting
    cp.batch().delete_namespaced_job(job, ns, propagation_policy="Foreground")
    held = wait_for(
        "the Job readable with a deletionTimestamp",
        lambda: (j := cp.batch().read_namespaced_job(job, ns)).metadata.deletion_timestamp and j,
        10,
    )
    assert "foregroundDeletion" in (held.metadata.finalizers or [])
    caplog.set_level(logging.INFO, logger="spottrain.runtime.gke_job.control")
    with pytest.raises(kube.KubeError) as caught:
        launcher(client, ns, gs).run()  # a retry of the launcher, meanwhile
    text = str(caught.value)
    print("a restarted launcher, during someone else's foreground deletion:", text)
    assert caught.value.code == preemption.FATAL_CONFIG and "\n" not in text
    assert f"Job {job} is being deleted, not by this launcher" in text
    assert "re-attaching to Job" not in caplog.text
    assert service_gone(cp, ns, job)  # nothing left behind by the run that ends here
    cp.kubelet.frozen.discard(worker.metadata.uid)
    assert wait_for("the Job gone", lambda: job_gone(cp, ns, job), 60)


# -- last: the fake nodes ------------------------------------------------------------------
def test_z_nodes_stay_ready_without_the_node_lifecycle_controller(real_kube):
    """No heartbeat is ever sent; kube-cp runs no node-lifecycle controller, so nothing
    marks the nodes NotReady or taints them unreachable (its grace period is 50 s)."""
    for node in real_kube.core().list_node().items:
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert [c.status for c in ready] == ["True"], node.metadata.name
        keys = {t.key for t in node.spec.taints or []}
        assert not keys & {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
    print(f"kube-cp up {time.monotonic() - real_kube.started_at:.0f} s; nodes still Ready")
