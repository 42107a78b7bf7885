"""When a run would finish on a rung, and at what cost, from what it measured (pure).

The model, per rung: the work left is ``steps left x seconds per step`` on that rung's
shape (before any step was measured: the prior's estimate, :attr:`Prior.step_s`). On
preemptible capacity every preemption costs a restart (measured: the ledger's
``lost_restart_seconds``) and the steps since the last save, so only a share of the
running time is progress (:func:`useful_share`: a renewal argument over Poisson
preemptions; the expected time to finish ``W`` of work is ``W / useful``). The rate is
this run's recent preemptions per hour on preemptible capacity (each weighed by its
age, halved every :data:`HALF_LIFE_H` hours, so a burst is forgotten and a rise is seen
within hours), pulled towards a prior (a gamma-Poisson mean: the prior counts as
``weight_hours`` of running at ``preemptions_per_hour``). Google
publishes no preemption rate for Spot VMs; Compute Engine's ``advice.capacityHistory``
(https://cloud.google.com/compute/docs/reference/rest/beta/advice/capacityHistory)
returns a per machine type and region ``preemptionRate``, the share of stopped Spot VMs
that were preempted, not a rate per hour, so the prior here is a setting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from spottrain.ladder import Rung, shape_of
from spottrain.ledger import attempt_cost
from spottrain.ledger.schema import (
    INTERRUPTED_OUTCOMES,
    Record,
    preempted,
    trained_again,
)


@dataclass(frozen=True)
class Prior:
    """What is assumed until the run has measured it.

    Attributes:
        preemptions_per_hour: Preemptions per hour of running on preemptible capacity.
        weight_hours: How many hours of this run's own running the prior is worth.
        restart_s: Seconds from a preemption until training resumes.
        step_s: Seconds per step on the ladder's first rung before one is measured (the
            user's estimate, e.g. from an earlier run); ``None``: unknown, and a deadline
            then assumes the worst (:func:`spottrain.ladder.decide.decide`).
    """

    preemptions_per_hour: float = 1.0
    weight_hours: float = 1.0
    restart_s: float = 900.0
    step_s: float | None = None


# Preemptions and spot hours weigh half as much every HALF_LIFE_H hours: a rate measured
# over a burst is forgotten within a few hours, and a rise is seen within one or two.
HALF_LIFE_H = 2.0
# What spot realized (its hours held and the steps it kept) is weighed more slowly: the
# realized cost of a unit of work is a ratio, and a verdict on it needs many hours of
# evidence (decide's cost rule), where the rate above needs to see a rise within hours.
REALIZED_HALF_LIFE_H = 8.0


def age_weight(age_s: float, half_life_h: float = HALF_LIFE_H) -> float:
    """The weight of an event ``age_s`` seconds old."""
    return 0.5 ** (max(age_s, 0.0) / 3600 / half_life_h)


def held_hours(began: float, until: float, now: float, half_life_h: float = HALF_LIFE_H) -> float:
    """Hours held on spot from ``began`` to ``until``, each weighed by its age at ``now``."""
    if until <= began:
        return 0.0
    k = math.log(2) / (half_life_h * 3600)
    # The integral of exp(-k (now - t)) dt over [began, until], in hours.
    return (math.exp(-k * (now - until)) - math.exp(-k * (now - began))) / k / 3600


@dataclass(frozen=True)
class Measured:
    """What the run has measured so far (its ledger and its progress).

    Attributes:
        steps_done: The newest saved step.
        steps_total: ``train_steps``.
        step_s: Seconds per step, by the rung shape it was measured on (``Rung.shape``).
        replicas: The replicas of each measured shape (to scale to another shape).
        preemptions: Preemptions so far on preemptible capacity, each weighed by its age
            (:func:`age_weight`).
        preemptible_hours: Hours it ran on preemptible capacity, weighed likewise.
        restart_s: Mean seconds from a preemption until training resumed (None: none yet).
        save_every_s: Seconds between saves.
        returns: Moves so far back to a preemptible rung (the ledger's moves).
        left_spot_at: When a move last left a preemptible rung (``None``: never).
        left_by: The rule that made that move (``spottrain.ladder.decide.RULES``).
        began_at: When the run was first launched with its deadline (the ladder's
            ``set_at``; ``None``: unknown, and the pace rule does not apply).
        held_h: Hours held on preemptible capacity, start-ups included (what was paid
            there), each weighed by its age with :data:`REALIZED_HALF_LIFE_H`.
        kept_steps: The steps trained there that were kept (saved, never trained again),
            weighed like ``held_h`` (each attempt's by its mean weight): ``kept_steps``
            over ``held_h`` is the progress spot realized per hour paid.
        spot_held_at: When the run last held preemptible capacity (its newest spot
            attempt's end, or now while one runs; ``None``: never).
    """

    steps_done: int
    steps_total: int
    step_s: Mapping[str, float]
    replicas: Mapping[str, int]
    preemptions: float = 0.0
    preemptible_hours: float = 0.0
    restart_s: float | None = None
    save_every_s: float = 600.0
    returns: int = 0
    left_spot_at: float | None = None
    left_by: str = ""
    began_at: float | None = None
    held_h: float = 0.0
    kept_steps: float = 0.0
    spot_held_at: float | None = None

    @property
    def steps_left(self) -> int:
        """Steps still to train."""
        return max(0, self.steps_total - self.steps_done)

    @classmethod
    def from_ledger(
        cls,
        records: Sequence[Record],
        steps_total: int,
        save_every_s: float,
        now: float | None = None,
        moves: Sequence[Mapping] = (),
        began_at: float | None = None,
    ) -> Measured:
        """What the attempt ledger's records say the run measured.

        Seconds per step: each attempt's steady speed (``seconds_per_step``), else, for
        an attempt that is over, its training time (from its restore, ``resumed_at``, to
        its end) over the steps it trained, pooled per shape. Preemptions and
        hours: the attempts on a spot kind (an attempt a ladder move
        ended is not preempted), weighed by their age at ``now`` (default: the newest
        time the records give). Restart: the mean of the restarts the
        figures priced (``lost_restart_seconds``), else of the gaps from an interrupted
        attempt's last sign of life to the next one's first step (``first_step_at``).
        With neither, an attempt's own start-up (``started`` to its first step).
        ``moves`` (the ledger's, :func:`spottrain.ledger.moves.read`): how often the run
        went back to spot, and when and why it last left it; ``began_at``: the ladder's
        ``set_at``.
        """
        seconds: dict[str, float] = {}
        steps: dict[str, int] = {}
        replicas: dict[str, int] = {}
        preemptions, spot_hours, restarts = 0.0, 0.0, []
        held_h, kept_steps, spot_held_at = 0.0, 0.0, None
        if now is None:
            times = [r.get("ended") or r.get("updated") or 0 for r in records]
            now = float(max(times, default=0) or 0)
        for rec in records:
            gpus, workers = int(rec.get("gpu_count") or 0), int(rec.get("workers") or 1)
            machine, gpu = str(rec.get("machine_type") or ""), str(rec.get("gpu_type") or "")
            shape = shape_of(machine, gpu, gpus, workers)
            # Not from "started": TensorFlow's start-up is the restart's, not the speed's.
            began = rec.get("resumed_at")
            until = rec.get("ended") or rec.get("updated")
            trained = (rec.get("last_step") or 0) - (rec.get("start_step") or 0)
            # The engine's steady speed, else the wall clock of an attempt that is over: a
            # running one's first call (which traces) weighs too much until the steady
            # figure is written.
            spent = None
            if rec.get("seconds_per_step"):
                spent = rec["seconds_per_step"] * trained
            elif rec.get("outcome", "running") != "running" and began and until and until > began:
                spent = until - began
            if trained > 0 and spent:
                seconds[shape] = seconds.get(shape, 0.0) + spent
                steps[shape] = steps.get(shape, 0) + trained
                replicas[shape] = int(rec.get("workers") or 1) * max(
                    int(rec.get("gpu_count") or 0), 1
                )
            if attempt_cost.kind(rec) in attempt_cost.SPOT_KINDS:
                # A move's cancel is the run's own decision, not the platform's.
                if preempted(rec) and until:
                    preemptions += age_weight(now - until)
                held = rec.get("started")  # preemptible from its start, start-up included
                if held and until and until > held:
                    spot_hours += held_hours(held, until, now)
                    paid = held_hours(held, until, now, REALIZED_HALF_LIFE_H)
                    kept = max(0, (rec.get("saved_step") or 0) - (rec.get("start_step") or 0))
                    held_h += paid
                    spot_held_at = max(spot_held_at or until, until)
                    kept_steps += kept * paid * 3600 / (until - held)  # its mean weight
            if rec.get("lost_restart_seconds"):
                restarts.append(float(rec["lost_restart_seconds"]))
        if not restarts:  # not priced yet: from each interrupted attempt's end to the resume
            restarts = _gaps(records)
        if not restarts:  # no restart yet: the run's own start-up is the best guess of one
            restarts = [float(again) - float(r["started"]) for r in records
                        if r.get("started") and (again := trained_again(r))
                        and again > r["started"]]  # fmt: skip
        spot = attempt_cost.SPOT_KINDS
        back = [m for m in moves if m.get("to_capacity") in spot]
        left = [m for m in moves if m.get("from_capacity") in spot and m.get("at")]
        last_left = max(left, key=lambda m: float(m["at"]), default=None)
        return cls(
            steps_done=max((int(r.get("saved_step") or 0) for r in records), default=0),
            steps_total=steps_total,
            step_s={s: seconds[s] / steps[s] for s in seconds},
            replicas=replicas,
            preemptions=preemptions,
            preemptible_hours=spot_hours,
            restart_s=sum(restarts) / len(restarts) if restarts else None,
            save_every_s=save_every_s,
            returns=len(back),
            left_spot_at=float(last_left["at"]) if last_left else None,
            left_by=str(last_left.get("rule") or "") if last_left else "",
            began_at=began_at,
            held_h=held_h,
            kept_steps=kept_steps,
            spot_held_at=spot_held_at,
        )


def _gaps(records: Sequence[Record]) -> list[float]:
    """Seconds from each interrupted attempt's end to the next attempt's first step."""
    gaps = []
    for before, after in zip(records, records[1:], strict=False):
        ended = before.get("ended") or before.get("updated")
        again = trained_again(after)
        if before.get("outcome") in INTERRUPTED_OUTCOMES and ended and again:
            gaps.append(max(0.0, float(again) - float(ended)))
    return gaps


@dataclass(frozen=True)
class Forecast:
    """A rung's expected finish and cost from now.

    Attributes:
        rung: The rung.
        work_s: Seconds of training left at this rung's speed (no interruptions).
        rate_per_h: Preemptions per hour expected there (0 off preemptible capacity).
        useful: The share of running time that is progress there.
        start_s: Seconds until it trains: a move's restart, and a queued rung's wait.
        finish_s: Expected seconds from now until the last step (``inf``: never).
        cost: Expected cost until then (``None``: no price for it).
    """

    rung: Rung
    work_s: float
    rate_per_h: float
    useful: float
    start_s: float
    finish_s: float
    cost: float | None


def step_seconds(rung: Rung, measured: Measured) -> float | None:
    """Seconds per step on ``rung``; ``None`` when nothing was measured.

    Measured there, else scaled by replicas from the shape measured with the most
    replicas (a fixed global batch splits over replicas).
    """
    if rung.shape in measured.step_s:
        return measured.step_s[rung.shape]
    known = [(measured.replicas.get(s, 0), s) for s in measured.step_s]
    if not known:
        return None
    replicas, shape = max(known)
    return measured.step_s[shape] * max(replicas, 1) / rung.replicas


def restart_seconds(measured: Measured, prior: Prior) -> float:
    """Seconds from a preemption or a move until training resumes: measured, else the prior's."""
    return prior.restart_s if measured.restart_s is None else measured.restart_s


def preemption_rate(measured: Measured, prior: Prior) -> float:
    """Preemptions per hour on preemptible capacity: the run's, pulled to the prior."""
    events = prior.preemptions_per_hour * prior.weight_hours + measured.preemptions
    return events / (prior.weight_hours + measured.preemptible_hours)


def useful_share(rate_per_h: float, restart_s: float, save_every_s: float) -> float:
    """The share of time held on preemptible capacity that ends up as saved progress.

    Preemptions come as a Poisson process at ``rate`` (``λ``): a stretch held between
    two is exponential, of mean ``1/λ``; it first restarts (``r``), then trains, and a
    preemption loses the steps since the last save (every ``s``). The saved progress of
    a stretch is ``s x floor((L - r) / s)`` when ``L > r``, whose mean is
    ``exp(-λr) x s x q / (1 - q)`` with ``q = exp(-λs)``; over the mean stretch ``1/λ``
    that is the share (renewal-reward). It is exact where the linear
    ``1 - λ (r + s/2)`` is not: 0.50 rather than 0.33 at 4/h with r = 5 min and
    s = 10 min, and never below 0.
    """
    lam = max(rate_per_h, 0.0) / 3600
    if lam * max(restart_s, save_every_s, 1.0) < 1e-9:
        return 1.0
    if save_every_s <= 0:  # saved at every step: only the restarts are lost
        return math.exp(-lam * restart_s)
    q = math.exp(-lam * save_every_s)
    return lam * math.exp(-lam * restart_s) * save_every_s * q / (1 - q)


def forecast(
    rung: Rung,
    measured: Measured,
    prior: Prior,
    *,
    moving: bool,
    price_per_hour: float | None = None,
) -> Forecast:
    """``rung``'s expected finish from now and its cost.

    Args:
        rung: Where.
        measured: What the run measured.
        prior: What is assumed where it measured nothing.
        moving: The run does not train on ``rung`` now (it is elsewhere, or was
            preempted there): a restart first, and a queued rung's wait (its patience,
            the longest it may wait) before that.
        price_per_hour: One worker's price per hour there (the rung's machine and GPUs).
    """
    per_step = step_seconds(rung, measured)
    work = math.inf if per_step is None else measured.steps_left * per_step
    restart = restart_seconds(measured, prior)
    rate = preemption_rate(measured, prior) if rung.preemptible else 0.0
    useful = useful_share(rate, restart, measured.save_every_s)
    start = 0.0
    if moving:
        queued = rung.patience_s if rung.capacity == "flex-start" else 0.0
        start = restart + (queued if math.isfinite(queued) else 0.0)
    running = work / useful if useful > 0 else math.inf
    cost = None
    if price_per_hour is not None and math.isfinite(running):
        cost = price_per_hour * rung.workers * (running + (restart if moving else 0.0)) / 3600
    return Forecast(rung, work, rate, max(useful, 0.0), start, start + running, cost)
