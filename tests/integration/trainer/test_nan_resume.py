"""After a NaN stop, the advised retry resumes from a healthy checkpoint (issue 29, item 5).

Real trainer processes: a learning rate of 5.0 with float16 overflows within a few
steps; saving every step, the newest checkpoint holds weights whose loss is NaN.
"""

from __future__ import annotations

import pytest
from trainer_helpers import error_lines, ledger, run_module, tiny_args

from spottrain import exits

pytestmark = pytest.mark.slow


def _diverge(digits_dir, out):
    """Runs until the NaN stop; returns (its error line, the NaN step, its args)."""
    args = tiny_args(
        digits_dir,
        out,
        mixed_precision=True,
        learning_rate=5.0,
        train_steps=30,
        save_every_steps=1,
        log_every_steps=1,
    )
    proc, _ = run_module("spottrain.trainer.task", args)
    assert proc.returncode == exits.FATAL_NAN, proc.stdout[-3000:]
    (line,) = error_lines(proc)
    return line, int(line.split(" at step ")[1].split(";")[0]), args


def _saved(out) -> list[int]:
    return sorted(int(p.name[5:-6]) for p in (out / "checkpoints").glob("ckpt-*.index"))


def test_the_advised_retry_resumes_from_the_newest_healthy_checkpoint(digits_dir, tmp_path):
    out = tmp_path / "run"
    line, nan_step, args = _diverge(digits_dir, out)
    before = _saved(out)
    # The save before the NaN step holds the weights whose loss was NaN.
    assert before[-1] == nan_step - 1, (line, before)

    # The advice, followed: a lower learning rate, the same dir. (It used to restore
    # the newest checkpoint and stop for NaN at the same step again.)
    retry = [*args[: args.index("--learning-rate")], "--learning-rate", "0.001"]
    retry += args[args.index("--learning-rate") + 2 :]
    proc, _ = run_module("spottrain.trainer.task", retry)
    assert proc.returncode == exits.OK, (error_lines(proc), proc.stdout[-3000:])
    rec = ledger(out)[-1]
    assert rec["outcome"] == "success" and rec["start_step"] < nan_step - 1, rec
    start = rec["start_step"]
    # The NaN attempt's record counts the diverged saves it left as lost, too.
    stopped = ledger(out)[-2]
    assert stopped["outcome"] == "nan" and stopped["steps_lost"] == nan_step - start, stopped
    # The diverged checkpoints were moved aside, never deleted.
    moved = {p.name for p in (out / "checkpoints" / "quarantine").iterdir()}
    diverged = [s for s in before if s > start]
    assert {f"ckpt-{s}.index.skipped" for s in diverged} <= moved, moved

    # The NaN line had said which steps a retry can resume from, and which it would.
    assert f"a retry with changed settings resumes from step {start}" in line, line
    assert f"diverged: {', '.join(map(str, diverged))}" in line, line
    assert "--resume-from-step" in line


def test_resume_from_step_goes_back_once_and_names_a_missing_step(digits_dir, tmp_path):
    out = tmp_path / "run"
    args = tiny_args(digits_dir, out, train_steps=6, save_every_steps=2)
    proc, _ = run_module("spottrain.trainer.task", args)
    assert proc.returncode == exits.OK, proc.stdout[-3000:]
    assert _saved(out) == [2, 4, 6]

    missing, _ = run_module("spottrain.trainer.task", [*args, "--resume-from-step", "3"])
    assert missing.returncode == exits.FATAL_CONFIG
    (line,) = error_lines(missing)
    assert "--resume-from-step 3: no checkpoint of that step" in line and "2, 4, 6" in line, line

    back = [*args, "--resume-from-step", "2", "--train-steps", "8"]
    back.remove("6")
    back.remove("--train-steps")
    proc, _ = run_module("spottrain.trainer.task", back)
    assert proc.returncode == exits.OK, proc.stdout[-3000:]
    assert ledger(out)[-1]["start_step"] == 2
    assert _saved(out) == [4, 6, 8]  # 4 and 6 saved anew; the old ones in quarantine/
    # A retry of the same command (a platform's retry) resumes its own newest save.
    proc, _ = run_module("spottrain.trainer.task", back)
    assert proc.returncode == exits.OK, proc.stdout[-3000:]
    assert ledger(out)[-1]["start_step"] == 8


def test_a_loss_rising_beyond_the_bound_marks_that_save_and_the_later_ones(tmp_path):
    """Finite but diverging: the save whose next loss rose beyond RISE_FACTOR times
    the lowest before it is the first diverged one; the saves after it are too."""
    from spottrain.trainer import save_health

    history = save_health.SaveHistory(str(tmp_path), True)
    for step, next_loss in ((10, 1.0), (20, 0.8), (30, 0.8 * save_health.RISE_FACTOR + 1)):
        history.saved(step, 1.0, keep=5)
        history.step_loss(step + 1, next_loss)
    history.saved(40, 20.0, keep=5)
    history.step_loss(41, float("nan"))
    healthy, diverged = history.diverged(41, present=[10, 20, 30, 40])
    assert (healthy, diverged) == ([10, 20], [30, 40])
    # Every worker reads the same marks from the file.
    assert save_health.diverged_steps(save_health.read(str(tmp_path))) == {30, 40}


@pytest.mark.parametrize(
    "text", ['{"saves": "x"}', '{"saves": [1, {"step": "2"}], "rewound": 3}', '{"nan_step": "x"}']
)
def test_a_malformed_save_history_is_a_warning_not_a_crash_on_every_retry(
    digits_dir, tmp_path, text
):
    """saves.json only advises: ``{"saves": "x"}`` was an AttributeError (exit 1) on
    every retry; its malformed parts are now dropped with one warning."""
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "saves.json").write_text(text)
    proc, _ = run_module("spottrain.trainer.task", tiny_args(digits_dir, out, train_steps=2))
    assert proc.returncode == exits.OK, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("saves.json: malformed entries dropped") == 1, proc.stdout[-3000:]
