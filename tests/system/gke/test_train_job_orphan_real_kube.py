"""A gang never outlives its launcher without a bound (issue 57), on the real controllers.

The launcher runs as its own process (tests/jobset_launch_proc.py), its API requests
through a TCP proxy that can stop answering (tests/wire_faults.py), against kube-cp with
JobSet's controller. Before: SIGTERMed while the API did not answer, it waited its
300 s patience, was SIGKILLed at the end of its 30 s grace mid-"trying again" with no
last line, and the JobSet kept its pods running with no launcher and no deadline.
Now every call after a SIGTERM ends within the grace left (``Kube.hurry``), the last
line says what bounds the gang, and the bound is the platform's: the child Jobs'
``activeDeadlineSeconds`` (the run's deadline left), which the Job controller enforces
and JobSet's ``runDeadline`` rule turns into a failed JobSet, launcher or none.
"""

from __future__ import annotations

import signal
import time
from urllib.parse import urlparse

from jobset_launch_proc import Proc
from real_jobset import (
    MARKS,
    child_jobs,
    condition,
    get_jobset,
    jobset_kube_fixture,  # noqa: F401 - the fixture, by import
    namespace,
    running_pods,
    wait_in,
)
from real_kube import wait_for
from wire_faults import BLACKHOLE, WireProxy

from spottrain.runtime.train_job import launcher

pytestmark = MARKS

GRACE = launcher.DEFAULT_GRACE_S  # the launcher pod's, where the kubelet SIGKILLs


def _started(cp, ns, name, **launch) -> tuple[Proc, float]:
    """The launcher started on a 2-pod gang, once both pods run: (it, the Job's deadline)."""
    namespace(cp, ns)
    proc = Proc(cp, ns, name, retries=2, launch=launch)
    proc.line("created JobSet")
    (job,) = wait_for("the child Job", lambda: child_jobs(cp, ns, name), timeout=60)
    running_pods(cp, ns, job.metadata.uid, 2)
    return proc, float(job.spec.active_deadline_seconds)


def _failed_for_its_deadline(cp, ns, name, bound: float) -> None:
    """The JobSet fails by its runDeadline rule and its pods stop, without a launcher."""
    failed = wait_in(cp, ns, "the JobSet failed", lambda: condition(get_jobset(cp, ns, name),
                     "Failed"), timeout=bound + 120)  # fmt: skip
    assert failed["reason"] == "FailJobSetFailurePolicyAction", failed  # not a restart
    reasons = [c.reason for j in child_jobs(cp, ns, name) for c in j.status.conditions or []
               if c.type == "Failed"]  # fmt: skip
    assert reasons == ["DeadlineExceeded"], reasons  # js.DEADLINE_NAME's reason
    wait_in(cp, ns, "no pod of the gang running", lambda: not [
        p for p in cp.core().list_namespaced_pod(ns).items if p.status.phase == "Running"
    ], timeout=120)  # fmt: skip


def test_sigterm_while_the_api_does_not_answer_ends_within_the_grace_and_bounds_the_gang(
    jobset_kube,
):
    cp, ns, name = jobset_kube, "to-sigterm-bh", "st-sigterm-bh"
    server = urlparse(cp.server)
    proxy = WireProxy((server.hostname, server.port), delay=1.0)
    try:
        proc, bound = _started(cp, ns, name, proxy_port=proxy.port, deadline=60,
                               orphan_slack=5)  # fmt: skip
        assert 0 < bound <= 65, bound  # the run's deadline left, and the slack
        proxy.set(BLACKHOLE)  # accepts, never answers
        sent = time.monotonic()
        proc.proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=GRACE)  # the kubelet's SIGKILL comes then
        took = time.monotonic() - sent
        last = proc.text().splitlines()[-1]
        print(f"\nended {took:.1f} s after SIGTERM (grace {GRACE:.0f} s): {last}")
        assert code == 172, proc.text()
        assert f"JobSet {name} may be left running" in last, proc.text()
        assert "activeDeadlineSeconds" in last and "grace is used up" in last, last
    finally:
        proxy.close()
    assert condition(get_jobset(cp, ns, name), "Failed") is None  # it was left running
    _failed_for_its_deadline(cp, ns, name, bound)


def test_a_sigkilled_launchers_gang_fails_at_its_deadline(jobset_kube):
    cp, ns, name = jobset_kube, "to-sigkill", "st-sigkill"
    proc, bound = _started(cp, ns, name, deadline=30, orphan_slack=5)
    proc.proc.kill()
    proc.wait(timeout=30)
    _failed_for_its_deadline(cp, ns, name, bound)
