"""One look at a JobSet and its pods, as :class:`decide.Seen` (pure; no I/O).

Inputs are the API's own dicts (camelCase, as ``kubectl get -o json`` shows them):
the JobSet (``None``: there is none of that name) and its pods (JobSet labels each
with ``jobset.sigs.k8s.io/jobset-name``, api/jobset/v1alpha2/jobset_types.go:24).
What the launcher remembers between looks is not here (:class:`decide.Memory`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from spottrain import exits
from spottrain.placement import QUEUE_LABEL
from spottrain.runtime.train_job import queue, status
from spottrain.runtime.train_job.decide import UNANSWERED_AFTER, Seen, Settings

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"  # jobset_types.go:24
RESTART_LABEL = "jobset.sigs.k8s.io/restart-attempt"  # pkg/constants/constants.go:34
# When the run's first JobSet was made (epoch s), carried to the JobSets after it:
# the run deadline counts from there, so a move buys no time.
RUN_STARTED_ANNOTATION = "spottrain.dev/run-started"
# The launcher that follows the JobSet now (its pod/pid): an older one leaves it alone.
HOLDER_ANNOTATION = "spottrain.dev/launcher"
# Kueue's evictions of the gang the launchers have said, ``Preempted=3``: the count is
# Kueue's (queue.evictions), this only how much of it was said, so that a launcher
# started again says only what Kueue counted since.
EVICTIONS_SAID_ANNOTATION = "spottrain.dev/kueue-evictions-said"


def generation(pod: Mapping) -> int:
    """The JobSet restart a pod belongs to (its ``restart-attempt`` label)."""
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(RESTART_LABEL, "0")
    return int(value) if value.isdigit() else 0


def start_failures(
    pods: Sequence[Mapping], since: Mapping[str, float], now: float
) -> dict[str, float]:
    """``since`` kept for the pods that cannot start now, the others dropped.

    The API keeps no time for a waiting reason, so each is timed from when the
    launcher first saw it.
    """
    out = {}
    for pod in pods:
        if status.start_failure(dict(pod)) is not None:
            key = pod["metadata"].get("uid") or pod["metadata"]["name"]
            out[key] = since.get(key, now)
    return out


def _start_failure(pods: Sequence[Mapping], since: Mapping[str, float], now: float):
    worst = None
    for pod in pods:
        failure = status.start_failure(dict(pod))
        key = pod["metadata"].get("uid") or pod["metadata"]["name"]
        if failure is None or key not in since:
            continue
        reason, message, final = failure
        detail = " ".join(message.split())[:300]
        line = f"pod {pod['metadata']['name']}: {reason}" + (f" ({detail})" if detail else "")
        seen = (final, now - since[key], line)
        worst = max(worst, seen) if worst else seen
    return worst


def unanswered(
    pods: Sequence[Mapping], now: float, after: float = UNANSWERED_AFTER
) -> tuple[tuple[str, str], ...]:
    """Pods still there ``after`` seconds past their deletion's deadline, (pod, node).

    A pod's ``deletionTimestamp`` is when its grace period ends (the API sets it to the
    delete's time plus the grace), so a kubelet that answers has ended it by then.
    """
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        due = status.epoch(meta.get("deletionTimestamp"))
        if due is not None and now - due >= after:
            out.append((meta["name"], (pod.get("spec") or {}).get("nodeName") or "?"))
    return tuple(sorted(out))


def run_started(jobset: Mapping) -> float | None:
    """When the run began: the annotation the launcher sets, else the JobSet's creation."""
    meta = jobset.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(RUN_STARTED_ANNOTATION, "")
    try:
        return float(raw)
    except ValueError:
        return status.epoch(meta.get("creationTimestamp"))


def evictions_said(jobset: Mapping | None) -> tuple[tuple[str, int], ...]:
    """Kueue's evictions the launchers said of the gang (``EVICTIONS_SAID_ANNOTATION``)."""
    raw = (((jobset or {}).get("metadata") or {}).get("annotations") or {}).get(
        EVICTIONS_SAID_ANNOTATION, ""
    )
    said = {}
    for part in raw.split(","):
        reason, _, count = part.partition("=")
        if reason.strip() and count.strip().isdigit():
            said[reason.strip()] = int(count)
    return tuple(sorted(said.items()))


def evictions_annotation(said: Sequence[tuple[str, int]]) -> str:
    """The ``EVICTIONS_SAID_ANNOTATION`` value of ``said`` (:func:`evictions_said` reads it)."""
    return ",".join(f"{reason}={count}" for reason, count in said)


def is_ours(jobset: Mapping, expected: Mapping[str, str]) -> bool:
    """Whether the JobSet carries every label of ``expected`` (the launcher's own)."""
    labels = (jobset.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in expected.items())


def unschedulable_since(pod: Mapping) -> float | None:
    """When the scheduler last said the pod fits nowhere (epoch s); ``None``: it did not."""
    if (pod.get("status") or {}).get("phase") != "Pending":
        return None
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if (cond.get("type"), cond.get("status"), cond.get("reason")) == (
            "PodScheduled",
            "False",
            "Unschedulable",
        ):
            return status.epoch(cond.get("lastTransitionTime")) or status.epoch(
                (pod.get("metadata") or {}).get("creationTimestamp")
            )
    return None


def container_exit(pod: Mapping) -> tuple[int, float] | None:
    """The trainer container's (exit code, finish time) in a Failed pod."""
    if (pod.get("status") or {}).get("phase") != "Failed":
        return None
    ended = status.terminated(dict(pod))
    if ended is None:
        return None
    return int(ended.get("exitCode", 0)), status.epoch(ended.get("finishedAt")) or 0.0


def failed_exit_code(pods: Sequence[Mapping]) -> int | None:
    """The exit code a failed JobSet ended on.

    A fatal one if any pod of its newest generation exited with one (that pod ended
    it), else the last pod to fail.
    """
    if not pods:
        return None
    newest = max(generation(p) for p in pods)
    ended = [e for p in pods if generation(p) == newest and (e := container_exit(p)) is not None]
    fatal = [code for code, _ in ended if code in exits.FATAL]
    if fatal:
        return fatal[0]
    return max(ended, key=lambda e: e[1])[0] if ended else None


def selector_of(jobset: Mapping) -> str:
    """What the workers' pods select, for the Unschedulable line."""
    try:
        (rjob,) = jobset["spec"]["replicatedJobs"]
        pod_spec = rjob["template"]["spec"]["template"]["spec"]
    except (KeyError, TypeError, ValueError):
        return "its node selector"
    chosen = pod_spec.get("nodeSelector") or {}
    return ", ".join(f"{k}={v}" for k, v in sorted(chosen.items())) or "any node"


def observe(
    jobset: Mapping | None,
    pods: Sequence[Mapping],
    *,
    now: float,
    ours: Mapping[str, str],
    settings: Settings | None = None,
    starts: Mapping[str, float] | None = None,
    sigterm: bool = False,
    own_pod_disrupted: bool = False,
    holder: str = "",
    earlier: Mapping[str, tuple[Mapping, Sequence[Mapping]]] | None = None,
    workload: Mapping | None = None,
    local_queue: Mapping | None = None,
) -> Seen:
    """The launcher's one look, for :func:`decide.decide`.

    ``starts``: when each pod that cannot start was first seen so (:func:`start_failures`).
    ``holder``: this launcher's name, to tell a JobSet another launcher claimed.
    ``earlier``: a move's earlier gangs still there, name → (their JobSet, its pods).
    ``settings``: the launcher's (``unanswered_after``); default: :class:`Settings`'s.
    ``workload``, ``local_queue``: Kueue's Workload of a queued JobSet and its LocalQueue.
    """
    settings = settings or Settings()
    base = Seen(state="missing", sigterm=sigterm, own_pod_disrupted=own_pod_disrupted)
    if earlier:
        after = settings.unanswered_after
        stuck = [u for _, ps in earlier.values() for u in unanswered(ps, now, after)]
        due = [
            status.epoch((js.get("metadata") or {}).get("deletionTimestamp"))
            for js, _ in earlier.values()
        ]
        base = replace(
            base,
            earlier=tuple(sorted(earlier)),
            earlier_unanswered=tuple(sorted(stuck)),
            moving_seconds=max((now - t for t in due if t is not None), default=0.0),
        )
    if jobset is None:
        return base
    meta = jobset.get("metadata") or {}
    st = jobset.get("status") or {}
    base = replace(
        base,
        restarts=int(st.get("restarts") or 0),
        restarts_counted=int(st.get("restartsCountTowardsMax") or 0),
        max_restarts=int(((jobset.get("spec") or {}).get("failurePolicy") or {}).get(
            "maxRestarts", 0
        ) or 0),
        selector=selector_of(jobset),
        age_seconds=max(0.0, now - (run_started(jobset) or now)),
        suspended=bool((jobset.get("spec") or {}).get("suspend")),
    )  # fmt: skip
    if not is_ours(jobset, ours):
        return replace(base, state="foreign")
    claimed = (meta.get("annotations") or {}).get(HOLDER_ANNOTATION, "")
    if holder and claimed and claimed != holder:
        base = replace(base, held_by=claimed)
    base = replace(base, unanswered=unanswered(pods, now, settings.unanswered_after))
    deleted_at = status.epoch(meta.get("deletionTimestamp"))
    if deleted_at is not None:
        stuck = tuple(
            sorted(p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp"))
        )
        waited = max(0.0, now - deleted_at)
        return replace(base, state="deleting", deleting_seconds=waited, stuck_pods=stuck)
    if status.condition(dict(jobset), "Completed"):
        return replace(base, state="completed")
    if status.condition(dict(jobset), "Failed"):
        return replace(base, state="failed", exit_code=failed_exit_code(pods))
    if name := (meta.get("labels") or {}).get(QUEUE_LABEL, ""):
        base = replace(base, queue=name, queued=queue.queued(jobset, workload, local_queue, now))
    waits = [now - since for p in pods if (since := unschedulable_since(p)) is not None]
    base = replace(
        base, state="running", unschedulable_seconds=max(0.0, max(waits)) if waits else None
    )
    failing = _start_failure(pods, starts or {}, now)
    if failing is None:
        return base
    final, waited, line = failing
    return replace(
        base, start_failure=line, start_failure_seconds=waited, start_failure_final=final
    )
