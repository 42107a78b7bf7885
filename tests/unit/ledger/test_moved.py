"""An attempt a ladder move ended (issue 56): its launcher's cancel was its notice, so it
is marked ``moved_at`` and counted as a move, not a preemption, by the ledger's totals,
the figures, the attempts page and the deadline forecast's preemption rate."""

from __future__ import annotations

import pytest

from spottrain import ledger
from spottrain.ladder.forecast import Measured
from spottrain.ledger import attempt_cost, moves, schema
from spottrain.pricing import Quote

USAGE = dict(location="us-central1", machine_type="n1-standard-8", gpu_type="nvidia-tesla-t4",
             gpu_count=1, platform="gce", usage_from="node")  # fmt: skip


T = 1_800_000_000.0  # the records' times are seconds after T


def _rec(n, started, first, notice, ended, steps, outcome, capacity="spot", **more):
    started, first, ended = T + started, T + first, T + ended
    rec = {"id": f"r{n}", "started": started, "resumed_at": first, "first_step_at": first,
           "ended": ended, "seconds": ended - started, "workers": 1, "start_step": steps[0],
           "last_step": steps[1], "saved_step": steps[1], "steps_lost": 0, "outcome": outcome,
           "capacity": capacity, **USAGE, **more}  # fmt: skip
    if notice is not None:
        rec["notice_at"] = T + notice
    return rec


def demo_shape():
    """Two spot attempts preempted, a third left by a move at 319 s, a standard one done.

    Each start-up (start to first step) is 60 s, each save on notice 10 s, a step 1 s:
    150 steps. On demand alone: one start-up, 150 s of steps, the last 10 s (its final
    save) = 220 s.
    """
    records = [
        _rec(1, 0.0, 60.0, 100.0, 110.0, (0, 40), "preempted"),
        _rec(2, 120.0, 180.0, 210.0, 220.0, (40, 70), "preempted"),
        _rec(3, 230.0, 290.0, 320.0, 330.0, (70, 100), "preempted"),
        _rec(4, 340.0, 400.0, None, 460.0, (100, 150), "success", capacity="standard"),
    ]
    move = {"at": T + 319.0, "platform": "vertex", "left": "projects/p/locations/r/customJobs/3",
            "from_capacity": "spot", "to_capacity": "standard", "reason": "late"}  # fmt: skip
    return records, move


def marked(records, move_list):
    return ledger.merge({"attempts": [], "moves": move_list}, records)["attempts"]


@pytest.mark.parametrize(
    "case, move, gang, moved",
    [
        ("its notice came 1 s after the move", {"at": 319.0}, None, [False, False, True, False]),
        ("clocks 4 s apart", {"at": 324.0}, None, [False, False, True, False]),
        # Preempted at 320 s, the launcher saw the job end and moved 30 s later.
        ("preempted before the move", {"at": 350.0}, None, [False] * 4),
        ("a move while the 1st ran", {"at": 99.0}, None, [True, False, False, False]),
        ("a notice long after the move", {"at": 319.0 - schema.MOVE_WINDOW_S - 1}, None,
         [False] * 4),
        ("its own gang (GKE)", {"at": 319.0, "platform": "gke", "left": "js"}, "js/0",
         [False, False, True, False]),
        ("another gang (GKE)", {"at": 319.0, "platform": "gke", "left": "js-od"}, "js/0",
         [False] * 4),
    ],
)  # fmt: skip
def test_the_record_a_move_ended_is_the_one_running_noticed_just_after_it(case, move, gang, moved):
    records, _ = demo_shape()
    if gang:
        records[2]["gang"] = gang
    move = {**move, "at": T + move["at"]}
    out = marked(records, [move])
    assert [schema.moved(r) for r in out] == moved, case
    assert all(r.get("moved_at") == move["at"] for r in out if schema.moved(r))


def test_a_move_is_not_a_preemption_in_the_totals():
    """4 counted where 3 happened (issue 56): the moved attempt is neither."""
    records, move = demo_shape()
    totals = ledger.merge({"attempts": [], "moves": [move]}, records)["totals"]
    assert (totals["preemptions"], totals["interruptions"], totals["moved"]) == (2, 2, 1)
    assert ledger.merge({"attempts": []}, records)["totals"]["preemptions"] == 3  # no move


def test_the_mark_holds_whichever_the_launcher_or_the_trainer_writes_last(tmp_path):
    d = str(tmp_path)
    records, move = demo_shape()
    ledger.store(d).update(lambda stored: ledger.merge(stored, records[:2]))
    moves.add_move(d, {**move, "at": T + 230.5})  # while #3 had only begun: no record ends near
    moves.add_move(d, move)
    ledger.store(d).update(lambda stored: ledger.merge(stored, records[2:]))  # #3 ends after
    assert [schema.moved(r) for r in ledger.read(d)] == [False, False, True, False]


def test_the_forecast_counts_no_move_as_a_preemption():
    """A move must not raise the measured preemption rate it was made on."""
    records, move = demo_shape()
    m = Measured.from_ledger(marked(records, [move]), steps_total=150, save_every_s=60.0)
    # Two preemptions (the move's attempt is not one), each weighed by its age at the
    # newest record's time (a few minutes: ~0.97 to ~0.99 of one, not three).
    assert 1.9 < m.preemptions < 2.0
    assert m.preemptible_hours == pytest.approx((110 + 100 + 100) / 3600, rel=0.05)


def test_a_move_costs_its_redo_notice_and_restart_outside_lost():
    """The standard job's start-up (60 s) was the move's restart: not lost to spot."""
    records, move = demo_shape()
    priced = attempt_cost.price_records(marked(records, [move]), lambda u: Quote(0.4, 1.0, "USD"))
    one, two, three, four = priced
    assert one["lost"] == pytest.approx((10 + 60) * 0.4 / 3600, abs=1e-6)  # notice, #2's restart
    assert (one["lost_notice_seconds"], one["lost_restart_seconds"]) == (10.0, 60.0)
    assert "lost" not in three and "lost_restart_seconds" not in three
    # Its save on the move's notice (spot), and #4's start-up (standard).
    assert three["move_cost"] == pytest.approx((10 * 0.4 + 60 * 1.0) / 3600, abs=1e-6)
    assert three["move_seconds"] == 70.0
    totals = attempt_cost.run_totals(priced)
    assert totals["lost"] == pytest.approx(one["lost"] + two["lost"], abs=1e-6)
    assert totals["move_cost"] == pytest.approx(three["move_cost"], abs=1e-6)
    line = attempt_cost.totals_line(totals)
    assert f"lost to preemptions {totals['lost']:.4f}, ladder moves cost" in line


def test_spot_that_lost_money_saves_less_than_0():
    """Issue 56's demo: paid more than on demand alone, yet the page said saved > 0.

    Kept work is what an on-demand run pays too: its one start-up, the steps kept, its
    final save. Not a restart, a save on notice nor a step trained again.
    """
    records, move = demo_shape()
    priced = attempt_cost.price_records(marked(records, [move]), lambda u: Quote(0.4, 1.0, "USD"))
    totals = attempt_cost.run_totals(priced)
    on_demand_alone = (60 + 150 + 10) * 1.0 / 3600
    assert totals["spent"] == pytest.approx((310 * 0.4 + 120 * 1.0) / 3600, abs=1e-6)
    assert totals["spent"] > on_demand_alone
    spent = (310 * 0.4 + 120 * 1.0) / 3600
    assert totals["saved"] == pytest.approx(on_demand_alone - spent, abs=1e-6)
    assert totals["saved"] < 0


def test_the_attempts_table_says_the_move_and_its_cost():
    from spottrain.runtime.train import ledger_markdown

    records, move = demo_shape()
    priced = attempt_cost.price_records(marked(records, [move]), lambda u: Quote(0.4, 1.0, "USD"))
    table = ledger_markdown(priced, ledger.totals(priced))
    row = next(ln for ln in table.splitlines() if ln.startswith("| 3 "))
    assert "| preempted, left by a ladder move |" in row
    assert row.endswith(f"| move cost {priced[2]['move_cost']:.4f} |")
    assert "4 attempt(s), 2 preemption(s)" in table
    assert "hangs included); 1 attempt(s) left by a ladder move.**" in table
