"""Bad inputs to the trainer and its launcher: one line naming the value, exit 64, fast.

Exit 1 (a traceback) is not fatal to KFP or Vertex: they retry it and burn GPU
time. Every case here must exit FATAL_CONFIG within seconds (the supervisor
checks before the trainer imports TensorFlow), print exactly one error line
naming the offending value, no traceback, and leave FATAL.json and a closed
ledger record where a checkpoint dir could be written.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from memory_cgroup import read_text
from real_kube import wait_for
from trainer_helpers import REPO, env, error_lines

from spottrain import exits

GOOD = ["--backbone", "small_cnn", "--weights", "none", "--train-steps", "5"]


def _trainer(tmp_path, *args, tf_config=None, dirs=True):
    extra = {"TF_CONFIG": tf_config} if tf_config else {}
    if dirs:
        args = [
            "--checkpoint-dir", str(tmp_path / "ck"), "--model-dir", str(tmp_path / "m"),
            "--image-dir", str(tmp_path), *args,
        ]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "spottrain.trainer.task", *args],
        cwd=REPO,
        env={**env(), **extra},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, time.monotonic() - start


CASES = [
    # (flags replacing GOOD's, the text the one line must contain)
    (["--bogus-flag"], "--bogus-flag"),
    (["--train-steps", "0", "--epochs", "inf"], "--epochs inf"),
    (["--train-steps", "0", "--epochs", "nan"], "nan"),
    (["--train-steps", "99999999999999999999"], "99999999999999999999"),
    (["--train-steps", "-5"], "-5"),
    (["--seed", "-1"], "--seed -1"),
    (["--seed", "99999999999"], "--seed 99999999999"),
    (["--image-size", "abc"], "'abc'"),
    (["--image-size", "0"], "--image-size 0"),
    (["--backbone", "vgg"], "'vgg'"),
    (["--learning-rate", "nan"], "--learning-rate nan"),
    (["--learning-rate", "-1"], "--learning-rate -1"),
    (["--hang-timeout", "inf"], "--hang-timeout inf"),
    # Accepted (floored to 1 s), it killed a finished run as hung in its final save.
    (["--hang-timeout", "0.05"], "--hang-timeout 0.05 is shorter than a step that saves"),
    # The renewal thread's wait overflowed: a traceback, and the lease expired.
    (["--lease-seconds", "1e12"], "--lease-seconds 1e+12 must be at most 86400"),
    (["--collective-timeout", "-1"], "--collective-timeout -1"),
    (["--save-every-seconds", "-1"], "--save-every-seconds -1"),
    (["--save-every-seconds", "nan"], "--save-every-seconds nan"),
    (["--save-every-steps", "0"], "--save-every-steps 0"),
    (["--threads", "5000"], "--threads 5000"),
    (["--steps-per-loop", "0"], "--steps-per-loop: '0' must be auto or a whole number"),
    (["--steps-per-loop", "fast"], "--steps-per-loop: 'fast'"),
    (["--jit-compile", "yes"], "--jit-compile: invalid choice: 'yes'"),
    (["--val-fraction", "1.5"], "--val-fraction 1.5"),
    (["--cache-max-mb", "-1"], "--cache-max-mb -1"),
    (["--keep-checkpoints", "1"], "--keep-checkpoints 1"),
    (["--price-per-hour", "inf"], "--price-per-hour inf"),
    (["--batch-size-per-replica", "0"], "--batch-size-per-replica 0"),
    (["--weights", "imagenet"], "small_cnn"),
]


@pytest.mark.parametrize("flags, named", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_flag_is_one_line_fatal_and_fast(tmp_path, flags, named):
    names = {f for f in flags if f.startswith("--")}
    base = [a for i, a in enumerate(GOOD) if a not in names and GOOD[i - 1] not in names]
    proc, seconds = _trainer(tmp_path, *base, *flags)
    out = proc.stdout + proc.stderr
    assert proc.returncode == exits.FATAL_CONFIG, out
    errors = error_lines(proc)
    assert len(errors) == 1 and named in errors[0], out
    assert "Traceback" not in out
    assert seconds < 3, f"{seconds:.1f} s"


def test_a_bad_value_is_recorded_for_retries(tmp_path):
    proc, _ = _trainer(tmp_path, *GOOD, "--learning-rate", "nan")
    assert proc.returncode == exits.FATAL_CONFIG
    marker = json.loads((tmp_path / "ck" / "FATAL.json").read_text())
    assert "--learning-rate nan" in marker["error"] and marker["exit_code"] == 64
    (record,) = json.loads((tmp_path / "ck" / "attempts.json").read_text())["attempts"]
    assert record["outcome"] == "fatal_config"  # closed, not left "running"


@pytest.mark.parametrize("which", ["--model-dir", "--checkpoint-dir"])
def test_an_output_dir_that_is_a_file_fails_before_training(tmp_path, which):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    args = {
        "--checkpoint-dir": str(tmp_path / "ck"),
        "--model-dir": str(tmp_path / "m"),
        which: str(a_file),
    }
    flat = [x for kv in args.items() for x in kv]
    proc, seconds = _trainer(tmp_path, *GOOD, *flat, "--image-dir", str(tmp_path), dirs=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == exits.FATAL_CONFIG, out
    (line,) = error_lines(proc)
    assert f"{which} {str(a_file)!r} is not writable: it is a file" in line
    assert seconds < 3 and "Traceback" not in out


@pytest.mark.parametrize(
    "tf_config, named",
    [
        ('{"cluster": {"chief": ["a:1"]}, "task": {"type": "worker", "index": 3}}', "index 3"),
        ('{"cluster": {"chief": ["a:1"]}, "task": {"type": "chief", "index": 1}}', "index 1"),
        ('{"cluster": {"chief": ["a:1"]}, "task": {"type": "ps"}}', "'ps'"),
        ("{not json", "not a valid cluster spec"),
        (
            '{"cluster": {"chief": ["a:1"], "worker": ["a:1"]}, "task": {"type": "chief"}}',
            "lists 'a:1' for more than one task",
        ),
    ],
)
def test_a_bad_cluster_spec_is_one_line_fatal(tmp_path, tf_config, named):
    proc, seconds = _trainer(tmp_path, *GOOD, tf_config=tf_config)
    out = proc.stdout + proc.stderr
    assert proc.returncode == exits.FATAL_CONFIG, out
    (line,) = error_lines(proc)
    assert named in line and seconds < 3 and "Traceback" not in out


@pytest.mark.parametrize(
    "args, named",
    [
        (["--workers", "1000"], "--workers 1000"),
        (["--workers", "0"], "--workers 0"),
        (["--workers", "2", "--grace", "-1"], "--grace -1.0"),
        (["--workers", "2", "--kill-after", "inf"], "--kill-after inf"),
        (["--workers", "2", "--preempt-at-step", "-4"], "--preempt-at-step -4"),
        (["--workers", "2", "--signal", "HUP"], "'HUP'"),
        (["--workers", "2", "--preempt-worker", "7"], "--preempt-worker 7"),
    ],
)
def test_launcher_refuses_in_one_line_and_starts_nothing(tmp_path, args, named):
    proc = subprocess.run(
        [sys.executable, "-m", "spottrain.trainer.launch", *args, "--", *GOOD],
        cwd=REPO,
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == exits.FATAL_CONFIG, proc.stderr
    assert proc.stderr.count("\n") == 1 and named in proc.stderr, proc.stderr
    assert "started" not in proc.stdout  # no worker was started


def test_launcher_output_dir_that_is_a_file(tmp_path):
    a_file = tmp_path / "out"
    a_file.write_text("x")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "spottrain.trainer.launch",
            "--workers",
            "2",
            "--output-dir",
            str(a_file),
        ],
        cwd=REPO,
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == exits.FATAL_CONFIG
    assert proc.stderr.strip() == f"error: --output-dir {str(a_file)!r} is a file, not a folder"


@pytest.mark.parametrize(
    "url, named",
    [
        ("gs://", "'' is not a Cloud Storage bucket name"),
        ("gs://Bad_Bucket/ck", "'Bad_Bucket' is not a Cloud Storage bucket name"),
        ("s3://b/ck", "only local paths, /gcs/ mounts and gs://bucket/... URLs"),
    ],
)
def test_a_checkpoint_url_that_cannot_work_is_refused_at_once(tmp_path, url, named):
    """Refused by the supervisor, nothing recorded "there" (gs:// once became a folder "gs:")."""
    proc, seconds = _trainer(
        tmp_path, *GOOD, "--image-dir", str(tmp_path), "--model-dir", str(tmp_path / "m"),
        "--checkpoint-dir", url, dirs=False,
    )  # fmt: skip
    assert proc.returncode == exits.FATAL_CONFIG, proc.stdout + proc.stderr
    (line,) = error_lines(proc)
    assert f"--checkpoint-dir {url!r}: {named}" in line
    assert seconds < 3 and "Traceback" not in proc.stderr
    assert not (REPO / "gs:").exists()


def _offline_trainer(*args, extra_env=None):
    """``python -m spottrain.trainer.task`` in a fresh network namespace: no DNS, no network."""
    import shutil

    if (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode
    ):
        pytest.skip("needs unshare --net (root)")
    # Google's endpoints, not the session's fake-gcs-server (its STORAGE_EMULATOR_HOST
    # leaks in from an earlier test): with no DNS they fail at once, where a refused
    # loopback port is retried with backoff for 80-110 s.
    base = {k: v for k, v in env().items() if k != "STORAGE_EMULATOR_HOST"}
    proc = subprocess.run(
        ["unshare", "--net", sys.executable, "-m", "spottrain.trainer.task", *args],
        cwd=REPO, env={**base, **(extra_env or {})}, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == exits.UNAVAILABLE, out[-3000:]
    assert exits.is_retryable(proc.returncode) and "Traceback" not in out
    (line,) = [ln for ln in proc.stdout.splitlines() if " exit 172: " in ln]
    return line


def test_unreachable_checkpoint_storage_is_retryable_and_one_line(tmp_path):
    """Cloud Storage unreachable: exit 172, not a traceback's 1."""
    line = _offline_trainer(
        *GOOD, "--image-dir", str(tmp_path), "--model-dir", str(tmp_path / "m"),
        "--checkpoint-dir", "gs://spottrain-no-such-bucket/ck",
    )  # fmt: skip
    assert "storage unreachable" in line and "gs://spottrain-no-such-bucket/ck" in line


def test_pretrained_weights_that_cannot_be_downloaded_are_retryable_and_one_line(
    digits_dir, tmp_path
):
    """Offline with an empty Keras cache: exit 172, the weights named, the ledger closed."""
    line = _offline_trainer(
        "--backbone", "mobilenet_v2", "--weights", "imagenet", "--image-size", "32",
        "--train-steps", "2", "--image-dir", str(digits_dir),
        "--checkpoint-dir", str(tmp_path / "ck"), "--model-dir", str(tmp_path / "m"),
        extra_env={"KERAS_HOME": str(tmp_path / "keras")},
    )  # fmt: skip
    assert "could not download the mobilenet_v2 --weights imagenet" in line
    (record,) = json.loads((tmp_path / "ck" / "attempts.json").read_text())["attempts"]
    assert record["outcome"] == "unavailable"


def _pids_cgroup_root() -> str | None:
    """A writable cgroup whose children can have a pids limit (v1 or v2), or None."""
    import os

    v1, v2 = "/sys/fs/cgroup/pids", "/sys/fs/cgroup"
    if os.access(os.path.join(v1, "cgroup.procs"), os.W_OK):
        return v1
    if "pids" in read_text(os.path.join(v2, "cgroup.subtree_control")).split() and os.access(
        v2, os.W_OK
    ):
        return v2
    return None


@pytest.mark.parametrize(
    "pids_max, named",
    [("3", "could not start worker 3 of 4"), ("12", "could not start the log readers")],
    ids=["fork-refused", "thread-refused"],
)
def test_launcher_start_failure_is_one_line_and_leaves_no_worker(tmp_path, pids_max, named):
    """The OS refuses a process or thread half-way through starting the workers.

    A pids cgroup makes fork() or pthread_create() fail with EAGAIN, as a full
    process table or a container's pids limit does: the launcher names the worker
    it could not start, exits 64, and the workers already started are gone.
    """
    import os

    root = _pids_cgroup_root()
    if root is None:
        pytest.skip("no writable pids cgroup here (needs root)")
    cg = os.path.join(root, f"spottrain-test-{os.getpid()}-{pids_max}")
    os.mkdir(cg)
    try:
        with open(os.path.join(cg, "pids.max"), "w") as f:
            f.write(pids_max)
        launch = f"{sys.executable} -m spottrain.trainer.launch --workers 4 -- " + " ".join(GOOD)
        proc = subprocess.run(
            ["sh", "-c", f"echo $$ > {cg}/cgroup.procs && exec {launch}"],
            cwd=REPO,
            env=env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == exits.FATAL_CONFIG, proc.stderr
        assert proc.stderr.count("\n") == 1 and named in proc.stderr, proc.stderr
        assert "lower --workers" in proc.stderr and "Traceback" not in proc.stderr
        # Nothing orphaned: the cgroup empties (the kernel reaps the last exits a moment later).
        procs = os.path.join(cg, "cgroup.procs")
        wait_for("an empty cgroup", lambda: read_text(procs).split() == [], timeout=30)
    finally:
        for pid in read_text(os.path.join(cg, "cgroup.procs")).split():
            os.kill(int(pid), 9)
        time.sleep(0.2)
        os.rmdir(cg)


@pytest.mark.parametrize("cache_mb", ["1024", "0"], ids=["decoded-cache", "streaming"])
def test_a_truncated_image_is_named_and_fatal(digits_dir, tmp_path, cache_mb):
    """A broken PNG among good ones: the error names it (cached at start, or at its step)."""
    import shutil

    images = tmp_path / "images"
    shutil.copytree(digits_dir, images)
    victim = sorted((images / "3").glob("*.png"))[0]
    victim.write_bytes(victim.read_bytes()[:40])  # truncated mid-header
    proc, _ = _trainer(
        tmp_path,
        *GOOD,
        "--image-dir", str(images), "--image-size", "32", "--train-steps", "400",
        "--cache-max-mb", cache_mb, "--save-every-steps", "1000",
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == exits.FATAL_CONFIG, out[-3000:]
    # Our log lines (TF's C++ cuInit line on stderr also says "ERROR").
    errors = error_lines(proc)
    assert len(errors) == 1, errors
    assert f"cannot decode image {str(victim)!r}" in errors[0], errors[0]
    assert "Traceback" not in out
    (record,) = json.loads((tmp_path / "ck" / "attempts.json").read_text())["attempts"]
    assert record["outcome"] == "fatal_config"


def test_a_broken_validation_image_is_named_before_any_step(digits_dir, tmp_path):
    """The validation split is decoded up front like the training split: a broken image
    there fails the run before training, not after the last step."""
    import shutil

    from spottrain.tasks.image import data

    images = tmp_path / "images"
    shutil.copytree(digits_dir, images)
    held_out = [
        p for p in sorted((images / "3").glob("*.png")) if data._held_out(f"3/{p.name}", 0.1, 0)
    ]
    victim = held_out[0]  # in the validation split (seed 0, --val-fraction 0.1)
    victim.write_bytes(victim.read_bytes()[:40])
    proc, _ = _trainer(
        tmp_path, *GOOD,
        "--image-dir", str(images), "--image-size", "32", "--train-steps", "400",
        "--save-every-steps", "1000",
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == exits.FATAL_CONFIG, out[-3000:]
    (error,) = error_lines(proc)
    assert f"cannot decode image {str(victim)!r}" in error and "validation split" in error, error
    assert "step 10/" not in out and not list((tmp_path / "ck").glob("ckpt-*")), "it trained"


def _memory_cgroup() -> tuple[str, str] | None:
    """A writable memory cgroup of this process (v1 or v2) to limit a child in:
    (folder, limit file), or None."""
    import os

    from spottrain.trainer import batch_memory

    for (mount, limit_file, _), where in batch_memory._own_cgroups():
        folder = os.path.join(mount, *[p for p in where.split("/") if p])
        if (
            limit_file == "memory.max"
            and "memory" not in read_text(os.path.join(folder, "cgroup.subtree_control")).split()
        ):
            continue
        if os.path.isdir(folder) and os.access(folder, os.W_OK):
            return folder, limit_file
    return None


def test_a_batch_that_cannot_fit_in_memory_is_one_fatal_line(digits_dir, tmp_path):
    """--batch-size-per-replica 1000000 ran until the kernel's OOM killer (exit 137,
    retried, no line). Here in a cgroup limited to 3 GiB, so that even without the
    check nothing outside it runs short: one step's batch of 32x32x3 uint8 images (as
    the built-in task decodes them) alone fills the limit, so the trainer must refuse
    before the first step, naming the flag, instead of being killed."""
    import os

    found = _memory_cgroup()
    if found is None:
        pytest.skip("no writable memory cgroup here (needs root)")
    parent, limit_file = found
    limit = 3 * 2**30
    batch = limit // (32 * 32 * 3)  # one batch alone would fill the whole limit
    cg = os.path.join(parent, f"spottrain-test-batch-{os.getpid()}")
    os.mkdir(cg)
    try:
        with open(os.path.join(cg, limit_file), "w") as f:
            f.write(str(limit))
        argv = [
            sys.executable, "-m", "spottrain.trainer.task", *GOOD,
            "--image-dir", str(digits_dir), "--image-size", "32",
            "--batch-size-per-replica", str(batch),
            "--checkpoint-dir", str(tmp_path / "ck"), "--model-dir", str(tmp_path / "m"),
        ]  # fmt: skip
        proc = subprocess.run(
            ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh", *argv],
            cwd=REPO,
            env=env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        out = proc.stdout + proc.stderr
        assert proc.returncode == exits.FATAL_CONFIG, out[-3000:]
        (line,) = error_lines(proc)
        assert f"--batch-size-per-replica {batch}: a step's batch" in line, line
        assert "do not fit in the" in line and "Traceback" not in out
        assert "step 1/" not in out
        (record,) = json.loads((tmp_path / "ck" / "attempts.json").read_text())["attempts"]
        assert record["outcome"] == "fatal_config"
    finally:
        for pid in read_text(os.path.join(cg, "cgroup.procs")).split():
            os.kill(int(pid), 9)
        time.sleep(0.2)
        os.rmdir(cg)


# A trainer stand-in speaking the heartbeat protocol (heartbeat.Heartbeat): one step,
# then a save it waits for that lasts longer than the step timeout, then (optionally)
# a step that hangs as long.
_SAVES_SLOWLY = """
import sys, time
from spottrain.trainer import heartbeat
beat = heartbeat.Heartbeat()
beat.beat(1)
beat.saving()
time.sleep(float(sys.argv[1]))
beat.beat(2)
if sys.argv[2] == "hang":
    time.sleep(float(sys.argv[1]))
beat.done()
"""


@pytest.mark.parametrize("then", ["done", "hang"])
def test_a_save_longer_than_the_step_timeout_is_not_a_hang(then):
    """--hang-timeout watched the final save too: a run that had trained was killed as
    hung (171) while saving. A save is watched with the start-up timeout; a step after
    it is watched with the step timeout again."""
    from spottrain.trainer import watchdog

    hang_timeout = 1.0
    cmd = [sys.executable, "-c", _SAVES_SLOWLY, str(4 * hang_timeout), then]
    supervisor = watchdog.Supervisor(cmd, hang_timeout, startup_timeout_s=60)
    code = supervisor.run()
    if then == "done":
        assert code == 0 and supervisor.fired_after is None
    else:
        assert code == exits.HUNG and supervisor.step == 2
        assert hang_timeout <= supervisor.fired_after < 4 * hang_timeout
