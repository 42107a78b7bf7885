"""The production data path: a tfds dataset by name from a prepared data_dir.

The in-process tests; those that start processes are in
tests/integration/trainer/test_trainer_tfds.py.
"""

from __future__ import annotations

import json

import tfds_digits
from trainer_helpers import tiny_args

from spottrain import exits
from spottrain.trainer import attempt


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
    assert attempt.run(argv) == exits.FATAL_CONFIG
    marker = json.loads((tmp_path / "run" / "checkpoints" / "FATAL.json").read_text())
    assert "'test'" in marker["error"] and "validation" in marker["error"]
