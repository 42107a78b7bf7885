"""The capacity ladder: where a run may train, in the order it tries them.

One object for both platforms (issue 44). A :class:`Ladder` is ordered rungs, each a
capacity kind on one machine shape in one place, with its patience (how long to wait
for that capacity before the next rung). The Vertex launcher walks it (``SPOT`` →
``FLEX_START`` → ``STANDARD``), GKE compiles it into ComputeClass priorities where a
class can express it and into the JobSet launcher's moves where it cannot; which rung
to be on, and when to move, is :mod:`spottrain.ladder.decide`'s, from what the run
measured (:mod:`spottrain.ladder.forecast`).

A ladder is written as JSON, a list of rungs (a pipeline parameter is a string)::

    [{"capacity": "spot", "patience": "30m"},
     {"capacity": "on-demand"}]

and each rung's unset shape is the pipeline's (``defaults``). Every refusal is one
line naming the rung and the value (:class:`LadderError`, exit 64).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, fields, replace

from spottrain.exits import ConfigError
from spottrain.placement import MAX_WORKERS
from spottrain.pricing import machines, zones

# The capacity kinds, cheapest and least sure first. ``flex-start``: queued capacity
# (Dynamic Workload Scheduler; Vertex's FLEX_START), not preempted once it runs.
CAPACITIES = ("spot", "flex-start", "reservation", "on-demand")
PREEMPTIBLE = ("spot",)
# Vertex's scheduling strategy of each kind (a reservation is STANDARD with affinity).
VERTEX_STRATEGY = {
    "spot": "SPOT",
    "flex-start": "FLEX_START",
    "reservation": "STANDARD",
    "on-demand": "STANDARD",
}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd]?)$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


class LadderError(ConfigError):
    """A ladder no run can use: one line naming the rung and the value (exit 64)."""


def duration_s(text: str | float | int, what: str) -> float:
    """Seconds of ``"90s"``, ``"30m"``, ``"2h"``, ``"1d"`` or a number of seconds."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        value = float(text)
    else:
        found = _DURATION.match(str(text).strip().lower())
        if not found:
            raise LadderError(f"{what}={text!r}: expected a duration like '90s', '30m' or '2h'")
        value = float(found.group(1)) * _UNIT[found.group(2)]
    if value < 0 or not math.isfinite(value):
        raise LadderError(f"{what}={text!r}: expected a duration of 0 or more")
    return value


def shape_of(machine_type: str, gpu_type: str, gpu_count: int, workers: int) -> str:
    """A gang's shape (``2 x n1-standard-8 + 1 x nvidia-tesla-t4``), for rungs and records."""
    gpus = f" + {gpu_count} x {gpu_type}" if gpu_type else ""
    return f"{workers} x {machine_type or '?'}{gpus}"


@dataclass(frozen=True)
class Rung:
    """One place a run may train.

    Attributes:
        capacity: One of :data:`CAPACITIES`.
        machine_type: Compute Engine machine type of each worker.
        gpu_type: Its GPUs (GKE's or Vertex's name), ``""`` for none.
        gpu_count: GPUs per worker (MultiWorkerMirroredStrategy needs the same on each).
        workers: Workers (machines) of the gang.
        location: Region or zone.
        patience_s: How long to wait for this capacity before the next rung
            (``inf``: for ever; the last rung's is always ``inf``).
    """

    capacity: str
    machine_type: str = ""
    gpu_type: str = ""
    gpu_count: int = 0
    workers: int = 1
    location: str = ""
    patience_s: float = math.inf

    @property
    def preemptible(self) -> bool:
        """Whether the platform may take it back while it runs."""
        return self.capacity in PREEMPTIBLE

    @property
    def replicas(self) -> int:
        """Training replicas: one per GPU (one per worker without GPUs)."""
        return self.workers * max(self.gpu_count, 1)

    @property
    def shape(self) -> str:
        """What runs, for lines and for keying measured speeds (:func:`shape_of`)."""
        return shape_of(self.machine_type, self.gpu_type, self.gpu_count, self.workers)

    def __str__(self) -> str:
        where = f" in {self.location}" if self.location else ""
        return f"{self.capacity} {self.shape}{where}"


@dataclass(frozen=True)
class Ladder:
    """Rungs in the order they are tried; check with :func:`check`."""

    rungs: tuple[Rung, ...]

    def __len__(self) -> int:
        return len(self.rungs)

    def __getitem__(self, i: int) -> Rung:
        return self.rungs[i]


_KEYS = {f.name for f in fields(Rung)} - {"patience_s"} | {"patience"}


def parse(text: str, defaults: Rung) -> Ladder:
    """The ladder a JSON list of rungs writes; each rung's unset fields are ``defaults``'.

    Raises:
        LadderError: not a list of objects, an unknown key, a bad value (one line).
    """
    try:
        items = json.loads(text) if text.strip() else []
    except json.JSONDecodeError as e:
        raise LadderError(f"ladder {text[:80]!r}: not JSON ({e.msg})") from None
    except ValueError:  # Python's limit on an integer's digits (4300)
        raise LadderError(f"ladder {text[:80]!r}: a number with thousands of digits") from None
    if not isinstance(items, list):
        raise LadderError(f"ladder {text[:80]!r}: expected a JSON list of rungs")
    rungs = []
    for n, item in enumerate(items, 1):
        if not isinstance(item, dict):
            raise LadderError(f"ladder rung {n}: {item!r} is not an object")
        unknown = sorted(set(item) - _KEYS)
        if unknown:
            raise LadderError(
                f"ladder rung {n}: unknown key {unknown[0]!r} (known: {sorted(_KEYS)})"
            )
        values = {k: v for k, v in item.items() if k != "patience"}
        for key in ("gpu_count", "workers"):
            if key in values and (
                not isinstance(values[key], int) or isinstance(values[key], bool)
            ):
                raise LadderError(f"ladder rung {n}: {key}={values[key]!r} is not a whole number")
        for key in ("capacity", "machine_type", "gpu_type", "location"):
            if key in values and not isinstance(values[key], str):
                raise LadderError(f"ladder rung {n}: {key}={values[key]!r} is not a string")
        if "patience" in item:
            values["patience_s"] = duration_s(item["patience"], f"ladder rung {n}: patience")
        rungs.append(replace(defaults, **values))
    return check(Ladder(tuple(rungs)))


def check(ladder: Ladder, batch_size: int = 0) -> Ladder:
    """``ladder`` when a run can use it; the last rung's patience made ``inf``.

    Args:
        ladder: The rungs.
        batch_size: The global batch; when given, every rung's replicas must divide it
            (each replica gets an equal share, as MultiWorkerMirroredStrategy needs).

    Raises:
        LadderError: empty, an unknown capacity, shape or place, a rung twice, or
            replicas the batch does not divide (one line naming the rung).
    """
    if not ladder.rungs:
        raise LadderError(
            'the ladder is empty: give at least one rung, e.g. [{"capacity": "on-demand"}]'
        )
    seen = set()
    for n, rung in enumerate(ladder.rungs, 1):
        _check_rung(n, rung, batch_size)
        key = replace(rung, patience_s=0)
        if key in seen:
            raise LadderError(f"ladder rung {n} ({rung}) is a rung before it again")
        seen.add(key)
    *first, last = ladder.rungs
    return Ladder((*first, replace(last, patience_s=math.inf)))


def _check_rung(n: int, rung: Rung, batch_size: int) -> None:
    at = f"ladder rung {n}"
    if rung.capacity not in CAPACITIES:
        raise LadderError(f"{at}: capacity={rung.capacity!r}: expected one of {CAPACITIES}")
    if not 1 <= rung.workers <= MAX_WORKERS:
        raise LadderError(f"{at}: workers={rung.workers}: expected 1 to {MAX_WORKERS}")
    if rung.gpu_count < 0 or (rung.gpu_type and rung.gpu_count < 1):
        raise LadderError(f"{at}: gpu_count={rung.gpu_count} with gpu_type={rung.gpu_type!r}")
    if rung.gpu_type and machines.gpu_key(rung.gpu_type) is None:
        raise LadderError(f"{at}: gpu_type={rung.gpu_type!r} is not a GPU Compute Engine offers")
    if rung.machine_type and (
        why := machines.problem(rung.machine_type, rung.gpu_type, rung.gpu_count)
    ):
        raise LadderError(f"{at}: {why}")
    if rung.location and machines.region_of(rung.location) is None:
        raise LadderError(f"{at}: location={rung.location!r} is neither a region nor a zone")
    if rung.location and (why := zones.problem(rung.location)):
        raise LadderError(f"{at}: {why}")
    if batch_size and batch_size % rung.replicas:
        raise LadderError(
            f"{at} ({rung}): {rung.replicas} replicas do not divide the batch of {batch_size}: "
            "every replica needs an equal share (MultiWorkerMirroredStrategy)"
        )


def cross_region(ladder: Ladder, data_region: str, allow: bool) -> list[str]:
    """One line per rung outside the data's region (egress on every read of the data).

    Raises:
        LadderError: for the first such rung, unless ``allow``.
    """
    lines = []
    for n, rung in enumerate(ladder.rungs, 1):
        region = machines.region_of(rung.location) if rung.location else None
        if region and data_region and region != data_region:
            line = (
                f"ladder rung {n} ({rung}) runs in {region} but the data is in "
                f"{data_region}: each read crosses regions (egress is billed)"
            )
            if not allow:
                raise LadderError(line + "; allow it with allow_cross_region=true")
            lines.append(line)
    return lines
