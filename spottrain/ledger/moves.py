"""The run's ladder and its moves between rungs, in the ledger file beside the records.

A move is a run's event, not an attempt's: a job that waited for capacity and was
left for the next rung never trained, so it has no record to carry it. The launcher
that walks the ladder writes the ladder and its deadline once (:func:`set_ladder`)
and each move as it makes it (:func:`add_move`), by the same compare-and-swap as the
records (:func:`spottrain.ledger.merge` keeps both).
"""

from __future__ import annotations

from spottrain.ledger import merge, schema, store
from spottrain.ledger.schema import LadderPlan, Move


def set_ladder(checkpoint_dir: str, plan: LadderPlan) -> None:
    """Writes the ladder being walked and its deadline (replacing an earlier one)."""

    def change(stored: dict | None) -> dict:
        return {**merge(stored, []), "ladder": dict(plan)}

    store(checkpoint_dir).update(change)


def add_move(checkpoint_dir: str, move: Move) -> None:
    """Appends one move (a launcher re-attached after a crash may write it again: kept once)."""

    def change(stored: dict | None) -> dict:
        doc = merge(stored, [])
        moves = [m for m in doc.get("moves", []) if m != move]
        return {**doc, "moves": [*moves, dict(move)]}

    store(checkpoint_dir).update(change)


def read(checkpoint_dir: str) -> tuple[LadderPlan | None, list[Move]]:
    """The ladder (``None``: none was walked) and the moves, oldest first."""
    data, _ = store(checkpoint_dir).read()
    keys = schema.run_keys(data)
    return keys.get("ladder"), list(keys.get("moves", []))
