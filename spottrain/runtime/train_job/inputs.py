"""The ``train_job`` inputs the launcher refuses, checked by one function at both ends.

Submit (``spottrain.pipelines.guards.preflight``, the dry run too) and the launcher in
its pod (:func:`spottrain.runtime.train_job.component.launch`) call :func:`check` on the
same values: what submit accepts, the launcher accepts. Only what needs the cluster
(the LocalQueue's existence, the ledger's kept deadline) is left to the launcher.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from spottrain.placement import MAX_WORKERS, Placement, PlacementError, seconds


class InputError(ValueError):
    """A ``train_job`` input the launcher would refuse: one line naming the value."""


@dataclass(frozen=True)
class Checked:
    """What :func:`check` derived: the gang's placement and the run's timeout, seconds."""

    placement: Placement
    run_seconds: int


def check(
    *,
    workers: int,
    pool: str,
    gpu_type: str,
    gpus: int,
    memory_limit: str,
    retries: int,
    unschedulable_timeout: int,
    admission_timeout: int,
    deadline: str,
    compute_class: str = "",
    grace_seconds: int = 30,
    queue: str = "",
    priority_class: str = "",
    finish_by: str = "",
    prior_step_seconds: float = 0.0,
    now: float | None = None,
) -> Checked:
    """Refuses the inputs no gang can be launched with, before anything exists.

    ``finish_by`` is checked as written (a duration, or a time with its zone, a minute
    to a year away); the launcher then keeps the time a duration gave on its first read.

    Raises:
        InputError: the first input refused (one line naming it and its value).
    """
    if not 1 <= workers <= MAX_WORKERS:
        raise InputError(f"workers={workers}: expected 1 to {MAX_WORKERS} (an Indexed Job's most)")
    if gpu_type and gpus < 1:
        raise InputError(f"gpus={gpus} with gpu_type={gpu_type!r}: give gpus >= 1, or no gpu_type")
    for name, value in (("unschedulable_timeout", unschedulable_timeout),
                        ("admission_timeout", admission_timeout)):  # fmt: skip
        if value < 0:
            raise InputError(f"{name}={value}: must be >= 0 seconds")
    if not (isinstance(prior_step_seconds, int | float) and math.isfinite(prior_step_seconds)
            and prior_step_seconds >= 0):  # fmt: skip
        raise InputError(f"prior_step_seconds={prior_step_seconds!r}: expected seconds per "
                         "step, 0 (unknown) or more")  # fmt: skip
    try:
        placement = Placement(
            pool=pool, gpu_type=gpu_type, gpu_count=gpus, memory_limit=memory_limit,
            retries=retries, compute_class=compute_class, grace_seconds=grace_seconds,
            queue=queue, priority_class=priority_class,
        )  # fmt: skip
        run_seconds = seconds(deadline)
    except (PlacementError, ValueError) as err:
        raise InputError(str(err)) from None
    if finish_by:
        from spottrain.ladder import LadderError
        from spottrain.ladder.decide import finish_by_epoch

        try:
            finish_by_epoch(finish_by, time.time() if now is None else now)
        except LadderError as err:
            raise InputError(str(err)) from None
    return Checked(placement, run_seconds)
