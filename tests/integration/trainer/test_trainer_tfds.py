"""The production data path: a tfds dataset by name from a prepared data_dir."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tfds_digits
from trainer_helpers import ledger, summary, tiny_args

from spottrain import exits
from spottrain.trainer import attempt, launch


# Trains in-process for half a minute: not of the quick (unit) tier.
def test_trains_on_a_prepared_tfds_dataset_and_writes_tensorboard(tmp_path):
    data_dir = tmp_path / "tfds"
    tfds_digits.DigitsSklearn(data_dir=str(data_dir)).download_and_prepare()
    out = tmp_path / "run"
    argv = tiny_args(
        "",
        out,
        image_dir=None,
        dataset="digits_sklearn",
        data_dir=data_dir,
        train_steps=150,
        learning_rate=0.003,
        tensorboard_dir=out / "logs",
    )
    assert attempt.run(argv) == exits.OK
    summary = json.loads((out / "model" / "training_summary.json").read_text())
    assert summary["final_step"] == 150
    assert summary["class_names"] == [str(i) for i in range(10)]
    assert summary["val_examples"] == 197  # the dataset's own validation split
    assert summary["val_accuracy"] >= 0.85, summary
    assert list((out / "logs").glob("events.out.tfevents.*")), "no TensorBoard events"


@pytest.mark.slow
def test_a_streamed_tfds_split_resumes_bit_identically(tmp_path, capfd):
    """A tfds split larger than --cache-max-mb is streamed (never read into memory
    whole): 2 workers, a SIGTERM in the second epoch, the resume reads through to its
    step and ends with the weights of an uninterrupted run."""
    data_dir = tmp_path / "tfds"
    tfds_digits.DigitsSklearn(data_dir=str(data_dir)).download_and_prepare()

    def args(out):  # 1,600 training examples, 32 a step: step 50 ends the first epoch
        return tiny_args(
            "", out, image_dir=None, dataset="digits_sklearn", data_dir=data_dir,
            cache_max_mb=0, train_steps=80, batch_size_per_replica=16, save_every_steps=30,
        )  # fmt: skip

    clean, hit = tmp_path / "clean", tmp_path / "hit"
    assert launch.ProcessLauncher(2, args(clean)).run().code == 0
    assert "1600 examples streamed" in capfd.readouterr().out
    first = launch.ProcessLauncher(
        2, args(hit), preempt_at_step=55, signal_name="TERM", seed=0
    ).run()
    assert first.code == exits.PREEMPTED and first.chaos["step"] >= 55, first
    assert launch.ProcessLauncher(2, args(hit)).run().code == 0
    assert 55 <= ledger(hit)[1]["start_step"] < 80
    a = keras.models.load_model(clean / "model" / "model.keras").get_weights()
    b = keras.models.load_model(hit / "model" / "model.keras").get_weights()
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert summary(hit)["final_step"] == 80 and summary(hit)["val_examples"] == 197


@pytest.mark.slow
def test_a_tfds_dataset_through_the_gke_pipeline_by_task_args(tmp_path):
    """The shipped pipeline reaches a tfds dataset through ``task_args``: ``data_src``
    is the prepared data_dir (copied like any data), the task args name the dataset;
    KFP's retry resumes after the injected SIGTERM and ends at exactly the final step."""
    from spottrain.pipelines import local

    data_dir = tmp_path / "tfds"
    tfds_digits.DigitsSklearn(data_dir=str(data_dir)).download_and_prepare()
    result = local.run_local(
        tmp_path / "run", workers=2, preempt_at_step=30, train_steps=60, retries=2,
        data=data_dir, data_src=f"gs://{local.BUCKET}/tfds",
        task_args='{"dataset": "digits_sklearn", "cache_max_mb": 0}',
    )  # fmt: skip
    assert result.ok, result.report()
    outcomes = [(a["outcome"], a["exit_code"], a["steps_lost"]) for a in result.attempts]
    assert outcomes == [("preempted", 143, 0), ("success", 0, 0)], outcomes
    assert result.summary["final_step"] == 60
    assert result.summary["val_examples"] == 197  # the tfds validation split, not a folder's
    assert result.summary["class_names"] == [str(i) for i in range(10)]
