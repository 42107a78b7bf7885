"""TF_CONFIG derived from the GKE Indexed Job's pod env (spottrain.trainer.distribution), fast.

The pod side for real (PID 1, own network namespaces, SIGTERM/SIGKILL) is in
tests/system/gke/test_platform_gke_jobset.py.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from gang_envs import BAD, job_env
from trainer_helpers import REPO, env

from spottrain import exits


@pytest.mark.parametrize(
    "changes, named",
    [BAD[0], BAD[4], BAD[6], BAD[10], BAD[-1]],
    ids=["index", "index-range", "workers", "port", "tf-config-too"],
)
def test_bad_job_env_exits_64_in_one_line_before_tensorflow(tmp_path, changes, named):
    args = [
        "--checkpoint-dir", str(tmp_path / "ck"), "--model-dir", str(tmp_path / "m"),
        "--image-dir", str(tmp_path), "--backbone", "small_cnn", "--weights", "none",
    ]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "spottrain.trainer.task", *args],
        cwd=REPO,
        env={**env(), **job_env(**changes)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    seconds = time.monotonic() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode == exits.FATAL_CONFIG, out
    (line,) = [ln for ln in out.splitlines() if " ERROR " in ln]
    assert named in line and "Traceback" not in out
    assert seconds < 3, f"{seconds:.1f} s"
