"""The JobSet engine's gang queued in Kueue: Kueue v0.17.0's, JobSet v0.12.0's and
Kubernetes v1.34.3's own controllers on kube-cp (tests/real_kueue.py), the launcher in a
thread. The queue is what ``make gke-kueue`` prints (pipelines/kueue.py), with one
on-demand flavor (the fake nodes carry no spot label) and 4 GPUs of quota; the fake
kubelet (tests/real_kube.py) plays the containers, and ends a deleted pod with 143 as
our trainer does after saving on the notice.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest
from platform_chains import NO_TINI, REPO, have_tini
from pod_network import can_make_pod_networks
from real_jobset import (
    Background,
    child_jobs,
    get_jobset,
    namespace,
    running_pods,
    wait_in,
    worker_set,
)
from real_kube import wait_for
from real_kueue import (
    GROUP,
    MARKS,
    VERSION,
    apply,
    custom,
    kueue_kube_fixture,  # noqa: F401 - the fixture, by import
    workloads,
)

from spottrain import exits
from spottrain.ladder import Ladder, Rung
from spottrain.pipelines import kueue
from spottrain.runtime.train_job import jobset as js
from spottrain.runtime.train_job import kube, launcher
from spottrain.runtime.train_job.attempts import gang_attempts

pytestmark = MARKS
INDEX = "batch.kubernetes.io/job-completion-index"


def queue(cp, ns, name="lq", gpus=4, cluster_queue=""):
    """The queue ``make gke-kueue`` prints for one on-demand flavor, ``gpus`` of quota."""
    ladder = Ladder((Rung("on-demand", "", "nvidia-tesla-a100", 1, 2),))
    objects = kueue.from_ladder(
        ladder, namespace=ns, local_queue=name, cluster_queue=cluster_queue or f"cq-{ns}",
        gpu_quota=gpus,
    )  # fmt: skip
    flavors = [o for o in objects if o["kind"] == "ResourceFlavor"]
    existing = {
        f["metadata"]["name"]
        for f in custom(cp).list_cluster_custom_object(GROUP, VERSION, "resourceflavors")["items"]
    }
    apply(cp, [o for o in objects if o not in flavors or o["metadata"]["name"] not in existing])


def priority_class(cp, name, value):
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadPriorityClass",
            "metadata": {"name": name}, "value": value}  # fmt: skip
    custom(cp).create_cluster_custom_object(GROUP, VERSION, "workloadpriorityclasses", body)


def gang(ns, name, workers=2, **placement):
    return worker_set(ns, name, workers=workers, pool="spot", queue="lq", **placement)


def run(cp, ws, lines, **kw) -> Background:
    kw.setdefault("poll_seconds", 0.5)
    kw.setdefault("chief_log", lines.append)
    k = kube.from_client(cp.admin, ws.namespace)
    return Background(launcher.JobSetLauncher(k, ws, say=lines.append, **kw))


def create(cp, ws) -> None:
    """A JobSet another team submitted to the queue (no launcher of ours)."""
    custom(cp).create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", ws.namespace, "jobsets", js.jobset(ws)
    )


def pods_of(cp, ns, name):
    return (
        cp.core()
        .list_namespaced_pod(ns, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")
        .items
    )


def finish(cp, ns, name, workers):
    (job,) = wait_for(f"{name}'s child Job", lambda: child_jobs(cp, ns, name), timeout=120)
    for pod in running_pods(cp, ns, job.metadata.uid, workers):
        cp.kubelet.exit(pod, 0)


def said(lines, text, timeout=120.0):
    return wait_for(f"the line {text!r}", lambda: any(text in s for s in lines), timeout=timeout)


def workload_of(cp, ns, name) -> dict:
    def got():
        owned = [(w, w["metadata"].get("ownerReferences", [])) for w in workloads(cp, ns)]
        found = [w for w, owners in owned if any(o["name"] == name for o in owners)]
        return found[0] if found else None

    return wait_for(f"the Workload of {name}", got, timeout=60)


def test_the_gang_is_admitted_whole_only_when_the_quota_holds_all_of_it(kueue_kube):
    cp, ns = kueue_kube, "kq-admit"
    namespace(cp, ns)
    queue(cp, ns)
    other = gang(ns, "other", workers=3)
    create(cp, other)
    (other_job,) = wait_for("the other gang's Job", lambda: child_jobs(cp, ns, "other"), 120)
    running_pods(cp, ns, other_job.metadata.uid, 3)
    ours = gang(ns, "ours")
    lines: list[str] = []
    background = run(cp, ours, lines)
    said(lines, "waiting for admission in queue lq")
    line = next(s for s in lines if "waiting for admission" in s)
    assert "insufficient unused quota for nvidia.com/gpu in flavor on-demand, 1 more needed" in (
        line
    ), line
    time.sleep(3)  # looks go on; Kueue admits nothing of a gang it cannot hold whole
    assert not pods_of(cp, ns, "ours")
    assert all(j.spec.suspend for j in child_jobs(cp, ns, "ours")), "a child Job ran"
    finish(cp, ns, "other", 3)
    freed = time.monotonic()
    said(lines, "admitted by queue lq on ")
    (job,) = child_jobs(cp, ns, "ours")
    pods = running_pods(cp, ns, job.metadata.uid, 2)
    took = time.monotonic() - freed
    for pod in pods:
        cp.kubelet.exit(pod, 0)
    out = background.result(timeout=120)
    assert (out.code, out.restarts_counted) == (0, 0), lines
    print(f"\nthe quota freed -> both pods Running in {took:.1f} s; lines: {lines}")


@pytest.mark.parametrize("code", [143, 137])
def test_a_higher_priority_gang_preempts_ours_for_free_and_ours_resumes_when_readmitted(
    kueue_kube, code
):
    """Free whether a worker saves on the notice (143) or is killed before it does (the
    kubelet's SIGKILL, 137), with a restart budget of 0. Kueue's eviction suspends the
    child Job, and the Job controller removes its tracking finalizer before it deletes
    each pod (job_controller.go:1172-1177), so they never count toward backoffLimit;
    the Job fails only where a pod is seen Failed matching a FailJob rule
    (getFailJobMessage, :1606-1619): our notice's 143, a free JobSet restart. So
    kubernetes-sigs/jobset#1117 does not reach our gang."""
    cp, ns = kueue_kube, f"kq-preempt-{code}"
    namespace(cp, ns)
    queue(cp, ns)
    low, urgent = f"kq-low-{code}", f"kq-high-{code}"
    priority_class(cp, low, 10)
    priority_class(cp, urgent, 1000)
    ours = gang(ns, "ours", priority_class=low, retries=0)
    lines: list[str] = []
    background = run(cp, ours, lines)
    (job,) = wait_for("our child Job", lambda: child_jobs(cp, ns, "ours"), timeout=120)
    first = running_pods(cp, ns, job.metadata.uid, 2)
    cp.kubelet.on_delete[first[1].metadata.uid] = lambda: code
    high = gang(ns, "urgent", workers=3, priority_class=urgent)
    create(cp, high)
    said(lines, "evicted by Kueue (Preempted (InClusterQueue)")
    evicted = next(s for s in lines if "evicted by Kueue" in s)
    wait_for("our pods gone", lambda: not pods_of(cp, ns, "ours"), timeout=120)
    finish(cp, ns, "urgent", 3)

    def readmitted():
        wl = workload_of(cp, ns, "ours")
        conds = {c["type"]: c for c in wl["status"].get("conditions", [])}
        admitted = conds.get("Admitted", {})
        return admitted if admitted.get("status") == "True" else None

    wait_for("our Workload admitted again", readmitted, timeout=180)
    again = time.monotonic()

    def second_gang():
        pods = [p for p in pods_of(cp, ns, "ours") if p.status.phase == "Running"
                and p.metadata.uid not in {q.metadata.uid for q in first}]  # fmt: skip
        return pods if len(pods) == 2 else None

    second = wait_for("our gang Running again", second_gang, timeout=180)
    training_again = time.monotonic() - again
    for pod in second:
        cp.kubelet.exit(pod, 0)
    out = background.result(timeout=120)
    assert out.code == 0, lines
    assert out.restarts_counted == 0, (out.restarts, out.restarts_counted, lines)
    disrupted = {a.disruption for a in out.attempts if a.pod in {p.metadata.name for p in first}}
    assert disrupted == {"Kueue Preempted (InClusterQueue)"}, out.attempts
    print(
        f"\n{evicted}\nworker 1 ended {code}; readmitted -> our 2 pods Running again in "
        f"{training_again:.1f} s; JobSet restarts {out.restarts}, counted {out.restarts_counted}"
    )


class Looks:
    """The launcher's Kube, whose looks (each begins by reading the JobSet) the test lets
    through one at a time once it holds them: what happens between two looks is the
    test's, however long Kueue and the machine take, as with a long look interval."""

    def __init__(self, k: kube.Kube):
        self.k, self.free, self.arrived, self.parked = k, True, 0, False
        self.gate = threading.Semaphore(0)

    def __getattr__(self, name):
        return getattr(self.k, name)

    def read_jobset(self, name):
        self.arrived += 1
        if not self.free:
            self.parked = True
            self.gate.acquire()
            self.parked = False
        return self.k.read_jobset(name)

    def look(self) -> None:
        """One whole look: the launcher decides, acts and comes back for the next."""
        self.free = False
        wait_for("the launcher waiting for its next look", lambda: self.parked, timeout=120)
        arrived = self.arrived
        self.gate.release()
        wait_for("the launcher's look", lambda: self.arrived > arrived, timeout=120)

    def let_go(self) -> None:
        self.free = True
        self.gate.release()


def test_kueue_evictions_readmitted_between_two_looks_are_said_and_recorded(kueue_kube):
    """Issue 57: Kueue evicts the gang (a higher-priority gang preempts it) and readmits
    it before the launcher's next look, three times: no look sees Evicted, but Kueue
    counts each in the Workload's status.schedulingStats.evictions; each is said once
    and its pods are recorded as stopped by Kueue. A launcher started again on the gang
    says none of them again (the count said is kept on the JobSet)."""
    cp, ns = kueue_kube, "kq-between"
    namespace(cp, ns)
    queue(cp, ns)
    priority_class(cp, "kq-between-low", 10)
    priority_class(cp, "kq-between-high", 1000)
    ours = gang(ns, "ours", priority_class="kq-between-low", retries=0)
    lines: list[str] = []
    looks = Looks(kube.from_client(cp.admin, ns))
    first = Background(launcher.JobSetLauncher(
        looks, ours, poll_seconds=0.5, say=lines.append, chief_log=lines.append,
        own_pod_disrupted=lambda: True,
    ))  # fmt: skip
    (job,) = wait_for("our child Job", lambda: child_jobs(cp, ns, "ours"), timeout=120)
    running = running_pods(cp, ns, job.metadata.uid, 2)
    looks.look()  # the last look before the evictions sees the gang training

    def between(said):
        return [s for s in said if "between two looks" in s]

    def gang_running(old):
        def got():
            pods = [p for p in pods_of(cp, ns, "ours")
                    if p.status.phase == "Running" and p.metadata.uid not in old]  # fmt: skip
            return pods if len(pods) == 2 else None

        return wait_for("our gang Running again", got, timeout=240)

    table = []
    for n in range(1, 4):
        gone = {p.metadata.uid for p in running}
        create(cp, gang(ns, f"urgent-{n}", workers=3, priority_class="kq-between-high"))
        wait_for("our pods gone", lambda: not pods_of(cp, ns, "ours"), timeout=180)
        finish(cp, ns, f"urgent-{n}", 3)
        running = gang_running(gone)
        stats = workload_of(cp, ns, "ours")["status"].get("schedulingStats", {})
        counted = sum(e["count"] for e in stats.get("evictions", []))
        looks.look()
        told = sum(int(s.split("the gang ")[1].split(" time")[0]) for s in between(lines))
        restarts = get_jobset(cp, ns, "ours").get("status", {}).get("restarts", 0)
        table.append((n, counted, told, restarts))
    first.launcher.stopping()  # its own pod going: the gang runs on for the next launcher
    looks.let_go()
    out = first.result(timeout=120)
    kueue_stopped = [a for a in out.attempts if a.disruption.startswith("Kueue Preempted")]
    runs = [g for g in gang_attempts(out.attempts) if g["disruption"].startswith("Kueue")]

    again: list[str] = []
    second = run(cp, ours, again)
    said(again, "re-attaching to JobSet ours")
    time.sleep(3)  # its looks go on over the same Workload and its count
    for pod in running:
        cp.kubelet.exit(pod, 0)
    end = second.result(timeout=120)
    print("\nevictions between two looks: round, Kueue's count, said, JobSet restarts")
    for row in table:
        print("  {}  {}  {}  {}".format(*row))
    print("\n".join(between(lines)))
    print(f"recorded: {len(kueue_stopped)} pods, {len(runs)} gang runs stopped by Kueue; "
          f"said again after a restart: {len(between(again))}")  # fmt: skip
    assert [(n, counted, told) for n, counted, told, _ in table] == [
        (1, 1, 1), (2, 2, 2), (3, 3, 3)
    ], (table, lines)  # fmt: skip
    assert len(between(lines)) == 3, lines
    assert (len(kueue_stopped), len(runs)) == (6, 3), (out.attempts, lines)
    assert all(sorted(g["pod_exit_codes"]) == ["0", "1"] for g in runs), runs
    assert out.code == exits.PREEMPTED and end.code == exits.OK, (lines, again)
    assert not between(again) and end.restarts_counted == 0, again


def test_a_gang_larger_than_the_whole_quota_is_one_line_and_never_starts(kueue_kube):
    cp, ns = kueue_kube, "kq-small"
    namespace(cp, ns)
    queue(cp, ns, gpus=1)
    ours = gang(ns, "ours")
    lines: list[str] = []
    out = run(cp, ours, lines).result(timeout=120)
    assert out.code == exits.FATAL_CONFIG, lines
    assert "can never admit the whole gang" in lines[-1] and "> maximum capacity (1)" in lines[-1]
    assert not pods_of(cp, ns, "ours")
    wait_in(cp, ns, "the JobSet deleted", lambda: not child_jobs(cp, ns, "ours"), timeout=60)


def test_no_local_queue_is_one_line_64_before_any_jobset_and_at_submit(kueue_kube, monkeypatch):
    from spottrain.pipelines import jobset_check

    cp, ns = kueue_kube, "kq-no-queue"
    namespace(cp, ns)
    monkeypatch.setenv("KUBECONFIG", cp.kubeconfig)
    line = jobset_check.problem(ns, queue="lq")  # what run-gke says, then exits 2
    assert "queue 'lq': no LocalQueue of that name in namespace kq-no-queue" in line, line
    lines: list[str] = []
    with pytest.raises(kube.NoQueue) as err:
        run(cp, gang(ns, "ours"), lines).result(timeout=60)
    assert err.value.code == exits.FATAL_CONFIG and "\n" not in str(err.value)
    assert "queue 'lq': no LocalQueue of that name in namespace kq-no-queue" in str(err.value)
    assert not child_jobs(cp, ns, "ours")


@pytest.mark.skipif(can_make_pod_networks() is not None, reason=str(can_make_pod_networks()))
@pytest.mark.skipif(not have_tini(), reason=NO_TINI)
def test_real_trainers_preempted_by_kueue_save_on_the_notice_and_end_at_the_exact_step(
    kueue_kube, tmp_path
):
    """The whole chain under Kueue: our gang's pods run real trainers (the docs/task-api.md
    task, each in a pod of its own, tests/pod_network.py); a higher-priority gang makes
    Kueue evict ours, JobSet suspends its Job, the Job controller deletes the pods and the
    kubelet SIGTERMs them: both save the same step and exit 143. Readmitted once the
    other gang is done, the new pods resume from that step and end at exactly 600."""
    from platform_chains import chain_env, finish_chains, ledger_records, stop_chains, wait_for_step
    from pod_network import PodNetwork, pod_env, signal_pid1

    cp, ns, name = kueue_kube, "kq-real", "ours"
    namespace(cp, ns)
    queue(cp, ns)
    priority_class(cp, "kq-real-low", 10)
    priority_class(cp, "kq-real-high", 1000)
    ckpt = tmp_path / "run" / "checkpoints"
    args = [
        "--task", "examples.regression:Regression", "--task-args", '{"features": 8}',
        "--train-steps", "600", "--batch-size-per-replica", "16",
        "--save-every-steps", "100000", "--save-every-seconds", "0", "--log-every-steps", "1",
        "--threads", "1", "--checkpoint-dir", str(ckpt), "--model-dir", str(tmp_path / "model"),
    ]  # fmt: skip
    ws = gang(ns, name, args=args, priority_class="kq-real-low", retries=0)
    lines: list[str] = []
    background = run(cp, ws, lines)

    def running_gang(exclude=()):
        def got():
            pods = [p for p in pods_of(cp, ns, name)
                    if p.status.phase == "Running" and p.metadata.uid not in exclude]  # fmt: skip
            return sorted(pods, key=lambda p: p.metadata.name) if len(pods) == 2 else None

        return wait_for("our 2 pods Running", got, timeout=180)

    def start(net, kpods):
        pods = net.gang(len(kpods))
        hosts = net.hosts_file(pods)
        kpods = sorted(kpods, key=lambda p: int(p.metadata.annotations[INDEX]))
        chains = []
        for kp, pod in zip(kpods, pods, strict=True):
            (ctr,) = kp.spec.containers
            env = chain_env({**pod_env(kp), "HOSTNAME": pod.hostname})
            chains.append(net.start(pod, hosts, [*ctr.command, *ctr.args], env, REPO))
        return kpods, chains

    with PodNetwork(tmp_path, ws.child_job, name) as net:
        first, chains = start(net, running_gang())
        codes: dict[int, int] = {}

        def on_delete(i):
            def code() -> int:  # the kubelet's SIGTERM, then the container's exit code
                if not codes:
                    signal_pid1(chains[i], signal.SIGTERM)
                    codes.update(enumerate(finish_chains(chains, timeout=120)))
                return codes[i]

            return code

        try:
            wait_for_step(chains, 1, 20, timeout=240)
            for i, kp in enumerate(first):
                cp.kubelet.on_delete[kp.metadata.uid] = on_delete(i)
            create(cp, gang(ns, "urgent", workers=3, priority_class="kq-real-high"))
            said(lines, "evicted by Kueue (Preempted (InClusterQueue)")
            wait_for("our pods gone", lambda: not pods_of(cp, ns, name), timeout=180)
        finally:
            stop_chains(chains)
        assert codes == {0: 143, 1: 143}, [c.text()[-2500:] for c in chains]
        finish(cp, ns, "urgent", 3)
        second, chains = start(net, running_gang({p.metadata.uid for p in first}))
        try:
            ended = finish_chains(chains, timeout=300)
        finally:
            stop_chains(chains)
        assert ended == [0, 0], [c.text()[-2500:] for c in chains]
        for kp in second:
            cp.kubelet.exit(kp, 0)
    out = background.result(timeout=120)
    assert (out.code, out.restarts_counted) == (0, 0), lines
    first_rec, second_rec = ledger_records(ckpt)
    assert first_rec["outcome"] == "preempted" and first_rec["steps_lost"] == 0, first_rec
    assert second_rec["start_step"] == first_rec["saved_step"] > 0, (first_rec, second_rec)
    assert second_rec["last_step"] == 600 and second_rec["outcome"] == "success", second_rec
    print(f"\nKueue's eviction: saved step {first_rec['saved_step']} on the notice; final 600")
