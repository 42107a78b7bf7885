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
    check_compute_class_name(name)
    check_gpu_type(gpu_type)
    if gpu_count < 1:
        raise PlacementError(f"gpu count {gpu_count}: a training class needs at least 1 GPU")
    check_spot_grace(spot_grace_seconds)
    check_reservation(reservation, reservation_project)

    def node(**more) -> dict:  # a new dict each: shared ones would be YAML anchors
        gpu = {"type": gpu_type, "count": gpu_count, "driverVersion": "default"}
        return {"machineFamily": MACHINE_FAMILIES[gpu_type], "gpu": gpu, **more}

    spot = node(spot=True)
    if spot_grace_seconds != DEFAULT_SPOT_GRACE_SECONDS:
        spot["nodeSystemConfig"] = spot_node_system_config(spot_grace_seconds)
    priorities = [spot, *([node(flexStart={"enabled": True})] if flex_start else []), node()]
    if reservation:
        specific = {"name": reservation}
        if reservation_project:
            specific["project"] = reservation_project
        priorities.insert(0, node(reservations={"affinity": "Specific", "specific": [specific]}))
    return {
        "apiVersion": "cloud.google.com/v1",
        "kind": "ComputeClass",
        "metadata": {"name": name},
        "spec": {
            "priorities": priorities,
            "activeMigration": {"optimizeRulePriority": True},
            "nodePoolAutoCreation": {"enabled": True},
            "whenUnsatisfiable": "DoNotScaleUp",
        },
    }


def render(cls: dict) -> str:
    """The manifest as YAML (``kubectl apply -f -``)."""
    import yaml

    return yaml.safe_dump(cls, sort_keys=False)
