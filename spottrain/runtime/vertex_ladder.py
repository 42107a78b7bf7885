"""The capacity ladder on Vertex: a custom job per rung, and the walk's next step (pure).

The same :class:`~spottrain.ladder.Ladder` the GKE ComputeClass is written from
(``pipelines/computeclass.from_ladder``) becomes, rung by rung, the custom job the
fall-back launcher (:mod:`.vertex_job`) would create: the rung's scheduling strategy
(``SPOT``, ``FLEX_START`` with its patience as ``max_wait_duration``, ``STANDARD``,
with a reservation's affinity), its machine and GPUs on every pool, its workers as
pool 0's chief and pool 1's replicas, and its region as the job's parent. What else
the job carries (labels, the ledger's env) is :func:`.vertex_job.job_for`'s.

:func:`next_step` is the walk's decision at each look at the current job (observe →
decide → act: :class:`.vertex_job.CustomJobLauncher` observes and acts): wait on it,
create it again on the same rung after a preemption, move (cancelling it when it
still runs or waits), or end. Which rung is :func:`spottrain.ladder.decide.decide`'s.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from spottrain.ladder import VERTEX_STRATEGY, Ladder, LadderError, Rung, parse
from spottrain.ladder.decide import MOVE, decide
from spottrain.ladder.forecast import Forecast, Measured, Prior
from spottrain.ledger import usage
from spottrain.placement import VERTEX_ACCELERATORS
from spottrain.pricing.machines import region_of
from spottrain.runtime.fallback_words import COMPLETED, INCOMPLETE

log = logging.getLogger(__name__)

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


def defaults_of(payload: dict) -> Rung:
    """The rung the payload itself describes (a ladder rung's unset fields are these)."""
    pools = payload["job_spec"]["worker_pool_specs"]
    chief = usage.from_vertex_pool(pools[0], "")  # what the ledger reads of a pool, too
    return Rung(
        capacity="spot",
        machine_type=chief.get("machine_type", ""),
        gpu_type=chief.get("gpu_type", ""),
        gpu_count=chief.get("gpu_count", 0),
        workers=sum(int(p.get("replica_count") or 1) for p in pools),
    )


# The walk's own steps; the others are fallback_words' endings (and MOVE).
WAIT, AGAIN = "wait", "again"
# The walk's own reason for a move, beside decide's RULES: a rung's jobs all used.
BUDGET = "budget"


@dataclass(frozen=True)
class Look:
    """What one look at the current job saw.

    Attributes:
        ended: The job is in an ended state.
        succeeded: It ended ``JOB_STATE_SUCCEEDED``.
        waited_s: Seconds it has waited for capacity (queued or pending; 0 once running).
        progressed: (ended) it saved a newer checkpoint than there was when it started.
        settled: :func:`spottrain.runtime.fallback_words.settled` of the checkpoint dir
            (``None``: training goes on).
        jobs_here: Jobs created on this rung so far, this one included.
        measured: What the run measured (``None``: nothing yet).
    """

    ended: bool
    succeeded: bool = False
    waited_s: float = 0.0
    progressed: bool = False
    settled: str | None = None
    jobs_here: int = 1
    measured: Measured | None = None


@dataclass(frozen=True)
class Step:
    """What to do: ``WAIT``, ``AGAIN`` (a new job on rung ``to``), ``MOVE`` or an ending."""

    kind: str
    to: int
    reason: str = ""
    forecast: Forecast | None = None
    rule: str = ""


def next_step(
    ladder: Ladder,
    at: int,
    look: Look,
    *,
    budgets: tuple[int, int],
    now: float,
    finish_by: float | None,
    look_every_s: float,
    prior: Prior | None = None,
    prices: Mapping[str, float] | None = None,
    margin_s: float | None = None,
) -> Step:
    """The walk's next step after a look at the job on rung ``at``.

    Args:
        ladder: The rungs.
        at: The rung of the job looked at.
        look: What the look saw.
        budgets: Jobs at most per rung: (preemptible rungs, the others).
        now: Epoch seconds.
        finish_by: The deadline (``None``: none).
        look_every_s: Seconds until the next look at the latest.
        prior: As :func:`spottrain.ladder.decide.decide`.
        prices: As :func:`spottrain.ladder.decide.decide`.
        margin_s: As :func:`spottrain.ladder.decide.decide`.

    Returns:
        ``Step(COMPLETED)`` etc. (fallback_words) to end; ``MOVE`` to rung ``to``
        (cancel the job first when it has not ended); ``AGAIN`` for a new job here;
        ``WAIT`` to look again.
    """
    if look.succeeded:
        return Step(COMPLETED, at)
    if look.settled:
        return Step(look.settled, at)
    measured = look.measured or Measured(0, 0, {}, {})
    # Without a deadline, a job that ended without progress found no capacity: as if
    # its patience was used. With one, the deadline decides (a spot job preempted
    # before its first step is one preemption, not a reason to leave spot for good).
    waited = math.inf if look.ended and not look.progressed and finish_by is None else (
        look.waited_s)  # fmt: skip
    d = decide(ladder, at, measured, now=now, finish_by=finish_by, look_every_s=look_every_s,
               waited_s=waited, running=not look.ended and not look.waited_s, prior=prior,
               prices=prices, margin_s=margin_s)  # fmt: skip
    if d.kind == MOVE:
        return Step(MOVE, d.to, d.reason, d.forecast, d.rule)
    if not look.ended:
        return Step(WAIT, at, d.reason, d.forecast)
    budget = budgets[0] if ladder[at].preemptible else budgets[1]
    if look.jobs_here < budget:
        return Step(AGAIN, at, d.reason, d.forecast)
    if at + 1 < len(ladder):
        return Step(MOVE, at + 1, f"{look.jobs_here} {ladder[at].capacity} jobs used (its budget)",
                    rule=BUDGET)  # fmt: skip
    return Step(INCOMPLETE, at, f"{look.jobs_here} {ladder[at].capacity} jobs used (its budget)")


# The ladder of the fall-back's plan (--fallback_strategy): its two strategies' kinds.
PLAN_KIND = {"SPOT": "spot", "FLEX_START": "flex-start", "STANDARD": "on-demand"}


def walked_ladder(
    defaults: Rung, text: str, first: str = "SPOT", fallback: str = "STANDARD"
) -> Ladder:
    """The ladder ``text`` writes over ``defaults``; empty: the plan's two strategies.

    Raises:
        LadderError: a bad ladder (one line).
    """
    if text:
        return parse(text, defaults)
    return Ladder(tuple(replace(defaults, capacity=PLAN_KIND[s]) for s in (first, fallback)))


def set_up(launcher, args, payload: dict, plan) -> None:
    """Makes ``launcher`` (a ``CustomJobLauncher``) walk the ladder ``args`` give.

    ``--ladder`` empty: the plan's two strategies as two rungs of the payload's shape.
    The deadline is kept in the ledger as first read, so a duration (``6h``) counts
    from the first try of the task, not from each retry.

    Raises:
        LadderError: a bad ladder or deadline (one line).
    """
    from spottrain import ledger
    from spottrain.ladder.decide import kept_deadline, unreachable
    from spottrain.ledger import moves

    ladder = walked_ladder(defaults_of(payload), args.ladder, plan.first, plan.fallback)
    now = time.time()
    rungs = [str(r) for r in ladder.rungs]
    finish_by = kept_deadline(args.checkpoint_dir, args.finish_by, rungs, now)

    def measured() -> Measured:
        records = ledger.read(args.checkpoint_dir)
        plan, walked = moves.read(args.checkpoint_dir)
        return Measured.from_ledger(records, args.train_steps, args.save_every_seconds,
                                    now=time.time(), moves=walked,
                                    began_at=(plan or {}).get("set_at"))  # fmt: skip

    prior = Prior(args.prior_preemptions_per_hour, restart_s=args.prior_restart_seconds,
                  step_s=args.prior_step_seconds or None)  # fmt: skip
    late = finish_by and unreachable(ladder, measured(), now=now, finish_by=finish_by, prior=prior)
    if late:
        log.warning("%s: training goes on, on the fastest rung", late)
    launcher.ladder, launcher.finish_by = ladder, finish_by
    launcher.look_every_s, launcher.margin_s = args.look_every_seconds, args.margin_seconds
    launcher.prior = prior
    launcher.measured = measured
    launcher.moved = lambda move: moves.add_move(args.checkpoint_dir, move)
    launcher.reservation = args.reservation
    launcher.prices = prices_by_kind(ladder, args.location)
    if launcher.prices:
        log.info("prices per worker-hour for the decision: %s", launcher.prices)


def prices_by_kind(ladder: Ladder, location: str) -> dict[str, float]:
    """One worker's price per hour by capacity kind, where known (the decision's cost rules).

    Vertex AI's prices are the user's (``SPOTTRAIN_PRICES``' ``vertex`` section:
    :mod:`spottrain.pricing.quoting` reads no Vertex SKU from the catalog); a kind
    whose price is unknown is left out, and the rules that compare cost then do not
    apply to it. A reservation is paid whether used or not and flex-start has its own
    SKUs: neither is priced here.
    """
    from spottrain.pricing import quote
    from spottrain.pricing.terms import Usage

    out: dict[str, float] = {}
    for rung in ladder.rungs:
        if rung.capacity not in ("spot", "on-demand") or rung.capacity in out:
            continue
        q = quote(Usage(rung.location or location, rung.machine_type, rung.gpu_type,
                        rung.gpu_count, platform="vertex"))  # fmt: skip
        price = q.spot if rung.capacity == "spot" else q.on_demand
        if price is not None:
            out[rung.capacity] = price
    return out
