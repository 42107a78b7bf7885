"""The step-loop and notice benches run as their docs say (short settings), so the
figures in docs/benchmarks.md can be re-measured; the figures themselves are not
asserted (a busy machine would make any bound a coin toss)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from trainer_helpers import env

pytestmark = pytest.mark.slow
BENCH = Path(__file__).resolve().parents[3] / "bench"


def _run(script, *args):
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        env=env(), capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def test_the_step_loop_bench_compares_each_variant_with_fit_at_the_same_knobs():
    out = _run("step_loop.py", "--models", "mlp", "--repeats", "1", "--steps", "150",
               "--warm-up", "50", "--no-xla")  # fmt: skip
    number = r"\d+\.\d{3} \[\d+\.\d{3}-\d+\.\d{3}\]"
    for pair in ("ours / fit", "ours 50 / fit 50", "fit again / fit"):
        assert re.search(rf"{re.escape(pair)}\s+{number}\s+{number}", out), out


def test_the_notice_bench_measures_each_case():
    out = _run("notice_latency.py", "--workers", "1", "--repeats", "1", "--at", "20")
    for n in ("1   ", "auto"):
        # The summary's line, not the trainer's own "--steps-per-loop auto: …" log line.
        line = next(ln for ln in out.splitlines() if f"worker(s), --steps-per-loop {n}" in ln)
        assert re.search(r"notice -> saved \d+\.\d+ .*restart -> first step \d+\.\d+", line), out
