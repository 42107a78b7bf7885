"""spottrain.copier against a real fake-gcs-server (no mocks).

The in-process tests; those that start processes are in
tests/integration/copier/test_copier.py.
"""

from __future__ import annotations

from spottrain.copier import CopySummary


def test_summary_to_dict_is_flat_numbers():
    d = CopySummary(files_copied=2, bytes_copied=10, seconds=1.23456).to_dict()
    assert set(d) == {"files_copied", "files_skipped", "files_refused", "bytes_copied", "seconds"}
    assert all(isinstance(v, (int, float)) for v in d.values())
