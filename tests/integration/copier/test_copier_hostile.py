"""spottrain.copier in hostile trees (issue 13): odd names, planted links and FIFOs, races.

Real files, real processes and the real fake-gcs-server; the only stand-in is the
fault proxy of test_copier.py, used here to stall a download.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import threading
import time

import pytest
from copier_helpers import (
    FaultProxy,
    crc,
    expected,
    is_download,
    local_state,
    upload_tree,
    write_tree,
)

from spottrain.copier import copy


def cli(*args: str, env: dict | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    """Runs the CLI; a hang fails the test (and the process is killed) instead of stalling it."""
    return subprocess.run(
        [sys.executable, "-m", "spottrain.copier", *args, "--progress", "off"],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def errors(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


def test_non_utf8_name_is_refused_before_anything_is_uploaded(fake_gcs, gcs_bucket, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.png").write_bytes(b"fine")
    bad = os.path.join(os.fsencode(src), b"caf\xe9.png")  # Latin-1 "café", not UTF-8
    with open(bad, "wb") as f:
        f.write(b"x")
    for _ in range(2):  # the same answer every time, not a success then a failure
        proc = cli(str(src), f"gs://{gcs_bucket.name}/up")
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1, proc.stderr
        assert repr(bad) in proc.stderr and "not UTF-8" in proc.stderr
        assert list(gcs_bucket.client.list_blobs(gcs_bucket)) == []  # not even ok.png

    # Local to local keeps the name byte for byte (no object name involved).
    dst = tmp_path / "dst"
    proc = cli(str(src), str(dst))
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(os.fsencode(dst))) == [b"caf\xe9.png", b"ok.png"]
    assert open(os.path.join(os.fsencode(dst), b"caf\xe9.png"), "rb").read() == b"x"


@pytest.mark.parametrize("mode", ["--no-clobber", "--clobber"])
def test_symlink_planted_at_a_file_path_is_never_read_or_written(
    fake_gcs, gcs_bucket, tmp_path, mode
):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "same.txt").write_bytes(b"payload")  # same bytes as the object
    (outside / "other.txt").write_bytes(b"PAYLOAD")  # same size, other bytes
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in outside.iterdir()}
    upload_tree(gcs_bucket, "p/", {"same.txt": b"payload", "other.txt": b"payload", "ok": b"k"})
    dst = tmp_path / "dst"
    dst.mkdir()
    for name in ("same.txt", "other.txt"):
        (dst / name).symlink_to(outside / name)

    proc = cli(f"gs://{gcs_bucket.name}/p", str(dst), mode)
    assert proc.returncode == 1, proc.stderr
    assert "refused 2" in proc.stdout and "copied 1 files" in proc.stdout
    assert "outside the destination" in errors(proc)[0]
    # Nothing written through the links: no checksum xattr, no content, no mtime change;
    # the links are still links (a matching target was not trusted as "identical").
    for p in outside.iterdir():
        assert os.listxattr(p) == [], p
        assert (p.read_bytes(), p.stat().st_mtime_ns) == before[p.name]
    assert all((dst / n).is_symlink() for n in ("same.txt", "other.txt"))
    assert (dst / "ok").read_bytes() == b"k"


def test_symlink_as_a_single_file_target_is_refused(fake_gcs, gcs_bucket, tmp_path):
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"1234")
    gcs_bucket.blob("one.bin").upload_from_string(b"abcd")
    (tmp_path / "dst").mkdir()
    (tmp_path / "dst" / "one.bin").symlink_to(outside)
    summary = copy(f"gs://{gcs_bucket.name}/one.bin", str(tmp_path / "dst" / "one.bin"))
    assert summary.files_refused == 1 and "outside the destination" in summary.refused[0]
    assert outside.read_bytes() == b"1234" and os.listxattr(outside) == []


@pytest.mark.parametrize("mode", ["--no-clobber", "--clobber"])
def test_fifo_at_a_target_path_is_refused_not_read(fake_gcs, gcs_bucket, tmp_path, mode):
    upload_tree(gcs_bucket, "p/", {"f.txt": b"data", "g.txt": b"more"})
    dst = tmp_path / "dst"
    dst.mkdir()
    os.mkfifo(dst / "f.txt")
    proc = cli(f"gs://{gcs_bucket.name}/p", str(dst), mode)  # used to block forever
    assert proc.returncode == 1, proc.stderr
    assert errors(proc) == [
        f"error: 1 file(s) refused, first: {dst / 'f.txt'}: not a regular file (a FIFO)"
    ]
    assert (dst / "f.txt").is_fifo() and (dst / "g.txt").read_bytes() == b"more"


def test_fifo_named_like_a_temp_file_is_left_alone(fake_gcs, gcs_bucket, tmp_path):
    upload_tree(gcs_bucket, "p/", {"f.txt": b"data"})
    dst = tmp_path / "dst"
    dst.mkdir()
    fifo = dst / ".spottrain-0123456789ab.part"
    os.mkfifo(fifo)
    proc = cli(f"gs://{gcs_bucket.name}/p", str(dst), "--no-clobber")  # used to block at start
    assert proc.returncode == 0, proc.stderr
    assert fifo.is_fifo() and (dst / "f.txt").read_bytes() == b"data"
    # ... also as a single-file copy into that folder.
    proc = cli(f"gs://{gcs_bucket.name}/p/f.txt", str(dst / "g.txt"))
    assert proc.returncode == 0, proc.stderr
    assert fifo.is_fifo()


def test_fifos_in_the_source_are_skipped_with_a_count(fake_gcs, gcs_bucket, tmp_path):
    src = write_tree(tmp_path / "src", {"a.png": b"a", "sub/b.png": b"b"})
    os.mkfifo(src / "pipe")
    os.mkfifo(src / "sub" / "pipe2")
    for dst in (f"gs://{gcs_bucket.name}/up", str(tmp_path / "dst")):
        proc = cli(str(src), dst)
        assert proc.returncode == 0, proc.stderr
        assert "copied 2 files" in proc.stdout
        assert "ignored 2 not regular (FIFO, socket, device)" in proc.stdout
        assert f"skipping {src / 'pipe'}: not a regular file (a FIFO)" in proc.stderr
    assert local_state(tmp_path / "dst") == expected({"a.png": b"a", "sub/b.png": b"b"})


def test_ctrl_c_stops_a_copy_stuck_in_a_download_at_once(fake_gcs, gcs_bucket, tmp_path):
    """SIGINT while a worker waits on a stalled response: exit 130 at once, rerun completes."""
    upload_tree(gcs_bucket, "p/", {"stuck.bin": b"s" * 1000, "ok.bin": b"o"})
    proxy = FaultProxy(fake_gcs.host)
    release = threading.Event()
    proxy.add(is_download("p/stuck.bin"), lambda: release.wait(120))
    try:
        dst = tmp_path / "dst"
        proc = subprocess.Popen(
            [sys.executable, "-m", "spottrain.copier", f"gs://{gcs_bucket.name}/p", str(dst)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "STORAGE_EMULATOR_HOST": proxy.url},
        )
        deadline = time.monotonic() + 30
        while not any("stuck.bin" in p for _, p in proxy.requests):
            assert time.monotonic() < deadline and proc.poll() is None, "never downloaded"
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            pytest.fail("SIGINT did not stop the copy within 5 s")
        assert proc.returncode == 130, err
        assert err.splitlines()[-1] == "error: interrupted"
    finally:
        release.set()
        proxy.close()
    summary = copy(f"gs://{gcs_bucket.name}/p", str(dst), progress="off")
    assert local_state(dst) == {"stuck.bin": crc(b"s" * 1000), "ok.bin": crc(b"o")}
    assert summary.files_copied + summary.files_skipped == 2


def _read_pty(fd: int, proc: subprocess.Popen, timeout: float = 60) -> str:
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    return out.decode(errors="replace")


def test_progress_is_a_tqdm_bar_on_a_terminal_and_log_lines_otherwise(tmp_path):
    src = write_tree(tmp_path / "src", {f"f{i}": b"x" * 1000 for i in range(3)})
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "spottrain.copier", str(src), str(tmp_path / "tty")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=secondary,
    )
    os.close(secondary)
    try:
        shown = _read_pty(primary, proc)
    finally:
        os.close(primary)
        proc.wait(timeout=30)
    assert proc.returncode == 0, shown
    assert "100%|" in shown and "3.00k/3.00k" in shown and "3/3 files" in shown, shown

    # Not a terminal: no bar, no carriage returns (a pod's log keeps every redraw).
    proc = subprocess.run(
        [sys.executable, "-m", "spottrain.copier", str(src), str(tmp_path / "log")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr and "|" not in proc.stderr
