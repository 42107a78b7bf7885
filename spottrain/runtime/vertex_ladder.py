"""A Vertex custom job for each rung of a capacity ladder (issue 44; not yet walked).

The same :class:`~spottrain.ladder.Ladder` the GKE ComputeClass is written from
(``pipelines/computeclass.from_ladder``) becomes, rung by rung, the custom job the
fall-back launcher (:mod:`.vertex_job`) would create: the rung's scheduling strategy
(``SPOT``, ``FLEX_START`` with its patience as ``max_wait_duration``, ``STANDARD``,
with a reservation's affinity), its machine and GPUs on every pool, its workers as
pool 0's chief and pool 1's replicas, and its region as the job's parent. What else
the job carries (labels, the ledger's env) is :func:`.vertex_job.job_for`'s.
"""

from __future__ import annotations

import copy
import math

from spottrain.ladder import VERTEX_STRATEGY, LadderError, Rung
from spottrain.placement import VERTEX_ACCELERATORS
from spottrain.pricing.machines import region_of

RESERVATION_KEY = "compute.googleapis.com/reservation-name"


def rung_payload(payload: dict, rung: Rung, *, reservation: str = "") -> dict:
    """``payload`` (GCPC's custom job dict) as it runs on ``rung``.

    Raises:
        LadderError: a reservation rung without a reservation name.
    """
    job = copy.deepcopy(payload)
    spec = job["job_spec"]
    pools = spec["worker_pool_specs"]
    chief = pools[0]
    machine = {
        **chief.get("machine_spec", {}),
        "machine_type": rung.machine_type or chief["machine_spec"]["machine_type"],
        "accelerator_type": VERTEX_ACCELERATORS.get(rung.gpu_type, rung.gpu_type),
        "accelerator_count": rung.gpu_count if rung.gpu_type else 0,
    }
    machine.pop("reservation_affinity", None)
    if rung.capacity == "reservation":
        if not reservation:
            raise LadderError(f"ladder rung {rung} is a reservation: name it (reservation=...)")
        machine["reservation_affinity"] = {
            "reservation_affinity_type": "SPECIFIC_RESERVATION",
            "key": RESERVATION_KEY,
            "values": [reservation],
        }
    workers = pools[1] if len(pools) > 1 else copy.deepcopy(chief)
    spec["worker_pool_specs"] = [
        {**chief, "machine_spec": copy.deepcopy(machine), "replica_count": 1},
        *([{**workers, "machine_spec": copy.deepcopy(machine), "replica_count": rung.workers - 1}]
          if rung.workers > 1 else []),
    ]  # fmt: skip
    scheduling = spec.setdefault("scheduling", {})
    scheduling["strategy"] = VERTEX_STRATEGY[rung.capacity]
    scheduling.pop("max_wait_duration", None)
    if rung.capacity == "flex-start" and math.isfinite(rung.patience_s):
        scheduling["max_wait_duration"] = f"{int(rung.patience_s)}s"
    return job


def rung_parent(parent: str, rung: Rung) -> str:
    """``projects/<p>/locations/<region>``: the rung's region where it names one."""
    region = region_of(rung.location) if rung.location else None
    return f"{parent.rsplit('/', 1)[0]}/{region}" if region else parent
