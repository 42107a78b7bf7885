"""``python -m spottrain.trainer.task``'s supervisor as a container's main process (PID 1), fast.

In a GKE JobSet pod the supervisor is PID 1: the kernel drops signals PID 1 has no
handler for, orphans of the namespace become its children, and its exit code
is the container's. The supervised child here is a small script (no
TensorFlow); the real trainer as PID 1 is in tests/system/gke/test_platform_gke_jobset.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from platform_chains import REPO, can_unshare, chain_env

from spottrain import exits
from spottrain.trainer import watchdog

needs_unshare = pytest.mark.skipif(
    not can_unshare(), reason="needs PID namespaces (unshare as root)"
)


# The supervised child: leaves an orphan behind, then reports zombies in the namespace.
_ORPHANING_CHILD = textwrap.dedent(
    """
    import os, subprocess, sys, time
    # sh exits at once; its background sleep is re-parented to PID 1 and exits later.
    subprocess.run(["sh", "-c", "sleep 0.2 & exit 0"], check=True)
    time.sleep(2.5)
    zombies = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            zombies.append(pid)
    print("zombies", zombies, flush=True)
    sys.exit(42 if zombies else 7)
    """
)


# PID 1: the supervisor, as spottrain.trainer.task runs it; "bare" without the orphan reaping.
_PID1 = textwrap.dedent(
    """
    import sys
    from spottrain.trainer import watchdog
    if sys.argv[1] == "bare":
        watchdog.reap_orphans = lambda keep: None
    cmd = [sys.executable, "-c", sys.argv[2]]
    sys.exit(watchdog.Supervisor(cmd, 60, 60).run())
    """
)


@needs_unshare
@pytest.mark.parametrize("mode", ["reaping", "bare"])
def test_pid1_reaps_orphans_and_exits_with_the_childs_code(mode):
    proc = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc"]
        + [sys.executable, "-c", _PID1, mode, _ORPHANING_CHILD],
        cwd=REPO,
        env=chain_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    if mode == "reaping":
        assert proc.returncode == 7, proc.stdout + proc.stderr  # the child's own code
        assert "zombies []" in proc.stdout
    else:  # what a PID 1 that only waits for its own child leaves behind
        assert proc.returncode == 42, proc.stdout + proc.stderr


def test_a_held_notice_reaches_the_child_as_soon_as_it_exists():
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], stdout=subprocess.DEVNULL
    )
    relay = watchdog.NoticeRelay()
    relay.held = signal.SIGTERM  # arrived while the child was being started
    relay.attach(child)
    assert child.wait(timeout=10) == -signal.SIGTERM


@needs_unshare
def test_trainer_task_as_pid1_takes_sigterm_from_its_first_lines(digits_dir, tmp_path):
    """The real entry point, signalled as soon as PID 1 catches SIGTERM (its checks still run).

    Before the relay was installed first thing, the handler came with the
    trainer's start, and a notice in the supervisor's first ~0.3-1 s (imports
    and checks) was dropped by the kernel: the trainer then trained on until
    SIGKILL. What remains is the interpreter's own start (~0.1 s here).
    """
    args = [
        "--image-dir", digits_dir, "--backbone", "small_cnn", "--weights", "none",
        "--image-size", "32", "--train-steps", "100000",
        "--checkpoint-dir", str(tmp_path / "ck"), "--model-dir", str(tmp_path / "m"),
    ]  # fmt: skip
    proc = subprocess.Popen(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            sys.executable,
            "-m",
            "spottrain.trainer.task",
        ]
        + args,
        cwd=REPO,
        env=chain_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # Wait until PID 1 is python with the relay installed: SIGTERM caught (SigCgt).
    deadline = time.monotonic() + 30
    pid1 = None
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
                pid1 = int(f.read().split()[0])
            with open(f"/proc/{pid1}/status") as f:
                caught = int(next(ln for ln in f if ln.startswith("SigCgt:")).split()[1], 16)
            if caught & (1 << (signal.SIGTERM - 1)):
                break
        except (OSError, IndexError, StopIteration):
            pass
        time.sleep(0.005)
    os.kill(pid1, signal.SIGTERM)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == exits.PREEMPTED, out
    assert "SIGTERM before the trainer started: exiting 143" in out, out
    assert not (tmp_path / "ck" / "attempts.json").exists()  # no trainer ran


# The supervisor as spottrain.trainer.task runs it (relay installed first, exit_process
# last), with a notice that lands after the trainer ended and before this process exits:
# the local launcher stops the rest of a gang at once when one worker fails.
_LATE_NOTICE = textwrap.dedent(
    """
    import os, signal, sys, time
    from spottrain import exits
    from spottrain.trainer import preemption, watchdog
    relay = watchdog.NoticeRelay().install()
    code = watchdog.Supervisor([sys.executable, "-c", "raise SystemExit(64)"], 60, 60).run(relay)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.3)  # any handler has run by now
    preemption.exit_process(code)
    """
)


def test_a_notice_after_the_trainer_ended_keeps_the_trainers_exit_code():
    """A fatal 64 must not turn into 143 (retried by KFP and Vertex) because a stop
    signal came between the trainer's exit and the supervisor's: CI saw a gang's
    170 reported as 143 this way, with the handlers already restored to the default."""
    proc = subprocess.run(
        [sys.executable, "-c", _LATE_NOTICE],
        cwd=REPO,
        env=chain_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == exits.FATAL_CONFIG, proc.stdout + proc.stderr
