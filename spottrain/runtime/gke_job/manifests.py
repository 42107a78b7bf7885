"""The Indexed Job and headless Service one gang of training pods runs as.

Kubernetes documents everything relied on here:

* Indexed Job: one pod per index, hostname ``<job>-<index>``, index in the env var
  ``JOB_COMPLETION_INDEX``; with ``subdomain`` set to a headless Service's name the
  pods reach each other at ``<job>-<index>.<service>``
  (https://kubernetes.io/docs/concepts/workloads/controllers/job/#completion-mode,
  https://kubernetes.io/docs/tasks/job/job-with-pod-to-pod-communication/).
* ``podFailurePolicy`` needs ``restartPolicy: Never``; rules are checked in order and
  the first match decides: ``Ignore`` does not count the pod against
  ``backoffLimit``, ``FailJob`` fails the Job at once, ``Count`` counts it
  (https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-failure-policy).
  Pods disrupted by preemption, node shutdown or taint eviction carry the
  ``DisruptionTarget`` condition
  (https://kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions).
* ``podReplacementPolicy: Failed`` — "When using podFailurePolicy, Failed is the the
  only allowed value" (API reference, JobSpec; kubernetes client 30.1
  ``V1JobSpec.pod_replacement_policy``). It is what a gang wants anyway: a
  replacement for ``<job>-<i>`` starts only after the old pod has terminated, so two
  pods never claim one hostname.
* Not ``backoffLimitPerIndex``: a gang fails together (every MWMS worker exits 170
  when a peer is lost), so a per-index budget would end one index while its peers
  keep waiting for it; one Job-wide ``backoffLimit`` sized per gang restart
  (``Placement.job_backoff_limit``) counts what matters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from spottrain.placement import Placement
from spottrain.runtime.gke_job import names, recreate
from spottrain.trainer import gang_env, preemption

# tini (the image's init, its ENTRYPOINT too) as PID 1: the kernel drops a SIGTERM sent
# to a PID 1 without a handler, which Python has only ~20-100 ms after its start
# (bench/pid1_notice.py); tini blocks signals from its first instructions and passes
# them to the trainer's entry point, whose supervisor relays them to the trainer.
TRAINER_COMMAND = ("tini", "--", "python", "-m", "spottrain.trainer.task")
# Finished Jobs (and their pods' logs) stay a day for inspection, then go.
TTL_SECONDS_AFTER_FINISHED = 86400


@dataclass(frozen=True)
class Gang:
    """One Indexed Job of ``workers`` training pods.

    Attributes:
        name: Job and Service name (:func:`names.job_name`).
        namespace: Where both live (the launcher's own namespace).
        image: The trainer image.
        args: ``spottrain.trainer.task`` flags (``spottrain.runtime.train.trainer_flags``).
        workers: Pods, one MWMS worker each; index 0 is the chief.
        placement: Pool, GPUs, memory and the retry budget.
        deadline_seconds: The Job's ``activeDeadlineSeconds``.
        port: The workers' gRPC port.
        service_account: The pods' service account (empty: the namespace default).
        labels: More labels for the Job, Service and pods.
    """

    name: str
    namespace: str
    image: str
    args: tuple[str, ...]
    workers: int
    placement: Placement
    deadline_seconds: int
    port: int = gang_env.DEFAULT_PORT
    service_account: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if self.workers < 1:
            raise ValueError(f"workers={self.workers}: must be >= 1")
        if self.deadline_seconds < 1:
            raise ValueError(f"deadline_seconds={self.deadline_seconds}: must be >= 1")

    @property
    def selector(self) -> dict[str, str]:
        """The label selecting this gang's pods."""
        return {names.GANG_LABEL: self.name}

    def all_labels(self) -> dict[str, str]:
        """Labels of the Job, Service and pods."""
        key, value = names.MANAGED_BY
        return {**self.labels, key: value, **self.selector}


def pod_failure_policy(container: str = names.CONTAINER) -> dict:
    """Disruptions are free, fatal codes end the Job, retryable codes count."""
    return {
        "rules": [
            # First, so a preempted pod never counts whatever it exited with (143).
            {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            },
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": container,
                    "operator": "In",
                    "values": sorted(preemption.FATAL),
                },
            },
            # What no rule matches counts too; said explicitly for the reader.
            {
                "action": "Count",
                "onExitCodes": {
                    "containerName": container,
                    "operator": "In",
                    "values": sorted(preemption.RETRYABLE),
                },
            },
        ]
    }


def env(gang: Gang, job_name: str = "") -> list[dict]:
    """The gang contract (``spottrain/trainer/gang_env.py``); Kubernetes adds the index.

    ``job_name``: the Job whose pods these are, when it is not the gang's own name (a
    JobSet's child Job); the Service keeps the gang's name.
    """
    return [
        {"name": gang_env.JOB_NAME, "value": job_name or gang.name},
        {"name": gang_env.SERVICE, "value": gang.name},
        {"name": gang_env.WORKERS, "value": str(gang.workers)},
        {"name": gang_env.PORT, "value": str(gang.port)},
    ]


def container(gang: Gang, job_name: str = "") -> dict:
    """The trainer as the container's main process: no shell, so SIGTERM reaches it."""
    spec = {
        "name": names.CONTAINER,
        "image": gang.image,
        "command": list(TRAINER_COMMAND),
        "args": [str(a) for a in gang.args],
        "env": env(gang, job_name),
        "ports": [{"name": names.PORT_NAME, "containerPort": gang.port}],
    }
    resources = gang.placement.resources()
    if resources:
        spec["resources"] = resources
    return spec


def job(gang: Gang, carried: Mapping | None = None) -> dict:
    """The ``batch/v1`` Indexed Job manifest.

    Args:
        gang: The gang.
        carried: For a Job recreated by the launcher (``recreate.carried``): the
            retries and the time the Job it replaces left over.
    """
    pod_spec = {
        "restartPolicy": "Never",  # podFailurePolicy requires it
        "subdomain": gang.name,  # the headless Service: <job>-<i>.<service> resolves
        "terminationGracePeriodSeconds": gang.placement.grace_seconds,
        "containers": [container(gang)],
    }
    if gang.placement.node_selector:
        pod_spec["nodeSelector"] = gang.placement.node_selector
    tolerations = gang.placement.tolerations()
    if tolerations:
        pod_spec["tolerations"] = tolerations
    if gang.service_account:
        pod_spec["serviceAccountName"] = gang.service_account
    carried = carried or {}
    meta = {"name": gang.name, "namespace": gang.namespace, "labels": gang.all_labels()}
    if carried.get("recreations"):
        meta["annotations"] = {recreate.COUNT_ANNOTATION: str(carried["recreations"])}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "completionMode": "Indexed",
            "completions": gang.workers,
            "parallelism": gang.workers,
            "backoffLimit": carried.get(
                "backoffLimit", gang.placement.job_backoff_limit(gang.workers)
            ),
            "podReplacementPolicy": "Failed",
            "podFailurePolicy": pod_failure_policy(),
            "activeDeadlineSeconds": carried.get("activeDeadlineSeconds", gang.deadline_seconds),
            "ttlSecondsAfterFinished": TTL_SECONDS_AFTER_FINISHED,
            "template": {"metadata": {"labels": gang.all_labels()}, "spec": pod_spec},
        },
    }


def service(gang: Gang) -> dict:
    """The headless Service that gives each pod its DNS name."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": gang.name, "namespace": gang.namespace, "labels": gang.all_labels()},
        "spec": {
            "clusterIP": "None",
            "selector": gang.selector,
            # Workers resolve each other while starting, before any readiness.
            "publishNotReadyAddresses": True,
            "ports": [{"name": names.PORT_NAME, "port": gang.port, "targetPort": gang.port}],
        },
    }


def all_manifests(gangs: Sequence[Gang]) -> list[dict]:
    """Every manifest a launcher may send for these gangs (for schema checks)."""
    return [m for g in gangs for m in (service(g), job(g))]
