"""The JobSet launcher when the API server does not answer for a while.

The cluster is real (kube-cp with JobSet's controller, as in
tests/system/gke/test_train_job_launcher_real_kube.py); the outage is injected: the launcher's
:class:`Kube` answers its looks (``read_jobset``) with the error an unreachable API
server gives (``KubeError`` 172, as ``kube.explain`` makes it for no answer) while the
test says so. The gang runs on meanwhile, as it would.
"""

from __future__ import annotations

import threading

import pytest
from real_jobset import (  # noqa: F401
    MARKS,
    Background,
    child_jobs,
    gone,
    jobset_kube_fixture,
    namespace,
    running_pods,
    worker_set,
)
from real_kube import wait_for

from spottrain.runtime.train_job import kube, launcher
from spottrain.runtime.train_job.kube import KubeError
from spottrain.trainer import preemption

pytestmark = MARKS


class Outage(kube.Kube):
    """The real client's calls, but its looks fail while ``down`` is set."""

    down = threading.Event()
    failed = 0

    def read_jobset(self, name):
        if self.down.is_set():
            Outage.failed += 1
            raise KubeError(preemption.UNAVAILABLE, f"cannot get JobSet {name}: no answer")
        return super().read_jobset(name)


def start(cp, ns, name) -> Background:
    from kubernetes import client

    Outage.down.clear()
    Outage.failed = 0
    k = Outage(client.CoreV1Api(cp.admin), client.CustomObjectsApi(cp.admin), ns)
    quiet = dict(say=lambda line: None, chief_log=lambda line: None)
    return Background(launcher.JobSetLauncher(k, worker_set(ns, name), poll_seconds=0.5, **quiet))


def test_an_outage_shorter_than_the_bound_is_waited_out(jobset_kube):
    cp, ns, name = jobset_kube, "ta-blip", "st-blip"
    namespace(cp, ns)
    run = start(cp, ns, name)
    (job,) = wait_for("the child Job", lambda: child_jobs(cp, ns, name), timeout=60)
    pods = running_pods(cp, ns, job.metadata.uid, 2)
    Outage.down.set()
    wait_for("three failed looks", lambda: Outage.failed >= 3, timeout=30)
    for pod in pods:  # the gang finishes while the launcher cannot look
        cp.kubelet.exit(pod, 0)
    Outage.down.clear()
    out = run.result(timeout=120)
    assert out.code == 0 and out.message == "JobSet Completed", out.message
    assert Outage.failed < launcher.API_FAILURES_TOLERATED


def test_a_longer_outage_ends_with_172_and_leaves_the_jobset_for_the_retry(jobset_kube):
    cp, ns, name = jobset_kube, "ta-down", "st-down"
    namespace(cp, ns)
    run = start(cp, ns, name)
    (job,) = wait_for("the child Job", lambda: child_jobs(cp, ns, name), timeout=60)
    running_pods(cp, ns, job.metadata.uid, 2)
    Outage.down.set()
    with pytest.raises(KubeError) as err:
        run.result(timeout=120)
    assert err.value.code == preemption.UNAVAILABLE
    assert Outage.failed == launcher.API_FAILURES_TOLERATED + 1
    assert not gone(cp, ns, name)  # the gang runs on; KFP's retry re-attaches
    assert [j.metadata.uid for j in child_jobs(cp, ns, name)] == [job.metadata.uid]
