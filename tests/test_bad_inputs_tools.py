"""Bad inputs to the copy and profiling CLIs: one line naming the value, exit 2, nothing done."""

from __future__ import annotations

import subprocess
import sys

import pytest
from trainer_helpers import REPO, env


def _run(module, *args):
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "dst, named",
    [
        ("gs://bucket-x/a/../x", "'gs://bucket-x/a/../x'"),
        ("gs://bucket-x//x", "'gs://bucket-x//x'"),
        ("gs://bucket-x/./x", "'gs://bucket-x/./x'"),
    ],
)
def test_copy_refuses_destinations_with_odd_segments(tmp_path, dst, named):
    (tmp_path / "f.txt").write_text("x")
    proc = _run("spottrain.gcs_copy", str(tmp_path), dst)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and named in proc.stderr and "segment" in proc.stderr


@pytest.mark.parametrize("delay", ["-5", "nan", "1e9"])
def test_copy_refuses_a_bad_retry_delay_before_copying(tmp_path, delay):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "f.txt").write_text("x")
    proc = _run(
        "spottrain.gcs_copy", str(tmp_path / "src"), str(tmp_path / "dst"), "--retry-delay", delay
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "retry_delay" in proc.stderr
    assert not (tmp_path / "dst").exists()


@pytest.mark.parametrize(
    "args, named",
    [
        (["--report", "{tmp}"], "is a folder"),
        (["--html", "{tmp}/a-file/x.html"], "is a file, not a folder"),
        (["--metrics-json", "{tmp}"], "is a folder"),
        (["--profile-steps", "0"], "--profile-steps 0"),
        (["--warmup-steps", "-1"], "--warmup-steps -1"),
    ],
)
def test_profiling_refuses_bad_outputs_before_profiling(tmp_path, args, named):
    (tmp_path / "a-file").write_text("x")
    args = [a.format(tmp=tmp_path) for a in args]
    proc = _run("spottrain.profiling", *args, "--", "--train-steps", "5")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and named in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
