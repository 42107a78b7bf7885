"""Reading Pod, Node and condition fields as the Kubernetes documentation shows them.

* A disrupted pod has the condition ``DisruptionTarget`` with a reason such as
  ``PreemptionByScheduler``, ``DeletionByTaintManager``, ``EvictionByEvictionAPI``,
  ``DeletionByPodGC`` or ``TerminationByKubelet`` (graceful node shutdown)
  (https://kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions).
* A container's end is ``status.containerStatuses[].state.terminated.exitCode``
  (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#container-state-terminated).
* A container the kubelet cannot start waits with a reason: ``ErrImagePull``,
  ``ImagePullBackOff``, ``InvalidImageName``, ``ErrImageNeverPull``,
  ``ImageInspectError`` (kubernetes ``pkg/kubelet/images/types.go``),
  ``CreateContainerConfigError`` (a missing Secret or ConfigMap),
  ``CreateContainerError`` (``pkg/kubelet/container/sync_result.go``); one whose
  command cannot run ends ``terminated`` with reason ``StartError`` (containerd)
  or ``ContainerCannotRun`` (Docker).
* GKE labels spot nodes ``cloud.google.com/gke-spot=true`` and preemptible nodes
  ``cloud.google.com/gke-preemptible=true`` (``spottrain.placement.POOL_NODE_LABELS``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from spottrain.placement import POOL_NODE_LABELS
from spottrain.runtime.train_job import names


def condition(obj: dict, kind: str) -> dict | None:
    """The status condition of type ``kind`` whose status is ``"True"``, if any."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return cond
    return None


def pod_index(pod: dict) -> int | None:
    """The pod's completion index (``None`` outside an Indexed Job)."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(names.INDEX_ANNOTATION)
    return int(raw) if raw is not None and str(raw).isdigit() else None


def container_state(pod: dict, state: str, container: str = names.CONTAINER) -> dict | None:
    """The trainer container's ``state.<state>`` (``running``, ``terminated``), if in it."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container:
            return (status.get("state") or {}).get(state)
    return None


def terminated(pod: dict, container: str = names.CONTAINER) -> dict | None:
    """The trainer container's ``state.terminated`` (exit code, start, finish), if it ended."""
    return container_state(pod, "terminated", container)


def exit_code(pod: dict, container: str = names.CONTAINER) -> int | None:
    """The trainer container's exit code once it terminated."""
    term = terminated(pod, container)
    return int(term.get("exitCode")) if term is not None else None


def disruption(pod: dict) -> str:
    """The ``DisruptionTarget`` reason (``""`` when the pod was not disrupted)."""
    cond = condition(pod, "DisruptionTarget")
    return (cond.get("reason") or "DisruptionTarget") if cond else ""


# Waiting reasons of a container that has not run and will not without a fix.
START_FAILURES = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "ImageInspectError",
        "CreateContainerConfigError",
        "CreateContainerError",
        "CrashLoopBackOff",  # restartPolicy Never makes it unlikely, but it says the same
    }
)
# Terminated reasons of a container whose command never ran.
NEVER_RAN = frozenset({"StartError", "ContainerCannotRun"})


def start_failure(pod: dict) -> tuple[str, str, bool] | None:
    """Why the pod's containers cannot start: (reason, message, final) or ``None``.

    ``final``: the command could not run at all (the pod has ended); otherwise the
    container is still waiting and the kubelet keeps retrying (an image pull may
    yet succeed), so the caller gives it a bounded time.
    """
    st = pod.get("status") or {}
    for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
        state = cs.get("state") or {}
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in START_FAILURES:
            return waiting["reason"], waiting.get("message") or "", False
        term = state.get("terminated") or {}
        if term.get("reason") in NEVER_RAN:
            return term["reason"], term.get("message") or "", True
    return None


def epoch(value: Any) -> float | None:
    """An API timestamp (RFC 3339 text, or a datetime from the client) as epoch seconds."""
    if not value:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def is_done(pod: dict) -> bool:
    """Whether the pod has ended (its phase is final)."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


# GKE's node label for nodes consuming a reservation (``cloud.google.com/reservation-name``,
# the system label behind a ComputeClass's ``reservations.specific.name``, "About custom
# ComputeClasses"); spot, preemptible and flex-start nodes are told by POOL_NODE_LABELS.
RESERVATION_LABEL = "cloud.google.com/reservation-name"


def node_kind(node: dict | None) -> str:
    """The capacity kind of a node, from GKE's node labels.

    Returns:
        ``spot``, ``preemptible``, ``flex-start``, ``reservation`` or ``on-demand``;
        ``unknown`` without the node.
    """
    if node is None:
        return "unknown"
    labels = (node.get("metadata") or {}).get("labels") or {}
    for kind, (key, value) in POOL_NODE_LABELS.items():
        if labels.get(key) == value:
            return kind
    if labels.get(RESERVATION_LABEL):
        return "reservation"
    return "on-demand"
