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

import json
import logging
import os
import signal
import threading
import time

import pytest
from real_kube import (  # noqa: F401 - the fixture
    ACCELERATOR_LABEL,
    GPU,
    NODEPOOL_LABEL,
    SPOT_LABEL,
    SPOT_TAINT,
    ControlPlane,
    real_kube_fixture,
    wait_for,
)

from spottrain.pipelines.placement import Placement
from spottrain.runtime.gke_job import control, kube, manifests, names, rbac, recreate
from spottrain.trainer import preemption

pytestmark = pytest.mark.slow
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def gangs(ns, run, gpu="nvidia-tesla-t4", workers=2, retries=2, on_demand=True):
    spot = Placement(pool="spot", gpu_type=gpu, gpu_count=1, retries=retries)
    common = dict(
        namespace=ns, image="trainer:test", args=("--train-steps", "10"), workers=workers,
        deadline_seconds=3600,
    )  # fmt: skip
    out = [manifests.Gang(name=names.job_name(run, "train"), placement=spot, **common)]
    if on_demand:
        out.append(
            manifests.Gang(
                name=names.job_name(run, "train", on_demand=True),
                placement=spot.with_(pool="on-demand", taint=None),
                **common,
            )
        )
    return out


def launcher(client, ns, gs, lines=None, **kwargs):
    from kubernetes import client as k8s

    kwargs.setdefault("unschedulable_seconds", 300)
    return control.Launcher(
        kube.Kube(k8s.BatchV1Api(client), k8s.CoreV1Api(client), ns),
        gs,
        poll_seconds=0.5,
        sink=(lines.append if lines is not None else lambda line: None),
        **kwargs,
    )


class Background:
    """``Launcher.run`` in a thread."""

    def __init__(self, launch: control.Launcher):
        self.launcher = launch
        self.outcome = None
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.outcome = self.launcher.run()
        except BaseException as err:  # noqa: BLE001 - re-raised in result()
            self.error = err

    def result(self, timeout=120.0) -> control.Outcome:
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.launcher.stop.set()
            raise AssertionError(f"the launcher did not end in {timeout:.0f} s")
        if self.error is not None:
            raise self.error
        return self.outcome


def pods(cp: ControlPlane, ns, job):
    return cp.core().list_namespaced_pod(ns, label_selector=f"{JOB_NAME_LABEL}={job}").items


def running(cp, ns, job, count, timeout=60.0):
    """Waits for ``count`` live Running pods of ``job``; returns them by index."""

    def live():
        found = [
            p
            for p in pods(cp, ns, job)
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
        ]
        return found if len(found) == count else None

    found = wait_for(f"{count} running pods of {job}", live, timeout)
    return sorted(found, key=lambda p: int(p.metadata.annotations[names.INDEX_ANNOTATION]))


def job_gone(cp, ns, job):
    from kubernetes.client.exceptions import ApiException

    try:
        cp.batch().read_namespaced_job(job, ns)
    except ApiException as err:
        return err.status == 404
    return False


def service_gone(cp, ns, name):
    from kubernetes.client.exceptions import ApiException

    try:
        cp.core().read_namespaced_service(name, ns)
    except ApiException as err:
        return err.status == 404
    return False


def condition_types(job) -> list[str]:
    return [c.type for c in (job.status.conditions or []) if c.status == "True"]


class JobWatcher:
    """Polls a Job (as admin) and records when each condition first appeared."""

    def __init__(self, cp, ns, name):
        self.cp, self.ns, self.name = cp, ns, name
        self.first: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        from kubernetes.client.exceptions import ApiException

        while not self.stop.is_set():
            try:
                job = self.cp.batch().read_namespaced_job(self.name, self.ns)
                for kind in condition_types(job):
                    self.first.setdefault(kind, time.monotonic())
            except ApiException:
                pass
            self.stop.wait(0.1)

    def done(self):
        self.stop.set()
        self.thread.join(5)
        return self.first


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


def test_d_a_spot_job_that_uses_up_its_retries_moves_to_on_demand(real_kube):
    """Two counted failures (171, hung) against backoffLimit 1: the real controller
    fails the Job with BackoffLimitExceeded and the gang goes on on-demand."""
    cp, ns = real_kube, "real-d2"
    client = cp.namespace_with_launcher_account(ns)
    gs = gangs(ns, "run-d2", workers=1, retries=1)
    spot, od = gs[0].name, gs[1].name
    watch = JobWatcher(cp, ns, spot)
    run = Background(launcher(client, ns, gs))
    for _ in range(2):
        (pod,) = running(cp, ns, spot, 1, timeout=60)
        cp.kubelet.exit(pod, preemption.HUNG)
    (pod,) = running(cp, ns, od, 1, timeout=90)
    assert pod.spec.node_name == "gke-std-t4-1"
    cp.kubelet.exit(pod, 0)
    out = run.result(60)
    first = watch.done()
    assert out.code == 0 and out.failed_over and out.job == od, out.message
    assert [a.exit_code for a in out.attempts] == [171, 171, 0]
    assert [a.node_kind for a in out.attempts] == ["spot", "spot", "on-demand"]
    assert "Failed" in first and out.recreations == 0
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
