"""Two launchers of one task at once, on kube-cp with JobSet's real controller.

KFP retries a task whose pod was deleted (by hand, no ``DisruptionTarget``) while that
pod's launcher is still in its grace period: the retry's launcher re-attaches and
claims the JobSet, then the older one gets its SIGTERM. The older one must leave the
gang to the newer, on its next look or on the SIGTERM (before: it deleted the gang,
and the newer one re-created it, its restart count back at 0).
"""

from __future__ import annotations

import signal

from jobset_launch_proc import Proc
from real_jobset import (  # noqa: F401 - the fixture, by import
    MARKS,
    Background,
    child_jobs,
    get_jobset,
    jobset_kube_fixture,
    namespace,
    running_pods,
    wait_in,
    worker_set,
)

from spottrain.runtime.train_job import kube, launcher
from spottrain.runtime.train_job.observe import HOLDER_ANNOTATION

pytestmark = MARKS


def holder(cp, ns, name) -> str:
    return (get_jobset(cp, ns, name)["metadata"].get("annotations") or {}).get(HOLDER_ANNOTATION)


def test_an_older_launcher_sigtermed_leaves_the_gang_the_newer_one_follows(jobset_kube):
    cp, ns, name = jobset_kube, "th-handover", "st-handover"
    namespace(cp, ns)
    older = Proc(cp, ns, name, retries=2)
    older.line("created JobSet")
    (job,) = wait_in(cp, ns, "the child Job", lambda: child_jobs(cp, ns, name))
    pods = running_pods(cp, ns, job.metadata.uid, 2)
    first_holder = holder(cp, ns, name)
    lines: list[str] = []
    newer = launcher.JobSetLauncher(
        kube.from_client(cp.admin, ns), worker_set(ns, name, retries=2), poll_seconds=0.5,
        say=lines.append, chief_log=lambda line: None, holder="retry-pod/1",
    )  # fmt: skip
    run = Background(newer)
    wait_in(cp, ns, "the newer launcher's claim", lambda: holder(cp, ns, name) == "retry-pod/1")
    older.proc.send_signal(signal.SIGTERM)
    # It leaves on its next look or on the SIGTERM, whichever comes first; a SIGTERM
    # landing while the interpreter already ends kills it (-15): it had left by then.
    assert older.wait() in (143, -signal.SIGTERM), older.text()
    assert "launcher retry-pod/1 follows this JobSet now" in older.text(), older.text()
    assert "deleting" not in older.text(), older.text()
    for pod in pods:
        cp.kubelet.exit(pod, 0)
    out = run.result(timeout=120)
    assert (out.code, out.message, out.restarts) == (0, "JobSet Completed", 0), lines
    assert [j.metadata.uid for j in child_jobs(cp, ns, name)] == [job.metadata.uid]
    assert first_holder and first_holder != "retry-pod/1"
    assert any("re-attaching" in line for line in lines), lines
