"""The copy's worker default is one value everywhere, and many workers stay quiet."""

from __future__ import annotations

import os
import subprocess
import sys

from spottrain.gcs_copy import DEFAULT_WORKERS


def test_component_and_cli_use_the_library_default():
    from spottrain.components.gcs_copy.component import gcs_copy

    assert DEFAULT_WORKERS == 32  # chosen from bench/copy.py (README "Benchmarks")
    assert gcs_copy.component_spec.inputs["workers"].default == DEFAULT_WORKERS
    help_text = subprocess.run(
        [sys.executable, "-m", "spottrain.gcs_copy", "--help"], capture_output=True, text=True
    ).stdout
    assert f"parallel transfers (default {DEFAULT_WORKERS})" in help_text


def test_many_workers_print_no_connection_pool_warnings(fake_gcs, gcs_bucket, tmp_path):
    """More threads than urllib3's 10 pooled connections: its per-connection warnings stay
    out of the CLI's stderr (one line per discarded connection otherwise)."""
    for i in range(120):
        (tmp_path / f"f{i:03d}").write_bytes(os.urandom(2000))
    proc = subprocess.run(
        [sys.executable, "-m", "spottrain.gcs_copy", str(tmp_path), f"gs://{gcs_bucket.name}"]
        + ["-j", "64"],
        capture_output=True,
        text=True,
        env={**os.environ, **fake_gcs.env},
    )
    assert proc.returncode == 0, proc.stderr
    assert "copied 120 files" in proc.stdout
    assert "Connection pool is full" not in proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr  # the "copying ..." line
