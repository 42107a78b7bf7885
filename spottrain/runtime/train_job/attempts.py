"""The pods a launcher saw end, one :class:`PodAttempt` each, and the ledger's view.

Only the launcher sees the nodes and how each pod ended; the chief's trainer writes
the records. :func:`gang_attempts` groups the pods of one gang run (a JobSet
generation, or a Job) under its chief, for ``spottrain.ledger.annotate``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from spottrain.ledger import usage as usage_of
from spottrain.runtime.train_job import names, status


@dataclass
class PodAttempt:
    """One finished pod of a gang: where it ran and how it ended."""

    job: str
    pod: str
    index: int | None
    node: str
    node_kind: str
    disruption: str
    exit_code: int | None
    started: float | None
    finished: float | None
    # What it ran on (spottrain.ledger.usage.from_node): the node's machine, zone and GPUs.
    usage: dict[str, Any] = field(default_factory=dict)


def from_pod(pod: dict, gang: str, node_kind: str, node: dict | None = None) -> PodAttempt:
    """The ended ``pod`` of ``gang`` (its generation's name), run on a ``node_kind`` node.

    ``node``: the Node object, when readable, for what the pod ran on.
    """
    term = status.terminated(pod) or {}
    return PodAttempt(
        job=gang,
        pod=pod["metadata"]["name"],
        index=status.pod_index(pod),
        node=(pod.get("spec") or {}).get("nodeName") or "",
        node_kind=node_kind,
        disruption=status.disruption(pod),
        exit_code=status.exit_code(pod),
        started=status.epoch(term.get("startedAt")),
        finished=status.epoch(term.get("finishedAt")),
        usage=usage_of.from_node(node, pod, names.CONTAINER),
    )


def stopped(pod: dict, gang: str, node_kind: str, node: dict | None, ended: float,
            why: str) -> PodAttempt:  # fmt: skip
    """A running ``pod`` of ``gang`` that was gone at ``ended``, stopped for ``why``.

    Kueue's eviction suspends the Job, whose controller deletes the pods: their kubelet
    ends and removes them within a look, so the launcher may never see them ended.
    """
    running = status.container_state(pod, "running") or {}
    return replace(
        from_pod(pod, gang, node_kind, node),
        disruption=why,
        started=status.epoch(running.get("startedAt")),
        finished=ended,
    )


def gang_attempts(attempts: Sequence[PodAttempt]) -> list[dict]:
    """One entry per chief pod, with its peers' ends (for ``ledger.annotate``)."""
    out = []
    for chief in attempts:
        if chief.index != 0 or chief.started is None or chief.finished is None:
            continue
        gang = [
            a
            for a in attempts
            if a.job == chief.job
            and a.started is not None
            and a.finished is not None
            # Overlapping runs; a gang restart ends one run where the next begins.
            and a.started < chief.finished
            and a.finished > chief.started
            and (a.index != 0 or a is chief)
        ]
        out.append(
            {
                "started": chief.started,
                "finished": chief.finished,
                "node": chief.node,
                "node_kind": chief.node_kind,
                # "<jobset>/<restart attempt>": its pods' JobSet labels, for the bill.
                "gang": chief.job,
                **chief.usage,
                "disruption": next((a.disruption for a in gang if a.disruption), ""),
                "pod_exit_codes": {str(a.index): a.exit_code for a in gang},
                "pods": [
                    {
                        k: getattr(a, k)
                        for k in ("pod", "index", "node", "node_kind", "disruption", "exit_code")
                    }
                    for a in gang
                ],  # fmt: skip
            }
        )
    return out
