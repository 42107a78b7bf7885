"""The ledger's one record type (spottrain.ledger.schema.Record) against its documentation
and against what the writers write."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spottrain import ledger
from spottrain.ledger import schema

DOC = Path(__file__).resolve().parents[3] / "docs" / "checkpoints.md"


def _documented() -> set[str]:
    """The fields docs/checkpoints.md's ledger table names (first column)."""
    text = DOC.read_text().split("## The attempt ledger", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    return {f for row in rows for f in re.findall(r"`([a-z_]+)`", row.split(" | ")[0])}


def test_the_documented_fields_are_the_records_fields():
    """Every field the page explains is declared, and every declared field explained."""
    documented = _documented()
    assert documented, "no table found in docs/checkpoints.md"
    assert sorted(documented - set(schema.FIELDS)) == []
    assert sorted(set(schema.FIELDS) - documented) == []


def test_a_field_no_record_declares_is_named():
    assert schema.undeclared([{"started": 1.0, "outcome": "success"}]) == []
    assert schema.undeclared([{"started": 1.0}, {"cost": 2.0, "seconds": 1}]) == ["cost"]


def test_the_writers_records_are_declared(tmp_path, monkeypatch):
    """The engine's writer, its close of a silent attempt, the JobSet launcher's
    annotation and the figures add only declared fields."""
    monkeypatch.setenv(ledger.CAPACITY_ENV, "spot")
    book = ledger.Ledger(str(tmp_path), True, workers=2, price_per_hour=1.0)
    book.begin(0)
    book.set_start(0)
    book.progress(7, saved_step=5, force=True)
    book.notice(7, "SIGTERM")
    book.end(143, "preempted")
    ledger.Ledger(str(tmp_path), True, price_per_hour=1.0).begin(7)  # never closes
    ledger.Ledger(str(tmp_path), True, price_per_hour=1.0).begin(7)  # closes it: killed
    first = ledger.read(str(tmp_path))[0]
    gang = {"started": first["started"], "finished": first["ended"], "node": "n1",
            "node_kind": "spot", "gang": "st-1/0", "disruption": "", "usage_from": "node",
            "pod_exit_codes": {"0": 143}, "pods": [{"pod": "p", "index": 0}]}  # fmt: skip
    assert ledger.annotate(str(tmp_path), [gang]) == 1
    records = ledger.price(str(tmp_path), None)
    assert [r["outcome"] for r in records] == ["preempted", "killed", "running"], records
    assert "node" in records[0] and "spent" in records[0], records[0]
    assert schema.undeclared(records) == []


@pytest.mark.parametrize(
    ("field", "value"),
    [("started", "yesterday"), ("outcome", 3), ("prices_given", [1.0]), ("steps_lost", "2")],
)
def test_a_computed_field_of_another_type_makes_the_ledger_unreadable(field, value):
    """The types checked on read come from Record's annotations."""
    rec = {"started": 1.0, field: value}
    assert field in (schema.problem({"attempts": [rec]}) or "")
