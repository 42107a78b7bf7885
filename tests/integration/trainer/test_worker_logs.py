"""The local launcher's console with real worker processes (tests/noisy_worker.py).

One line per event, each worker's whole log in a file. These start processes, so they
are integration tests; the table of which lines are events is in the unit tier.
"""

from __future__ import annotations

import io

from spottrain.trainer import launch
from tests.noisy_worker import T  # the time stamp its workers print


def _launch(tmp_path, monkeypatch, end: str, **kw) -> tuple[launch.LaunchResult, list[str]]:
    monkeypatch.setenv("NOISY_END", end)
    console = io.StringIO()
    result = launch.ProcessLauncher(
        2, [], module="tests.noisy_worker", stream=console, log_dir=str(tmp_path / "logs"), **kw
    ).run()
    return result, console.getvalue().splitlines()


def test_the_console_shows_one_line_per_event_and_the_files_hold_everything(tmp_path, monkeypatch):
    result, lines = _launch(tmp_path, monkeypatch, "ok")
    assert result.code == 0
    # The two workers interleave: compared per worker.
    chief = [ln[10:] for ln in lines if ln.startswith("[chief-0] ")]
    worker = [ln[11:] for ln in lines if ln.startswith("[worker-0] ")]
    assert chief == [
        "start_step=0 total_steps=20 global_batch=32 replicas=2 steps_per_loop=1 xla=off",
        f"{T} INFO trainer: first step done 16.1 s after start",
        "step 10/20 loss=1.7615 1.2 steps/s",
        f"{T} INFO trainer: saved /c/ckpt-10 at step 10 (interval, 28 ms, writing in the "
        "background)",
        f"{T} WARNING tensorflow: a warning of TensorFlow's",
        "step 20/20 loss=0.9398 3.9 steps/s",
        f"{T} INFO trainer: saved /c/ckpt-20 at step 20 (interval, 126 ms)",
        f"{T} INFO trainer: done: " + '{"final_step": 20}',
    ]
    assert worker == [
        f"{T} WARNING tensorflow: a warning of TensorFlow's",
        f"{T} INFO trainer: saved /c/ckpt-20 at step 20 (interval, 126 ms)",
    ]
    for name in ("chief-0", "worker-0"):
        text = (tmp_path / "logs" / f"{name}.log").read_text().splitlines()
        assert text[0].startswith("== launched ")
        assert len(text) == 1 + 13  # every line the worker printed, unprefixed
        assert "failed call to cuInit" in text[3]
    assert "whole log in" in lines[1] and str(tmp_path / "logs") in lines[1]


def test_a_crash_shows_its_last_lines_a_said_exit_does_not(tmp_path, monkeypatch):
    result, lines = _launch(tmp_path, monkeypatch, "crash")
    assert result.code == 1
    # The first to crash, and the other if it crashed before the launcher's SIGTERM.
    crashed = sorted(n for n, c in result.worker_codes.items() if c == 1)
    tails = [ln for ln in lines if "its last lines" in ln]
    assert len(tails) == len(crashed) >= 1, lines
    first = result.first_failure
    assert str(tmp_path / "logs" / f"{first}.log") in " ".join(tails)
    assert f"[{first}] | RuntimeError: a crash the trainer did not catch" in lines
    assert f"[{first}] | Traceback (most recent call last):" in lines
    assert not any("cuInit" in ln or "absl::InitializeLog" in ln for ln in lines)

    result, lines = _launch(tmp_path, monkeypatch, "fatal")
    assert result.code == 64
    assert not any("its last lines" in ln for ln in lines)  # its one line says it
    # Each worker's own line (the other may be stopped by the launcher before it says it).
    assert 1 <= sum(" ERROR trainer: exit 64: " in ln for ln in lines) <= 2


def test_without_a_log_dir_every_line_is_printed(tmp_path, monkeypatch):
    """As in a pod, whose log is the only copy (the train component; --verbose)."""
    monkeypatch.setenv("NOISY_END", "ok")
    console = io.StringIO()
    assert (
        launch.ProcessLauncher(2, [], module="tests.noisy_worker", stream=console).run().code == 0
    )
    lines = console.getvalue().splitlines()
    assert sum("cuInit" in ln for ln in lines) == 2 and len(lines) == 2 * 13 + 2
    assert not any("whole log in" in ln for ln in lines)
