"""The JobSet (``jobset.x-k8s.io/v1alpha2``, JobSet v0.12.0) one gang of training pods runs as.

One replicated Job ``workers`` (``replicas: 1``) whose child Job is Indexed with
``parallelism = completions = workers``. Citations are to sigs.k8s.io/jobset v0.12.0
and k8s.io/kubernetes v1.34.3.

* Names. The child Job is ``<jobset>-workers-0`` (``pkg/util/placement/placement.go:14-16``)
  and the Job controller names each pod's host ``<job>-<index>``; with
  ``network.enableDNSHostnames`` and ``subdomain`` the JobSet controller makes the
  headless Service, so worker ``i`` is ``<jobset>-workers-0-<i>.<subdomain>``. The pods
  get the ``spottrain.trainer.gang_env`` variables with that child Job's name, and
  ``spottrain.trainer.distribution.job_tf_config`` builds ``TF_CONFIG`` from them and
  ``JOB_COMPLETION_INDEX`` in the pod.
* The child Job's ``podFailurePolicy`` (:func:`pod_failure_policy`): the Job controller
  takes the first rule that matches (``pkg/controller/job/pod_failure_policy.go:43-82``)
  and a ``FailJob`` ends the Job with reason ``PodFailurePolicy`` and the message
  "Container <c> for pod <ns>/<pod> failed with exit code <n> matching FailJob rule
  at index <i>" (:56-57) or "Pod <ns>/<pod> has condition <type> matching FailJob rule
  at index <i>" (:73-74), which the Failed condition keeps
  (``job_controller.go:950-952``, :1553). The disruption rule comes first so a
  preempted pod counts as a disruption whatever it exited with.
* The JobSet's ``failurePolicy.rules`` (:func:`failure_policy`): evaluated in order,
  a rule needs the reason and one of its message patterns (Go regexp) to match
  (``pkg/controllers/failure_policy.go:87-119``, :142-183); no rule matching means
  ``RestartJobSet``, counted against ``maxRestarts`` (:45, :68-71). So a fatal exit
  (the message names the fatal rule's index) fails the JobSet; any other
  ``PodFailurePolicy`` failure (a disruption or the notice's 143) restarts it without
  counting; anything else (170, 171, ``BackoffLimitExceeded``) restarts it, counted.
* ``backoffLimit: 0``: a gang fails together, so the first failure no rule names
  ends the child Job and the JobSet restarts every pod. A known gap, shown in
  tests/system/gke/test_train_job_jobset_real_kube.py: the Job controller reads only pods whose
  phase is ``Failed`` (``job_controller.go:2004-2014``) and fixes the outcome at the
  first failure it reads (``FailureTarget``, :944-960), so a peer's 170 that gets
  there while a preempted pod is still terminating makes that restart a counted one.
  It adds ``Failed``, which the JobSet controller acts on, only once no pod is
  terminating (:1510-1514), so a pod stuck terminating holds the restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from spottrain import exits
from spottrain.ledger import bill_labels, usage
from spottrain.placement import MAX_WORKERS, Placement
from spottrain.runtime.train_job import names
from spottrain.trainer import gang_env

# tini (the image's init, its ENTRYPOINT too) as PID 1: the kernel drops a SIGTERM sent
# to a PID 1 without a handler, which Python has only ~20-100 ms after its start
# (bench/pid1_notice.py); tini blocks signals from its first instructions and passes
# them to the trainer's entry point, whose supervisor relays them to the trainer.
TRAINER_COMMAND = ("tini", "--", "python", "-m", "spottrain.trainer.task")
API_VERSION = "jobset.x-k8s.io/v1alpha2"
REPLICATED_JOB = "workers"
# The gang's number in the run (1: the spot JobSet, 2: the on-demand one). Its pods'
# own restarts are told apart by JobSet's label jobset.sigs.k8s.io/restart-attempt
# (observe.RESTART_LABEL): JobSet recreates them from one template, so no label of ours
# can carry the ledger's attempt number; the ledger records both as "gang".
ATTEMPT_LABEL = bill_labels.K8S_ATTEMPT
# Finished JobSets (their Jobs and pods' logs) stay a day for inspection, then go.
TTL_SECONDS_AFTER_FINISHED = 86400
# The child Job's rules, in order; FAILURE_RULE_NAMES name the JobSet's rules
# ("^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", api/jobset/v1alpha2/jobset_types.go:445).
DISRUPTION_RULE, FATAL_RULE, NOTICE_RULE = 0, 1, 2
FATAL_NAME, FREE_NAME = "fatalExit", "disruptionOrNotice"
# A child Job past its activeDeadlineSeconds (the run's deadline, set by the launcher)
# fails with reason DeadlineExceeded (k8s.io/api v0.34.3 batch/v1/types.go:629): this
# rule fails the JobSet (JobSet v0.12.0 pkg/controllers/failure_policy.go:142-150),
# which would otherwise restart it, counted, each restart with a fresh deadline.
DEADLINE_NAME = "runDeadline"
# The longest pod name must stay a DNS-1035 label: "<jobset>-workers-0-<i>-abcde"
# (pkg/webhooks/jobset_webhook.go:243-255 refuses the JobSet otherwise).
_POD_SUFFIX = len("-abcde")


@dataclass(frozen=True)
class WorkerSet:
    """One JobSet of ``workers`` training pods.

    Attributes:
        name: JobSet name and subdomain (``names.jobset_name``).
        namespace: Where it lives (the launcher's own namespace).
        image: The trainer image.
        args: ``spottrain.trainer.task`` flags (``spottrain.runtime.train.trainer_flags``;
            the checkpoint dir is among them).
        workers: Pods, one MWMS worker each; index 0 is the chief.
        placement: Pool or ComputeClass, GPUs, memory, grace and ``retries``
            (the JobSet's ``maxRestarts``).
        port: The workers' gRPC port.
        service_account: The pods' service account (empty: the namespace default).
        run: The KFP run id, as a label (empty: none).
        attempt: The gang's number in the run (``ATTEMPT_LABEL``; None: none).
        owner: The run's Argo Workflow as an ownerReference (``apiVersion``, ``kind``,
            ``name``, ``uid``; None: none): deleting the run deletes the gang, by
            Kubernetes' garbage collector, with or without a launcher.
    """

    name: str
    namespace: str
    image: str
    args: tuple[str, ...]
    workers: int
    placement: Placement
    port: int = gang_env.DEFAULT_PORT
    service_account: str = ""
    run: str = ""
    attempt: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    owner: Mapping[str, str] | None = None

    def __post_init__(self):
        if not 1 <= self.workers <= MAX_WORKERS:
            raise ValueError(
                f"workers={self.workers}: expected 1 to {MAX_WORKERS} (an Indexed Job)"
            )
        longest = len(pod_host(self.name, self.workers - 1)) + _POD_SUFFIX
        if longest > 63:
            raise ValueError(
                f"JobSet name {self.name!r}: its pod names reach {longest} characters "
                f"(<name>-{REPLICATED_JOB}-0-<index>-xxxxx), more than 63"
            )

    @property
    def child_job(self) -> str:
        """The child Job's name (placement.go:14-16)."""
        return f"{self.name}-{REPLICATED_JOB}-0"

    def all_labels(self) -> dict[str, str]:
        """Labels of the JobSet and its pods."""
        key, value = names.MANAGED_BY
        return {**self.labels, key: value, **bill_labels.k8s_labels(self.run, self.attempt)}


def pod_host(jobset: str, index: int) -> str:
    """Worker ``index``'s host name, ``<jobset>-workers-0-<index>``."""
    return f"{jobset}-{REPLICATED_JOB}-0-{index}"


def pod_failure_policy(container: str = names.CONTAINER) -> dict:
    """The child Job's rules; every match fails the Job, the message says which rule."""
    rules = [None] * 3
    rules[DISRUPTION_RULE] = {
        "action": "FailJob",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }
    rules[FATAL_RULE] = {
        "action": "FailJob",
        "onExitCodes": {
            "containerName": container,
            "operator": "In",
            "values": sorted(exits.FATAL),
        },
    }
    rules[NOTICE_RULE] = {
        "action": "FailJob",
        "onExitCodes": {
            "containerName": container,
            "operator": "In",
            "values": [exits.PREEMPTED],
        },
    }
    return {"rules": rules}


def failure_policy(max_restarts: int) -> dict:
    """The JobSet's rules: deadline and fatal exit fail it; disruption, notice restart free."""
    return {
        "maxRestarts": max_restarts,
        "rules": [
            {
                "name": DEADLINE_NAME,
                "action": "FailJobSet",
                "onJobFailureReasons": ["DeadlineExceeded"],
            },
            {
                "name": FATAL_NAME,
                "action": "FailJobSet",
                "onJobFailureReasons": ["PodFailurePolicy"],
                "onJobFailureMessagePatterns": [
                    rf"failed with exit code [0-9]+ matching FailJob rule at index {FATAL_RULE}$"
                ],
            },
            {
                "name": FREE_NAME,
                "action": "RestartJobSetAndIgnoreMaxRestarts",
                "onJobFailureReasons": ["PodFailurePolicy"],
            },
            # Anything else: RestartJobSet, counted (failure_policy.go:45).
        ],
    }


def env(ws: WorkerSet) -> list[dict]:
    """The gang contract (``spottrain/trainer/gang_env.py``); the Job controller adds the index.

    Also what the ledger's record starts with: the placement's GPUs (the launcher adds
    the node's machine and zone once the pod ended: ``ledger.annotate``) and the
    run and attempt labels the pods carry (``bill_labels``).
    """
    out = [
        {"name": gang_env.JOB_NAME, "value": ws.child_job},
        {"name": gang_env.SERVICE, "value": ws.name},
        {"name": gang_env.WORKERS, "value": str(ws.workers)},
        {"name": gang_env.PORT, "value": str(ws.port)},
    ]
    gpus = usage.from_placement(ws.placement.gpu_type, ws.placement.gpu_count)
    out.append({"name": usage.USAGE_ENV, "value": usage.env_value(**gpus)})
    if labels := bill_labels.k8s_labels(ws.run, ws.attempt):
        out.append({"name": bill_labels.LABELS_ENV, "value": bill_labels.env_value(labels)})
    return out


def container(ws: WorkerSet) -> dict:
    """The trainer as the container's main process: no shell, so SIGTERM reaches it."""
    spec = {
        "name": names.CONTAINER,
        "image": ws.image,
        "command": list(TRAINER_COMMAND),
        "args": [str(a) for a in ws.args],
        "env": env(ws),
        "ports": [{"name": names.PORT_NAME, "containerPort": ws.port}],
    }
    resources = ws.placement.resources()
    if resources:
        spec["resources"] = resources
    return spec


def pod_spec(ws: WorkerSet) -> dict:
    """The workers' pod spec: selectors/tolerations from the Placement, grace from its notice."""
    spec = {
        "restartPolicy": "Never",  # podFailurePolicy requires it
        "terminationGracePeriodSeconds": ws.placement.grace_seconds,
        "containers": [container(ws)],
    }
    if ws.placement.node_selector:
        spec["nodeSelector"] = ws.placement.node_selector
    tolerations = ws.placement.tolerations()
    if tolerations:
        spec["tolerations"] = tolerations
    if ws.service_account:
        spec["serviceAccountName"] = ws.service_account
    return spec


def jobset(ws: WorkerSet, active_deadline_s: int | None = None) -> dict:
    """The ``jobset.x-k8s.io/v1alpha2`` JobSet manifest.

    ``active_deadline_s``: the child Job's ``activeDeadlineSeconds``, which bounds a
    gang whose launcher is gone: the Job controller fails a Job that was active longer,
    counted from its start, never while suspended (Kubernetes v1.34.3
    ``pkg/controller/job/job_controller.go:961-962``, ``pastActiveDeadline`` :1585-1592).
    """
    labels = ws.all_labels()
    child = {
        "completionMode": "Indexed",
        "completions": ws.workers,
        "parallelism": ws.workers,
        "backoffLimit": 0,
        # "When using podFailurePolicy, Failed is the only allowed value" (JobSpec).
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": pod_failure_policy(),
        "template": {"metadata": {"labels": labels}, "spec": pod_spec(ws)},
    }
    if active_deadline_s is not None:
        child["activeDeadlineSeconds"] = max(1, int(active_deadline_s))
    spec: dict = {}
    if ws.placement.queue:
        # Queued: created suspended (Kueue's webhook would too, defaults.go:58-60), so
        # no pod starts before Kueue admits the whole gang; Kueue resumes it.
        spec["suspend"] = True
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": {
            "name": ws.name,
            "namespace": ws.namespace,
            # Kueue's labels on the JobSet only: on a pod, a cluster whose Kueue also
            # manages plain pods would queue each pod on its own.
            "labels": {**labels, **ws.placement.kueue_labels()},
            # Not blocking the owner's deletion: that would need update on the
            # Workflow's finalizers (OwnerReferencesPermissionEnforcement).
            **(
                {"ownerReferences": [{**ws.owner, "blockOwnerDeletion": False}]} if ws.owner else {}
            ),
        },
        "spec": {
            **spec,
            "network": {
                "enableDNSHostnames": True,
                "subdomain": ws.name,
                # Workers resolve each other while starting, before any readiness.
                "publishNotReadyAddresses": True,
            },
            "replicatedJobs": [
                {"name": REPLICATED_JOB, "replicas": 1, "template": {"spec": child}}
            ],
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [REPLICATED_JOB]},
            "failurePolicy": failure_policy(ws.placement.retries),
            "ttlSecondsAfterFinished": TTL_SECONDS_AFTER_FINISHED,
        },
    }
