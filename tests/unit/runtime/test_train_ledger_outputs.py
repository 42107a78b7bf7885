"""The train component's ledger outputs: Metrics totals and a Markdown table."""

from __future__ import annotations

import pytest
from kfp import dsl
from trainer_helpers import ledger, tiny_args

from spottrain import exits
from spottrain import ledger as attempt_ledger
from spottrain.runtime.train import write_ledger
from spottrain.trainer import attempt


def test_ledger_becomes_metrics_and_markdown(digits_dir, tmp_path):
    out = tmp_path / "run"
    prices = dict(price_per_hour=0.35, on_demand_price_per_hour=1.2)
    # A real fatal attempt, then a real successful one, in the same checkpoint dir.
    assert attempt.run(tiny_args(digits_dir, out, backbone="nope", **prices)) == 64
    ok = tiny_args(digits_dir, out, train_steps=4, save_every_steps=2, **prices)
    assert attempt.run(ok) == exits.OK

    metrics = dsl.Metrics(name="metrics", uri=str(tmp_path / "metrics"))
    attempts = dsl.Markdown(name="attempts", uri=str(tmp_path / "attempts.md"))
    totals = write_ledger(str(out / "checkpoints"), metrics, attempts)

    assert totals["attempts"] == 2 and totals["steps_lost"] == 0
    assert metrics.metadata["ledger_attempts"] == 2.0
    # The flags are the user's prices: the figures are priced by them (one worker each,
    # no capacity kind: the spot price), whatever the catalog says; one set of words.
    m = metrics.metadata
    hours = sum(r["seconds"] for r in attempt_ledger.read(str(out / "checkpoints"))) / 3600
    assert m["ledger_spent"] == pytest.approx(hours * 0.35, abs=1e-4)
    assert m["ledger_saved"] == pytest.approx(hours * (1.2 - 0.35), abs=1e-4)
    assert m["ledger_saved"] > 0
    assert m["ledger_lost"] == 0  # nothing was redone
    assert not {"ledger_cost", "ledger_saving", "ledger_on_demand_cost"} & set(m)
    table = (tmp_path / "attempts.md").read_text()
    rows = [ln for ln in table.splitlines() if ln.startswith("| 1 ") or ln.startswith("| 2 ")]
    assert "fatal_config" in rows[0] and "| 64 |" in rows[0]
    assert "success" in rows[1] and "| 0 | 4 | 4 |" in rows[1]
    assert "2 attempt(s), 0 preemption(s), 0 step(s) lost" in table


def test_an_unreadable_ledger_is_moved_aside_not_overwritten(digits_dir, tmp_path):
    """A crash mid-write left garbage (a file system without atomic rename): the
    history is kept in quarantine/ and the new ledger says where."""
    out = tmp_path / "run"
    ckpt = out / "checkpoints"
    ckpt.mkdir(parents=True)
    (ckpt / "attempts.json").write_text('{"attempts": [{"attempt": 1, "outc')
    assert attempt.run(tiny_args(digits_dir, out, train_steps=2, save_every_steps=1)) == 0
    (moved,) = (ckpt / "quarantine").glob("attempts.json.*")
    assert moved.read_text() == '{"attempts": [{"attempt": 1, "outc'
    (record,) = ledger(out)
    assert record["outcome"] == "success"
    assert record["previous_ledger_quarantined"] == str(moved)
