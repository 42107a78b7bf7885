"""A small in-process stand-in for the Kubernetes API calls the Job-engine launcher makes.

The launcher's control loop (``spottrain.runtime.gke_job``) is tested against this,
fast and with a clock of its own; ``tests/test_gke_job_*real_kube.py`` run it against a
real control plane too (``make kube-cp``), where the real Job controller differs from
this one: replacements wait 10 s x 2^(n-1) after the n-th pod failure (ignored ones
included), a failing Job has ``FailureTarget`` until its other pods have stopped, a
complete one ``SuccessCriteriaMet`` before ``Complete``, and pods are deleted after
their Job, not with it; failed pods stay listed there, here they go once counted, so
the launcher's recreation of a Job to skip that back-off (``gke_job.recreate``) runs
only against the real one. Here: the methods of
``kubernetes.client.BatchV1Api`` and ``CoreV1Api`` it calls, with the same names and
arguments, raising the client's own ``ApiException``, and returning objects in the
API's JSON shape (camelCase dicts, as ``kubectl get -o json`` shows them). A tiny Job
controller plays what the documentation says the real one does for the fields our
manifests use; nothing else of Kubernetes is modelled.

Where each shape and behaviour comes from:

* Indexed Job pods: one per index, hostname ``<job>-<index>``, annotation
  ``batch.kubernetes.io/job-completion-index``
  (https://kubernetes.io/docs/concepts/workloads/controllers/job/#completion-mode).
* ``podFailurePolicy``: rules in order, first match wins; ``Ignore`` does not count
  the failure and replaces the pod, ``FailJob`` fails the Job with reason
  ``PodFailurePolicy``, ``Count`` (and no match) counts it; more counted failures
  than ``backoffLimit`` fail the Job with reason ``BackoffLimitExceeded``
  (https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-failure-policy,
  https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-backoff-failure-policy,
  https://kubernetes.io/docs/concepts/workloads/controllers/job/#terminal-job-conditions:
  a ``FailureTarget`` condition first, then ``Failed``; success ``Complete``).
* ``podReplacementPolicy: Failed``: a replacement only after the old pod is Failed.
* Disrupted pods: condition ``DisruptionTarget`` with reason ``PreemptionByScheduler``,
  ``DeletionByTaintManager``, ``TerminationByKubelet``, …
  (https://kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions).
* Container end: ``status.containerStatuses[].state.terminated.{exitCode, startedAt,
  finishedAt}`` (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#container-state-terminated).
* Unplaceable pod: phase ``Pending``, condition ``PodScheduled`` ``False`` reason
  ``Unschedulable`` (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-conditions).
  Placement: ``nodeSelector`` labels must match and every ``NoSchedule`` taint of the
  node must be tolerated (https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/).
* Deleting a Job deletes its pods (``propagationPolicy``), here at once.
* Deleting a pod: ``deletionTimestamp`` and ``deletionGracePeriodSeconds`` are set
  (default ``terminationGracePeriodSeconds``, 30); the kubelet sends SIGTERM, then
  SIGKILL after the grace period, and the pod ends ``Failed``
  (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination);
  once the Job controller has counted it and dropped its tracking finalizer, the pod
  object is gone (https://kubernetes.io/docs/concepts/workloads/controllers/job/#job-tracking-with-finalizers).
"""

from __future__ import annotations

import copy
import io
import itertools
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import urllib3
from kubernetes.client.exceptions import ApiException

INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
START = datetime(2026, 11, 22, 10, 0, 0, tzinfo=timezone.utc)


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str, labels: dict, taints: list[dict] = ()) -> dict:
    """A Node as ``kubectl get node -o json`` shows the parts the launcher reads."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"taints": list(taints)},
    }


def spot_node(name: str = "gke-spot-1") -> dict:
    # GKE's label and taint on spot nodes (pipelines/placement.py cites them).
    return node(
        name,
        {
            "cloud.google.com/gke-spot": "true",
            "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
        },
        [{"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}],
    )


def preemptible_node(name: str = "gke-preemptible-1") -> dict:
    # GKE's label on preemptible nodes; the taint is the one our node pools get.
    return node(
        name,
        {
            "cloud.google.com/gke-preemptible": "true",
            "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
        },
        [{"key": "preemptible", "value": "true", "effect": "NoSchedule"}],
    )


def on_demand_node(name: str = "gke-std-1") -> dict:
    return node(name, {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"})


class FakeCluster:
    """One namespace of a cluster: Jobs, Pods, Services, Nodes and a clock.

    Args:
        nodes: The cluster's nodes (pods are placed on the first that fits).
        step: How far the clock moves on each ``read_namespaced_job`` of a live Job
            (one launcher poll).
        script: Called with (cluster, poll number) at each such poll: what happens
            in the cluster meanwhile.
    """

    def __init__(self, nodes=(), step=timedelta(seconds=10), script: Callable | None = None):
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.clock = START
        self.step = step
        self.script = script
        self.polls = 0
        self.max_polls = 300
        self.jobs: dict[str, dict] = {}
        self.services: dict[str, dict] = {}
        self.pods: dict[str, dict] = {}
        self.logs: dict[str, bytes] = {}
        self.calls: list[tuple] = []
        self.sent: list[dict] = []  # every object body the launcher sent, as sent
        self.errors: dict[str, list[ApiException]] = {}  # method -> errors to raise, in turn
        self.forbidden: set[str] = set()  # methods answering 403 every time
        # The API refuses the Job's pods (a missing service account): the Job
        # controller's creations fail (a FailedCreate event) and the Job has no pod.
        self.refuse_pods = False
        self.unreachable: set[str] = set()  # nodes whose kubelet no longer answers
        self._uid = itertools.count(1)

    # -- test controls -----------------------------------------------------------------
    def now(self) -> datetime:
        return self.clock

    def fail_next(self, method: str, status: int, reason: str, times: int = 1) -> None:
        self.errors.setdefault(method, []).extend(
            ApiException(status=status, reason=reason) for _ in range(times)
        )

    def current_pod(self, job: str, index: int) -> dict:
        """The newest pod of ``job`` for ``index``."""
        found = [
            p
            for p in self.pods.values()
            if p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name") == job
            and p["metadata"]["annotations"][INDEX_ANNOTATION] == str(index)
        ]
        return max(found, key=lambda p: p["metadata"]["uid"])

    def terminate(self, job: str, index: int, exit_code: int, disruption: str = "") -> dict:
        """The running pod of ``index`` ends with ``exit_code`` (``disruption``: its reason)."""
        pod = self.current_pod(job, index)
        assert pod["status"]["phase"] == "Running", pod["status"]
        self._end(pod, exit_code, disruption)
        self._reconcile(job)
        return pod

    def succeed_all(self, job: str) -> None:
        for pod in list(self.pods.values()):
            labels = pod["metadata"].get("labels", {})
            if (
                labels.get("batch.kubernetes.io/job-name") == job
                and pod["status"]["phase"] == "Running"
            ):
                self._end(pod, 0, "")
        self._reconcile(job)

    def cannot_start(self, job: str, index: int, reason: str, message: str = "") -> dict:
        """The kubelet cannot start the pod's container: it waits with ``reason``."""
        pod = self.current_pod(job, index)
        pod["status"]["phase"] = "Pending"
        pod["status"]["containerStatuses"][0]["state"] = {
            "waiting": {"reason": reason, "message": message}
        }
        return pod

    def starts(self, job: str, index: int) -> None:
        """The waiting container of ``index`` starts after all."""
        pod = self.current_pod(job, index)
        pod["status"]["phase"] = "Running"
        pod["status"]["containerStatuses"][0]["state"] = {
            "running": {"startedAt": rfc3339(self.clock)}
        }

    def freeze(self, job: str, index: int) -> dict:
        """The running pod of ``index`` freezes: it never ends by itself or on SIGTERM."""
        pod = self.current_pod(job, index)
        pod["_frozen"] = True
        return pod

    def kubelet(self) -> None:
        """The kubelets' part for deleted pods, at the current time.

        A deleted pod's containers get SIGTERM: a live trainer saves and exits 143;
        one that ignores it (frozen) is SIGKILLed once the grace period
        (``deletionGracePeriodSeconds``) has passed: 137. Either way it fails.
        """
        for pod in list(self.pods.values()):
            meta = pod["metadata"]
            if "deletionTimestamp" not in meta or pod["status"]["phase"] != "Running":
                continue
            if pod["spec"].get("nodeName") in self.unreachable:
                continue  # no kubelet answers: Terminating, phase Running, for good
            since = datetime.fromisoformat(meta["deletionTimestamp"].replace("Z", "+00:00"))
            if not pod.get("_frozen"):
                self._end(pod, 143, "")
            elif (self.clock - since).total_seconds() >= meta["deletionGracePeriodSeconds"]:
                self._end(pod, 137, "")
            else:
                continue
            self._reconcile(pod["metadata"]["labels"]["batch.kubernetes.io/job-name"])
            # Counted, the Job controller drops its finalizer: the deleted pod is gone.
            self.pods.pop(meta["name"], None)

    def node_unreachable(self, name: str) -> None:
        """The node stops answering (a frozen VM): Ready turns Unknown, its kubelet is gone."""
        self.unreachable.add(name)
        self.nodes[name]["status"] = {
            "conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]
        }

    def add_node(self, n: dict) -> None:
        self.nodes[n["metadata"]["name"]] = n
        for name in self.jobs:
            self._reconcile(name)

    def created(self, kind: str) -> list[str]:
        method = {"Job": "create_namespaced_job", "Service": "create_namespaced_service"}[kind]
        return [c[1] for c in self.calls if c[0] == method]

    # -- the controller ---------------------------------------------------------------
    def _end(self, pod: dict, exit_code: int, disruption: str) -> None:
        status = pod["status"]
        status["phase"] = "Succeeded" if exit_code == 0 else "Failed"
        if disruption:
            status["conditions"].append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": disruption,
                    "message": f"stand-in: {disruption}",
                    "lastTransitionTime": rfc3339(self.clock),
                }
            )
        started = status["containerStatuses"][0]["state"]["running"]["startedAt"]
        status["containerStatuses"][0]["state"] = {
            "terminated": {
                "exitCode": exit_code,
                "reason": "Completed" if exit_code == 0 else "Error",
                "startedAt": started,
                "finishedAt": rfc3339(self.clock),
            }
        }
        pod["_counted"] = False

    def _fits(self, pod_spec: dict, n: dict) -> bool:
        labels = n["metadata"]["labels"]
        if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
            return False
        tolerations = pod_spec.get("tolerations") or []
        for taint in n["spec"].get("taints") or []:
            if not any(
                t.get("key") == taint["key"]
                and t.get("value") == taint.get("value")
                and t.get("effect") in (None, taint["effect"])
                for t in tolerations
            ):
                return False
        return True

    def _place(self, pod: dict) -> None:
        for n in self.nodes.values():
            if self._fits(pod["spec"], n):
                pod["spec"]["nodeName"] = n["metadata"]["name"]
                pod["status"] = {
                    "phase": "Running",
                    "conditions": [{"type": "PodScheduled", "status": "True"}],
                    "containerStatuses": [
                        {
                            "name": pod["spec"]["containers"][0]["name"],
                            "state": {"running": {"startedAt": rfc3339(self.clock)}},
                        }
                    ],
                }
                self.logs[pod["metadata"]["name"]] = (
                    f"chief log of {pod['metadata']['name']}\nstep 1\n".encode()
                )
                return
        pod["status"] = {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/1 nodes are available: "
                    "node(s) didn't match Pod's node affinity/selector.",
                    "lastTransitionTime": rfc3339(self.clock),
                }
            ],
        }

    def _new_pod(self, job: dict, index: int) -> None:
        if self.refuse_pods:
            return
        name = job["metadata"]["name"]
        template = copy.deepcopy(job["spec"]["template"])
        pod_name = f"{name}-{index}-{next(self._uid):05d}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "uid": f"uid-{next(self._uid):06d}",
                "labels": {
                    **template["metadata"]["labels"],
                    "batch.kubernetes.io/job-name": name,
                    "job-name": name,
                },
                "annotations": {INDEX_ANNOTATION: str(index)},
                "creationTimestamp": rfc3339(self.clock),
            },
            "spec": {**template["spec"], "hostname": f"{name}-{index}"},
        }
        self.pods[pod_name] = pod
        self._place(pod)

    def _matches(self, rule: dict, pod: dict) -> bool:
        if "onPodConditions" in rule:
            conds = pod["status"].get("conditions") or []
            return any(
                c["type"] == want["type"] and c["status"] == want.get("status", "True")
                for want in rule["onPodConditions"]
                for c in conds
            )
        spec = rule["onExitCodes"]
        for cs in pod["status"]["containerStatuses"]:
            if spec.get("containerName") not in (None, cs["name"]):
                continue
            code = cs["state"]["terminated"]["exitCode"]
            if code == 0:
                continue  # the docs: exit code 0 never matches
            inside = code in spec["values"]
            if inside == (spec["operator"] == "In"):
                return True
        return False

    def _fail_job(self, job: dict, reason: str) -> None:
        st = job["status"]
        for kind in ("FailureTarget", "Failed"):
            st.setdefault("conditions", []).append(
                {
                    "type": kind,
                    "status": "True",
                    "reason": reason,
                    "lastTransitionTime": rfc3339(self.clock),
                }
            )
        # The controller terminates the Job's remaining pods.
        for pod in self._pods_of(job["metadata"]["name"]):
            if pod["status"]["phase"] == "Running":
                self._end(pod, 143, "")
                pod["_counted"] = True
            elif pod["status"]["phase"] == "Pending":
                del self.pods[pod["metadata"]["name"]]

    def _pods_of(self, name: str) -> list[dict]:
        return [
            p
            for p in list(self.pods.values())
            if p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name") == name
        ]

    def _reconcile(self, name: str) -> None:
        job = self.jobs.get(name)
        if job is None or any(
            c["type"] in ("Complete", "Failed") for c in job["status"].get("conditions", [])
        ):
            return
        spec, st = job["spec"], job["status"]
        for pod in self._pods_of(name):
            if pod["status"]["phase"] == "Pending" and "nodeName" not in pod["spec"]:
                self._place(pod)
        for pod in self._pods_of(name):
            if pod["status"]["phase"] != "Failed" or pod.get("_counted") is not False:
                continue
            pod["_counted"] = True
            action = "Count"
            for rule in spec.get("podFailurePolicy", {}).get("rules", []):
                if self._matches(rule, pod):
                    action = rule["action"]
                    break
            if action == "FailJob":
                self._fail_job(job, "PodFailurePolicy")
                return
            if action == "Count":
                st["failed"] = st.get("failed", 0) + 1
                if st["failed"] > spec["backoffLimit"]:
                    self._fail_job(job, "BackoffLimitExceeded")
                    return
            self._new_pod(job, int(pod["metadata"]["annotations"][INDEX_ANNOTATION]))
        done = {
            p["metadata"]["annotations"][INDEX_ANNOTATION]
            for p in self._pods_of(name)
            if p["status"]["phase"] == "Succeeded"
        }
        st["succeeded"] = len(done)
        if len(done) == spec["completions"]:
            st.setdefault("conditions", []).append(
                {"type": "Complete", "status": "True", "lastTransitionTime": rfc3339(self.clock)}
            )

    # -- the API ------------------------------------------------------------------------
    def _enter(self, method: str, *args) -> None:
        self.calls.append((method, *args))
        if method in self.forbidden:
            raise ApiException(status=403, reason="Forbidden")
        pending = self.errors.get(method)
        if pending:
            raise pending.pop(0)

    @staticmethod
    def _missing():
        return ApiException(status=404, reason="Not Found")

    def create_namespaced_job(self, namespace, body, **kwargs):
        name = body["metadata"]["name"]
        self._enter("create_namespaced_job", name)
        self.sent.append(copy.deepcopy(body))
        if name in self.jobs:
            raise ApiException(status=409, reason="Conflict")
        job = copy.deepcopy(body)
        job["metadata"]["uid"] = f"uid-{next(self._uid):06d}"
        job["status"] = {"active": body["spec"]["parallelism"], "startTime": rfc3339(self.clock)}
        self.jobs[name] = job
        for index in range(job["spec"]["completions"]):
            self._new_pod(job, index)
        return copy.deepcopy(job)

    def read_namespaced_job(self, name, namespace, **kwargs):
        self._enter("read_namespaced_job", name)
        reads = sum(c[0] == "read_namespaced_job" for c in self.calls)
        # A launcher that never ends its loop fails the test instead of hanging it.
        assert reads <= self.max_polls, f"still polling after {self.max_polls} reads"
        if name not in self.jobs:
            raise self._missing()
        # A poll of a live Job: time passes, and the scenario plays its next step.
        self.polls += 1
        self.clock += self.step
        self.kubelet()
        if self.script is not None:
            self.script(self, self.polls)
        if name not in self.jobs:
            raise self._missing()
        return copy.deepcopy(self.jobs[name])

    def delete_namespaced_job(self, name, namespace, propagation_policy=None, **kwargs):
        self._enter("delete_namespaced_job", name, propagation_policy)
        if name not in self.jobs:
            raise self._missing()
        del self.jobs[name]
        for pod in self._pods_of(name):
            del self.pods[pod["metadata"]["name"]]
        return {"kind": "Status", "status": "Success"}

    def create_namespaced_service(self, namespace, body, **kwargs):
        name = body["metadata"]["name"]
        self._enter("create_namespaced_service", name)
        self.sent.append(copy.deepcopy(body))
        if name in self.services:
            raise ApiException(status=409, reason="Conflict")
        self.services[name] = copy.deepcopy(body)
        return copy.deepcopy(body)

    def read_namespaced_service(self, name, namespace, **kwargs):
        self._enter("read_namespaced_service", name)
        if name not in self.services:
            raise self._missing()
        return copy.deepcopy(self.services[name])

    def delete_namespaced_service(self, name, namespace, **kwargs):
        self._enter("delete_namespaced_service", name)
        if name not in self.services:
            raise self._missing()
        del self.services[name]
        return {"kind": "Status", "status": "Success"}

    def list_namespaced_pod(self, namespace, label_selector="", **kwargs):
        self._enter("list_namespaced_pod", label_selector)
        want = dict(part.split("=", 1) for part in label_selector.split(",") if part)
        items = [
            {k: v for k, v in copy.deepcopy(p).items() if not k.startswith("_")}
            for p in self.pods.values()
            if all(p["metadata"].get("labels", {}).get(k) == v for k, v in want.items())
        ]
        return {"apiVersion": "v1", "kind": "PodList", "items": items}

    def delete_namespaced_pod(self, name, namespace, grace_period_seconds=None, **kwargs):
        self._enter("delete_namespaced_pod", name)
        if name not in self.pods:
            raise self._missing()
        pod = self.pods[name]
        meta = pod["metadata"]
        if "deletionTimestamp" not in meta:
            grace = grace_period_seconds
            if grace is None:
                grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
            meta["deletionTimestamp"] = rfc3339(self.clock)
            meta["deletionGracePeriodSeconds"] = grace
        self.kubelet()
        return {"kind": "Status", "status": "Success"}

    def read_namespaced_pod(self, name, namespace, **kwargs):
        self._enter("read_namespaced_pod", name)
        if name not in self.pods:
            raise self._missing()
        return {k: v for k, v in copy.deepcopy(self.pods[name]).items() if not k.startswith("_")}

    def read_node(self, name, **kwargs):
        self._enter("read_node", name)
        if name not in self.nodes:
            raise self._missing()
        return copy.deepcopy(self.nodes[name])

    def read_namespaced_pod_log(self, name, namespace, container=None, follow=False, **kwargs):
        """With ``_preload_content=False`` the real client returns the urllib3 response."""
        self._enter("read_namespaced_pod_log", name, container, follow)
        assert kwargs.get("_preload_content") is False
        return urllib3.HTTPResponse(
            body=io.BytesIO(self.logs.get(name, b"")), preload_content=False, status=200
        )
