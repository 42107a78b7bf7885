"""fit's loop around the step on a 2-worker gang: epochs, metrics, validation, callbacks.

A preempted and resumed run makes the decisions of an uninterrupted one (the learning
rate ReduceLROnPlateau sets each epoch, the epoch EarlyStopping stops at) and ends
with its weights; the epoch lines show accuracy and the validation's metrics.
"""

from __future__ import annotations

import io
import json
import re

import keras
import numpy as np
import pytest
from trainer_helpers import ledger, run_module, summary

from spottrain import exits
from spottrain.runtime import report
from spottrain.trainer import launch

CALLBACKS = ["plateau", "stop", "record"]


def _args(out, steps=300, **task_args):
    settings = {"callbacks": CALLBACKS, "record": str(out / "record"), **task_args}
    return [
        "--task", "tests.fit_loop_task:FitUser", "--task-args", json.dumps(settings),
        "--train-steps", str(steps), "--batch-size-per-replica", "16", "--save-every-steps", "1000",
        "--log-every-steps", "15", "--threads", "1", "--deterministic",
        "--checkpoint-dir", str(out / "checkpoints"), "--model-dir", str(out / "model"),
        "--tensorboard-dir", str(out / "tb"),
    ]  # fmt: skip


def _run(out, args=None, **kw):
    stream = io.StringIO()
    result = launch.ProcessLauncher(2, args or _args(out), stream=stream, **kw).run()
    return result, stream.getvalue()


def _weights(out):
    return keras.models.load_model(out / "model" / "model.keras", compile=False).get_weights()


def _records(out, worker):
    return [json.loads(line) for line in (out / f"record.{worker}").read_text().splitlines()]


@pytest.mark.slow
def test_a_resumed_run_decides_as_an_uninterrupted_one(tmp_path):
    clean = tmp_path / "clean"
    result, text = _run(clean)
    assert result.code == 0, text[-3000:]
    s = summary(clean)
    assert s["stopped_early"] and s["final_step"] == 15 * s["stopped_epoch"] < 300, s
    # The epoch lines: fit's logs, the validation's and the learning rate, on every worker.
    epochs = re.findall(r"\[(\w+-\d)\] epoch (\d+)/20 (.*)", text)
    assert len(epochs) == 2 * s["stopped_epoch"], text[-3000:]
    for _, _, line in epochs:
        assert re.fullmatch(
            r"loss=\S+ accuracy=\S+ val_loss=\S+ val_accuracy=\S+ learning_rate=\S+", line
        ), line
    assert len(set(s["history"]["learning_rate"])) > 1, s  # ReduceLROnPlateau acted
    assert "accuracy=" in re.search(r"\] step 15/300 .*", text).group(0)

    hit = tmp_path / "hit"
    first, text = _run(hit, preempt_at_step=40, signal_name="TERM", seed=0)
    assert set(first.worker_codes.values()) == {exits.PREEMPTED}, text[-3000:]
    assert ledger(hit)[0]["saved_step"] % 15, "the notice came at an epoch's end"
    second, text = _run(hit)
    assert second.code == 0, text[-3000:]
    resumed = summary(hit)
    for key in ("history", "final_step", "stopped_epoch"):
        assert resumed[key] == s[key], key
    # The user's callback saw the same logs and learning rates, and kept its own count.
    for worker in ("chief-0", "worker-0"):
        assert _records(hit, worker) == _records(clean, worker)
    for a, b in zip(_weights(hit), _weights(clean), strict=True):
        np.testing.assert_array_equal(a, b)

    # Stopped early is finished: a retry trains no step and exports the same model.
    again, text = _run(hit)
    assert again.code == 0, text[-3000:]
    assert ledger(hit)[-1]["start_step"] == s["final_step"]
    assert not re.search(r"\] step \d+/300", text), text[-3000:]
    for a, b in zip(_weights(hit), _weights(clean), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_files_callbacks_write_on_the_chief_and_a_failing_evaluate_loses_no_export(tmp_path):
    """LearningRateScheduler on every worker; CSVLogger and TensorBoard on the chief only
    (TensorBoard into --tensorboard-dir); validation_freq 2; the task's evaluate() calling
    model.evaluate under MultiWorkerMirroredStrategy is one line and the model is exported."""
    elsewhere = tmp_path / "elsewhere"
    csv = tmp_path / "log.csv"
    args = _args(
        tmp_path, steps=60, callbacks=["schedule", "csv", "tensorboard"], csv=str(csv),
        elsewhere=str(elsewhere), freq=2, evaluate=True,
    )  # fmt: skip
    result, text = _run(tmp_path, args)
    assert result.code == 0, text[-3000:]
    s = summary(tmp_path)
    assert s["exported"] and s["final_step"] == 60, s
    rates = s["history"]["learning_rate"]
    assert rates == pytest.approx([0.05 * 0.9 ** (e + 1) for e in range(4)]), rates
    assert len(s["history"]["val_loss"]) == 2 and s["val_loss"] == s["history"]["val_loss"][-1]
    rows = csv.read_text().splitlines()
    # fit's header: LearningRateScheduler logs the rate, CSVLogger adds val_ to every key.
    header = "epoch,accuracy,learning_rate,loss,val_accuracy,val_learning_rate,val_loss"
    assert rows[0] == header and len(rows) == 1 + 4, rows  # the chief's rows alone
    assert not elsewhere.exists() and list((tmp_path / "tb" / "train").glob("events.*"))
    scalars = report.read_scalars(str(tmp_path / "tb"))
    # The attempts page's curves: the engine's scalars and the callback's, by folder.
    ours = {"accuracy", "epoch/accuracy", "val_accuracy"}
    assert ours | {"train/epoch_loss", "validation/epoch_loss"} <= set(scalars), scalars
    said = [ln for ln in text.splitlines() if "the task's evaluate() raised" in ln]
    assert said and "the model is exported without its metrics" in said[0], text[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("per_call", ["1", "4"])
def test_epoch_logs_and_decisions_are_fits(tmp_path, per_call):
    """One worker against model.fit on the same batches (the task's pipeline), seed and
    callbacks: every epoch's loss, accuracy, val_loss, val_accuracy and learning rate to
    4 digits, and the epoch EarlyStopping stops at; one step a call (the next run ahead)
    or 4 (15-step epochs: calls of 4, 4, 4, 3)."""
    import tensorflow as tf

    from spottrain.trainer.task_api import TrainInput
    from tests.fit_loop_task import FitUser

    settings = {"callbacks": ["plateau", "stop"]}
    args = _args(tmp_path, **settings)
    args[args.index("--batch-size-per-replica") + 1] = "32"  # one worker: the same 32
    args += ["--seed", "42", "--steps-per-loop", per_call]
    proc, _ = run_module("spottrain.trainer.task", args, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ours = summary(tmp_path)

    task = FitUser(settings, None)
    keras.utils.set_random_seed(42)  # as the engine, before the model is built
    ds = task.train_dataset(TrainInput(tf.distribute.InputContext(1, 0, 1), 32, 42, 0, 300))
    model = task.build_model()
    fit = task.fit()
    history = model.fit(
        ds, epochs=20, steps_per_epoch=15, validation_data=fit.validation_data,
        callbacks=fit.callbacks, verbose=0,
    ).history  # fmt: skip
    assert len(history["loss"]) == ours["stopped_epoch"], (history, ours)
    for key in ("loss", "accuracy", "val_loss", "val_accuracy", "learning_rate"):
        assert ours["history"][key] == pytest.approx(history[key], abs=5e-5), key
