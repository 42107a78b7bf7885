"""The copy's worker default is one value everywhere, and many workers stay quiet.

The in-process tests; those that start processes are in
tests/integration/copier/test_copier_defaults.py.
"""

from __future__ import annotations


def test_the_cli_run_in_process_leaves_the_libraries_logging_as_it_was(tmp_path, caplog):
    """run-local's upload logs its copy's summary (make run's "upload: copied …" line);
    a CLI call earlier in the same process (tests do that) had silenced it for good."""
    import logging

    from spottrain.copier import cli, copy

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "f").write_bytes(b"x")
    assert cli.main([str(tmp_path / "src"), str(tmp_path / "a"), "-q"]) == 0
    with caplog.at_level(logging.INFO):
        copy(str(tmp_path / "src"), str(tmp_path / "b"), progress="off")
    assert any(r.getMessage().startswith("copied 1 files") for r in caplog.records), caplog.text
