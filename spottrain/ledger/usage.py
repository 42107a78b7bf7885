"""What one attempt ran on: location, machine type, GPU type and count (issue 34).

The one owner of "usage of an attempt": the fields a ledger record carries
(:data:`FIELDS`) and where each engine learns them. The standard library and
:mod:`spottrain.placement` only, so the trainer image (the ledger, the JobSet
launcher) imports it without kfp.

* **JobSet engine**: the chief pod's node (:func:`from_node`), read by the launcher.
  Well-known labels the kubelet or cloud provider sets on every node
  (https://kubernetes.io/docs/reference/labels-annotations-taints/:
  ``node.kubernetes.io/instance-type``, ``topology.kubernetes.io/zone``,
  ``topology.kubernetes.io/region``), GKE's accelerator label on GPU nodes
  (``cloud.google.com/gke-accelerator``, :data:`spottrain.placement.GPU_NODE_LABEL`),
  and the GPUs the pod asked for (its ``nvidia.com/gpu`` limit: Kubernetes takes an
  extended resource's request from its limit,
  https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/).
* **Vertex**: the custom job's own spec (:func:`from_vertex_pool`): a worker pool's
  ``machine_spec`` (``machine_type``, ``accelerator_type``, ``accelerator_count``:
  aiplatform_v1 ``MachineSpec``) and the job's region, passed to the pool's
  replicas in :data:`USAGE_ENV` by :func:`spottrain.runtime.vertex_job.job_for`.
* **GKE in-pod**: the compiled placement's GPUs (:func:`from_placement`), in
  :data:`USAGE_ENV` on the train task; a KFP task has no machine type or zone at
  compile time, so those stay unknown (its node's pool decides them).
* **Locally** (``make run``): an assumed machine in :data:`USAGE_ENV`, said as such.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from spottrain.placement import GPU_NODE_LABEL, GPU_RESOURCE

log = logging.getLogger(__name__)

# JSON object of FIELDS (any subset); the ledger copies it into each record it opens.
USAGE_ENV = "SPOTTRAIN_USAGE"
FIELDS = ("location", "machine_type", "gpu_type", "gpu_count", "platform", "usage_from")
PLATFORMS = ("gce", "vertex")
# What a local run (make run, make run-trainer) is priced as: it has no machine type.
ASSUMED_LOCAL = (
    '{"gpu_count":1,"gpu_type":"nvidia-tesla-t4","location":"us-central1",'
    '"machine_type":"n1-standard-8","platform":"gce",'
    '"usage_from":"assumed (a local run has no machine type)"}'
)

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"


def fields(
    *,
    location: str = "",
    machine_type: str = "",
    gpu_type: str = "",
    gpu_count: int = 0,
    platform: str = "gce",
    usage_from: str = "",
) -> dict[str, Any]:
    """A record's usage fields, the empty ones left out (unknown, not zero).

    Raises:
        ValueError: on a field of the wrong type or value, naming it.
    """
    for name, value in (("location", location), ("machine_type", machine_type),
                        ("gpu_type", gpu_type), ("usage_from", usage_from)):  # fmt: skip
        if not isinstance(value, str):
            raise ValueError(f"{name}={value!r}: expected text")
    if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or gpu_count < 0:
        raise ValueError(f"gpu_count={gpu_count!r}: expected a whole number >= 0")
    if platform not in PLATFORMS:
        raise ValueError(f"platform={platform!r}: expected one of {', '.join(PLATFORMS)}")
    out: dict[str, Any] = {
        "location": location, "machine_type": machine_type, "gpu_type": gpu_type,
        "gpu_count": gpu_count, "platform": platform, "usage_from": usage_from,
    }  # fmt: skip
    return {k: v for k, v in out.items() if v or k in ("gpu_count", "platform")}


def env_value(**values: Any) -> str:
    """The :data:`USAGE_ENV` value for these :func:`fields` (checked)."""
    return json.dumps(fields(**values), sort_keys=True, separators=(",", ":"))


def from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """The usage fields in :data:`USAGE_ENV` (``{}``: unset, or bad, said in one line)."""
    raw = environ.get(USAGE_ENV, "").strip()
    if not raw:
        return {}
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            raise ValueError(f"unknown field(s) {', '.join(unknown)}; known: {', '.join(FIELDS)}")
        return fields(**data)
    except (ValueError, TypeError) as err:
        # Prices never fail a run: the attempt's usage is unknown, and says why.
        log.warning("%s=%r ignored: %s", USAGE_ENV, raw, err)
        return {}


def pod_gpus(pod: Mapping[str, Any] | None, container: str = "") -> int:
    """GPUs a pod's containers (or the one named ``container``) have as their limit."""
    total = 0
    for c in ((pod or {}).get("spec") or {}).get("containers") or []:
        if container and c.get("name") != container:
            continue
        limit = ((c.get("resources") or {}).get("limits") or {}).get(GPU_RESOURCE)
        try:
            total += int(str(limit)) if limit is not None else 0
        except ValueError:
            log.warning("pod GPU limit %s=%r is not a whole number: not counted", GPU_RESOURCE,
                        limit)  # fmt: skip
    return total


def from_node(
    node: Mapping[str, Any] | None, pod: Mapping[str, Any] | None = None, container: str = ""
) -> dict[str, Any]:
    """The usage of a pod on ``node`` (GKE's node labels, the pod's GPU limit).

    A zone where the node has one, else its region; ``{}`` without the node.
    """
    if node is None:
        return {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    return fields(
        location=labels.get(ZONE_LABEL) or labels.get(REGION_LABEL) or "",
        machine_type=labels.get(INSTANCE_TYPE_LABEL, ""),
        gpu_type=labels.get(GPU_NODE_LABEL, ""),
        gpu_count=pod_gpus(pod, container) if labels.get(GPU_NODE_LABEL) else 0,
        platform="gce",
        usage_from="node",
    )


def from_vertex_pool(pool: Mapping[str, Any], location: str) -> dict[str, Any]:
    """The usage of one Vertex worker pool's replicas (its ``machine_spec``, the job's region).

    Takes the JSON names (``machine_spec``, ``machine_type``...) as GCPC's payload has
    them; Vertex bills custom training under its own SKUs (``platform="vertex"``).
    """
    spec = pool.get("machine_spec") or pool.get("machineSpec") or {}
    gpu_type = spec.get("accelerator_type") or spec.get("acceleratorType") or ""
    if gpu_type == "ACCELERATOR_TYPE_UNSPECIFIED":
        gpu_type = ""
    count = spec.get("accelerator_count") or spec.get("acceleratorCount") or 0
    return fields(
        location=location,
        machine_type=spec.get("machine_type") or spec.get("machineType") or "",
        gpu_type=gpu_type,
        gpu_count=int(count) if gpu_type else 0,
        platform="vertex",
        usage_from="vertex job",
    )


def from_placement(gpu_type: str, gpu_count: int) -> dict[str, Any]:
    """The usage a compiled GKE task knows: its GPUs (machine and zone: its node's)."""
    return fields(
        gpu_type=gpu_type if gpu_count else "",
        gpu_count=gpu_count,
        platform="gce",
        usage_from="placement",
    )


def as_usage(record: Mapping[str, Any]):
    """A ledger record's usage as the price source's :class:`spottrain.pricing.Usage`."""
    from spottrain.pricing import Usage

    return Usage(
        location=str(record.get("location") or ""),
        machine_type=str(record.get("machine_type") or ""),
        gpu_type=str(record.get("gpu_type") or ""),
        gpu_count=int(record.get("gpu_count") or 0),
        platform=str(record.get("platform") or "gce"),
    )


def ran_on(records: Sequence[Mapping[str, Any]]) -> str:
    """What a run ran on and how that is known, from its first record that says (or ``""``)."""
    used = next((r for r in records if "usage_from" in r), None)
    return f"{describe(used)}, {used['usage_from']}" if used is not None else ""


def describe(record: Mapping[str, Any]) -> str:
    """One short phrase: ``n1-standard-8 + 1 nvidia-tesla-t4 in us-central1``."""
    machine = record.get("machine_type") or "machine type unknown"
    gpus = f" + {record['gpu_count']} {record['gpu_type']}" if record.get("gpu_type") else ""
    where = f" in {record['location']}" if record.get("location") else ""
    return f"{machine}{gpus}{where}"
