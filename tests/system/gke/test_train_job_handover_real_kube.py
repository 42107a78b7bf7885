"""Hand-overs, on kube-cp with JobSet's real controller: between two launchers of one
task, and from one gang to the next when the old one has a pod that will not end.

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
    GROUP,
    MARKS,
    PLURAL,
    VERSION,
    Background,
    child_jobs,
    custom,
    get_jobset,
    gone,
    jobset_kube_fixture,
    namespace,
    running_pods,
    wait_in,
    worker_set,
)

from spottrain.runtime.train_job import decide as d
from spottrain.runtime.train_job import jobset as js
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


def test_a_move_whose_old_gang_has_a_pod_on_an_unanswering_node_still_finishes(jobset_kube):
    """As a move cut off midway leaves it (the old gang's JobSet there, the next one
    created suspended), but one old pod's kubelet does not answer (a reclaimed spot
    VM): the foreground deletion waits for that pod for ever (kubernetes-sigs/jobset#576).
    Past its grace the launcher deletes it forcibly and resumes the next gang (before:
    it waited 300 s, then 172, and again on every retry)."""
    cp, ns, name = jobset_kube, "th-stuckmove", "st-stuckmove"
    namespace(cp, ns)
    # The first gang on nodes it can run on, so that its pods are there to get stuck.
    old, new = worker_set(ns, name, retries=1), worker_set(ns, name + "-od", retries=1)
    suspended = js.jobset(new)
    suspended["spec"]["suspend"] = True
    custom(cp).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, js.jobset(old))
    (job,) = wait_in(cp, ns, "the old gang's child Job", lambda: child_jobs(cp, ns, name))
    frozen, _ = running_pods(cp, ns, job.metadata.uid, 2)
    custom(cp).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, suspended)
    (new_job,) = wait_in(cp, ns, "the suspended Job", lambda: child_jobs(cp, ns, new.name))
    cp.kubelet.frozen.add(frozen.metadata.uid)
    lines: list[str] = []
    try:
        run = Background(
            launcher.JobSetLauncher(
                kube.from_client(cp.admin, ns),
                [old, new],
                poll_seconds=0.5,
                settings=d.Settings(unanswered_after=5),
                say=lines.append,
                chief_log=lambda line: None,
            )  # fmt: skip
        )
        pods = running_pods(cp, ns, new_job.metadata.uid, 2)
    finally:
        cp.kubelet.frozen.discard(frozen.metadata.uid)
    assert gone(cp, ns, name), lines  # the old gang went before the new one ran
    for pod in pods:
        cp.kubelet.exit(pod, 0)
    out = run.result(timeout=120)
    assert (out.code, out.jobset, out.moved) == (0, new.name, True), lines
    stuck = f"{frozen.metadata.name} (node "
    assert any(stuck in s and f"of JobSet {name} do not end" in s for s in lines), lines
