"""spottrain.copier against a real fake-gcs-server (no mocks).

Faults (5xx, resets, corruption, lost responses, concurrent writers) are injected
by a small HTTP proxy between the real client and the real emulator.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from copier_helpers import (
    FaultProxy,
    expected,
    is_download,
    local_state,
    temp_files,
    upload_tree,
    write_tree,
)
from google.cloud import storage

from spottrain.copier import CopyError, copy

TREE = {
    "a.txt": b"hello\n",
    "empty": b"",
    "nested/deep/er/x.bin": random.Random(1).randbytes(200_000),
    "nested/y.txt": b"y" * 1000,
    "sp ace/ünï cödé ✓.txt": "grüße, 世界\n".encode(),
    "sp ace/two  spaces .dat": b"\x00\x01\x02" * 100,
}


def gcs_state(bucket: storage.Bucket, prefix: str) -> dict[str, str]:
    return {
        b.name[len(prefix) :]: b.crc32c for b in bucket.client.list_blobs(bucket, prefix=prefix)
    }


def run_cli(
    *args: str, env: dict | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spottrain.copier", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def big_file(tmp_path_factory) -> tuple[str, bytes]:
    data = random.Random(50).randbytes(50 * 2**20)
    return "big/fifty.bin", data


def test_four_directions_round_trip_and_rerun_moves_nothing(fake_gcs, tmp_path, big_file):
    files = {**TREE, big_file[0]: big_file[1]}
    src = write_tree(tmp_path / "src", files)
    a = fake_gcs.create_bucket("four-a")
    b = fake_gcs.create_bucket("four-b")
    want = expected(files)
    legs = [
        (str(src), "gs://four-a/up/load", lambda: gcs_state(a, "up/load/")),  # upload
        ("gs://four-a/up/load", "gs://four-b/re/write/", lambda: gcs_state(b, "re/write/")),
        ("gs://four-b/re/write", str(tmp_path / "down"), lambda: local_state(tmp_path / "down")),
        (str(tmp_path / "down"), str(tmp_path / "local"), lambda: local_state(tmp_path / "local")),
    ]
    for source, dest, state in legs:
        first = copy(source, dest, client=fake_gcs.client, progress="off")
        assert (first.files_copied, first.files_skipped, first.files_refused) == (len(files), 0, 0)
        assert first.bytes_copied == sum(map(len, files.values()))
        assert state() == want, f"{source} -> {dest}"
        again = copy(source, dest, client=fake_gcs.client, progress="off")
        assert again.to_dict() | {"seconds": 0} == {
            "files_copied": 0,
            "files_skipped": len(files),
            "files_refused": 0,
            "bytes_copied": 0,
            "seconds": 0,
        }, f"rerun {source} -> {dest}"
    assert temp_files(tmp_path) == []
    # The objects really are the bytes, not just matching metadata.
    assert b.blob("re/write/" + big_file[0]).download_as_bytes() == big_file[1]
    assert (tmp_path / "local" / big_file[0]).read_bytes() == big_file[1]


def test_sliced_download_of_large_object(fake_gcs, gcs_bucket, tmp_path, big_file):
    """transfer_manager's ranged download path (used above a size threshold)."""
    name, data = big_file
    gcs_bucket.blob("p/" + name).upload_from_string(data)
    dst = tmp_path / "dst"
    summary = copy(
        f"gs://{gcs_bucket.name}/p",
        str(dst),
        client=fake_gcs.client,
        sliced_download_threshold=2**20,  # 50 MB -> 2 ranges of 32 MiB max
        progress="off",
    )
    assert summary.files_copied == 1
    assert (dst / name).read_bytes() == data
    assert temp_files(dst) == []


def test_single_object_and_single_file(fake_gcs, gcs_bucket, tmp_path):
    gcs_bucket.blob("d/one.txt").upload_from_string(b"one")
    copy(f"gs://{gcs_bucket.name}/d/one.txt", str(tmp_path / "into") + "/", progress="off")
    assert (tmp_path / "into" / "one.txt").read_bytes() == b"one"
    copy(str(tmp_path / "into" / "one.txt"), f"gs://{gcs_bucket.name}/e/renamed.txt")
    assert gcs_bucket.blob("e/renamed.txt").download_as_bytes() == b"one"
    again = copy(str(tmp_path / "into" / "one.txt"), f"gs://{gcs_bucket.name}/e/renamed.txt")
    assert (again.files_copied, again.files_skipped) == (0, 1)


def test_prefix_means_directory_not_string_prefix(fake_gcs, gcs_bucket, tmp_path):
    upload_tree(gcs_bucket, "", {"data/a": b"1", "data2/b": b"2", "data/sub/c": b"3"})
    copy(f"gs://{gcs_bucket.name}/data", str(tmp_path / "d"), progress="off")
    assert sorted(local_state(tmp_path / "d")) == ["a", "sub/c"]


@pytest.mark.parametrize("dst_kind", ["local", "gcs"])
def test_changed_source_is_copied_again_or_refused(fake_gcs, gcs_bucket, tmp_path, dst_kind):
    src = write_tree(tmp_path / "src", {"keep.txt": b"same", "model.bin": b"version-1"})
    if dst_kind == "local":
        dst = str(tmp_path / "dst")

        def dst_bytes(rel):
            return (tmp_path / "dst" / rel).read_bytes()
    else:
        dst = f"gs://{gcs_bucket.name}/out"

        def dst_bytes(rel):
            return gcs_bucket.blob(f"out/{rel}").download_as_bytes()

    copy(str(src), dst, no_clobber=False, progress="off")
    # Same size, different content: only the CRC32C tells them apart.
    (src / "model.bin").write_bytes(b"version-2")

    refused = copy(str(src), dst, no_clobber=True, progress="off")
    assert (refused.files_copied, refused.files_skipped, refused.files_refused) == (0, 1, 1)
    assert "model.bin" in refused.refused[0]
    assert dst_bytes("model.bin") == b"version-1"

    clobbered = copy(str(src), dst, no_clobber=False, progress="off")
    assert (clobbered.files_copied, clobbered.files_skipped) == (1, 1)
    assert clobbered.bytes_copied == len(b"version-2")
    assert dst_bytes("model.bin") == b"version-2"


def test_same_size_change_with_old_mtime_is_noticed(fake_gcs, gcs_bucket, tmp_path):
    """Nothing but the content decides: no cached checksum can hide a change."""
    upload_tree(gcs_bucket, "src/", {"w.bin": b"a" * 4096})
    dst = tmp_path / "dst"
    copy(f"gs://{gcs_bucket.name}/src", str(dst), no_clobber=False, progress="off")
    target = dst / "w.bin"
    assert copy(f"gs://{gcs_bucket.name}/src", str(dst), progress="off").files_skipped == 1
    # Nothing of ours is left on the file (the former checksum cache wrote an xattr).
    assert [a for a in os.listxattr(target) if "spottrain" in a] == []

    # Same size, and even the old mtime put back: still noticed.
    before = target.stat()
    target.write_bytes(b"b" * 4096)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert target.stat().st_mtime_ns == before.st_mtime_ns
    again = copy(f"gs://{gcs_bucket.name}/src", str(dst), no_clobber=False, progress="off")
    assert (again.files_copied, again.files_skipped) == (1, 0)
    assert target.read_bytes() == b"a" * 4096


def test_upload_leaves_no_local_file_identity_and_notices_changes(fake_gcs, gcs_bucket, tmp_path):
    """Uploaded objects carry no record of the local file; a changed file is copied again."""
    src = write_tree(tmp_path / "src", {"w.bin": b"a" * 4096})
    dst = f"gs://{gcs_bucket.name}/up"
    copy(str(src), dst, no_clobber=False, progress="off")
    assert not gcs_bucket.get_blob("up/w.bin").metadata  # no inode, mtime or ctime leaked
    assert copy(str(src), dst, progress="off").files_skipped == 1

    before = (src / "w.bin").stat()
    (src / "w.bin").write_bytes(b"b" * 4096)
    os.utime(src / "w.bin", ns=(before.st_atime_ns, before.st_mtime_ns))
    again = copy(str(src), dst, no_clobber=False, progress="off")
    assert (again.files_copied, again.files_skipped) == (1, 0)
    assert gcs_bucket.blob("up/w.bin").download_as_bytes() == b"b" * 4096


CKPT_V1 = {
    "checkpoint": b'model_checkpoint_path: "ckpt-1"\n',
    "ckpt-1.index": b"index-1",
    "ckpt-1.data-00000-of-00001": random.Random(2).randbytes(10_000),
}


CKPT_ADVANCED = {
    "checkpoint": b'model_checkpoint_path: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-2"\n',
    "ckpt-2.index": b"index-2",
    "ckpt-2.data-00000-of-00001": random.Random(3).randbytes(10_000),
}


@pytest.mark.parametrize("dst_kind", ["local", "gcs"])
def test_newer_destination_checkpoint_survives_rerun(fake_gcs, gcs_bucket, tmp_path, dst_kind):
    """The retried copy step must not roll back a checkpoint training advanced."""
    src = write_tree(tmp_path / "init", CKPT_V1)
    if dst_kind == "local":
        dst_root = tmp_path / "work" / "ckpt"
        dst = str(dst_root)
        first = copy(str(src), dst, progress="off")
        write_tree(dst_root, CKPT_ADVANCED)  # training saved ckpt-2

        def state():
            return local_state(dst_root)
    else:
        dst = f"gs://{gcs_bucket.name}/run1/ckpt"
        first = copy(str(src), dst, progress="off")
        upload_tree(gcs_bucket, "run1/ckpt/", CKPT_ADVANCED)

        def state():
            return {
                b.name: (b.crc32c, b.generation)
                for b in gcs_bucket.client.list_blobs(gcs_bucket, prefix="run1/")
            }

    assert first.no_clobber, "a path with 'ckpt' turns no-clobber on by default"
    before = state()
    rerun = copy(str(src), dst, progress="off")
    assert rerun.no_clobber
    assert (rerun.files_copied, rerun.files_skipped, rerun.files_refused) == (0, 2, 1)
    assert state() == before  # byte for byte (CRC32C), and on GCS the same generations
    if dst_kind == "local":
        assert (dst_root / "checkpoint").read_bytes() == CKPT_ADVANCED["checkpoint"]
    else:
        blob = gcs_bucket.blob("run1/ckpt/checkpoint")
        assert blob.download_as_bytes() == CKPT_ADVANCED["checkpoint"]
    # The CLI says so and exits 1, unless refusals are expected.
    proc = run_cli(str(src), dst, "--progress", "off")
    assert proc.returncode == 1, proc.stderr
    assert "refused" in error_lines(proc)[0] and "checkpoint" in error_lines(proc)[0]
    assert run_cli(str(src), dst, "--allow-refused").returncode == 0
    assert state() == before


def test_no_clobber_default_rule(fake_gcs, gcs_bucket, tmp_path):
    plain = write_tree(tmp_path / "plain", {"x": b"1"})
    ckpt = write_tree(tmp_path / "model", {"checkpoint": b"c", "ckpt-1.index": b"i"})
    b = gcs_bucket.name
    assert not copy(str(plain), f"gs://{b}/data").no_clobber
    assert copy(str(plain), f"gs://{b}/run/Checkpoints/x").no_clobber  # path component
    assert copy(str(plain), f"gs://{b}/my_ckpt").no_clobber
    assert copy(str(ckpt), f"gs://{b}/work").no_clobber  # 'checkpoint' index in the source
    assert copy(str(plain), f"gs://{b}/work").no_clobber  # ... now in the destination
    assert not copy(str(ckpt), f"gs://{b}/work2", no_clobber=False).no_clobber  # explicit wins


def test_path_traversal_names_are_refused(fake_gcs, gcs_bucket, tmp_path):
    evil = {
        "p/../evil.txt": b"escape via ..",
        "p/../../evil2.txt": b"escape further",
        "p//etc/evil3": b"absolute after the prefix",
        "p/./dot": b"dot component",
        "p/a//b": b"empty component",
    }
    upload_tree(gcs_bucket, "", {**evil, "p/ok.txt": b"fine", "p/sub/ok2.txt": b"fine too"})
    assert set(gcs_state(gcs_bucket, "p/")) >= {"../evil.txt", "/etc/evil3"}  # really stored
    work = tmp_path / "work"
    dst = work / "dst"
    summary = copy(f"gs://{gcs_bucket.name}/p", str(dst), progress="off")
    assert (summary.files_copied, summary.files_refused) == (2, len(evil))
    assert local_state(dst) == expected({"ok.txt": b"fine", "sub/ok2.txt": b"fine too"})
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["ok.txt", "ok2.txt"]
    assert not Path("/etc/evil3").exists()
    assert any("'..'" in line for line in summary.refused)
    assert any("absolute" in line for line in summary.refused)

    proc = run_cli(f"gs://{gcs_bucket.name}/p", str(dst))
    assert proc.returncode == 1
    assert "refused" in error_lines(proc)[0]


def test_symlink_inside_destination_cannot_lead_outside(fake_gcs, gcs_bucket, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "link").symlink_to(outside)
    upload_tree(gcs_bucket, "p/", {"link/x.txt": b"x", "y.txt": b"y"})
    summary = copy(f"gs://{gcs_bucket.name}/p", str(dst), progress="off")
    assert (summary.files_copied, summary.files_refused) == (1, 1)
    assert "outside the destination" in summary.refused[0]
    assert list(outside.iterdir()) == []


def test_missing_or_empty_sources_give_one_clear_line(fake_gcs, gcs_bucket, tmp_path):
    b = gcs_bucket.name
    gcs_bucket.blob("folder/").upload_from_string(b"")  # a console "folder", nothing in it
    (tmp_path / "empty").mkdir()
    cases = [
        (
            ["gs://no-such-bucket-xyz/data", str(tmp_path / "d")],
            "bucket not found: gs://no-such-bucket-xyz",
        ),
        ([f"gs://{b}/nope", str(tmp_path / "d")], f"source not found: gs://{b}/nope"),
        ([f"gs://{b}/folder", str(tmp_path / "d")], f"source is empty: gs://{b}/folder/"),
        ([str(tmp_path / "missing"), f"gs://{b}/x"], f"source not found: {tmp_path / 'missing'}"),
        ([str(tmp_path / "empty"), f"gs://{b}/x"], f"source is empty: {tmp_path / 'empty'}"),
        (
            [str(tmp_path / "empty"), "gs://no-such-dst-xyz/x", "--allow-empty"],
            "bucket not found: gs://no-such-dst-xyz",
        ),
        (["s3://b/x", str(tmp_path / "d")], "unsupported source 's3://b/x'"),
        ([str(tmp_path), str(tmp_path / "sub")], "is inside source"),
    ]
    for args, message in cases:
        proc = run_cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        errors = error_lines(proc)
        assert len(errors) == 1 and message in errors[0], (args, proc.stderr)
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "d").exists()

    with pytest.raises(CopyError, match="source not found") as info:
        copy(f"gs://{b}/nope", str(tmp_path / "d"))
    assert info.value.exit_code == 2
    ok = run_cli(str(tmp_path / "empty"), f"gs://{b}/x", "--allow-empty")
    assert ok.returncode == 0, ok.stderr


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to run as nobody"
)
def test_local_permission_errors_give_one_clear_line(tmp_path):
    """Permission checks need a non-root user: the CLI runs as nobody via setpriv."""
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable]
    reach = subprocess.run([*nobody, "-c", "import spottrain.copier"], capture_output=True)
    if reach.returncode:
        # A checkout under a folder nobody may enter (mktemp -d makes it 0700).
        pytest.skip("nobody cannot import this checkout's spottrain (its folder is private)")
    base = Path(tempfile.mkdtemp(prefix="perm-", dir="/tmp"))
    try:
        base.chmod(0o755)  # nobody may look in, not write
        src = write_tree(base / "src", {"a.txt": b"a", "secret.bin": b"s"})
        (base / "out").mkdir(mode=0o777)
        (base / "out").chmod(0o777)

        def as_nobody(*args):
            return subprocess.run(
                [*nobody, "-m", "spottrain.copier", *args, "--progress", "off"],
                capture_output=True, text=True, timeout=60, cwd="/tmp",
            )  # fmt: skip

        proc = as_nobody(str(src), str(base / "dst"))  # cannot create base/dst
        assert proc.returncode == 2, proc.stderr
        assert error_lines(proc) == [f"error: permission denied: {base / 'dst'}"]

        (src / "secret.bin").chmod(0o600)  # root's, unreadable for nobody
        proc = as_nobody(str(src), str(base / "out" / "dst"))
        assert proc.returncode == 2, proc.stderr
        assert error_lines(proc) == [f"error: permission denied: {src / 'secret.bin'}"]
        assert not (base / "out" / "dst" / "secret.bin").exists()
    finally:
        shutil.rmtree(base)


def test_dry_run_lists_and_writes_nothing(fake_gcs, gcs_bucket, tmp_path):
    upload_tree(gcs_bucket, "src/", TREE)
    dst = tmp_path / "dst"
    proc = run_cli(f"gs://{gcs_bucket.name}/src", str(dst), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    listed = [line for line in proc.stdout.splitlines() if line.startswith("would copy gs://")]
    assert len(listed) == len(TREE)
    assert any("ünï cödé ✓.txt" in line for line in listed)
    assert f"would copy {len(TREE)} files" in proc.stdout
    assert not dst.exists()

    copy(f"gs://{gcs_bucket.name}/src", str(dst), progress="off")
    (dst / "a.txt").write_bytes(b"HELLO\n")
    proc = run_cli(f"gs://{gcs_bucket.name}/src", str(dst), "--dry-run", "--clobber", "--json")
    assert proc.returncode == 0, proc.stderr
    assert (
        proc.stdout.splitlines()[0]
        == f"would copy gs://{gcs_bucket.name}/src/a.txt -> {dst / 'a.txt'}"
    )
    assert '"files_copied": 1' in proc.stdout and '"files_skipped": 5' in proc.stdout
    assert (dst / "a.txt").read_bytes() == b"HELLO\n"


def _kill_when(proc: subprocess.Popen, condition, timeout: float = 30) -> bool:
    """SIGKILLs ``proc`` as soon as ``condition()``; False if it ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            hit = condition()
        except (FileNotFoundError, OSError):
            hit = False
        if hit:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.002)
    proc.kill()
    raise AssertionError("kill condition never met")


def _start_cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "spottrain.copier", *args, "--progress", "off", "-j", "4"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


KILL_TREE = {
    **{f"part-{i:03d}/shard.bin": random.Random(i).randbytes(150_000) for i in range(60)},
    "large/model.bin": random.Random(99).randbytes(24 * 2**20),
}


def test_sigkill_download_then_rerun(fake_gcs, gcs_bucket, tmp_path):
    upload_tree(gcs_bucket, "data/", KILL_TREE)
    want = expected(KILL_TREE)
    src = f"gs://{gcs_bucket.name}/data"
    dst = tmp_path / "dst"

    def partial_big_temp():  # mid-way through the large file
        return any(p.stat().st_size > 2**20 for p in temp_files(dst))

    def some_files():
        return dst.exists() and sum(1 for _ in dst.rglob("shard.bin")) >= 20

    def most_files():
        return dst.exists() and sum(1 for _ in dst.rglob("shard.bin")) >= 50

    left_temp = False
    for condition in (partial_big_temp, some_files, most_files):
        killed = _kill_when(_start_cli(src, str(dst), "--clobber"), condition)
        assert killed, condition.__name__
        left_temp |= bool(temp_files(dst))
        # Atomic: whatever is there under its real name is complete and correct.
        for rel, value in local_state(dst).items():
            if not rel.split("/")[-1].startswith(".spottrain-"):
                assert value == want[rel], f"{rel} is partial after kill at {condition.__name__}"
    assert left_temp, "no kill left a temp file: the cleanup path was not exercised"

    summary = copy(src, str(dst), no_clobber=True, progress="off")
    assert summary.files_refused == 0
    assert summary.files_skipped > 0
    assert local_state(dst) == want
    assert temp_files(dst) == []


def test_sigkill_upload_then_rerun(fake_gcs, gcs_bucket, tmp_path):
    src = write_tree(tmp_path / "src", KILL_TREE)
    want = expected(KILL_TREE)
    dst = f"gs://{gcs_bucket.name}/up"

    for count in (5, 30):
        killed = _kill_when(
            _start_cli(str(src), dst, "--no-clobber"),
            lambda n=count: len(gcs_state(gcs_bucket, "up/")) >= n,
        )
        assert killed
        for rel, value in gcs_state(gcs_bucket, "up/").items():
            assert value == want[rel], f"{rel} is partial after kill"

    summary = copy(str(src), dst, no_clobber=True, progress="off")
    assert (summary.files_refused, summary.files_skipped > 0) == (0, True)
    assert gcs_state(gcs_bucket, "up/") == want
    assert temp_files(src) == []


@pytest.fixture
def proxy(fake_gcs):
    p = FaultProxy(fake_gcs.host)
    yield p
    p.close()


def is_upload(method: str, path: str) -> bool:
    return method == "POST" and path.startswith("/upload/")


def is_listing(method: str, path: str) -> bool:
    return method == "GET" and path.split("?")[0].endswith("/o")


def test_transient_errors_are_retried(fake_gcs, gcs_bucket, tmp_path, proxy):
    upload_tree(gcs_bucket, "src/", TREE)
    proxy.add(is_listing, 503, times=2)
    proxy.add(is_download("src/a.txt"), 429)
    proxy.add(is_download("src/nested/y.txt"), "reset")
    proxy.add(is_download("src/empty"), 500)
    proxy.add(is_download("src/nested/deep/er/x.bin"), "corrupt")  # caught by CRC32C
    client = proxy.client()
    dst = tmp_path / "dst"
    summary = copy(f"gs://{gcs_bucket.name}/src", str(dst), client=client, retry_delay=0.01)
    assert summary.files_copied == len(TREE)
    assert local_state(dst) == expected(TREE)
    assert all(rule[2] == 0 for rule in proxy.rules), "every fault was hit"

    src = write_tree(tmp_path / "up", {"f1": b"1" * 100, "f2": b"2" * 100})
    proxy.add(is_upload, 502)
    proxy.add(is_upload, "reset")
    copy(str(src), f"gs://{gcs_bucket.name}/up", client=client, retry_delay=0.01)
    assert gcs_state(gcs_bucket, "up/") == local_state(src)


def test_persistent_corruption_fails_and_leaves_nothing(fake_gcs, gcs_bucket, tmp_path, proxy):
    upload_tree(gcs_bucket, "src/", {"good": b"good", "bad": b"x" * 5000})
    proxy.add(is_download("src/bad"), "corrupt", times=100)
    dst = tmp_path / "dst"
    with pytest.raises(CopyError, match="CRC32C mismatch") as info:
        copy(
            f"gs://{gcs_bucket.name}/src",
            str(dst),
            client=proxy.client(),
            retries=2,
            retry_delay=0.01,
        )
    assert info.value.exit_code == 1
    assert info.value.summary.files_copied == 1
    assert local_state(dst) == expected({"good": b"good"})  # no bad file, no temp file

    # Upload corrupted on the way in: the object the server stored is removed again.
    src = write_tree(tmp_path / "up", {"weights": b"A" * 3000})
    proxy.add(is_upload, "corrupt-upload", times=100)
    with pytest.raises(CopyError, match="CRC32C mismatch") as info:
        copy(
            str(src),
            f"gs://{gcs_bucket.name}/up",
            client=proxy.client(),
            retries=1,
            retry_delay=0.01,
        )
    assert info.value.exit_code == 1
    assert gcs_state(gcs_bucket, "up/") == {}


def test_lost_upload_response_is_not_a_conflict(fake_gcs, gcs_bucket, tmp_path, proxy):
    """The upload landed but its response was lost; the retry's 412 is our own write."""
    src = write_tree(tmp_path / "src", {"ckpt-1.index": b"idx"})
    proxy.add(is_upload, "lose-response")
    summary = copy(
        str(src), f"gs://{gcs_bucket.name}/ckpt", client=proxy.client(), retry_delay=0.01
    )
    assert (summary.files_copied, summary.files_refused) == (1, 0)
    assert sum(1 for m, p in proxy.requests if is_upload(m, p)) == 2


def test_if_generation_match_zero_protects_against_concurrent_writer(
    fake_gcs, gcs_bucket, tmp_path, proxy
):
    """An object created between our listing and our upload is never overwritten."""
    src = write_tree(tmp_path / "src", {"checkpoint": b"ours"})

    def training_writes_first():
        gcs_bucket.blob("ckpt/checkpoint").upload_from_string(b"training wrote this")

    proxy.add(is_upload, training_writes_first)
    summary = copy(str(src), f"gs://{gcs_bucket.name}/ckpt", client=proxy.client())
    assert summary.files_refused == 1
    assert "during the copy" in summary.refused[0]
    assert gcs_bucket.blob("ckpt/checkpoint").download_as_bytes() == b"training wrote this"


def test_permission_denied_is_one_line_exit_2(fake_gcs, gcs_bucket, tmp_path, proxy):
    upload_tree(gcs_bucket, "src/", {"a": b"a"})
    proxy.add(is_listing, 403)
    proc = run_cli(
        f"gs://{gcs_bucket.name}/src", str(tmp_path / "d"), env={"STORAGE_EMULATOR_HOST": proxy.url}
    )
    assert proc.returncode == 2
    errors = error_lines(proc)
    assert len(errors) == 1 and errors[0].startswith(
        f"error: permission denied listing gs://{gcs_bucket.name}/src/"
    )

    proxy.add(is_upload, 403, times=10)
    src = write_tree(tmp_path / "up", {f"f{i}": b"x" for i in range(5)})
    with pytest.raises(CopyError, match="permission denied copying") as info:
        copy(str(src), f"gs://{gcs_bucket.name}/up", client=proxy.client())
    assert info.value.exit_code == 2


def test_persistent_5xx_gives_up_with_exit_69(fake_gcs, gcs_bucket, tmp_path, proxy):
    """The endpoint stayed unavailable through the retries: sysexits' EX_UNAVAILABLE."""
    upload_tree(gcs_bucket, "src/", {"a": b"a"})
    proxy.add(is_listing, 503, times=100)
    proc = run_cli(
        f"gs://{gcs_bucket.name}/src",
        str(tmp_path / "d"),
        "--retries",
        "2",
        "--retry-delay",
        "0.01",
        env={"STORAGE_EMULATOR_HOST": proxy.url},
    )
    assert proc.returncode == 69, proc.stderr
    assert error_lines(proc)[0].startswith("error: giving up listing")
