"""Where a task runs on GKE, as plain data: pools, labels, taints, GPUs, memory, retries.

This module is what the trainer image may import (the JobSet-engine launcher builds its
pods from it): standard library only, no kfp. Applying a placement to a KFP task
(kfp-kubernetes, an authoring-only package) and the ``gcloud`` node-pool command are
:mod:`spottrain.pipelines.placement`'s, which reads everything here, so the taint
a pool carries and the toleration a task needs still come from one table.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, replace

# Kubernetes caps an Indexed Job at 10^5 completions and parallelism (batch/v1
# JobSpec.completionMode); a larger worker count is a typo, not a cluster: refused at
# submit, by train_job, by the ladder and in the pods alike.
MAX_WORKERS = 100_000

# flex-start: GKE's Dynamic Workload Scheduler VMs ("Run a small batch workload with
# GPUs and Flex-start VMs"): queued for capacity, discounted (up to 53 %), run at most
# 7 days, not preempted before that; the pool needs GKE 1.32.2-gke.1652000+ for GPUs.
POOLS = ("preemptible", "spot", "flex-start", "on-demand")
# The pools the GKE pipeline is compiled for (one YAML each): the ones that preempt.
SPOT_POOLS = ("preemptible", "spot")

# GKE labels every GPU node with its accelerator type; selecting on it keeps the
# task off pools with another GPU model (and off CPU pools).
GPU_NODE_LABEL = "cloud.google.com/gke-accelerator"
# GKE labels these automatically on preemptible and spot nodes ...
POOL_NODE_LABELS = {
    "preemptible": ("cloud.google.com/gke-preemptible", "true"),
    "spot": ("cloud.google.com/gke-spot", "true"),
    "flex-start": ("cloud.google.com/gke-flex-start", "true"),
}
# ... of pools created with these gcloud flags (nodepool_command), so the selector a
# compiled task carries and the pool our command creates come from one table.
GCLOUD_POOL_FLAGS = {"preemptible": "--preemptible", "spot": "--spot", "flex-start": "--flex-start"}
GPU_RESOURCE = "nvidia.com/gpu"
# A custom ComputeClass's node label and taint key ("About custom ComputeClasses").
COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"
# Kueue's labels on a job: the LocalQueue it is submitted to, and its
# WorkloadPriorityClass (sigs.k8s.io/kueue v0.17.0 pkg/controller/constants/constants.go:23, :39).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"

# Vertex AI accelerator names for the GKE ones (the equal-GPU guard compares both).
VERTEX_ACCELERATORS = {
    "nvidia-tesla-t4": "NVIDIA_TESLA_T4",
    "nvidia-tesla-v100": "NVIDIA_TESLA_V100",
    "nvidia-tesla-p100": "NVIDIA_TESLA_P100",
    "nvidia-tesla-p4": "NVIDIA_TESLA_P4",
    "nvidia-tesla-k80": "NVIDIA_TESLA_K80",
    "nvidia-tesla-a100": "NVIDIA_TESLA_A100",
    "nvidia-a100-80gb": "NVIDIA_A100_80GB",
    "nvidia-l4": "NVIDIA_L4",
    "nvidia-h100-80gb": "NVIDIA_H100_80GB",
}


def check_gpu_type(gpu_type: str, *, vertex: bool = False) -> None:
    """Refuses an accelerator name GKE (or Vertex) does not know: a task would stay Pending.

    Args:
        gpu_type: A GKE accelerator label value, or with ``vertex`` a Vertex AI name.
        vertex: Check against the Vertex names (``NVIDIA_TESLA_T4``) instead.
    """
    known = list(VERTEX_ACCELERATORS.values() if vertex else VERTEX_ACCELERATORS)
    if gpu_type not in known:
        close = difflib.get_close_matches(gpu_type, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        flag = "--accelerator-type" if vertex else "--gpu-type"
        raise PlacementError(
            f"{flag} {gpu_type!r} is not a known accelerator: {hint}known: {', '.join(known)}"
        )


_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(E|Ei|P|Pi|T|Ti|G|Gi|M|Mi|K|Ki|m)?$")
_DURATION = re.compile(r"^[0-9]+s$")

# The longest run we support, from the run's start to the end of its last attempt,
# preemptions and backoff waits included (an on-demand fall-back, an exit hook, may
# run after it: see gke.fallback_component). Compiled as the run's deadline
# (gke.build) and the floor of every retry window. A week: a ResNet50
# run on one T4 takes hours to days, and on preemptible VMs, which GKE stops after
# at most 24 h, a multi-day run is preempted at least daily; a longer job should be
# split into runs that resume from the same checkpoint_dir.
RUN_TIMEOUT = "604800s"


# What a pod gets between SIGTERM and SIGKILL on a spot/preemptible node: "Spot VMs
# terminate 30 seconds after receiving a termination notice" and the kubelet's graceful
# node shutdown gives non-system Pods up to 15 s of it, best effort
# (https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms, "Termination and
# graceful shutdown of Spot VMs"). A JobSet-engine pod asks for the whole notice; the
# kubelet's shutdown budget may cut it shorter, never longer.
NOTICE_SECONDS = 30
# Spot nodes' shutdown grace GKE accepts (kubelet shutdownGracePeriodSeconds: 120 s on
# Spot pools and ComputeClass spot priorities from GKE 1.35.0-gke.1171000; 0 would
# switch graceful shutdown off), and the part the kubelet keeps for system pods.
SPOT_GRACE_SECONDS = (30, 120)
DEFAULT_SPOT_GRACE_SECONDS = SPOT_GRACE_SECONDS[0]  # GKE's, written nowhere
CRITICAL_PODS_SECONDS = 15


def check_spot_grace(spot_grace_seconds: int) -> None:
    """Refuses a spot node shutdown grace GKE does not accept."""
    if spot_grace_seconds not in SPOT_GRACE_SECONDS:
        accepted = " or ".join(map(str, SPOT_GRACE_SECONDS))
        raise PlacementError(f"spot grace {spot_grace_seconds} s: GKE accepts {accepted}")


def spot_node_system_config(spot_grace_seconds: int) -> dict:
    """The node system config that gives spot nodes this shutdown grace.

    The same ``kubeletConfig`` for a node pool's ``--system-config-from-file`` (GKE API
    ``NodeKubeletConfig``) and a ComputeClass priority's ``nodeSystemConfig`` (Google's
    CRD types: ``shutdownGracePeriodSeconds`` enum 0/30/120,
    ``shutdownGracePeriodCriticalPodsSeconds`` 0-120 and at most the former).
    """
    check_spot_grace(spot_grace_seconds)
    return {
        "kubeletConfig": {
            "shutdownGracePeriodSeconds": spot_grace_seconds,
            "shutdownGracePeriodCriticalPodsSeconds": CRITICAL_PODS_SECONDS,
        }
    }


def pod_grace_seconds(spot_grace_seconds: int) -> int:
    """A training pod's ``terminationGracePeriodSeconds`` for a spot node's grace.

    The kubelet gives pods the node's grace minus what it keeps for system pods, and
    each pod the shorter of that and its own; the pod asks for at least the notice.
    """
    check_spot_grace(spot_grace_seconds)
    return max(NOTICE_SECONDS, spot_grace_seconds - CRITICAL_PODS_SECONDS)


def check_reservation(reservation: str, project: str) -> None:
    """Refuses a reservation's project given without the reservation itself."""
    if project and not reservation:
        raise PlacementError(f"reservation project {project!r} without a reservation")


def check_compute_class_name(name: str) -> None:
    """Refuses a ComputeClass name Kubernetes or GKE would not take.

    A cluster-scoped object's name (DNS subdomain, kept to a label here since it is
    a node label value too), not beginning with ``gke`` or ``autopilot`` (GKE's
    "About custom ComputeClasses", Limitations).
    """
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name) or name.startswith(
        ("gke", "autopilot")
    ):
        raise PlacementError(
            f"compute class {name!r}: expected lower-case letters, digits and '-', at most "
            "63, not beginning with 'gke' or 'autopilot'"
        )


def check_queue_names(queue: str, priority_class: str) -> None:
    """Refuses a LocalQueue or WorkloadPriorityClass name a label cannot carry."""
    for what, name in (("queue", queue), ("priority_class", priority_class)):
        if name and not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?", name):
            raise PlacementError(
                f"{what} {name!r}: expected lower-case letters, digits, '-' and '.', at most "
                "63 (a Kueue object's name, carried as a label value)"
            )
    if priority_class and not queue:
        raise PlacementError(
            f"priority_class {priority_class!r} without a queue: Kueue reads it only of a "
            "queued job"
        )


def seconds(duration: str) -> int:
    """Whole seconds of a ``<n>s`` duration (the only form placements accept)."""
    if not _DURATION.match(duration or ""):
        raise PlacementError(f"duration {duration!r}: expected whole seconds like '60s'")
    return int(duration[:-1])


@dataclass(frozen=True)
class Taint:
    """A node taint, as ``gcloud --node-taints`` writes it and a toleration matches it."""

    key: str
    value: str
    effect: str = "NoSchedule"

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}"


# The taint our preemptible GPU pools carry (so that only tasks that tolerate
# preemption land there), and GKE's documented one for spot pools.
PREEMPTIBLE_TAINT = Taint("preemptible", "true")
SPOT_TAINT = Taint("cloud.google.com/gke-spot", "true")
# Our flex-start pools are tainted like the spot ones, with their label's key, so that
# only tasks placed there use the GPUs (GKE's page shows no taint of its own).
FLEX_START_TAINT = Taint("cloud.google.com/gke-flex-start", "true")
DEFAULT_TAINTS = {
    "preemptible": PREEMPTIBLE_TAINT,
    "spot": SPOT_TAINT,
    "flex-start": FLEX_START_TAINT,
}


class PlacementError(ValueError):
    """A placement setting that cannot work; the message names the value."""


@dataclass(frozen=True)
class Placement:
    """Scheduling for one task on GKE.

    Attributes:
        pool: ``preemptible`` (the default), ``spot`` or ``on-demand``.
        gpu_type: GKE accelerator name (the ``cloud.google.com/gke-accelerator`` label).
        gpu_count: GPUs per task; 0 runs on CPU and skips the accelerator selector.
        memory_limit: Kubernetes quantity, e.g. ``48G``; empty sets none.
        cpu_limit: Kubernetes quantity; empty sets none.
        retries: KFP retries after a failure (a preemption is a failure to KFP); for
            the JobSet engine, the JobSet's ``maxRestarts`` (counted gang restarts).
        backoff: First retry delay (``<seconds>s``); retry *n* waits
            ``backoff * backoff_factor**(n-1)``, with no per-retry cap on Argo.
        backoff_factor: Exponential backoff factor; a whole number, as Argo parses it.
        retry_window: How long after the task's *first* attempt started KFP may
            still retry it (``set_retry(backoff_max_duration=...)``). On KFP OSS it
            is Argo's ``backoff.maxDuration``: a total window, not a delay cap. A
            failure after it ends is final, and every retry pod is killed when it
            ends. Must cover the run's timeout (``RUN_TIMEOUT``), see
            :func:`check_retry_window`. Under ``kfp.local`` the same field only
            caps each retry's delay.
        taint: The pool's taint to tolerate; ``None`` uses the pool's default.
        node_pool: Pin to a named node pool (``cloud.google.com/gke-nodepool``).
        require_pool: Select the pool's nodes (else only tolerate them: the task may
            land on preemptible or regular nodes, as idempotent copies can).
        grace_seconds: The pods' ``terminationGracePeriodSeconds`` (JobSet engine): the
            notice, or :func:`pod_grace_seconds` of a longer spot grace.
        compute_class: Select a GKE custom ComputeClass by name instead of a pool
            (``spottrain.pipelines.computeclass`` writes one: spot first, on-demand
            after); the class then names the GPU and the capacity, so the task
            selects only the class, and ``pool`` must be ``spot``.
        queue: A Kueue LocalQueue to submit the gang to (the JobSet engine): Kueue
            admits it whole when its ClusterQueue's quota allows, and the queue's
            ResourceFlavors choose the capacity (their node labels and tolerations are
            added at admission), so the task selects only the GPU and ``pool`` must
            be ``spot``.
        priority_class: A Kueue WorkloadPriorityClass for the queued gang.
    """

    pool: str = "preemptible"
    gpu_type: str = "nvidia-tesla-t4"
    gpu_count: int = 1
    memory_limit: str = "48G"
    cpu_limit: str = ""
    retries: int = 5
    backoff: str = "60s"
    backoff_factor: float = 2.0
    retry_window: str = RUN_TIMEOUT
    taint: Taint | None = field(default=None)
    node_pool: str = ""
    require_pool: bool = True
    compute_class: str = ""
    grace_seconds: int = NOTICE_SECONDS
    queue: str = ""
    priority_class: str = ""

    def __post_init__(self):
        if not NOTICE_SECONDS <= self.grace_seconds <= max(SPOT_GRACE_SECONDS):
            raise PlacementError(
                f"grace_seconds={self.grace_seconds}: expected {NOTICE_SECONDS} to "
                f"{max(SPOT_GRACE_SECONDS)} (a spot node's notice)"
            )
        if self.pool not in POOLS:
            raise PlacementError(f"pool={self.pool!r}: expected one of {', '.join(POOLS)}")
        if self.compute_class:
            check_compute_class_name(self.compute_class)
            if self.pool != "spot" or self.node_pool:
                raise PlacementError(
                    f"compute_class={self.compute_class!r} chooses the capacity itself (spot "
                    f"first, on-demand after): use pool='spot' and no node_pool, not "
                    f"pool={self.pool!r} node_pool={self.node_pool!r}"
                )
        check_queue_names(self.queue, self.priority_class)
        if self.queue and (self.pool != "spot" or self.node_pool or self.compute_class):
            raise PlacementError(
                f"queue={self.queue!r}: the queue's ResourceFlavors choose the nodes (spot "
                f"first, on-demand after, as its ClusterQueue lists them): use pool='spot', "
                f"no node_pool and no compute_class, not pool={self.pool!r} "
                f"node_pool={self.node_pool!r} compute_class={self.compute_class!r}"
            )
        if self.gpu_count < 0:
            raise PlacementError(f"gpu_count={self.gpu_count}: must be >= 0")
        if self.gpu_count and not self.gpu_type:
            raise PlacementError(f"gpu_count={self.gpu_count} needs a gpu_type")
        if self.gpu_count:
            check_gpu_type(self.gpu_type)
        if self.retries < 0:
            raise PlacementError(f"retries={self.retries}: must be >= 0")
        for name in ("memory_limit", "cpu_limit"):
            value = getattr(self, name)
            if value and not _QUANTITY.match(value):
                raise PlacementError(f"{name}={value!r} is not a Kubernetes quantity like 48G")
        if self.memory_limit and self.memory_limit.replace(".", "", 1).isdigit():
            # Valid to Kubernetes, but in bytes: "16" would be a 16-byte limit.
            raise PlacementError(
                f"memory_limit={self.memory_limit!r} has no unit: Kubernetes reads it as "
                f"bytes; write {self.memory_limit}G or {self.memory_limit}Gi"
            )
        for name in ("backoff", "retry_window"):
            value = getattr(self, name)
            if not _DURATION.match(value):
                raise PlacementError(f"{name}={value!r}: expected whole seconds like '60s'")
        if self.backoff_factor < 1:
            raise PlacementError(f"backoff_factor={self.backoff_factor}: must be >= 1")
        # KFP passes the factor to Argo as fmt "%v" of a float64 (2.0 -> "2"), and
        # Argo reads it with strconv.Atoi, so 1.5 is a parse error on every retry:
        #   kubeflow/pipelines backend/src/v2/compiler/argocompiler/container.go:638
        #   (2.17.0) `Value: wfapi.AnyStringPtr(retryPolicy.GetBackoffFactor()),`
        #   argoproj/argo-workflows pkg/apis/workflow/v1alpha1/anystring.go:15 (v4.0.5)
        #   `return AnyString(fmt.Sprintf("%v", val))`
        #   argoproj/argo-workflows workflow/controller/operator.go:1055 (v4.0.5)
        #   `retryStrategyBackoffFactor, err := intstr.Int32(retryStrategy.Backoff.Factor)`
        #   argoproj/argo-workflows util/intstr/parametrizable.go:17 (v4.0.5)
        #   `i, err := strconv.Atoi(is.StrVal)`
        if float(self.backoff_factor) != int(self.backoff_factor):
            raise PlacementError(
                f"backoff_factor={self.backoff_factor}: must be a whole number; Argo parses "
                "the factor as an integer and fails the retry on anything else"
            )

    @property
    def effective_taint(self) -> Taint | None:
        """The taint this task tolerates (none on the on-demand pool)."""
        if self.pool == "on-demand":
            return self.taint
        return self.taint or DEFAULT_TAINTS[self.pool]

    @property
    def capacity(self) -> str:
        """The capacity kind the task runs on, for the ledger.

        ``compute-class`` for a class: which of its priorities a pod got only its
        node tells.
        """
        if self.queue:
            return "queued"  # the flavor Kueue admitted it with: only its node tells
        return "compute-class" if self.compute_class else self.pool

    @property
    def node_selector(self) -> dict[str, str]:
        """The node labels the task requires."""
        if self.compute_class:
            # Only the class: GKE rejects a pod that also selects a system label the
            # class sets (gke-accelerator, gke-spot) before 1.32.3-gke.1499000 ("About
            # custom ComputeClasses", https://cloud.google.com/kubernetes-engine/docs/concepts/about-custom-compute-classes).
            return {COMPUTE_CLASS_LABEL: self.compute_class}
        selector: dict[str, str] = {}
        if self.require_pool and self.pool in POOL_NODE_LABELS and not self.queue:
            key, value = POOL_NODE_LABELS[self.pool]
            selector[key] = value
        if self.gpu_count:
            selector[GPU_NODE_LABEL] = self.gpu_type
        if self.node_pool:
            selector["cloud.google.com/gke-nodepool"] = self.node_pool
        return selector

    def kueue_labels(self) -> dict[str, str]:
        """The labels that submit a job to Kueue (none without a queue)."""
        labels = {QUEUE_LABEL: self.queue} if self.queue else {}
        if self.priority_class:
            labels[PRIORITY_CLASS_LABEL] = self.priority_class
        return labels

    def with_(self, **changes) -> Placement:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    def tolerations(self) -> list[dict]:
        """The pod spec's ``tolerations`` (the toleration the KFP ``apply_placement`` sets too)."""
        if self.queue:
            return []  # the admitting ResourceFlavor's tolerations are added by Kueue
        taints = [self.effective_taint]
        if self.compute_class:
            # The class's nodes carry its taint (GKE's auto-created pools set it; a
            # manual pool must): tolerated here, not left to an injection the docs
            # do not promise. Spot nodes' taint is tolerated too, harmless if absent.
            taints.insert(0, Taint(COMPUTE_CLASS_LABEL, self.compute_class))
        return [
            {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
            for t in taints
            if t is not None
        ]

    def resources(self) -> dict:
        """The container's ``resources``: GPU, memory and CPU limits (as ``apply_placement``).

        GPUs are a limit only: Kubernetes takes an extended resource's request from
        its limit (https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/).
        """
        limits: dict[str, str] = {}
        if self.gpu_count:
            limits[GPU_RESOURCE] = str(self.gpu_count)
        if self.memory_limit:
            limits["memory"] = self.memory_limit
        if self.cpu_limit:
            limits["cpu"] = self.cpu_limit
        return {"limits": limits} if limits else {}


def check_retry_window(
    placement: Placement, run_timeout: str = RUN_TIMEOUT, what: str = ""
) -> None:
    """Refuses a retry window shorter than the run's timeout.

    KFP compiles ``backoff_max_duration`` into Argo's ``retryStrategy.backoff.maxDuration``:
      kubeflow/pipelines backend/src/v2/compiler/argocompiler/container.go:641 (2.17.0)
      `retryBackOffMaxDuration := wfapi.AnyStringPtr(
      retryPolicy.GetBackoffMaxDuration().Seconds)` and :674 `MaxDuration: backOffMaxDuration,`
    and Argo counts it from the start of the task's *first* attempt, refusing any
    retry after it and killing retry pods when it ends:
      argoproj/argo-workflows workflow/controller/operator.go:1037 (v4.0.5)
      `maxDurationDeadline = firstChildNode.StartedAt.Add(maxDuration)`
      :1040 `"Max duration limit exceeded"`, :1095 `opts.executionDeadline = maxDurationDeadline`
      (the retry pod's deadline: workflow/controller/workflowpod.go:343 `EnvVarDeadline`).
    So with the SDK's default (3600s, kfp/dsl/structures.py:381 in 2.17.0) a run
    preempted after its first hour is not retried at all.

    Raises:
        PlacementError: naming the window and the timeout.
    """
    if placement.retries and seconds(placement.retry_window) < seconds(run_timeout):
        who = f"{what} " if what else ""
        raise PlacementError(
            f"{who}retry_window={placement.retry_window!r} is shorter than the run timeout "
            f"{run_timeout!r}: Argo counts the window from the first attempt's start and "
            "retries no preemption after it; set retry_window >= the run timeout"
        )


# The copy steps are idempotent, so they may be preempted too: CPU only, retried.
COPY_PLACEMENT = Placement(gpu_count=0, memory_limit="4G", backoff="30s", require_pool=False)
# The on-demand fall-back pool: the same GPUs, no toleration, fewer retries.
ON_DEMAND_PLACEMENT = Placement(pool="on-demand", retries=2)
# The JobSet-engine launcher: a small CPU pod on the on-demand pool (no toleration, so
# no spot node), retried by KFP only to re-attach to its JobSet after its own pod failed.
LAUNCHER_PLACEMENT = Placement(
    pool="on-demand", gpu_count=0, memory_limit="1G", retries=5, backoff="30s"
)
# kfp.local: no GPUs (kfp.local only warns about resources), short whole-second backoff.
# kfp.local reads retry_window as a cap on each delay, which 1 s, 2 s, 4 s never reach:
#   kubeflow/pipelines sdk/python/kfp/local/orchestrator/task_executor.py:171-172 (2.17.0)
#   `delay = backoff_duration * (backoff_factor**attempt)` / `delay = min(delay,
#   backoff_max_duration)`.
LOCAL_PLACEMENT = Placement(
    pool="preemptible", gpu_count=0, memory_limit="", retries=3, backoff="1s"
)
