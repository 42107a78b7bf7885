"""JobSet v0.12.0's real controller and webhooks on kube-cp (issue 30, item 5's base).

One kube-cp of this module's own, JobSet's CRD, and ``jobset-manager`` with its
webhooks (tests/real_jobset.py says how their certificates are made). The kubelet's
part is played by tests/real_kube.py's :class:`Kubelet` (status patches). Citations are
to sigs.k8s.io/jobset v0.12.0 and k8s.io/kubernetes v1.34.3.
"""

from __future__ import annotations

import json
import time

import pytest
from real_jobset import (  # noqa: F401 - the fixture, by import
    GROUP,
    JOBSET_NAME_LABEL,
    MARKS,
    NODES,
    PLURAL,
    VERSION,
    JobWatch,
    child_jobs,
    condition,
    custom,
    get_jobset,
    jobset_kube_fixture,
    namespace,
    running_pods,
    wait_in,
)
from real_kube import (
    ACCELERATOR_LABEL,
    GPU,
    wait_for,
)

pytestmark = MARKS  # slow; skipped without kube-cp or `make jobset`'s outputs
RESTARTS_LABEL = "jobset.sigs.k8s.io/restart-attempt"  # pkg/constants/constants.go:34


def jobset(name, ns, workers=2, job_failure_policy=None, failure_policy=None, network=None) -> dict:
    """One replicated Job of ``workers`` GPU pods. completionMode, network and
    successPolicy are left to the mutating webhook (jobset_webhook.go:111-161)."""
    job_spec = {
        "parallelism": workers,
        "completions": workers,
        "backoffLimit": 0,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 30,
                "nodeSelector": {ACCELERATOR_LABEL: "nvidia-tesla-a100"},
                "containers": [
                    {
                        "name": "trainer",
                        "image": "trainer:test",
                        "resources": {"limits": {GPU: "1"}},
                    }
                ],
            }
        },
    }
    if job_failure_policy:
        job_spec["podFailurePolicy"] = job_failure_policy
    spec = {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": job_spec}}]}
    if failure_policy:
        spec["failurePolicy"] = failure_policy
    if network:
        spec["network"] = network
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def test_webhooks_default_and_validate_jobsets(jobset_kube):
    """The mutating webhook defaults what the CRD leaves unset, and the validating one
    refuses what only it checks: a subdomain that is no DNS-1123 name
    (jobset_webhook.go:182-198)."""
    from kubernetes.client.exceptions import ApiException

    cp, ns = jobset_kube, "js-webhooks"
    namespace(cp, ns)
    dry = custom(cp).create_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, jobset("probe", ns), dry_run="All"
    )
    assert dry["spec"]["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert dry["spec"]["successPolicy"]["operator"] == "All"
    template = dry["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert template["completionMode"] == "Indexed"
    with pytest.raises(ApiException) as refused:
        custom(cp).create_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, jobset("bad", ns, network={"subdomain": "Not_A_Name"})
        )
    assert refused.value.status in (400, 422), refused.value
    message = json.loads(refused.value.body)["message"]
    assert message.startswith('admission webhook "vjobset.kb.io" denied the request'), message
    assert "spec.network.subdomain" in message


def test_a_jobset_runs_its_job_with_stable_hostnames_and_completes(jobset_kube):
    cp, ns, name = jobset_kube, "js-complete", "train"
    namespace(cp, ns)
    created = time.monotonic()
    custom(cp).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, jobset(name, ns))

    # The child Job, named <jobset>-<replicatedJob>-<jobIndex> (placement.go:14-16),
    # owned by the JobSet (jobset_controller.go:731-758).
    (job,) = wait_for("the child Job", lambda: child_jobs(cp, ns, name), timeout=60)
    job_seconds = time.monotonic() - created
    js = get_jobset(cp, ns, name)
    assert job.metadata.name == f"{name}-workers-0"
    (owner,) = job.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid, owner.controller) == (
        "JobSet",
        name,
        js["metadata"]["uid"],
        True,
    )
    assert job.spec.completion_mode == "Indexed"
    assert job.metadata.labels[RESTARTS_LABEL] == "0"
    assert job.spec.template.spec.subdomain == name  # constructJob, jobset_controller.go:952-956

    # One headless Service named after the subdomain (jobset_controller.go:788-833).
    svc = wait_for(
        "the headless Service",
        lambda: next(
            (s for s in cp.core().list_namespaced_service(ns).items if s.metadata.name == name),
            None,
        ),
    )
    assert svc.spec.cluster_ip == "None"
    assert svc.spec.selector == {JOBSET_NAME_LABEL: name}
    assert svc.spec.publish_not_ready_addresses is True
    assert svc.metadata.owner_references[0].uid == js["metadata"]["uid"]

    # The Job controller gives Indexed pods hostname <job>-<index>: with the JobSet's
    # subdomain, <jobset>-<rjob>-<jobIndex>-<podIndex>.<subdomain>.
    pods = running_pods(cp, ns, job.metadata.uid, 2)
    running_seconds = time.monotonic() - created
    fqdns = sorted(f"{p.spec.hostname}.{p.spec.subdomain}" for p in pods)
    assert fqdns == [f"{name}-workers-0-0.{name}", f"{name}-workers-0-1.{name}"]
    assert {p.spec.node_name for p in pods} <= set(NODES)

    done = time.monotonic()
    for pod in pods:
        cp.kubelet.exit(pod, 0)
    completed = wait_for(
        "JobSet Completed", lambda: condition(get_jobset(cp, ns, name), "Completed"), timeout=60
    )
    completed_seconds = time.monotonic() - done
    final = get_jobset(cp, ns, name)
    assert final["status"].get("restarts", 0) == 0
    assert not condition(final, "Failed")
    print(
        f"\ncreate -> child Job {job_seconds:.1f} s, -> 2 pods Running {running_seconds:.1f} s; "
        f"both exit 0 -> JobSet Completed {completed_seconds:.1f} s ({completed['reason']})"
    )


def test_a_pod_failure_policy_failure_restarts_the_whole_jobset(jobset_kube):
    """Exit 143 matches the child Job's podFailurePolicy FailJob rule, so the Job fails
    with reason PodFailurePolicy; the JobSet rule on that reason restarts the JobSet
    without counting it (RestartJobSetAndIgnoreMaxRestarts, failure_policy.go:186-199,
    :266-298): the old Job is deleted and a new one made (restart-attempt 1)."""
    cp, ns, name = jobset_kube, "js-restart", "train"
    namespace(cp, ns)
    spec = jobset(
        name,
        ns,
        job_failure_policy={
            "rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [143]}}]
        },
        failure_policy={
            "maxRestarts": 0,
            "rules": [
                {
                    "name": "disruption",
                    "action": "RestartJobSetAndIgnoreMaxRestarts",
                    "onJobFailureReasons": ["PodFailurePolicy"],
                }
            ],
        },
    )
    custom(cp).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, spec)
    jobs = JobWatch(cp, ns)
    (first,) = wait_for("the child Job", lambda: child_jobs(cp, ns, name), timeout=60)
    pods = running_pods(cp, ns, first.metadata.uid, 2)

    failed_at = time.monotonic()
    cp.kubelet.exit(pods[0], 143)

    # The old Job is Failed for only milliseconds before the JobSet controller deletes
    # it, too short for polling: the watch sees every change.
    def failed_first():
        return next(
            (
                (at, reason)
                for at, uid, conds in jobs.seen
                if uid == first.metadata.uid
                for kind, status, reason in conds
                if (kind, status) == ("Failed", "True")
            ),
            None,
        )

    at, reason = wait_in(cp, ns, "the child Job Failed", failed_first)
    job_failed_seconds = at - failed_at
    assert reason == "PodFailurePolicy"

    def restarted_once():
        js = get_jobset(cp, ns, name)
        return js if js.get("status", {}).get("restarts") == 1 else None

    restarted = wait_for("status.restarts 1", restarted_once)
    restart_seconds = time.monotonic() - failed_at
    assert restarted["status"].get("restartsCountTowardsMax", 0) == 0
    assert not condition(restarted, "Failed")

    def new_job():
        new = [j for j in child_jobs(cp, ns, name) if j.metadata.uid != first.metadata.uid]
        return new[0] if new else None

    second = wait_in(cp, ns, "the recreated child Job", new_job, timeout=90)

    def first_seen():  # the list can return the Job before the watch's event arrives
        return min((at for at, uid, _ in jobs.seen if uid == second.metadata.uid), default=None)

    seen_at = wait_for("the watch's event of the recreated Job", first_seen, timeout=30)
    recreate_seconds = seen_at - failed_at
    assert second.metadata.name == first.metadata.name
    assert second.metadata.labels[RESTARTS_LABEL] == "1"
    new_pods = running_pods(cp, ns, second.metadata.uid, 2)
    running_seconds = time.monotonic() - failed_at
    assert not {p.metadata.uid for p in new_pods} & {p.metadata.uid for p in pods}

    for pod in new_pods:
        cp.kubelet.exit(pod, 0)
    wait_for(
        "JobSet Completed", lambda: condition(get_jobset(cp, ns, name), "Completed"), timeout=60
    )
    assert get_jobset(cp, ns, name)["status"]["restarts"] == 1
    jobs.stop()
    print(
        f"\nexit 143 -> Job Failed (PodFailurePolicy) {job_failed_seconds:.1f} s, "
        f"-> restarts 1 {restart_seconds:.1f} s, -> new Job {recreate_seconds:.1f} s, "
        f"-> 2 new pods Running {running_seconds:.1f} s"
    )
