"""The JobSet launcher (spottrain/runtime/train_job/launcher.py) against the real JobSet
v0.12.0 controller and webhooks and the real Job controller, scheduler and garbage
collector (kube-cp). The fake kubelet (tests/real_kube.py) plays the containers' exits.

The launcher runs in a thread where the test needs its :class:`Outcome`, and as a
process of its own (tests/jobset_launch_proc.py) where it is SIGKILLed or SIGTERMed.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest
from jobset_launch_proc import Proc
from platform_chains import (
    NO_TINI,
    REPO,
    chain_env,
    finish_chains,
    have_tini,
    ledger_records,
    stop_chains,
    wait_for_step,
)
from pod_network import PodNetwork, can_make_pod_networks, pod_env, signal_pid1
from real_jobset import (
    A100,
    GROUP,
    MARKS,
    PLURAL,
    VERSION,
    Background,
    child_jobs,
    custom,
    get_jobset,
    gone,
    jobset_kube_fixture,  # noqa: F401 - the fixture, by import
    namespace,
    running_pods,
    wait_in,
    worker_set,
)
from real_kube import real_kube_fixture, wait_for  # noqa: F401 - a fixture, by import
from trainer_helpers import summary

from spottrain.placement import Placement
from spottrain.runtime.train_job import decide as d
from spottrain.runtime.train_job import jobset as js
from spottrain.runtime.train_job import kube, launcher
from spottrain.runtime.train_job.kube import KubeError
from spottrain.runtime.train_settings import TrainSettings

pytestmark = MARKS  # slow; skipped without kube-cp or `make jobset`'s outputs
RESTART = "jobset.sigs.k8s.io/restart-attempt"  # pkg/constants/constants.go:34
INDEX = "batch.kubernetes.io/job-completion-index"


def in_thread(cp, ws, lines, **kw) -> Background:
    kw.setdefault("poll_seconds", 0.5)
    kw.setdefault("chief_log", lines.append)
    ns = ws.namespace if isinstance(ws, js.WorkerSet) else ws[0].namespace
    run = launcher.JobSetLauncher(kube.from_client(cp.admin, ns), ws, say=lines.append, **kw)
    return Background(run)


def generation(cp, ns, name, n_restart: int, timeout: float = 120.0):
    """The JobSet's child Job of restart ``n_restart``, once it exists."""

    def got():
        for job in child_jobs(cp, ns, name):
            if job.metadata.labels.get(RESTART) == str(n_restart):
                return job
        return None

    return wait_in(cp, ns, f"the child Job of restart {n_restart}", got, timeout=timeout)


def test_killed_launchers_reattach_and_the_run_completes_with_one_jobset(jobset_kube):
    """SIGKILLed once it created the JobSet, and again once the gang ran: each new
    launcher re-attaches by name; one JobSet, one child Job, no restart bought."""
    cp, ns, name = jobset_kube, "tl-reattach", "st-reattach"
    namespace(cp, ns)
    first = Proc(cp, ns, name, retries=2)
    first.line("created JobSet")
    first.proc.send_signal(signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL
    uid = get_jobset(cp, ns, name)["metadata"]["uid"]
    second = Proc(cp, ns, name, retries=2)
    second.line("re-attaching to JobSet")
    (job,) = wait_for("the child Job", lambda: child_jobs(cp, ns, name), timeout=60)
    pods = running_pods(cp, ns, job.metadata.uid, 2)
    second.proc.send_signal(signal.SIGKILL)
    second.wait()
    third = Proc(cp, ns, name, retries=2)
    third.line("re-attaching to JobSet")
    for pod in pods:
        cp.kubelet.exit(pod, 0)
    assert third.wait() == 0, third.text()
    assert "OUTCOME 0 restarts=0 counted=0" in third.text()
    assert "created" not in second.text() + third.text()
    after = get_jobset(cp, ns, name)
    assert after["metadata"]["uid"] == uid  # the same JobSet, kept for its TTL
    assert after["spec"]["failurePolicy"]["maxRestarts"] == 2
    assert [j.metadata.uid for j in child_jobs(cp, ns, name)] == [job.metadata.uid]


def test_exit_64_ends_the_launcher_with_64_and_keeps_the_jobset(jobset_kube):
    cp, ns, name = jobset_kube, "tl-fatal", "st-fatal"
    namespace(cp, ns)
    lines: list[str] = []
    run = in_thread(cp, worker_set(ns, name, retries=3), lines)
    (job,) = wait_for("the child Job", lambda: child_jobs(cp, ns, name), timeout=60)
    pods = running_pods(cp, ns, job.metadata.uid, 2)
    cp.kubelet.exit(pods[1], 64)
    out = run.result(timeout=120)
    assert (out.code, out.restarts, out.restarts_counted) == (64, 0, 0), lines
    ended = {(a.pod, a.job, a.exit_code, a.node) for a in out.attempts}
    assert (pods[1].metadata.name, f"{name}/0", 64, pods[1].spec.node_name) in ended, ended
    assert "kept for inspection" in lines[-1], lines
    assert not get_jobset(cp, ns, name)["metadata"].get("deletionTimestamp")


def test_a_disruption_restarts_for_free_and_170s_use_up_max_restarts(jobset_kube):
    """DisruptionTarget → a free restart, said once; a 170 → a counted one; the next
    170 → Failed: exit 170, and the JobSet deleted so that KFP's retry starts afresh."""
    cp, ns, name = jobset_kube, "tl-restarts", "st-restarts"
    namespace(cp, ns)
    lines: list[str] = []
    run = in_thread(cp, worker_set(ns, name, retries=1), lines)

    def gang(n_restart):
        return running_pods(cp, ns, generation(cp, ns, name, n_restart).metadata.uid, 2)

    cp.kubelet.shut_down(gang(0)[0])
    wait_for("the free restart said", lambda: any("0 of 1 counted" in s for s in lines), 90)
    cp.kubelet.exit(gang(1)[1], 170)
    wait_for("the counted restart said", lambda: any("1 of 1 counted" in s for s in lines), 90)
    cp.kubelet.exit(gang(2)[0], 170)
    out = run.result(timeout=120)
    assert (out.code, out.restarts, out.restarts_counted) == (170, 2, 1), lines
    codes = [(a.job, a.exit_code) for a in out.attempts]
    assert (f"{name}/1", 170) in codes and (f"{name}/2", 170) in codes, codes
    assert any(a.disruption == "TerminationByKubelet" for a in out.attempts), out.attempts
    assert "deleting it for the retry" in lines[-1], lines
    wait_in(cp, ns, "the JobSet deleted", lambda: gone(cp, ns, name), timeout=120)


def test_sigterm_deletes_the_jobset_and_exits_143(jobset_kube):
    cp, ns, name = jobset_kube, "tl-sigterm", "st-sigterm"
    namespace(cp, ns)
    proc = Proc(cp, ns, name, retries=2)
    proc.line("created JobSet")
    (job,) = wait_for("the child Job", lambda: child_jobs(cp, ns, name), timeout=60)
    running_pods(cp, ns, job.metadata.uid, 2)
    proc.proc.send_signal(signal.SIGTERM)
    assert proc.wait() == 143, proc.text()
    assert "SIGTERM: deleting the JobSet" in proc.text()
    wait_in(cp, ns, "the JobSet, its Job and pods deleted", lambda: gone(cp, ns, name), 120)
    assert not child_jobs(cp, ns, name)


def test_a_compute_class_with_no_capacity_is_said_within_a_minute_and_bounded(jobset_kube):
    """The real scheduler leaves the pods Pending/Unschedulable; the launcher names the
    class within a minute, and its capacity deadline ends the run retryably."""
    cp, ns, name = jobset_kube, "tl-nocap", "st-nocap"
    namespace(cp, ns)
    proc = Proc(
        cp, ns, name, capacity_deadline=45, pool="spot", compute_class="no-such-class", retries=1
    )
    created, _ = proc.line("created JobSet")
    said, line = proc.line("Pending/Unschedulable", timeout=90)
    assert "cloud.google.com/compute-class=no-such-class" in line
    assert proc.wait(timeout=120) == 172, proc.text()
    assert "capacity deadline" in proc.text()
    print(f"\nUnschedulable said {said - created:.1f} s after the JobSet was created")
    assert said - created < 60
    wait_in(cp, ns, "the JobSet deleted", lambda: gone(cp, ns, name), timeout=120)


def test_a_queue_on_a_cluster_without_kueue_is_one_line_64_before_any_jobset(jobset_kube):
    cp, ns, name = jobset_kube, "tl-no-kueue", "st-no-kueue"
    namespace(cp, ns)
    lines: list[str] = []
    ws = worker_set(ns, name, pool="spot", queue="team-a")
    with pytest.raises(KubeError) as err:
        in_thread(cp, ws, lines).result(timeout=60)
    assert err.value.code == 64 and "\n" not in str(err.value), err.value
    assert "queue 'team-a': this cluster has no Kueue (kueue.x-k8s.io/v1beta2 not served)" in (
        str(err.value)
    )
    assert not child_jobs(cp, ns, name)


def test_a_jobset_that_is_not_ours_is_refused_and_never_touched(jobset_kube):
    cp, ns, name = jobset_kube, "tl-foreign", "st-foreign"
    namespace(cp, ns)
    theirs = js.jobset(worker_set(ns, name))
    theirs["metadata"]["labels"] = {"team": "other"}
    custom(cp).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, theirs)
    uid = get_jobset(cp, ns, name)["metadata"]["uid"]
    lines: list[str] = []
    run = in_thread(cp, worker_set(ns, name), lines)
    run.launcher.stop.set()  # not even SIGTERM deletes somebody else's JobSet
    out = run.result(timeout=60)
    assert out.code == 64 and "not created for this task" in lines[-1], lines
    after = get_jobset(cp, ns, name)
    assert after["metadata"]["uid"] == uid and not after["metadata"].get("deletionTimestamp")


def test_a_cluster_without_the_jobset_crd_is_one_line_and_exit_64(real_kube):
    cp, ns = real_kube, "tl-nocrd"
    namespace(cp, ns)
    run = launcher.JobSetLauncher(kube.from_client(cp.admin, ns), worker_set(ns, "st-nocrd"))
    with pytest.raises(KubeError) as err:
        run.run()
    assert err.value.code == 64
    assert "no JobSet API" in str(err.value) and "make gke-jobset" in str(err.value)
    assert "\n" not in str(err.value)
    assert not cp.batch().list_namespaced_job(ns).items


@pytest.mark.skipif(can_make_pod_networks() is not None, reason=str(can_make_pod_networks()))
@pytest.mark.skipif(not have_tini(), reason=NO_TINI)
def test_the_jobset_engines_pods_run_a_user_task_save_on_notice_and_finish_exactly(
    jobset_kube, tmp_path
):
    """The whole chain: the launcher creates the JobSet; the real JobSet and Job
    controllers make the pods; each runs in a pod of its own (tests/pod_network.py) as
    the API has it: its command, args and env (the index by fieldRef), its hostname and
    subdomain, tini as PID 1, the docs/task-api.md task. SIGTERM to one pod: both save
    the same step and exit 143; the exits reported, the JobSet restarts for free; the
    new gang ends at exactly the final step; the launcher exits 0."""
    cp, ns, name = jobset_kube, "tl-pods", "st-pods"
    namespace(cp, ns)
    out = tmp_path / "run"
    ckpt = out / "checkpoints"
    args = [
        "--task", "examples.regression:Regression", "--task-args", '{"features": 8}',
        "--train-steps", "600", "--batch-size-per-replica", "16",
        "--save-every-steps", "100000", "--save-every-seconds", "0", "--log-every-steps", "1",
        "--threads", "1", "--checkpoint-dir", str(ckpt), "--model-dir", str(out / "model"),
    ]  # fmt: skip
    ws = worker_set(ns, name, args=args, retries=1)
    lines: list[str] = []
    run = in_thread(cp, ws, lines)

    def gang(n_restart):
        job = generation(cp, ns, name, n_restart)
        pods = running_pods(cp, ns, job.metadata.uid, ws.workers)
        return sorted(pods, key=lambda p: int(p.metadata.annotations[INDEX]))

    def start(net, kpods):
        pods = net.gang(len(kpods))
        hosts = net.hosts_file(pods)
        chains = []
        for kp, pod in zip(kpods, pods, strict=True):
            assert (kp.spec.hostname, kp.spec.subdomain) == (pod.hostname, name)
            (ctr,) = kp.spec.containers
            env = chain_env({**pod_env(kp), "HOSTNAME": pod.hostname})
            chains.append(net.start(pod, hosts, [*ctr.command, *ctr.args], env, REPO))
        return chains

    def report(kpods, codes):
        from kubernetes.client.exceptions import ApiException

        for kp, code in zip(kpods, codes, strict=True):
            try:
                cp.kubelet.exit(kp, code)
            except ApiException as err:  # already deleted by the JobSet's restart
                assert err.status == 404, err

    with PodNetwork(tmp_path, ws.child_job, name) as net:
        first = gang(0)
        chains = start(net, first)
        try:
            wait_for_step(chains, 1, 20, timeout=240)
            signal_pid1(chains[1], signal.SIGTERM)
            codes = finish_chains(chains, timeout=120)
        finally:
            stop_chains(chains)
        assert codes == [143, 143], [c.text()[-2500:] for c in chains]
        report(first, codes)
        reported = time.monotonic()
        second = gang(1)
        restarted = time.monotonic() - reported
        chains = start(net, second)
        try:
            codes = finish_chains(chains, timeout=300)
        finally:
            stop_chains(chains)
        assert codes == [0, 0], [c.text()[-2500:] for c in chains]
        report(second, codes)
    outcome = run.result(timeout=120)
    assert (outcome.code, outcome.restarts, outcome.restarts_counted) == (0, 1, 0), lines
    first_rec, second_rec = ledger_records(ckpt)
    assert first_rec["outcome"] == "preempted" and first_rec["steps_lost"] == 0, first_rec
    assert second_rec["start_step"] == first_rec["saved_step"]
    assert summary(out)["final_step"] == 600
    print(
        f"\nsaved step {first_rec['saved_step']} on the notice on both pods; the new gang's "
        f"pods Running {restarted:.1f} s after the exits were reported; final step 600"
    )


def spot_and_on_demand(ns, name, **kw) -> list[js.WorkerSet]:
    """A spot gang (the fixture's nodes have no spot label: it never gets capacity)
    and the on-demand gang it moves to."""
    spot = worker_set(ns, name, pool="spot", **kw)
    on_demand = worker_set(ns, name + "-od", **kw)
    return [spot, on_demand]


def test_no_spot_capacity_moves_the_gang_to_on_demand_and_it_completes(jobset_kube):
    cp, ns, name = jobset_kube, "tl-move", "st-move"
    namespace(cp, ns)
    spot, on_demand = spot_and_on_demand(ns, name, retries=1)
    lines: list[str] = []
    run = in_thread(cp, [spot, on_demand], lines, settings=d.Settings(capacity_deadline=20))
    try:
        (job,) = wait_for("the on-demand child Job", lambda: child_jobs(cp, ns, on_demand.name),
                          120)  # fmt: skip
    except AssertionError:
        raise AssertionError("\n".join(lines)) from None
    pods = running_pods(cp, ns, job.metadata.uid, 2)
    assert gone(cp, ns, spot.name), lines  # deleted before the new gang was resumed
    for pod in pods:
        cp.kubelet.exit(pod, 0)
    out = run.result(timeout=120)
    assert (out.code, out.jobset, out.moved) == (0, on_demand.name, True), lines
    said = "\n".join(lines)
    assert "no spot capacity for" in said and "moving to on-demand" in said, said
    assert said.index(f"created JobSet {on_demand.name}") < said.index("moved to JobSet"), said


def run_for_a_deadline(cp, ns, name, tmp_path, seconds: float):
    """A launcher of the spot and on-demand gangs with ``finish_by`` ``seconds`` away and
    an hour's capacity patience. The ledger says 200 of 10,000 steps at a steady 0.5 s:
    4,900 s of work left; on-demand needs a restart (the run's own start-up, 100 s:
    started to restored) and holds a margin of a third of it, at least 60 s: 5,060 s.

    Returns:
        The two gangs, the deadline as asked, the launcher's lines and its thread.
    """
    import json

    from spottrain.runtime.train_job.component import for_the_deadline

    namespace(cp, ns)
    spot, on_demand = spot_and_on_demand(ns, name, retries=1)
    rec = {"id": "a", "attempt": 1, "started": time.time() - 400, "workers": 2,
           "resumed_at": time.time() - 300, "ended": time.time() - 200, "capacity": "spot",
           "gpu_type": A100["gpu_type"], "gpu_count": 1, "start_step": 0, "last_step": 200,
           "saved_step": 200, "outcome": "preempted", "seconds_per_step": 0.5}  # fmt: skip
    (tmp_path / "attempts.json").write_text(json.dumps({"attempts": [rec]}))
    deadline = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + seconds))
    options = for_the_deadline(deadline, str(tmp_path), TrainSettings(train_steps=10_000),
                               [spot, on_demand])  # fmt: skip
    lines: list[str] = []
    run = in_thread(
        cp, [spot, on_demand], lines, settings=d.Settings(capacity_deadline=3600), **options
    )
    return spot, on_demand, deadline, lines, run


def test_a_deadline_moves_the_waiting_spot_gang_to_on_demand_and_the_move_is_in_the_ledger(
    jobset_kube, tmp_path
):
    """No spot capacity, but a capacity patience an hour long: the launcher's own rule
    would wait. With 5,090 s to the deadline, on-demand (5,060 s, run_for_a_deadline) is
    in time now but not after the next look (60 s): the launcher starts there at once,
    for the deadline, and writes the move."""
    from spottrain.ledger import moves

    cp, ns = jobset_kube, "tl-finish-by"
    spot, on_demand, deadline, lines, run = run_for_a_deadline(
        cp, ns, "st-finish-by", tmp_path, 5090
    )
    try:
        (job,) = wait_for("the on-demand child Job", lambda: child_jobs(cp, ns, on_demand.name),
                          120)  # fmt: skip
    except AssertionError:
        raise AssertionError("\n".join(lines) + f"\n{run.error!r}") from None
    pods = running_pods(cp, ns, job.metadata.uid, 2)
    assert gone(cp, ns, spot.name), lines
    for pod in pods:
        cp.kubelet.exit(pod, 0)
    out = run.result(timeout=120)
    assert (out.code, out.jobset, out.moved) == (0, on_demand.name, True), lines
    said = "\n".join(lines)
    assert "to finish by" in said and "starting on on-demand" in said, said
    # Decided before creating: no spot JobSet made to be deleted 20 ms later (issue 57).
    assert f"created JobSet {spot.name}:" not in said, said
    # At once: the deadline's move, before the pods waited (patience's line, or the
    # deadline's reason once the check is told of the pods' wait, would say how long).
    assert "no spot capacity for" not in said, said
    ladder, (move,) = moves.read(str(tmp_path))
    assert ladder["asked"] == deadline and move["finish_by"] == ladder["finish_by"]
    assert (move["platform"], move["left"], move["from_capacity"], move["to_capacity"]) == (
        "gke", spot.name, "spot", "on-demand")  # fmt: skip
    assert move["reason"].startswith("to finish by"), move


def test_spot_capacity_given_back_before_the_deadline_needs_a_move_keeps_the_gang_on_spot(
    jobset_kube, tmp_path
):
    """The same ledger, with a deadline on-demand meets with an hour to spare: the
    launcher waits for spot. Two spot nodes then join (capacity given back); the
    spot gang trains there, nothing moves and the ledger holds no move."""
    from real_kube import ACCELERATOR_LABEL, NODEPOOL_LABEL

    from spottrain.ledger import moves

    cp, ns, name = jobset_kube, "tl-spot-back", "st-spot-back"
    spot, _, deadline, lines, run = run_for_a_deadline(cp, ns, name, tmp_path, 5300 + 3600)
    # The spot gang's pods wait (no node has the labels they ask for), said after 30 s:
    # every look until then asked the deadline, which kept the gang on spot.
    said = lambda: any("Pending/Unschedulable" in s for s in lines)  # noqa: E731
    wait_for("the spot gang pending", said, 120)
    template = js.jobset(spot)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    selector = template["spec"]["nodeSelector"]
    taints = [{"key": t["key"], "value": t.get("value", ""), "effect": t["effect"]}
              for t in template["spec"].get("tolerations", []) if t.get("effect")]  # fmt: skip
    added = [f"{name}-spot-{i}" for i in range(2)]
    try:
        for node in added:
            labels = {ACCELERATOR_LABEL: "nvidia-tesla-a100", NODEPOOL_LABEL: "spot", **selector}
            cp.add_node(node, labels, taints)
            cp.kubelet.nodes.add(node)
        (job,) = wait_for("the spot child Job", lambda: child_jobs(cp, ns, spot.name), 120)
        pods = running_pods(cp, ns, job.metadata.uid, 2)
        assert {p.spec.node_name for p in pods} <= set(added), [p.spec.node_name for p in pods]
        for pod in pods:
            cp.kubelet.exit(pod, 0)
        out = run.result(timeout=120)
    finally:
        for node in added:
            cp.kubelet.nodes.discard(node)
            cp.core().delete_node(node)
    assert (out.code, out.jobset, out.moved) == (0, spot.name, False), lines
    assert not any("moving to on-demand" in s for s in lines), lines
    ladder, taken = moves.read(str(tmp_path))
    assert ladder["asked"] == deadline and taken == [], taken


def test_ahead_of_the_deadline_on_demand_moves_back_to_a_new_spot_gang_found_after_a_restart(
    jobset_kube, tmp_path
):
    """Issue 56. The on-demand gang trains (a move made it: the ledger has the move from
    spot, RETURN_WAIT_S and a minute ago) and the ledger is far ahead of a deadline 6 h
    away. The launcher re-attaches to it, and its deadline check, asked on on-demand,
    says back to spot: a new spot gang (its own JobSet name) is created suspended, the
    on-demand JobSet deleted, the spot one resumed; the move is in the ledger, on-demand
    to spot. A launcher started again re-attaches to the new spot gang."""
    import json

    from spottrain.ladder.decide import RETURN_WAIT_S
    from spottrain.ledger import moves
    from spottrain.ledger.schema import Move
    from spottrain.runtime.train_job import names
    from spottrain.runtime.train_job.component import for_the_deadline

    cp, ns, name = jobset_kube, "tl-back", "st-back"
    namespace(cp, ns)
    spot, on_demand = spot_and_on_demand(ns, name, retries=1)
    back = names.gang_name(spot.name, 2)
    custom(cp).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, js.jobset(on_demand))
    (od_job,) = wait_for("the on-demand child Job", lambda: child_jobs(cp, ns, on_demand.name))
    running_pods(cp, ns, od_job.metadata.uid, 2)
    now = time.time()
    rec = {"id": "b", "attempt": 2, "started": now - 400, "workers": 2, "resumed_at": now - 300,
           "updated": now - 200, "capacity": "on-demand", "gpu_type": A100["gpu_type"],
           "gpu_count": 1, "start_step": 0, "last_step": 200, "saved_step": 200,
           "outcome": "running", "seconds_per_step": 0.5}  # fmt: skip
    (tmp_path / "attempts.json").write_text(json.dumps({"attempts": [rec]}))
    moves.add_move(str(tmp_path), Move(
        at=now - RETURN_WAIT_S - 60, platform="gke", left=spot.name, from_capacity="spot",
        to_capacity="on-demand", reason="to finish by ...",
    ))  # fmt: skip
    deadline = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 6 * 3600))
    options = for_the_deadline(deadline, str(tmp_path), TrainSettings(train_steps=10_000),
                               [spot, on_demand])  # fmt: skip
    lines: list[str] = []
    run = in_thread(cp, [spot, on_demand], lines, own_pod_disrupted=lambda: True, **options)

    def resumed():
        found = get_jobset(cp, ns, back) if not gone(cp, ns, back) else None
        return found if found and found["spec"].get("suspend") is False else None

    moved_to = wait_for("the new spot gang resumed", resumed, 120)
    assert gone(cp, ns, on_demand.name), lines

    # Created suspended, then resumed once the on-demand JobSet was gone: JobSet's own
    # Suspended condition says so (pkg/controllers/jobset_controller.go: ResumeJobs), once
    # its controller has seen the resume (it lagged spec.suspend on a loaded CI run).
    def says_resumed():
        found = get_jobset(cp, ns, back)
        conditions = {c["type"]: c for c in found["status"].get("conditions") or []}
        return found if conditions.get("Suspended", {}).get("reason") == "ResumeJobs" else None

    moved_to = wait_for("JobSet's Suspended condition: ResumeJobs", says_resumed, 60)
    assert (
        moved_to["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
            "nodeSelector"
        ].get("cloud.google.com/gke-spot")
        == "true"
    ), moved_to["spec"]
    run.launcher.stop.set()  # its own pod disrupted: the gang runs on for the next launcher
    out = run.result(timeout=60)
    assert (out.code, out.jobset, out.moved) == (143, back, True), lines
    said = "\n".join(lines)
    assert f"re-attaching to JobSet {on_demand.name}" in said, said
    assert "ahead of the deadline: back to spot" in said, said
    assert "moving back to a new spot gang" in said, said
    assert said.index(f"created JobSet {back}") < said.index(f"moved to JobSet {back}"), said
    ladder, taken = moves.read(str(tmp_path))
    assert ladder["asked"] == deadline and len(taken) == 2, taken
    move = taken[-1]
    assert (move["platform"], move["left"], move["from_capacity"], move["to_capacity"]) == (
        "gke", on_demand.name, "on-demand", "spot")  # fmt: skip
    assert move["reason"].startswith("ahead of the deadline"), move
    # A launcher started again finds the new gang by the task's labels, creates nothing,
    # and (the run still ahead, on spot now) moves nowhere; its SIGTERM deletes the gang.
    again: list[str] = []
    options = for_the_deadline(deadline, str(tmp_path), TrainSettings(train_steps=10_000),
                               [spot, on_demand])  # fmt: skip
    second = in_thread(cp, [spot, on_demand], again, **options)
    wait_for("the re-attach", lambda: any("re-attaching" in s for s in again), 60)
    time.sleep(2)
    second.launcher.stop.set()
    out = second.result(timeout=60)
    assert (out.code, out.jobset) == (143, back), again
    assert f"re-attaching to JobSet {back}" in again[0], again
    assert not any("created" in s or "moving" in s for s in again), again
    assert len(moves.read(str(tmp_path))[1]) == 2
    wait_for("the spot gang deleted", lambda: gone(cp, ns, back), 60)


def test_a_spot_gang_a_return_made_moves_on_to_a_new_on_demand_gang_for_capacity(
    jobset_kube, tmp_path
):
    """After a move back to spot (gang 2, its own JobSet) the run may move forward again:
    the launcher re-attaches to gang 2 (found by the task's labels), whose pods get no
    spot capacity within ``unschedulable_timeout``; it moves to a new on-demand gang 3
    (created suspended, gang 2 deleted, gang 3 resumed), which completes, and the move
    is in the ledger, spot to on-demand, leaving gang 2."""
    from dataclasses import replace

    from spottrain.ledger import moves
    from spottrain.runtime.train_job import names
    from spottrain.runtime.train_job.component import for_the_deadline

    cp, ns, name = jobset_kube, "tl-forth", "st-forth"
    namespace(cp, ns)
    spot, on_demand = spot_and_on_demand(ns, name, retries=1)
    two, three = names.gang_name(name, 2), names.gang_name(name, 3)
    gang_two = replace(spot, name=two, attempt=3)
    custom(cp).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, js.jobset(gang_two))
    options = for_the_deadline("", str(tmp_path), TrainSettings(), [spot, on_demand])
    lines: list[str] = []
    run = in_thread(
        cp, [spot, on_demand], lines, settings=d.Settings(capacity_deadline=20), **options
    )
    (job,) = wait_for("gang 3's child Job", lambda: child_jobs(cp, ns, three), 120)
    pods = running_pods(cp, ns, job.metadata.uid, 2)
    assert gone(cp, ns, two), lines
    for pod in pods:
        cp.kubelet.exit(pod, 0)
    out = run.result(timeout=120)
    assert (out.code, out.jobset, out.moved) == (0, three, True), lines
    said = "\n".join(lines)
    assert f"re-attaching to JobSet {two}" in said, said
    assert "no spot capacity for" in said and "moving to on-demand" in said, said
    assert said.index(f"created JobSet {three}") < said.index(f"moved to JobSet {three}"), said
    assert get_jobset(cp, ns, three)["metadata"]["labels"][js.ATTEMPT_LABEL] == "4"
    _, (move,) = moves.read(str(tmp_path))
    assert (move["left"], move["from_capacity"], move["to_capacity"]) == (
        two, "spot", "on-demand")  # fmt: skip


def test_a_move_cut_off_midway_is_finished_by_the_next_launcher(jobset_kube):
    """As a launcher killed mid-move leaves it: the spot JobSet still there and the
    on-demand one created suspended. The next launcher deletes the spot one, waits for
    it to go, then resumes the on-demand one: never two gangs at once."""
    cp, ns, name = jobset_kube, "tl-cutoff", "st-cutoff"
    namespace(cp, ns)
    spot, on_demand = spot_and_on_demand(ns, name, retries=1)
    suspended = js.jobset(on_demand)
    suspended["spec"]["suspend"] = True
    for manifest in (js.jobset(spot), suspended):
        custom(cp).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, manifest)
    (od_job,) = wait_for("the suspended child Job", lambda: child_jobs(cp, ns, on_demand.name))
    assert od_job.spec.suspend is True
    lines: list[str] = []
    run = in_thread(cp, [spot, on_demand], lines)
    pods = running_pods(cp, ns, od_job.metadata.uid, 2)
    assert gone(cp, ns, spot.name), lines
    for pod in pods:
        cp.kubelet.exit(pod, 0)
    out = run.result(timeout=120)
    assert (out.code, out.jobset, out.moved) == (0, on_demand.name, True), lines
    assert not any("created" in line for line in lines), lines


def test_the_run_deadline_counts_from_the_first_jobset_and_ends_the_run_with_64(jobset_kube):
    """Killed and restarted, a launcher reads the run's start from the JobSet; the
    deadline passes, the JobSet is deleted, exit 64."""
    cp, ns, name = jobset_kube, "tl-deadline", "st-deadline"
    namespace(cp, ns)
    lines: list[str] = []
    first = in_thread(cp, worker_set(ns, name), lines, settings=d.Settings(deadline=3600))
    (job,) = wait_for("the child Job", lambda: child_jobs(cp, ns, name), timeout=60)
    running_pods(cp, ns, job.metadata.uid, 2)
    started = first.launcher.run_started
    first.launcher.own_pod_disrupted = lambda: True  # its pod going: the JobSet runs on
    first.launcher.stop.set()
    assert first.result(timeout=60).code == 143
    time.sleep(2)
    again = in_thread(cp, worker_set(ns, name), lines, settings=d.Settings(deadline=2))
    out = again.result(timeout=60)
    assert again.launcher.run_started == pytest.approx(started, abs=0.01)
    assert out.code == 64 and "passed its deadline" in lines[-1], lines
    wait_in(cp, ns, "the JobSet deleted", lambda: gone(cp, ns, name), timeout=120)


def component_launch(cp, client, ns, bucket):
    """train_job.component.launch (the component body) as the given API client, in this
    (the main) thread, as in the component's pod; a helper thread ends the pods 0."""
    from spottrain.runtime.train_job import component
    from spottrain.runtime.train_job.inputs import RunInputs

    done = threading.Event()

    def finish():
        found = wait_for("the child Job", lambda: child_jobs(cp, ns, name) or done.is_set(), 90)
        if found is True:
            return  # the launcher ended first: its outcome says why
        for pod in running_pods(cp, ns, found[0].metadata.uid, 2):
            cp.kubelet.exit(pod, 0)

    name = component.worker_sets(
        run_id="run-rbac", task_name="train", namespace=ns, image="", args=(), workers=2,
        placement=Placement(**A100), on_demand=False,
    )[0].name  # fmt: skip
    helper = threading.Thread(target=finish, daemon=True)
    helper.start()
    run = RunInputs(
        data_dir=f"gs://{bucket.name}/data", checkpoint_dir=f"gs://{bucket.name}/ckpt",
        run_id="run-rbac",
        task_name="train", workers=2, pool="on-demand", gpu_type="nvidia-tesla-a100", gpus=1,
        memory_limit="48G", retries=1, unschedulable_timeout=300, on_demand=False,
        deadline="3600s", settings=TrainSettings(),
    )  # fmt: skip
    options = {"poll_seconds": 0.5, "chief_log": lambda line: None}
    try:
        return name, component.launch(kube.from_client(client, ns), run, launcher_options=options)
    finally:
        done.set()
        helper.join(120)


def test_the_component_body_runs_as_an_account_with_exactly_the_rbac_rules(
    jobset_kube, gcs_bucket, monkeypatch
):
    """Every rule is used: jobsets create/get (the run), pods get (its own pod gives the
    image and account), pods list, nodes get (the ledger's node kind); jobsets patch
    and delete and pods delete are used by a move, a SIGTERM and a forced deletion
    (the other tests, as admin)."""
    from spottrain.runtime.train_job import rbac

    cp, ns = jobset_kube, "tl-rbac"
    client = cp.namespace_with_launcher_account(
        ns, rules=rbac.RULES, cluster_rules=rbac.CLUSTER_RULES
    )
    launcher_pod = {
        "metadata": {"name": "run-rbac-launcher"},
        "spec": {
            "serviceAccountName": "pipeline-runner",
            "containers": [{"name": "main", "image": "trainer:v7"}],
        },
    }
    cp.core().create_namespaced_pod(ns, launcher_pod)
    monkeypatch.setenv("HOSTNAME", "run-rbac-launcher")
    name, out = component_launch(cp, client, ns, gcs_bucket)
    assert out.code == 0, out.message
    pods = [a.pod for a in out.attempts]
    assert len(pods) == 2 and {a.node_kind for a in out.attempts} == {"on-demand"}, out.attempts
    for pod in cp.core().list_namespaced_pod(ns, label_selector=f"{RESTART}=0").items:
        assert pod.spec.containers[0].image == "trainer:v7"
        assert pod.spec.service_account_name == "pipeline-runner"


def test_a_missing_rbac_verb_is_one_line_naming_it_and_exit_64(jobset_kube, gcs_bucket):
    from spottrain.runtime.train_job import rbac

    cp, ns = jobset_kube, "tl-norbac"
    rules = [dict(r) for r in rbac.RULES]
    rules[0] = {**rules[0], "verbs": ["get", "list", "patch", "delete"]}  # no create
    client = cp.namespace_with_launcher_account(ns, rules=rules, cluster_rules=[])
    with pytest.raises(KubeError) as err:
        component_launch(cp, client, ns, gcs_bucket)
    line = str(err.value)
    assert err.value.code == 64 and "\n" not in line, line
    assert "refused to create JobSet" in line and "403 Forbidden" in line, line
    assert not child_jobs(cp, ns, "") and not cp.batch().list_namespaced_job(ns).items


def test_a_deleted_node_is_a_free_restart_through_podgc(jobset_kube):
    """The VM gone with its Node object: the pod garbage collector marks its pod
    Failed with DisruptionTarget/DeletionByPodGC (after its 40 s quarantine), the
    disruption rule fails the child Job, the JobSet restarts without counting it."""
    from real_kube import ACCELERATOR_LABEL, NODEPOOL_LABEL

    cp, ns, name = jobset_kube, "tl-nodegone", "st-nodegone"
    namespace(cp, ns)
    lines: list[str] = []
    run = in_thread(cp, worker_set(ns, name, retries=1), lines)
    (job,) = wait_for("the child Job", lambda: child_jobs(cp, ns, name), timeout=60)
    pods = running_pods(cp, ns, job.metadata.uid, 2)
    node = pods[0].spec.node_name
    cp.kubelet.nodes.discard(node)
    cp.core().delete_node(node)
    deleted = time.monotonic()
    try:
        restarted = wait_in(
            cp, ns, "the free restart", lambda: any("0 of 1 counted" in s for s in lines), 180
        )
        assert restarted
        took = time.monotonic() - deleted

        new = generation(cp, ns, name, 1)
        for pod in running_pods(cp, ns, new.metadata.uid, 2):
            cp.kubelet.exit(pod, 0)
        out = run.result(timeout=120)
    finally:
        cp.add_node(node, {ACCELERATOR_LABEL: "nvidia-tesla-a100", NODEPOOL_LABEL: "a100"})
        cp.kubelet.nodes.add(node)
    assert (out.code, out.restarts, out.restarts_counted) == (0, 1, 0), lines
    assert "DeletionByPodGC" in {a.disruption for a in out.attempts}, out.attempts
    print(f"\nnode deleted -> free restart said after {took:.1f} s (PodGC's 40 s quarantine)")


def test_an_image_that_does_not_pull_is_said_then_ends_the_run_with_64(jobset_kube):
    from real_kube import UNPULLABLE

    cp, ns, name = jobset_kube, "tl-nopull", "st-nopull"
    namespace(cp, ns)
    lines: list[str] = []
    ws = worker_set(ns, name, image=UNPULLABLE + "trainer:v1")
    out = in_thread(cp, ws, lines, settings=d.Settings(start_deadline=10)).result(timeout=120)
    said = "\n".join(lines)
    assert out.code == 64, said
    assert "cannot start yet" in said and "ErrImagePull" in lines[-1], said
    assert f'failed to pull image "{UNPULLABLE}trainer:v1"' in lines[-1], said
    wait_in(cp, ns, "the JobSet deleted", lambda: gone(cp, ns, name), timeout=120)


def test_a_pod_on_a_node_that_stopped_answering_is_force_deleted_and_the_gang_restarts(
    jobset_kube,
):
    """A peer's 170 restarts the JobSet, which deletes the old pods and waits for them
    (kubernetes-sigs/jobset#576); one's kubelet does not answer, so it stays
    terminating. Past its grace, the launcher deletes it forcibly and the gang restarts."""
    cp, ns, name = jobset_kube, "tl-frozen", "st-frozen"
    namespace(cp, ns)
    lines: list[str] = []
    run = in_thread(
        cp, worker_set(ns, name, retries=2), lines, settings=d.Settings(unanswered_after=5)
    )
    (job,) = wait_for("the child Job", lambda: child_jobs(cp, ns, name), timeout=60)
    frozen, peer = running_pods(cp, ns, job.metadata.uid, 2)
    cp.kubelet.frozen.add(frozen.metadata.uid)
    try:
        cp.kubelet.exit(peer, 170)
        said = wait_in(
            cp, ns, "the forced deletion", lambda: any("forcibly" in s for s in lines), 150
        )
        assert said
        forced = time.monotonic()

        new = generation(cp, ns, name, 1)
        pods = running_pods(cp, ns, new.metadata.uid, 2)
        restarted = time.monotonic() - forced
    finally:
        cp.kubelet.frozen.discard(frozen.metadata.uid)
    for pod in pods:
        cp.kubelet.exit(pod, 0)
    out = run.result(timeout=120)
    assert (out.code, out.restarts, out.restarts_counted) == (0, 1, 1), lines
    line = next(s for s in lines if "forcibly" in s)
    assert f"{frozen.metadata.name} (node {frozen.spec.node_name})" in line, line
    print(f"\nforced deletion -> the new gang Running after {restarted:.1f} s")
