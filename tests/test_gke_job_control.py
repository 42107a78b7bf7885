"""The Job-engine launcher's control loop against the in-process API stand-in.

Verified here: against ``tests/standins/kube_api.py`` (the client's method names and
exceptions, objects shaped as the Kubernetes docs show them), not a live cluster.
Only what the real control plane of tests/test_gke_job_*real_kube.py cannot show stays
here: pod logs (no kubelet there), frozen pods and unreachable nodes, waits of
production length on a fake clock (unschedulable 300 s, start failures 180 s, a run
deadline), API errors injected at will (500s, 409 races, foreign objects), and the
exact calls made (how often a node is read). Create, re-attach, disruptions, exit 64,
retries used up, unschedulable, cancel and 403 run against the real one.
"""

from __future__ import annotations

import pytest
from standins.kube_api import FakeCluster, on_demand_node, spot_node

from spottrain.pipelines.placement import Placement
from spottrain.runtime.gke_job import control, kube, manifests, names, status
from spottrain.trainer import preemption

SPOT = Placement(pool="spot", retries=5)


def gangs(workers=2, spot=SPOT, on_demand=True):
    common = dict(
        namespace="kubeflow",
        image="trainer:test",
        args=("--train-steps", "10"),
        workers=workers,
        deadline_seconds=3600,
    )
    out = [manifests.Gang(name=names.job_name("run-1", "train"), placement=spot, **common)]
    if on_demand:
        out.append(
            manifests.Gang(
                name=names.job_name("run-1", "train", on_demand=True),
                placement=spot.with_(pool="on-demand"),
                **common,
            )
        )
    return out


def launcher(cluster, gs, lines=None, **kwargs):
    kwargs.setdefault("unschedulable_seconds", 300)
    return control.Launcher(
        kube.Kube(cluster, cluster, "kubeflow"),
        gs,
        poll_seconds=0,
        now=cluster.now,
        sink=(lines.append if lines is not None else lambda line: None),
        **kwargs,
    )


def test_success_streams_the_chief_log_and_keeps_the_job_until_its_ttl():
    gs = gangs()
    job = gs[0].name

    def script(cluster, poll):
        if poll == 3:
            cluster.succeed_all(job)

    cluster = FakeCluster([spot_node()], script=script)
    lines = []
    out = launcher(cluster, gs, lines).run()
    assert out.code == 0 and not out.failed_over and out.job == job
    assert cluster.created("Job") == [job] and cluster.created("Service") == [job]
    assert job in cluster.jobs and job not in cluster.services  # Job until TTL; Service gone
    assert [a.exit_code for a in out.attempts] == [0, 0]
    assert {a.node_kind for a in out.attempts} == {"spot"}
    chief = cluster.current_pod(job, 0)["metadata"]["name"]
    assert f"[{chief}] step 1" in lines
    assert not any(chief not in line for line in lines)  # only the chief's log


def test_reattach_to_the_on_demand_job_after_a_fail_over():
    gs = gangs()
    od = gs[1].name

    def script(cluster, poll):
        if poll == 2:
            cluster.succeed_all(od)

    cluster = FakeCluster([on_demand_node()], script=script)
    k = kube.Kube(cluster, cluster, "kubeflow")
    k.create_service(manifests.service(gs[1]))
    k.create_job(manifests.job(gs[1]))  # what the previous launcher attempt had created
    cluster.calls.clear()
    out = launcher(cluster, gs).run()
    assert out.code == 0 and out.job == od
    assert cluster.created("Job") == [] and gs[0].name not in cluster.jobs


def test_unschedulable_for_the_limit_moves_to_on_demand_and_succeeds():
    gs = gangs()
    spot, od = gs[0].name, gs[1].name

    def script(cluster, poll):
        if od in cluster.jobs and poll > 40:
            cluster.succeed_all(od)

    cluster = FakeCluster([on_demand_node()], script=script)  # no spot capacity at all
    out = launcher(cluster, gs, unschedulable_seconds=300).run()
    assert out.code == 0 and out.failed_over and out.job == od
    assert cluster.created("Job") == [spot, od]
    assert spot not in cluster.jobs and spot not in cluster.services
    waited = [c for c in cluster.calls if c[0] == "read_namespaced_job" and c[1] == spot]
    assert 30 <= len(waited) <= 33  # 300 s at 10 s a poll, not before
    template = cluster.jobs[od]["spec"]["template"]["spec"]
    assert "tolerations" not in template
    assert "cloud.google.com/gke-spot" not in template["nodeSelector"]
    assert {a.node_kind for a in out.attempts} == {"on-demand"}
    deletes = [c for c in cluster.calls if c[0] == "delete_namespaced_job"]
    assert deletes == [("delete_namespaced_job", spot, "Foreground")]


def test_the_move_to_on_demand_is_marked_before_the_spot_job_goes():
    """The on-demand Service exists before the spot Job is deleted: the mark a retry reads."""
    gs = gangs()
    spot, od = gs[0].name, gs[1].name

    def script(cluster, poll):
        if od in cluster.jobs:
            cluster.succeed_all(od)

    cluster = FakeCluster([on_demand_node()], script=script)
    launcher(cluster, gs, unschedulable_seconds=300).run()
    order = [
        (c[0], c[1]) for c in cluster.calls
        if c[0] in ("create_namespaced_service", "delete_namespaced_job")
    ]  # fmt: skip
    assert order.index(("create_namespaced_service", od)) < order.index(
        ("delete_namespaced_job", spot)
    ), order


@pytest.mark.parametrize("spot_job_left", [False, True], ids=["spot-gone", "spot-still-there"])
def test_a_fall_back_cut_off_before_its_job_goes_on_on_demand(spot_job_left):
    """The launcher died after marking the move (the on-demand Service) but before the
    on-demand Job: its retry goes on on-demand, removing a spot Job still there first."""
    gs = gangs()
    spot, od = gs[0].name, gs[1].name

    def script(cluster, poll):
        if od in cluster.jobs:
            cluster.succeed_all(od)

    cluster = FakeCluster([on_demand_node()], script=script)
    k = kube.Kube(cluster, cluster, "kubeflow")
    if spot_job_left:
        k.create_service(manifests.service(gs[0]))
        k.create_job(manifests.job(gs[0]))
    k.create_service(manifests.service(gs[1]))  # the mark, then the launcher died
    cluster.calls.clear()
    out = launcher(cluster, gs).run()
    assert out.code == 0 and out.job == od
    assert cluster.created("Job") == [od]  # never the spot Job again
    assert spot not in cluster.jobs
    if spot_job_left:
        deletes = [c for c in cluster.calls if c[0] == "delete_namespaced_job"]
        assert deletes[0] == ("delete_namespaced_job", spot, "Foreground")


def test_without_on_demand_an_unschedulable_job_waits_and_used_up_budget_fails():
    gs = gangs(workers=1, spot=SPOT.with_(retries=0), on_demand=False)
    job = gs[0].name

    def script(cluster, poll):
        if poll == 60:
            cluster.add_node(spot_node())  # capacity arrives late: no limit applies
        if poll == 62:
            cluster.terminate(job, 0, preemption.PEER_LOST)

    cluster = FakeCluster([], script=script)
    out = launcher(cluster, gs, unschedulable_seconds=60).run()
    assert out.code == preemption.PEER_LOST and "used up its retries" in out.message
    assert job not in cluster.jobs and job not in cluster.services  # gave up: cleaned up


@pytest.mark.parametrize("kind", ["Service", "Job"])
def test_a_foreign_object_of_the_same_name_is_a_conflict_and_left_untouched(kind):
    """A foreign Job found after our Service was created: that Service goes too."""
    gs = gangs()
    name = gs[0].name
    cluster = FakeCluster([spot_node()])
    make = {"Service": manifests.service, "Job": manifests.job}[kind]
    create = {"Service": cluster.create_namespaced_service, "Job": cluster.create_namespaced_job}
    foreign = make(gs[0])
    foreign["metadata"]["labels"] = {"app": "someone-else"}
    create[kind]("kubeflow", foreign)
    with pytest.raises(kube.KubeError) as err:
        launcher(cluster, gs).run()
    assert err.value.code == preemption.FATAL_CONFIG
    assert "not created for this task" in str(err.value) and "\n" not in str(err.value)
    assert f"{kind} {name}" in str(err.value)
    kept = cluster.services if kind == "Service" else cluster.jobs
    assert kept[name]["metadata"]["labels"] == {"app": "someone-else"}
    assert cluster.created("Job") == ([name] if kind == "Job" else [])  # the foreign one
    if kind == "Job":
        assert cluster.created("Service") == [name] and name not in cluster.services


def test_a_409_race_with_our_own_earlier_attempt_attaches():
    gs = gangs()
    job = gs[0].name
    cluster = FakeCluster([spot_node()], script=lambda c, p: p == 3 and c.succeed_all(job))
    real_create = cluster.create_namespaced_job

    def racing_create(namespace, body, **kwargs):
        real_create(namespace, body)  # an earlier attempt created it just now ...
        raise kube.ApiException(status=409, reason="Conflict")  # ... so ours conflicts

    cluster.create_namespaced_job = racing_create
    out = launcher(cluster, gs).run()
    assert out.code == 0 and len(cluster.jobs) == 1


def test_a_flaky_api_is_tolerated_and_a_lost_one_ends_retryable():
    gs = gangs(workers=1)
    job = gs[0].name
    cluster = FakeCluster([spot_node()], script=lambda c, p: p == 4 and c.succeed_all(job))
    cluster.fail_next("list_namespaced_pod", 503, "Service Unavailable", times=3)
    assert launcher(cluster, gs).run().code == 0

    cluster = FakeCluster([spot_node()])
    cluster.fail_next("list_namespaced_pod", 503, "Service Unavailable", times=1000)
    with pytest.raises(kube.KubeError) as err:
        launcher(cluster, gs).run()
    assert err.value.code == preemption.UNAVAILABLE
    assert preemption.is_retryable(err.value.code)
    assert "503" in str(err.value) and "\n" not in str(err.value)


def test_node_kinds_unknown_without_the_cluster_role():
    gs = gangs(workers=1)
    job = gs[0].name
    cluster = FakeCluster([spot_node()], script=lambda c, p: p == 2 and c.succeed_all(job))
    cluster.forbidden.add("read_node")
    out = launcher(cluster, gs).run()
    assert out.code == 0 and [a.node_kind for a in out.attempts] == ["unknown"]
    assert sum(c[0] == "read_node" for c in cluster.calls) == 1  # asked once, not per pod


def test_a_passed_run_deadline_is_final_and_cleaned_up():
    gs = gangs(workers=1)
    job = gs[0].name

    def script(cluster, poll):
        if poll == 3:  # the Job controller's terminal condition for activeDeadlineSeconds
            cluster.terminate(job, 0, preemption.PREEMPTED)  # it stops the pods first
            cluster.jobs[job]["status"]["conditions"] = [
                {"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}
            ]

    cluster = FakeCluster([spot_node()], script=script)
    out = launcher(cluster, gs).run()
    assert out.code == preemption.FATAL_CONFIG and "run deadline" in out.message
    assert cluster.created("Job") == [job]  # no on-demand: the deadline is the run's
    assert job not in cluster.jobs and job not in cluster.services


def test_sigterm_during_a_fall_back_creates_nothing_more():
    gs = gangs(workers=1, spot=SPOT.with_(retries=0))
    spot = gs[0].name

    def script(cluster, poll):
        if poll == 2:
            cluster.terminate(spot, 0, preemption.PEER_LOST)  # budget used up: fall back
            run["launcher"].stop.set()  # ... and the run is terminated meanwhile

    run = {}
    cluster = FakeCluster([spot_node(), on_demand_node()], script=script)
    run["launcher"] = launcher(cluster, gs)
    out = run["launcher"].run()
    assert out.code == preemption.PREEMPTED
    assert cluster.created("Job") == [spot] and not cluster.jobs and not cluster.services


@pytest.mark.parametrize("reason", ["ErrImagePull", "CreateContainerConfigError"])
def test_a_pod_that_cannot_start_stops_the_run_in_minutes(reason):
    """A mistyped image or a missing Secret is not Unschedulable: without a bound the
    launcher would wait for the run deadline (days) holding the GPU node."""
    gs = gangs()
    job = gs[0].name
    message = "pull access denied for traner, repository does not exist"
    stuck = []

    def script(cluster, poll):
        if poll == 1:
            stuck.append(cluster.cannot_start(job, 1, reason, message)["metadata"]["name"])
        if poll == 3 and reason == "ErrImagePull":
            cluster.cannot_start(job, 1, "ImagePullBackOff", 'Back-off pulling image "traner"')

    cluster = FakeCluster([spot_node()], script=script)
    out = launcher(cluster, gs, start_failure_seconds=180).run()
    assert out.code == preemption.FATAL_CONFIG, out.message
    assert f"pod {stuck[0]} cannot start:" in out.message and "for 180 s" in out.message
    if reason == "ErrImagePull":
        assert "ImagePullBackOff (Back-off pulling image" in out.message
    else:
        assert "CreateContainerConfigError (pull access denied" in out.message
    assert "\n" not in out.message
    polls = [c for c in cluster.calls if c[0] == "read_namespaced_job" and c[1] == job]
    # 180 s at 10 s a poll, after three reads at the start (the re-attach point, a
    # recreation's mark, the create)
    assert 18 <= len(polls) - 3 <= 19
    assert cluster.created("Job") == [job]  # fatal: not moved to on-demand
    assert job not in cluster.jobs and job not in cluster.services


def test_a_slow_image_pull_that_succeeds_is_not_a_failure():
    gs = gangs()
    job = gs[0].name

    def script(cluster, poll):
        if poll == 1:
            cluster.cannot_start(job, 0, "ErrImagePull", "i/o timeout")
        if poll == 10:  # 90 s later, under the bound
            cluster.starts(job, 0)
        if poll == 30:
            cluster.succeed_all(job)

    cluster = FakeCluster([spot_node()], script=script)
    out = launcher(cluster, gs, start_failure_seconds=180).run()
    assert out.code == 0, out.message


def test_a_command_that_cannot_run_is_fatal_at_once():
    gs = gangs(workers=1)
    job = gs[0].name

    def script(cluster, poll):
        if poll == 2:
            pod = cluster.current_pod(job, 0)
            cluster._end(pod, 128, "")
            pod["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] = "StartError"
            pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = (
                'exec: "python": executable file not found in $PATH'
            )

    cluster = FakeCluster([spot_node()], script=script)
    out = launcher(cluster, gs).run()
    assert out.code == preemption.FATAL_CONFIG, out.message
    assert 'cannot start: StartError (exec: "python": executable file not found' in out.message
    polls = [c for c in cluster.calls if c[0] == "read_namespaced_job" and c[1] == job]
    assert len(polls) <= 5  # three reads before the Job is created, then at most two polls
    assert job not in cluster.jobs


def test_a_job_whose_pods_are_refused_stops_the_run():
    """A missing service account: the API refuses every pod, the Job has none."""
    gs = gangs()
    job = gs[0].name
    cluster = FakeCluster([spot_node()])
    cluster.refuse_pods = True
    out = launcher(cluster, gs, start_failure_seconds=180).run()
    assert out.code == preemption.FATAL_CONFIG, out.message
    assert f"Job {job} created no pod in 180 s" in out.message
    assert f"kubectl describe job {job}" in out.message
    assert cluster.created("Job") == [job] and job not in cluster.jobs


def test_a_frozen_pod_of_a_broken_gang_is_deleted_and_the_gang_re_forms():
    """Index 2 freezes; its peers exit 170 and are replaced, but under
    ``podReplacementPolicy: Failed`` index 2 keeps its old, frozen pod, so the
    replacements could never form a gang. The launcher deletes it once it has run
    on 120 s past its peers' failure; the kubelet SIGKILLs it after its grace
    period, its replacement starts, and the run completes. Live pods are never
    deleted, replacements included."""
    gs = gangs(workers=3)
    job = gs[0].name
    frozen = []

    def script(cluster, poll):
        if poll == 2:
            frozen.append(cluster.freeze(job, 2)["metadata"]["name"])
        if poll == 3:
            cluster.terminate(job, 0, preemption.PEER_LOST)
            cluster.terminate(job, 1, preemption.PEER_LOST)
        if poll > 3 and cluster.current_pod(job, 2)["metadata"]["name"] != frozen[0]:
            cluster.succeed_all(job)

    cluster = FakeCluster([spot_node()], script=script)
    out = launcher(cluster, gs).run()
    assert out.code == 0, out.message
    deletes = [c for c in cluster.calls if c[0] == "delete_namespaced_pod"]
    assert deletes == [("delete_namespaced_pod", frozen[0])]  # once
    ends = {(a.index, a.exit_code) for a in out.attempts if a.exit_code != 0}
    assert ends == {(0, 170), (1, 170)}  # the deleted pod's object went with its end
    assert frozen[0] not in cluster.pods
    peers_end = max(a.finished for a in out.attempts if a.exit_code == preemption.PEER_LOST)
    replaced = cluster.current_pod(job, 2)["metadata"]["creationTimestamp"]
    replaced_after = status.epoch(replaced) - peers_end
    # 120 s past the peers' failure (polls are 10 s apart), then the 30 s grace.
    assert 150 <= replaced_after <= 170, replaced_after
    assert cluster.jobs[job]["status"]["failed"] == 3  # one gang restart: 170, 170, 137


def test_a_gang_whose_pods_all_run_is_never_touched():
    """A long, healthy run: no pod failed, so no pod is stuck."""
    gs = gangs(workers=3)
    job = gs[0].name

    def script(cluster, poll):
        if poll == 60:  # 10 minutes
            cluster.succeed_all(job)

    cluster = FakeCluster([spot_node()], script=script)
    out = launcher(cluster, gs).run()
    assert out.code == 0
    assert not [c for c in cluster.calls if c[0] == "delete_namespaced_pod"]


def test_a_stuck_pod_on_a_node_that_stopped_answering_is_named_once(caplog):
    """A frozen VM: the delete leaves the pod Terminating (no kubelet to end it, and
    the Job controller replaces only Failed pods), so the launcher names the node and
    the fix once, and the Job's retries run out as they would without it."""
    gs = gangs(workers=2, on_demand=False)
    job = gs[0].name
    frozen = []

    def script(cluster, poll):
        if poll == 2:
            pod = cluster.freeze(job, 1)
            frozen.append(pod["metadata"]["name"])
            cluster.node_unreachable(pod["spec"]["nodeName"])
        if poll == 3:
            cluster.terminate(job, 0, preemption.PEER_LOST)
        if poll == 60:
            cluster._fail_job(cluster.jobs[job], "BackoffLimitExceeded")

    cluster = FakeCluster([spot_node()], script=script)
    with caplog.at_level("WARNING", logger="spottrain.runtime.gke_job.stuck"):
        out = launcher(cluster, gs).run()
    assert "used up its retries" in out.message and preemption.is_retryable(out.code)
    deletes = [c for c in cluster.calls if c[0] == "delete_namespaced_pod"]
    assert deletes == [("delete_namespaced_pod", frozen[0])]
    named = [r.getMessage() for r in caplog.records if "still Terminating" in r.getMessage()]
    assert len(named) == 1 and "its node gke-spot-1 is not Ready" in named[0], named
    assert "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute" in named[0]
