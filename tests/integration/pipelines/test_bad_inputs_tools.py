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
    proc = _run("spottrain.copier", str(tmp_path), dst)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and named in proc.stderr and "segment" in proc.stderr


def test_copy_refuses_a_destination_below_a_file_before_copying(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "f.txt").write_text("x")
    (tmp_path / "afile").write_text("in the way")
    proc = _run("spottrain.copier", str(tmp_path / "src"), str(tmp_path / "afile" / "sub"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        f"error: destination {tmp_path / 'afile' / 'sub'} cannot be created: "
        f"{str(tmp_path / 'afile')!r} is a file, not a folder"
    )
    assert "copied" not in proc.stdout


@pytest.mark.parametrize("delay", ["-5", "nan", "1e9"])
def test_copy_refuses_a_bad_retry_delay_before_copying(tmp_path, delay):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "f.txt").write_text("x")
    proc = _run(
        "spottrain.copier", str(tmp_path / "src"), str(tmp_path / "dst"), "--retry-delay", delay
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
        (["--skip-steps", "-1"], "--skip-steps -1"),
    ],
)
def test_profiling_refuses_bad_outputs_before_profiling(tmp_path, args, named):
    (tmp_path / "a-file").write_text("x")
    args = [a.format(tmp=tmp_path) for a in args]
    proc = _run("spottrain.profiling", *args, "--", "--train-steps", "5")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and named in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("flag", ["--report", "--logdir"])
def test_profiling_refuses_a_read_only_output_before_profiling(read_only_dir, flag):
    path = read_only_dir / ("p.md" if flag == "--report" else "logs")
    proc = _run("spottrain.profiling", flag, str(path), "--", "--train-steps", "5")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert f"{flag} '{path}'" in proc.stderr and "Read-only file system" in proc.stderr


def test_run_local_refuses_a_read_only_out(read_only_dir, capsys):
    from spottrain.pipelines import __main__ as cli

    code = cli.main(["run-local", "--out", str(read_only_dir / "run")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"--out '{read_only_dir / 'run'}': not writable: Read-only file system" in err


def _tree(tmp_path):
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "1.png").write_bytes(b"one")
    return src


def test_copy_refuses_a_symlink_that_leaves_the_source(tmp_path):
    src = _tree(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("do not upload")
    (src / "a" / "leak.png").symlink_to(secret)
    proc = _run("spottrain.copier", str(src), str(tmp_path / "dst"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "leak.png" in proc.stderr
    assert str(secret) in proc.stderr and "--follow-symlinks" in proc.stderr
    assert not (tmp_path / "dst").exists()  # nothing copied
    # Asked for: copied as the file it points to.
    ok = _run("spottrain.copier", str(src), str(tmp_path / "dst"), "--follow-symlinks")
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "dst" / "a" / "leak.png").read_text() == "do not upload"


def test_copy_follows_symlinked_folders_inside_the_source(tmp_path):
    src = _tree(tmp_path)
    (src / "b").symlink_to(src / "a", target_is_directory=True)  # a class folder as a link
    (src / "a" / "loop").symlink_to(src, target_is_directory=True)  # and a loop
    proc = _run("spottrain.copier", str(src), str(tmp_path / "dst"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "dst" / "b" / "1.png").read_bytes() == b"one"
    assert (tmp_path / "dst" / "a" / "1.png").read_bytes() == b"one"


def _run_env(module, *args, **environ):
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO, env={**env(), **environ}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_copy_into_a_folder_that_cannot_be_created_is_2_before_copying(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("a")
    # procfs refuses new folders even to root (a read-only mount would too).
    proc = _run("spottrain.copier", str(tmp_path / "src"), "/proc/spottrain-copy")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: destination /proc/spottrain-copy cannot be created: No such file or directory"
    ]


def test_copy_names_a_malformed_emulator_host_in_one_line(tmp_path):
    proc = _run_env(
        "spottrain.copier", "gs://bkt/x", str(tmp_path / "d"), STORAGE_EMULATOR_HOST="::bad::"
    )
    assert proc.returncode == 2, proc.stderr
    assert "STORAGE_EMULATOR_HOST '::bad::' is not a URL" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_copy_from_an_endpoint_that_stays_unreachable_is_69(tmp_path):
    proc = _run_env(
        "spottrain.copier", "gs://bkt/x", str(tmp_path / "d"), "--retry-delay", "0.1",
        STORAGE_EMULATOR_HOST="http://127.0.0.1:9",
    )  # fmt: skip
    assert proc.returncode == 69, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: giving up listing gs://bkt/x/")
    assert "Traceback" not in proc.stderr


def test_the_vertex_fall_back_launcher_refuses_a_made_up_region(tmp_path):
    """A region that does not exist has no API host: that read as "Vertex AI
    unreachable", exit 172, retried by the pipeline for ever. It is a bad input."""
    import json

    from spottrain import exits

    proc = _run(
        "spottrain.runtime.vertex_job",
        "--project", "p", "--location", "us-central9",
        "--payload", json.dumps({"job_spec": {"worker_pool_specs": []}}),
        "--gcp_resources", str(tmp_path / "gcp_resources"),
        "--checkpoint_dir", str(tmp_path / "ck"), "--train_steps", "5",
    )  # fmt: skip
    assert proc.returncode == exits.FATAL_CONFIG, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and "--location 'us-central9' is not a Vertex AI region" in errors[0]
    assert not (tmp_path / "gcp_resources").exists()


@pytest.mark.parametrize("module", ["spottrain.demo", "spottrain.testing.demo_deadline"])
@pytest.mark.parametrize(
    "out, named",
    [("{tmp}/a-file/x", "is a file, not a folder"), ("/proc/spottrain-x", "not writable")],
)
def test_the_demos_refuse_an_out_they_cannot_write_before_anything(tmp_path, module, out, named):
    """Once a traceback from the first mkdir (make run-deadline OUT=<unwritable>)."""
    (tmp_path / "a-file").write_text("x")
    proc = _run(module, "--out", out.format(tmp=tmp_path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "--out" in last and named in last, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr and not proc.stdout


def test_the_deadline_demo_removes_only_what_it_wrote(tmp_path):
    """make run-deadline OUT=<a folder of the user's> deleted the folder and its files."""
    from spottrain.testing.demo_deadline import WRITES, clear_own

    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "data").mkdir()
    for name in WRITES:
        if "." in name:
            (tmp_path / name).write_text("old page")
        else:
            (tmp_path / name).mkdir()
            (tmp_path / name / "x").write_text("old")
    clear_own(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "notes.txt"]
