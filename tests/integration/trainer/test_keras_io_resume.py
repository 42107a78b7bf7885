"""Public Keras 3 examples, ported unchanged (tests/keras_io), get the engine's contract.

For each: ``--check`` passes and says what its export writes; two workers interrupted
by SIGTERM save the same step and lose none; the resume ends at exactly the final
step with the weights of an uninterrupted run, bit for bit; an export is written.
"""

from __future__ import annotations

import numpy as np
import pytest
from keras_io.harness import EXAMPLES, engine_args, exported_weights, task
from trainer_helpers import ledger, run_module, summary

from spottrain import exits
from spottrain.trainer import launch

STEPS, PREEMPT_AT, BATCH = 30, 12, 8
# What each example's export can write: .keras needs get_config(), a SavedModel a call().
EXPORTS = {
    "vae": ["model.weights.h5"],
    "distiller": ["model.weights.h5", "saved_model/"],
    "conditional_gan": ["model.weights.h5"],
}
DEFAULT_EXPORT = ["model.keras", "saved_model/"]


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES)
def test_an_example_checks_resumes_bit_identical_and_exports(tmp_path, name):
    """--check, then a 2-worker SIGTERM and resume against an uninterrupted run."""
    check = ["--check", "--task", task(name), "--batch-size-per-replica", str(BATCH)]
    proc, _ = run_module("spottrain.trainer.task", check)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("check ok:") and "model.fit's" in line, line
    exports = EXPORTS.get(name, DEFAULT_EXPORT)
    assert f"its export wrote {', '.join(exports)}" in line, line

    args = engine_args(name, tmp_path / "hit", STEPS, BATCH, "--deterministic")
    first = launch.ProcessLauncher(
        2, args, preempt_at_step=PREEMPT_AT, signal_name="TERM", seed=0
    ).run()
    assert set(first.worker_codes.values()) == {exits.PREEMPTED}, first
    rec = ledger(tmp_path / "hit")[0]
    assert rec["outcome"] == "preempted" and rec["steps_lost"] == 0, rec
    assert rec["saved_step"] == rec["last_step"] >= first.chaos["step"]
    assert 0 < rec["saved_step"] < STEPS, rec
    second = launch.ProcessLauncher(2, args).run()
    assert second.code == 0, second
    assert ledger(tmp_path / "hit")[1]["start_step"] == rec["saved_step"]
    s = summary(tmp_path / "hit")
    assert s["final_step"] == s["train_steps"] == STEPS and s["num_workers"] == 2, s
    assert s["exported"] == exports, s
    if name == "vae":  # before, its export crashed every retry: a retry now just finishes
        again = launch.ProcessLauncher(2, args).run()
        assert again.code == 0, again
        assert ledger(tmp_path / "hit")[2]["start_step"] == STEPS
        assert summary(tmp_path / "hit")["exported"] == exports
    clean_args = engine_args(name, tmp_path / "clean", STEPS, BATCH, "--deterministic")
    assert launch.ProcessLauncher(2, clean_args).run().code == 0
    hit, clean = (
        exported_weights(tmp_path / "hit/model"),
        exported_weights(tmp_path / "clean/model"),
    )
    assert hit.keys() == clean.keys() and hit, (hit.keys(), clean.keys())
    for key in hit:
        np.testing.assert_array_equal(hit[key], clean[key], err_msg=key)
