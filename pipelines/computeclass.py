"""A GKE custom ComputeClass for the training pods: reservation, spot, flex-start, on-demand.

Since GKE 1.30.3 a ComputeClass is an ordered list of node configurations the
cluster autoscaler follows whenever it creates nodes for pods that select the class
(``nodeSelector: cloud.google.com/compute-class: <name>``, see
``Placement.compute_class``); with ``activeMigration.optimizeRulePriority`` GKE moves
pods back to a higher priority (spot) when it has capacity again, by draining the
node they run on. The fields used here, from GKE's ComputeClass CRD reference
(https://cloud.google.com/kubernetes-engine/docs/reference/crds/computeclass) and
"About custom ComputeClasses"
(https://cloud.google.com/kubernetes-engine/docs/concepts/about-custom-compute-classes):

* ``spec.priorities[]``: ``machineFamily``, ``gpu.{type,count,driverVersion}``,
  ``spot``, ``flexStart.enabled`` (not with ``spot``; GKE 1.32.2-gke.1652000+ for
  GPUs), ``reservations.{affinity,specific[].{name,project}}`` (a non-TPU
  reservation needs ``machineType`` or ``machineFamily``); the Spot-only
  ``nodeSystemConfig.kubeletConfig.shutdownGracePeriodSeconds`` (0, 30 or 120) and
  ``shutdownGracePeriodCriticalPodsSeconds`` are in Google's CRD types
  (GoogleCloudPlatform/compute-class-api ``api/cloud.google.com/v1/types.go``) and
  GKE's Spot VMs page (120 s from control plane 1.35.0-gke.1171000 for node pools; no
  version found for classes), so they are written only when asked for.
* ``spec.activeMigration.optimizeRulePriority``, ``spec.nodePoolAutoCreation.enabled``
  (GKE creates the node pools), ``spec.whenUnsatisfiable`` (``DoNotScaleUp``: a pod
  waits rather than landing on the cluster's default nodes without a GPU; the
  default only from GKE 1.33, so written out).

Spot VMs cannot consume a reservation (Compute Engine, "Consume reservations",
Limitations), so the reservation is its own, first, priority.
"""

from __future__ import annotations

from spottrain.ladder import Ladder, LadderError, Rung
from spottrain.placement import (
    DEFAULT_SPOT_GRACE_SECONDS,
    PlacementError,
    check_compute_class_name,
    check_gpu_type,
    check_reservation,
    check_spot_grace,
    spot_node_system_config,
)

# The Compute Engine machine family each GPU attaches to (N1 takes the older GPUs).
MACHINE_FAMILIES = {
    "nvidia-tesla-t4": "n1",
    "nvidia-tesla-v100": "n1",
    "nvidia-tesla-p100": "n1",
    "nvidia-tesla-p4": "n1",
    "nvidia-tesla-k80": "n1",
    "nvidia-tesla-a100": "a2",
    "nvidia-a100-80gb": "a2",
    "nvidia-l4": "g2",
    "nvidia-h100-80gb": "a3",
}


def manifest(
    name: str,
    gpu_type: str,
    gpu_count: int,
    *,
    reservation: str = "",
    reservation_project: str = "",
    spot_grace_seconds: int = DEFAULT_SPOT_GRACE_SECONDS,
    flex_start: bool = False,
) -> dict:
    """The ComputeClass: [reservation,] spot, [flex-start,] on-demand, active migration on.

    Args:
        name: The class's name (what ``Placement.compute_class`` selects).
        gpu_type: GKE accelerator name, e.g. ``nvidia-tesla-t4``.
        gpu_count: GPUs per node (one training pod per node).
        reservation: A specific reservation to use first; empty for none.
        reservation_project: The project owning a shared reservation.
        spot_grace_seconds: The kubelet's shutdown grace on spot nodes (30 or 120);
            30 is GKE's default and is not written out.
        flex_start: Between spot and on-demand, flex-start capacity (Dynamic Workload
            Scheduler: queued, discounted, VMs for at most 7 days; its own priority,
            since a priority cannot be both flex-start and spot).

    Raises:
        PlacementError: naming the value that cannot work.
    """
    if gpu_count < 1:
        raise PlacementError(f"gpu count {gpu_count}: a training class needs at least 1 GPU")
    check_reservation(reservation, reservation_project)
    kinds = ["spot", *(["flex-start"] if flex_start else []), "on-demand"]
    if reservation:
        kinds.insert(0, "reservation")
    rungs = tuple(Rung(kind, "", gpu_type, gpu_count) for kind in kinds)
    return from_ladder(
        name, Ladder(rungs), reservation=reservation, reservation_project=reservation_project,
        spot_grace_seconds=spot_grace_seconds,
    )  # fmt: skip


def from_ladder(
    name: str,
    ladder: Ladder,
    *,
    reservation: str = "",
    reservation_project: str = "",
    spot_grace_seconds: int = DEFAULT_SPOT_GRACE_SECONDS,
) -> dict:
    """The ComputeClass whose priorities are ``ladder``'s rungs, in its order.

    A class says a rung's capacity kind, machine type (or its GPUs' family) and GPUs. It
    cannot say a rung's place (the cluster's) or patience (the JobSet launcher's capacity
    deadline covers the whole class), and the autoscaler picks a priority per node, so
    one gang's pods may land on different rungs: every rung must give a pod the same
    GPUs (MultiWorkerMirroredStrategy hangs on unequal ones) and the gang the same
    number of workers (one JobSet).

    Raises:
        PlacementError: a name, GPU, reservation or grace that cannot work.
        LadderError: a rung a class cannot express (one line naming it).
    """
    check_compute_class_name(name)
    check_spot_grace(spot_grace_seconds)
    check_reservation(reservation, reservation_project)
    first = ladder[0]
    for n, rung in enumerate(ladder.rungs, 1):
        check_gpu_type(rung.gpu_type)
        if rung.location:
            raise LadderError(
                f"ladder rung {n} ({rung}): a ComputeClass runs in the cluster's location; "
                "a rung elsewhere needs the JobSet launcher's move (a gang of its own)"
            )
        if (rung.gpu_type, rung.gpu_count, rung.workers) != (
            first.gpu_type,
            first.gpu_count,
            first.workers,
        ):
            raise LadderError(
                f"ladder rung {n} ({rung}) differs from rung 1 ({first}) in GPUs or workers: "
                "one gang's pods may land on both, and MultiWorkerMirroredStrategy needs equal GPUs"
            )
        if rung.capacity == "reservation" and not reservation:
            raise LadderError(f"ladder rung {n} is a reservation: name it (reservation=...)")

    def node(rung: Rung, **more) -> dict:  # a new dict each: shared ones would be YAML anchors
        gpu = {"type": rung.gpu_type, "count": rung.gpu_count, "driverVersion": "default"}
        where = {"machineType": rung.machine_type} if rung.machine_type else {
            "machineFamily": MACHINE_FAMILIES[rung.gpu_type]
        }  # fmt: skip
        return {**where, "gpu": gpu, **more}

    def priority(rung: Rung) -> dict:
        if rung.capacity == "spot":
            spot = node(rung, spot=True)
            if spot_grace_seconds != DEFAULT_SPOT_GRACE_SECONDS:
                spot["nodeSystemConfig"] = spot_node_system_config(spot_grace_seconds)
            return spot
        if rung.capacity == "flex-start":
            return node(rung, flexStart={"enabled": True})
        if rung.capacity == "reservation":
            specific = {"name": reservation}
            if reservation_project:
                specific["project"] = reservation_project
            return node(rung, reservations={"affinity": "Specific", "specific": [specific]})
        return node(rung)

    return {
        "apiVersion": "cloud.google.com/v1",
        "kind": "ComputeClass",
        "metadata": {"name": name},
        "spec": {
            "priorities": [priority(r) for r in ladder.rungs],
            "activeMigration": {"optimizeRulePriority": True},
            "nodePoolAutoCreation": {"enabled": True},
            "whenUnsatisfiable": "DoNotScaleUp",
        },
    }


def render(cls: dict) -> str:
    """The manifest as YAML (``kubectl apply -f -``)."""
    import yaml

    return yaml.safe_dump(cls, sort_keys=False)
