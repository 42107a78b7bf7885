"""Helpers for trainer tests: tiny, fast settings and real subprocess runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from platform_chains import ledger_records

REPO = Path(__file__).resolve().parents[1]


def tiny_args(digits_dir: str, out: Path, **overrides) -> list[str]:
    """Trainer flags for a small CNN on 32x32 digits (seconds per run on CPU)."""
    flags = {
        "image-dir": digits_dir,
        "backbone": "small_cnn",
        "weights": "none",
        "image-size": 32,
        "batch-size-per-replica": 32,
        "train-steps": 60,
        "learning-rate": 0.001,
        "save-every-steps": 20,
        "log-every-steps": 5,
        "checkpoint-dir": str(out / "checkpoints"),
        "model-dir": str(out / "model"),
    }
    return as_args(flags, overrides)


def as_args(flags: dict, overrides: dict) -> list[str]:
    """``flags`` updated by ``overrides`` (``snake_case`` keys) as command-line flags:
    ``None`` leaves a flag out, ``True`` is a bare flag."""
    flags = {**flags, **{k.replace("_", "-"): v for k, v in overrides.items()}}
    args = []
    for key, value in flags.items():
        if value is None:
            continue
        args += [f"--{key}"] if value is True else [f"--{key}", str(value)]
    return args


def task_args(out: Path, task: str, **overrides) -> list[str]:
    """Trainer flags for a task of ``tests/`` or ``examples/``: 40 steps, saves at 20."""
    flags = {
        "task": task,
        "batch-size-per-replica": 16,
        "train-steps": 40,
        "save-every-steps": 20,
        "save-every-seconds": 0,
        "log-every-steps": 1,
        "checkpoint-dir": str(out / "checkpoints"),
        "model-dir": str(out / "model"),
    }
    return as_args(flags, overrides)


def env() -> dict:
    """Subprocess environment: one TF thread each, quiet C++ logs, no inherited TF_CONFIG."""
    e = dict(os.environ)
    e.pop("TF_CONFIG", None)
    e.update(
        TF_NUM_INTRAOP_THREADS="1",
        TF_NUM_INTEROP_THREADS="1",
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONUNBUFFERED="1",
    )
    return e


def startup_timeout_here() -> float:
    """A start-up timeout this machine can meet now: twice a TensorFlow import timed
    here, plus 5 s. A trainer opens its record and says where to dump its stacks only
    after that import, which a busy machine stretches from ~3 s to 20 s and more; a
    fixed timeout of a few seconds then fires before there is anything to see."""
    began = time.monotonic()
    subprocess.run([sys.executable, "-c", "import tensorflow"], env=env(), check=True)
    return round(2 * (time.monotonic() - began) + 5, 1)


def run_module(module: str, args: list[str], timeout: float = 300, extra_env=None):
    """Runs ``python -m module args``; returns (CompletedProcess, seconds)."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env={**env(), **(extra_env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc, time.monotonic() - start


# Our log format's ERROR lines ("2026-01-01 10:00:00,123 ERROR trainer.x: ..."); TF's
# C++ lines on stderr ("E0000 ... cuInit ...") do not match.
_OUR_ERROR = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ ERROR ")


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    """The trainer's ERROR log lines, which it writes to stderr (nothing else goes there)."""
    assert not any(_OUR_ERROR.match(ln) for ln in proc.stdout.splitlines()), proc.stdout
    return [ln for ln in proc.stderr.splitlines() if _OUR_ERROR.match(ln)]


def summary(out: Path) -> dict:
    """The chief's training_summary.json."""
    return json.loads((out / "model" / "training_summary.json").read_text())


def ledger(out: Path) -> list[dict]:
    """The attempt ledger records of the run in ``out`` (platform_chains.ledger_records)."""
    return ledger_records(out / "checkpoints")
