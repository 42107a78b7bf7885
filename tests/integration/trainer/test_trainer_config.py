"""Bad configs fail fast, before any strategy, with one line naming the value (exit 64)."""

from __future__ import annotations

from trainer_helpers import error_lines, run_module, tiny_args

from spottrain import exits


def test_cli_bad_value_exits_fatal_with_one_line(digits_dir, tmp_path):
    proc, seconds = run_module(
        "spottrain.trainer.task", tiny_args(digits_dir, tmp_path, backbone="vgg")
    )
    assert proc.returncode == exits.FATAL_CONFIG, proc.stdout + proc.stderr
    errors = error_lines(proc)
    assert len(errors) == 1 and "'vgg'" in errors[0], proc.stderr
    assert seconds < 30
