"""Spent, lost and saved per attempt and per run (spottrain.ledger.attempt_cost), by table."""

from __future__ import annotations

import pytest

from spottrain import ledger
from spottrain.ledger import attempt_cost
from spottrain.pricing import Quote, Usage

T4 = dict(location="us-central1", machine_type="n1-standard-8", gpu_type="nvidia-tesla-t4",
          gpu_count=1, platform="gce", usage_from="node")  # fmt: skip


def fixed(spot, on_demand, reason=""):
    calls: list[Usage] = []

    def price(u: Usage) -> Quote:
        calls.append(u)
        return Quote(spot, on_demand, "USD", "stand-in", reason)

    price.calls = calls
    return price


def preempted_then_done(kind="spot", second_kind=None):
    """#1: 2 workers, restored at 10 s, 100 steps in 100 s, 20 redone; #2 resumes 15 s in."""
    return [
        {"attempt": 1, "started": 0.0, "resumed_at": 10.0, "ended": 110.0, "seconds": 110.0,
         "workers": 2, "start_step": 0, "last_step": 100, "saved_step": 80, "steps_lost": 20,
         "outcome": "preempted_unsaved", "capacity": kind, **T4},
        {"attempt": 2, "started": 130.0, "resumed_at": 145.0, "ended": 245.0, "seconds": 115.0,
         "workers": 2, "start_step": 80, "last_step": 200, "saved_step": 200, "steps_lost": 0,
         "outcome": "success", "capacity": second_kind or kind, **T4},
    ]  # fmt: skip


def test_spot_attempts_spend_the_spot_price_and_lose_redo_plus_restart():
    price = fixed(0.36, 1.2)
    one, two = attempt_cost.price_records(preempted_then_done(), price)
    assert one["spent"] == pytest.approx(220 / 3600 * 0.36, abs=1e-6)
    # 20 steps at 1 s each on 2 workers, and #2's 15 s restart on its 2 workers.
    assert one["lost_redo_seconds"] == 20.0 and one["lost_restart_seconds"] == 15.0
    assert one["lost"] == pytest.approx((20 + 15) * 2 * 0.36 / 3600, abs=1e-6)
    assert two["spent"] == pytest.approx(230 / 3600 * 0.36, abs=1e-6) and "lost" not in two
    assert one["currency"] == "USD" and one["price_source"] == "stand-in"
    assert len(price.calls) == 1  # one usage, one quote
    totals = attempt_cost.run_totals([one, two])
    assert totals["spent"] == pytest.approx(450 / 3600 * 0.36, abs=1e-6)
    assert totals["lost"] == pytest.approx(one["lost"], abs=1e-6) and totals["currency"] == "USD"


def test_the_restart_lasts_until_the_next_attempt_trained_its_first_step():
    """The input's fast-forward and the first trace after the restore are the restart's
    (issue 55): #2's first step 4 s after its restore makes 19 s, priced into #1's lost."""
    recs = preempted_then_done()
    recs[1]["first_step_at"] = recs[1]["resumed_at"] + 4.0
    one, _ = attempt_cost.price_records(recs, fixed(0.36, 1.2))
    assert one["lost_redo_seconds"] == 20.0 and one["lost_restart_seconds"] == 19.0
    assert one["lost"] == pytest.approx((20 + 19) * 2 * 0.36 / 3600, abs=1e-6)


def test_saved_prices_on_demand_only_the_work_that_was_kept():
    """An on-demand run would not have redone #1's 20 steps nor paid #2's 15 s restart:
    those machine-seconds (lost, part of spent) are not priced on demand. The restart
    ran on #2 but is #1's loss, so #1's saved carries it, as #1's lost does."""
    one, two = attempt_cost.price_records(preempted_then_done(), fixed(0.36, 1.2))
    assert one["saved"] == pytest.approx(
        (220 - 20 * 2 - 15 * 2) / 3600 * 1.2 - one["spent"], abs=1e-6
    )
    assert two["saved"] == pytest.approx(230 / 3600 * 1.2 - two["spent"], abs=1e-6)
    totals = attempt_cost.run_totals([one, two])
    kept = 450 - (20 + 15) * 2  # every machine-second but the lost ones
    assert totals["saved"] == pytest.approx(kept / 3600 * 1.2 - totals["spent"], abs=1e-6)
    # Against the same seconds all priced on demand, it was overstated by the lost ones.
    assert 450 / 3600 * 1.2 - totals["spent"] - totals["saved"] == pytest.approx(
        70 / 3600 * 1.2, abs=1e-6
    )


def test_an_attempt_that_ended_before_it_trained_is_all_restart():
    """A notice during #2's start: its seconds are #1's restart, and #3's start #2's."""
    recs = preempted_then_done()
    second = {**recs[1], "attempt": 2, "ended": 140.0, "seconds": 10.0, "outcome": "preempted",
              "start_step": 80, "last_step": 80, "steps_lost": 0}  # fmt: skip
    second.pop("resumed_at")
    third = {**recs[1], "attempt": 3, "started": 150.0, "resumed_at": 165.0, "ended": 265.0}
    one, two, three = attempt_cost.price_records([recs[0], second, third], fixed(0.36, 1.2))
    assert one["lost_restart_seconds"] == 10.0 and two["lost_restart_seconds"] == 15.0
    # #2's 10 s x 2 are #1's restart, charged to #1; #2 is charged #3's 15 s x 2.
    assert one["saved"] == pytest.approx((220 - 40 - 20) / 3600 * 1.2 - one["spent"], abs=1e-6)
    assert two["saved"] == pytest.approx((20 - 30) / 3600 * 1.2 - two["spent"], abs=1e-6)
    assert three["saved"] == pytest.approx(230 / 3600 * 1.2 - three["spent"], abs=1e-6)
    totals = attempt_cost.run_totals([one, two, three])
    kept = 220 + 20 + 230 - 40 - 20 - 30  # every machine-second but the lost ones
    assert totals["saved"] == pytest.approx(kept / 3600 * 1.2 - totals["spent"], abs=1e-6)


@pytest.mark.parametrize("kind", ["on-demand", "standard", "reservation", "flex-start"])
def test_full_price_kinds_spend_the_on_demand_price_and_save_minus_what_they_lost(kind):
    one, two = attempt_cost.price_records(preempted_then_done(kind), fixed(0.36, 1.2))
    assert one["spent"] == pytest.approx(220 / 3600 * 1.2, abs=1e-6)
    assert two["price_per_hour"] == 1.2
    # Per attempt: #1 saved minus what it lost; #2, which lost nothing, saved 0.
    assert one["saved"] == pytest.approx(-one["lost"], abs=1e-6) and two["saved"] == 0.0
    totals = attempt_cost.run_totals([one, two])
    assert totals["saved"] == pytest.approx(-totals["lost"], abs=1e-6)


def test_an_on_demand_attempt_after_a_preemption_is_shown_no_loss_of_its_own():
    """Spot preempted, then on-demand: the on-demand attempt saved 0 (it paid the on-demand
    price for work an on-demand run would have done); the restart it ran is the spot
    attempt's loss. The run's saved is what it was with the restart on #2."""
    one, two = attempt_cost.price_records(preempted_then_done("spot", "on-demand"),
                                          fixed(0.36, 1.2))  # fmt: skip
    assert two["saved"] == 0.0 and "lost" not in two
    assert one["saved"] == pytest.approx((220 - 40 - 30) / 3600 * 1.2 - 220 / 3600 * 0.36,
                                         abs=1e-6)  # fmt: skip
    totals = attempt_cost.run_totals([one, two])
    kept = 220 + 230 - 40 - 30
    assert totals["saved"] == pytest.approx(kept / 3600 * 1.2 - totals["spent"], abs=1e-6)


def test_the_nodes_kind_wins_over_the_compiled_one():
    recs = preempted_then_done("compute-class")
    recs[1]["node_kind"] = "on-demand"
    one, two = attempt_cost.price_records(recs, fixed(0.36, 1.2))
    assert one["price_unknown"] == "capacity kind 'compute-class' has no price"
    assert "spent" not in one and two["spent"] == pytest.approx(230 / 3600 * 1.2, abs=1e-6)
    assert attempt_cost.run_totals([one, two]) == {
        "price_unknown": "attempt 1: capacity kind 'compute-class' has no price"
    }


def test_the_price_flags_win_and_spent_and_saved_agree_with_them(tmp_path):
    book = ledger.Ledger(str(tmp_path), True, workers=2, price_per_hour=0.35,
                         on_demand_price_per_hour=1.2)  # fmt: skip
    book.begin(0)
    rec = book.end(0)
    price = fixed(9.0, 99.0)
    (priced,) = attempt_cost.price_records([rec], price)
    hours = rec["seconds"] * 2 / 3600
    assert priced["spent"] == pytest.approx(hours * 0.35, abs=1e-6)
    assert priced["saved"] == pytest.approx(hours * (1.2 - 0.35), abs=1e-6)
    assert priced["price_source"] == "--price-per-hour flags" and not price.calls
    assert "cost" not in rec and "on_demand_cost" not in rec  # one set of words


@pytest.mark.parametrize(
    "given, kinds, spent, lost, saved, unknown",
    [
        # Both flags: spot pays 0.36, the standard attempt 1.2. #1 lost 20 s x 2 redone
        # at 0.36 and #2's 15 s x 2 restart at 1.2; saved: #1's 180 kept machine-s less
        # the 30 of its restart at 1.2 - 0.022, and #2's 230 at 1.2 - 0.076667 = 0.
        ({"price_per_hour": 0.36, "on_demand_price_per_hour": 1.2}, ("spot", "standard"),
         (0.022, 0.076667), (0.014, None), (0.028, 0.0), ""),
        # Only the paid price: spent and lost known; saved unknown, and it says why.
        ({"price_per_hour": 0.36}, ("spot", "spot"), (0.022, 0.023), (0.007, None),
         (None, None), "no --on-demand-price-per-hour"),
        # Only the on-demand price: the spot attempt's price is unknown (so its lost).
        ({"on_demand_price_per_hour": 1.2}, ("spot", "on-demand"), (None, 0.076667),
         (None, None), (None, 0.0), "no --price-per-hour for this attempt"),
        # A value that is no price (a hand-edited record) is unknown, not a crash.
        ({"price_per_hour": "cheap"}, ("spot", "spot"), (None, None), (None, None),
         (None, None), "no --price-per-hour for this attempt"),
    ],
)  # fmt: skip
def test_the_price_flags_are_one_price_source_by_table(given, kinds, spent, lost, saved, unknown):
    """The flags' prices go through the same figures as a catalog's (attempt_cost)."""
    recs = preempted_then_done(*kinds)
    for r in recs:
        r["prices_given"] = given
    priced = attempt_cost.price_records(recs, fixed(9.0, 99.0))
    for rec, s, lo, sa in zip(priced, spent, lost, saved, strict=True):
        assert rec.get("spent") == (None if s is None else pytest.approx(s, abs=1e-6)), rec
        assert rec.get("lost") == (None if lo is None else pytest.approx(lo, abs=1e-6)), rec
        assert rec.get("saved") == (None if sa is None else pytest.approx(sa, abs=1e-6)), rec
        assert rec["price_source"] == "--price-per-hour flags"
    assert priced[0].get("price_unknown", "") == unknown


@pytest.mark.parametrize(
    "quote, reason",
    [
        (Quote(None, None, reason="catalog unreachable: 127.0.0.1:1"), "catalog unreachable"),
        (Quote(0.36, None), "no on-demand price"),
        (Quote(None, 1.2), "no spot price"),
    ],
)
def test_an_unknown_price_leaves_the_figures_out_and_says_why(quote, reason):
    recs = attempt_cost.price_records(preempted_then_done(), lambda u: quote)
    for rec in recs:
        assert reason in rec["price_unknown"]
        assert "saved" not in rec  # never 0
        assert ("spent" in rec) == (quote.spot is not None)
    totals = attempt_cost.run_totals(recs)
    assert set(totals) == {"price_unknown"} and reason in totals["price_unknown"]
    assert "price unknown" in attempt_cost.totals_line(totals)


def test_a_price_source_that_raises_is_a_price_unknown_not_a_failure():
    def broken(u):
        raise ConnectionError("refused")

    (rec,) = attempt_cost.price_records([{"attempt": 1, "capacity": "spot", "seconds": 5}], broken)
    assert rec["price_unknown"] == "ConnectionError: refused" and "spent" not in rec


def test_steps_lost_that_cannot_be_timed_leave_the_runs_lost_out():
    recs = preempted_then_done()
    recs[0].pop("ended")
    one, two = attempt_cost.price_records(recs, fixed(0.36, 1.2))
    assert "lost" not in one and one["lost_unknown"]
    totals = attempt_cost.run_totals([one, two])
    assert "lost" not in totals and "spent" in totals
    assert "lost to preemptions unknown" in attempt_cost.totals_line(totals)


def test_a_restart_on_an_unpriced_attempt_leaves_the_lost_out_not_short():
    recs = preempted_then_done(second_kind="compute-class")
    one, two = attempt_cost.price_records(recs, fixed(0.36, 1.2))
    assert "spent" in one and "lost" not in one and one["lost_unknown"]
    assert "spent" not in two


def test_pricing_again_replaces_the_old_figures():
    price = fixed(0.36, 1.2)
    once = attempt_cost.price_records(preempted_then_done(), price)
    again = attempt_cost.price_records(once, fixed(None, None, reason="gone"))
    assert all("spent" not in r and r["price_unknown"] == "gone" for r in again)


def test_unpriced_records_have_no_run_figures():
    assert attempt_cost.run_totals([{"attempt": 1}]) == {}
    assert attempt_cost.totals_line({}) == ""


def test_the_ledger_records_usage_and_resume_and_writes_the_figures_into_attempts_json(
    tmp_path, monkeypatch
):
    from spottrain.ledger import usage

    monkeypatch.setenv(ledger.CAPACITY_ENV, "spot")
    monkeypatch.setenv(usage.USAGE_ENV, usage.env_value(**{**T4, "usage_from": "assumed"}))
    book = ledger.Ledger(str(tmp_path), True, workers=2)
    book.begin(0)
    book.set_start(0)
    book.end(0)
    (rec,) = ledger.read(str(tmp_path))
    assert rec["machine_type"] == "n1-standard-8" and rec["usage_from"] == "assumed"
    assert rec["started"] <= rec["resumed_at"] <= rec["ended"]
    (priced,) = ledger.price(str(tmp_path), fixed(0.36, 1.2))
    (stored,) = ledger.read(str(tmp_path))
    assert (
        stored["spent"]
        == priced["spent"]
        == pytest.approx(rec["seconds"] * 2 * 0.36 / 3600, abs=1e-6)
    )
    assert ledger.totals([stored])["spent"] == stored["spent"]


def test_a_record_without_a_capacity_kind_is_priced_unknown(tmp_path):
    book = ledger.Ledger(str(tmp_path), True)
    book.begin(0)
    book.end(0)
    ledger.price(str(tmp_path), fixed(0.36, 1.2))
    (stored,) = ledger.read(str(tmp_path))
    assert stored["price_unknown"] == "no capacity kind" and "spent" not in stored
    assert ledger.totals([stored])["price_unknown"] == "attempt 1: no capacity kind"


def test_pricing_a_missing_ledger_writes_nothing(tmp_path):
    assert ledger.price(str(tmp_path / "none"), fixed(0.36, 1.2)) == []
    assert not (tmp_path / "none" / ledger.LEDGER).exists()


def test_saved_is_rounded_once_from_the_unrounded_seconds():
    """The restart's seconds are shown rounded (0.01 s) but priced as they were: with
    100 workers at 10/h on demand, 0.004 s of rounding is 0.0011 of saved."""
    recs = [
        {"attempt": 1, "started": 0.0, "resumed_at": 1.0, "ended": 11.0, "seconds": 11.0,
         "workers": 100, "start_step": 0, "last_step": 10, "saved_step": 10, "steps_lost": 0,
         "outcome": "preempted", "capacity": "spot", **T4},
        {"attempt": 2, "started": 12.0, "resumed_at": 112.004, "ended": 200.0, "seconds": 188.0,
         "workers": 100, "start_step": 10, "last_step": 20, "saved_step": 20, "steps_lost": 0,
         "outcome": "success", "capacity": "spot", **T4},
    ]  # fmt: skip
    one, _ = attempt_cost.price_records(recs, fixed(1.0, 10.0))
    kept = (11.0 - 100.004) * 100  # #2's restart is #1's
    assert one["saved"] == pytest.approx(kept / 3600 * 10.0 - 11.0 * 100 / 3600 * 1.0, abs=5e-7)


def test_the_save_on_notice_is_lost_and_the_steps_redone_are_timed_until_the_notice():
    """Issue 56: the seconds from a notice to the end (the save on notice) were kept work.

    #1 trained 100 steps from 10 s to its notice at 90 s (0.8 s a step), then saved and
    exited for 20 s: 20 steps redone are 16 s, the notice 20 s, #2's restart 15 s.
    """
    recs = preempted_then_done()
    recs[0]["notice_at"] = 90.0
    one, _ = attempt_cost.price_records(recs, fixed(0.36, 1.2))
    assert (one["lost_redo_seconds"], one["lost_notice_seconds"]) == (16.0, 20.0)
    assert one["lost"] == pytest.approx((16 + 20 + 15) * 2 * 0.36 / 3600, abs=1e-6)
    assert one["saved"] == pytest.approx(
        (220 - (16 + 20 + 15) * 2) / 3600 * 1.2 - one["spent"], abs=1e-6
    )


def test_a_notice_during_the_start_is_counted_once():
    """#2 got its notice 10 s into its start and ended 5 s later: its start is #1's
    restart (10 s), its save on notice its own lost (5 s); lost and kept part its 15 s."""
    recs = preempted_then_done()
    recs[1].update(ended=145.0, seconds=15.0, notice_at=140.0,
                   outcome="preempted", last_step=80, saved_step=80)  # fmt: skip
    recs[1].pop("resumed_at")
    recs.append({**preempted_then_done()[1], "started": 150.0, "resumed_at": 160.0,
                 "ended": 260.0, "seconds": 110.0})  # fmt: skip
    one, two, _ = attempt_cost.price_records(recs, fixed(0.36, 1.2))
    assert one["lost_restart_seconds"] == 10.0 and two["lost_notice_seconds"] == 5.0
    totals = attempt_cost.run_totals(attempt_cost.price_records(recs, fixed(0.36, 1.2)))
    kept = 220 + 30 + 220 - (20 + 10 + 5 + 10) * 2  # #2's seconds once, #3's restart 10 s
    assert totals["saved"] == pytest.approx(kept / 3600 * 1.2 - totals["spent"], abs=1e-5)
