"""Records beside the checkpoints that are valid JSON of the wrong shape (issue 42, item 4).

Broken JSON in ``attempts.json`` is moved to quarantine/ and a new ledger starts;
broken JSON in ``run_config.json`` is ignored with a warning and rewritten. A file of
the wrong shape is treated the same way: before, each was an AttributeError
traceback and exit 1, which KFP retries into the same traceback every time.
"""

from __future__ import annotations

import json

import pytest
from trainer_helpers import error_lines, ledger, run_module

from spottrain import exits

REGRESSION = ["--task", "examples.regression:Regression", "--batch-size-per-replica", "8"]

# (attempts.json, run_config.json): each pair is a valid JSON text of the wrong shape.
CASES = [
    ('{"attempts": "x"}', "[]"),
    ('{"attempts": [1]}', '"x"'),
    ('{"attempts": [{"outcome": "running"}]}', '{"compatibility": "x"}'),
    (
        '{"attempts": [{"outcome": "running", "started": "x"}]}',
        '{"compatibility": {}, "config": [1]}',
    ),
    ('{"attempts": [{"started": 1, "last_step": "x"}]}', "7"),
    ('{"attempts": [{"started": 1, "id": [1]}]}', '{"compatibility": {"task": 1}}'),
]


@pytest.mark.parametrize("attempts, run_config", CASES, ids=[c[0] for c in CASES])
def test_a_record_of_the_wrong_shape_is_set_aside_not_a_traceback(tmp_path, attempts, run_config):
    out = tmp_path / "run"
    ckpt = out / "checkpoints"
    ckpt.mkdir(parents=True)
    (ckpt / "attempts.json").write_text(attempts)
    (ckpt / "run_config.json").write_text(run_config)
    flags = [
        *REGRESSION, "--train-steps", "2", "--save-every-steps", "1",
        "--checkpoint-dir", str(ckpt), "--model-dir", str(out / "model"),
    ]  # fmt: skip
    proc, _ = run_module("spottrain.trainer.task", flags, timeout=300)
    text = proc.stdout + proc.stderr
    assert proc.returncode == exits.OK, text
    assert "Traceback" not in text and error_lines(proc) == []
    # The ledger: kept in quarantine/, as a crash mid-write is; the new one says where.
    (moved,) = (ckpt / "quarantine").glob("attempts.json.*")
    assert moved.read_text() == attempts
    (record,) = ledger(out)
    assert record["outcome"] == "success"
    assert record["previous_ledger_quarantined"] == str(moved)
    # The run config: ignored with a warning naming it, as broken JSON is, and rewritten.
    assert f"ignoring unreadable {ckpt / 'run_config.json'}" in text
    stored = json.loads((ckpt / "run_config.json").read_text())
    assert stored["compatibility"]["task"] == "examples.regression:Regression"
