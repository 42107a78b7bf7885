"""The copy's worker default is one value everywhere, and many workers stay quiet."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from spottrain.copier import DEFAULT_WORKERS


def test_component_and_cli_use_the_library_default():
    from spottrain.components.gcs_copy.component import gcs_copy

    assert DEFAULT_WORKERS == 32  # chosen from bench/copy.py (docs/benchmarks.md)
    assert gcs_copy.component_spec.inputs["workers"].default == DEFAULT_WORKERS
    import inspect

    from spottrain.runtime import gcs_copy as copy_rt

    body = inspect.signature(copy_rt.copy_and_record).parameters["workers"].default
    assert body == DEFAULT_WORKERS  # the component body's own default (it was 8)
    help_text = subprocess.run(
        [sys.executable, "-m", "spottrain.copier", "--help"], capture_output=True, text=True
    ).stdout
    assert f"parallel transfers (default {DEFAULT_WORKERS})" in help_text


def test_many_workers_print_no_connection_pool_warnings(fake_gcs, gcs_bucket, tmp_path):
    """More threads than urllib3's 10 pooled connections: its per-connection warnings stay
    out of the CLI's stderr (one line per discarded connection otherwise)."""
    for i in range(120):
        (tmp_path / f"f{i:03d}").write_bytes(os.urandom(2000))
    proc = subprocess.run(
        [sys.executable, "-m", "spottrain.copier", str(tmp_path), f"gs://{gcs_bucket.name}"]
        + ["-j", "64"],
        capture_output=True,
        text=True,
        env={**os.environ, **fake_gcs.env},
    )
    assert proc.returncode == 0, proc.stderr
    assert "copied 120 files" in proc.stdout
    assert "Connection pool is full" not in proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr  # the "copying ..." line


def _trust_env(client) -> bool:
    return client._http.trust_env


def test_own_client_reads_the_environment_once_unless_it_holds_settings(
    fake_gcs, gcs_bucket, tmp_path, monkeypatch
):
    """requests' per-request environment scan is off on the copy's own client only when
    nothing in the environment is meant for it (proxy, CA bundle, netrc)."""
    from spottrain.copier import copy
    from spottrain.storage import default_client

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in list(os.environ):
        if name.lower().endswith("_proxy") or name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("NETRC", raising=False)
    for name, value in fake_gcs.env.items():
        monkeypatch.setenv(name, value)
    assert _trust_env(default_client()) is False

    for name, value in [
        ("HTTPS_PROXY", "http://proxy.example:3128"),
        ("no_proxy", "metadata.google.internal"),
        ("REQUESTS_CA_BUNDLE", "/etc/ssl/corp.pem"),
        ("NETRC", "/somewhere/netrc"),
    ]:
        with monkeypatch.context() as m:
            m.setenv(name, value)
            assert _trust_env(default_client()) is True, name
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".netrc").write_text("machine example.com login a password b\n")
    assert _trust_env(default_client()) is True
    (tmp_path / "home" / ".netrc").unlink()

    # A caller's client is used as it is.
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "f").write_bytes(b"x")
    client = fake_gcs.client
    assert _trust_env(client) is True
    copy(str(tmp_path / "src"), f"gs://{gcs_bucket.name}", client=client, progress="off")
    assert _trust_env(client) is True


def test_the_copys_own_client_keeps_a_connection_per_worker(fake_gcs, gcs_bucket, tmp_path, caplog):
    """Called as a library (make run's upload, the trainer's), where no CLI quiets
    urllib3: no worker's connection is thrown away, so urllib3 has nothing to warn of."""
    import logging

    from spottrain.copier import copy

    for i in range(120):
        (tmp_path / f"f{i:03d}").write_bytes(os.urandom(2000))
    with pytest.MonkeyPatch.context() as m:
        for name, value in fake_gcs.env.items():
            m.setenv(name, value)
        with caplog.at_level(logging.WARNING, logger="urllib3.connectionpool"):
            summary = copy(
                str(tmp_path), f"gs://{gcs_bucket.name}/many", workers=64, progress="off"
            )
    assert summary.files_copied == 120, summary
    full = [r.getMessage() for r in caplog.records if "Connection pool is full" in r.getMessage()]
    assert not full, full[:3]
