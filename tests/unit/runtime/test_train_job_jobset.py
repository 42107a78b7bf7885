"""The JobSet engine's manifest (spottrain/runtime/train_job/jobset.py), without a cluster.

tests/system/gke/test_train_job_jobset_real_kube.py sends the same manifest to the real JobSet
controller and webhooks; here: its shape, the pods' TF_CONFIG as the trainer derives
it, the rule order and which Job failure messages the JobSet rules match.
"""

from __future__ import annotations

import re

import pytest
from jobset_manifests import child, child_job, validate

from spottrain import exits
from spottrain.placement import Placement, PlacementError, pod_grace_seconds
from spottrain.runtime.train_job import component, names
from spottrain.runtime.train_job import jobset as js
from spottrain.trainer import distribution, gang_env


def worker_set(**changes) -> js.WorkerSet:
    base = {
        "name": "st-0123456789ab",
        "namespace": "training",
        "image": "trainer:1",
        "args": ("--checkpoint_dir=gs://b/ckpt", "--steps=10"),
        "workers": 3,
        "placement": Placement(pool="spot", gpu_type="nvidia-tesla-a100", retries=4),
        "run": "run-1",
        "attempt": 2,
    }
    return js.WorkerSet(**{**base, **changes})


def test_one_replicated_job_of_n_indexed_pods():
    m = js.jobset(worker_set())
    assert (m["apiVersion"], m["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    (rjob,) = m["spec"]["replicatedJobs"]
    assert (rjob["name"], rjob["replicas"]) == ("workers", 1)
    job = child(m)
    assert (job["completionMode"], job["completions"], job["parallelism"]) == ("Indexed", 3, 3)
    assert job["backoffLimit"] == 0
    assert m["spec"]["network"]["enableDNSHostnames"] is True
    assert m["spec"]["network"]["subdomain"] == "st-0123456789ab"
    assert m["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["workers"]}
    assert m["spec"]["failurePolicy"]["maxRestarts"] == 4  # Placement.retries


def test_the_child_job_is_a_valid_batch_v1_job():
    """The JobSet CRD keeps the Job template schemaless-ish; the real Job schema, strictly."""
    validate(child_job(js.jobset(worker_set())))


@pytest.mark.parametrize("workers", [1, 3])
def test_each_pod_derives_tf_config_from_jobset_host_names(workers):
    """The trainer's own derivation (distribution.job_tf_config) on each pod's env plus the
    index the Job controller adds gives JobSet's host names, worker 0 first."""
    ws = worker_set(workers=workers)
    (ctr,) = child(js.jobset(ws))["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in ctr["env"]}
    hosts = [f"st-0123456789ab-workers-0-{i}.st-0123456789ab:2222" for i in range(workers)]
    for index in range(workers):
        tf = distribution.job_tf_config({**env, gang_env.JOB_COMPLETION_INDEX: str(index)})
        assert tf == {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}


def test_the_trainer_is_the_main_process_under_tini_with_the_placement():
    ws = worker_set()
    spec = child(js.jobset(ws))["template"]["spec"]
    (ctr,) = spec["containers"]
    assert ctr["command"][:2] == ["tini", "--"]
    assert ctr["command"][2:] == ["python", "-m", "spottrain.trainer.task"]
    assert ctr["args"] == list(ws.args)
    assert ctr["name"] == names.CONTAINER
    assert ctr["resources"] == ws.placement.resources()
    assert spec["nodeSelector"] == ws.placement.node_selector
    assert spec["tolerations"] == ws.placement.tolerations()
    assert spec["restartPolicy"] == "Never"
    assert spec["terminationGracePeriodSeconds"] == 30


def test_grace_and_compute_class_come_from_the_placement():
    placement = Placement(
        pool="spot", compute_class="spottrain-a100", grace_seconds=pod_grace_seconds(120)
    )
    spec = child(js.jobset(worker_set(placement=placement)))["template"]["spec"]
    assert spec["terminationGracePeriodSeconds"] == 105  # 120 s notice less 15 s critical pods
    assert spec["nodeSelector"] == {"cloud.google.com/compute-class": "spottrain-a100"}
    assert spec["tolerations"][0]["value"] == "spottrain-a100"


def test_a_queued_gang_is_submitted_to_kueue_suspended_and_selects_only_its_gpu():
    placement = Placement(pool="spot", gpu_type="nvidia-tesla-a100", queue="team-a",
                          priority_class="low")  # fmt: skip
    m = js.jobset(worker_set(placement=placement))
    assert m["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert m["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "low"
    assert m["spec"]["suspend"] is True
    pod = child(m)["template"]
    # Kueue's labels on the JobSet only; the flavor adds capacity labels and tolerations.
    assert not any(k.startswith("kueue.x-k8s.io/") for k in pod["metadata"]["labels"])
    assert pod["spec"]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}
    assert "tolerations" not in pod["spec"]
    plain = js.jobset(worker_set())
    assert "suspend" not in plain["spec"]
    assert not any(k.startswith("kueue.x-k8s.io/") for k in plain["metadata"]["labels"])


@pytest.mark.parametrize(
    "fields, word",
    [
        ({"queue": "Team_A"}, "queue 'Team_A'"),
        ({"queue": "q", "pool": "on-demand"}, "ResourceFlavors choose the nodes"),
        ({"queue": "q", "compute_class": "spottrain-a100"}, "no compute_class"),
        ({"priority_class": "high"}, "without a queue"),
    ],
)
def test_a_queue_placement_that_cannot_work_is_one_line(fields, word):
    with pytest.raises(PlacementError, match=re.escape(word)):
        Placement(**{"pool": "spot", **fields})


def test_labels_name_the_run_and_attempt():
    m = js.jobset(worker_set())
    for labels in (m["metadata"]["labels"], child(m)["template"]["metadata"]["labels"]):
        assert labels[names.RUN_LABEL] == "run-1"
        assert labels[js.ATTEMPT_LABEL] == "2"
    bare = js.jobset(worker_set(run="", attempt=None))["metadata"]["labels"]
    assert names.RUN_LABEL not in bare and js.ATTEMPT_LABEL not in bare
    # The keys the billing export's k8s-label/<key> joins (docs/cost.md).
    assert (names.RUN_LABEL, js.ATTEMPT_LABEL) == ("spottrain.dev/run", "spottrain.dev/attempt")


def test_a_long_or_odd_run_id_is_a_valid_label_and_the_gangs_are_numbered():
    run = "Run/" + "7" * 90 + "/"
    sets = component.worker_sets(
        run_id=run, task_name="train", namespace="ns", image="img", args=(), workers=1,
        placement=Placement(pool="spot"), on_demand=True,
    )  # fmt: skip
    for number, ws in enumerate(sets, 1):
        m = js.jobset(ws)
        # kubernetes-validate has no JobSet schema: its labels on an object it has.
        meta = {"name": "x", "labels": m["metadata"]["labels"]}
        validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})
        validate(child_job(m))  # and the pod template's, in the real Job schema
        labels = m["metadata"]["labels"]
        assert labels[js.ATTEMPT_LABEL] == str(number) and len(labels[names.RUN_LABEL]) == 63
        # The schema does not check values: apimachinery's IsValidLabelValue does.
        value = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
        assert all(value.fullmatch(v) and len(v) <= 63 for v in labels.values())


def test_pod_failure_policy_disruption_first_then_fatal_then_notice():
    rules = js.pod_failure_policy()["rules"]
    assert [r["action"] for r in rules] == ["FailJob"] * 3
    assert rules[js.DISRUPTION_RULE]["onPodConditions"] == [
        {"type": "DisruptionTarget", "status": "True"}
    ]
    assert js.DISRUPTION_RULE < min(js.FATAL_RULE, js.NOTICE_RULE)
    assert rules[js.FATAL_RULE]["onExitCodes"]["values"] == sorted(exits.FATAL) == [64, 65]
    assert rules[js.NOTICE_RULE]["onExitCodes"]["values"] == [exits.PREEMPTED]
    # A retryable code other than the notice is no rule's: it counts (backoffLimit 0).
    listed = {v for r in rules for v in r.get("onExitCodes", {}).get("values", [])}
    assert exits.PEER_LOST not in listed and exits.HUNG not in listed


# The Job controller's FailJob messages, k8s.io/kubernetes v1.34.3
# pkg/controller/job/pod_failure_policy.go:56-57 and :73-74 (the real-kube test reads
# the real ones off a failed child Job).
def exit_message(code, index):
    return (
        f"Container trainer for pod ns/w-0 failed with exit code {code} "
        f"matching FailJob rule at index {index}"
    )


CONDITION_MESSAGE = (
    f"Pod ns/w-0 has condition DisruptionTarget matching FailJob rule at index {js.DISRUPTION_RULE}"
)


def first_rule(reason: str, message: str) -> str:
    """The first JobSet rule matching, as failure_policy.go:87-119/:142-183 choose it
    (Go's regexp.MatchString is a search, as re.search)."""
    for rule in js.failure_policy(3)["rules"]:
        if rule.get("onJobFailureReasons") and reason not in rule["onJobFailureReasons"]:
            continue
        patterns = rule.get("onJobFailureMessagePatterns")
        if patterns and not any(re.search(p, message) for p in patterns):
            continue
        return rule["action"]
    return "RestartJobSet"  # failure_policy.go:45


@pytest.mark.parametrize(
    ("reason", "message", "action"),
    [
        ("PodFailurePolicy", exit_message(64, js.FATAL_RULE), "FailJobSet"),
        ("PodFailurePolicy", exit_message(65, js.FATAL_RULE), "FailJobSet"),
        (
            "PodFailurePolicy",
            exit_message(143, js.NOTICE_RULE),
            "RestartJobSetAndIgnoreMaxRestarts",
        ),
        ("PodFailurePolicy", CONDITION_MESSAGE, "RestartJobSetAndIgnoreMaxRestarts"),
        ("BackoffLimitExceeded", "Job has reached the specified backoff limit", "RestartJobSet"),
    ],
)
def test_jobset_rules_tell_fatal_from_free_from_counted(reason, message, action):
    assert first_rule(reason, message) == action


def test_rule_names_are_what_the_crd_accepts():
    for rule in js.failure_policy(0)["rules"]:
        assert re.fullmatch(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?", rule["name"])


def test_a_name_too_long_for_its_pod_names_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^JobSet name 'st-x{45}'.* 63$"):
        worker_set(name="st-" + "x" * 45, workers=10)
    with pytest.raises(ValueError, match="workers=0"):
        worker_set(workers=0)


def test_make_gke_jobset_installs_the_release_the_suite_builds_and_tests(capsys):
    """One version: `make gke-jobset` prints upstream's install of the JobSet release
    that tools/jobset pins (its manager is what the real-JobSet tests run)."""
    import re
    from pathlib import Path

    from spottrain.pipelines import __main__ as cli

    gomod = (Path(__file__).resolve().parents[3] / "tools" / "jobset" / "go.mod").read_text()
    (pinned,) = re.findall(r"sigs\.k8s\.io/jobset (v[0-9.]+)", gomod)
    assert cli.main(["jobset"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "kubectl apply --server-side -f https://github.com/kubernetes-sigs/jobset/releases/"
        f"download/{pinned}/manifests.yaml",
        "kubectl -n jobset-system rollout status deployment/jobset-controller-manager "
        "--timeout=180s",
    ]


def test_the_gangs_a_move_back_to_spot_makes_have_names_and_numbers_of_their_own():
    """Issue 56: gang 0 spot, 1 on-demand, then 2 spot, 3 on-demand, ...: each its own
    JobSet name (found again from it) and gang number label, of its kind's template."""
    from spottrain.runtime.train_job.launcher import JobSetLauncher

    first = names.jobset_name("run-1", "train")
    assert [names.gang_name(first, k) for k in range(4)] == [
        first, first + "-od", first + "-2", first + "-3-od"]  # fmt: skip
    assert [names.gang_number(first, names.gang_name(first, k)) for k in range(12)] == list(
        range(12)
    )
    for other in (first + "-1", first + "-2-od", first + "-02", first + "x", "st-" + "0" * 12):
        assert names.gang_number(first, other) is None, other
    sets = component.worker_sets(
        run_id="run-1", task_name="train", namespace="ns", image="img", args=(), workers=1,
        placement=Placement(pool="spot", gpu_type="nvidia-tesla-a100", gpu_count=1),
        on_demand=True,
    )  # fmt: skip
    run = JobSetLauncher(None, sets)
    assert [run.gang_set(k) for k in range(2)] == sets
    for k in (2, 3, 98, 99):
        ws = run.gang_set(k)
        assert (ws.name, ws.attempt, ws.placement) == (
            names.gang_name(first, k), k + 1, sets[k % 2].placement)  # fmt: skip
        m = js.jobset(ws)
        assert m["metadata"]["labels"][js.ATTEMPT_LABEL] == str(k + 1)
        validate(child_job(m))
    # The longest pod name of gang 99 with the most workers is still a DNS-1035 label.
    js.WorkerSet(**{**run.gang_set(99).__dict__, "workers": 100_000})
