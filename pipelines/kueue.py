"""Kueue's queue for the training gangs on a shared cluster, from the capacity ladder.

``make gke-kueue`` prints (``EXECUTE=1`` applies) what a cluster admin creates once for
the JobSet engine's ``queue`` (``Placement.queue``), in the API Kueue v0.17.0 stores,
``kueue.x-k8s.io/v1beta2`` (every CRD of it serves v1beta1 deprecated and v1beta2 as
storage: config/components/crd/bases/kueue.x-k8s.io_clusterqueues.yaml:38-40, :1526-1527):

* one **ResourceFlavor** per rung of the ladder, whose node labels and tolerations
  Kueue adds to the pods of a gang it admits on that flavor (pkg/podset/podset.go:56-92):
  ``spot`` selects GKE's spot label and tolerates our spot pools' taint; ``flex-start``
  selects and tolerates our flex-start pools'; ``on-demand`` adds nothing (the pods
  select their GPU, and without a toleration they stay off the tainted spot pools);
* a **ClusterQueue** whose one resource group lists the flavors in the ladder's order
  (Kueue admits a gang on the first flavor with quota for all of it), with a GPU quota
  per flavor, ``preemption.withinClusterQueue: LowerPriority``, and for a flex-start
  rung the ProvisioningRequest admission check on that flavor only
  (``admissionChecksStrategy``, clusterqueue_types.go:120, :148-170);
* the **AdmissionCheck** and **ProvisioningRequestConfig** of that check: GKE's
  flex-start with queued provisioning (class ``queued-provisioning.gke.io``, "Run a
  large-scale workload with flex-start with queued provisioning",
  https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest);
* a **LocalQueue** in the pipelines' namespace: what ``queue`` names.

What a queue cannot say: a rung's patience (Kueue tries the next flavor at once when
one has no quota, and does not wait for nodes), its place, or a reservation; such a
ladder is refused in one line (the JobSet launcher's move or a ComputeClass say them).
Every rung must give the gang the same GPUs and workers (MultiWorkerMirroredStrategy).
"""

from __future__ import annotations

import math
import re

from spottrain.ladder import Ladder, LadderError
from spottrain.placement import (
    FLEX_START_TAINT,
    GPU_RESOURCE,
    POOL_NODE_LABELS,
    SPOT_TAINT,
    PlacementError,
    check_gpu_type,
)

API = "kueue.x-k8s.io/v1beta2"
FLAVORS = ("spot", "flex-start", "on-demand")
PROVISIONING_CLASS = "queued-provisioning.gke.io"
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
CHECK_NAME = "spottrain-flex-start"
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


# GPUs each flavor may hold when the admin gives no quota (make gke-kueue: at least one gang).
DEFAULT_GPU_QUOTA = 8


def _check_name(what: str, name: str) -> None:
    if not _NAME.fullmatch(name):
        raise PlacementError(
            f"{what} {name!r}: expected lower-case letters, digits and '-', at most 63"
        )


def _flavor(kind: str) -> dict:
    spec: dict = {}
    taint = {"spot": SPOT_TAINT, "flex-start": FLEX_START_TAINT}.get(kind)
    if taint is not None:
        key, value = POOL_NODE_LABELS[kind]
        spec["nodeLabels"] = {key: value}
        spec["tolerations"] = [
            {"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}
        ]
    return {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": kind}, "spec": spec}


def from_ladder(
    ladder: Ladder,
    *,
    namespace: str,
    local_queue: str = "spottrain",
    cluster_queue: str = "spottrain",
    gpu_quota: int = DEFAULT_GPU_QUOTA,
    cpu_quota: str = "96",
    memory_quota: str = "1000Gi",
) -> list[dict]:
    """The flavors, the ClusterQueue, its admission check (flex-start) and the LocalQueue.

    Args:
        ladder: Its rungs' capacities (spot, flex-start, on-demand) in order.
        namespace: Where the pipelines run (the LocalQueue's namespace).
        local_queue: What a run's ``queue`` names.
        cluster_queue: The ClusterQueue holding the quota.
        gpu_quota: GPUs each flavor may hold at once (the ClusterQueue's nominal quota).
        cpu_quota: The CPUs each flavor may hold (Kueue admits only pods whose every
            requested resource a group covers).
        memory_quota: The memory each flavor may hold.

    Raises:
        LadderError: a rung a queue cannot express (one line naming it).
        PlacementError: a name or quota Kubernetes or Kueue would refuse.
    """
    for what, name in (("local queue", local_queue), ("cluster queue", cluster_queue),
                       ("namespace", namespace)):  # fmt: skip
        _check_name(what, name)
    if gpu_quota < 1:
        raise PlacementError(f"gpu quota {gpu_quota}: a training queue needs at least 1 GPU")
    first = ladder[0]
    kinds: list[str] = []
    for n, rung in enumerate(ladder.rungs, 1):
        check_gpu_type(rung.gpu_type)
        if rung.capacity not in FLAVORS:
            raise LadderError(
                f"ladder rung {n} ({rung}): a Kueue queue has flavors for "
                f"{', '.join(FLAVORS)}; a {rung.capacity} rung needs a ComputeClass"
            )
        if rung.location or rung.patience_s != math.inf:
            raise LadderError(
                f"ladder rung {n} ({rung}): a queue admits on the first flavor with quota at "
                "once and only in the cluster's location; a patience or a place of its own "
                "needs the JobSet launcher's move"
            )
        if (rung.gpu_type, rung.gpu_count, rung.workers) != (
            first.gpu_type, first.gpu_count, first.workers,
        ):  # fmt: skip
            raise LadderError(
                f"ladder rung {n} ({rung}) differs from rung 1 ({first}) in GPUs or workers: "
                "MultiWorkerMirroredStrategy needs equal GPUs in one gang"
            )
        if rung.capacity in kinds:
            raise LadderError(f"ladder rung {n} ({rung}): a second {rung.capacity} rung")
        kinds.append(rung.capacity)
    resources = ["cpu", "memory", GPU_RESOURCE]
    quota = {"cpu": cpu_quota, "memory": memory_quota, GPU_RESOURCE: str(gpu_quota)}
    spec: dict = {
        "namespaceSelector": {},  # nil admits no namespace (clusterqueue_types.go:99-104)
        "queueingStrategy": "BestEffortFIFO",
        "preemption": {"withinClusterQueue": "LowerPriority"},
        "resourceGroups": [{
            "coveredResources": resources,
            "flavors": [
                {"name": kind, "resources": [{"name": r, "nominalQuota": quota[r]}
                                             for r in resources]}
                for kind in kinds
            ],
        }],
    }  # fmt: skip
    out = [_flavor(kind) for kind in kinds]
    if "flex-start" in kinds:
        spec["admissionChecksStrategy"] = {
            "admissionChecks": [{"name": CHECK_NAME, "onFlavors": ["flex-start"]}]
        }
        out += [
            {"apiVersion": API, "kind": "ProvisioningRequestConfig",
             "metadata": {"name": CHECK_NAME},
             "spec": {"provisioningClassName": PROVISIONING_CLASS,
                      "managedResources": [GPU_RESOURCE]}},
            {"apiVersion": API, "kind": "AdmissionCheck", "metadata": {"name": CHECK_NAME},
             "spec": {"controllerName": PROVISIONING_CONTROLLER,
                      "parameters": {"apiGroup": "kueue.x-k8s.io",
                                     "kind": "ProvisioningRequestConfig", "name": CHECK_NAME}}},
        ]  # fmt: skip
    out.append(
        {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": cluster_queue},
         "spec": spec}
    )  # fmt: skip
    out.append(
        {"apiVersion": API, "kind": "LocalQueue",
         "metadata": {"name": local_queue, "namespace": namespace},
         "spec": {"clusterQueue": cluster_queue}}
    )  # fmt: skip
    return out


def render(objects: list[dict]) -> str:
    """The manifests as one multi-document YAML (``kubectl apply --server-side -f -``)."""
    import yaml

    return yaml.safe_dump_all(objects, sort_keys=False)
