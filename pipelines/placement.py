"""Placements applied to KFP tasks, and the node pools they target (authoring only).

Every scheduling decision of the GKE pipelines goes through :func:`apply_placement`, and
:func:`nodepool_command` creates the node pool those decisions target from the same
constants, so the taint a pool carries and the toleration a task needs cannot drift
apart. The placement itself is plain data in :mod:`spottrain.placement`, which the
trainer image imports (the JobSet-engine launcher); this module needs kfp-kubernetes
(the ``pipelines`` extra); pipeline code imports the placements from there.
"""

from __future__ import annotations

import re
import shlex

from kfp import dsl, kubernetes

from spottrain.ledger import CAPACITY_ENV, usage
from spottrain.placement import (
    DEFAULT_SPOT_GRACE_SECONDS,
    GCLOUD_POOL_FLAGS,
    GPU_RESOURCE,
    Placement,
    PlacementError,
    check_reservation,
    check_spot_grace,
)

# A zone is its region and a letter (us-central1-a); a region alone names no zone.
_ZONE = re.compile(r"[a-z]+(-[a-z]+)+[0-9]+-[a-z]")


def apply_placement(placement: Placement, task: dsl.PipelineTask) -> dsl.PipelineTask:
    """Sets a placement on a task (GPU, selectors, toleration, limits, retries)."""
    if placement.gpu_count:
        task.set_accelerator_type(GPU_RESOURCE).set_accelerator_limit(placement.gpu_count)
    if placement.require_pool:  # the task runs on exactly that capacity: its ledger says so
        task.set_env_variable(CAPACITY_ENV, placement.capacity)
    if placement.gpu_count:
        # Its GPUs, for the ledger's prices (spottrain.ledger.usage); machine and zone are its
        # node's, unknown when compiled.
        value = usage.env_value(**usage.from_placement(placement.gpu_type, placement.gpu_count))
        task.set_env_variable(usage.USAGE_ENV, value)
    for key, value in placement.node_selector.items():
        kubernetes.add_node_selector(task, label_key=key, label_value=value)
    for toleration in placement.tolerations():  # one list for KFP tasks and Job pods
        kubernetes.add_toleration(task, **toleration)
    if placement.memory_limit:
        task.set_memory_limit(placement.memory_limit)
    if placement.cpu_limit:
        task.set_cpu_limit(placement.cpu_limit)
    if placement.retries:
        # backoff_max_duration is the retry *window*: the KFP backend compiles it
        # to Argo's backoff.maxDuration (see check_retry_window for the citations).
        task.set_retry(
            num_retries=placement.retries,
            backoff_duration=placement.backoff,
            backoff_factor=placement.backoff_factor,
            backoff_max_duration=placement.retry_window,
        )
    return task


# Where ``make gke-nodepool SPOT_GRACE=120`` has the node system config written.
SYSTEM_CONFIG_FILE = "spot-node-system-config.yaml"


def check_zone(zone: str) -> None:
    """A zone as Compute Engine names them: a region alone (us-central1) is refused."""
    if not _ZONE.fullmatch(zone):
        raise PlacementError(
            f"zone={zone!r} is not a Compute Engine zone: expected a region and a letter, "
            "e.g. us-central1-a (the cluster's zone)"
        )


def nodepool_command(
    placement: Placement,
    *,
    cluster: str,
    zone: str,
    name: str = "",
    machine_type: str = "n1-highmem-8",
    min_nodes: int = 0,
    max_nodes: int = 4,
    reservation: str = "",
    reservation_project: str = "",
    spot_grace_seconds: int = DEFAULT_SPOT_GRACE_SECONDS,
    system_config_file: str = SYSTEM_CONFIG_FILE,
) -> list[str]:
    """The ``gcloud container node-pools create`` command for a placement's pool.

    Autoscaling from ``min_nodes=0`` means an idle pool costs nothing. A
    ``reservation`` makes an on-demand pool consume that specific reservation
    (``--reservation-affinity=specific --reservation=NAME``, or
    ``projects/PROJECT/reservations/NAME`` for one shared from another project:
    gcloud's ``node-pools create`` flags); Spot and preemptible VMs cannot consume
    reservations (Compute Engine, "Consume reservations", Limitations). A
    ``spot_grace_seconds`` of 120 passes ``system_config_file`` (write
    :func:`spot_node_system_config` there): Spot node pools only, GKE control plane
    1.35.0-gke.1171000 or later (GKE's Spot VMs page).

    Raises:
        PlacementError: on a missing cluster/zone, a bad node range, a
            reservation on a spot or preemptible pool, or a longer grace off Spot.
    """
    if not cluster:
        raise PlacementError("cluster is empty: pass CLUSTER=<your GKE cluster>")
    if not zone:
        raise PlacementError("zone is empty: pass ZONE=<the cluster's zone, e.g. us-central1-a>")
    if not 0 <= min_nodes <= max_nodes or max_nodes < 1:
        raise PlacementError(
            f"min_nodes={min_nodes}, max_nodes={max_nodes}: need 0 <= min <= max and max >= 1"
        )
    gpu = f"-{placement.gpu_count}gpu" if placement.gpu_count else ""
    name = name or f"{placement.pool}{gpu}-pool"
    cmd = [
        "gcloud", "container", "node-pools", "create", name,
        f"--cluster={cluster}",
        f"--zone={zone}",
        "--enable-autoscaling", f"--min-nodes={min_nodes}", f"--max-nodes={max_nodes}",
        f"--machine-type={machine_type}",
    ]  # fmt: skip
    if placement.pool in GCLOUD_POOL_FLAGS:
        cmd.append(GCLOUD_POOL_FLAGS[placement.pool])
    if placement.pool == "flex-start":
        # What GKE's flex-start page creates its pool with: any zone with capacity,
        # no reservation, no auto-repair (a repaired node would be a new request).
        cmd += ["--location-policy=ANY", "--reservation-affinity=none", "--no-enable-autorepair"]
    taint = placement.effective_taint
    if taint is not None:
        cmd.append(f"--node-taints={taint}")
    if placement.gpu_count:
        cmd.append(
            f"--accelerator=type={placement.gpu_type},count={placement.gpu_count},"
            "gpu-driver-version=default"
        )
    check_reservation(reservation, reservation_project)
    if reservation:
        if placement.pool != "on-demand":
            raise PlacementError(
                f"reservation {reservation!r} on a {placement.pool} pool: Spot, preemptible "
                "and flex-start VMs cannot consume reservations; use POOL=on-demand (or a "
                "ComputeClass with the reservation first: make gke-computeclass)"
            )
        if reservation_project:
            reservation = f"projects/{reservation_project}/reservations/{reservation}"
        cmd += ["--reservation-affinity=specific", f"--reservation={reservation}"]
    check_spot_grace(spot_grace_seconds)
    if spot_grace_seconds != DEFAULT_SPOT_GRACE_SECONDS:
        if placement.pool != "spot":
            raise PlacementError(
                f"spot grace {spot_grace_seconds} s on a {placement.pool} pool: GKE extends "
                "the shutdown grace on Spot node pools only; use POOL=spot"
            )
        cmd.append(f"--system-config-from-file={system_config_file}")
    cmd += ["--scopes=cloud-platform", "--verbosity=error"]
    return cmd


def format_command(cmd: list[str]) -> str:
    """The command as one copy-pasteable shell line."""
    return shlex.join(cmd)
