"""GCE's metadata preemption notice (spottrain/trainer/metadata_notice.py).

Against a stand-in metadata server on loopback (tests/standins/gce_metadata.py, its
behaviour cited to GCE's documentation there): the watcher alone, then real trainers
(2 workers as local processes) whose metadata key turns TRUE mid-run, and the same run
preempted again by SIGTERM, to compare the two notices.
"""

from __future__ import annotations

import signal

import pytest
from trainer_helpers import ledger, run_module, tiny_args

from spottrain import exits
from spottrain.trainer import launch, metadata_notice

pytestmark_slow = pytest.mark.slow


class Lines:
    """A launcher stream: calls ``when`` once at the first line starting with ``prefix``."""

    def __init__(self, prefix: str, when):
        self.prefix, self.when, self.done, self.text = prefix, when, False, []

    def write(self, s: str) -> None:
        self.text.append(s)
        if not self.done and any(ln.startswith(self.prefix) for ln in s.splitlines()):
            self.done = True
            self.when()

    def flush(self) -> None:
        pass


@pytestmark_slow
def test_every_worker_saves_the_same_step_on_the_metadata_notice_as_on_sigterm(
    metadata, digits_dir, tmp_path, monkeypatch
):
    md = metadata()
    monkeypatch.setenv(metadata_notice.HOST_ENV, md.host)
    out = tmp_path / "run"
    args = tiny_args(digits_dir, out, train_steps=100000, save_every_steps=100000)
    flipped = []
    lines = Lines("[chief-0] step 10/", lambda: flipped.append(md.preempt()))
    first = launch.ProcessLauncher(2, args, stream=lines).run()
    assert set(first.worker_codes.values()) == {exits.PREEMPTED}, "".join(lines.text)
    rec = ledger(out)[0]
    assert rec["notice_reason"] == metadata_notice.REASON, rec
    assert rec["outcome"] == "preempted" and rec["steps_lost"] == 0
    assert rec["saved_step"] == rec["last_step"] >= 10
    assert (out / "checkpoints" / f"ckpt-{rec['saved_step']}.index").exists()
    asked = {p for _, p in md.requests if "wait_for_change=true" in p}
    assert asked, md.requests  # both workers waited on the key

    # The same run, preempted again by SIGTERM (the key FALSE on a new VM).
    md2 = metadata()
    monkeypatch.setenv(metadata_notice.HOST_ENV, md2.host)
    target = (rec["saved_step"] // 5 + 2) * 5  # a logged step of the resumed run
    resumed = launch.ProcessLauncher(
        2, args, stream=Lines(f"[chief-0] step {target}/", lambda: None)
    )
    chief = lambda: next(w for w in resumed.workers if w.name == "chief-0")  # noqa: E731
    resumed.stream.when = lambda: chief().proc.send_signal(signal.SIGTERM)  # the chief's node
    second = resumed.run()
    assert set(second.worker_codes.values()) == {exits.PREEMPTED}
    rec2 = ledger(out)[1]
    assert rec2["notice_reason"] == "SIGTERM" and rec2["start_step"] == rec["saved_step"]
    assert rec2["outcome"] == "preempted" and rec2["steps_lost"] == 0
    heard = rec["notice_at"] - flipped[0]
    print(
        f"\nmetadata key -> heard {heard:.2f} s -> saved and closed "
        f"{rec['ended'] - rec['notice_at']:.2f} s; SIGTERM -> saved and closed "
        f"{rec2['ended'] - rec2['notice_at']:.2f} s"
    )


@pytestmark_slow
def test_a_metadata_server_that_never_answers_delays_no_step(
    metadata, digits_dir, tmp_path, monkeypatch
):
    md = metadata(hang=True)
    monkeypatch.setenv(metadata_notice.HOST_ENV, md.host)
    out = tmp_path / "run"
    done = launch.ProcessLauncher(1, tiny_args(digits_dir, out, train_steps=40)).run()
    assert done.code == 0
    assert md.requests  # the watcher asked, and got no answer the whole run
    assert ledger(out)[0]["last_step"] == 40


@pytestmark_slow
@pytest.mark.parametrize("value", ["not a host", "127.0.0.1:abc"])
def test_a_bad_metadata_host_is_one_warning_and_training_goes_on(digits_dir, tmp_path, value):
    out = tmp_path / "run"
    args = tiny_args(digits_dir, out, train_steps=10, save_every_steps=10)
    proc, _ = run_module(
        "spottrain.trainer.task", args, extra_env={metadata_notice.HOST_ENV: value}
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    named = [ln for ln in text.splitlines() if repr(value) in ln]
    assert len(named) == 1 and " WARNING " in named[0] and "SIGTERM" in named[0], named
    assert ledger(out)[0]["last_step"] == 10
