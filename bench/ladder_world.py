"""The simulated world of ``bench/ladder_sim.py``: spot capacity over time, and a run in it.

The world is separate from the policies (``bench/ladder_policies.py``): it says, tick
by tick (``DT`` seconds), whether spot capacity is there (``up``) and whether a running
spot gang is taken back at that tick (``kill``), from either a seeded stochastic model
(:func:`stochastic`) or a trace in the public format of skypilot-org/spot-traces
(:func:`read_trace`, :func:`from_trace`). :func:`run` plays one policy in it and
returns what was paid on each capacity; :func:`lower_bound` is what an omniscient
policy could at best pay in the same world.

The run: a restart (``restart_s``) after a preemption or a move, paid, as machines are
held; the steps since the last save (every ``save_s``) are trained again after a
preemption, while a move saves on its notice first; nothing is paid while spot
capacity does not come; on-demand capacity always comes. A run still training at its
deadline is stopped there: it missed, and its cost is what it paid until then.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

from spottrain.ladder.forecast import REALIZED_HALF_LIFE_H, age_weight, held_hours

DT = 60.0
SPOT, OD = 0, 1
WAIT, RESTART, TRAIN = "wait", "restart", "train"


@dataclass
class World:
    """One run's world: the job, the deadline and spot capacity per tick.

    Attributes:
        work_s: Seconds of training on the gang, uninterrupted.
        finish_by: The deadline, seconds from the start.
        restart_s: Seconds from a start, preemption or move until training goes on.
        save_s: Seconds between saves.
        up: Per tick, 1 where spot capacity is there.
        kill: Per tick, 1 where a running (or restarting) spot gang is taken back.
    """

    work_s: float
    finish_by: float
    restart_s: float
    save_s: float
    up: bytearray
    kill: bytearray


def deadline(work_s: float, restart_s: float, slack: float) -> float:
    """``slack`` times the on-demand-only duration (a restart, then the work)."""
    return slack * (work_s + restart_s)


def stochastic(
    *,
    work_s: float,
    slack: float,
    rate_h: float,
    restart_s: float,
    save_s: float,
    drought: str,
    seed: int,
    drought_p: float = 0.3,
    drought_mean_h: float = 1.5,
) -> World:
    """A seeded world: Poisson preemptions at ``rate_h`` per hour and a drought model.

    ``drought``: ``"none"``; ``"after"`` (after each preemption, with probability
    ``drought_p``, no capacity for an exponential time of mean ``drought_mean_h``);
    ``"start"`` (no capacity from t = 0 for 1.25 x the slack, the deadline less the
    on-demand-only duration: no spot-only schedule meets it).
    """
    rng = random.Random(seed)
    finish_by = deadline(work_s, restart_s, slack)
    n = int(math.ceil(finish_by / DT)) + 1
    up, kill = bytearray(b"\x01") * n, bytearray(n)
    if drought == "start":
        off = int(1.25 * (finish_by - work_s - restart_s) / DT) + 1
        up[: min(off, n)] = bytes(min(off, n))
    t = rng.expovariate(rate_h / 3600)
    while t < n * DT:
        i = int(t / DT)
        kill[i] = 1
        if drought == "after" and rng.random() < drought_p:
            j = min(n, i + 1 + int(rng.expovariate(1 / (drought_mean_h * 3600)) / DT))
            up[i:j] = bytes(j - i)
        t += rng.expovariate(rate_h / 3600)
    return World(work_s, finish_by, restart_s, save_s, up, kill)


def read_trace(path: str | Path) -> tuple[float, list[bool]]:
    """``(gap_seconds, spot there per point)`` of a trace file in the public format.

    ``{"metadata": {"gap_seconds": N}, "data": [...]}``: each point is the number of
    spot instances the collector held (preemption traces) or could get (availability
    traces) at that tick. A gang needs all its nodes: capacity is there where the
    count is the trace's largest (1 for the 1-node traces, 4 or 16 for the others).
    """
    doc = json.loads(Path(path).read_text())
    gap, data = float(doc["metadata"]["gap_seconds"]), [int(x) for x in doc["data"]]
    if gap <= 0 or not data:
        raise ValueError(f"{path}: no gap_seconds or no data")
    need = max(max(data), 1)
    return gap, [x >= need for x in data]


def from_trace(
    trace: tuple[float, list[bool]],
    *,
    work_s: float,
    slack: float,
    restart_s: float,
    save_s: float,
    start_s: float,
) -> World:
    """A world replaying ``trace`` from ``start_s`` into it (wrapping round at its end).

    A preemption is capacity going away (there at the tick before, not at this one).
    """
    gap, avail = trace
    finish_by = deadline(work_s, restart_s, slack)
    n = int(math.ceil(finish_by / DT)) + 1
    span = gap * len(avail)
    up = bytearray(avail[int(((start_s + i * DT) % span) / gap)] for i in range(n))
    kill = bytearray(1 if i and up[i - 1] and not up[i] else 0 for i in range(n))
    return World(work_s, finish_by, restart_s, save_s, up, kill)


@dataclass
class Obs:
    """What a policy sees at a decision point (all a live run could know then).

    ``up`` is the world's capacity now: the paper's baselines assume it is known (a
    probe); ``ours`` never reads it. ``step_s`` stays ``None`` until a step was trained.
    ``idle_end``: the attempt just preempted had trained no step (Vertex's launcher
    counts that as capacity not found).
    """

    t: float
    at: int
    phase: str
    up: bool
    done_s: float
    saved_s: float
    waited_s: float
    preemptions: int
    spot_h: float
    restarts: list = field(default_factory=list)
    step_s: float | None = None
    idle_end: bool = False
    # As the ledger has them, weighed by age as Measured.from_ledger weighs them
    # (exponential weights: a running sum, decayed from ``weighed_at``): preemptions and
    # hours held on spot; and the moves (at, from, to, rule).
    weighed_preemptions: float = 0.0
    weighed_hours: float = 0.0
    weighed_at: float = 0.0
    moved: list = field(default_factory=list)
    # What spot realized, as Measured.from_ledger weighs it (REALIZED_HALF_LIFE_H): the
    # hours held and the work kept (seconds) of spot attempts that are over, and the
    # running attempt's start and saved work then (None: none runs).
    realized_h: float = 0.0
    realized_kept_s: float = 0.0
    realized_at: float = 0.0
    attempt_began: float | None = None
    attempt_saved_s: float = 0.0
    held_until: float | None = None

    def realized(self, now: float) -> tuple[float, float]:
        """(hours held on spot, seconds of work kept there) weighed by age at ``now``."""
        w = age_weight(now - self.realized_at, REALIZED_HALF_LIFE_H)
        held, kept = self.realized_h * w, self.realized_kept_s * w
        if self.attempt_began is not None and now > self.attempt_began:
            paid = held_hours(self.attempt_began, now, now, REALIZED_HALF_LIFE_H)
            held += paid
            kept += (self.saved_s - self.attempt_saved_s) * paid * 3600 / (now - self.attempt_began)
        return held, kept

    def held_at(self, now: float) -> float | None:
        """When spot capacity was last held: now while an attempt runs."""
        return now if self.attempt_began is not None else self.held_until

    def _begin(self, now: float) -> None:
        self.attempt_began, self.attempt_saved_s = now, self.saved_s

    def _end(self, now: float) -> None:
        """The running spot attempt is over at ``now`` (preempted, or a move's)."""
        if self.attempt_began is None:
            return
        held, kept = self.realized(now)
        self.realized_h, self.realized_kept_s, self.realized_at = held, kept, now
        self.held_until = now
        self.attempt_began = None

    def weighed(self, now: float) -> tuple[float, float]:
        """(preemptions, spot hours) weighed by their age at ``now``."""
        w = age_weight(now - self.weighed_at)
        return self.weighed_preemptions * w, self.weighed_hours * w

    def _add(self, now: float, preemptions: float = 0.0, hours: float = 0.0) -> None:
        self.weighed_preemptions, self.weighed_hours = self.weighed(now)
        self.weighed_preemptions += preemptions
        self.weighed_hours += hours
        self.weighed_at = now


@dataclass
class Result:
    """One run's outcome: met its deadline, seconds paid on spot and on-demand."""

    met: bool
    spot_s: float
    od_s: float
    moves: int

    def cost(self, spot_price: float, work_s: float, restart_s: float) -> float:
        """Cost ÷ the on-demand-only cost (a restart and the work on on-demand)."""
        return (spot_price * self.spot_s + self.od_s) / (work_s + restart_s)


def run(world: World, policy, look_s: float = 300.0, step_s: float = 1.0) -> Result:
    """Plays ``policy(obs, world) -> rung`` in ``world``; asked at each look and preemption.

    ``step_s``: the seconds per step the run will measure once it trains (the world's
    work is ``work_s / step_s`` steps).
    """
    o = Obs(0.0, SPOT, WAIT, bool(world.up[0]), 0.0, 0.0, 0.0, 0, 0.0)
    restart_left, since_save, spot_s, od_s, moves = 0.0, 0.0, 0.0, 0.0, 0
    restarting_since, next_look, ask = None, 0.0, True
    n = len(world.up)
    for i in range(n):
        t = i * DT
        if o.done_s >= world.work_s or t >= world.finish_by:
            break
        up, killed = world.up[i], world.kill[i]
        if o.at == SPOT and o.phase != WAIT and (killed or not up):
            o._end(t)
            o.preemptions += 1
            o._add(t, preemptions=1.0)
            o.idle_end = o.phase == RESTART
            o.done_s, since_save = o.saved_s, 0.0
            o.phase, ask = WAIT, True
        if o.at == SPOT and o.phase == WAIT and up:
            o.phase, restart_left, restarting_since = RESTART, world.restart_s, t
            o._begin(t)
        o.t, o.up = t, bool(up)
        if ask or t >= next_look:
            to = policy(o, world)
            next_look, ask, o.idle_end = t + look_s, False, False
            if to != o.at:
                moves += 1
                o.moved.append((t, o.at, to, getattr(policy, "rule", "")))
                if o.phase == TRAIN:  # the notice of a move: save first
                    o.saved_s, since_save = o.done_s, 0.0
                if o.at == SPOT:
                    o._end(t)
                o.done_s, o.at, o.waited_s = o.saved_s, to, 0.0
                if to == OD or up:
                    o.phase, restart_left, restarting_since = RESTART, world.restart_s, t
                    if to == SPOT:
                        o._begin(t)
                else:
                    o.phase = WAIT
        if o.phase == WAIT:
            o.waited_s += DT
            continue
        o.waited_s = 0.0
        if o.at == SPOT:
            spot_s += DT
            o.spot_h += DT / 3600
            o._add(t + DT, hours=held_hours(t, t + DT, t + DT))
        else:
            od_s += DT
        if o.phase == RESTART:
            restart_left -= DT
            if restart_left <= 0:
                o.phase = TRAIN
                if restarting_since is not None:  # the ledger's start-up, or restart
                    # ... ends at the first step, and the speed is known with it.
                    o.restarts.append(t + DT - restarting_since)
                    o.step_s = step_s
            continue
        o.step_s = step_s
        o.done_s += DT
        since_save += DT
        if since_save >= world.save_s or o.done_s >= world.work_s:
            o.saved_s, since_save = o.done_s, 0.0
    met = o.done_s >= world.work_s and i * DT <= world.finish_by
    return Result(met, spot_s, od_s, moves)


def lower_bound(world: World, spot_price: float) -> float:
    """Cost ÷ on-demand-only that no policy beats in ``world``, knowing all its future.

    A relaxation of Wu et al.'s omniscient ILP (NSDI '24, section 5.3.1). Spot comes in
    stretches between preemptions and outages before the deadline; a gang on spot in a
    stretch of length ``L`` first restarts there (``r``, paid), so it gets at most
    ``L - r`` of progress, for at least ``price x (r + x)`` for ``x`` of it, which is at
    least ``price x L / (L - r)`` per second of progress. On-demand costs at least 1 per
    second of progress, plus a restart ``r`` if used at all. The cheapest mix of those
    rates (a fractional knapsack, cheapest rate first) bounds every schedule's cost: it
    drops the deadline's time constraint, lost steps and extra restarts, which only add
    to a real schedule's cost.
    """
    stretches, run_len = [], 0
    for up, kill in zip(world.up, world.kill, strict=True):
        if kill or not up:
            stretches.append(run_len)
            run_len = 1 if (up and kill) else 0
        else:
            run_len += 1
    stretches.append(run_len)
    r, work = world.restart_s, world.work_s
    offers = sorted(
        (spot_price * k * DT / (k * DT - r), k * DT - r) for k in stretches if k * DT > r
    )
    # The cost is piecewise linear in the spot progress bought, cheapest rate first: its
    # least is where a stretch's share ends (the rest on on-demand) or spot covers all.
    best, left, paid = work + r, work, 0.0
    for unit, most in offers:
        use = min(left, most)
        paid, left = paid + unit * use, left - use
        best = min(best, paid + (left + r if left > 0 else 0.0))
        if left <= 0:
            break
    return best / (work + r)
