"""How many times Argo runs a preempted, a crashed and a fatally failed KFP task, per policy.

Argo v4.0.5's own workflow-controller code decides: ``tools/argo-retry`` is compiled
into its ``workflow/controller`` package (``make tools`` builds
``.tools/bin/argo-retry.test`` with ``go test -c -overlay``) and runs a workflow shaped
as KFP 2.17.0 compiles a one-task pipeline through that package's operate loop, with
the configmap's ``workflowDefaults`` as the controller's config (the real merge,
substitution, DAG engine, ``processNodeRetries`` and its expression). The test plays
only the kubelet: each pod's end, as the statuses below say the kubelet and KFP's
launcher leave them. ``make argo-retry-table`` prints the table.

The pod ends, cited:
- KFP's launcher turns any failure of the user's program into exit 1 (``glog.Exit``,
  kubeflow/pipelines 2.17.0 backend/src/v2/cmd/launcher-v2/main.go:56-60); Argo's
  emissary exits 128 + 15 when the pod is sent SIGTERM (tests/system/kfp/test_platform_kfp_argo.py).
- Graceful node shutdown (GKE's spot preemption): pod ``Failed``, reason
  ``Terminated``, message "Pod was terminated in response to imminent node shutdown."
  and a ``DisruptionTarget`` condition (k8s.io/kubernetes v1.34.3
  pkg/kubelet/nodeshutdown/nodeshutdown_manager.go:87-89); SIGKILL at the grace's end: 137.
- Eviction API (drain, taint eviction while the kubelet runs): ``DisruptionTarget``
  ``EvictionByEvictionAPI``, the containers sent SIGTERM.
- A node that vanished with its pod: the pod object is gone (Argo: "pod deleted").
- A Node object deleted (the VM gone): PodGC marks the pod ``Failed`` with a
  ``DisruptionTarget`` ``DeletionByPodGC`` and its containers never end
  (pkg/controller/podgc/gc_controller.go:248-255, 349-351), then deletes it.
- OOM: the kernel's kill, reason ``OOMKilled``, 137.
- Our fatal and retryable exits through the launcher: exit 1 with the termination
  message ``spottrain.runtime.termination`` writes (a save on GCE's metadata notice is
  a retryable 143 before any SIGTERM).
- A kill at the end of a disruption's grace with no message: 137, reason ``Error``;
  Argo reads no pod condition (no ``DisruptionTarget`` in workflow/controller).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from spottrain import exits
from spottrain.pipelines import argo_retry
from spottrain.runtime import termination

REPO = Path(__file__).resolve().parents[3]
BINARY = REPO / ".tools" / "bin" / "argo-retry.test"
pytestmark = [
    pytest.mark.skipif(
        not BINARY.exists(), reason="needs .tools/bin/argo-retry.test (`make tools`, Go toolchain)"
    ),
]

SHUTDOWN = "Pod was terminated in response to imminent node shutdown."
SCENARIOS = [
    {"name": "preempted: node shutdown, exit 143", "action": "fail", "exit_code": 143,
     "reason": "Error", "pod_message": SHUTDOWN, "pod_reason": "Terminated",
     "disruption": "TerminationByKubelet"},
    {"name": "preempted: killed at the grace's end, 137", "action": "fail", "exit_code": 137,
     "reason": "Error", "pod_message": SHUTDOWN, "pod_reason": "Terminated",
     "disruption": "TerminationByKubelet"},
    {"name": "node vanished (pod deleted)", "action": "vanish"},
    {"name": "evicted (Eviction API), 143", "action": "fail", "exit_code": 143,
     "reason": "Error", "disruption": "EvictionByEvictionAPI"},
    {"name": "node deleted, PodGC marked the pod Failed", "action": "fail",
     "still_running": True, "disruption": "DeletionByPodGC"},
    {"name": "OOMKilled 137", "action": "fail", "exit_code": 137, "reason": "OOMKilled"},
    {"name": "fatal 64 (bad input)", "action": "fail", "exit_code": 1, "reason": "Error",
     "message": f"{termination.FATAL_MARK} 64: --batch-size-per-replica 0: must be >= 1"},
    {"name": "fatal 65 (NaN)", "action": "fail", "exit_code": 1, "reason": "Error",
     "message": f"{termination.FATAL_MARK} 65: loss is NaN at step 812"},
    {"name": "crash, exit 1", "action": "fail", "exit_code": 1, "reason": "Error"},
    {"name": "the task's driver failed (a DAG's child)", "action": "fail", "fail_driver": True},
    {"name": "preempted twice, then done", "action": "fail", "exit_code": 143,
     "reason": "Error", "pod_message": SHUTDOWN, "pod_reason": "Terminated",
     "succeed_after": 2},
]  # fmt: skip
SET_RETRY = 5  # our train task's set_retry (Placement.retries)
TASKS = [{"name": "with-set-retry", "retries": SET_RETRY}, {"name": "no-set-retry", "retries": -1}]
POLICIES = {
    "kfp-shipped": argo_retry.KFP_WORKFLOW_DEFAULTS,
    "always": argo_retry.with_policy(argo_retry.KFP_WORKFLOW_DEFAULTS, "Always"),
    "preemption": argo_retry.with_policy(argo_retry.KFP_WORKFLOW_DEFAULTS, "preemption"),
}


def run_controller(tmp_path: Path, policies=POLICIES, tasks=TASKS, scenarios=SCENARIOS):
    """{(policy, task, scenario): result} from Argo's controller code.

    One process per policy, all at once: the cases are independent, and each process
    runs its own controller through its cases one after the other.
    """
    procs = []
    for i, (name, defaults) in enumerate(policies.items()):
        cases, out = tmp_path / f"cases-{i}.json", tmp_path / f"out-{i}.jsonl"
        mine = {"policies": {name: defaults}, "tasks": tasks, "scenarios": scenarios}
        cases.write_text(json.dumps(mine))
        env = dict(os.environ, SPOTTRAIN_RETRY_CASES=str(cases), SPOTTRAIN_RETRY_OUT=str(out))
        log = (tmp_path / f"log-{i}.txt").open("w+")
        proc = subprocess.Popen(
            [str(BINARY), "-test.run", "^TestSpottrainRetries$", "-test.count", "1"],
            env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        procs.append((proc, log, out))
    rows = []
    for proc, log, out in procs:
        code = proc.wait(timeout=1800)
        log.seek(0)
        assert code == 0, log.read()[-6000:]
        rows += [json.loads(line) for line in out.read_text().splitlines()]
    return {(r["policy"], r["task"], r["scenario"]): r for r in rows}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_controller(tmp_path_factory.mktemp("argo-retry"))


def executions(results, policy, task, scenario):
    row = results[(policy, task, scenario)]
    assert not row.get("error"), row
    return row["executions"]


PREEMPTIONS = [s["name"] for s in SCENARIOS[:5]]
FATAL = ["fatal 64 (bad input)", "fatal 65 (NaN)"]


@pytest.mark.parametrize("scenario", PREEMPTIONS)
def test_the_new_policy_retries_every_preemption_up_to_the_limit(results, scenario):
    # set_retry(5) is the task's limit (Argo checks it before the expression);
    # without set_retry the preemption budget is.
    assert executions(results, "preemption", "with-set-retry", scenario) == SET_RETRY + 1
    assert (
        executions(results, "preemption", "no-set-retry", scenario)
        == argo_retry.PREEMPTION_BUDGET + 1
    )


@pytest.mark.parametrize("scenario", FATAL)
@pytest.mark.parametrize("task", ["with-set-retry", "no-set-retry"])
def test_the_new_policy_never_retries_a_fatal_exit(results, scenario, task):
    assert executions(results, "preemption", task, scenario) == 1
    row = results[("preemption", task, scenario)]
    assert row["phase"] == "Failed" and sum(row["pods"].values()) == 3, row  # 2 drivers + 1


@pytest.mark.parametrize("scenario", ["OOMKilled 137", "crash, exit 1"])
def test_other_failures_are_retried_only_as_the_task_asked(results, scenario):
    assert executions(results, "preemption", "with-set-retry", scenario) == SET_RETRY + 1
    assert executions(results, "preemption", "no-set-retry", scenario) == 1


def test_no_dag_is_retried_under_the_new_policy(results):
    for (policy, _, _), row in results.items():
        if policy == "preemption":
            assert all(n == 1 for t, n in row["nodes"].items() if t in ("entrypoint", "root")), row


def test_a_preemption_then_success_completes_the_run(results):
    for task in ("with-set-retry", "no-set-retry"):
        row = results[("preemption", task, "preempted twice, then done")]
        assert row["phase"] == "Succeeded" and row["executions"] == 3, row


def test_kfps_shipped_default_retries_no_failed_pod_and_multiplies_errors(results):
    # OnError, limit 2 on every template: a pod that exited 143 is Failed, not retried.
    for task in ("with-set-retry", "no-set-retry"):
        assert executions(results, "kfp-shipped", task, PREEMPTIONS[0]) == 1
    # A vanished pod is an Error, retried at the pod (its limit) and at each of the
    # three DAG levels (2 each): 3**4, and (5 + 1) * 3**3 with set_retry(5).
    assert executions(results, "kfp-shipped", "no-set-retry", PREEMPTIONS[2]) == 3**4
    assert executions(results, "kfp-shipped", "with-set-retry", PREEMPTIONS[2]) == 6 * 3**3


def test_always_retries_fatal_exits_and_multiplies_them_through_the_dags(results):
    # Today's patch: the same multiplication for every failure, fatal ones included.
    assert executions(results, "always", "no-set-retry", FATAL[0]) == 3**4
    assert executions(results, "always", "with-set-retry", FATAL[0]) == 6 * 3**3
    driver = results[("always", "no-set-retry", "the task's driver failed (a DAG's child)")]
    assert driver["pods"]["system-container-driver"] == 3**3, driver


def cell(row) -> str:
    """The task's executor pods, or, where its driver failed, the driver's pods."""
    if row["scenario"].startswith("the task's driver"):
        return f"{row['pods'].get('system-container-driver', 0)} (driver)"
    return str(row["executions"])


def table(results) -> list[str]:
    heads = [f"{p}, {t}" for p in POLICIES for t in ("set_retry(5)", "no set_retry")]
    lines = ["| scenario | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
    for s in SCENARIOS:
        cells = [cell(results[(p, t["name"], s["name"])]) for p in POLICIES for t in TASKS]
        lines.append(f"| {s['name']} | " + " | ".join(cells) + " |")
    return lines


# Every failure kind of the exit-code contract and the platform, on the recommended
# policy: a preemption kind is retried on every task, set_retry or not; a marked fatal
# exit on none; anything else only as set_retry asks. Through KFP's launcher our own
# exits are exit 1 with the termination message spottrain.runtime.termination writes
# (the KFP-pod chain test in tests/system/kfp/test_platform_kfp_argo.py shows it written).
def _marked(code: int) -> str:
    return termination.mark_text(code, f"trainer exited {code}: {exits.describe(code)}")


KINDS = [
    ({"name": "SIGTERM, exit 143 (no condition, no message)", "action": "fail",
      "exit_code": 143, "reason": "Error"}, (6, 11)),
    ({"name": "metadata notice: saved, 143, the launcher's exit 1", "action": "fail",
      "exit_code": 1, "reason": "Error", "message": _marked(143)}, (6, 11)),
    ({"name": "SIGKILL 137 with only a DisruptionTarget", "action": "fail", "exit_code": 137,
      "reason": "Error", "disruption": "EvictionByEvictionAPI"}, (6, 11)),
    ({"name": "pod deleted (vanished with its node)", "action": "vanish"}, (6, 11)),
    ({"name": "PodGC failed it after its Node was deleted", "action": "fail",
      "still_running": True, "disruption": "DeletionByPodGC"}, (6, 11)),
    *[({"name": f"{what} {c}, the launcher's exit 1", "action": "fail", "exit_code": 1,
        "reason": "Error", "message": _marked(c)}, (6, 11))
      for what, c in (("peer lost", exits.PEER_LOST), ("hang", exits.HUNG),
                      ("unavailable", exits.UNAVAILABLE))],
    *[({"name": f"fatal {c}, the launcher's exit 1", "action": "fail", "exit_code": 1,
        "reason": "Error", "message": _marked(c)}, (1, 1))
      for c in (exits.FATAL_CONFIG, exits.FATAL_NAN)],
    ({"name": "crash, exit 1", "action": "fail", "exit_code": 1, "reason": "Error"}, (6, 1)),
    ({"name": "OOMKilled 137", "action": "fail", "exit_code": 137, "reason": "OOMKilled"},
     (6, 1)),
]  # fmt: skip


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    recommended = {"preemption": POLICIES["preemption"]}
    return run_controller(
        tmp_path_factory.mktemp("argo-kinds"), policies=recommended,
        scenarios=[k for k, _ in KINDS],
    )  # fmt: skip


@pytest.mark.parametrize("kind, expected", KINDS, ids=[k["name"] for k, _ in KINDS])
def test_each_failure_kind_runs_as_the_kinds_table_says(kinds, kind, expected):
    """(pod executions with set_retry(5), without set_retry): docs/gke.md's table."""
    got = tuple(executions(kinds, "preemption", t["name"], kind["name"]) for t in TASKS)
    assert got == expected, [kinds[("preemption", t["name"], kind["name"])] for t in TASKS]
    if expected == (1, 1):  # failed by the expression, not by a limit
        for t in TASKS:
            row = kinds[("preemption", t["name"], kind["name"])]
            assert row["message"] == "retryStrategy.expression evaluated to false", row


def test_table_of_failure_kinds(kinds, capsys):
    """The per-kind figures in docs/gke.md (`make argo-retry-table` prints them)."""
    lines = ["| failure kind | `preemption`, set_retry(5) | `preemption`, no set_retry |",
             "|---|---|---|"]  # fmt: skip
    for kind, _ in KINDS:
        cells = [str(executions(kinds, "preemption", t["name"], kind["name"])) for t in TASKS]
        lines.append(f"| {kind['name']} | " + " | ".join(cells) + " |")
    with capsys.disabled():
        print("\npod executions per failure kind (Argo v4.0.5's controller code):\n"
              + "\n".join(lines))  # fmt: skip
    assert len(lines) == len(KINDS) + 2


def test_table(results, capsys):
    """The figures in docs/gke.md (`make argo-retry-table` prints them)."""
    lines = table(results)
    with capsys.disabled():
        print("\npod executions per task (Argo v4.0.5's controller code):\n" + "\n".join(lines))
    assert len(lines) == len(SCENARIOS) + 2
