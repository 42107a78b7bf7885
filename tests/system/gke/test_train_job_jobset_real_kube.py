"""The JobSet engine's manifest (spottrain/runtime/train_job/jobset.py) on the real JobSet
v0.12.0 controller and webhooks and the real Job controller (kube-cp).

Reuses tests/system/gke/test_jobset_real_kube.py's fixture and helpers (one kube-cp of this
module's own). The fake kubelet (tests/real_kube.py) plays the containers' exits and a
graceful node shutdown (DisruptionTarget). Not the launcher: nothing calls the builder
in a component yet.
"""

from __future__ import annotations

import re
import time

from real_jobset import (
    MARKS,
    JobWatch,
    child_jobs,
    condition,
    custom,
    get_jobset,
    jobset_kube_fixture,  # noqa: F401 - the fixture, by import
    namespace,
    running_pods,
    wait_in,
)
from real_kube import wait_for

from spottrain.placement import Placement
from spottrain.runtime.train_job import jobset as js
from spottrain.runtime.train_job import names
from spottrain.trainer import distribution, gang_env

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
WORKERS = 2
pytestmark = MARKS  # slow; skipped without kube-cp or `make jobset`'s outputs


def create(cp, ns, name, retries) -> js.WorkerSet:
    ws = js.WorkerSet(
        name=name,
        namespace=ns,
        image="trainer:test",
        args=("--checkpoint_dir=gs://bucket/ckpt",),
        workers=WORKERS,
        placement=Placement(pool="on-demand", gpu_type="nvidia-tesla-a100", retries=retries),
        run="run-1",
        attempt=1,
    )
    namespace(cp, ns)
    custom(cp).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, js.jobset(ws))
    return ws


def status(cp, ns, name) -> tuple[int, int]:
    st = get_jobset(cp, ns, name).get("status", {})
    return st.get("restarts", 0), st.get("restartsCountTowardsMax", 0)


def job_failure(watch: JobWatch, uid: str, kind_wanted: str = "Failed"):
    """(time, reason, message) of the Job's Failed (or other) condition, as the watch saw it."""
    for at, seen_uid, conds in watch.seen:
        for kind, state, reason, message in conds:
            if seen_uid == uid and (kind, state) == (kind_wanted, "True"):
                return at, reason, message
    return None


class MessageWatch(JobWatch):
    """JobWatch that keeps each condition's message too."""

    def _run(self, cp, ns):
        try:
            for event in self._watch.stream(cp.batch().list_namespaced_job, ns):
                job = event["object"]
                conds = [
                    (c.type, c.status, c.reason, c.message) for c in job.status.conditions or []
                ]
                self.seen.append((time.monotonic(), job.metadata.uid, conds))
        except Exception as err:  # noqa: BLE001 - kept for a failure message
            self.error = err


def test_the_built_jobset_is_admitted_and_its_pods_derive_tf_config(jobset_kube):
    cp, ns, name = jobset_kube, "tj-admit", "st-admit"
    ws = create(cp, ns, name, retries=1)
    (job,) = wait_for("the child Job", lambda: child_jobs(cp, ns, name), timeout=60)
    assert job.metadata.name == ws.child_job
    pods = sorted(
        running_pods(cp, ns, job.metadata.uid, WORKERS),
        key=lambda p: int(p.metadata.annotations[names.INDEX_ANNOTATION]),
    )
    hosts = [f"{p.spec.hostname}.{p.spec.subdomain}:{gang_env.DEFAULT_PORT}" for p in pods]
    assert hosts == [f"{js.pod_host(name, i)}.{name}:2222" for i in range(WORKERS)]
    for index, pod in enumerate(pods):
        (ctr,) = pod.spec.containers
        assert ctr.command[:2] == ["tini", "--"]
        assert pod.spec.termination_grace_period_seconds == 30
        assert pod.metadata.labels[names.RUN_LABEL] == "run-1"
        # What the pod's env gives the trainer, with the index the Job controller set.
        env = {e.name: e.value for e in ctr.env}
        env[gang_env.JOB_COMPLETION_INDEX] = pod.metadata.annotations[names.INDEX_ANNOTATION]
        tf = distribution.job_tf_config(env)
        assert tf == {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}
    for pod in pods:
        cp.kubelet.exit(pod, 0)
    wait_for("JobSet Completed", lambda: condition(get_jobset(cp, ns, name), "Completed"))


def test_exit_64_fails_the_jobset_without_a_restart(jobset_kube):
    cp, ns, name = jobset_kube, "tj-fatal", "st-fatal"
    create(cp, ns, name, retries=3)
    watch = MessageWatch(cp, ns)
    (job,) = wait_for("the child Job", lambda: child_jobs(cp, ns, name), timeout=60)
    pods = running_pods(cp, ns, job.metadata.uid, WORKERS)
    exited = time.monotonic()
    cp.kubelet.exit(pods[1], 64)
    failed = wait_in(
        cp, ns, "JobSet Failed", lambda: condition(get_jobset(cp, ns, name), "Failed"), timeout=90
    )
    failed_seconds = time.monotonic() - exited
    at, reason, message = wait_for(
        "the Job's failure", lambda: job_failure(watch, job.metadata.uid)
    )
    watch.stop()
    assert reason == "PodFailurePolicy"
    # The message the FailJobSet rule's pattern is written against, from the real controller.
    assert re.fullmatch(
        rf"Container trainer for pod {ns}/\S+ failed with exit code 64 matching FailJob rule "
        rf"at index {js.FATAL_RULE}",
        message,
    ), message
    # Failed by the FailJobSet rule (pkg/constants/constants.go:109) is terminal: no restart.
    assert failed["reason"] == "FailJobSetFailurePolicyAction"
    assert status(cp, ns, name) == (0, 0)
    assert {j.metadata.uid for j in child_jobs(cp, ns, name)} <= {job.metadata.uid}
    print(f"\nexit 64 -> JobSet Failed {failed_seconds:.1f} s ({failed['reason']}: {message})")


def test_notice_and_disruption_restart_free_and_170_counts(jobset_kube):
    """maxRestarts 1 (Placement.retries): exit 143, then a DisruptionTarget pod (graceful
    node shutdown, exit 137) restart the JobSet without counting; 170 counts; a second
    170 exceeds maxRestarts and fails it."""
    cp, ns, name = jobset_kube, "tj-restart", "st-restart"
    create(cp, ns, name, retries=1)
    watch = MessageWatch(cp, ns)
    figures = []

    def fail_once(how, expect):
        # The JobSet controller makes the child Job moments after the JobSet (or a restart).
        def live():
            found = [j for j in child_jobs(cp, ns, name) if not j.metadata.deletion_timestamp]
            return found if len(found) == 1 else None

        (job,) = wait_in(cp, ns, "one live child Job", live)
        pods = running_pods(cp, ns, job.metadata.uid, WORKERS)
        started = time.monotonic()
        how(pods[0])
        wait_in(cp, ns, f"status {expect}", lambda: status(cp, ns, name) == expect, timeout=90)
        counted = time.monotonic() - started

        def replaced():
            return [
                j
                for j in child_jobs(cp, ns, name)
                if j.metadata.uid != job.metadata.uid and not j.metadata.deletion_timestamp
            ]

        wait_in(cp, ns, "the recreated Job", replaced, timeout=90)
        new_pods = wait_in(
            cp,
            ns,
            "the new pods Running",
            lambda: running_pods(cp, ns, replaced()[0].metadata.uid, WORKERS),
            timeout=120,
        )
        _, reason, message = job_failure(watch, job.metadata.uid)
        figures.append((counted, time.monotonic() - started, reason, message))
        assert not condition(get_jobset(cp, ns, name), "Failed")
        return new_pods

    fail_once(lambda p: cp.kubelet.exit(p, 143), (1, 0))
    assert re.search(
        rf"exit code 143 matching FailJob rule at index {js.NOTICE_RULE}$", figures[-1][3]
    )
    fail_once(lambda p: cp.kubelet.shut_down(p, 137), (2, 0))
    assert re.search(
        rf"has condition DisruptionTarget matching FailJob rule at index {js.DISRUPTION_RULE}$",
        figures[-1][3],
    )
    pods = fail_once(lambda p: cp.kubelet.exit(p, 170), (3, 1))
    assert figures[-1][2] == "BackoffLimitExceeded"

    started = time.monotonic()
    cp.kubelet.exit(pods[0], 170)
    failed = wait_in(
        cp, ns, "JobSet Failed", lambda: condition(get_jobset(cp, ns, name), "Failed"), timeout=90
    )
    watch.stop()
    assert status(cp, ns, name) == (3, 1)
    assert failed["reason"] == "ReachedMaxRestarts"  # pkg/constants/constants.go:51
    kinds = ("exit 143", "DisruptionTarget", "exit 170")
    lines = [
        f"{what}: restarts counted {c:.1f} s, new pods Running {r:.1f} s ({reason})"
        for what, (c, r, reason, _) in zip(kinds, figures, strict=True)
    ]
    print(
        "\n"
        + "\n".join(lines)
        + f"\nsecond exit 170 -> JobSet Failed {time.monotonic() - started:.1f} s"
        + f" ({failed['reason']})"
    )


def test_an_eviction_is_free_unless_a_peer_fails_first(jobset_kube):
    """The Eviction API marks the pod DisruptionTarget itself (not our kubelet). Evicted
    pod Failed first: a free restart. The known gap (jobset.py's docstring): the peer's
    170 reaches phase Failed while the evicted pod is still terminating (its kubelet
    frozen here), so the Job's outcome is BackoffLimitExceeded and that restart is counted,
    once the evicted pod has ended."""
    from kubernetes import client as k8s

    cp, ns, name = jobset_kube, "tj-evict", "st-evict"
    create(cp, ns, name, retries=1)
    watch = MessageWatch(cp, ns)

    def evict(pod):
        cp.core().create_namespaced_pod_eviction(
            pod.metadata.name,
            ns,
            k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=pod.metadata.name, namespace=ns)),
        )

    def live_job():
        return [j for j in child_jobs(cp, ns, name) if not j.metadata.deletion_timestamp]

    (job,) = wait_for("the child Job", live_job, timeout=60)
    pods = running_pods(cp, ns, job.metadata.uid, WORKERS)
    started = time.monotonic()
    evict(pods[0])  # the kubelet ends it (143) and the peer stays running
    wait_in(cp, ns, "a free restart", lambda: status(cp, ns, name) == (1, 0), timeout=90)
    free_seconds = time.monotonic() - started
    _, reason, message = wait_for("the Job's failure", lambda: job_failure(watch, job.metadata.uid))
    assert reason == "PodFailurePolicy" and "condition DisruptionTarget" in message, message

    (job,) = wait_in(
        cp, ns, "the new Job", lambda: [j for j in live_job() if j.metadata.uid != job.metadata.uid]
    )
    pods = running_pods(cp, ns, job.metadata.uid, WORKERS)
    cp.kubelet.frozen.add(pods[0].metadata.uid)
    evict(pods[0])
    wait_for(
        "the evicted pod terminating",
        lambda: (
            cp.core().read_namespaced_pod(pods[0].metadata.name, ns).metadata.deletion_timestamp
        ),
    )
    cp.kubelet.exit(pods[1], 170)
    # The Job controller fixes the outcome at once (FailureTarget) but adds Failed, which
    # the JobSet controller acts on, only once no pod is terminating
    # (job_controller.go:1510-1514, :1102-1105): the gang waits for the evicted pod.
    _, reason, _ = wait_in(
        cp,
        ns,
        "the Job's FailureTarget",
        lambda: job_failure(watch, job.metadata.uid, "FailureTarget"),
    )
    assert reason == "BackoffLimitExceeded"
    time.sleep(2 * free_seconds)  # twice what the free restart above took
    assert status(cp, ns, name) == (1, 0)
    assert not job_failure(watch, job.metadata.uid)
    cp.kubelet.frozen.discard(pods[0].metadata.uid)  # its kubelet answers: 143, deleted
    wait_in(cp, ns, "a counted restart", lambda: status(cp, ns, name) == (2, 1), timeout=90)
    _, reason, _ = wait_for("the Job's failure", lambda: job_failure(watch, job.metadata.uid))
    assert reason == "BackoffLimitExceeded"
    (job,) = wait_in(
        cp,
        ns,
        "the third Job",
        lambda: [j for j in live_job() if j.metadata.uid != job.metadata.uid],
        timeout=90,
    )
    for pod in running_pods(cp, ns, job.metadata.uid, WORKERS):
        cp.kubelet.exit(pod, 0)
    wait_for("JobSet Completed", lambda: condition(get_jobset(cp, ns, name), "Completed"))
    watch.stop()
    print(f"\neviction -> free restart counted {free_seconds:.1f} s; peer 170 first -> counted")
