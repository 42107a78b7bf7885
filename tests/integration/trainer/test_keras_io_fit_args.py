"""The fit ports of tests/keras_io, as written: their ``fit()`` is what the engine runs.

Each port moves its keras-io example's ``model.fit(...)`` arguments unchanged into
``KerasTask.fit()`` (issue 54). Asked of each: ``--check`` passes; two workers
interrupted by SIGTERM lose no step and the retry ends at the step its epochs end at
(or where its EarlyStopping stops, as an uninterrupted run does), with the weights
of an uninterrupted run, bit for bit (so the callbacks' state resumed: EarlyStopping's
``wait`` and ``best``, ReduceLROnPlateau's rate); every epoch's line shows its
validation and compiled metrics; on one worker each epoch's logs equal Keras's own
``model.fit`` given the same arguments and the engine's batches, to 4 digits.

What the epoch line looks like is not settled: ``EPOCH_LINE`` takes any line with
``epoch E/N`` and ``key=value`` pairs.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from keras_io.fit_runs import epoch_logs, gang, port_args
from keras_io.harness import FIT_EXAMPLES, exported_weights, fit_port
from trainer_helpers import error_lines, ledger, run_module, summary

from spottrain import exits

# Each port's fit: epochs, global batch, training examples (after validation_split,
# floor(n * (1 - split)) as fit cuts it) and what every epoch must log.
PORTS = {
    "mnist_convnet": (15, 128, 1152, {"loss", "accuracy", "val_loss", "val_accuracy"}),
    "anomaly_autoencoder": (50, 128, 641, {"loss", "val_loss"}),
    "imbalanced_classification": (
        30, 2048, 8192,
        {"loss", "fn", "fp", "tn", "tp", "precision", "recall", "val_loss", "val_recall"},
    ),
    "mlp_mixer": (50, 128, 576, {"loss", "acc", "top5-acc", "val_loss", "val_acc"}),
    "pydataset_guide": (
        1, 32, 1280,  # the PyDataset's own batches (fit ignores batch_size=64 for it)
        {"loss", "sparse_categorical_accuracy", "val_loss", "val_sparse_categorical_accuracy"},
    ),
}  # fmt: skip


# Per port, the training metrics whose epoch value is not yet fit's (see the test).
NOT_YET_FITS = {
    "imbalanced_classification": {"fn", "fp", "tn", "tp", "precision", "recall"},
}


def steps_per_epoch(name: str) -> set[int]:
    """fit's (ceil: a last short batch) or the engine's whole global batches (floor)."""
    _, batch, n, _ = PORTS[name]
    return {n // batch, math.ceil(n / batch)}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FIT_EXAMPLES))
def test_a_port_as_written_resumes_at_its_epochs_with_validation(tmp_path, name):
    epochs, _, _, logged = PORTS[name]
    proc, _ = run_module("spottrain.trainer.task", ["--check", "--task", fit_port(name)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("check ok:"), proc.stdout[-2000:]

    args = port_args(name, tmp_path / "hit", "--deterministic")
    spe = min(steps_per_epoch(name))
    preempt_at = min(2 * spe + 1, epochs * spe // 2)  # inside the third epoch, or halfway
    first = gang(tmp_path / "hit", args, "--preempt-at-step", str(preempt_at), "--seed", "0")
    rec = ledger(tmp_path / "hit")[0]
    assert rec["outcome"] == "preempted" and rec["steps_lost"] == 0, (rec, first[-2000:])
    second = gang(tmp_path / "hit", args)
    assert ledger(tmp_path / "hit")[1]["start_step"] == rec["saved_step"]
    assert ledger(tmp_path / "hit")[1]["outcome"] == "success", second[-2000:]

    gang(tmp_path / "clean", port_args(name, tmp_path / "clean", "--deterministic"))
    hit, clean = summary(tmp_path / "hit"), summary(tmp_path / "clean")
    assert hit["final_step"] == clean["final_step"] and hit["num_workers"] == 2, (hit, clean)
    assert hit["train_steps"] in {epochs * s for s in steps_per_epoch(name)}, hit
    if name not in ("mlp_mixer", "anomaly_autoencoder"):  # no EarlyStopping: every epoch
        assert hit["final_step"] == hit["train_steps"], hit
    assert hit["exported"] and hit["exported"] == clean["exported"], (hit, clean)
    a, b = exported_weights(tmp_path / "hit/model"), exported_weights(tmp_path / "clean/model")
    assert a.keys() == b.keys() and a, (a.keys(), b.keys())
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)

    logs = epoch_logs(first + second)
    last = math.ceil(hit["final_step"] / (hit["train_steps"] // epochs))  # EarlyStopping's
    assert set(range(1, last + 1)) <= logs.keys(), (sorted(logs), last)
    for epoch, values in logs.items():
        assert logged <= values.keys(), (epoch, sorted(values))


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["mnist_convnet", "imbalanced_classification", "mlp_mixer", "pydataset_guide"]
)
def test_each_epochs_logs_agree_with_model_fit(tmp_path, name):
    """One worker: each epoch's logs (loss, metrics, validation, the learning rate the
    callbacks set) equal fit's with the same arguments on the same batches."""
    args = port_args(name, tmp_path, "--seed", "7", "--log-every-steps", "1")
    proc, _ = run_module("spottrain.trainer.task", args, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    spe = summary(tmp_path)["train_steps"] // PORTS[name][0]  # the engine's, for fit's side
    assert spe in steps_per_epoch(name), spe
    ours = epoch_logs(proc.stdout + proc.stderr)
    out = tmp_path / "fit.json"
    ref = ["--task", fit_port(name), "--steps-per-epoch", str(spe), "--seed", "7"]
    proc, _ = run_module("tests.keras_io.fit_args_reference", [*ref, "--out", str(out)], 900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fits = json.loads(out.read_text())["epochs"]
    assert sorted(ours) == list(range(1, len(fits) + 1)), (sorted(ours), len(fits))
    off = []  # every (epoch, key, ours, fit's) that differs, not only the first
    for epoch, fit in enumerate(fits, start=1):
        for key, value in fit.items():
            assert key in ours[epoch], (epoch, key, sorted(ours[epoch]))
            # Our line prints 4 decimals: equal to that, or to 4 significant digits.
            if abs(ours[epoch][key] - value) > max(5.1e-5, 1e-4 * abs(value)):
                off.append((epoch, key, ours[epoch][key], value))
    # Training metrics that are not means of the batches (counts, precision, recall)
    # are shown as the mean over steps of the replicas' values, not from the epoch's
    # whole state as fit computes them (docs/task-api.md, fit's loop): known, not yet.
    # Loss, learning rate, every val_ log and every mean metric must agree.
    known = NOT_YET_FITS.get(name, set())
    assert not [o for o in off if o[1] not in known], off
    if off:
        pytest.xfail(f"{name}: {sorted({o[1] for o in off})} not yet fit's: {off[:3]}")


def test_a_model_checkpoint_is_refused_in_one_line_naming_the_engines_saves(tmp_path):
    """The imbalanced-classification example as written passes fit a ModelCheckpoint:
    the engine saves itself (--save-every-steps, on a preemption notice), so it says so
    in one line and exits 64 before anything trains, in --check too."""
    spec = "tests.keras_io.imbalanced_classification:Task"
    for argv in (["--check", "--task", spec], port_args(spec, tmp_path)):
        proc, _ = run_module("spottrain.trainer.task", argv)
        assert proc.returncode == exits.FATAL_CONFIG, (proc.returncode, proc.stderr[-2000:])
        (line,) = error_lines(proc)
        assert "ModelCheckpoint" in line and "--save-every-steps" in line, line
    # The attempt is in the ledger (a task error is an attempt too); nothing was saved.
    assert not list((tmp_path / "checkpoints").glob("ckpt-*"))
