"""The deadline simulator (bench/ladder_sim.py, ladder_world.py, ladder_policies.py).

Its world and baselines, not the policy it judges: a trace in the public format read
right, each baseline's rule on a table of situations, the omniscient bound below every
run that met its deadline, and ``ours`` fed only what the ledger could know.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import ladder_policies as pol  # noqa: E402
from bench import ladder_sim as sim  # noqa: E402
from bench import ladder_world as lw  # noqa: E402

H = 3600.0


def _trace(tmp_path: Path, data: list[int], gap: int = 60) -> Path:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data}))
    return path


def test_a_trace_is_read_as_capacity_per_point_the_gang_needing_all_its_nodes(tmp_path):
    assert lw.read_trace(_trace(tmp_path, [0, 1, 1, 0])) == (60.0, [False, True, True, False])
    # A 4-node trace: 3 of 4 nodes is no capacity for the gang.
    assert lw.read_trace(_trace(tmp_path, [4, 3, 4, 0], gap=300))[1] == [True, False, True, False]


def test_a_trace_without_gap_is_refused(tmp_path):
    with pytest.raises(ValueError):
        lw.read_trace(_trace(tmp_path, [1, 1], gap=0))


def test_a_replayed_trace_preempts_where_capacity_goes_and_wraps_round(tmp_path):
    trace = lw.read_trace(_trace(tmp_path, [1, 1, 0, 1], gap=120))  # 2 ticks a point
    w = lw.from_trace(trace, work_s=600, slack=2.0, restart_s=60, save_s=600, start_s=120)
    # From point 1: 1, 0, 1, then round to 1, 1, 0, ... (ticks of 60 s)
    assert list(w.up[:12]) == [1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0]
    assert [i for i, k in enumerate(w.kill[:12]) if k] == [2, 10]


def test_a_drought_at_the_start_outlasts_the_slack():
    w = lw.stochastic(work_s=10 * H, slack=1.5, rate_h=0.1, restart_s=300, save_s=600,
                      drought="start", seed=0)  # fmt: skip
    slack_ticks = (w.finish_by - 10 * H - 300) / lw.DT
    assert not any(w.up[: int(slack_ticks) + 1])


def _world(**kw) -> lw.World:
    base = {"work_s": 10 * H, "finish_by": 20 * H, "restart_s": 600.0, "save_s": 600.0}
    return lw.World(**{**base, **kw}, up=bytearray(b"\x01"), kill=bytearray(1))


def _obs(t_h: float, done_h: float, *, at=lw.SPOT, phase=lw.TRAIN, up=True, saved_h=None):
    saved = done_h if saved_h is None else saved_h
    return lw.Obs(t_h * H, at, phase, up, done_h * H, saved * H, 0.0, 0, 0.0)


# (obs, policy's rung). World: 10 h of work, deadline 20 h, restart 10 min.
LAST_SAFE = [
    (_obs(0, 0), lw.SPOT),
    (_obs(9.5, 0), lw.SPOT),  # 10.5 h left > 10 h + 10 min + a look and a tick
    (_obs(9.8, 0), lw.OD),  # 10.2 h left: no longer
    (_obs(9.8, 0.5, saved_h=0.0), lw.OD),  # the unsaved half hour counts as lost
    (_obs(9.8, 0.5), lw.SPOT),
    (_obs(1, 0, at=lw.OD), lw.OD),  # on-demand for good
]
UNIFORM = [
    (_obs(4, 1, phase=lw.WAIT, up=False), lw.OD),  # idle and behind ep(4 h) = 2 h
    (_obs(4, 3, phase=lw.WAIT, up=False), lw.SPOT),  # idle and ahead: waits for spot
    (_obs(4, 1, phase=lw.TRAIN), lw.SPOT),  # behind but on spot: exploitation
    (_obs(4, 2.1, at=lw.OD), lw.OD),  # on-demand, ahead of ep(4 h) but not ep(4 h + 2d)
    (_obs(4, 2.2, at=lw.OD), lw.SPOT),  # ahead of ep(t + 2d) = 2.17 h, spot there
    (_obs(4, 2.2, at=lw.OD, up=False), lw.OD),  # ... but no spot
    (_obs(9.5, 0.5, phase=lw.TRAIN), lw.SPOT),  # 10.5 h left >= 9.5 h + 2d + a look
    (_obs(10.4, 0.5, phase=lw.TRAIN), lw.OD),  # safety net: 9.6 h < 9.5 h + 25 min
]


@pytest.mark.parametrize(("obs", "rung"), LAST_SAFE)
def test_last_safe_moment(obs, rung):
    assert pol.last_safe_moment(obs, _world()) == rung


@pytest.mark.parametrize(("obs", "rung"), UNIFORM)
def test_uniform_progress(obs, rung):
    assert pol.uniform_progress(obs, _world()) == rung


@pytest.mark.parametrize("obs", [o for o, _ in LAST_SAFE + UNIFORM])
def test_the_trivial_baselines(obs):
    assert pol.always_od(obs, _world()) == lw.OD
    assert pol.always_spot(obs, _world()) == lw.SPOT


CELLS = [(1.05, 0.5, "none"), (1.5, 4.0, "after"), (2.0, 2.0, "start"), (3.0, 16.0, "none")]


@pytest.mark.parametrize(("slack", "rate", "drought"), CELLS)
def test_no_run_that_met_its_deadline_costs_less_than_the_omniscient_bound(slack, rate, drought):
    policies = {**pol.BASELINES, "ours": pol.ours({"spot": 0.3, "on-demand": 1.0})}
    met = 0
    for seed in range(4):
        w = lw.stochastic(work_s=4 * H, slack=slack, rate_h=rate, restart_s=300, save_s=600,
                          drought=drought, seed=seed)  # fmt: skip
        bound = lw.lower_bound(w, 0.3)
        for name, policy in policies.items():
            r = lw.run(w, policy)
            met += r.met
            if r.met:
                assert r.cost(0.3, w.work_s, w.restart_s) >= bound - 1e-9, (name, seed)
    assert met  # always-od at least


def _stretches(work_s: float) -> lw.World:
    up, kill = bytearray(b"\x01") * 20, bytearray(20)
    kill[10] = 1  # two stretches of 600 s: 540 s of progress each after a 60 s restart
    return lw.World(work_s=work_s, finish_by=1200.0, restart_s=60.0, save_s=60.0, up=up, kill=kill)


def test_the_bound_prices_each_stretch_of_spot_with_its_restart():
    # 0.5 x 600 / 540 a second of progress: 1,000 s all on spot
    assert lw.lower_bound(_stretches(1000.0), 0.5) == pytest.approx(0.5 * 600 / 540 * 1000 / 1060)
    # 1,080 s on spot, 120 s and a restart on on-demand
    assert lw.lower_bound(_stretches(1200.0), 0.5) == pytest.approx((600 + 120 + 60) / 1260)
    # Spot at 0.99: 1.1 a second of progress, 1,100 for it all: on-demand (1,060) is less
    assert lw.lower_bound(_stretches(1000.0), 0.99) == pytest.approx(1.0)


def test_ours_is_given_no_step_time_before_a_step_was_trained(monkeypatch):
    seen = []

    def spy(ladder, at, measured, **kw):
        seen.append((kw["now"], dict(measured.step_s), measured.restart_s))
        return real(ladder, at, measured, **kw)

    real = pol.decide
    monkeypatch.setattr(pol, "decide", spy)
    w = lw.stochastic(work_s=2 * H, slack=3.0, rate_h=0.1, restart_s=300, save_s=600,
                      drought="start", seed=1)  # fmt: skip
    lw.run(w, pol.ours({"spot": 0.3, "on-demand": 1.0}))
    # Nothing until a step was trained (the drought outlasts the slack: on-demand's
    # first steps, after the pace rule's move and its restart), that speed after it.
    known = [bool(s) for _, s, _ in seen]
    first = known.index(True)
    assert first > 0 and all(known[first:])
    assert all(s == {pol.SHAPE.shape: pol.STEP_S} for _, s, _ in seen[first:])
    # No restart measured until the first start-up is over; then that start-up.
    assert all(r is None for _, _, r in seen[:first])
    assert {r for _, _, r in seen[first:]} == {w.restart_s}


def test_the_table_and_its_summary():
    rows = sim.table("quick", runs=1, work_h=2.0)
    assert len(rows) == 3 * 3 * 1 * 3 * 1
    assert all(r["omniscient"]["cost"] <= r["always-od"]["cost"] for r in rows)
    sums = sim.summary(rows)
    assert sums["always-od"]["met_where_od_met"] == sums["always-od"]["od_met"] == len(rows)
    assert sums["always-spot"]["met_where_od_met"] < len(rows)  # a drought at the start


def test_a_trace_is_replayed_at_every_slack_restart_and_price(tmp_path):
    path = _trace(tmp_path, ([1] * 50 + [0] * 10) * 4)  # 4 h: 50 min up, 10 min down
    rows = sim.trace_table([str(path)], runs=2, work_h=1.0)
    assert len(rows) == len(sim.SLACKS) * len(sim.RESTARTS_MIN) * len(sim.PRICES)
    assert {r["trace"] for r in rows} == {"/".join(path.parts[-3:])}
    assert all(r["omniscient"]["cost"] <= r["always-od"]["cost"] for r in rows)
    # 10 min without spot each hour: spot alone misses the tightest deadline
    assert next(r for r in rows if r["slack"] == 1.02)["always-spot"]["met"] == 0


def _spy(monkeypatch) -> list:
    seen = []
    real = pol.decide

    def spy(ladder, at, measured, **kw):
        seen.append({"at": at, **kw})
        return real(ladder, at, measured, **kw)

    monkeypatch.setattr(pol, "decide", spy)
    return seen


def test_ours_sees_a_job_preempted_before_its_first_step_as_not_running(monkeypatch):
    """As the Vertex launcher with a deadline: a job that ended without progress is not
    running (staying costs a restart) and has not used its patience (vertex_ladder's
    ``next_step``): one preemption during the start-up does not leave spot for good."""
    seen = _spy(monkeypatch)
    up, kill = bytearray(b"\x01") * 40, bytearray(40)
    kill[3] = 1  # 3 min into a 10 min restart
    w = lw.World(work_s=1200.0, finish_by=4 * H, restart_s=600.0, save_s=600.0, up=up, kill=kill)
    result = lw.run(w, pol.ours({"spot": 0.3, "on-demand": 1.0}))
    assert seen[1]["now"] == 3 * lw.DT
    assert (seen[1]["waited_s"], seen[1]["running"]) == (0.0, False)
    assert result.met and result.od_s == 0  # it stayed on spot and finished there


def test_ours_on_gke_is_asked_as_the_jobset_launcher_asks(monkeypatch):
    seen = _spy(monkeypatch)
    w = lw.stochastic(work_s=2 * H, slack=1.5, rate_h=2.0, restart_s=300, save_s=600,
                      drought="none", seed=3)  # fmt: skip
    lw.run(w, pol.ours(None, launcher="gke"))
    assert seen and all("prices" not in c and "waited_s" in c and "running" in c
                        for c in seen)  # fmt: skip
