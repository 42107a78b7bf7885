"""A notice in every phase of an attempt (issue 42, section 3), 2 real workers each.

The step loop's contract (a notice saves at the next step boundary, 0 steps lost)
is tested in test_trainer_faults.py. Here the notice comes where no step runs: while
TensorFlow starts, while the gang forms, while a checkpoint is restored, during the
train step's first trace, during ``evaluate()``, during export, and while a
background save is written (heard by the chief, and by the other worker). Each
attempt must end with the right code and a record in the ledger that says what
happened, leaving a complete checkpoint that the next attempt resumes from.

What the engine does in each phase is docs/preemption.md's item 10; each row prints
the seconds from the notice to each worker's exit (``-s`` shows them).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from notice_phase_task import MARK_ENV, PAUSE_S, PHASE_ENV
from trainer_helpers import ledger, run_module, summary, task_args

from spottrain import exits
from spottrain.trainer import launch, local_cluster

pytestmark = pytest.mark.slow

LATE_S = 60.0  # how late the other worker comes in the gang-forming row


def _args(out: Path, **overrides) -> list[str]:
    flags = {"task": "tests.notice_phase_task:Phased", "log_every_steps": 5, **overrides}
    return task_args(out, **flags)


class Lines:
    """The launcher's stream: every worker's lines, kept."""

    def __init__(self):
        self.lines: list[str] = []

    def write(self, text):
        self.lines.extend(text.splitlines())

    def flush(self):
        pass

    def of(self, worker: str) -> str:
        return "\n".join(ln for ln in self.lines if ln.startswith(f"[{worker}] "))

    def tail(self) -> str:
        return "\n".join(self.lines[-80:])


@dataclass
class Attempt:
    """One attempt with a notice: when it was sent, and how each worker ended."""

    gang: launch.ProcessLauncher
    lines: Lines
    sent: float = 0.0  # time.monotonic()
    sent_at: float = 0.0  # time.time()
    result: launch.LaunchResult | None = None
    exits: dict[str, float] = field(default_factory=dict)  # seconds after the notice
    codes: dict[str, int] = field(default_factory=dict)

    def worker(self, name: str) -> launch.Worker:
        return next(w for w in self.gang.workers if w.name == name)


def _notice(args, target: str, ready, *, module="spottrain.trainer.task", kill_after_s=None):
    """Runs a 2-worker attempt; SIGTERM to ``target`` (its supervisor, as the kubelet
    or Vertex sends it) once ``ready(attempt)``; with ``kill_after_s``, SIGKILL to its
    whole process group that long after (the platform at the end of the grace period).
    """
    lines = Lines()
    gang = launch.ProcessLauncher(2, args, stream=lines, grace=5, kill_after=60, module=module)
    a = Attempt(gang, lines)
    runner = threading.Thread(target=lambda: setattr(a, "result", gang.run()))
    runner.start()
    deadline = time.monotonic() + 300
    while not ready(a):
        assert runner.is_alive(), lines.tail()
        assert time.monotonic() < deadline, lines.tail()
        time.sleep(0.01)
    a.sent, a.sent_at = time.monotonic(), time.time()
    pid = a.worker(target).proc.pid
    os.kill(pid, signal.SIGTERM)
    if kill_after_s is not None:
        time.sleep(kill_after_s)
        for p in [pid, *local_cluster.children(pid)]:
            os.kill(p, signal.SIGKILL)
    runner.join(timeout=300)
    assert a.result is not None, lines.tail()
    a.codes = dict(a.result.worker_codes)
    a.exits = {w.name: round(w.ended_at - a.sent, 2) for w in gang.workers}
    return a


def _marked(mark: Path, worker: str):
    """Ready once ``worker`` entered the phase the task pauses in."""
    return lambda a: Path(f"{mark}-{worker}").exists()


def _ended_inside(a: Attempt, mark: Path, worker: str) -> bool:
    """Whether ``worker`` exited before its pause in the phase would have ended."""
    entered = float(Path(f"{mark}-{worker}").read_text())  # time.time(), by the task
    return a.sent_at + a.exits[worker] < entered + PAUSE_S


def _saved(out: Path) -> list[int]:
    return sorted(int(p.name[5:-6]) for p in (out / "checkpoints").glob("ckpt-*.index"))


def _finish(args) -> launch.LaunchResult:
    lines = Lines()
    result = launch.ProcessLauncher(2, args, stream=lines).run()
    assert result.code == 0, lines.tail()
    return result


def _report(row: str, a: Attempt, record: dict) -> None:
    exits = ", ".join(f"{k} {a.codes[k]} after {v:.2f} s" for k, v in a.exits.items())
    print(f"\nNOTICE PHASE | {row} | {exits} | {record.get('outcome')} | "
          f"steps_lost {record.get('steps_lost')}")  # fmt: skip


@pytest.fixture
def phase(tmp_path, monkeypatch):
    """Sets the phase the task pauses in (the workers inherit the environment)."""
    mark = tmp_path / "entered"
    monkeypatch.setenv(MARK_ENV, str(mark))

    def pause_in(name: str | None) -> Path:
        if name is None:
            monkeypatch.delenv(PHASE_ENV, raising=False)
        else:
            monkeypatch.setenv(PHASE_ENV, name)
        return mark

    return pause_in


def _ends_at_once(out: Path, a: Attempt, target: str, doing: str, resumes_from: int) -> dict:
    """Checks an attempt noticed before its first step ended: 143, no new checkpoint, a
    record that says so; then the next attempt resumes from the same step, to the end."""
    assert a.codes[target] == exits.PREEMPTED, a.lines.tail()
    assert doing in a.lines.of(target), a.lines.of(target)[-3000:]
    # Its peer had no notice: it ends when the gang goes (retryable either way).
    assert all(exits.is_retryable(c) for c in a.codes.values()), a.codes
    assert (_saved(out) or [0])[-1] == resumes_from, _saved(out)  # nothing new was saved
    (record,) = [r for r in ledger(out) if r.get("outcome") != "success"]
    assert record["outcome"] in ("preempted", "worker_lost"), record
    assert record["steps_lost"] == 0 and record["last_step"] == resumes_from, record
    if target == "chief-0":  # the ledger is the chief's: its record names the notice
        assert record["outcome"] == "preempted" and record["notice_reason"] == "SIGTERM"
        assert doing in record["message"], record
    return record


def test_a_notice_while_tensorflow_starts(phase, tmp_path):
    """The trainer is importing TensorFlow: the notice waits (blocked from the start),
    and the attempt ends, recorded, with nothing to save."""
    out = tmp_path / "run"
    phase(None)
    a = _notice(
        _args(out), "chief-0", lambda a: len(a.gang.workers) == 2
        and local_cluster.children(a.worker("chief-0").proc.pid),
    )  # fmt: skip
    record = _ends_at_once(out, a, "chief-0", "while TensorFlow and the task started", 0)
    _report("TensorFlow start-up (chief)", a, record)
    _finish(_args(out))
    assert ledger(out)[-1]["start_step"] == 0 and summary(out)["final_step"] == 40


def test_a_notice_while_the_gang_forms(phase, tmp_path, monkeypatch):
    """The other worker is late (its pod still waits for a node); the chief waits in
    MultiWorkerMirroredStrategy's start-up, where TensorFlow holds Python's lock and
    its own SIGTERM handler once swallowed the notice: the run trained on to the end.
    Now the attempt ends within NOTICE_ACK_S, long before the peer comes."""
    out = tmp_path / "run"
    phase(None)
    monkeypatch.setenv("LATE_WORKER_S", str(LATE_S))
    began = time.monotonic()
    a = _notice(
        _args(out), "chief-0", lambda a: (out / "checkpoints" / "attempts.json").exists(),
        module="tests.late_worker",
    )  # fmt: skip
    record = _ends_at_once(out, a, "chief-0", "while the gang formed", 0)
    assert a.sent + a.exits["chief-0"] < began + LATE_S, a.exits  # not when the peer came
    _report("gang forming (chief)", a, record)
    monkeypatch.delenv("LATE_WORKER_S")
    _finish(_args(out))
    assert summary(out)["final_step"] == 40


def test_a_notice_while_a_checkpoint_is_restored(phase, tmp_path):
    out = tmp_path / "run"
    phase(None)
    _finish(_args(out, train_steps=20))
    mark = phase("restore")
    a = _notice(_args(out), "chief-0", _marked(mark, "chief-0"))
    record = _ends_at_once(out, a, "chief-0", "while a checkpoint was restored", 20)
    assert _ended_inside(a, mark, "chief-0"), a.exits  # not after the restore
    _report("restore (chief)", a, record)
    phase(None)
    _finish(_args(out))
    assert ledger(out)[-1]["start_step"] == 20 and summary(out)["final_step"] == 40


def test_a_notice_during_the_first_trace(phase, tmp_path):
    """Heard by the worker that is not the chief: it ends inside the trace, not after
    it; the chief ends when the gang goes."""
    out = tmp_path / "run"
    mark = phase("trace")
    a = _notice(_args(out), "worker-0", _marked(mark, "worker-0"))
    record = _ends_at_once(
        out, a, "worker-0", "before the first step ended (its trace or compile)", 0
    )
    assert _ended_inside(a, mark, "worker-0"), a.exits  # not after the trace
    _report("first trace (worker)", a, record)
    phase(None)
    _finish(_args(out))
    assert summary(out)["final_step"] == 40


@pytest.mark.parametrize("where", ["evaluate", "export"])
def test_a_notice_after_the_final_save_lets_evaluation_and_export_finish(phase, tmp_path, where):
    """The checkpoint is complete: evaluation and export go on, and the run ends 0
    (no retry needed) when they fit in the notice period."""
    out = tmp_path / "run"
    mark = phase(where)
    target = "chief-0" if where == "evaluate" else "worker-0"
    a = _notice(_args(out), target, _marked(mark, target))
    assert a.codes == {"chief-0": 0, "worker-0": 0}, a.lines.tail()
    assert "after the final save at step 40" in a.lines.of(target), a.lines.of(target)[-3000:]
    (record,) = ledger(out)
    assert record["outcome"] == "success" and record["steps_lost"] == 0, record
    if target == "chief-0":
        assert record["notice_step"] == 40 and record["notice_reason"] == "SIGTERM", record
    assert summary(out)["final_step"] == 40
    assert {"model.keras", "saved_model/"} <= set(summary(out)["exported"])
    _report(f"{where} (after the final save, {target.split('-')[0]})", a, record)


def test_a_notice_killed_during_evaluation_leaves_the_next_attempt_only_its_end(phase, tmp_path):
    """The platform kills the attempt 1 s after the notice, mid-evaluation: the next
    attempt resumes at the final step, evaluates and exports; the killed attempt's
    record says it was preempted and lost nothing."""
    out = tmp_path / "run"
    mark = phase("evaluate")
    a = _notice(_args(out), "chief-0", _marked(mark, "chief-0"), kill_after_s=1.0)
    assert a.codes["chief-0"] == 128 + signal.SIGKILL, a.codes
    assert not (out / "model" / "training_summary.json").exists()
    phase(None)
    _finish(_args(out))
    killed, done = ledger(out)
    assert killed["outcome"] == "preempted" and killed["steps_lost"] == 0, killed
    assert killed["notice_step"] == 40, killed
    assert done["start_step"] == 40 and done["outcome"] == "success", done
    assert summary(out)["final_step"] == 40 and summary(out)["start_step"] == 40
    _report("evaluate, killed 1 s after the notice (chief)", a, killed)


@pytest.mark.parametrize("target", ["chief-0", "worker-0"])
def test_a_notice_during_a_background_save(phase, tmp_path, target):
    """The chief writes the interval save at step 20 in the background (a 200 MB
    checkpoint) when the notice comes: the notice save waits for it, then every
    worker saves the same step and exits 143; the next attempt resumes there."""
    out = tmp_path / "run"
    phase(None)
    args = _args(out, task="tests.slow_save_task:SlowToSave", train_steps=200)
    writing = out / "checkpoints" / "ckpt-20_temp"
    a = _notice(args, target, lambda a: writing.exists())
    assert a.codes == {"chief-0": 143, "worker-0": 143}, a.lines.tail()
    (record,) = ledger(out)
    assert record["outcome"] == "preempted" and record["steps_lost"] == 0, record
    step = record["saved_step"]
    assert step > 20 and step in _saved(out) and 20 in _saved(out), (record, _saved(out))
    for worker in a.codes:
        assert f"at step {step} (preemption" in a.lines.of(worker), a.lines.of(worker)
    _finish(args)
    assert ledger(out)[-1]["start_step"] == step and summary(out)["final_step"] == 200
    _report(f"background save ({target.split('-')[0]})", a, record)


def test_processes_the_task_starts_can_be_ended_by_sigterm(phase, tmp_path):
    """The trainer blocks the notice until the strategy exists; a process its task
    starts later (a data loader's pool) must not inherit the block, or the pool's
    SIGTERM would never end it."""
    out = tmp_path / "run"
    mark = phase("child")
    proc, _ = run_module("spottrain.trainer.task", _args(out, train_steps=2))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    blocked = int(Path(f"{mark}-chief-0").read_text(), 16)
    assert not blocked & (1 << (signal.SIGTERM - 1)), hex(blocked)
    assert not blocked & (1 << (signal.SIGINT - 1)), hex(blocked)
