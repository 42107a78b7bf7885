"""spottrain.copier in hostile trees (issue 13): odd names, planted links and FIFOs, races.

The in-process tests; those that start processes are in
tests/integration/copier/test_copier_hostile.py.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import pytest
from copier_helpers import (
    crc,
    expected,
    local_state,
    temp_files,
    write_tree,
)

from spottrain.copier import CopyError, copy


def test_concurrent_copies_never_delete_each_others_temp_files(tmp_path, caplog):
    """Each new copy into a folder removes the dead copies' temp files there.

    It used to create a temp file and lock it in two steps, and a concurrent
    copy's cleanup could delete it in between: "No such file or directory:
    '….part'" (3 concurrent downloads of 1,000 files failed 4 of 6 trials). Here
    a copy of 500 files runs while two more copies into the same folder start
    over and over (each start runs the cleanup), in one process: flock locks
    belong to open files, so threads contend like processes do.
    """
    files = {f"f{i:04d}.bin": i.to_bytes(4, "big") * 50 for i in range(500)}
    src = write_tree(tmp_path / "src", files)
    (tmp_path / "empty").mkdir()
    caplog.set_level(logging.WARNING, logger="spottrain.copier")  # restored after the test
    started = time.monotonic()
    for trial in range(5):
        dst = tmp_path / f"dst{trial}"
        dst.mkdir()
        done = threading.Event()
        starts = [0, 0]

        def other_copies(k: int, dst: Path = dst, done=done, starts=starts) -> None:
            while not done.is_set():
                copy(str(tmp_path / "empty"), str(dst), allow_empty=True, progress="off")
                starts[k] += 1

        others = [threading.Thread(target=other_copies, args=(k,)) for k in range(2)]
        for t in others:
            t.start()
        try:
            summary = copy(str(src), str(dst), workers=4, progress="off")
        except CopyError as exc:
            pytest.fail(f"trial {trial}: {exc}")
        finally:
            done.set()
            for t in others:
                t.join()
        assert summary.files_copied == len(files) and not summary.failed
        assert min(starts) >= 3, f"trial {trial}: the cleanups did not overlap the copy"
        assert local_state(dst) == expected(files)
        assert temp_files(dst) == []
    assert time.monotonic() - started < 30


def test_stale_temp_file_of_a_dead_copy_is_still_removed(tmp_path):
    """The cleanup's new checks keep its job: an unlocked temp file goes."""
    src = write_tree(tmp_path / "src", {"a": b"a"})
    dst = tmp_path / "dst"
    dst.mkdir()
    stale = dst / ".spottrain-00000000abcd.part"
    stale.write_bytes(b"half")
    copy(str(src), str(dst), progress="off")
    assert not stale.exists() and (dst / "a").read_bytes() == b"a"


def test_transient_errors_are_the_storage_clients_own_predicate():
    """Pins what the copy relies on in google-cloud-storage's retry module."""
    import requests
    from google.api_core import exceptions as api
    from google.cloud.storage.exceptions import DataCorruption

    from spottrain.copier.failures import _Corrupt, _is_transient

    transient = [
        api.ServiceUnavailable("x"),
        api.TooManyRequests("x"),
        api.InternalServerError("x"),
        api.GatewayTimeout("x"),
        ConnectionResetError(),
        requests.ConnectionError(),
        requests.exceptions.ChunkedEncodingError(),
        _Corrupt("crc"),
        DataCorruption(None, "crc"),
    ]
    fatal = [
        api.NotFound("x"),
        api.PreconditionFailed("x"),
        api.Forbidden("x"),
        api.BadRequest("x"),
        ValueError("x"),
        FileNotFoundError(),
    ]
    assert [e for e in transient if not _is_transient(e)] == []
    assert [e for e in fatal if _is_transient(e)] == []


def test_log_mode_writes_periodic_progress_lines(caplog):
    from spottrain.copier.progress import _Progress

    with caplog.at_level(logging.INFO, logger="spottrain.copier"):
        bar = _Progress(4, 4000, "log", log_every=0.05)
        bar.advance(1000)
        time.sleep(0.3)
        bar.close()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("progress:")]
    assert lines and " 25% 1/4 files, 1.0 KB/4.0 KB" in lines[-1], lines


def test_reads_refuse_fifos_and_links_out_even_when_planted_after_listing(tmp_path):
    """The second line of defence: the checks on the open descriptor itself."""
    from spottrain.copier.checksums import _file_crc32c
    from spottrain.copier.safe_open import _NotRegular, _Outside

    root = tmp_path / "dst"
    root.mkdir()
    (tmp_path / "secret").write_bytes(b"s")
    (root / "inside").write_bytes(b"i")
    (root / "out").symlink_to(tmp_path / "secret")
    (root / "in").symlink_to(root / "inside")
    os.mkfifo(root / "fifo")
    real = os.path.realpath(root)
    with pytest.raises(_Outside, match="outside the destination"):
        _file_crc32c(str(root / "out"), real_root=real)
    with pytest.raises(_NotRegular, match="a FIFO"):
        _file_crc32c(str(root / "fifo"))  # returns at once instead of waiting for a writer
    assert _file_crc32c(str(root / "in"), real_root=real) == crc(b"i")  # a link inside is fine
