"""The production data path: a tfds dataset by name from a prepared data_dir."""

from __future__ import annotations

import json

import tfds_digits
from trainer_helpers import tiny_args

from spottrain.trainer import attempt, preemption


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
    assert attempt.run(argv) == preemption.OK
    summary = json.loads((out / "model" / "training_summary.json").read_text())
    assert summary["final_step"] == 150
    assert summary["class_names"] == [str(i) for i in range(10)]
    assert summary["val_examples"] == 197  # the dataset's own validation split
    assert summary["val_accuracy"] >= 0.85, summary
    assert list((out / "logs").glob("events.out.tfevents.*")), "no TensorBoard events"


def test_unknown_tfds_split_is_fatal_and_named(tmp_path):
    data_dir = tmp_path / "tfds"
    tfds_digits.DigitsSklearn(data_dir=str(data_dir)).download_and_prepare()
    argv = tiny_args(
        "",
        tmp_path / "run",
        image_dir=None,
        dataset="digits_sklearn",
        data_dir=data_dir,
        val_split="test",
    )
    assert attempt.run(argv) == preemption.FATAL_CONFIG
    marker = json.loads((tmp_path / "run" / "checkpoints" / "FATAL.json").read_text())
    assert "'test'" in marker["error"] and "validation" in marker["error"]
