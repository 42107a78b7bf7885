"""What the fit ports' tests share (tests/keras_io, tests/fit_user): the runs, the epoch lines.

Imported by tests only (it starts processes through tests/trainer_helpers.py).
"""

from __future__ import annotations

import re

from trainer_helpers import run_module

from keras_io.harness import fit_port

EPOCH_LINE = re.compile(r"\bepoch (\d+)/(\d+)\b(.*)$", re.M)
KEY_VALUE = re.compile(r"([A-Za-z_][\w-]*)=([-+\w.]+)")


def epoch_logs(text: str) -> dict[int, dict[str, float]]:
    """Each epoch line's ``key=value`` pairs, by epoch (the last line of an epoch wins)."""
    out = {}
    for epoch, _, rest in EPOCH_LINE.findall(text):
        out[int(epoch)] = {k: float(v) for k, v in KEY_VALUE.findall(rest) if _number(v)}
    return out


def _number(v: str) -> bool:
    try:
        float(v)
        return True
    except ValueError:
        return False


def port_args(name_or_task: str, out, *extra: str) -> list[str]:
    """The trainer's flags for a port: no --train-steps, --batch-size: its fit() has them."""
    spec = fit_port(name_or_task) if ":" not in name_or_task else name_or_task
    return [
        "--task", spec, "--save-every-steps", "100", "--threads", "1",
        "--checkpoint-dir", str(out / "checkpoints"), "--model-dir", str(out / "model"),
        *extra,
    ]  # fmt: skip


def gang(out, args: list[str], *launcher: str) -> str:
    """Two workers through the launcher, as test_keras_io_fit.py starts them: the log."""
    argv = ["--workers", "2", "--output-dir", str(out / "gang"), *launcher, "--", *args]
    proc, _ = run_module("spottrain.trainer.launch", argv, timeout=1800)
    return proc.stdout + proc.stderr
