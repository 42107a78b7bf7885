"""The policies ``bench/ladder_sim.py`` compares: each a small function of what it observes.

A policy is ``policy(obs, world) -> rung`` (:data:`~bench.ladder_world.SPOT` or
:data:`~bench.ladder_world.OD`), asked at every look and right after a preemption. The
baselines are told the job's work and the restart, as in Wu et al.'s model (NSDI '24,
section 3: the computation time ``C(0)`` and the changeover delay ``d`` are known);
``ours`` is given only what the ledger knows at that moment (:func:`ours`).
"""

from __future__ import annotations

from collections import Counter

from bench.ladder_world import OD, SPOT, Obs, World
from spottrain.ladder import Ladder, Rung
from spottrain.ladder.decide import MOVE, decide
from spottrain.ladder.forecast import Measured, Prior

LOOK_S = 300.0
CRASHES: Counter = Counter()  # decide() raising, per launcher
STEP_S = 1.0
# The spot rung's patience is unset (for ever): a move is decide()'s, from the
# deadline, or on Vertex a job that ended without a step (counted as patience used).
SHAPE = Rung("spot", "n1-standard-8", "nvidia-tesla-t4", 1, 2)
LADDER = Ladder((SHAPE, Rung("on-demand", "n1-standard-8", "nvidia-tesla-t4", 1, 2)))


def always_od(o: Obs, w: World) -> int:
    """On-demand from the start."""
    return OD


def always_spot(o: Obs, w: World) -> int:
    """Spot, waiting for it however long it takes."""
    return SPOT


def _left_if_preempted(o: Obs, w: World) -> float:
    """Seconds of work left if a preemption came now (the steps since the save lost)."""
    return w.work_s - (o.saved_s if o.at == SPOT else o.done_s)


def last_safe_moment(o: Obs, w: World) -> int:
    """Spot until the time left is no more than on-demand's finish plus one restart.

    Wu et al.'s greedy with its Safety Net (NSDI '24, section 3): checked at every look,
    so one look's time and a preemption's lost steps are held in hand too; once on
    on-demand it stays.
    """
    if o.at == OD:
        return OD
    left = w.finish_by - o.t
    need = _left_if_preempted(o, w) + w.restart_s + LOOK_S + 60.0
    return OD if left <= need else SPOT


def uniform_progress(o: Obs, w: World) -> int:
    """Wu et al.'s Uniform Progress (NSDI '24, section 5.2.2, with the Safety Net of §3).

    Expected progress ``ep(t) = t x C(0) / R(0)`` (uniform over the deadline), current
    progress ``cp(t)`` (here the saved steps on spot, as a preemption loses the rest):

    1. Uniform Progress: idle (waiting for spot) and ``cp(t) < ep(t)``: on-demand.
    2. Taking Risks: spot whenever it is there, even behind ``ep(t)``; stay on it until
       preempted (Exploitation Rule).
    3. Hysteresis: on on-demand, stay until ``cp(t) >= ep(t + 2d)``.
    4. Safety Net: ``R(t) < C(t) + 2d``: on-demand until the end.

    A look is 5 min here, so the Safety Net holds one look more than the paper's 2d.
    """
    d = w.restart_s
    left_work = _left_if_preempted(o, w)
    if w.finish_by - o.t < left_work + 2 * d + LOOK_S:
        return OD
    rate = w.work_s / w.finish_by
    cp = o.saved_s if o.at == SPOT else o.done_s
    if o.at == OD:
        ahead = cp >= rate * (o.t + 2 * d)
        return SPOT if ahead and o.up else OD
    if o.phase != "wait":  # on spot, running or restarting: exploitation
        return SPOT
    return OD if cp < rate * o.t else SPOT


def measured_now(o: Obs, w: World) -> Measured:
    """What ``Measured.from_ledger`` would give at ``o.t``: the saved step, the step time
    once a step was trained, the restart once one after a preemption was measured, the
    preemptions and spot hours weighed by age, the moves."""
    return Measured(
        steps_done=int(o.saved_s / STEP_S), steps_total=int(w.work_s / STEP_S),
        step_s={} if o.step_s is None else {SHAPE.shape: o.step_s},
        replicas={} if o.step_s is None else {SHAPE.shape: SHAPE.replicas},
        preemptions=o.weighed(o.t)[0],
        preemptible_hours=o.weighed(o.t)[1],
        restart_s=sum(o.restarts) / len(o.restarts) if o.restarts else None,
        save_every_s=w.save_s,
        returns=sum(1 for _, a, b, _ in o.moved if b == SPOT),
        left_spot_at=max((t for t, a, _, _ in o.moved if a == SPOT), default=None),
        left_by=next((rule for _, a, _, rule in reversed(o.moved) if a == SPOT), ""),
        began_at=0.0,
        held_h=o.realized(o.t)[0],
        kept_steps=o.realized(o.t)[1] / STEP_S,
        spot_held_at=o.held_at(o.t),
    )  # fmt: skip


def ours(
    prices: dict | None,
    prior: Prior | None = None,
    *,
    launcher: str = "vertex",
    estimate: float | None = 1.0,
):
    """The launchers' policy: :func:`spottrain.ladder.decide.decide`, driven as they do.

    ``launcher="vertex"``: as ``spottrain/runtime/vertex_ladder.py``'s ``next_step``
    calls it, with ``waited_s``, ``running`` and ``prices``. ``"gke"``: as the JobSet
    launcher's deadline check (``spottrain/runtime/train_job/deadline.py``): the time
    the gang's pods have been Unschedulable as ``waited_s``, no prices. Both are given
    only what the ledger knows then (:func:`measured_now`); ``up`` (the world's
    capacity) is never read. ``estimate``:
    the user's step time estimate as a multiple of the true one (``Prior.step_s``;
    ``None``: none given). Both look every ``LOOK_S`` here (the JobSet launcher's
    default look is 60 s).
    """
    prior = prior or Prior()
    if estimate is not None:
        prior = Prior(prior.preemptions_per_hour, prior.weight_hours, prior.restart_s,
                      step_s=estimate * STEP_S)  # fmt: skip

    def policy(o: Obs, w: World) -> int:
        measured = measured_now(o, w)
        running = o.phase != "wait" and not o.idle_end
        try:
            if launcher == "gke":
                made = decide(LADDER, o.at, measured, now=o.t, finish_by=w.finish_by,
                              look_every_s=LOOK_S, waited_s=o.waited_s, running=running,
                              prior=prior)  # fmt: skip
            else:
                made = decide(LADDER, o.at, measured, now=o.t, finish_by=w.finish_by,
                              look_every_s=LOOK_S, waited_s=o.waited_s, running=running,
                              prior=prior, prices=prices)  # fmt: skip
        except OverflowError:
            CRASHES[launcher] += 1
            return o.at
        if made.kind != MOVE:
            return o.at
        policy.rule = made.rule  # the world writes it in the move, as the ledger does
        return made.to

    policy.rule = ""
    return policy


BASELINES = {
    "always-od": always_od,
    "always-spot": always_spot,
    "last-safe": last_safe_moment,
    "uniform-progress": uniform_progress,
}
SIMPLE = ("always-od", "always-spot", "last-safe")
