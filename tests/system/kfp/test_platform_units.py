"""The small pieces the platform reproductions rely on, each alone (fast)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest
from platform_chains import REPO, can_unshare, chain_env

from spottrain.trainer import forward

# Prints 50 lines into a pipe whose reader is gone, then reports how it ended.
_WRITER = textwrap.dedent(
    """
    import sys, time
    if sys.argv[1] == "guarded":
        from spottrain.trainer.stdio import survive_broken_pipes
        survive_broken_pipes()
    time.sleep(0.5)  # the reader closes meanwhile
    for i in range(50):
        print(f"step {i}", flush=True)
    open(sys.argv[2], "w").write("finished")
    """
)


@pytest.mark.parametrize("mode", ["guarded", "bare"])
def test_writes_to_a_dead_reader(tmp_path, mode):
    marker = tmp_path / "marker"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, mode, str(marker)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    proc.stdout.close()  # the launcher dies: nobody reads the pipe any more
    code = proc.wait(timeout=60)
    if mode == "guarded":
        assert code == 0 and marker.read_text() == "finished"
    else:  # the defect the guard exists for
        assert code == 1 and not marker.exists()


def _forward(*cmd, **kw):
    return subprocess.run(
        [sys.executable, "-m", "spottrain.trainer.forward", "--", *cmd],
        cwd=REPO,
        env=chain_env(),
        capture_output=True,
        text=True,
        timeout=60,
        **kw,
    )


def test_forward_repeats_a_notice_until_a_late_handler_hears_it_once(tmp_path):
    """kfp's executor runs seconds before the supervisor has its handler, with SIGTERM
    ignored (inherited from forward): a notice then must not be lost, and once a
    handler exists it is sent once more, not every period."""
    script = tmp_path / "late.py"
    script.write_text(
        "import signal, sys, time\n"
        "print('started', flush=True)\n"
        "time.sleep(1.0)  # SIGTERM still ignored, as inherited\n"
        "heard = []\n"
        "signal.signal(signal.SIGTERM, lambda *a: heard.append(time.monotonic()))\n"
        "end = time.monotonic() + 3\n"
        "while time.monotonic() < end and not heard:\n"
        "    time.sleep(0.01)\n"
        "time.sleep(2.5)  # room for repeats that should not come\n"
        "print('heard', len(heard), flush=True)\n"
        "sys.exit(143 if heard else 0)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "spottrain.trainer.forward", "--", "sh", "-ec", f"python3 {script}"],
        cwd=REPO, env=chain_env(), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout.readline().strip() == "started"
    time.sleep(0.2)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)  # to forward, which passes it to the group
    assert proc.wait(timeout=20) == 143
    word, count = proc.stdout.read().split()
    # Once, or twice if the handler came between a check and its send; not every period.
    assert word == "heard" and 1 <= int(count) <= 2, count
    # heard at the first repeat after its handler exists: 0.8 s + at most one period
    assert time.monotonic() - sent < 0.8 + forward.REPEAT_SECONDS + 2.5 + 1.0


def test_forward_passes_the_exit_code_and_signal_deaths_on():
    assert _forward("sh", "-c", "exit 143").returncode == 143
    assert _forward("sh", "-c", "exit 0").returncode == 0
    assert _forward("sh", "-c", "kill -KILL $$").returncode == 137


def test_forward_refuses_a_missing_command_in_one_line():
    usage = subprocess.run(
        [sys.executable, "-m", "spottrain.trainer.forward"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert usage.returncode == 2 and usage.stderr.count("\n") == 1
    missing = _forward("/no/such/program")
    assert missing.returncode == 127
    assert "'/no/such/program'" in missing.stderr and missing.stderr.count("\n") == 1


@pytest.mark.skipif(not can_unshare(), reason="needs PID namespaces (unshare as root)")
def test_forward_as_pid1_hands_sigterm_to_a_handler_behind_a_shell(tmp_path):
    """sh (no exec) → python with a handler: the handler runs and its exit code comes out."""
    script = tmp_path / "child.py"
    script.write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
        "sys.exit(0)\n"
    )
    proc = subprocess.Popen(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            sys.executable,
            "-m",
            "spottrain.trainer.forward",
            "--",
            "sh",
            "-ec",
            f"{sys.executable} {script}\necho after",
        ],  # fmt: skip
        cwd=REPO,
        env=chain_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
        pid1 = int(f.read().split()[0])
    start = time.monotonic()
    subprocess.run(["kill", "-TERM", str(pid1)], check=True)
    assert proc.wait(timeout=30) == 143
    assert time.monotonic() - start < 5
    # sh ignored the signal it was started with ignored, and ran no further (-e).
    assert "after" not in proc.stdout.read()
