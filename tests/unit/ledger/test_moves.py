"""The run's ladder and moves in the ledger file (spottrain/ledger/moves.py): written
beside the records, kept by every records' write, read back as written."""

from __future__ import annotations

import json

from spottrain import ledger
from spottrain.ledger import moves, schema

MOVE = {"at": 1000.0, "platform": "vertex", "left": "projects/p/locations/r/customJobs/1",
        "from_rung": "spot 1 x n1-standard-4", "to_rung": "on-demand 1 x n1-standard-4",
        "from_capacity": "spot", "to_capacity": "on-demand", "reason": "to finish by 10:00 UTC",
        "finish_by": 2000.0, "forecast_finish": 1500.0, "forecast_cost": None}  # fmt: skip


def test_the_ladder_and_moves_survive_the_records_writes(tmp_path):
    d = str(tmp_path)
    assert moves.read(d) == (None, [])
    plan = {"rungs": ["spot 1 x n1-standard-4"], "finish_by": 2000.0, "asked": "1h",
            "set_at": 900.0}  # fmt: skip
    moves.set_ladder(d, plan)
    moves.add_move(d, MOVE)
    moves.add_move(d, MOVE)  # a launcher that re-attached writes it again: kept once
    # The engine's writer and the price step rewrite the file through merge.
    ledger.Ledger(d, enabled=True).begin(start_step=0)
    ledger.price(d, None)
    data = json.loads((tmp_path / ledger.LEDGER).read_text())
    assert data["ladder"] == plan and data["moves"] == [MOVE] and len(data["attempts"]) == 1
    assert moves.read(d) == (plan, [MOVE])
    assert set(MOVE) <= set(schema.Move.__annotations__)
    assert set(plan) <= set(schema.LadderPlan.__annotations__)


def test_merge_keeps_only_well_formed_run_keys():
    stored = {"attempts": [], "ladder": {"rungs": []}, "moves": [MOVE], "other": 1}
    assert set(ledger.merge(stored, [])) == {"attempts", "totals", "ladder", "moves"}
    assert set(ledger.merge({**stored, "moves": "x"}, [])) == {"attempts", "totals", "ladder"}
