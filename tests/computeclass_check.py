"""The ComputeClass as compiled, checked against its CRD schema (unit and integration tests)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from spottrain.placement import Placement
from spottrain.runtime.train_job import component

REPO = Path(__file__).resolve().parents[1]

SCHEMA = json.loads((REPO / "tests" / "schemas" / "computeclass.json").read_text())


CLASS = Placement(pool="spot", compute_class="spottrain-t4")


def check(cls: dict) -> None:
    jsonschema.validate(cls, SCHEMA, cls=jsonschema.Draft202012Validator)


def _gangs(placement):
    return component.worker_sets(
        run_id="run-1", task_name="train", namespace="kubeflow", image="trainer:test",
        args=("--train-steps", "10"), workers=2, placement=placement, on_demand=True,
    )  # fmt: skip
